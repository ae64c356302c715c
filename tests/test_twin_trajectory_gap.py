"""Trajectory attribution: the layer that closes the gap between recorded episodes and their replays.

Golden cases on real Meta-World episodes recorded in a hidden reality: the twin equal to the
reality closes the state gap exactly (unexplained 0, the changed layer named, nothing else); a
twin that calibrated the wrong layer closes nothing and names nothing; a calibrated twin equal
to nominal has no gap closed at all. A reality that leaves every success unchanged (low
friction on push-back at a short horizon) is still named by its trajectories.
"""

from __future__ import annotations

import numpy as np
import pytest

from assay.sim import default_registry
from assay.spec import PolicySpec
from assay.store import Store
from assay.twin import Twin, TwinError, TwinSettings, identify, nominal_twin, run_twins, trajectories_from_store
from assay.twin.trajectory_gap import trajectory_attribution

pytestmark = pytest.mark.sim

TASK = "metaworld/push-back@1"
REALITY = Twin(name="slippery", task=TASK, dynamics={"friction": 0.1})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Six expert episodes of 100 steps recorded in the low-friction reality."""
    settings = TwinSettings(policies=(PolicySpec(name="expert", builtin="expert"),), episodes=6, horizon=100, seed=1000)
    with Store(tmp_path_factory.mktemp("lab")) as lab:
        entries = run_twins("lab", [REALITY], settings, lab)[REALITY.version]
        episodes = trajectories_from_store(lab, "lab", "expert")
    return default_registry().get(TASK), entries, episodes


def test_the_twin_equal_to_the_reality_closes_the_state_gap_and_names_only_its_layer(recorded):
    task, _, episodes = recorded
    result = trajectory_attribution(task, nominal_twin(TASK), REALITY, episodes, "state", resamples=200)
    assert result.episodes == 6 and result.held_out
    assert result.gaps["nominal"] > 0.001  # friction 0.1 moves the puck a millimetre or more
    assert result.gaps["calibrated"] == 0.0 and result.gaps["+dynamics"] == 0.0  # replays reproduce the reality
    assert result.gaps["-dynamics"] == result.gaps["nominal"]
    assert result.unexplained == 0.0 and result.named == ("dynamics",)
    layers = {x.layer: x for x in result.layers}
    assert layers["dynamics"].share == pytest.approx(1.0) and layers["dynamics"].closure_interval[0] > 0
    assert layers["control"].closure == 0.0 and not layers["control"].named and not layers["rendering"].changed


def test_a_twin_calibrated_in_the_wrong_layer_names_nothing(recorded):
    task, _, episodes = recorded
    wrong = Twin(name="wrong", task=TASK, control={"control.gain": 0.8})
    result = trajectory_attribution(task, nominal_twin(TASK), wrong, episodes, "state", resamples=200)
    assert result.named == ()
    layers = {x.layer: x for x in result.layers}
    assert layers["control"].changed and layers["control"].closure < 0  # a wrong gain widens the gap
    assert result.unexplained is not None and result.unexplained > 1


def test_nominal_as_calibrated_closes_nothing_and_has_no_share(recorded):
    task, _, episodes = recorded
    gaps = [trajectory_attribution(task, nominal_twin(TASK), nominal_twin(TASK), [e], "state", held_out=False,
                                   resamples=100) for e in episodes]
    widest = max(gaps, key=lambda g: g.gaps["nominal"])  # n = 1: the episode whose puck moved most
    assert widest.named == () and not widest.held_out and widest.episodes == 1
    assert all(x.share is None and x.closure == 0.0 and not x.changed for x in widest.layers)
    assert widest.unexplained == pytest.approx(1.0)
    # An episode whose replay stays within the measurement tolerance has no gap to explain.
    assert min(g.gaps["nominal"] for g in gaps) < 0.0005
    assert min(gaps, key=lambda g: g.gaps["nominal"]).unexplained is None


def test_bad_arguments_are_one_line_errors(recorded):
    task, _, episodes = recorded
    with pytest.raises(TwinError, match="unknown trajectory measure 'pose'; valid: state, trace"):
        trajectory_attribution(task, nominal_twin(TASK), REALITY, episodes, "pose")
    with pytest.raises(TwinError, match="at least one recorded real episode"):
        trajectory_attribution(task, nominal_twin(TASK), REALITY, [], "state")
    with pytest.raises(TwinError, match="resamples 10 is too few"):
        trajectory_attribution(task, nominal_twin(TASK), REALITY, episodes, "state", resamples=10)


def test_sysid_warns_whenever_its_fit_ends_above_the_tolerance(recorded):
    task, _, episodes = recorded
    widest = max(episodes, key=lambda e: float(np.ptp(e.states[:, 4:7])))  # the episode that moved the puck most
    short = identify(task, [widest], nominal_twin(TASK), ("friction",), max_evaluations=2, restarts=0)
    assert not short.converged and short.residual_after > short.tolerance == 0.0005
    assert short.status == "budget"  # still falling when the 2 replays ran out: more replays would help
    assert any("the tolerance 0.0005 m" in w and "maximum of 2 replays" in w and "conditional on convergence" in w
               and "raise max_evaluations" in w for w in short.warnings)
    enough = identify(task, [widest], nominal_twin(TASK), ("friction",), max_evaluations=40, restarts=0)
    assert enough.converged and enough.residual_after <= enough.tolerance
    assert enough.fitted["friction"] == pytest.approx(0.1, rel=0.05)
    assert not any("converged" in w for w in enough.warnings)
    assert enough.intervals_are.startswith("conditional on convergence")
