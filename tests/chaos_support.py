"""Policies and process helpers for the chaos tier (importable by worker and server subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from assay.policies import PolicyContext, RandomPolicy

ASSAY = str(Path(sys.executable).with_name("assay"))
ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    """The console script does not put the working directory on sys.path: name the repo so ``tests.*`` imports."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


class PacedRandom(RandomPolicy):
    """The builtin random policy, 3 ms slower per step, so a kill can land mid-campaign."""

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        time.sleep(0.003)
        return super().act(observations)


class PacedSwingUp:
    """A deterministic function of the observation (what a served policy must be), 3 ms per call."""

    def reset(self, context: PolicyContext) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        time.sleep(0.003)
        state = np.asarray(observations["state"], dtype=np.float64)
        return np.clip(-2.0 * state[:, 1:2] - 0.5 * state[:, 2:3], -2.0, 2.0)


def episode_count(store: Path) -> int:
    try:
        with sqlite3.connect(store / "catalog.sqlite", timeout=1) as conn:
            return conn.execute("select count(*) from episodes").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def start_run(campaign: Path, store: Path, *extra: str) -> subprocess.Popen:
    command = [ASSAY, "run", str(campaign), "--store", str(store), "--json", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=_env(), cwd=ROOT)


def wait_for_episodes(process: subprocess.Popen, store: Path, target: int, timeout_s: float = 90) -> int:
    """Poll the catalog until it holds ``target`` episodes (or the run ends); return the count seen."""
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline and process.poll() is None:
        count = episode_count(store)
        if count >= target:
            break
        time.sleep(0.02)
    return count


def workers_of(pid: int) -> list[int]:
    """The spawned worker processes of a LocalExecutor (children running spawn_main, not the resource tracker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"spawn_main" in cmdline:
                found.append(int(child))
    return found


def kill_group(process: subprocess.Popen) -> None:
    """Reap whatever a test started (its whole session), however it ended."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def finish(process: subprocess.Popen, timeout_s: float = 120) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, err[-2000:]
    return json.loads(out)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    command = [ASSAY, "serve-policy", "tests.chaos_support:PacedSwingUp", "--task", "gymnasium/Pendulum-v1",
               "--port", str(port), "--max-wait-ms", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=_env(), cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.1)
    kill_group(process)
    raise AssertionError(f"policy server did not listen on {port}")
