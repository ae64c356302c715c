"""The third benchmark, robosuite 1.5, which exists only served: its own environment (.venv-robosuite, built by
`make install-test` from requirements/robosuite.lock), success from the simulator, a scripted grasp, and a
visual and a behavioral factor."""

from __future__ import annotations

import numpy as np
import pytest

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.served import ServedEnv
from assay.sim import default_registry, resolve_variant
from assay.spec import CameraSpec, campaign_from_data
from assay.store import Outcome, Store
from tests.served_support import ROBOSUITE_PYTHON, served

pytestmark = pytest.mark.sim


@pytest.fixture(scope="module")
def robosuite_server():
    if not ROBOSUITE_PYTHON.exists():
        pytest.fail("robosuite 1.5's environment is missing: `make env-robosuite` (make install-test builds it)")
    with served("robosuite", python=str(ROBOSUITE_PYTHON), clients=2) as server:
        yield server


def test_robosuite_lift_is_solved_by_the_scripted_grasp_and_friction_changes_the_episode(tmp_path, robosuite_server):
    spec = campaign_from_data({
        "name": "rs-lift", "episodes": 2, "tasks": ["robosuite/lift"], "horizon": 80, "envs_per_worker": 2,
        "variants": [{}, {"friction": 0.1}], "policies": [{"name": "expert", "builtin": "expert"}],
        "simulators": {"robosuite": robosuite_server.url}})
    with Store(tmp_path) as store:
        summary = run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path))
        rows = {(r.variant_name, r.seed): r for r in store.catalog.episodes(campaign="rs-lift")}
    assert summary.outcomes["error"] == 0, summary
    nominal = [r for (variant, _), r in rows.items() if variant == "nominal"]
    assert [r.outcome for r in nominal] == [Outcome.SUCCESS, Outcome.SUCCESS]  # robosuite's own _check_success
    assert all(r.steps < 80 for r in nominal)
    for (variant, seed), row in rows.items():
        if variant != "nominal":
            assert row.trajectory_hash != rows[("nominal", seed)].trajectory_hash  # friction acts on the episode


def test_robosuite_light_changes_the_frame_and_nothing_else(robosuite_server):
    task = default_registry().get("robosuite/lift").model_copy(
        update={"cameras": (CameraSpec(name="agentview", width=64, height=64),)})
    env = ServedEnv(task, robosuite_server.url)
    try:
        nominal = env.reset(4)
        dark = env.reset(4, resolve_variant({"light.intensity": 0.3}, task))
        again = env.reset(4)
    finally:
        env.close()
    assert np.array_equal(nominal["state"], dark["state"]) and np.array_equal(nominal["image.agentview"],
                                                                              again["image.agentview"])
    assert dark["image.agentview"].mean() < nominal["image.agentview"].mean() - 10
