"""The learning sanity ladder: a BC must reproduce its own demonstrations (rung 1) before it is judged on held-out
initial states (rung 2). On Meta-World and on LIBERO; a broken learner fails rung 1 and `assay ladder` exits 1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from assay.cli.app import app  # noqa: E402
from assay.errors import AssayError  # noqa: E402
from assay.learning.ladder import LadderConfig, run_ladder  # noqa: E402
from assay.store import Store  # noqa: E402

SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


@pytest.mark.sim
def test_rung_one_on_metaworld_a_bc_replays_its_own_demos_and_is_scored_on_held_out_seeds(tmp_path):
    config = LadderConfig(tasks=("metaworld/pick-place@1",), demos=10, heldout=10, epochs=1000)
    with Store(tmp_path / "store") as store:
        result = run_ladder(store, config, tmp_path / "ckpt")
    own, held = result.rungs
    assert result.demos.successes == 10 and own.pooled.trials == 10
    assert own.passed and own.pooled.successes >= 9, own  # >= 90% of its own demos' initial states
    assert held.passed is None and held.pooled.trials == 10 and held.scope == "10 episodes of seed stream 3000"
    assert held.pooled.low <= held.pooled.rate <= held.pooled.high  # reported with its interval, not gated
    assert result.passed and set(result.seconds) == {"demos", "train", "evaluate"}


@pytest.mark.sim
def test_a_broken_learner_fails_rung_one_and_the_command_exits_one(tmp_path):
    """One epoch is a learner that has not learned: rung 1 must catch it (the gate has teeth)."""
    runner = CliRunner()
    args = ["ladder", "--tasks", "metaworld/reach@1", "--demos", "4", "--heldout", "0", "--epochs", "1",
            "--horizon", "100", "--store", str(tmp_path / "store"), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    (own,) = data["rungs"]
    assert own["passed"] is False and own["pooled"]["successes"] < 4 and data["passed"] is False


def test_bad_ladders_are_one_line_errors(tmp_path):
    with pytest.raises(AssayError, match="at least one task"):
        LadderConfig(tasks=(), demos=3)
    with pytest.raises(AssayError, match=r"inputs 'pixels' are not valid; valid: state, state\+environment"):
        LadderConfig(tasks=(SOUP,), inputs="pixels")
    with pytest.raises(AssayError, match="own_min 1.5 is not a rate"):
        LadderConfig(tasks=(SOUP,), own_min=1.5)
    runner = CliRunner()
    too_many = runner.invoke(app, ["ladder", "--tasks", SOUP, "--demos", "30", "--heldout", "30",
                                   "--store", str(tmp_path / "s")])
    assert too_many.exit_code == 2
    assert "demos + held-out = 60 initial states per task, but these tasks have 50" in too_many.output
    mixed = runner.invoke(app, ["ladder", "--tasks", f"{SOUP},metaworld/reach@1", "--store", str(tmp_path / "s")])
    assert mixed.exit_code == 2 and "fixed initial states (LIBERO) or none" in mixed.output


@pytest.mark.sim
def test_a_task_the_expert_never_solves_is_refused_before_training(tmp_path):
    config = LadderConfig(tasks=("metaworld/pick-place@1",), demos=2, heldout=0, horizon=2)
    with Store(tmp_path / "store") as store, pytest.raises(AssayError, match=r"the expert solved none of its 2 demo "
                                                                          r"episodes of metaworld/pick-place@1"):
        run_ladder(store, config, tmp_path / "ckpt")


@pytest.mark.libero
def test_rung_one_on_libero_a_state_bc_replays_its_own_demos(tmp_path):
    """Five scripted-expert demos of the soup task (no camera), a BC reading the robot state and the goal
    positions: every one of its own initial states must succeed again (before the trainer fix: 0/8)."""
    config = LadderConfig(tasks=(SOUP,), demos=5, heldout=0, epochs=1000, inputs="state+environment")
    with Store(tmp_path / "store") as store:
        result = run_ladder(store, config, tmp_path / "ckpt")
    (own,) = result.rungs
    assert result.demos.successes == 5 and own.scope == "initial states 0-4, those whose expert demo succeeded"
    assert own.passed and own.pooled.successes == 5, own
