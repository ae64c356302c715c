"""What a campaign run is made of and what it returns: the resolved plan and the summary of a run.

Plain records below the campaign runner and the adaptive rounds, which both build on them
(so neither imports the other's module for its types).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from assay.spec import CampaignSpec, EpisodeJob, ResolvedPolicy, TaskSpec, Variant
from assay.store import Outcome


@dataclass(frozen=True)
class CampaignPlan:
    """A resolved campaign: its spec, tasks (as run), policies (with versions), variants and every episode job."""

    spec: CampaignSpec
    tasks: tuple[TaskSpec, ...]
    policies: tuple[ResolvedPolicy, ...]
    variants: tuple[Variant, ...]
    jobs: tuple[EpisodeJob, ...]

    def resolved(self) -> dict[str, Any]:
        """What is saved beside the results: the spec plus everything resolved from it."""
        return {
            "campaign": self.spec.dump(),
            "tasks": [{"id": t.id, "hash": t.content_hash(), "spec": t.model_dump(mode="json")} for t in self.tasks],
            "policies": [{"name": p.name, "version": p.version,
                          "spec": p.spec.model_dump(mode="json")} for p in self.policies],
            "variants": [{"key": v.key, "name": v.name, "spec": v.model_dump(mode="json")} for v in self.variants],
            "jobs": len(self.jobs),
            "cells": self.cells(),
        }

    def cells(self) -> list[dict[str, Any]]:
        """Episodes planned per (policy, task, variant) cell, in plan order: what results count completeness
        against (``assay.metrics.completeness``)."""
        by_object: dict[tuple[str, str, int], list[Any]] = {}  # a plan's jobs share their Variant objects: each
        for job in self.jobs:  # variant's name (made from its perturbations) is made once, not once per job
            cell = (job.policy.name, job.task.id, id(job.variant))
            found = by_object.get(cell)
            if found is None:
                by_object[cell] = [job.variant, 1]
            else:
                found[1] += 1
        counts: dict[tuple[str, str, str], int] = {}
        for (policy, task, _), (variant, n) in by_object.items():
            cell_name = (policy, task, variant.name)
            counts[cell_name] = counts.get(cell_name, 0) + n
        return [{"policy": p, "task": t, "variant": v, "planned": n} for (p, t, v), n in counts.items()]


@dataclass
class CampaignSummary:
    """What a campaign run did: episodes planned, skipped as done, run, run by another driver meanwhile, repaired and
    retried, and outcome counts."""

    name: str
    total: int
    skipped: int
    ran: int = 0
    repaired: int = 0  # finished episodes whose step file was missing or corrupted: forgotten and re-run
    retried: int = 0  # episodes recorded as error, re-run because retry_errors was asked
    elsewhere: int = 0  # pending episodes another driver on the same store ran meanwhile (job leases)
    outcomes: dict[str, int] = field(default_factory=lambda: {o.value: 0 for o in Outcome})
    errors: dict[str, ErrorCount] = field(default_factory=dict)  # this run's error episodes by reason (error_kind)
    sizing: dict[str, Any] | None = None  # what --workers auto / envs_per_worker: auto chose (assay.run.autosize)

    def count_error(self, policy: str, reason: str) -> None:
        """One more ``error`` episode of ``policy`` ran now, for ``reason``."""
        kind = error_kind(reason)
        found = self.errors.setdefault(kind, ErrorCount(0, reason, policy))
        found.count += 1


@dataclass
class ErrorCount:
    """How many of a run's error episodes share one kind of reason, and the first one's reason and policy."""

    count: int
    first: str
    policy: str


_STEP = re.compile(r"^step \d+: ")


def error_kind(reason: str) -> str:
    """What kind of fault an ``error`` episode's reason names: its words before the first colon, without the step it
    happened at (``step 3: invalid action: shape (5,), ...`` -> ``invalid action``; ``policy raised ValueError: ...``
    -> ``policy raised ValueError``; ``wall_timeout: ...`` -> ``wall_timeout``)."""
    text = _STEP.sub("", reason.strip())
    return text.split(":", 1)[0].strip() or "no reason recorded"
