"""Success rates with honest intervals, grouped into result tables.

Each row also carries the mean return with a Student-t interval, the endpoint of tasks that
have no success signal. ``error`` episodes are infrastructure or policy-contract faults: they are left out
of the denominator and reported beside it, never scored as failures.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, special, stats
from scipy.stats import binomtest

from assay.errors import AssayError
from assay.store import EpisodeRecord, Outcome

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
    at 0 (1) when k = 0 (n); ``exact``: Clopper–Pearson (never under-covers, wide).
    """
    if method not in INTERVAL_METHODS:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    if trials == 0:
        return None
    if method in ("wilson", "exact"):
        ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method=method)
        return Interval(float(ci.low), float(ci.high))
    tail = (1.0 - confidence) / 2.0
    if method == "jeffreys":
        a, b = successes + 0.5, trials - successes + 0.5
        low = 0.0 if successes == 0 else float(stats.beta.ppf(tail, a, b))
        high = 1.0 if successes == trials else float(stats.beta.ppf(1.0 - tail, a, b))
        return Interval(low, high)
    return Interval(_midp_end(successes, trials, tail, upper=False), _midp_end(successes, trials, tail, upper=True))


def _midp_end(k: int, n: int, tail: float, upper: bool) -> float:
    """One end of the mid-p interval: where the mid-p tail probability of k equals ``tail``."""
    if (upper and k == n) or (not upper and k == 0):
        return 1.0 if upper else 0.0

    def excess(p: float) -> float:  # scipy.special's binomial cdf (bdtr) and survival (bdtrc): fast ufuncs
        below = float(special.bdtr(k - 1, n, p)) if k > 0 else 0.0
        mid = 0.5 * (float(special.bdtr(k, n, p)) - below)
        beyond = below if upper else float(special.bdtrc(k, n, p))
        return beyond + mid - tail

    return float(optimize.brentq(excess, 0.0, 1.0, xtol=1e-13))


def return_interval(values: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """Student-t interval of the mean; None with fewer than two values. Zero spread gives a point."""
    x = np.asarray(values, dtype=np.float64)
    if len(x) < 2:
        return None
    mean, sem = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(len(x))
    half = float(stats.t.ppf(0.5 + confidence / 2, len(x) - 1)) * sem
    return Interval(mean - half, mean + half)


@dataclass(frozen=True)
class RateRow:
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

    def to_dict(self) -> dict[str, object]:
        """The row as a JSON-ready dict."""
        return asdict(self)


def _row(group: dict[str, str], records: Sequence[EpisodeRecord], confidence: float, method: str,
         errors_as_failures: bool = False) -> RateRow:
    counts = {o: 0 for o in Outcome}
    for record in records:
        counts[record.outcome] += 1
    scored = len(records) - (0 if errors_as_failures else counts[Outcome.ERROR])
    interval = success_interval(counts[Outcome.SUCCESS], scored, confidence, method)
    valid = [r for r in records if r.outcome is not Outcome.ERROR]
    returns = return_interval([r.total_return for r in valid], confidence)
    return RateRow(
        group=group,
        episodes=len(records),
        scored=scored,
        successes=counts[Outcome.SUCCESS],
        failures=counts[Outcome.FAILURE] + (counts[Outcome.ERROR] if errors_as_failures else 0),
        timeouts=counts[Outcome.TIMEOUT],
        errors=counts[Outcome.ERROR],
        rate=counts[Outcome.SUCCESS] / scored if scored else None,
        ci_low=interval.low if interval else None,
        ci_high=interval.high if interval else None,
        mean_return=sum(r.total_return for r in valid) / len(valid) if valid else None,
        mean_steps=sum(r.steps for r in valid) / len(valid) if valid else None,
        return_ci_low=returns.low if returns else None,
        return_ci_high=returns.high if returns else None,
    )


def rate_table(records: Iterable[EpisodeRecord], by: Sequence[str] = ("policy", "task"), confidence: float = 0.95,
               method: str = DEFAULT_INTERVAL, errors_as_failures: bool = False) -> list[RateRow]:
    """One row per group (``by`` from policy, task, variant, campaign), sorted by group.

    ``method`` is one of ``INTERVAL_METHODS`` (default mid-p; see ``success_interval``). By default ``error``
    episodes are left out of the denominator; ``errors_as_failures`` is the pessimistic view that
    scores them as failures (``errors`` still counts them, ``failures`` includes them).
    """
    if method not in INTERVAL_METHODS:
        raise AssayError(f"interval method {method!r} is not valid; valid: {', '.join(INTERVAL_METHODS)}")
    unknown = [name for name in by if name not in GROUP_FIELDS]
    if unknown:
        raise AssayError(f"cannot group by {', '.join(unknown)}; valid: {', '.join(GROUP_FIELDS)}")
    groups: dict[tuple[str, ...], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        groups[tuple(getattr(record, GROUP_FIELDS[name]) for name in by)].append(record)
    return [_row(dict(zip(by, key, strict=True)), groups[key], confidence, method, errors_as_failures)
            for key in sorted(groups)]
