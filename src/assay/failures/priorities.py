"""What to collect next: (task, factor region, category) ranked by failure mass x recoverability.

* failure mass: the group's failures / all episodes considered (how much success is lost there);
* recoverability: the share of the group's failures with a point of no return found
  (the expert could still save them, so demonstrations there teach something); failures
  whose point of no return has not been searched count as unknown, and a group with none
  searched gets no score (``None``, ranked last) rather than a guessed one.

The factor region is the variant's name (``nominal`` or ``factor=value,...``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from assay.failures.categories import Categorized
from assay.failures.ponr import PointOfNoReturn
from assay.store import EpisodeRecord, Outcome


@dataclass(frozen=True)
class Priority:
    task: str
    region: str
    category: str
    failures: int
    mass: float
    searched: int
    recoverable: int
    recoverability: float | None
    score: float | None


def priorities(records: list[EpisodeRecord], categories: dict[str, Categorized],
               ponrs: dict[str, PointOfNoReturn]) -> list[Priority]:
    groups: dict[tuple[str, str, str], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        if record.outcome is Outcome.SUCCESS:
            continue
        found = categories.get(record.key)
        category = found.category.value if found is not None and found.category is not None else "uncategorized"
        groups[(record.task_id, record.variant_name, category)].append(record)
    total = max(1, len(records))
    rows = []
    for (task, region, category), members in groups.items():
        searched = [ponrs[r.key] for r in members if r.key in ponrs]
        recoverable = sum(p.t is not None for p in searched)
        recoverability = recoverable / len(searched) if searched else None
        mass = len(members) / total
        rows.append(Priority(task, region, category, len(members), mass, len(searched), recoverable, recoverability,
                             None if recoverability is None else mass * recoverability))
    return sorted(rows, key=lambda p: (p.score is None, -(p.score or 0.0), -p.mass, p.task, p.region, p.category))
