"""`assay serve-policy` under many clients (issue 40): memory per session, throughput and tail latency with
80 environments over the openpi protocol, clients x sessions through Assay's own client, and the attack
figures re-measured (one rogue's 5,000 sessions; rogues from several tokenless connections holding every
session against a victim's new episodes).

    PYTHONPATH=src .venv/bin/python benchmarks/serve_load.py [--seconds 10] [--json out.json]
        [--only memory,load,crowd,rogue,frames,grid,owners]

Every server is an `assay serve-policy` subprocess on 127.0.0.1 (a random free port); resident memory is
read from its /proc/PID/status (VmRSS). Clients are threads of this process: the real openpi-client
(`WebsocketClientPolicy`, one connection = one session each) for the throughput figures, raw websockets for
the attacks. The machine is shared, so read ratios and bounds, not absolute speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

from assay.errors import RemotePolicyError
from assay.policies import PolicyContext
from assay.policies.remote import RemotePolicy, packb, unpackb
from assay.policies.remote.wire import CLIENT_HEADER, SEED_KEY, SESSION_KEY, STEP_KEY

REPO = Path(__file__).resolve().parents[1]
ASSAY = str(Path(sys.executable).with_name("assay"))
TASK = "metaworld/reach@1"
WEIGHTS_MB = 20


class HeavyStateful:
    """A stateful policy holding ``WEIGHTS_MB`` of weights per instance (as a 20 MB network would)."""

    version = "1"

    def __init__(self) -> None:
        self.weights = np.ones((WEIGHTS_MB << 20) // 8)  # touched: resident
        self.steps: list[int] = []

    def reset(self, context: PolicyContext) -> None:
        self.steps = [0] * context.batch_size

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        for slot in observations["env_ids"]:
            self.steps[slot] += 1
        return np.zeros((len(observations["state"]), 4))


class HeavyStateless(HeavyStateful):
    """The same weights, declared stateless: one shared instance."""

    stateless = True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@contextlib.contextmanager
def served(policy: str, *options: str) -> Iterator[tuple[int, int]]:
    """(port, pid) of `assay serve-policy POLICY` with ``options``."""
    port = free_port()
    path = os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    process = subprocess.Popen([ASSAY, "serve-policy", policy, "--port", str(port), "--task", TASK, *options],
                               env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {process.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.2)
        time.sleep(0.5)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def request(session: str | None = None, step: int = 0, extra: bytes | None = None) -> bytes:
    message: dict[str, Any] = {"observation/state": np.zeros(39), "prompt": "reach"}
    if session is not None:
        message.update({SESSION_KEY: session, STEP_KEY: step, SEED_KEY: 1})
    if extra is not None:
        message["padding"] = np.frombuffer(extra, np.uint8)
    return packb(message)


def memory_per_session(sessions: int) -> dict[str, Any]:
    """RSS before and after ``sessions`` live sessions, for the stateful and the stateless heavy policy."""
    out: dict[str, Any] = {}
    for name in ("HeavyStateful", "HeavyStateless"):
        with served(f"benchmarks.serve_load:{name}", "--max-sessions", str(sessions + 8)) as (port, pid):
            before = rss_mib(pid)
            token = uuid.uuid4().hex
            with connect(f"ws://127.0.0.1:{port}", additional_headers={CLIENT_HEADER: token}) as ws:
                ws.recv()
                for k in range(sessions):
                    ws.send(request(f"bench/1/{k}"))
                    ws.recv(timeout=60)
                time.sleep(0.5)
                held = rss_mib(pid)
            time.sleep(12)  # the client left: its sessions end after the grace period (10 s)
            after = rss_mib(pid)
        out[name] = {"sessions": sessions, "rss_before_mib": round(before, 1), "rss_with_sessions_mib": round(held, 1),
                     "rss_after_client_left_mib": round(after, 1),
                     "mib_per_session": round((held - before) / sessions, 2)}
    return out


def openpi_load(envs: int, seconds: float, policy: str, *options: str) -> dict[str, Any]:
    """``envs`` real openpi clients (one thread, one connection each) asking as fast as answered."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    with served(policy, *options) as (port, pid):
        clients = [WebsocketClientPolicy("127.0.0.1", port) for _ in range(envs)]
        stop = time.monotonic() + seconds
        start = threading.Barrier(envs)

        def loop(client: Any) -> None:
            observation = {"observation/state": np.zeros(39, np.float32), "prompt": "reach"}
            start.wait()
            mine = []
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    client.infer(observation)
                except (RuntimeError, OSError, WebSocketException):  # counted
                    with lock:
                        errors[0] += 1
                    return
                mine.append(time.perf_counter() - t0)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=loop, args=(c,)) for c in clients]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - began
        rss = rss_mib(pid)
        for client in clients:
            client._ws.close()
    latencies.sort()
    return {"envs": envs, "policy": policy, "options": list(options), "requests": len(latencies),
            "requests_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 2) if latencies else None,
            "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2) if latencies else None,
            "mean_ms": round(1000 * statistics.fmean(latencies), 2) if latencies else None,
            "errors": errors[0], "server_rss_mib": round(rss, 1)}


def idle_crowd(crowd: int) -> dict[str, Any]:
    """``crowd`` idle sockets fill a 64-connection server; how a newcomer fares, and what happens to the crowd."""
    with served("benchmarks.serve_load:HeavyStateless") as (port, _), contextlib.ExitStack() as stack:
        url = f"ws://127.0.0.1:{port}"
        held = []
        for _ in range(crowd):
            ws = stack.enter_context(connect(url))
            ws.recv()
            held.append(ws)
        refused_at_once = 0
        try:
            with connect(url) as ws:
                ws.recv()
        except InvalidStatus:
            refused_at_once = 1
        time.sleep(10.5)  # idle long enough to give way (evict_idle_after_s = 10)
        t0 = time.perf_counter()
        with connect(url) as ws:
            ws.recv()
            ws.send(request())
            answered = isinstance(unpackb(ws.recv(timeout=30)), dict)
        seated_s = time.perf_counter() - t0
    return {"crowd": crowd, "newcomer_refused_while_crowd_fresh": bool(refused_at_once),
            "newcomer_answered_after_10s": answered, "newcomer_seated_in_ms": round(1000 * seated_s, 1)}


def rogue_sessions(count: int) -> dict[str, Any]:
    """A rogue opens ``count`` fresh sessions; a victim's session goes on."""
    with served("degraded-expert", "--params", '{"action_noise": 0.1}') as (port, pid):
        url = f"ws://127.0.0.1:{port}"
        victim = uuid.uuid4().hex
        with connect(url, additional_headers={CLIENT_HEADER: victim}) as vws:
            vws.recv()
            vws.send(request("v/1/0", 0))
            vws.recv()
            codes: dict[str, int] = {}
            before = rss_mib(pid)
            with connect(url, additional_headers={CLIENT_HEADER: uuid.uuid4().hex}) as rws:
                rws.recv()
                for k in range(count):
                    rws.send(request(f"r/1/{k}"))
                    reply = rws.recv(timeout=60)
                    code = reply.split(":", 1)[0] if isinstance(reply, str) else "ok"
                    codes[code] = codes.get(code, 0) + 1
            peak = rss_mib(pid)
            vws.send(request("v/1/0", 1))
            victim_ok = isinstance(unpackb(vws.recv(timeout=30)), dict)
    return {"fresh_sessions": count, "replies": codes, "victim_next_step_answered": victim_ok,
            "rss_before_mib": round(before, 1), "rss_after_mib": round(peak, 1)}


def _client_rounds(url: str, seeds: tuple[int, ...], rounds: int, latencies: list[float],
                   policy: RemotePolicy | None = None) -> RemotePolicy:
    """An Assay client (``RemotePolicy``; ``policy`` if given) starts an episode of ``len(seeds)`` environments
    and asks ``rounds`` times; each round's latency (all its rows answered) is appended to ``latencies``.
    Returned open: its sessions stay live."""
    from assay.sim import default_registry

    policy = policy or RemotePolicy(url, timeout_s=120)
    policy.reset(PolicyContext(default_registry().get(TASK), seeds, ("reach",) * len(seeds)))
    batch = {"state": np.zeros((len(seeds), 39)), "instruction": ["reach"] * len(seeds),
             "env_ids": np.arange(len(seeds))}
    for _ in range(rounds):
        t0 = time.perf_counter()
        policy.act(batch)
        latencies.append(time.perf_counter() - t0)
    return policy


def _clients_at_once(port: int, clients: int, envs: int, rounds: int) -> tuple[list[float], list[RemotePolicy], float]:
    """``clients`` Assay clients at once (a thread and a token each, a connection per environment), each opening
    its sessions (a first round, which builds their instances) and then asking ``rounds`` rounds: the later
    rounds' latencies, the clients (still open), and the seconds all clients took for their later rounds."""
    latencies: list[float] = []
    opened: list[RemotePolicy] = []
    lock = threading.Lock()
    first_rounds = threading.Barrier(clients + 1)
    later_rounds = threading.Barrier(clients + 1)

    def one(k: int) -> None:
        seeds, mine = tuple(range(k * envs, (k + 1) * envs)), []
        policy = _client_rounds(f"ws://127.0.0.1:{port}", seeds, 1, [])
        first_rounds.wait(timeout=600)
        later_rounds.wait(timeout=600)
        batch = {"state": np.zeros((envs, 39)), "instruction": ["reach"] * envs, "env_ids": np.arange(envs)}
        for _ in range(rounds):
            t0 = time.perf_counter()
            policy.act(batch)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)
            opened.append(policy)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    first_rounds.wait(timeout=600)  # every session open: the later rounds start together
    later_rounds.wait(timeout=600)
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return sorted(latencies), opened, time.perf_counter() - began


def clients_by_sessions(shapes: list[tuple[int, int]], rounds: int = 20) -> list[dict[str, Any]]:
    """For each (clients, environments each) and each heavy policy, a fresh server and :func:`_clients_at_once`:
    RSS with every session live and per session; requests/s and round latency once the sessions are open."""
    out = []
    for name in ("HeavyStateful", "HeavyStateless"):
        for clients, envs in shapes:
            sessions = clients * envs
            options = ("--max-sessions", str(sessions + 8), "--max-connections", str(sessions + 8))
            with served(f"benchmarks.serve_load:{name}", *options) as (port, pid):
                before = rss_mib(pid)
                latencies, opened, elapsed = _clients_at_once(port, clients, envs, rounds)
                held = rss_mib(pid)
                for policy in opened:
                    policy.close()
            out.append({"policy": name, "clients": clients, "envs_per_client": envs, "sessions": sessions,
                        "rss_before_mib": round(before, 1), "rss_with_sessions_mib": round(held, 1),
                        "mib_per_session": round((held - before) / sessions, 2),
                        "requests_per_s": round(sessions * rounds / elapsed, 1),
                        "round_p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
                        "round_p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1)})
            print(json.dumps(out[-1]), flush=True)
    return out


def _fill(port: int, sessions: int, holders: list[Any]) -> int:
    """One tokenless connection (its own owner) opens ``sessions`` fresh sessions and stays open; returns how
    many were refused."""
    ws = connect(f"ws://127.0.0.1:{port}")
    ws.recv()
    holders.append(ws)
    refused = 0
    for k in range(sessions):
        ws.send(request(f"anon{len(holders)}/1/{k}"))
        refused += isinstance(ws.recv(timeout=60), str)
    return refused


def rogue_owners(connections: int, idle_s: float, victim_envs: int = 8) -> dict[str, Any]:
    """``connections`` tokenless connections each open their quota of sessions (256) and go quiet, holding
    every session of a default server (1024) but with a session idle window of ``idle_s`` (``--session-idle-s``).
    A new victim client's episode is tried at once (refused, after its retries), then again every 2 s as its
    next episode until answered: when the rogues' sessions have idled past the window."""
    with served("degraded-expert", "--params", '{"action_noise": 0.1}', "--session-idle-s", f"{idle_s:g}") \
            as (port, pid), contextlib.ExitStack() as stack:
        url = f"ws://127.0.0.1:{port}"
        before = rss_mib(pid)
        holders: list[Any] = []
        stack.callback(lambda: [ws.close() for ws in holders])
        filled_at = time.monotonic()
        refused = sum(_fill(port, 256, holders) for _ in range(connections))
        filled_s = time.monotonic() - filled_at
        held = rss_mib(pid)
        victim = RemotePolicy(url, timeout_s=120)
        stack.callback(victim.close)
        tries: list[str] = []
        while time.monotonic() < filled_at + filled_s + 3 * idle_s:
            t0 = time.monotonic()
            try:
                _client_rounds(url, tuple(range(victim_envs)), 3, [], victim)
                tries.append(f"answered {time.monotonic() - filled_at:.0f} s after the fill began")
                break
            except RemotePolicyError as exc:
                tries.append(f"{exc.code} after {time.monotonic() - t0:.1f} s of retries")
                time.sleep(2.0)
        after = rss_mib(pid)
    return {"rogue_connections": connections, "rogue_sessions_refused": refused, "fill_s": round(filled_s, 1),
            "session_idle_s": idle_s, "victim_envs": victim_envs, "victim_episodes": tries,
            "rss_before_mib": round(before, 1), "rss_rogues_mib": round(held, 1),
            "rss_after_expiry_mib": round(after, 1)}


def large_frames(clients: int, mib: int) -> dict[str, Any]:
    """``clients`` concurrent frames of ``mib`` MiB against the default 256 MiB budget."""
    frame = request(extra=bytes(mib << 20))
    with served("benchmarks.serve_load:HeavyStateless") as (port, pid):
        with connect(f"ws://127.0.0.1:{port}", max_size=None) as ws:  # warm
            ws.recv()
            ws.send(frame)
            ws.recv(timeout=60)
        time.sleep(1.0)
        before = rss_mib(pid)
        samples: list[float] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                samples.append(rss_mib(pid))
                time.sleep(0.01)

        answered = [0]
        barrier = threading.Barrier(clients)

        def one() -> None:
            with connect(f"ws://127.0.0.1:{port}", max_size=None, open_timeout=60) as ws:
                ws.recv()
                barrier.wait()
                ws.send(frame)
                if isinstance(unpackb(ws.recv(timeout=300)), dict):
                    answered[0] += 1

        sampler = threading.Thread(target=sample)
        sampler.start()
        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        sampler.join()
        time.sleep(2.0)
        after = rss_mib(pid)
    return {"clients": clients, "frame_mib": mib, "answered": answered[0], "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(max(samples), 1), "rss_after_mib": round(after, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--only", default="memory,load,crowd,rogue,frames,grid,owners")
    arguments = parser.parse_args()
    parts = set(arguments.only.split(","))
    figures: dict[str, Any] = {}
    if "memory" in parts:
        figures["memory_per_session"] = memory_per_session(40)
        print(json.dumps(figures["memory_per_session"]), flush=True)
    if "load" in parts:
        figures["openpi_80_envs"] = [
            openpi_load(80, arguments.seconds, "mlp", "--max-connections", "128"),
            openpi_load(80, arguments.seconds, "degraded-expert", "--max-connections", "128"),
        ]
        print(json.dumps(figures["openpi_80_envs"]), flush=True)
    if "crowd" in parts:
        figures["idle_crowd"] = idle_crowd(64)
        print(json.dumps(figures["idle_crowd"]), flush=True)
    if "rogue" in parts:
        figures["rogue_sessions"] = rogue_sessions(5000)
        print(json.dumps(figures["rogue_sessions"]), flush=True)
    if "frames" in parts:
        figures["large_frames"] = large_frames(60, 15)
        print(json.dumps(figures["large_frames"]), flush=True)
    if "grid" in parts:
        figures["clients_by_sessions"] = clients_by_sessions([(1, 40), (4, 20), (8, 10)])
    if "owners" in parts:
        figures["rogue_owners"] = rogue_owners(5, idle_s=30.0)
        print(json.dumps(figures["rogue_owners"]), flush=True)
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
