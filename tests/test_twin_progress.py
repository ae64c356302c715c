"""System identification is long work (up to DEFAULT_MAX_EVALUATIONS replays): the run observers hear each replay,
so ``assay twin sysid`` shows progress. A fake hand whose displacement is gain × action stands in for the simulator."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import assay.twin.sysid as sysid
from assay.run import observing
from assay.sim import default_registry
from assay.twin import Trajectory, identify, nominal_twin

TASK = "metaworld/push@1"


class _Hand:
    """A hand that moves ``gain`` × 1 cm per unit of action: what ``perturbed`` makes of a twin's control gain."""

    def __init__(self, gain: float = 1.0) -> None:
        self.gain, self.state = gain, np.zeros(7)

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        self.state = np.zeros(7)
        return {"state": self.state.copy()}

    def step(self, action: np.ndarray) -> Any:
        self.state[:3] += self.gain * 0.01 * action[:3]
        return SimpleNamespace(observation={"state": self.state.copy()})

    def close(self) -> None:
        pass


def _gain(variant: Any) -> float:
    return next((float(p.value) for p in variant.perturbations if p.factor == "control.gain"), 1.0)


@pytest.fixture
def fake_hand(monkeypatch):
    monkeypatch.setattr(sysid, "make_env", lambda task: _Hand())
    monkeypatch.setattr(sysid, "perturbed", lambda env, variant: _Hand(_gain(variant)))
    rng = np.random.default_rng(0)
    trajectories = []
    for seed in (0, 1):
        actions = rng.uniform(-1, 1, (20, 4))
        real = _Hand(0.5)
        states = [real.reset(seed)["state"]]
        states += [real.step(a).observation["state"] for a in actions[:-1]]
        trajectories.append(Trajectory(seed, actions, np.asarray(states), "expert"))
    return trajectories


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int, str]] = []

    def queued(self, episodes: int) -> None:
        pass

    def finished(self, record: Any) -> None:
        pass

    def phase(self, text: str) -> None:
        self.events.append((text, -1, -1, "phase"))

    def advanced(self, text: str, done: int, total: int, unit: str) -> None:
        self.events.append((text, done, total, unit))


def test_every_replay_of_the_search_is_announced_and_the_last_says_done(fake_hand):
    task = default_registry().get(TASK)
    with observing(_Recorder()) as recorder:
        result = identify(task, fake_hand, nominal_twin(TASK), parameters=("control.gain",), max_evaluations=40,
                          restarts=0)
    assert result.fitted["control.gain"] == pytest.approx(0.5, abs=0.01) and result.converged
    what = "system identification of 1 factor on 2 trajectories (until 0.0005 m RMS)"
    assert {text for text, *_ in recorder.events} == {what}
    done = [d for _, d, _, _ in recorder.events]
    assert recorder.events[0] == (what, 0, 40, "replays")  # announced before the first replay
    assert done == list(range(result.evaluations + 1)) + [result.evaluations]  # every replay, then the end
    assert recorder.events[-1] == (what, result.evaluations, result.evaluations, "replays")
    # until the end the work is never "done", even where the pruning and intervals pass the stated maximum
    assert all(d < total for _, d, total, _ in recorder.events[:-1])


def test_twin_sysid_shows_the_search_as_progress_lines(fake_hand, tmp_path, monkeypatch):
    from assay.cli import twin_commands
    from assay.cli.app import app
    from assay.store import Store

    Store(tmp_path / "lab").close()
    monkeypatch.setattr(twin_commands, "trajectories_from_store", lambda *args: fake_hand)
    start = tmp_path / "start.yaml"
    start.write_text(f"name: start\ntask: {TASK}\n")
    result = CliRunner().invoke(app, ["twin", "sysid", "--twin", str(start), "--real-campaign", "lab",
                                      "--parameters", "control.gain", "--max-evaluations", "40", "--restarts", "0",
                                      "--store", str(tmp_path / "lab"), "--json"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("twin sysid:")]
    prefix = "twin sysid: system identification of 1 factor on 2 trajectories (until 0.0005 m RMS): "
    assert lines[0] == prefix + "0/40 replays", lines
    assert re.fullmatch(re.escape(prefix) + r"(\d+)/\1 replays, done in \d+s", lines[-1]), lines
