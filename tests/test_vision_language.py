"""Policies the perturbation axes can fool, run as real campaigns: the perception expert (camera in
the loop) under a lighting change, and the instruction router under a far paraphrase."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures import attribute, categorize, step_arrays
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store, read_video, video_relpath

pytestmark = [pytest.mark.sim, pytest.mark.slow]


def _run(tmp_path, data):
    store = Store(tmp_path / "store")
    run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(store.root))
    return store, store.catalog.episodes(campaign=data["name"])


def test_perception_expert_sees_the_goal_and_is_blinded_by_darkness(tmp_path):
    store, records = _run(tmp_path, {
        "name": "vision", "seed": 3, "episodes": 2, "horizon": 150, "envs_per_worker": 2,
        "tasks": ["metaworld/push@1"], "policies": ["perception-expert", "expert"],
        "variants": ["nominal", {"light.intensity": 0.1}],
        "cameras": [{"name": "front", "width": 128, "height": 128, "depth": True}],
    })
    outcome = {(r.policy_name, r.variant_name): [] for r in records}
    for r in records:
        outcome[(r.policy_name, r.variant_name)].append(r.outcome)
    assert outcome[("perception-expert", "nominal")] == [Outcome.SUCCESS] * 2
    assert Outcome.SUCCESS not in outcome[("perception-expert", "light.intensity=0.1")]
    assert outcome[("expert", "light.intensity=0.1")] == [Outcome.SUCCESS] * 2  # ground truth is not fooled
    seen = next(r for r in records if r.policy_name == "perception-expert" and r.variant_name == "nominal")
    assert seen.policy_info["detections"]["goal"] == seen.steps
    assert seen.policy_info["estimate_error_m"]["goal"] < 0.02
    dark = next(r for r in records if r.policy_name == "perception-expert" and r.variant_name != "nominal")
    assert dark.policy_info["detections"]["goal"] == 0
    # The same account, per step, in the data contract: one trace value per recorded step.
    assert store.steps(seen).column("trace.detected.goal").to_pylist() == [1.0] * seen.steps
    assert store.steps(dark).column("trace.detected.goal").to_pylist() == [0.0] * dark.steps
    # Without the nominal twins (a campaign of the dark variant alone) the trace still names perception.
    alone = [r for r in records if r.policy_name == "perception-expert" and r.variant_name != "nominal"]
    found = {r.key: categorize(r, step_arrays(store.steps(r))) for r in alone}
    assert {(a.capability, a.confidence) for a in attribute(alone, found)} == {("perception", "trace")}

    frames = read_video(store.root, video_relpath(seen.key, "front"))  # one MP4 frame per step
    steps = store.steps(seen)
    assert frames.shape == (seen.steps, 128, 128, 3)
    assert steps.column("observation.images.front").to_pylist() == list(range(seen.steps))
    assert np.abs(frames[0].astype(float) - frames[-1]).mean() > 0.5  # the arm moved


def test_perception_expert_finds_reachs_marker_not_the_red_arm(tmp_path):
    """Reach's goal is a red sphere in the air beside the red arm: only the marker's pure red counts
    (before, the arm's pixels pulled the estimate 0.3 m off and the policy scored 0/4 at nominal)."""
    _, records = _run(tmp_path, {
        "name": "reach-vision", "seed": 0, "episodes": 2, "horizon": 150, "envs_per_worker": 2,
        "tasks": ["metaworld/reach@1"], "policies": ["perception-expert"],
        "cameras": [{"name": "front", "width": 128, "height": 128, "depth": True}],
    })
    assert [r.outcome for r in records] == [Outcome.SUCCESS] * 2
    assert all(r.policy_info["estimate_error_m"]["goal"] < 0.03 for r in records)


def test_router_follows_the_instruction_and_misroutes_a_far_paraphrase(tmp_path):
    store, records = _run(tmp_path, {
        "name": "language", "seed": 1, "episodes": 2, "horizon": 150, "envs_per_worker": 2,
        "tasks": ["metaworld/push@1"], "policies": ["router"],
        "variants": ["nominal", {"instruction.paraphrase": "terse"}, {"instruction.paraphrase": "indirect"}],
    })
    by_variant: dict[str, list] = {}
    for r in records:
        by_variant.setdefault(r.variant_name, []).append(r)
    assert all(r.policy_info["chosen_skill"] == "push-v3" and r.outcome is Outcome.SUCCESS for r in by_variant["nominal"])
    terse = by_variant['instruction.paraphrase="terse"']
    assert all(r.instruction == "push puck to goal" and r.policy_info["chosen_skill"] == "push-v3" for r in terse)
    far = by_variant['instruction.paraphrase="indirect"']
    assert all(r.instruction == "nudge that thing over to where it belongs" for r in far)
    assert all(r.policy_info["chosen_skill"] != "push-v3" and r.outcome is not Outcome.SUCCESS for r in far)
    assert {r.seed for r in far} == {r.seed for r in by_variant["nominal"]}  # paired seeds
    steps = store.steps(far[0])  # the router's choice, per step, beside the task it was given
    assert set(steps.column("trace.skill").to_pylist()) == {far[0].policy_info["chosen_skill"]}
    assert steps.column("trace.skill_matches_task").to_pylist() == [0.0] * far[0].steps
    found = {r.key: categorize(r, step_arrays(store.steps(r))) for r in far}
    assert {(a.capability, a.confidence) for a in attribute(far, found)} == {("language_grounding", "trace")}
    nominal = store.steps(by_variant["nominal"][0])
    assert nominal.column("trace.skill_matches_task").to_pylist() == [1.0] * by_variant["nominal"][0].steps
