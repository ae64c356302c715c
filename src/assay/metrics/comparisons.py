"""Comparing two policies: paired McNemar and bootstrap, unpaired Newcombe and Fisher, Holm.

Paired (the default; the core gives both policies the same seeds): episodes pair by
``(task, variant, seed)``; a pair with an ``error`` on either side is dropped and
counted. The test is McNemar's exact test: under "no difference" each discordant
pair (one succeeded, the other not) is equally likely to go either way, so the
count of pairs A won is Binomial(b + c, 1/2) — ``scipy.stats.binomtest``. The
interval of the rate difference is Newcombe's square-and-add interval for paired
proportions (``metrics.intervals``; a bootstrap of 5 of 5 against 0 of 5 says [1, 1]).

Unpaired (no common seeds, or ``paired=False``): Newcombe's hybrid score interval
(method 10, built from two Wilson intervals) and Fisher's exact test
(``scipy.stats.fisher_exact``).

Suite level: the difference is the mean over tasks of the per-task differences,
its interval from seeded draws of every task's table (paired: the Jeffreys
Dirichlet posterior; unpaired: each side's mid-p confidence distribution) or, with
one task, that task's interval;
the paired test pools the discordant pairs of every task (still exact: each
discordant pair is a fair coin under the null whatever its task); the unpaired
test is Fisher's on the pooled counts (ignoring the task strata, which makes it
conservative). When one policy is compared with several, Holm's step-down
correction is applied across the family at each level (suite: one test per other
policy; per task: one per other policy × task). Verdicts come from the adjusted
p-value: ``better`` / ``worse`` when below ``alpha`` (sign of the difference),
otherwise ``no detectable difference``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import TypedDict

import numpy as np
from scipy.stats import binomtest, fisher_exact

from assay.errors import AssayError
from assay.metrics.bootstrap import DEFAULT_SEED, check_settings, generator
from assay.metrics.intervals import DRAWS, central, newcombe_paired_interval, paired_difference_draws, rate_draws
from assay.metrics.outcomes import OutcomeGrid, TaskOutcomes
from assay.metrics.rates import Interval, success_interval

SUITE = "suite"


class Verdict(str, Enum):
    """The outcome of a comparison of two policies at its level: better, worse, or no detectable difference."""

    BETTER = "better"
    WORSE = "worse"
    NO_DIFFERENCE = "no detectable difference"


class Pairing(str, Enum):
    """Whether a comparison paired the episodes (same seeds on both sides) or compared two independent samples."""

    PAIRED = "paired"
    UNPAIRED = "unpaired"


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (1.0 when there are none)."""
    if a_only < 0 or b_only < 0:
        raise AssayError("discordant counts must be non-negative")
    if a_only + b_only == 0:
        return 1.0
    return float(binomtest(a_only, a_only + b_only, 0.5).pvalue)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> Interval | None:
    """Newcombe's hybrid score interval for p1 − p2 (his method 10); None if a side has no trials."""
    first = success_interval(k1, n1, confidence, "wilson")
    second = success_interval(k2, n2, confidence, "wilson")
    if first is None or second is None:
        return None
    p1, p2 = k1 / n1, k2 / n2
    d = p1 - p2
    low = d - math.sqrt((p1 - first.low) ** 2 + (second.high - p2) ** 2)
    high = d + math.sqrt((first.high - p1) ** 2 + (p2 - second.low) ** 2)
    return Interval(max(-1.0, low), min(1.0, high))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (monotone, capped at 1)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """A versus B on one task (or ``suite``); ``difference`` = rate(A) − rate(B)."""

    task: str
    a: str
    b: str
    pairing: Pairing
    a_rate: float | None
    b_rate: float | None
    a_n: int
    b_n: int
    pairs: int
    dropped_pairs: int
    a_only: int  # paired: pairs A won; unpaired: 0
    b_only: int
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float
    p_adjusted: float
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        """The comparison as a JSON-ready dict, its enums by value."""
        data = asdict(self)
        data["pairing"], data["verdict"] = self.pairing.value, self.verdict.value
        return data


@dataclass(frozen=True)
class _Pairs:
    a: np.ndarray
    b: np.ndarray
    dropped: int


def _pairs(task: TaskOutcomes, a: str, b: str) -> _Pairs:
    x, y = task.column(a), task.column(b)
    both = ~np.isnan(x) & ~np.isnan(y)
    # Every seed of the task that does not give a scored pair (an error on either side, or no episode).
    return _Pairs(x[both], y[both], int(both.size - both.sum()))


class _Cell(TypedDict):
    """One row of a comparison before its Holm adjustment: a task's (or the suite's) counts, difference and test."""

    task: str
    a_rate: float | None
    b_rate: float | None
    a_n: int
    b_n: int
    pairs: int
    dropped_pairs: int
    a_only: int
    b_only: int
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float


def _known(values: Iterable[float | None]) -> list[float]:
    """The values of cells that all have one (the callers check completeness first)."""
    return [v for v in values if v is not None]


def _verdict(row: _Cell, mode: Pairing, p_adjusted: float, alpha: float) -> Verdict:
    difference = row["difference"]
    if difference is None or p_adjusted >= alpha or difference == 0:
        return Verdict.NO_DIFFERENCE
    # The pooled suite test counts discordant pairs; a mean difference of the other sign is no verdict.
    if mode is Pairing.PAIRED and (difference > 0) != (row["a_only"] > row["b_only"]):
        return Verdict.NO_DIFFERENCE
    return Verdict.BETTER if difference > 0 else Verdict.WORSE


def _suite_interval(rows: list[_Cell], draws: list[np.ndarray], confidence: float, difference: float | None,
                    ) -> tuple[float | None, float | None]:
    """One task: its own interval; several: the central range of the mean of the posterior draws."""
    if difference is None:
        return None, None
    if len(rows) == 1:
        return rows[0]["ci_low"], rows[0]["ci_high"]
    whole = central(np.mean(draws, axis=0), confidence, difference)
    return (whole.low, whole.high) if whole else (None, None)


def _paired_cells(grid: OutcomeGrid, a: str, b: str, rng: np.random.Generator, n_draws: int,
                  confidence: float) -> tuple[list[_Cell], _Cell]:
    rows: list[_Cell] = []
    draws: list[np.ndarray] = []
    for task in grid.tasks:
        pairs = _pairs(task, a, b)
        n = pairs.a.size
        a_only = int(((pairs.a == 1) & (pairs.b == 0)).sum())
        b_only = int(((pairs.a == 0) & (pairs.b == 1)).sum())
        both = int(((pairs.a == 1) & (pairs.b == 1)).sum())
        table = (both, a_only, b_only, n - both - a_only - b_only)
        interval = newcombe_paired_interval(*table, confidence) if n else None
        if n:
            draws.append(paired_difference_draws(rng, table, n_draws))
        rows.append(_Cell(task=task.task, a_rate=float(pairs.a.mean()) if n else None,
                         b_rate=float(pairs.b.mean()) if n else None, a_n=n, b_n=n, pairs=n,
                         dropped_pairs=pairs.dropped, a_only=a_only, b_only=b_only,
                         difference=float(pairs.a.mean() - pairs.b.mean()) if n else None,
                         ci_low=interval.low if interval else None, ci_high=interval.high if interval else None,
                         p_value=mcnemar_exact(a_only, b_only)))
    complete = all(r["pairs"] for r in rows)
    a_only, b_only = sum(r["a_only"] for r in rows), sum(r["b_only"] for r in rows)
    difference = float(np.mean(_known(r["difference"] for r in rows))) if complete else None
    low, high = _suite_interval(rows, draws, confidence, difference)
    suite = _Cell(task=SUITE, a_rate=float(np.mean(_known(r["a_rate"] for r in rows))) if complete else None,
                 b_rate=float(np.mean(_known(r["b_rate"] for r in rows))) if complete else None,
                 a_n=sum(r["pairs"] for r in rows), b_n=sum(r["pairs"] for r in rows),
                 pairs=sum(r["pairs"] for r in rows), dropped_pairs=sum(r["dropped_pairs"] for r in rows),
                 a_only=a_only, b_only=b_only, difference=difference, ci_low=low, ci_high=high,
                 p_value=mcnemar_exact(a_only, b_only))
    return rows, suite


def _unpaired_cells(grid: OutcomeGrid, a: str, b: str, rng: np.random.Generator, n_draws: int,
                    confidence: float) -> tuple[list[_Cell], _Cell]:
    rows: list[_Cell] = []
    draws: list[np.ndarray] = []
    totals = [0, 0, 0, 0]
    for task in grid.tasks:
        (k1, n1), (k2, n2) = task.counts(a), task.counts(b)
        totals = [totals[0] + k1, totals[1] + n1, totals[2] + k2, totals[3] + n2]
        interval = newcombe_interval(k1, n1, k2, n2, confidence)
        if n1 and n2:
            draws.append(rate_draws(rng, k1, n1, n_draws) - rate_draws(rng, k2, n2, n_draws))
        rows.append(_Cell(task=task.task, a_rate=k1 / n1 if n1 else None, b_rate=k2 / n2 if n2 else None,
                         a_n=n1, b_n=n2, pairs=0, dropped_pairs=0, a_only=0, b_only=0,
                         difference=k1 / n1 - k2 / n2 if interval else None,
                         ci_low=interval.low if interval else None, ci_high=interval.high if interval else None,
                         p_value=_fisher(k1, n1, k2, n2)))
    complete = all(r["difference"] is not None for r in rows)
    difference = float(np.mean(_known(r["difference"] for r in rows))) if complete else None
    low, high = _suite_interval(rows, draws, confidence, difference)
    suite = _Cell(task=SUITE, a_rate=float(np.mean(_known(r["a_rate"] for r in rows))) if complete else None,
                 b_rate=float(np.mean(_known(r["b_rate"] for r in rows))) if complete else None,
                 a_n=totals[1], b_n=totals[3], pairs=0, dropped_pairs=0, a_only=0, b_only=0,
                 difference=difference, ci_low=low, ci_high=high, p_value=_fisher(*totals))
    return rows, suite


def _fisher(k1: int, n1: int, k2: int, n2: int) -> float:
    if not (n1 and n2):
        return 1.0
    return float(fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


def compare(
    grid: OutcomeGrid,
    a: str,
    others: Sequence[str],
    pairing: Pairing = Pairing.PAIRED,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = DRAWS,
    seed: int = DEFAULT_SEED,
) -> list[Comparison]:
    """``a`` against each of ``others``: per-task rows then a ``suite`` row, for each other policy.

    Paired comparisons fall back to unpaired for a pair of policies that share no
    scored seed at all (the row says which was used). Holm's correction runs over
    the suite rows together and over all per-task rows together. ``n_resamples`` is
    the number of posterior draws behind a suite interval of several tasks.
    """
    check_settings(confidence, n_resamples)
    if not 0.0 < alpha < 1.0:
        raise AssayError(f"alpha {alpha} is not valid; give a level strictly between 0 and 1 (e.g. 0.05)")
    if not others:
        raise AssayError("compare needs at least two policies")
    grid.require([a, *others])
    if a in others or len(set(others)) != len(others):
        raise AssayError("compare each policy once: the policies given must be distinct")
    rng = generator(seed)
    cells: list[tuple[str, Pairing, list[_Cell], _Cell]] = []
    for other in others:
        mode = pairing
        if mode is Pairing.PAIRED and not any(_pairs(t, a, other).a.size for t in grid.tasks):
            mode = Pairing.UNPAIRED
        build = _paired_cells if mode is Pairing.PAIRED else _unpaired_cells
        rows, suite = build(grid, a, other, rng, n_resamples, confidence)
        cells.append((other, mode, rows, suite))
    task_adjusted = iter(holm([r["p_value"] for _, _, rows, _ in cells for r in rows]))
    suite_adjusted = iter(holm([suite["p_value"] for _, _, _, suite in cells]))
    result: list[Comparison] = []
    for other, mode, rows, suite in cells:
        for row in rows:
            adjusted = next(task_adjusted)
            result.append(Comparison(a=a, b=other, pairing=mode, p_adjusted=adjusted,
                                     verdict=_verdict(row, mode, adjusted, alpha), **row))
        adjusted = next(suite_adjusted)
        result.append(Comparison(a=a, b=other, pairing=mode, p_adjusted=adjusted,
                                 verdict=_verdict(suite, mode, adjusted, alpha), **suite))
    return result
