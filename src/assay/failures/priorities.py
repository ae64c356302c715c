"""What to collect next, per policy: "collect N demos of task T in region R (why)".

A region is a factor region (the variant: ``nominal`` or ``factor=value,...``) and,
where the initial conditions separate failures from successes, an
initial-condition region inside it: the one threshold on one component of the
episode's initial-condition vector (Meta-World's ``rand_vec``: object then goal
position) that best splits the cell's episodes into a failure-heavy side and the
rest (each side at least ``MIN_SIDE`` episodes; a cell without both outcomes, or
too small, keeps all its initial conditions). Each region is scored by

* failure mass: the region's failures / the policy's episodes on that task;
* recoverability: the share of the region's failures whose point of no return was
  found on a verified replay (the expert saves them from some state, so its demos
  there teach something); failures not searched yet count as unknown, and a
  region with none searched has no score (``None``, ranked last) rather than a
  guessed one. A region whose searched failures are all beyond the expert is
  listed with score 0: the expert cannot provide its demos.

``N`` is ``DEMOS_PER_FAILURE`` per failure in the region: the recovery demos
``assay failures ponr --demos`` writes from just before each point of no return.
Rows are per policy (a random baseline's timeouts never outrank another
policy's), best first within it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from assay.failures.categories import Categorized
from assay.failures.ponr import PointOfNoReturn
from assay.metrics import success_interval
from assay.store import EpisodeRecord, Outcome

MIN_SIDE = 2  # an initial-condition region holds at least this many episodes
INIT_COMPONENTS = 6  # the first components of the initial-condition vector looked at
DEMOS_PER_FAILURE = 3  # what `assay failures ponr --demos` writes per failure (starts t-10, t-5, t)


@dataclass(frozen=True)
class Priority:
    """One (policy, task, region) cell of the failure priorities: its failures, their categories and its score."""

    policy: str
    task: str
    region: str  # the factor region, then the initial-condition region inside it
    categories: dict[str, int]
    episodes: int
    failures: int
    failure_rate: float
    interval: tuple[float, float] | None  # mid-p 95% of the region's failure rate
    mass: float
    searched: int
    recoverable: int
    recoverability: float | None
    score: float | None
    demos: int

    @property
    def advice(self) -> str:
        """The row as one sentence: what to collect, where, and why."""
        top = ", ".join(f"{c} {n}" for c, n in sorted(self.categories.items(), key=lambda kv: (-kv[1], kv[0])))
        interval = f" [{self.interval[0]:.2f}, {self.interval[1]:.2f}]" if self.interval else ""
        if self.recoverability is None:
            why = "recoverability unknown: run `assay failures ponr`"
        elif self.recoverable == 0:
            why = f"but the expert recovers none of {self.searched} searched: its demos cannot help here"
        else:
            why = f"the expert recovers {self.recoverable}/{self.searched} searched"
        return (f"collect {self.demos} demos of {self.task} in {self.region} ({self.policy} fails "
                f"{self.failures}/{self.episodes}{interval} there: {top}; {why})")

    def to_dict(self) -> dict[str, object]:
        """The row's fields and its advice, for JSON."""
        return {**asdict(self), "advice": self.advice}


def _init_vector(record: EpisodeRecord) -> np.ndarray | None:
    values = record.initial_conditions.get("rand_vec") if isinstance(record.initial_conditions, dict) else None
    if not values:
        return None
    return np.asarray(values[:INIT_COMPONENTS], dtype=np.float64)


@dataclass(frozen=True)
class InitRegion:
    """One side of a threshold on one initial-condition component: ``init[component] < threshold`` when
    ``below``, else ``>=``."""

    component: int
    threshold: float
    below: bool

    @property
    def label(self) -> str:
        """The region as text, e.g. ``init[3] >= 0.035``."""
        return f"init[{self.component}] {'<' if self.below else '>='} {self.threshold:.3f}"

    def contains(self, values: Sequence[float]) -> bool:
        """Whether an initial-condition vector lies in the region."""
        value = float(values[self.component])
        return value < self.threshold if self.below else value >= self.threshold

    def complement(self) -> InitRegion:
        """The other side of the same threshold."""
        return InitRegion(self.component, self.threshold, not self.below)

    def to_dict(self) -> dict[str, object]:
        """For JSON: the fields and the label."""
        return {"component": self.component, "threshold": self.threshold, "below": self.below, "label": self.label}


def _gini(failed: int, total: int) -> float:
    if total == 0:
        return 0.0
    rate = failed / total
    return 2 * rate * (1 - rate)


def _outcome_matrix(records: Sequence[EpisodeRecord]) -> tuple[np.ndarray, np.ndarray] | None:
    """(initial conditions (n, d), failed (n,)) of episodes that can be split: every one with initial
    conditions, at least ``2 * MIN_SIDE`` of them, and both outcomes present; else None."""
    vectors = [_init_vector(r) for r in records]
    if any(v is None for v in vectors) or len(records) < 2 * MIN_SIDE:
        return None
    failed = np.array([r.outcome is not Outcome.SUCCESS for r in records])
    if failed.all() or not failed.any():
        return None
    return np.stack([v for v in vectors if v is not None]), failed


def _candidate_splits(matrix: np.ndarray) -> Iterator[tuple[int, float, np.ndarray]]:
    """(component, threshold, below-mask) of every one-threshold split, midway between neighbouring
    values, that leaves at least ``MIN_SIDE`` episodes on each side; components and thresholds in order."""
    for component in range(matrix.shape[1]):
        values = np.unique(matrix[:, component])
        for low, high in zip(values[:-1], values[1:], strict=True):
            threshold = float((low + high) / 2)
            below = matrix[:, component] < threshold
            if below.sum() >= MIN_SIDE and (~below).sum() >= MIN_SIDE:
                yield component, threshold, below


def failure_region(records: Sequence[EpisodeRecord]) -> InitRegion | None:
    """The failure-heavy side of the one-threshold split of the episodes' initial conditions that most
    reduces the Gini impurity of their outcomes (a CART decision stump; each side at least ``MIN_SIDE``
    episodes), or None when the outcomes do not separate (no failure, no success, too few episodes, or no
    initial conditions recorded). Unlike the largest gap in failure rate (:func:`split_initial_conditions`),
    the impurity criterion weighs each side by its size, so two failures at an extreme cannot outvote a
    region holding most of them."""
    found = _outcome_matrix(records)
    if found is None:
        return None
    matrix, failed = found
    n, parent = len(failed), _gini(int(failed.sum()), len(failed))
    best: tuple[float, int, float, bool] | None = None
    for component, threshold, below in _candidate_splits(matrix):
        n_below = int(below.sum())
        f_below, f_above = int(failed[below].sum()), int(failed[~below].sum())
        gain = parent - (n_below * _gini(f_below, n_below) + (n - n_below) * _gini(f_above, n - n_below)) / n
        if best is None or gain > best[0] + 1e-12:
            best = (gain, component, threshold, f_below / n_below > f_above / (n - n_below))
    if best is None or best[0] <= 1e-12:
        return None
    return InitRegion(best[1], best[2], best[3])


def component_name(task_id: str, component: int) -> str:
    """What component ``component`` of a task's recorded initial conditions is (its backend's
    ``initial_condition_names``: ``object y``), else ``init[component]``."""
    from assay.errors import SpecError
    from assay.sim import backend

    try:
        names = backend(task_id.split("/", 1)[0]).initial_condition_names
    except SpecError:  # a task of no registered backend: its components by index
        names = ()
    return names[component] if component < len(names) else f"init[{component}]"


def split_initial_conditions(records: Sequence[EpisodeRecord]) -> tuple[str, list[EpisodeRecord]] | None:
    """(label, episodes) of the failure-heaviest side of the best one-threshold split, or None."""
    found = _outcome_matrix(records)
    if found is None:
        return None
    matrix, failed = found
    best: tuple[float, int, float, bool] | None = None
    for component, threshold, below in _candidate_splits(matrix):
        rate_below, rate_above = failed[below].mean(), failed[~below].mean()
        gap = abs(rate_below - rate_above)
        if best is None or gap > best[0] + 1e-12:
            best = (gap, component, threshold, bool(rate_below > rate_above))
    if best is None or best[0] <= 0:
        return None
    _, component, threshold, below_worse = best
    side = matrix[:, component] < threshold if below_worse else matrix[:, component] >= threshold
    label = f"{component_name(records[0].task_id, component)} {'<' if below_worse else '>='} {threshold:.3f}"
    return label, [r for r, inside in zip(records, side, strict=True) if inside]


def category_label(found: Categorized | None) -> str:
    """A failure's category as the tables print it: its category; ``no events`` when its backend records none
    (categories are read from events, so none can be said); ``not mined`` when ``assay failures mine`` has not
    looked at it; ``uncategorized`` only when events were read and no rule matched."""
    if found is None:
        return "not mined"
    if found.category is not None:
        return found.category.value
    return "no events" if "missing_events" in found.evidence else "uncategorized"


def priorities(records: list[EpisodeRecord], categories: dict[str, Categorized],
               ponrs: dict[str, PointOfNoReturn]) -> list[Priority]:
    """Rank the (policy, task, region) cells by how much fixing their failures would gain, heaviest first."""
    cells: dict[tuple[str, str, str], list[EpisodeRecord]] = defaultdict(list)
    per_task: dict[tuple[str, str], int] = defaultdict(int)
    for record in records:
        if record.outcome is Outcome.ERROR:
            continue
        cells[(record.policy_name, record.task_id, record.variant_name)].append(record)
        per_task[(record.policy_name, record.task_id)] += 1
    rows = []
    for (policy, task, variant), members in sorted(cells.items()):
        split = split_initial_conditions(members)
        region, inside = (f"{variant}, {split[0]}", split[1]) if split else \
            (f"{variant} (all initial conditions)", members)
        failed = [r for r in inside if r.outcome is not Outcome.SUCCESS]
        if not failed:
            continue
        counts: dict[str, int] = defaultdict(int)
        for r in failed:
            counts[category_label(categories.get(r.key))] += 1
        searched = [ponrs[r.key] for r in failed if r.key in ponrs and ponrs[r.key].verified is not False]
        recoverable = sum(p.t is not None for p in searched)
        recoverability = recoverable / len(searched) if searched else None
        mass = len(failed) / per_task[(policy, task)]
        interval = success_interval(len(failed), len(inside))
        rows.append(Priority(policy, task, region, dict(counts), len(inside), len(failed), len(failed) / len(inside),
                             None if interval is None else (interval.low, interval.high), mass, len(searched),
                             recoverable, recoverability, None if recoverability is None else mass * recoverability,
                             DEMOS_PER_FAILURE * len(failed)))
    return sorted(rows, key=lambda p: (p.policy, p.score is None, -(p.score or 0.0), -p.mass, p.task, p.region))
