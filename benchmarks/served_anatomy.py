"""Where a served Meta-World step's time goes: the codec, a step after a wait, and a batch's round trip.

    MUJOCO_GL=osmesa PYTHONPATH=src python benchmarks/served_anatomy.py [--steps 300] [--rounds 5]

1. **codec**: CPU µs to encode and decode a lockstep batch's request and answer (``steps`` of 4 environments:
   msgpack, openpi's array form, the answer in columns), and to frame both as websocket messages through the
   channel (``served/transport.py``) over a Unix socket pair in one thread, beside a bare 4-byte length prefix;
2. **a step after a wait**: one in-process environment stepped back to back, and with a 300 µs sleep before each
   step (as a served simulator waits for its client's next action between steps), median µs of ``step`` alone;
3. **one round trip per environment or per batch**: two sessions of one connection to ``assay serve-sim``
   (started here, one server process), stepped as two ``step`` requests or one ``steps`` request per lockstep
   step; wall µs per environment step, and CPU µs per environment step of this process and of the server's.

Medians over ``--rounds`` alternating rounds. Figures and their reading: docs/PERFORMANCE.md, "Served simulators".
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from served_cost import _cpu_of_children, _server  # this directory's: run as a script

TASK = "metaworld/pick-place@1"


def codec(repeat: int = 5000) -> dict[str, float]:
    """CPU µs of each part of a lockstep round trip of 4 environments (``steps``), hot: the codec with no socket, then
    the channel's framing over a Unix socket pair in this one thread (both sides' send and read, system calls
    included) beside the least framing there is (a 4-byte length before each message) on the same pair."""
    import socket
    import struct

    from websockets.client import ClientProtocol
    from websockets.server import ServerProtocol
    from websockets.uri import parse_uri

    from assay.served.protocol import decode_steps, encode_steps, packb, unpackb
    from assay.served.transport import Channel
    from assay.sim.protocol import Transition

    client, server = ClientProtocol(parse_uri("ws://localhost:1")), ServerProtocol()
    client.send_request(client.connect())
    server.receive_data(b"".join(client.data_to_send()))
    server.send_response(server.accept(server.events_received()[0]))
    client.receive_data(b"".join(server.data_to_send()))
    client.events_received()
    actions = np.zeros((4, 4))
    steps = [Transition({"state": np.zeros(39)}, 1.0, False, False, False, {f"event{i}": 0.5 for i in range(19)})
             for _ in range(4)]  # Meta-World's 19 info fields

    def request() -> bytes:
        return packb({"op": "steps", "sessions": [1, 2, 3, 4], "skip_frames": [False] * 4, "actions": actions})

    asked, answered = request(), packb(encode_steps(list(steps)))
    mine, theirs = socket.socketpair()
    near, far = Channel(mine, client, 1 << 24), Channel(theirs, server, 1 << 24)
    raw_near, raw_far = socket.socketpair()

    def framed() -> None:
        near.send(asked)
        far.recv()
        far.send(answered)
        near.recv()

    def least(sock: socket.socket, message: bytes, other: socket.socket) -> None:
        sock.sendall(struct.pack("!I", len(message)) + message)
        size = struct.unpack("!I", other.recv(4))[0]
        while size:
            size -= len(other.recv(size))

    def length_prefixed() -> None:
        least(raw_near, asked, raw_far)
        least(raw_far, answered, raw_near)

    parts = {"encode the request (4 actions, one array)": request,
             "decode the request": lambda: unpackb(asked),
             "encode the answer (columns)": lambda: packb(encode_steps(list(steps))),
             "decode the answer into 4 transitions": lambda: decode_steps(unpackb(answered), 4, "here"),
             "the channel's framing, both messages, both sides, with their system calls": framed,
             "a 4-byte length instead, the same messages and socket pair": length_prefixed}
    out = {}
    for name, part in parts.items():
        started = time.process_time()
        for _ in range(repeat):
            part()
        out[name] = (time.process_time() - started) / repeat * 1e6
    for sock in (raw_near, raw_far):
        sock.close()
    near.close()
    far.close()
    return out


def after_a_wait(steps: int, rounds: int, wait_us: float = 300.0) -> tuple[float, float]:
    """Median µs of an in-process ``step`` stepped back to back, and after a ``wait_us`` sleep before each."""
    from assay.sim import default_registry, make_env

    task = default_registry().get(TASK)
    env = make_env(task)
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, (steps, task.action.dim))
    times: dict[bool, list[float]] = {False: [], True: []}
    for index in range(rounds):
        for wait in (False, True):
            env.reset(index)
            for action in actions:
                if wait:
                    time.sleep(wait_us / 1e6)
                started = time.perf_counter()
                env.step(action)
                times[wait].append(time.perf_counter() - started)
    env.close()
    return statistics.median(times[False]) * 1e6, statistics.median(times[True]) * 1e6


def each_or_batch(steps: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Per environment step: wall µs, this process's CPU µs, the server's CPU µs, for two sessions stepped by two
    ``step`` requests or one ``steps`` request."""
    from assay.served import ServedEnv, close_links
    from assay.sim import default_registry, step_together

    process, url = _server("metaworld", 1)
    task = default_registry().get(TASK)
    try:
        envs = [ServedEnv(task, url), ServedEnv(task, url)]
        actions = np.random.default_rng(0).uniform(-1.0, 1.0, (steps, task.action.dim))
        found: dict[str, list[tuple[float, float, float]]] = {"step per environment": [], "steps per batch": []}
        for index in range(rounds):
            for way in found:
                for seed, env in enumerate(envs):
                    env.reset(index * 2 + seed)
                cpu, served, started = time.process_time(), _cpu_of_children(process.pid), time.perf_counter()
                for action in actions:
                    if way == "steps per batch":
                        step_together(envs, [action, action])
                    else:
                        for env in envs:
                            env.step(action)
                n = 2 * steps
                found[way].append(((time.perf_counter() - started) / n * 1e6, (time.process_time() - cpu) / n * 1e6,
                                   (_cpu_of_children(process.pid) - served) / n * 1e6))
        for env in envs:
            env.close()
        close_links()
    finally:
        process.kill()
        process.wait()
    return {way: tuple(statistics.median(r[i] for r in runs) for i in range(3)) for way, runs in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps a round (Meta-World's horizon is 500)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    print(f"load average {os.getloadavg()[0]:.1f}\n\n| a round trip of 4 environments, hot | CPU µs |\n|---|---:|")
    for name, us in codec().items():
        print(f"| {name} | {us:.1f} |")
    hot, waited = after_a_wait(args.steps, args.rounds)
    print(f"\nin-process step, back to back: {hot:.0f} µs; after a 300 µs sleep: {waited:.0f} µs "
          f"({waited / hot:.2f}×)\n\n| two sessions of one connection | wall µs per env step | client CPU µs | "
          "server CPU µs |\n|---|---:|---:|---:|")
    for way, (wall, mine, theirs) in each_or_batch(args.steps, args.rounds).items():
        print(f"| {way} | {wall:.0f} | {mine:.0f} | {theirs:.0f} |")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
