"""``assay.run.job_campaign``: a campaign of explicit jobs (boundary probes, resampling, regression reruns)."""

from __future__ import annotations

import dataclasses

import pytest

from assay.errors import AssayError
from assay.policies import resolve_policy
from assay.run import InlineExecutor, job_campaign, run_campaign
from assay.sim import default_registry, resolve_variant
from assay.spec import EpisodeJob, PolicySpec, episode_key
from assay.store import Store


def _jobs(name: str, seeds: list[int], noise: float | None = None, safety: bool = False) -> list[EpisodeJob]:
    task = default_registry().get("metaworld/reach@1").model_copy(update={"horizon": 20})
    variant = resolve_variant({} if noise is None else {"action.noise": noise}, task)
    policy = resolve_policy(PolicySpec(name="expert", builtin="expert"))
    return [EpisodeJob(name, task, variant, policy, i, s, episode_key(task, variant, policy, s, task.instruction,
                                                                     None, safety), task.instruction, safety=safety)
            for i, s in enumerate(seeds)]


def test_the_spec_describes_the_jobs_and_a_repeated_key_runs_once():
    jobs = _jobs("probe", [5, 9, 5]) + _jobs("probe", [5], noise=0.2)
    plan = job_campaign("probe", jobs, seed=3)
    assert [j.seed for j in plan.jobs] == [5, 9, 5] and len({j.key for j in plan.jobs}) == 3  # the repeat dropped
    spec = plan.spec
    assert (spec.name, spec.seed, spec.episodes, spec.tasks) == ("probe", 3, 2, ("metaworld/reach@1",))
    assert spec.variants == ({}, {"action.noise": 0.2}) and [p.name for p in spec.policies] == ["expert"]
    assert spec.safety is False  # shared by every job: said; a setting the jobs differ in stays unset
    mixed = job_campaign("probe", _jobs("probe", [1]) + _jobs("probe", [2], safety=True))
    assert "safety" not in mixed.spec.model_fields_set
    assert [(c["variant"], c["planned"]) for c in plan.cells()] == [("nominal", 2), ("action.noise=0.2", 1)]


def test_bad_job_lists_are_one_line():
    with pytest.raises(AssayError, match="^campaign 'x' has no job to run$"):
        job_campaign("x", [])
    with pytest.raises(AssayError, match="^jobs of campaign 'other' given to campaign 'x'$"):
        job_campaign("x", _jobs("other", [1]))


@pytest.mark.sim
def test_a_job_campaign_is_recorded_resumes_and_is_refused_under_another_spec(tmp_path):
    with Store(tmp_path / "s") as store:
        first = run_campaign(job_campaign("probe", _jobs("probe", [1, 2])), store, InlineExecutor(store.data_root))
        again = run_campaign(job_campaign("probe", _jobs("probe", [1, 2])), store, InlineExecutor(store.data_root))
        assert (first.total, first.skipped, again.skipped) == (2, 0, 2)  # resumed: nothing ran twice
        assert [c.name for c in store.catalog.campaigns()] == ["probe"]
        assert len(store.catalog.episodes(campaign="probe")) == 2
        with pytest.raises(AssayError, match="probe"):  # one name, two job lists: refused, never mixed
            run_campaign(job_campaign("probe", _jobs("probe", [1, 2], noise=0.3)), store,
                         InlineExecutor(store.data_root))


def test_jobs_of_one_cell_with_another_task_or_setting_never_share_a_batch():
    """A regression set's cases may share a cell and differ in horizon or safety: each batch is one task as run and
    one set of settings (a batch builds its environments from its first job's task)."""
    from assay.spec import batch_jobs

    long, short = _jobs("p", [1, 2]), _jobs("p", [3])
    short = [dataclasses.replace(j, task=j.task.model_copy(update={"horizon": 10})) for j in short]
    safe = [dataclasses.replace(j, safety=True) for j in _jobs("p", [4], safety=True)]
    plan = job_campaign("p", [long[0], *short, long[1], *safe])
    assert [j.seed for j in plan.jobs] == [1, 2, 3, 4]  # grouped: the two jobs of the 20-step task side by side
    batches = batch_jobs(list(plan.jobs), 4)
    assert [[j.seed for j in b] for b in batches] == [[1, 2], [3], [4]]
    assert all(len({(j.task.horizon, j.safety) for j in b}) == 1 for b in batches)
