"""Progress of long commands without a terminal, and what Ctrl-C (SIGINT to a real run) prints and leaves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run import observing, phase
from assay.store import Store
from tests.helpers import popen_as_from_a_terminal

runner = CliRunner()

LONG = """
name: long
seed: 0
episodes: 40
horizon: 200
envs_per_worker: 1
tasks: [gymnasium/Pendulum-v1]
policies: [random]
"""


@pytest.mark.sim
def test_a_sweep_without_a_terminal_prints_plain_progress_lines(tmp_path):
    result = runner.invoke(app, ["sweep", "--factor", "action.noise", "--values", "0.5", "--task",
                                 "gymnasium/Pendulum-v1", "--policy", "random", "--episodes", "3", "-x", "inline",
                                 "--store", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("sweep:")]
    # nominal + one level, three paired seeds each, handed to one executor run
    assert lines[0].startswith("sweep: 0 of 6 queued episodes done"), lines
    assert re.match(r"sweep: done, 6 episodes run in \d+s, [\d.]+ ep/s, success 0/6, errors 0$", lines[-1]), lines
    assert "\x1b[" not in result.stderr


@pytest.mark.sim
def test_a_resumed_sweep_queues_only_what_is_missing(tmp_path):
    args = ["sweep", "--factor", "action.noise", "--values", "0.5", "--task", "gymnasium/Pendulum-v1",
            "--policy", "random", "--episodes", "2", "-x", "inline", "--store", str(tmp_path / "s")]
    assert runner.invoke(app, args).exit_code == 0
    again = runner.invoke(app, args)
    assert again.exit_code == 0
    assert not [line for line in again.stderr.splitlines() if line.startswith("sweep:")]  # nothing ran


def test_phases_and_episodes_reach_every_observer_while_it_watches():
    seen: list[str] = []

    class Recorder:
        def queued(self, episodes: int) -> None:
            seen.append(f"queued {episodes}")

        def finished(self, record) -> None:
            seen.append("finished")

        def phase(self, text: str) -> None:
            seen.append(text)

    with observing(Recorder()):
        phase("training base")
    phase("unheard")
    assert seen == ["training base"]


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    return popen_as_from_a_terminal([sys.executable, "-m", "assay", "run", str(tmp_path / "long.yaml"), "--store",
                                     str(tmp_path / "s"), "--progress-every", "0", *extra],
                                    stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                    start_new_session=True)


def _stored(store: Path) -> int:
    with Store(store) as opened:
        return len(opened.catalog.episodes(campaign="long"))


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("executor", ["inline", "local"])
def test_ctrl_c_says_how_many_episodes_are_stored_and_a_rerun_resumes(tmp_path, executor):
    """SIGINT to the run's whole process group (what Ctrl-C in a terminal does) once some episodes are done."""
    (tmp_path / "long.yaml").write_text(LONG)
    process = _start(tmp_path, "-x", executor, "-w", "1")
    assert process.stderr is not None
    lines = []
    deadline = time.monotonic() + 240
    for line in process.stderr:
        lines.append(line.rstrip("\n"))
        found = re.match(r"campaign long: (\d+)/40 episodes", line)
        if found and int(found.group(1)) >= 3:
            os.killpg(process.pid, signal.SIGINT)
            break
        assert time.monotonic() < deadline, lines
    rest = process.stderr.read().splitlines()
    process.stderr.close()
    assert process.wait(timeout=120) == 130, lines + rest
    stored = _stored(tmp_path / "s")
    assert 3 <= stored < 40
    assert rest[-1] == f"interrupted: {stored} of 40 episodes stored; rerun the same command to resume", rest
    assert not any("Traceback" in line for line in rest), rest

    resumed = _start(tmp_path, "-x", "inline")
    _, errors = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, errors
    progress = [line for line in errors.splitlines() if line.startswith("campaign long:")]
    first = f"campaign long: {stored}/40 episodes ({100 * stored / 40:.0f}%) ({stored} were already stored),"
    assert progress[0].startswith(first), progress
    assert progress[-1].startswith(f"campaign long: 40/40 episodes (100%) ({stored} were already stored),"), progress
    assert f"success 0/{40 - stored} of the {40 - stored} run now" in progress[-1]
    assert _stored(tmp_path / "s") == 40


def test_on_a_terminal_the_progress_is_a_bar_that_counts_what_finished():
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from assay.cli.progress import WorkProgress
    from assay.store import Outcome

    screen = io.StringIO()
    progress = WorkProgress("boundary", Console(file=screen, force_terminal=True, width=160))
    assert not progress.plain
    progress.phase("level 0.5")
    progress.queued(4)
    for outcome in (Outcome.SUCCESS, Outcome.FAILURE, Outcome.ERROR):
        progress.finished(SimpleNamespace(outcome=outcome, key=f"k{outcome.value}"))
    progress.close()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "boundary: level 0.5" in drawn and "3/4" in drawn and "success 1/2" in drawn and "errors 1" in drawn
    assert progress.finished_total == 3 and progress.queued_total == 4
