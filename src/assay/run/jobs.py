"""Campaigns of explicit jobs: episodes a command chooses itself, run by the one campaign loop.

A bisection's probe levels (``assay boundary``), a failure's neighbourhood (``assay failures resample``) and a
regression set's cases (``assay regress run``) are not a grid of tasks x variants x seeds, so they are not
planned from a spec. They still run as campaigns: :func:`job_campaign` wraps the jobs in a
:class:`~assay.run.plan.CampaignPlan` whose spec describes them (the tasks, policies and variants they use,
the largest cell as ``episodes``, the run settings they share), and :func:`~assay.run.campaign.run_campaign`
runs it with job leases, resume, batched commits and the fault policy, and records the campaign, so that
``assay results``, the report and the dashboard see these episodes as they see any campaign's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from assay.annotations import public_api
from assay.errors import AssayError
from assay.run.plan import CampaignPlan
from assay.spec import CampaignSpec, EpisodeJob, TaskSpec, Variant
from assay.spec.campaign import ResolvedPolicy


def _request(variant: Variant) -> dict[str, object]:
    """The ``{factor: value}`` request that resolves to ``variant`` (nominal: ``{}``)."""
    return {p.factor: p.value for p in variant.perturbations}


@public_api
def job_campaign(name: str, jobs: Sequence[EpisodeJob], seed: int = 0, envs_per_worker: int = 4) -> CampaignPlan:
    """A campaign named ``name`` that runs exactly ``jobs`` (each job's ``campaign`` must be ``name``; a job whose
    key another job of the list has is run once; jobs that may share a lockstep batch, one cell, task and run
    settings, are put side by side). Its spec names the tasks, policies and variants the jobs use,
    the largest (policy, task, variant) cell as ``episodes`` and the run settings every job shares; ``seed`` is
    recorded as the campaign's (the jobs carry their own seeds)."""
    if not jobs:
        raise AssayError(f"campaign {name!r} has no job to run")
    strangers = sorted({job.campaign for job in jobs} - {name})
    if strangers:
        raise AssayError(f"jobs of campaign {', '.join(map(repr, strangers))} given to campaign {name!r}")
    first: dict[str, EpisodeJob] = {}
    for job in jobs:
        first.setdefault(job.key, job)
    groups: dict[tuple[Any, ...], list[EpisodeJob]] = {}  # jobs that may share a lockstep batch, side by side
    for job in first.values():
        groups.setdefault((job.cell, job.task.content_hash(), job.replan_every, job.pipeline, job.safety,
                           job.video_fps, job.trace, job.simulator), []).append(job)
    unique = tuple(job for group in groups.values() for job in group)  # the first job of each key, grouped
    tasks: dict[tuple[str, str], TaskSpec] = {}
    policies: dict[str, ResolvedPolicy] = {}
    variants: dict[str, Variant] = {}
    for job in unique:
        tasks.setdefault((job.task.id, job.task.content_hash()), job.task)
        policies.setdefault(job.policy.name, job.policy)
        variants.setdefault(job.variant.key, job.variant)
    shared: dict[str, Any] = {field: values.pop() for field, values in (
        ("replan_every", {job.replan_every for job in unique}), ("pipeline", {job.pipeline for job in unique}),
        ("safety", {job.safety for job in unique})) if len(values) == 1}  # settings the jobs differ in stay unset
    spec = CampaignSpec.model_validate({
        "name": name, "seed": seed, "episodes": max(Counter(job.cell for job in unique).values()),
        "tasks": tuple(dict.fromkeys(task_id for task_id, _ in tasks)),
        "policies": tuple(policy.spec for policy in policies.values()),
        "variants": tuple(_request(variant) for variant in variants.values()), "envs_per_worker": envs_per_worker,
        **shared})
    return CampaignPlan(spec, tuple(tasks.values()), tuple(policies.values()), tuple(variants.values()), unique)
