"""Returns as the endpoint, for tasks without a success signal (``SuccessMode.NONE``: any
``gymnasium/<ID>`` such as Pendulum), where every success rate is 0 and says nothing.

* :func:`~assay.metrics.rates.return_interval`: the mean return with a Student-t interval
  (``mean ± t·s/√n``); None at n < 2.
* :func:`compare_returns`: A − B on paired episodes (same task, variant and seed; ``error`` episodes
  dropped with their pair), per task and pooled (``suite``): mean difference, t interval, the paired
  t-test's two-sided p-value (``scipy.stats.ttest_rel``), Holm-adjusted across all rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from assay.metrics.comparisons import SUITE, Verdict, holm
from assay.metrics.rates import return_interval
from assay.store import EpisodeRecord, Outcome


@dataclass(frozen=True)
class ReturnComparison:
    """A versus B on one task (or ``suite``) by paired mean return; ``difference`` = A − B."""

    task: str
    a: str
    b: str
    a_mean: float | None
    b_mean: float | None
    pairs: int
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float
    p_adjusted: float
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        """The row as JSON-ready data (the verdict as its text)."""
        data = asdict(self)
        data["verdict"] = self.verdict.value
        return data


def _paired(records: Sequence[EpisodeRecord], a: str, b: str, task: str | None) -> tuple[np.ndarray, np.ndarray]:
    by_policy: dict[str, dict[tuple[str, str, int], float]] = {a: {}, b: {}}
    for r in records:
        if r.policy_name in by_policy and r.outcome is not Outcome.ERROR and (task is None or r.task_id == task):
            by_policy[r.policy_name][(r.task_id, r.variant_key, r.seed)] = r.total_return
    common = sorted(set(by_policy[a]) & set(by_policy[b]))
    return (np.array([by_policy[a][k] for k in common]), np.array([by_policy[b][k] for k in common]))


def _row(task: str, a: str, b: str, x: np.ndarray, y: np.ndarray, confidence: float) -> dict:
    n = len(x)
    difference = float(np.mean(x - y)) if n else None
    interval = return_interval(x - y, confidence) if n else None
    if n < 2:
        p = 1.0
    elif np.all(x - y == (x - y)[0]):  # no spread: the t statistic is undefined
        p = 1.0 if (x - y)[0] == 0 else 0.0
    else:
        p = float(stats.ttest_rel(x, y).pvalue)
    return {"task": task, "a": a, "b": b, "a_mean": float(x.mean()) if n else None,
            "b_mean": float(y.mean()) if n else None, "pairs": n, "difference": difference,
            "ci_low": interval.low if interval else None, "ci_high": interval.high if interval else None,
            "p_value": p}


def compare_returns(records: Sequence[EpisodeRecord], a: str, others: Sequence[str], tasks: Sequence[str],
                    alpha: float = 0.05, confidence: float = 0.95) -> list[ReturnComparison]:
    """A against each of ``others``: one row per task, then the pooled ``suite`` row (when several tasks)."""
    rows: list[dict] = []
    for b in others:
        for task in tasks:
            rows.append(_row(task, a, b, *_paired(records, a, b, task), confidence))
        if len(tasks) > 1:
            rows.append(_row(SUITE, a, b, *_paired([r for r in records if r.task_id in tasks], a, b, None), confidence))
    adjusted = holm([row["p_value"] for row in rows])
    out = []
    for row, p_adjusted in zip(rows, adjusted, strict=True):
        difference = row["difference"]
        if difference is None or p_adjusted >= alpha or difference == 0:
            verdict = Verdict.NO_DIFFERENCE
        else:
            verdict = Verdict.BETTER if difference > 0 else Verdict.WORSE
        out.append(ReturnComparison(**row, p_adjusted=p_adjusted, verdict=verdict))
    return out
