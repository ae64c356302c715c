"""The blind attribution protocol on a small budget: one hidden single-layer reality per layer.

The pipeline sees only the lab's counts and recorded episodes (``assay.twin.blind``); each
reality must come out with exactly its changed layer named. ``benchmarks/twin_blind.py`` runs
the larger set documented in docs/TWIN.md.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from assay.spec import CameraSpec, PolicySpec
from assay.twin import Twin, TwinSettings
from assay.twin.blind import BlindBudget, blind_attribution

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.extended]  # 2 minutes; make test-extended, make twin-blind

TASK = "metaworld/reach@1"
CAMERA = (CameraSpec(name="front", width=64, height=64, depth=True),)
EXPERT = PolicySpec(name="expert", builtin="expert")
PERCEPTION = PolicySpec(name="perception", builtin="perception-expert")
# Each reality changes success on its task (arm damping does not on reach: it does on push-back).
REALITIES = {
    "control": (Twin(name="gain", task=TASK, control={"control.gain": 0.25}),
                TwinSettings(policies=(EXPERT, PERCEPTION), episodes=3, horizon=60, cameras=CAMERA)),
    "dynamics": (Twin(name="damping", task="metaworld/push-back@1", dynamics={"joint.damping": 10.0}),
                 TwinSettings(policies=(EXPERT,), episodes=8, horizon=100)),
    # The camera policy alone (its episodes serve sysid too): 3 episodes of 60 steps left nominal's
    # perception success too close to the dark reality's 0 to clear the noise.
    "rendering": (Twin(name="dark", task=TASK, rendering={"light.intensity": 0.0}),
                  TwinSettings(policies=(PERCEPTION,), episodes=6, horizon=70, cameras=CAMERA)),
}
BUDGET = BlindBudget(sysid_trajectories=1, sysid_evaluations=80, restarts=0, rendering_parameters=("light.intensity",),
                     rendering_steps=12, resamples=300)


@pytest.mark.parametrize("layer", sorted(REALITIES))
def test_the_blind_pipeline_names_the_layer_the_reality_changed(layer, tmp_path):
    reality, settings = REALITIES[layer]
    budget = BUDGET if settings.cameras else replace(BUDGET, camera_policy=None)
    if EXPERT not in settings.policies:
        budget = replace(budget, state_policy=PERCEPTION.name)
    result = blind_attribution(reality, settings, tmp_path, budget)
    assert result.changed == (layer,)
    assert result.named == (layer,) and result.attributed == layer
    # The lab's episodes that calibration did not fit name the same layer, and only it: states for
    # control and dynamics (rendering never moves a state), the camera policy's trace for rendering.
    assert result.named_by["success"] == (layer,)
    assert result.named_by["state"] == (() if layer == "rendering" else (layer,))
    assert result.trajectories["state"]["held_out"]
    if "trace" in result.named_by:
        assert result.named_by["trace"] in ((layer,), ())
        assert layer != "rendering" or result.named_by["trace"] == ("rendering",)
    shares = {x["layer"]: x for x in result.attribution["layers"]}
    assert shares[layer]["closure_interval"][0] > 0


def test_a_two_factor_reality_is_fitted_to_the_tolerance_and_closes_the_success_gap(tmp_path):
    """Pick-place, gain 0.6 + arm damping 5: the reality an earlier fixed 240-replay search fitted with a spurious
    friction (9x the tolerance, 0 % of the success gap closed). With the default search (until the tolerance, at
    most DEFAULT_MAX_EVALUATIONS replays) and the default tolerance, the fit converges, the truth lies in its
    intervals, the calibrated twin is closer to the lab's success than nominal, and nothing is flagged.

    Sized down only in episodes: 6 of at most 80 steps (the nominal expert succeeds in about 50, the reality needs
    85 or more), the state expert alone (the perception expert cannot see pick-place); about 1 CPU minute. At 100
    steps the same search ends above the tolerance (1.2x, warned and flagged: ``benchmarks/twin_blind.py --set c``,
    docs/TWIN.md), so this is where the default maximum suffices, not a claim that it always does."""
    from assay.twin import DEFAULT_MAX_EVALUATIONS, DEFAULT_TOLERANCE

    reality = Twin(name="two", task="metaworld/pick-place@1", control={"control.gain": 0.6},
                   dynamics={"joint.damping": 5})
    settings = TwinSettings(policies=(EXPERT,), episodes=6, horizon=80)
    result = blind_attribution(reality, settings, tmp_path, BlindBudget(camera_policy=None))
    fit = result.sysid
    assert (fit["tolerance"], fit["max_evaluations"]) == (DEFAULT_TOLERANCE, DEFAULT_MAX_EVALUATIONS)
    assert result.converged and fit["converged"] and fit["residual_after"] <= fit["tolerance"] < fit["residual_before"]
    assert not [w for w in fit["warnings"] if "converged" in w]
    for factor, truth in (("control.gain", 0.6), ("joint.damping", 5.0)):
        low, high = fit["intervals"][factor]
        assert low <= truth <= high, (factor, fit["fitted"][factor], (low, high))
    gaps = {c["label"]: c["gap"] for c in result.attribution["configs"]}
    assert gaps["calibrated"] < gaps["nominal"]  # closes (part of) the success gap
    assert result.flagged == {} and result.attribution["flagged"] == {}
    assert result.changed == ("control", "dynamics") and result.clean == ("control", "dynamics")
    assert result.attributed in ("control", "dynamics")
