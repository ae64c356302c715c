"""Campaign orchestration: resolve, plan, skip what is done, execute, catalog.

Rerunning the same campaign resumes it: jobs whose key is already in the
catalog are skipped (and linked to this campaign if another campaign ran them),
so nothing is ever run twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from assay.errors import SpecError
from assay.policies import check_policy_contract, check_supports, resolve_policy
from assay.run.executors import Executor
from assay.sim import TaskRegistry, default_registry
from assay.spec import CampaignSpec, EpisodeJob, ResolvedPolicy, TaskSpec, batch_jobs, plan
from assay.store import EpisodeRecord, Outcome, Store


@dataclass(frozen=True)
class CampaignPlan:
    spec: CampaignSpec
    tasks: tuple[TaskSpec, ...]
    policies: tuple[ResolvedPolicy, ...]
    jobs: tuple[EpisodeJob, ...]

    def resolved(self) -> dict[str, Any]:
        """What is saved beside the results: the spec plus everything resolved from it."""
        return {
            "campaign": self.spec.model_dump(mode="json"),
            "tasks": [{"id": t.id, "hash": t.content_hash(), "spec": t.model_dump(mode="json")} for t in self.tasks],
            "policies": [{"name": p.name, "version": p.version, "spec": p.spec.model_dump(mode="json")} for p in self.policies],
            "jobs": len(self.jobs),
        }


@dataclass
class CampaignSummary:
    name: str
    total: int
    skipped: int
    ran: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: {o.value: 0 for o in Outcome})


def prepare_campaign(spec: CampaignSpec, registry: TaskRegistry | None = None) -> CampaignPlan:
    """Resolve tasks and policies and plan every job; all spec errors surface here, before any run.

    Each policy's contract is checked against each task: a mismatch that would give
    garbage raises ContractError with the diff, a range mismatch warns (ContractWarning).
    """
    registry = registry or default_registry()
    if len(set(spec.tasks)) != len(spec.tasks):
        raise SpecError(f"campaign {spec.name!r}: a task is listed twice in 'tasks'")
    tasks = tuple(registry.get(ref) for ref in spec.tasks)
    policies = tuple(resolve_policy(p) for p in spec.policies)
    for policy in policies:
        for task in tasks:
            check_supports(policy, task)
            check_policy_contract(policy, task)  # the handshake: before episode 1, never during
    return CampaignPlan(spec, tasks, policies, tuple(plan(spec, list(tasks), list(policies))))


def run_campaign(
    campaign: CampaignPlan,
    store: Store,
    executor: Executor,
    on_start: Callable[[CampaignSummary], None] | None = None,
    on_record: Callable[[EpisodeRecord], None] | None = None,
) -> CampaignSummary:
    spec = campaign.spec
    existing = {c["name"]: c for c in store.catalog.campaigns()}
    if spec.name in existing and existing[spec.name]["spec_hash"] != spec.content_hash():
        raise SpecError(
            f"campaign {spec.name!r} already exists in {store.root} with a different spec; give the changed "
            "campaign a new name (episodes it shares with the old one are reused, not rerun)"
        )
    store.save_resolved_campaign(spec.name, spec.content_hash(), campaign.resolved())
    store.clean_temporaries()
    done = store.catalog.existing_keys(job.key for job in campaign.jobs)
    store.catalog.link(spec.name, [(job.key, job.policy.name) for job in campaign.jobs if job.key in done])
    pending = [job for job in campaign.jobs if job.key not in done]
    summary = CampaignSummary(spec.name, total=len(campaign.jobs), skipped=len(campaign.jobs) - len(pending))
    if on_start is not None:
        on_start(summary)
    for record in executor.run(batch_jobs(pending, spec.envs_per_worker)):
        store.catalog.add(record)
        summary.ran += 1
        summary.outcomes[record.outcome.value] += 1
        if on_record is not None:
            on_record(record)
    return summary
