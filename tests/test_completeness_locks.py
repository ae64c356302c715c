"""Commands that run episodes outside ``assay run`` hold the store's run lock as it does (issue 36).

``regress run``, ``boundary`` and ``failures resample`` write step files and catalog rows; beside a running
campaign they used to write at once. Another process holds the lock here; the command must say that it waits
and write nothing until the holder lets go, then finish. Ordering, not timing: the holder lets go only after
the test has seen the command waiting and checked that nothing was written (a watchdog kills a hang).
Gymnasium's Pendulum (numpy only), so the fast tier runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store

ROOT = Path(__file__).resolve().parent.parent
HOLD = ("import sys\nfrom assay.store.locking import run_lock\nwith run_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n    sys.stdin.readline()\n")
HANG_GUARD_S = 300  # only a hang reaches it; nothing here is timed


class Still:
    """No torque on Pendulum: another policy than the campaign's, so its reruns are new episodes."""

    def reset(self, context):
        self.slots = context.batch_size

    def act(self, observations):
        return np.zeros((self.slots, 1))


def _python(started: list[subprocess.Popen], *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT)}
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started.append(process)
    return process


@contextmanager
def _processes() -> Iterator[list[subprocess.Popen]]:
    """The processes a test starts: killed by a watchdog if the test hangs, and reaped (pipes closed) after it."""
    started: list[subprocess.Popen] = []
    watchdog = threading.Timer(HANG_GUARD_S, lambda: [p.kill() for p in started])
    watchdog.start()
    try:
        yield started
    finally:
        watchdog.cancel()
        for process in started:
            if process.poll() is None:
                process.kill()
            process.communicate()


def _hold(started: list[subprocess.Popen], store: Path) -> subprocess.Popen:
    """Another process holding ``store``'s run lock until a line is written to its stdin."""
    holder = _python(started, "-c", HOLD, str(store))
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def _waiting(command: subprocess.Popen) -> str:
    """The command's line saying it waits for the lock (read up to it; EOF first is a failure)."""
    assert command.stderr is not None
    seen = []
    for line in command.stderr:
        seen.append(line)
        if "waiting for it to finish" in line:
            return line.strip()
    raise AssertionError(f"the command never waited for the lock: {''.join(seen)}")


def _release(holder: subprocess.Popen, command: subprocess.Popen) -> tuple[int, str, str]:
    holder.communicate("\n")
    out, err = command.communicate()
    return command.returncode, out, err


def _episodes(root: Path) -> int:
    with Store(root, create=False) as store:
        return len(store.catalog.episodes())


def test_boundary_waits_for_a_run_holding_the_store_and_creates_nothing_meanwhile(tmp_path):
    store = tmp_path / "store"
    with _processes() as started:
        holder = _hold(started, store)
        command = _python(started, "-m", "assay.cli.app", "boundary", "--task", "gymnasium/Pendulum-v1",
                          "--factor", "action.noise", "--safe", "0", "--hard", "1", "--policy", "random",
                          "--episodes", "2", "--iterations", "1", "--store", str(store), "--json")
        assert _waiting(command) == f"another run (pid {holder.pid}) holds this store; waiting for it to finish"
        assert sorted(p.name for p in store.iterdir()) == [".run.lock"]  # no catalog, no step file yet
        code, out, err = _release(holder, command)
    assert code == 0, err
    assert [(p["level"], p["episodes"]) for p in json.loads(out)["probes"]] == [(0.0, 2), (1.0, 2)]
    assert _episodes(store) == 4


def test_regress_run_waits_for_a_run_holding_the_store_and_writes_nothing_meanwhile(tmp_path):
    store = tmp_path / "store"
    campaign = tmp_path / "g.yaml"
    campaign.write_text("name: g\nepisodes: 2\nhorizon: 5\ntasks: [gymnasium/Pendulum-v1]\npolicies: [random]\n")
    runner = CliRunner()
    for command in (["run", str(campaign), "--executor", "inline"],
                    ["regress", "add", "fails", "--from", "g", "--policy", "random", "--holdout", "0"]):
        result = runner.invoke(app, [*command, "--store", str(store)])
        assert result.exit_code == 0, result.output
    assert _episodes(store) == 2  # Pendulum never succeeds: both are cases of the set
    with _processes() as started:
        holder = _hold(started, store)
        command = _python(started, "-m", "assay.cli.app", "regress", "run", "fails", "--policy",
                          "tests.test_completeness_locks:Still", "--store", str(store), "--json")
        assert _waiting(command) == f"another run (pid {holder.pid}) holds this store; waiting for it to finish"
        assert _episodes(store) == 2 and not (store / "regression" / "fails" / "runs").exists()
        code, out, err = _release(holder, command)
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["set"], row["cases"], row["run"]) == ("fails", 2, 1)
    assert _episodes(store) == 4  # Still's reruns, written once the lock was free
