"""Planning a million jobs (issue 39): the fast path gives every job the key and instruction it always had.

``plan`` serializes what a cell's jobs share once (``_CellKeys``) and asks for the instruction once per
cell unless a semantic factor makes it depend on the seed; the keys must stay byte-for-byte what
``episode_key`` gives, or every stored episode would be re-run.
"""

from __future__ import annotations

from assay.run import prepare_campaign
from assay.sim import instruct
from assay.spec import campaign_from_data
from assay.spec.campaign import episode_key, episode_seed


def _check(data: dict) -> int:
    planned = prepare_campaign(campaign_from_data(data))
    spec = planned.spec
    for job in planned.jobs:
        seed = episode_seed(spec.seed, job.task, job.episode_index)
        instruction = instruct(job.task, job.variant, seed)
        assert (job.seed, job.instruction) == (seed, instruction)
        assert job.key == episode_key(job.task, job.variant, job.policy, seed, instruction, spec.replan_every,
                                      spec.safety, job.video_fps)
    return len({job.key for job in planned.jobs})


def test_planned_keys_equal_episode_key_for_every_kind_of_cell():
    base = {"name": "keys", "seed": 11, "episodes": 6, "tasks": ["metaworld/pick-place@1", "metaworld/reach@1"],
            "policies": ["expert", {"name": "shaky", "builtin": "degraded-expert", "params": {"action_noise": 0.2}}],
            "variants": ["nominal", {"light.intensity": 0.4},
                         {"instruction.synonym": "both"}, {"instruction.typo_rate": 0.1}]}
    assert _check(base) == 2 * 2 * 4 * 6
    assert _check({**base, "name": "more", "replan_every": 3, "safety": True, "video_fps": 5}) == 96


def test_a_fixed_instruction_campaign_keeps_its_golden_key():
    data = {"name": "fixed", "seed": 5, "episodes": 3, "tasks": ["metaworld/reach@1"], "policies": ["expert"],
            "horizon": 40}
    planned = prepare_campaign(campaign_from_data(data))
    assert _check(data) == 3
    assert [job.seed for job in planned.jobs] == [episode_seed(5, planned.tasks[0], i) for i in range(3)]
