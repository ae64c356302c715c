"""Success rates with honest intervals, grouped into result tables.

Each row also carries the mean return with a Student-t interval, the endpoint of tasks that
have no success signal. ``error`` episodes are infrastructure or policy-contract faults: they are left out
of the denominator and reported beside it, never scored as failures.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.serialize import DictMixin
from assay.store import EpisodeRecord, Outcome
from assay.store.aggregates import CellTotals

# midp first: the default (see success_interval); exact = Clopper–Pearson.
INTERVAL_METHODS = ("midp", "wilson", "jeffreys", "exact")
DEFAULT_INTERVAL = "midp"
GROUP_FIELDS = {"policy": "policy_name", "task": "task_id", "variant": "variant_name", "campaign": "campaign"}
METHOD_NAMES = {"midp": "mid-p", "wilson": "Wilson", "jeffreys": "Jeffreys", "exact": "Clopper-Pearson"}


def interval_label(method: str = DEFAULT_INTERVAL, confidence: float = 0.95) -> str:
    """How a table names the interval ``success_interval(method=method)`` gives: ``mid-p 95%``."""
    if method not in METHOD_NAMES:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    return f"{METHOD_NAMES[method]} {confidence:.0%}"


@dataclass(frozen=True)
class Interval:
    """A closed interval [low, high] of a rate."""

    low: float
    high: float


def success_interval(successes: int, trials: int, confidence: float = 0.95,
                     method: str = DEFAULT_INTERVAL) -> Interval | None:
    """A binomial interval for ``successes`` of ``trials``; None when there are no trials.

    ``midp`` (default): mid-p Clopper–Pearson, the p where P(X < k) + ½P(X = k) (or its upper
    mirror) equals the tail; exact coverage ≥ 0.93 at every cell of the grid in docs/STATISTICS.md,
    where Wilson falls to 0.90 near p = 0 or 1 — the rates robot evaluations live at.
    ``wilson``: the score interval; ``jeffreys``: the Beta(k + ½, n − k + ½) quantiles, with the end
    at 0 (1) when k = 0 (n); ``exact``: Clopper–Pearson (never under-covers, wide), the Beta(k, n − k + 1) and
    Beta(k + 1, n − k) quantiles.
    """
    if method not in INTERVAL_METHODS:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    if trials == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    if method == "exact":
        # Clopper–Pearson's ends are Beta quantiles (scipy's binomtest finds the same roots by a search, within
        # 5e-13): the leaderboard takes each cell's lower end without importing scipy.stats (0.4 CPU s)
        from scipy import special

        low = 0.0 if successes == 0 else float(special.betaincinv(successes, trials - successes + 1, tail))
        high = 1.0 if successes == trials else float(special.betaincinv(successes + 1, trials - successes, 1 - tail))
        return Interval(low, high)
    if method == "wilson":
        from scipy.stats import binomtest

        ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method=method)
        return Interval(float(ci.low), float(ci.high))
    if method == "jeffreys":
        from scipy import stats

        a, b = successes + 0.5, trials - successes + 0.5
        low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, a, b))
        high = 1.0 if successes == trials else float(stats.beta.ppf(1.0 - tail, a, b))
        return Interval(low, high)
    return Interval(_midp_end(successes, trials, tail, upper=False), _midp_end(successes, trials, tail, upper=True))


def _midp_end(k: int, n: int, tail: float, upper: bool) -> float:
    """One end of the mid-p interval: where the mid-p tail probability of k equals ``tail``."""
    if (upper and k == n) or (not upper and k == 0):
        return 1.0 if upper else 0.0
    from scipy import optimize, special  # imported on first use: a listing that prints no interval never pays

    def excess(p: float) -> float:  # scipy.special's binomial cdf (bdtr) and survival (bdtrc): fast ufuncs
        below = float(special.bdtr(k - 1, n, p)) if k > 0 else 0.0
        mid = 0.5 * (float(special.bdtr(k, n, p)) - below)
        beyond = below if upper else float(special.bdtrc(k, n, p))
        return beyond + mid - tail

    return float(optimize.brentq(excess, 0.0, 1.0, xtol=1e-13))


def _t_quantile(q: float, df: int) -> float:
    """Student's t quantile: ``scipy.special.stdtrit``, which ``scipy.stats.t.ppf`` calls (the same float), without
    importing scipy.stats (a third of a CPU second)."""
    from scipy import special

    return float(special.stdtrit(df, q))


def return_interval(values: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """Student-t interval of the mean; None with fewer than two values. Zero spread gives a point."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    mean, sem = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(len(x))
    half = _t_quantile(0.5 + confidence / 2, len(x) - 1) * sem
    return Interval(mean - half, mean + half)


@dataclass(frozen=True)
class RateRow(DictMixin):
    """One group's episode counts by outcome, its success rate and the rate's interval."""

    group: dict[str, str]
    episodes: int
    scored: int
    successes: int
    failures: int
    timeouts: int
    errors: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None
    mean_return: float | None
    mean_steps: float | None
    return_ci_low: float | None = None  # Student-t interval of the mean return (the endpoint of tasks
    return_ci_high: float | None = None  # without a success signal); None below two scored episodes


def totals_of(records: Iterable[EpisodeRecord]) -> list[CellTotals]:
    """What ``assay.store.aggregates.cell_totals`` counts in the database, counted from records (same order)."""
    cells: dict[tuple[str, str, str, str, str], list[Any]] = {}
    for r in records:
        cell = cells.setdefault((r.campaign, r.policy_name, r.task_id, r.variant_key, r.variant_name),
                                [0, 0, 0, 0, 0, 0, 0.0, 0.0])
        cell[0] += 1
        cell[1 + _OUTCOME_INDEX[r.outcome]] += 1
        if r.outcome is not Outcome.ERROR:
            cell[5] += r.steps
            cell[6] += r.total_return
            cell[7] += r.total_return * r.total_return
    return [CellTotals(*key, *counts) for key, counts in sorted(cells.items())]


_OUTCOME_INDEX = {Outcome.SUCCESS: 0, Outcome.FAILURE: 1, Outcome.TIMEOUT: 2, Outcome.ERROR: 3}


def _group_value(cell: CellTotals, name: str) -> str:
    return {"policy": cell.policy, "task": cell.task, "variant": cell.variant, "campaign": cell.campaign}[name]


def return_interval_of(n: int, total: float, squares: float, confidence: float = 0.95) -> Interval | None:
    """:func:`return_interval` of ``n`` values given their sum and sum of squares; None below two values."""
    if n < 2:
        return None
    mean = total / n
    variance = max(0.0, (squares - total * mean) / (n - 1))  # rounding can take a zero spread below zero
    half = _t_quantile(0.5 + confidence / 2, n - 1) * math.sqrt(variance / n)
    return Interval(mean - half, mean + half)


def _row(group: dict[str, str], cells: Sequence[CellTotals], confidence: float, method: str,
         errors_as_failures: bool = False) -> RateRow:
    episodes = sum(c.episodes for c in cells)
    successes, failures = sum(c.successes for c in cells), sum(c.failures for c in cells)
    timeouts, errors = sum(c.timeouts for c in cells), sum(c.errors for c in cells)
    valid = episodes - errors
    total, squares = sum(c.return_sum for c in cells), sum(c.return_squares for c in cells)
    scored = episodes - (0 if errors_as_failures else errors)
    interval = success_interval(successes, scored, confidence, method)
    returns = return_interval_of(valid, total, squares, confidence)
    return RateRow(
        group=group,
        episodes=episodes,
        scored=scored,
        successes=successes,
        failures=failures + (errors if errors_as_failures else 0),
        timeouts=timeouts,
        errors=errors,
        rate=successes / scored if scored else None,
        ci_low=interval.low if interval else None,
        ci_high=interval.high if interval else None,
        mean_return=total / valid if valid else None,
        mean_steps=sum(c.steps for c in cells) / valid if valid else None,
        return_ci_low=returns.low if returns else None,
        return_ci_high=returns.high if returns else None,
    )


def rate_table(records: Iterable[EpisodeRecord], by: Sequence[str] = ("policy", "task"), confidence: float = 0.95,
               method: str = DEFAULT_INTERVAL, errors_as_failures: bool = False) -> list[RateRow]:
    """One row per group (``by`` from policy, task, variant, campaign), sorted by group.

    ``method`` is one of ``INTERVAL_METHODS`` (default mid-p; see ``success_interval``). By default ``error``
    episodes are left out of the denominator; ``errors_as_failures`` is the pessimistic view that
    scores them as failures (``errors`` still counts them, ``failures`` includes them). The same rows as
    :func:`rate_rows` of the records' :func:`totals_of`.
    """
    return rate_rows(totals_of(records), by, confidence, method, errors_as_failures)


def rate_rows(cells: Iterable[CellTotals], by: Sequence[str] = ("policy", "task"), confidence: float = 0.95,
              method: str = DEFAULT_INTERVAL, errors_as_failures: bool = False) -> list[RateRow]:
    """:func:`rate_table` from cell counts (``assay.store.aggregates.cell_totals``: the database's ``GROUP BY``)."""
    if method not in INTERVAL_METHODS:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    unknown = [name for name in by if name not in GROUP_FIELDS]
    if unknown:
        raise AssayError(f"cannot group by {', '.join(unknown)}; valid: {', '.join(GROUP_FIELDS)}")
    groups: dict[tuple[str, ...], list[CellTotals]] = defaultdict(list)
    for cell in cells:
        groups[tuple(_group_value(cell, name) for name in by)].append(cell)
    return [_row(dict(zip(by, key, strict=True)), groups[key], confidence, method, errors_as_failures)
            for key in sorted(groups)]
