"""`assay serve-policy` under many clients (issue 40): memory per session, throughput and tail latency with
80 environments over the openpi protocol, and the attack figures re-measured.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_load.py [--seconds 10] [--json out.json]

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

from assay.policies import PolicyContext
from assay.policies.remote import packb, unpackb
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
    parser.add_argument("--only", default="memory,load,crowd,rogue,frames")
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
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
