"""Specs: identity (keys and seeds), planning, and YAML errors that name file, line and field."""

from __future__ import annotations

import pytest

from assay.errors import SpecError
from assay.sim import metaworld_task
from assay.spec import (
    NOMINAL,
    Axis,
    CampaignSpec,
    Perturbation,
    PolicySpec,
    ResolvedPolicy,
    Variant,
    batch_jobs,
    campaign_from_data,
    episode_key,
    episode_seed,
    load_campaign,
    plan,
)

REACH = metaworld_task("reach-v3")
PICK = metaworld_task("pick-place-v3")
EXPERT = ResolvedPolicy(PolicySpec(name="expert", builtin="expert"), "builtin-1")
RANDOM = ResolvedPolicy(PolicySpec(name="random", builtin="random"), "builtin-1")


def test_keys_and_seeds_are_pinned_across_machines_and_releases():
    # Golden values: a change here silently invalidates every stored result; it must be deliberate.
    assert episode_seed(0, REACH, 0) == 838532979
    assert episode_key(REACH, NOMINAL, EXPERT, 838532979) == "303d4760b92d6f7701389d33"


def test_seeds_are_shared_across_policies_and_variants_so_comparisons_are_paired():
    campaign = CampaignSpec(name="c", episodes=3, tasks=("metaworld/reach@1",),
                            policies=(EXPERT.spec, RANDOM.spec), variants=({},))
    jobs = plan(campaign, [REACH], [EXPERT, RANDOM])
    by_policy = {}
    for job in jobs:
        by_policy.setdefault(job.policy.name, []).append(job.seed)
    assert by_policy["expert"] == by_policy["random"]
    assert len(set(by_policy["expert"])) == 3
    assert len({job.key for job in jobs}) == 6


def test_key_changes_with_every_identity_field_and_nothing_else():
    base = episode_key(REACH, NOMINAL, EXPERT, 5)
    assert episode_key(REACH, NOMINAL, EXPERT, 5) == base
    assert episode_key(REACH, NOMINAL, EXPERT, 6) != base
    assert episode_key(PICK, NOMINAL, EXPERT, 5) != base
    assert episode_key(REACH, NOMINAL, RANDOM, 5) != base
    assert episode_key(REACH.model_copy(update={"horizon": 100}), NOMINAL, EXPERT, 5) != base
    variant = Variant(perturbations=(Perturbation(axis=Axis.VISUAL, factor="light", value=0.5),))
    assert episode_key(REACH, variant, EXPERT, 5) != base
    renamed = ResolvedPolicy(PolicySpec(name="other-name", builtin="expert"), "builtin-1")
    assert episode_key(REACH, NOMINAL, renamed, 5) == base  # a display name is not an identity


def test_batches_never_mix_cells_and_respect_size():
    campaign = CampaignSpec(name="c", episodes=5, tasks=("a/b",), policies=(EXPERT.spec, RANDOM.spec))
    jobs = plan(campaign, [REACH, PICK], [EXPERT, RANDOM])
    batches = batch_jobs(jobs, 2)
    assert all(len({j.cell for j in b}) == 1 and len(b) <= 2 for b in batches)
    assert sum(len(b) for b in batches) == len(jobs) == 20


def test_campaign_yaml_round_trip(write_campaign):
    path = write_campaign("""
        name: demo
        seed: 3
        episodes: 2
        tasks: [metaworld/reach@1]
        policies:
          - expert
          - tests.helpers:FlakyExpert
          - {name: shaky, builtin: degraded-expert, params: {action_noise: 0.2}}
        variants: [nominal]
    """)
    spec = load_campaign(path)
    assert [p.name for p in spec.policies] == ["expert", "FlakyExpert", "shaky"]
    assert spec.policies[1].entrypoint == "tests.helpers:FlakyExpert"
    assert spec.variants == ({},)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: x\nepisodes: [1\n", r"campaign.yaml:\d+: malformed YAML"),
        ("", "campaign.yaml:1: the file is empty"),
        ("name: x\nepisodes: 2\ntasks: [a/b]\npolicies: [expert]\nsurprise: 1\n", "campaign.yaml:5: surprise: unknown field"),
        ("name: x\nepisodes: two\ntasks: [a/b]\npolicies: [expert]\n", "campaign.yaml:2: episodes: Input should be a valid integer"),
        ("name: x\nepisodes: 2\ntasks: [a/b]\npolicies:\n  - {name: p}\n", "campaign.yaml:5: policies\\[0\\]: give exactly one of"),
        ("name: x\nepisodes: 2\ntasks: [a/b]\npolicies: [expert]\nvariants: [bright]\n", "campaign.yaml:5: variants\\[0\\]"),
        ("name: x\nname: y\n", "campaign.yaml:2: key 'name' appears twice"),
        ("name: x\ntasks: [a/b]\npolicies: [expert]\n", "campaign.yaml:1: episodes: required field is missing"),
    ],
)
def test_yaml_mistakes_are_one_line_with_file_line_and_field(write_campaign, text, expected):
    path = write_campaign(text)
    with pytest.raises(SpecError, match=expected) as info:
        load_campaign(path)
    assert "\n" not in str(info.value)


def test_duplicate_policy_names_are_refused():
    with pytest.raises(SpecError, match="used twice"):
        campaign_from_data({"name": "x", "episodes": 1, "tasks": ["a/b"], "policies": ["expert", "expert"]})


def test_cameras_unset_means_each_tasks_own_and_an_empty_list_means_none():
    from assay.run import prepare_campaign

    base = {"name": "c", "episodes": 2, "tasks": ["metaworld/reach@1"], "policies": [{"name": "e", "builtin": "expert"}]}
    unset, none = campaign_from_data(base), campaign_from_data({**base, "cameras": []})
    assert unset.cameras is None and none.cameras == ()
    assert unset.content_hash() == "cafa11921190ae7c"  # golden: as before the distinction existed
    assert none.content_hash() != unset.content_hash()  # no camera is another campaign
    assert "cameras" not in unset.dump() and none.dump()["cameras"] == []
    front = campaign_from_data({**base, "cameras": [{"name": "front", "width": 32, "height": 32}]})
    assert front.content_hash() == "ade6fc58efbd4b6c"  # golden: unchanged
    assert prepare_campaign(none).tasks[0].cameras == () and prepare_campaign(front).tasks[0].cameras[0].name == "front"


def test_a_task_video_fps_is_the_campaign_default_and_not_part_of_the_task_hash():
    task = REACH
    slow = task.model_copy(update={"video_fps": 4.0})
    assert slow.content_hash() == task.content_hash()  # a recording default, not what the task is
    policy = ResolvedPolicy(PolicySpec(name="e", builtin="expert"), "1")
    spec = campaign_from_data({"name": "c", "episodes": 1, "tasks": [task.id],
                               "policies": [{"name": "e", "builtin": "expert"}]})
    (default,), (own,) = plan(spec, [task], [policy]), plan(spec, [slow], [policy])
    assert default.video_fps is None and own.video_fps == 4.0 and own.key != default.key
    (chosen,) = plan(spec.model_copy(update={"video_fps": 20.0}), [slow], [policy])
    assert chosen.video_fps == 20.0  # the campaign's own setting wins
