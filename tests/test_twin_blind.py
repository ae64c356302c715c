"""The blind attribution protocol on a small budget: one hidden single-layer reality per layer.

The pipeline sees only the lab's counts and recorded episodes (``assay.twin.blind``); each
reality must come out with exactly its changed layer named. ``benchmarks/twin_blind.py`` runs
the larger set documented in docs/TWIN.md.
"""

from __future__ import annotations

import pytest

from assay.spec import CameraSpec, PolicySpec
from assay.twin import Twin, TwinSettings
from assay.twin.blind import BlindBudget, blind_attribution

pytestmark = [pytest.mark.sim, pytest.mark.slow]

TASK = "metaworld/reach@1"
REALITIES = {
    "control": Twin(name="gain", task=TASK, control={"control.gain": 0.25}),
    "dynamics": Twin(name="damping", task=TASK, dynamics={"joint.damping": 10.0}),
    "rendering": Twin(name="dark", task=TASK, rendering={"light.intensity": 0.0}),
}
SETTINGS = TwinSettings(policies=(PolicySpec(name="expert", builtin="expert"),
                                  PolicySpec(name="perception", builtin="perception-expert")),
                        episodes=3, horizon=60, cameras=(CameraSpec(name="front", width=64, height=64, depth=True),))
BUDGET = BlindBudget(sysid_trajectories=1, sysid_evaluations=80, restarts=0, rendering_parameters=("light.intensity",),
                     rendering_steps=12, resamples=300)


@pytest.mark.parametrize("layer", sorted(REALITIES))
def test_the_blind_pipeline_names_the_layer_the_reality_changed(layer, tmp_path):
    result = blind_attribution(REALITIES[layer], SETTINGS, tmp_path, BUDGET)
    assert result.changed == (layer,)
    assert result.named == (layer,) and result.attributed == layer
    shares = {x["layer"]: x for x in result.attribution["layers"]}
    assert shares[layer]["closure_interval"][0] > 0
