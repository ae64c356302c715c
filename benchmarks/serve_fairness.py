"""Fair serving under attack (issue 50): attacker identities each opening thousands of fresh sessions, and slow-drip
sockets (each sends one request every few seconds, and reconnects when it loses its seat), against a default
`assay serve-policy`, while a campaign of 2 workers x 40 environments runs on it. Counts the campaign's error
episodes, checks its results against the same campaign run in process, and says what the attackers got.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_fairness.py [--identities 5] [--sessions 5000] [--drips 64]
        [--drip-every 5] [--episodes 160] [--horizon 100] [--json out.json]

The server is an `assay serve-policy random --task gymnasium/Pendulum-v1` subprocess on 127.0.0.1 with its
defaults (64 connections, 1,024 sessions, 256 per client); `random` keeps a generator per environment, so it is
served with a session per environment. Attackers and drips are threads of this process speaking raw websockets;
the campaign runs with the local executor (2 worker processes, 40 environments each). The campaign starts once
every attacker has sent 1,000 requests (the session table is then as full as they can make it); they go on
with the rest of their sessions while it runs, and hold what they got until it ends. Nothing here depends on a
particular Assay version beyond `assay serve-policy` and a `remote:` policy, so the same script measures an
older checkout (PYTHONPATH=OLD/src).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

from assay.policies.remote import packb
from assay.policies.remote.wire import CLIENT_HEADER, SEED_KEY, SESSION_KEY, STEP_KEY

REPO = Path(__file__).resolve().parents[1]
ASSAY = str(Path(sys.executable).with_name("assay"))
TASK = "gymnasium/Pendulum-v1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(*options: str) -> Iterator[int]:
    """The port of `assay serve-policy random --task TASK` with ``options``."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(REPO)])}
    process = subprocess.Popen([ASSAY, "serve-policy", "random", "--port", str(port), "--task", TASK, *options],
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
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _request(session: str | None = None) -> bytes:
    message: dict[str, Any] = {"observation/state": np.zeros(3), "prompt": "swing up"}
    if session is not None:
        message.update({SESSION_KEY: session, STEP_KEY: 0, SEED_KEY: 1})
    return packb(message)


class Attacker(threading.Thread):
    """One identity (a token) opening ``sessions`` fresh sessions on one connection, as fast as it is answered
    (reconnecting when it loses the connection), then holding them until ``leave`` is set."""

    def __init__(self, port: int, sessions: int, leave: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.sessions, self.leave = port, sessions, leave
        self.token = uuid.uuid4().hex
        self.replies: Counter[str] = Counter()
        self.sent = 0

    def run(self) -> None:
        ws = None
        while self.sent < self.sessions:
            try:
                if ws is None:
                    ws = connect(f"ws://127.0.0.1:{self.port}", additional_headers={CLIENT_HEADER: self.token})
                    ws.recv(timeout=30)
                ws.send(_request(f"{self.token[:8]}/1/{self.sent}"))
                reply = ws.recv(timeout=60)
                self.sent += 1
                self.replies[reply.split(":", 1)[0] if isinstance(reply, str) else "opened"] += 1
            except (InvalidStatus, WebSocketException, OSError, TimeoutError):
                self.replies["lost connection"] += 1
                ws = None
                time.sleep(0.5)
        self.leave.wait()
        if ws is not None:
            ws.close()


class Drip(threading.Thread):
    """A connection without a token that sends one request every ``every`` seconds, and reconnects when it loses
    its seat (or is refused one) until ``leave`` is set."""

    def __init__(self, port: int, every: float, leave: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.every, self.leave = port, every, leave
        self.answered = self.lost = self.refused = 0

    def run(self) -> None:
        ws = None
        while not self.leave.is_set():
            try:
                if ws is None:
                    ws = connect(f"ws://127.0.0.1:{self.port}")
                    ws.recv(timeout=30)
                ws.send(_request())
                ws.recv(timeout=60)
                self.answered += 1
                self.leave.wait(self.every)
            except InvalidStatus:
                self.refused += 1
                ws = None
                self.leave.wait(1.0)
            except (WebSocketException, OSError, TimeoutError):
                self.lost += 1
                ws = None
        if ws is not None:
            ws.close()


def _campaign(name: str, policy: dict[str, Any], episodes: int, horizon: int) -> dict[str, Any]:
    return {"name": name, "seed": 4, "episodes": episodes, "envs_per_worker": 40, "horizon": horizon,
            "tasks": [TASK], "policies": [{"name": "random", **policy}]}


def _run(root: Path, data: dict[str, Any]) -> tuple[list[Any], float, float]:
    """The campaign's records (local executor, 2 workers), the wall time of its preparation (the policy's
    handshake with the server) and of its run."""
    from assay.run import LocalExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    with Store(root) as store:
        started = time.monotonic()
        planned = prepare_campaign(campaign_from_data(data))
        prepared = time.monotonic()
        run_campaign(planned, store, LocalExecutor(store.data_root, 2))
        return store.catalog.episodes(campaign=data["name"]), prepared - started, time.monotonic() - prepared


def measure(identities: int, sessions: int, drips: int, drip_every: float, episodes: int,
            horizon: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        local, _, _ = _run(Path(scratch) / "in-process", _campaign("fair", {"builtin": "random"}, episodes, horizon))
        with served() as port:
            leave = threading.Event()
            attackers = [Attacker(port, sessions, leave) for _ in range(identities)]
            crowd = [Drip(port, drip_every, leave) for _ in range(drips)]
            for thread in [*attackers, *crowd]:
                thread.start()
            deadline = time.monotonic() + 600
            while any(a.sent < min(1000, sessions) for a in attackers) and time.monotonic() < deadline:
                time.sleep(0.1)
            sent_before = sum(a.sent for a in attackers)
            data = _campaign("fair", {"remote": f"ws://127.0.0.1:{port}"}, episodes, horizon)
            try:
                served_records, prepare_s, wall_s = _run(Path(scratch) / "served", data)
                failed = None
            except Exception as exc:  # noqa: BLE001 - an older checkout may not start the campaign at all
                served_records, prepare_s, wall_s, failed = [], 0.0, 0.0, f"{type(exc).__name__}: {exc}"
            sent_during = sum(a.sent for a in attackers) - sent_before
            leave.set()
            for thread in [*attackers, *crowd]:
                thread.join(timeout=60)
    errors = [r for r in served_records if r.outcome.value == "error"]
    same = sorted((r.outcome.value, r.steps, r.trajectory_hash) for r in served_records) == \
        sorted((r.outcome.value, r.steps, r.trajectory_hash) for r in local)
    replies: Counter[str] = Counter()
    for attacker in attackers:
        replies.update(attacker.replies)
    return {
        "identities": identities, "sessions_each": sessions, "drips": drips, "drip_every_s": drip_every,
        "campaign": f"2 workers x 40 environments, {episodes} episodes of {horizon} steps",
        "campaign_failed": failed, "episodes": len(served_records), "error_episodes": len(errors),
        "error_reasons": Counter(r.reason.split(":", 2)[-1].strip()[:120] for r in errors).most_common(3),
        "results_equal_in_process": same, "prepare_s": round(prepare_s, 1), "campaign_wall_s": round(wall_s, 1),
        "attacker_requests_before_campaign": sent_before, "attacker_requests_during_campaign": sent_during,
        "attacker_replies": dict(replies),
        "drip_requests_answered": sum(d.answered for d in crowd), "drip_seats_lost": sum(d.lost for d in crowd),
        "drip_refused_503": sum(d.refused for d in crowd),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--identities", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=5000)
    parser.add_argument("--drips", type=int, default=64)
    parser.add_argument("--drip-every", type=float, default=5.0)
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    figures = measure(arguments.identities, arguments.sessions, arguments.drips, arguments.drip_every,
                      arguments.episodes, arguments.horizon)
    print(json.dumps(figures, indent=2))
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
