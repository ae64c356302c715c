"""Ranking stability: do two leaderboards (two seed sets, variants or twin versions) agree?

The first leaderboard is the reference. Per task and averaged over tasks, the
statistics of :mod:`assay.metrics.correlation` (Kendall τ and MMRV above all,
Pearson and Spearman beside them) with their bootstrap intervals; plus the same
figures on the suite scores (mean over the common tasks of each policy's rates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from assay.metrics.correlation import STATISTICS, CorrelationReport, correlate, correlation
from assay.metrics.results_csv import RateEntry
from assay.serialize import DictMixin


class SuiteStatistic(TypedDict):
    """One statistic on the suite scores: its value, or None and the reason it is undefined."""

    value: float | None
    reason: str | None


@dataclass(frozen=True)
class Stability(DictMixin):
    """The correlation report with the suite-level correlation over the policies common to every task."""

    report: CorrelationReport
    suite_policies: tuple[str, ...]
    suite_reference: tuple[float, ...]
    suite_other: tuple[float, ...]
    suite: dict[str, SuiteStatistic]  # statistic -> its value or the reason it has none


def stability(reference: Sequence[RateEntry], other: Sequence[RateEntry], labels: tuple[str, str],
              confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0) -> Stability:
    """Correlate per task, then over suite scores (the mean over the tasks every policy ran)."""
    report = correlate(reference, other, labels, confidence, n_resamples, seed)
    # Suite scores over the policies present on every common task.
    common = set(report.tasks[0].policies) if report.tasks else set()
    for task in report.tasks:
        common &= set(task.policies)
    policies = tuple(sorted(common))
    ref = tuple(sum(t.reference_rates[t.policies.index(p)] for t in report.tasks) / len(report.tasks) for p in policies)
    oth = tuple(sum(t.other_rates[t.policies.index(p)] for t in report.tasks) / len(report.tasks) for p in policies)
    suite: dict[str, SuiteStatistic] = {}
    for kind in STATISTICS:
        value, reason = correlation(kind, ref, oth, labels)
        suite[kind] = SuiteStatistic(value=value, reason=reason)
    return Stability(report, policies, ref, oth, suite)
