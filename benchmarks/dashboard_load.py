"""The dashboard under concurrent readers while a campaign writes into the same store.

    .venv/bin/python benchmarks/dashboard_load.py [--clients 50] [--seconds 30]

Builds a store with a small campaign, starts `assay serve` on loopback, starts a
second campaign writing into the store (`assay run`, local executor), and has
``--clients`` threads read the JSON API (campaigns, one campaign, its leaderboard,
its episodes, one episode) for ``--seconds``. Prints requests/s, p50/p99 latency
and errors (any non-200 or exception). Bounded in count and time; loopback only.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

CAMPAIGN = "name: {name}\nseed: {seed}\nepisodes: {episodes}\nhorizon: 60\nenvs_per_worker: 2\n" \
           "tasks: [metaworld/reach@1]\npolicies: [expert, random]\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assay(*args: str, background: bool = False) -> subprocess.Popen | None:
    command = [sys.executable, "-m", "assay.cli.app", *args]
    if background:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return None


def wait_ready(url: str, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            urllib.request.urlopen(url + "/api/campaigns", timeout=5).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def load(url: str, paths: list[str], clients: int, seconds: float) -> dict[str, float]:
    """``clients`` threads GET ``paths`` round-robin for ``seconds``; latencies and errors."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def reader(offset: int) -> None:
        index = offset
        while time.monotonic() < stop:
            path = paths[index % len(paths)]
            index += 1
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(url + path, timeout=30) as response:
                    response.read()
                    ok = response.status == 200
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the load
                ok, detail = False, f"{path}: {exc}"
            else:
                detail = f"{path}: status"
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if not ok:
                    errors.append(detail)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    array = np.asarray(latencies) * 1000
    return {"requests": len(latencies), "requests_per_s": len(latencies) / seconds, "p50_ms": float(np.percentile(array, 50)),
            "p99_ms": float(np.percentile(array, 99)), "errors": len(errors), "first_errors": errors[:3]}


def run(clients: int, seconds: float, writer_episodes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = root / "store"
        (root / "base.yaml").write_text(CAMPAIGN.format(name="base", seed=0, episodes=2))
        (root / "writer.yaml").write_text(CAMPAIGN.format(name="writer", seed=1, episodes=writer_episodes))
        assay("run", str(root / "base.yaml"), "--store", str(store), "--executor", "inline")
        key = json.loads(subprocess.run([sys.executable, "-m", "assay.cli.app", "episodes", "ls", "--store", str(store),
                                         "--json", "--limit", "1"], check=True, capture_output=True, text=True).stdout
                         )["episodes"][0]["key"]
        port = free_port()
        server = assay("serve", "--store", str(store), "--port", str(port), background=True)
        writer = None
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url)
            writer = assay("run", str(root / "writer.yaml"), "--store", str(store), "--workers", "1", background=True)
            paths = ["/api/campaigns", "/api/campaigns/base", "/api/campaigns/base/leaderboard",
                     "/api/campaigns/base/episodes", f"/api/episodes/{key}"]
            result = load(url, paths, clients, seconds)
            result["writer_running_at_end"] = writer.poll() is None
            return result
        finally:
            for process in (writer, server):
                if process is not None:
                    process.terminate()
                    process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--writer-episodes", type=int, default=40)
    args = parser.parse_args()
    print(json.dumps(run(args.clients, args.seconds, args.writer_episodes), indent=2))


if __name__ == "__main__":
    main()
