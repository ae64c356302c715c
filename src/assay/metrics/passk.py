"""pass^k: the probability that k independent trials all succeed, per cell and per policy.

A deployment team asks "will it succeed k times in a row", not "what is the mean". For a cell
(policy, task, ...) with success probability p, k independent episodes all succeed with
probability p^k (the seeds of a campaign are drawn independently, so its episodes are
independent trials of the cell).

* **Estimate**: C(c, k) / C(n, k) from c successes in n scored episodes, the unbiased estimator
  of p^k (the share of the C(n, k) k-subsets of the episodes that are all successes; as in
  tau-bench, Yao et al. 2024). Needs n ≥ k: below, the estimate is undefined and says so.
  Golden: 5 of 8, k = 3 → C(5, 3)/C(8, 3) = 10/56.
* **Interval**: [L^k, U^k] for the cell's rate interval [L, U] (mid-p by default). p ↦ p^k is
  increasing on [0, 1], so the interval covers p^k exactly when [L, U] covers p: its coverage
  *is* the rate interval's (docs/STATISTICS.md), at every k. Defined for any n ≥ 1, also n < k.
* **Per policy**: the mean over its tasks of the per-task pass^k (tau-bench's average; not the
  suite score to the k-th power). Interval, with several tasks: the outer ends of two, as the suite
  score's interval is built (``intervals.mean_rate_interval``): (1) each task's rate drawn from its
  mid-p confidence distribution (``intervals.rate_draws``), raised to k and averaged over tasks, the
  central range of the seeded draws; (2) square-and-add (MOVER) of the tasks' own pass^k intervals,
  mean ∓ √Σ(estimateᵢ − endᵢ)²/K. Each alone dips below 0.93 at three tasks of 6 episodes (draws
  0.919 at rates 0.95/0.98/0.99, k = 2); the outer ends hold ≥ 0.93 on the grid of docs/STATISTICS.md
  (exact, ``policy_coverage``). At k = 1 it is the suite score's interval itself; one task: that
  task's interval.

``error`` episodes are left out of n, as everywhere.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from assay.errors import AssayError
from assay.metrics.intervals import DRAWS, central, mean_rate_interval, rate_draws
from assay.metrics.rates import DEFAULT_INTERVAL, GROUP_FIELDS, METHOD_NAMES, success_interval, totals_of
from assay.serialize import DictMixin
from assay.store import EpisodeRecord
from assay.store.aggregates import CellTotals

MAX_K = 1000


@dataclass(frozen=True)
class PassK(DictMixin):
    """pass^k of one cell: the unbiased estimate C(c, k)/C(n, k) and the interval [L^k, U^k]."""

    k: int
    successes: int
    trials: int  # scored episodes (errors left out)
    numerator: int | None  # C(c, k); None when n < k
    denominator: int | None  # C(n, k)
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    reason: str | None = None  # why the estimate is undefined

    @property
    def fraction(self) -> str:
        """``C(c,k)/C(n,k)`` unreduced, e.g. ``10/56``; ``-`` when undefined."""
        return "-" if self.numerator is None else f"{self.numerator}/{self.denominator}"


@dataclass(frozen=True)
class PolicyPassK(DictMixin):
    """pass^k of one policy: the mean over its tasks of the per-task estimates, with an interval of draws."""

    policy: str
    k: int
    tasks: int
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    reason: str | None = None
    variant: str | None = None  # set when the table shows each variant separately: the policy under this variant


def check_k(k: int) -> None:
    """A clear one-line error for a k that is not a positive integer (up to ``MAX_K``)."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise AssayError(f"pass^k needs k a whole number from 1 to {MAX_K}, got {k!r}")


def pass_k(successes: int, trials: int, k: int, confidence: float = 0.95, method: str = DEFAULT_INTERVAL) -> PassK:
    """pass^k of ``successes`` of ``trials`` scored episodes (see the module doc)."""
    check_k(k)
    if not 0 <= successes <= trials:
        raise AssayError(f"pass^k needs 0 <= successes <= trials, got {successes} of {trials}")
    interval = success_interval(successes, trials, confidence, method)
    low = None if interval is None else interval.low ** k
    high = None if interval is None else interval.high ** k
    if trials < k:
        reason = (f"undefined: needs at least k = {k} scored episodes, got {trials}" if trials
                  else "undefined: no scored episode")
        return PassK(k, successes, trials, None, None, None, low, high, reason)
    numerator, denominator = math.comb(successes, k), math.comb(trials, k)
    return PassK(k, successes, trials, numerator, denominator, numerator / denominator, low, high)


def policy_pass_k(policy: str, counts: Sequence[tuple[int, int]], k: int, confidence: float = 0.95,
                  seed: int = 0, draws: int = DRAWS) -> PolicyPassK:
    """pass^k of a policy over its tasks' (successes, scored) counts: the mean of the per-task estimates."""
    check_k(k)
    scored = [(c, n) for c, n in counts if n > 0]
    if len(scored) < len(counts) or not scored:  # a task of only errors: its rate, and so the mean, is unknown
        return PolicyPassK(policy, k, len(counts), None, None, None,
                           f"undefined: {len(counts) - len(scored)} of {len(counts)} tasks have no scored episode")
    cells = [pass_k(c, n, k, confidence) for c, n in scored]
    short = [cell for cell in cells if cell.estimate is None]
    estimate = None if short else float(np.mean([cell.estimate for cell in cells if cell.estimate is not None]))
    reason = (f"undefined: {len(short)} of {len(cells)} tasks have fewer than k = {k} scored episodes"
              if short else None)
    if len(cells) == 1:
        return PolicyPassK(policy, k, len(counts), estimate, cells[0].ci_low, cells[0].ci_high, reason)
    if k == 1:
        suite = mean_rate_interval(scored, confidence)
        assert suite is not None
        return PolicyPassK(policy, k, len(counts), estimate, suite.low, suite.high, reason)
    low, high = _policy_interval(scored, cells, k, confidence, seed, draws)
    return PolicyPassK(policy, k, len(counts), estimate, low, high, reason)


def _policy_interval(scored: Sequence[tuple[int, int]], cells: Sequence[PassK], k: int, confidence: float,
                     seed: int, draws: int) -> tuple[float, float]:
    """The outer ends of the draws interval and the square-and-add of the tasks' intervals (module doc)."""
    rng = np.random.default_rng(seed)
    # the unbiased per-task estimate where n >= k, else the plug-in rate^k, as the centre of the squares
    centres = [cell.estimate if cell.estimate is not None else (c / n) ** k for cell, (c, n) in zip(cells, scored,
                                                                                                   strict=True)]
    mean = float(np.mean(centres))
    drawn = central(np.mean([rate_draws(rng, c, n, draws) ** k for c, n in scored], axis=0), confidence, mean)
    assert drawn is not None
    below = math.sqrt(sum((m - (cell.ci_low or 0.0)) ** 2 for m, cell in zip(centres, cells, strict=True)))
    above = math.sqrt(sum(((cell.ci_high or 1.0) - m) ** 2 for m, cell in zip(centres, cells, strict=True)))
    low = min(drawn.low, mean - below / len(cells))
    high = max(drawn.high, mean + above / len(cells))
    return max(0.0, low), min(1.0, high)


def policy_coverage(rates: Sequence[float], episodes: Sequence[int], k: int, confidence: float = 0.95,
                    draws: int = DRAWS) -> float:
    """Exact P(mean of rateᵢ^k ∈ the per-policy pass^k interval) for independent tasks (every combination
    of counts weighted by its probability; keep Π(nᵢ + 1) to a few thousand)."""
    if len(rates) != len(episodes) or not rates:
        raise AssayError("pass^k coverage needs one episode count per rate")
    truth = float(np.mean([p ** k for p in rates]))
    pmfs = [stats.binom.pmf(np.arange(n + 1), n, p) for p, n in zip(rates, episodes, strict=True)]
    covered = 0.0
    for chosen in itertools.product(*[np.flatnonzero(pmf > 1e-15).tolist() for pmf in pmfs]):
        weight = float(np.prod([pmf[c] for pmf, c in zip(pmfs, chosen, strict=True)]))
        row = policy_pass_k("p", list(zip(chosen, episodes, strict=True)), k, confidence, draws=draws)
        assert row.ci_low is not None and row.ci_high is not None
        covered += weight * (row.ci_low - 1e-12 <= truth <= row.ci_high + 1e-12)
    return covered


@dataclass(frozen=True)
class PassKTable:
    """pass^k of every cell of a grouping and of every policy (mean over its tasks)."""

    k: int
    by: tuple[str, ...]
    cells: tuple[tuple[dict[str, str], PassK], ...]
    policies: tuple[PolicyPassK, ...]
    confidence: float
    method: str = DEFAULT_INTERVAL  # the cells' rate interval (the per-policy interval is mid-p-based)

    def to_dict(self) -> dict[str, object]:

        """A JSON-ready dict of every field."""
        return {"k": self.k, "by": list(self.by), "confidence": self.confidence, "method": self.method,
                "estimator": f"C(c,k)/C(n,k), unbiased for p^k; interval [L^k, U^k] of the {METHOD_NAMES[self.method]} "
                             "rate interval",
                "cells": [{"group": group, **cell.to_dict(), "fraction": cell.fraction} for group, cell in self.cells],
                "policies": [p.to_dict() for p in self.policies]}


def pass_k_table(records: Iterable[EpisodeRecord], k: int, by: Sequence[str] = ("policy", "task"),
                 confidence: float = 0.95, seed: int = 0, method: str = DEFAULT_INTERVAL) -> PassKTable:
    """pass^k per group of ``by`` (as ``rate_table`` groups) and per policy over its tasks."""
    return pass_k_rows(totals_of(records), k, by, confidence, seed, method)


def pass_k_rows(totals: Iterable[CellTotals], k: int, by: Sequence[str] = ("policy", "task"),
                confidence: float = 0.95, seed: int = 0, method: str = DEFAULT_INTERVAL) -> PassKTable:
    """:func:`pass_k_table` from cell counts (successes and scored episodes per cell are all it needs)."""
    check_k(k)
    unknown = [name for name in by if name not in GROUP_FIELDS]
    if unknown:
        raise AssayError(f"cannot group by {', '.join(unknown)}; valid: {', '.join(GROUP_FIELDS)}")
    groups: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0])
    separate = "variant" in by  # each variant its own row: so is each policy's pass^k under each variant
    per_task: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for cell in totals:
        named = {"policy": cell.policy, "task": cell.task, "variant": cell.variant, "campaign": cell.campaign}
        row = (cell.policy, cell.variant if separate else "")
        for counted in (groups[tuple(named[name] for name in by)], per_task[row][cell.task]):
            counted[0] += cell.successes
            counted[1] += cell.scored
    cells = tuple((dict(zip(by, key, strict=True)), pass_k(c, n, k, confidence, method))
                  for key, (c, n) in sorted(groups.items()))
    policies = tuple(
        dataclasses.replace(policy_pass_k(policy, [(c, n) for c, n in (per_task[(policy, variant)][t]
                                                                       for t in sorted(per_task[(policy, variant)]))],
                                          k, confidence, seed), variant=variant if separate else None)
        for policy, variant in sorted(per_task))
    return PassKTable(k, tuple(by), cells, policies, confidence, method)
