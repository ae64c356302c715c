"""Routing accuracy of an instruction-routed policy, as a metric beside success.

A routing policy (the built-in ``router``) records, per episode, the skill it chose
(``policy_info["chosen_skill"]``). Routing is *correct* when the chosen skill is the
episode's own task (Meta-World: ``metaworld/<name>@v`` ↔ ``<name>-v3``). Success hides
a misroute when the wrong skill happens to succeed or both fail; accuracy is reported
on its own, per (policy, task, variant), with the default binomial interval, the
success rate of correctly routed and misrouted episodes, and where the misroutes went.
``error`` episodes are left out, as everywhere.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from assay.metrics.rates import success_interval
from assay.serialize import DictMixin
from assay.store import EpisodeRecord, Outcome


@dataclass(frozen=True)
class RoutingRow(DictMixin):
    """Routing of one (policy, task, variant) cell."""

    policy: str
    task: str
    variant: str
    episodes: int
    routed_correctly: int
    accuracy: float
    ci_low: float
    ci_high: float
    success_when_correct: float | None
    success_when_misrouted: float | None
    misrouted_to: dict[str, int]  # chosen skill -> episodes


def task_skill(task_id: str) -> str:
    """The skill name a router should choose for a task id (``metaworld/reach@1`` -> ``reach-v3``)."""
    name = task_id.split("/", 1)[-1].split("@", 1)[0]
    return f"{name}-v3" if task_id.startswith("metaworld/") else name


def routing_table(records: Iterable[EpisodeRecord]) -> list[RoutingRow]:
    """One row per (policy, task, variant) whose episodes record a chosen skill; sorted."""
    counted: Counter[tuple[tuple[str, str, str], str, bool]] = Counter()
    for record in records:
        chosen = record.policy_info.get("chosen_skill")
        if chosen is None or record.outcome is Outcome.ERROR:
            continue
        counted[((record.policy_name, record.task_id, record.variant_name), str(chosen),
                 record.outcome is Outcome.SUCCESS)] += 1
    return routing_rows([(cell, skill, success, n) for (cell, skill, success), n in counted.items()])


def routing_rows(totals: Iterable[tuple[tuple[str, str, str], str, bool, int]]) -> list[RoutingRow]:
    """:func:`routing_table` from counts of (cell, chosen skill, success) (``aggregates.routing_totals``)."""
    cells: dict[tuple[str, str, str], list[tuple[str, bool, int]]] = defaultdict(list)
    for cell, skill, success, n in totals:
        cells[cell].append((skill, success, n))
    rows = []
    for (policy, task, variant), counts in sorted(cells.items()):
        own = task_skill(task)
        episodes = sum(n for _, _, n in counts)
        right = sum(n for skill, _, n in counts if skill == own)
        right_won = sum(n for skill, ok, n in counts if skill == own and ok)
        wrong = episodes - right
        wrong_won = sum(n for skill, ok, n in counts if skill != own and ok)
        misrouted: Counter[str] = Counter()
        for skill, _, n in counts:
            if skill != own:
                misrouted[skill] += n
        interval = success_interval(right, episodes)
        assert interval is not None
        rows.append(RoutingRow(policy, task, variant, episodes, right, right / episodes, interval.low, interval.high,
                               right_won / right if right else None, wrong_won / wrong if wrong else None,
                               dict(sorted(misrouted.items()))))
    return rows
