"""Episode outcomes laid out for paired statistics: per task, a seed × policy table.

The core gives every policy the same seeds for a task (and every variant the same
seeds), so the episodes of two policies pair up by ``(task, variant, seed)``. For
each task this module builds a table whose rows are those ``(variant, seed)``
keys and whose columns are policies; a cell is 1.0 (success), 0.0 (failure or
timeout) or NaN (an ``error`` outcome, or no episode for that key). ``error``
episodes never count as failures: they leave the denominator and are counted apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from assay.errors import AssayError
from assay.store import EpisodeRecord, Outcome


@dataclass(frozen=True)
class TaskOutcomes:
    """One task's seed × policy table of outcomes (1 success, 0 failure or timeout, NaN not run or error)."""

    task: str
    keys: tuple[tuple[str, int], ...]  # (variant key, seed) per row
    policies: tuple[str, ...]
    values: np.ndarray  # (rows, policies): 1.0 / 0.0 / NaN
    errors: tuple[int, ...]  # error episodes per policy

    def column(self, policy: str) -> np.ndarray:
        """The outcomes of one policy, one value per row."""
        return self.values[:, self.policies.index(policy)]

    def counts(self, policy: str) -> tuple[int, int]:
        """(successes, scored episodes) of one policy on this task."""
        column = self.column(policy)
        scored = column[~np.isnan(column)]
        return int(scored.sum()), int(scored.size)


@dataclass(frozen=True)
class OutcomeGrid:
    """Every task's seed × policy table; tasks and policies sorted."""

    tasks: tuple[TaskOutcomes, ...]
    policies: tuple[str, ...]

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The ids of the grid's tasks, in order."""
        return tuple(t.task for t in self.tasks)

    def require(self, policies: Sequence[str]) -> None:
        """Refuse policies the grid does not hold, naming the valid ones."""
        unknown = [p for p in policies if p not in self.policies]
        if unknown:
            raise AssayError(f"unknown policy {', '.join(map(repr, unknown))}; valid: {', '.join(self.policies)}")


def outcome_grid(
    records: Iterable[EpisodeRecord], tasks: Sequence[str] | None = None, variant: str | None = None
) -> OutcomeGrid:
    """Lay out ``records`` (one campaign's episodes) as per-task paired tables.

    ``tasks`` keeps only those task ids (an id without ``@version`` matches every
    version); ``variant`` keeps only episodes of that variant name.
    """
    records = list(records)
    if variant is not None:
        names = sorted({r.variant_name for r in records})
        if variant not in names:
            raise AssayError(f"unknown variant {variant!r}; valid: {', '.join(names)}")
        records = [r for r in records if r.variant_name == variant]
    if tasks:
        known = sorted({r.task_id for r in records})
        wanted = set()
        for ref in tasks:
            hits = [t for t in known if t == ref or t.split("@")[0] == ref]
            if not hits:
                raise AssayError(f"unknown task {ref!r}; valid: {', '.join(known)}")
            wanted.update(hits)
        records = [r for r in records if r.task_id in wanted]
    if not records:
        raise AssayError("no episodes to analyse")
    policies = tuple(sorted({r.policy_name for r in records}))
    by_task: dict[str, dict[tuple[str, int], dict[str, EpisodeRecord]]] = defaultdict(lambda: defaultdict(dict))
    for record in records:
        row = by_task[record.task_id][(record.variant_key, record.seed)]
        if record.policy_name in row:
            raise AssayError(
                f"two episodes of policy {record.policy_name!r} on {record.task_id} seed {record.seed}; "
                "analyse one campaign at a time")
        row[record.policy_name] = record
    return OutcomeGrid(tuple(_task(task, by_task[task], policies) for task in sorted(by_task)), policies)


def _task(task: str, rows: dict[tuple[str, int], dict[str, EpisodeRecord]], policies: tuple[str, ...]) -> TaskOutcomes:
    keys = tuple(sorted(rows))
    values = np.full((len(keys), len(policies)), np.nan)
    errors = [0] * len(policies)
    for i, key in enumerate(keys):
        for j, policy in enumerate(policies):
            record = rows[key].get(policy)
            if record is None:
                continue
            if record.outcome is Outcome.ERROR:
                errors[j] += 1
            else:
                values[i, j] = 1.0 if record.outcome is Outcome.SUCCESS else 0.0
    values.setflags(write=False)
    return TaskOutcomes(task, keys, policies, values, tuple(errors))
