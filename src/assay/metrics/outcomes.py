"""Episode outcomes laid out for paired statistics: per task, a seed × policy table, held as counted patterns.

The core gives every policy the same seeds for a task (and every variant the same
seeds), so the episodes of two policies pair up by ``(task, variant, seed)``. For
each task the table's rows are those ``(variant, seed)`` keys and its columns are
policies; a cell is 1.0 (success), 0.0 (failure or timeout) or NaN (an ``error``
outcome, or no episode for that key). ``error`` episodes never count as failures:
they leave the denominator and are counted apart.

Every paired statistic depends on the rows only through how many rows show each pattern
of values (row order never matters), so a task's table is held as its distinct rows
(``patterns``) and how many rows show each (``weights``), which the database counts
(``assay.store.aggregates.seed_patterns``) and :func:`patterns_of` counts from records the
same way: a million episodes are a few hundred patterns. ``values`` expands them, in a fixed
order (the patterns sorted), for the statistics that want the table itself.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from assay.errors import AssayError, DuplicateEpisodes
from assay.store import Catalog, EpisodeRecord, Outcome
from assay.store.aggregates import (
    ERRORED,
    FAILED,
    MISSING,
    SUCCESS,
    CellTotals,
    Pattern,
    seed_patterns,
)

_CELL = {SUCCESS: 1, FAILED: 0, MISSING: -1, ERRORED: -1}  # a table's cell: 1, 0, or -1 for NaN (not scored)


@dataclass(frozen=True)
class TaskOutcomes:
    """One task's seed × policy table of outcomes (1 success, 0 failure or timeout, NaN not run or error), as
    its distinct rows and how many seed rows show each."""

    task: str
    policies: tuple[str, ...]
    patterns: np.ndarray  # (distinct rows, policies): 1.0 / 0.0 / NaN, sorted
    weights: np.ndarray  # (distinct rows,): seed rows showing each pattern
    errors: tuple[int, ...]  # error episodes per policy

    @functools.cached_property
    def values(self) -> np.ndarray:
        """The table itself, (rows, policies): each pattern repeated by its weight."""
        table = np.repeat(self.patterns, self.weights, axis=0)
        table.setflags(write=False)
        return table

    def column(self, policy: str) -> np.ndarray:
        """The outcomes of one policy, one value per row."""
        return self.values[:, self.policies.index(policy)]

    def counts(self, policy: str) -> tuple[int, int]:
        """(successes, scored episodes) of one policy on this task."""
        column = self.patterns[:, self.policies.index(policy)]
        scored = ~np.isnan(column)
        return int(self.weights[scored & (column == 1.0)].sum()), int(self.weights[scored].sum())


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
        wanted = set(match_tasks(tasks, {r.task_id for r in records}))
        records = [r for r in records if r.task_id in wanted]
    if not records:
        raise AssayError("no episodes to analyse")
    policies = tuple(sorted({r.policy_name for r in records}))
    try:
        return grid_of(patterns_of(records, policies), policies)
    except DuplicateEpisodes:
        raise AssayError("two episodes of one policy on one task, variant and seed; analyse one campaign at a "
                         "time") from None


def match_tasks(tasks: Sequence[str], known: Iterable[str]) -> list[str]:
    """The known task ids that ``tasks`` name (an id without ``@version`` matches every version), sorted;
    AssayError naming the valid ones for a name that matches none."""
    known = sorted(set(known))
    wanted: set[str] = set()
    for ref in tasks:
        hits = [t for t in known if t == ref or t.split("@")[0] == ref]
        if not hits:
            raise AssayError(f"unknown task {ref!r}; valid: {', '.join(known)}")
        wanted.update(hits)
    return sorted(wanted)


def _code(outcome: Outcome) -> int:
    return SUCCESS if outcome is Outcome.SUCCESS else ERRORED if outcome is Outcome.ERROR else FAILED


def patterns_of(records: Iterable[EpisodeRecord], policies: Sequence[str], across: str = "policy") -> list[Pattern]:
    """What ``assay.store.aggregates.seed_patterns`` counts in the database, counted from records (same order).

    ``across="policy"``: rows (task, variant key, seed), one column per policy; ``across="variant"``: rows
    (policy, task, seed), one column per variant key (``policies`` then names those keys).
    """
    index = {name: i for i, name in enumerate(policies)}
    rows: dict[tuple[str, str, int], list[int]] = {}
    for record in records:
        column = record.policy_name if across == "policy" else record.variant_key
        if column not in index:
            continue
        group = (record.task_id, record.variant_key) if across == "policy" else (record.policy_name, record.task_id)
        codes = rows.setdefault((*group, record.seed), [MISSING] * len(policies))
        if codes[index[column]] != MISSING:
            raise DuplicateEpisodes(f"two episodes of one {across} on one paired row of {group[0]} / {group[1]}")
        codes[index[column]] = _code(record.outcome)
    counted: dict[tuple[tuple[str, str], tuple[int, ...]], int] = defaultdict(int)
    for (first, second, _), codes in rows.items():
        counted[((first, second), tuple(codes))] += 1
    return [Pattern(group, codes, n) for (group, codes), n in sorted(counted.items())]


def grid_of(patterns: Iterable[Pattern], policies: Sequence[str]) -> OutcomeGrid:
    """The grid of counted patterns across ``policies`` (from the database or :func:`patterns_of`); a task's
    rows of every variant key form its table."""
    by_task: dict[str, dict[tuple[int, ...], int]] = defaultdict(lambda: defaultdict(int))
    errors: dict[str, list[int]] = defaultdict(lambda: [0] * len(policies))
    for pattern in patterns:
        task = pattern.group[0]
        by_task[task][tuple(_CELL[c] for c in pattern.codes)] += pattern.count
        for j, code in enumerate(pattern.codes):
            if code == ERRORED:
                errors[task][j] += pattern.count
    tasks = []
    for task in sorted(by_task):
        order = sorted(by_task[task])
        table = np.array(order, dtype=float).reshape(len(order), len(policies))
        table[table < 0] = np.nan
        weights = np.array([by_task[task][row] for row in order], dtype=np.int64)
        table.setflags(write=False)
        weights.setflags(write=False)
        tasks.append(TaskOutcomes(task, tuple(policies), table, weights, tuple(errors[task])))
    return OutcomeGrid(tuple(tasks), tuple(policies))


def stored_grid(catalog: Catalog, campaign: str, totals: Iterable[CellTotals],
                tasks: Sequence[str] | None = None) -> OutcomeGrid:
    """The grid of a campaign's episodes in ``totals``' cells (their variants; these task ids, or all), from
    the database's seed patterns (``assay.store.aggregates.seed_patterns``): what :func:`outcome_grid` gives
    for the same episodes' records."""
    return grid_of(*_stored_patterns(catalog, campaign, totals, tasks))


def _stored_patterns(catalog: Catalog, campaign: str, totals: Iterable[CellTotals],
                     tasks: Sequence[str] | None) -> tuple[list[Pattern], tuple[str, ...]]:
    cells = [t for t in totals if tasks is None or t.task in set(tasks)]
    if not cells:
        raise AssayError("no episodes to analyse")
    policies = tuple(sorted({c.policy for c in cells}))
    try:
        patterns = seed_patterns(catalog, campaign, "policy", policies, sorted({c.variant for c in cells}),
                                 sorted({c.task for c in cells}))
    except DuplicateEpisodes:
        raise AssayError("two episodes of one policy on one task, variant and seed; analyse one campaign at a "
                         "time") from None
    return patterns, policies


@dataclass(frozen=True)
class SharedRows:
    """The seed rows a ranking is over: those every ranked policy ran (an ``error`` is a run; only a missing episode
    is not), of all the rows any policy ran. A policy is ranked when it ran some seed of every task."""

    ranked_on: int
    recorded: int
    policies: tuple[str, ...]  # the ranked policies
    ran: dict[str, int]  # seed rows each policy ran
    unshared_tasks: tuple[str, ...]  # tasks on which the ranked policies share no seed row at all

    @property
    def equal(self) -> bool:
        """Whether every ranked policy ran every recorded row (cells of equal completeness)."""
        return self.ranked_on == self.recorded

    def describe(self) -> str:
        """How many rows the ranking is over, and how many each policy ran."""
        each = ", ".join(f"{policy} ran {n}" for policy, n in self.ran.items())
        return (f"ranked on the {self.ranked_on} seed rows every ranked policy ran (of {self.recorded} recorded; "
                f"{each})")

    def to_dict(self) -> dict[str, object]:
        """The counts for a JSON document."""
        return {"ranked_on": self.ranked_on, "recorded": self.recorded, "policies": list(self.policies)}


def shared_patterns(patterns: Sequence[Pattern], policies: Sequence[str]) -> tuple[list[Pattern], SharedRows]:
    """The patterns of the seed rows every ranked policy ran, and what that leaves (:class:`SharedRows`)."""
    tasks = sorted({p.group[0] for p in patterns})
    ran: dict[str, set[int]] = {task: set() for task in tasks}
    for pattern in patterns:
        ran[pattern.group[0]].update(j for j, code in enumerate(pattern.codes) if code != MISSING)
    ranked = [j for j in range(len(policies)) if all(j in ran[task] for task in tasks)]
    kept = [p for p in patterns if all(p.codes[j] != MISSING for j in ranked)]
    covered = {p.group[0] for p in kept}
    per_policy = {name: sum(p.count for p in patterns if p.codes[j] != MISSING) for j, name in enumerate(policies)}
    return kept, SharedRows(sum(p.count for p in kept), sum(p.count for p in patterns),
                            tuple(policies[j] for j in ranked), per_policy,
                            tuple(task for task in tasks if task not in covered))


def stored_shared_grid(catalog: Catalog, campaign: str, totals: Iterable[CellTotals],
                       tasks: Sequence[str] | None = None) -> tuple[OutcomeGrid, SharedRows]:
    """:func:`stored_grid` over the seed rows every ranked policy ran (:func:`shared_patterns`), and how many."""
    patterns, policies = _stored_patterns(catalog, campaign, totals, tasks)
    kept, shared = shared_patterns(patterns, policies)
    return grid_of(kept, policies), shared
