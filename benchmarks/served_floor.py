"""The floor under a served simulator's cost on this host: the same split with no Assay in it.

    python benchmarks/served_floor.py [--episodes 160] [--rounds 3] [--envs 2]

A control for issue 52's "served ≤ 10% slower" target. Two hand-written loops run the same Meta-World
pick-place expert episodes (environments built as Assay builds them, with its exact ``touching_object`` and hand
reset, as the like-for-like loops of ``eval_throughput.py`` step), 2 client processes with ``--envs`` environments
each, lockstep:

* **in process**: each client steps its own environments;
* **served**: each client has a server process that builds its environments when the client connects; one
  request a lockstep step (every environment's action), one answer (every environment's observation, reward,
  success), pickled and length-prefixed over a localhost TCP socket: the least a served simulator can do.

Each round runs both, alternating; the clients' spawn and every environment build are inside the timing, and the
server processes are started (and have imported) before the first round, as ``served_cost.py`` starts
``assay serve-sim`` once; the best round of each counts. The ratio served / in process of these loops is what
splitting simulation from the loop costs on this host whoever writes it; ``served_cost.py`` measures Assay's.
Prints a Markdown table; writes nothing.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import socket
import struct
import time
import warnings
from typing import Any

import numpy as np

HORIZON = 500
TASK = "pick-place-v3"


def _envs(count: int) -> list[Any]:
    """``count`` pick-place environments built as Assay builds them (``sawyer_env``: MT1's set-up without its 50
    sampled goals, Assay's exact ``touching_object`` and hand reset), so the floor's builds cost what Assay's do:
    ``gym.make("Meta-World/MT1")`` took ~0.5 s more a build, which landed in both of the floor's loops alike and
    pulled its ratio toward 1."""
    from assay.sim.metaworld_env import sawyer_env

    return [sawyer_env(TASK) for _ in range(count)]


def _expert() -> Any:
    from metaworld.policies import ENV_POLICY_MAP

    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
    return ENV_POLICY_MAP[TASK]()


class _Local:
    """The environments in this process."""

    def __init__(self, count: int) -> None:
        self.envs = _envs(count)

    def reset(self, seeds: list[int]) -> list[np.ndarray]:
        from assay.sim.metaworld_env import seeded_reset

        return [seeded_reset(env, seed) for env, seed in zip(self.envs, seeds, strict=False)]

    def step(self, actions: list[np.ndarray | None]) -> list[tuple[np.ndarray, bool] | None]:
        out: list[tuple[np.ndarray, bool] | None] = []
        for env, action in zip(self.envs, actions, strict=True):
            if action is None:
                out.append(None)
                continue
            obs, _, terminated, truncated, info = env.step(action)
            out.append((obs, bool(info["success"] or terminated or truncated)))
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _send(sock: socket.socket, payload: Any) -> None:
    data = pickle.dumps(payload, protocol=5)
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    header = _exactly(sock, 4)
    return pickle.loads(_exactly(sock, struct.unpack("!I", header)[0]))


def _exactly(sock: socket.socket, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = sock.recv(left)
        if not part:
            raise ConnectionError("the peer closed the connection")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _serve(port_queue: Any, count: int) -> None:
    """A server process: for each connection in turn, ``count`` environments built for it, one request at a time."""
    import metaworld  # noqa: F401 - imported before the first client, as a running server has

    import assay.sim.metaworld_env  # noqa: F401

    listener = socket.create_server(("127.0.0.1", 0))
    port_queue.put(listener.getsockname()[1])
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        local = _Local(count)
        try:
            while True:
                kind, payload = _recv(conn)
                if kind == "close":
                    break
                _send(conn, local.reset(payload) if kind == "reset" else local.step(payload))
        finally:
            local.close()
            conn.close()


def start_servers(clients: int, count: int) -> tuple[list[Any], list[int]]:
    """``clients`` server processes, each for one client at a time; (the processes, their ports)."""
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    servers = [ctx.Process(target=_serve, args=(ports, count), daemon=True) for _ in range(clients)]
    for server in servers:
        server.start()
    return servers, [ports.get(timeout=120) for _ in servers]


class _Remote:
    """The environments in a server process of their own."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reset(self, seeds: list[int]) -> list[np.ndarray]:
        _send(self.sock, ("reset", seeds))
        return list(_recv(self.sock))

    def step(self, actions: list[np.ndarray | None]) -> list[tuple[np.ndarray, bool] | None]:
        _send(self.sock, ("step", actions))
        return list(_recv(self.sock))

    def close(self) -> None:
        _send(self.sock, ("close", None))
        self.sock.close()


def _client(port: int | None, seeds: list[int], count: int, results: Any) -> None:
    """One client process: its episodes, ``count`` at a time in lockstep, on the server at ``port`` (None: in this
    process); puts (steps, CPU seconds)."""
    envs = _Remote(port) if port is not None else _Local(count)
    policy = _expert()
    steps = 0
    for start in range(0, len(seeds), count):
        group = seeds[start:start + count]
        observations: list[Any] = envs.reset(group)
        live = [True] * len(group) + [False] * (count - len(group))
        for _ in range(HORIZON):
            actions = [policy.get_action(obs) if on else None for obs, on in zip(observations + [None] * (
                count - len(observations)), live, strict=True)]
            answers = envs.step(actions)
            for i, answer in enumerate(answers):
                if answer is None:
                    continue
                observations[i], done = answer
                steps += 1
                live[i] = live[i] and not done
            if not any(live):
                break
    envs.close()
    results.put((steps, time.process_time()))


def run(ports: list[int] | None, seeds: list[int], count: int, clients: int = 2) -> tuple[int, float]:
    """Every seed's episode on ``clients`` client processes, served by the servers at ``ports`` (None: in
    process); (steps, seconds)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    shares = [seeds[i::clients] for i in range(clients)]
    started = time.perf_counter()
    procs = [ctx.Process(target=_client, args=(ports[i] if ports else None, share, count, results))
             for i, share in enumerate(shares)]
    for proc in procs:
        proc.start()
    steps = sum(results.get(timeout=600)[0] for _ in procs)
    for proc in procs:
        proc.join()
    return steps, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envs", type=int, default=2, help="environments a client steps in lockstep")
    args = parser.parse_args()
    seeds = list(range(1000, 1000 + args.episodes))
    best: dict[str, tuple[int, float]] = {}
    servers, ports = start_servers(2, args.envs)
    time.sleep(2.0)  # the servers' imports done
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        for name, served in (("in process", None), ("served", ports)):
            steps, seconds = run(served, seeds, args.envs)
            print(f"round {round_ + 1} {name:10s} {steps} steps {seconds:6.2f} s {steps / seconds:7.0f} steps/s",
                  flush=True)
            if name not in best or seconds < best[name][1]:
                best[name] = (steps, seconds)
    for server in servers:
        server.terminate()
    rate = {name: steps / seconds for name, (steps, seconds) in best.items()}
    print(f"\n`python benchmarks/served_floor.py --episodes {args.episodes} --rounds {args.rounds} --envs {args.envs}`"
          f" (2 clients, {args.envs} environments each; load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; best round of each)\n")
    print("| loop | steps | seconds | steps/s |\n|---|---:|---:|---:|")
    for name, (steps, seconds) in best.items():
        print(f"| hand-written, {name} | {steps} | {seconds:.2f} | {rate[name]:.0f} |")
    print(f"\nserved / in process, with no Assay in either: **{rate['served'] / rate['in process']:.3f}**")


if __name__ == "__main__":
    main()
