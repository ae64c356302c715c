"""Routing accuracy: the router's chosen skill against the episode's own task, beside success."""

from __future__ import annotations

import pytest

from assay.metrics import routing_table, success_interval
from assay.metrics.routing import task_skill
from assay.store import EpisodeRecord, Outcome


def _record(i: int, chosen: str | None, outcome: Outcome, task: str = "metaworld/button-press-topdown@1",
            policy: str = "router") -> EpisodeRecord:
    return EpisodeRecord(key=f"k{policy}{i}", campaign="c", task_id=task, task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name=policy, policy_version="1", policy_spec={},
                         seed=i, episode_index=i, instruction="", outcome=outcome, reason="", steps=1,
                         total_return=0.0, success_step=None, trajectory_hash="",
                         policy_info={} if chosen is None else {"chosen_skill": chosen, "similarity": 0.5})


def test_a_misroute_is_counted_even_when_success_hides_it():
    # The case: a typo sent button-press-topdown to pick-place-wall.
    S, F, E = Outcome.SUCCESS, Outcome.FAILURE, Outcome.ERROR
    records = [_record(0, "button-press-topdown-v3", S), _record(1, "button-press-topdown-v3", S),
               _record(2, "button-press-topdown-v3", F), _record(3, "pick-place-wall-v3", F),
               _record(4, "pick-place-wall-v3", E),  # an error is no evidence either way
               _record(5, None, S, policy="expert")]  # a policy that does not route has no row
    (row,) = routing_table(records)
    assert (row.policy, row.episodes, row.routed_correctly) == ("router", 4, 3)
    assert row.accuracy == 0.75 and row.misrouted_to == {"pick-place-wall-v3": 1}
    assert row.success_when_correct == pytest.approx(2 / 3) and row.success_when_misrouted == 0.0
    interval = success_interval(3, 4)
    assert (row.ci_low, row.ci_high) == (interval.low, interval.high) and row.ci_low < 0.75 < row.ci_high
    perfect = routing_table([_record(i, "button-press-topdown-v3", F) for i in range(5)])[0]
    assert perfect.accuracy == 1.0 and perfect.success_when_misrouted is None and perfect.ci_low < 1.0


def test_task_skill_names():
    assert task_skill("metaworld/pick-place-wall@1") == "pick-place-wall-v3"
    assert task_skill("metaworld/reach@2") == "reach-v3"


def test_openloop_episodes_are_counted_per_task_over_variants():
    from assay.metrics.openloop import first_per_task

    def rec(task, variant, index):
        return EpisodeRecord(key=f"{task}{variant}{index}", campaign="c", task_id=task, task_hash="h",
                             variant_key=variant, variant_name=variant, variant={}, policy_name="expert",
                             policy_version="1", policy_spec={}, seed=index, episode_index=index, instruction="",
                             outcome=Outcome.SUCCESS, reason="", steps=1, total_return=0.0, success_step=None,
                             trajectory_hash="")

    records = [rec(t, v, i) for t in ("a@1", "b@1") for v in ("nominal", "dark", "bright") for i in range(3)]
    chosen = first_per_task(records, 4)
    assert [(r.task_id, r.variant_name, r.episode_index) for r in chosen] == [
        ("a@1", "nominal", 0), ("a@1", "bright", 0), ("a@1", "dark", 0), ("a@1", "nominal", 1),
        ("b@1", "nominal", 0), ("b@1", "bright", 0), ("b@1", "dark", 0), ("b@1", "nominal", 1)]
    assert len(first_per_task(records, 100)) == 18
