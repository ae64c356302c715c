"""Ctrl-C (SIGINT to a real process) during a watched command, ``assay sweep``: the line it prints counts the
episodes that are in the catalog, and a status of 130."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.cli.progress import stored_episodes, watch
from tests.helpers import popen_as_from_a_terminal

EPISODES = 100  # seeds per level: nominal and one level, 200 episodes, far more than run before the signal


def _catalog_count(store: Path) -> int:
    try:
        with sqlite3.connect(store / "catalog.sqlite") as conn:
            return int(conn.execute("select count(*) from episodes").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet, or busy
        return 0


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize(("executor", "sent"), [("inline", signal.SIGINT), ("local", signal.SIGINT),
                                               ("local", signal.SIGTERM)])
def test_ctrl_c_during_a_sweep_says_how_many_episodes_the_catalog_holds(tmp_path, executor, sent):
    store, log = tmp_path / "s", tmp_path / "stderr.txt"
    with log.open("w") as errors:
        process = popen_as_from_a_terminal(
            [sys.executable, "-m", "assay", "sweep", "--factor", "action.noise", "--values", "0.5", "--task",
             "metaworld/reach@1", "--policy", "random", "--episodes", str(EPISODES), "--horizon", "40",
             "-x", executor, "-w", "1", "--store", str(store)],
            stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        deadline = time.monotonic() + 300  # a hang guard only
        while _catalog_count(store) < 1:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        if sent == signal.SIGINT:
            os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the driver and its workers
        else:
            os.kill(process.pid, signal.SIGTERM)  # a scheduler's stop: the driver alone, which stops its workers
        status = process.wait(timeout=120)
    lines = log.read_text().splitlines()
    assert status == (130 if sent == signal.SIGINT else 143), lines
    stored = _catalog_count(store)
    assert 1 <= stored < 2 * EPISODES
    how = "interrupted" if sent == signal.SIGINT else "terminated (SIGTERM)"
    assert lines[-1] == f"{how}: {stored} of {2 * EPISODES} episodes stored; rerun the same command to resume"
    assert not any("Traceback" in line for line in lines), lines


class _Record:
    def __init__(self, key: str) -> None:
        from assay.store import Outcome

        self.key, self.outcome = key, Outcome.SUCCESS


def test_the_interrupted_line_counts_what_the_catalog_holds_not_what_finished():
    """Three episodes finished, but the catalog holds two (the third's row was not committed): N is 2."""
    import io

    import typer
    from rich.console import Console

    screen = io.StringIO()
    asked: list[list[str]] = []

    def count(keys):
        asked.append(list(keys))
        return len([k for k in keys if k != "c"])

    with pytest.raises(typer.Exit) as exited, watch("sweep", Console(file=screen, width=200), count) as progress:
        progress.queued(8)
        for key in "abc":
            progress.finished(_Record(key))
        raise KeyboardInterrupt
    assert exited.value.exit_code == 130
    assert asked == [["a", "b", "c"]]
    assert screen.getvalue().splitlines()[-1] == ("interrupted: 2 of 8 episodes stored; rerun the same command to "
                                                  "resume")


def test_without_a_readable_catalog_the_finished_episodes_are_counted(tmp_path):
    import io

    import typer
    from rich.console import Console

    screen = io.StringIO()
    missing = tmp_path / "no-store"
    with pytest.raises(typer.Exit), watch("sweep", Console(file=screen, width=200),
                                          lambda keys: stored_episodes(missing, None, keys)) as progress:
        progress.queued(4)
        progress.finished(_Record("a"))
        raise KeyboardInterrupt
    assert screen.getvalue().splitlines()[-1].startswith("interrupted: 1 of 4 episodes stored;")


def test_stored_episodes_counts_the_keys_in_the_catalog(tmp_path):
    from tests.record_store import fake_store
    from tests.stats_fixtures import records  # hand-built records, no simulator

    rows = records({("a", "t@1"): "SFS"})
    root = fake_store(tmp_path / "s", "c", rows)
    keys = [r.key for r in rows]
    assert stored_episodes(root, None, [*keys[:2], "not-a-key"]) == 2
    assert stored_episodes(root, None, keys) == 3


def test_sigterm_to_a_command_that_queued_no_episode_ends_it_by_the_signal(tmp_path):
    """A server (here the dashboard) or a command still planning has nothing to resume: SIGTERM ends it as the
    signal does (exit -15), not as an interrupted campaign (130/143), and it says nothing about episodes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "assay", "serve", "--store", str(tmp_path / "s"), "--port",
                                str(port), "--token", "t"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(1500):  # wait until it listens (a hang guard of about five minutes, not a speed check)
        assert process.poll() is None, process.communicate()[0]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    else:
        pytest.fail("the dashboard never listened")
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0]
    assert process.returncode == -signal.SIGTERM, output
    assert "episodes stored" not in output and "Traceback" not in output
