"""Real-to-sim (or any reference-to-other) agreement of policy rates: Pearson, Spearman, Kendall, MMRV.

For one task, N policies have reference rates R (real, or the first leaderboard)
and other rates S (sim). Statistics, each with a seeded bootstrap interval:

* Pearson r (``scipy.stats.pearsonr``), Spearman ρ (Pearson of average ranks, as
  ``scipy.stats.spearmanr``), Kendall τ-b (``scipy.stats.kendalltau``). When
  either side is constant, or N < 2, the value is ``None`` with a ``reason``
  ("undefined: ..."), never 0 or NaN.
* MMRV, the Mean Maximum Rank Violation of SIMPLER (Li et al. 2024)::

      MMRV = (1/N) Σ_i max_j |R_i − R_j| · 1[(S_i < S_j) ≠ (R_i < R_j)]

  implemented literally. Ties: ``<`` is strict, so a pair tied on one side and
  ordered on the other counts as a violation from the endpoint whose strict
  comparison flips (if S_i = S_j but R_i < R_j, then (S_i < S_j) = False ≠ True
  for i, while for j both comparisons are False): a tie in sim that hides a real
  gap is penalised once, by the gap. Pairs tied on both sides never count.
  Example: S = [0.5, 0.5, 0.2], R = [0.9, 0.1, 0.5] gives (0 + 0.8 + 0.4) / 3 = 0.4.

  That is the default convention (``weight="real"``, ``ties="<"``), SIMPLER's
  published form. Papers differ, so both choices are switches: ``weight="sim"``
  costs a violation the sim gap |S_i − S_j| instead of the real one, and
  ``ties=">"`` uses 1[(S_i > S_j) ≠ (R_i > R_j)], which charges a pair tied in sim
  at the endpoint with the *higher* real rate. The example above gives 0.4 by
  default, (0.8 + 0.4 + 0.4) / 3 = 0.533 with ``ties=">"`` and 0.2 with
  ``weight="sim"``.

Beside the figures, ``metrics/correlation_checks.py`` reports what limits them:
the number of policies k, a Fisher-z interval of r, the drop-one leverage range,
and the exact permutation p-value with its floor 1/k!.

Intervals: when every rate of the task carries counts (successes, trials), each
resample redraws every (policy, side) cell's episodes with replacement, i.e.
Binomial(trials, observed rate); otherwise policies are resampled with
replacement. Resamples where a statistic is undefined are left out of its
interval and counted (``undefined_resamples``). The percentile interval is widened
to hold the point estimate (``widened``): redrawing episodes adds noise to both
sides, which pulls r toward 0, so at r = −1 every resample lies above it (an
anti-correlated task printed −1.000 [−0.991, −0.611]).

The averaged figures are the mean over tasks of the per-task values, with the
interval of the same mean over the resamples. Left out, each with its reason in
``left_out``: tasks where a value is undefined, and for Pearson, Spearman and
Kendall the tasks with fewer than ``MIN_POLICIES_AVERAGED`` (3) policies — two
policies give ±1 by construction (their value is shown with that note, its sign
is the only information), which averaged in would pull the mean toward ±1. MMRV
is defined from 2 policies (one pair that is ordered right or not) and averaged from 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import kendalltau, pearsonr, rankdata

from assay.errors import AssayError, ResultsCsvError
from assay.metrics.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED, check_settings, generator, percentile_interval
from assay.metrics.correlation_checks import Checks, fisher_interval, leverage, permutation_p
from assay.metrics.results_csv import RateEntry
from assay.serialize import DictMixin

STATISTICS = ("pearson", "spearman", "kendall", "mmrv")
COEFFICIENTS = ("pearson", "spearman", "kendall")  # ±1 by construction at two policies
MIN_POLICIES_AVERAGED = 3
MMRV_WEIGHTS = ("real", "sim")
MMRV_TIES = ("<", ">")


@dataclass(frozen=True)
class MmrvConvention:
    """Which gap a rank violation costs and which strict comparison defines it (default: SIMPLER's)."""

    weight: str = "real"
    ties: str = "<"

    def __post_init__(self) -> None:
        if self.weight not in MMRV_WEIGHTS:
            raise AssayError(f"MMRV weight {self.weight!r} is not known; valid: {', '.join(MMRV_WEIGHTS)}")
        if self.ties not in MMRV_TIES:
            raise AssayError(f"MMRV ties {self.ties!r} is not known; valid: {', '.join(MMRV_TIES)}")


SIMPLER = MmrvConvention()


def mmrv(real: Sequence[float] | np.ndarray, sim: Sequence[float] | np.ndarray,
         convention: MmrvConvention = SIMPLER) -> float:
    """MMRV of ``sim`` against the reference ``real`` (see the module docstring for ties)."""
    r, s = np.asarray(real, dtype=np.float64), np.asarray(sim, dtype=np.float64)
    return float(_mmrv_rows(r[None, :], s[None, :], convention)[0])


def _mmrv_rows(r: np.ndarray, s: np.ndarray, convention: MmrvConvention = SIMPLER) -> np.ndarray:
    if convention.ties == "<":
        violated = (s[:, :, None] < s[:, None, :]) != (r[:, :, None] < r[:, None, :])
    else:
        violated = (s[:, :, None] > s[:, None, :]) != (r[:, :, None] > r[:, None, :])
    weights = r if convention.weight == "real" else s
    gaps = np.abs(weights[:, :, None] - weights[:, None, :])
    return (gaps * violated).max(axis=2).mean(axis=1)


def _undefined(real: np.ndarray, sim: np.ndarray, labels: tuple[str, str]) -> str | None:
    if real.size < 2:
        return f"undefined: needs at least 2 policies, got {real.size}"
    for values, label in ((real, labels[0]), (sim, labels[1])):
        if np.all(values == values[0]):
            return f"undefined: {label} success rates are all {values[0]:.3g} (constant)"
    return None


def correlation(kind: str, real: Sequence[float], sim: Sequence[float],
                labels: tuple[str, str] = ("real", "sim"),
                convention: MmrvConvention = SIMPLER) -> tuple[float | None, str | None]:
    """(value, None) or (None, reason) for ``pearson``, ``spearman``, ``kendall`` or ``mmrv``."""
    r, s = np.asarray(real, dtype=np.float64), np.asarray(sim, dtype=np.float64)
    if kind == "mmrv":
        # One policy has no pair to misrank: MMRV would be 0 by construction, and averaged in it would
        # pull the mean toward perfect; it is undefined (left out of the average, with the reason).
        if r.size < 2:
            return None, f"undefined: needs at least 2 policies, got {r.size}"
        return mmrv(r, s, convention), None
    reason = _undefined(r, s, labels)
    if reason:
        return None, reason
    if kind == "kendall":
        return float(kendalltau(r, s).statistic), None
    if kind == "spearman":
        r, s = rankdata(r), rankdata(s)
    return float(pearsonr(r, s).statistic), None


def _rows(kind: str, r: np.ndarray, s: np.ndarray, convention: MmrvConvention = SIMPLER) -> np.ndarray:
    """The statistic for each resample row; NaN where it is undefined."""
    if kind == "mmrv":
        return _mmrv_rows(r, s, convention) if r.shape[1] >= 2 else np.full(r.shape[0], np.nan)
    out = np.full(r.shape[0], np.nan)
    ok = ~(np.all(r == r[:, :1], axis=1) | np.all(s == s[:, :1], axis=1)) if r.shape[1] >= 2 else np.zeros(len(r), bool)
    if not ok.any():
        return out
    if kind == "kendall":
        out[ok] = _kendall_rows(r[ok], s[ok])
        return out
    a, b = (rankdata(r[ok], axis=1), rankdata(s[ok], axis=1)) if kind == "spearman" else (r[ok], s[ok])
    out[ok] = pearsonr(a, b, axis=1).statistic
    return out


def _kendall_rows(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Kendall τ-b of each row pair, vectorized (scipy's kendalltau takes one pair per call, too slow for
    thousands of resamples); the tests check it against ``scipy.stats.kendalltau``."""
    n = r.shape[1]
    sr = np.sign(r[:, :, None] - r[:, None, :])
    ss = np.sign(s[:, :, None] - s[:, None, :])
    pairs = n * (n - 1) / 2
    concordance = (sr * ss).sum(axis=(1, 2)) / 2  # C − D (each pair counted twice in the full matrix)
    tied_r = ((sr == 0).sum(axis=(1, 2)) - n) / 2
    tied_s = ((ss == 0).sum(axis=(1, 2)) - n) / 2
    return concordance / np.sqrt((pairs - tied_r) * (pairs - tied_s))


@dataclass(frozen=True)
class Estimate:
    """A statistic, its reason when undefined, its bootstrap interval (widened to hold the value) and notes."""

    value: float | None
    reason: str | None
    ci_low: float | None
    ci_high: float | None
    undefined_resamples: int
    widened: bool = False  # the percentile interval did not hold the value and was stretched to it
    note: str | None = None  # e.g. "±1 by construction with 2 policies: left out of the average"


@dataclass(frozen=True)
class TaskCorrelation:
    """One task's correlation of the reference side's rates with the other side's, per statistic with its interval."""

    task: str
    other_task: str
    policies: tuple[str, ...]
    reference_rates: tuple[float, ...]
    other_rates: tuple[float, ...]
    resampling: str  # "episodes" or "policies"
    stats: dict[str, Estimate]
    checks: Checks | None = None


@dataclass(frozen=True)
class CorrelationReport(DictMixin):
    """A correlate run: each task's correlations, their averages over tasks, and the cells that had no reference."""

    labels: tuple[str, str]
    tasks: tuple[TaskCorrelation, ...]
    average: dict[str, Estimate]
    tasks_averaged: dict[str, int]
    unmatched: tuple[str, ...]  # other-side (task, policy) cells with no reference
    confidence: float
    n_resamples: int
    seed: int
    mmrv_convention: MmrvConvention = SIMPLER
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # statistic -> task -> why not averaged


Aligned = list[tuple[str, str, list[tuple[RateEntry, RateEntry]]]]


def match_task(task: str, other_tasks: set[str]) -> str | None:
    """The other side's task matching ``task``: the same id, else the only one with the same name; None otherwise."""
    if task in other_tasks:
        return task
    name = task.split("@")[0]
    same = sorted(t for t in other_tasks if t.split("@")[0] == name)
    return same[0] if len(same) == 1 else None


def align(
    reference: Sequence[RateEntry], other: Sequence[RateEntry], labels: tuple[str, str]
) -> tuple[Aligned, list[str]]:
    """Pair each reference (task, policy) with the other side's; tasks match by id, or by name when unique."""
    other_cells = {(e.task, e.policy): e for e in other}
    other_tasks = {e.task for e in other}
    aligned: dict[str, tuple[str, list[tuple[RateEntry, RateEntry]]]] = {}
    for entry in reference:
        matched = match_task(entry.task, other_tasks)
        if matched is None:
            raise ResultsCsvError(f"{entry.where()}: unknown task {entry.task!r}; {labels[1]} results have "
                                  f"{', '.join(sorted(other_tasks)) or 'no tasks'}")
        partner = other_cells.get((matched, entry.policy))
        if partner is None:
            have = sorted(p for t, p in other_cells if t == matched)
            raise ResultsCsvError(f"{entry.where()}: policy {entry.policy!r} has no {labels[1]} result on {matched}; "
                                  f"{labels[1]} has {', '.join(have)}")
        aligned.setdefault(entry.task, (matched, []))[1].append((entry, partner))
    used = {(o.task, o.policy) for _, pairs in aligned.values() for _, o in pairs}
    unmatched = sorted(f"{t}/{p}" for t, p in other_cells if (t, p) not in used)
    return [(task, matched, sorted(pairs, key=lambda p: p[0].policy))
            for task, (matched, pairs) in sorted(aligned.items())], unmatched


def _resample(pairs: list[tuple[RateEntry, RateEntry]], rng: np.random.Generator,
              n_resamples: int) -> tuple[str, np.ndarray, np.ndarray]:
    r = np.array([a.rate for a, _ in pairs])
    s = np.array([b.rate for _, b in pairs])
    if all(a.has_counts and b.has_counts for a, b in pairs):
        def draw(entries: list[RateEntry]) -> np.ndarray:
            columns = []
            for e in entries:
                assert e.trials is not None  # every entry has counts
                columns.append(rng.binomial(e.trials, e.rate, n_resamples) / e.trials)
            return np.stack(columns, axis=1)
        return "episodes", draw([a for a, _ in pairs]), draw([b for _, b in pairs])
    idx = rng.integers(0, len(pairs), size=(n_resamples, len(pairs)))
    return "policies", r[idx], s[idx]


def _estimate(value: float | None, reason: str | None, samples: np.ndarray, confidence: float,
              note: str | None = None) -> Estimate:
    """The percentile interval of the finite resamples, stretched to hold ``value`` (see the module docstring)."""
    interval = percentile_interval(samples, confidence)
    if interval is None:
        return Estimate(value, reason, None, None, int(np.isnan(samples).sum()), note=note)
    low, high = interval.low, interval.high
    widened = value is not None and not low <= value <= high
    if value is not None:
        low, high = min(low, value), max(high, value)
    return Estimate(value, reason, low, high, int(np.isnan(samples).sum()), widened, note)


def _construction(kind: str, policies: int, task: str) -> str | None:
    """Why a task's value is left out of the average although defined (None: it is averaged)."""
    if kind in COEFFICIENTS and policies < MIN_POLICIES_AVERAGED:
        return f"±1 by construction with {policies} policies: left out of the average"
    return None


def correlate(
    reference: Sequence[RateEntry],
    other: Sequence[RateEntry],
    labels: tuple[str, str] = ("real", "sim"),
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    convention: MmrvConvention = SIMPLER,
) -> CorrelationReport:
    """Correlate the reference rates with the other side's per task, with bootstrap intervals and their average."""
    check_settings(confidence, n_resamples)
    aligned, unmatched = align(reference, other, labels)
    rng = generator(seed)
    tasks: list[TaskCorrelation] = []
    samples: dict[str, list[np.ndarray]] = {k: [] for k in STATISTICS}
    values: dict[str, list[float]] = {k: [] for k in STATISTICS}
    left_out: dict[str, dict[str, str]] = {k: {} for k in STATISTICS}
    for task, matched, pairs in aligned:
        r = [a.rate for a, _ in pairs]
        s = [b.rate for _, b in pairs]
        mode, rb, sb = _resample(pairs, rng, n_resamples)
        stats = {}
        for kind in STATISTICS:
            value, reason = correlation(kind, r, s, labels, convention)
            boot = _rows(kind, rb, sb, convention)
            why = _construction(kind, len(pairs), task) if value is not None else reason
            stats[kind] = _estimate(value, reason, boot, confidence, why if value is not None else None)
            if why is not None:
                left_out[kind][task] = why
                continue
            assert value is not None
            values[kind].append(value)
            samples[kind].append(boot)
        policies = tuple(a.policy for a, _ in pairs)
        checks = task_checks(policies, r, s, stats["pearson"].value, labels, confidence, seed, convention)
        tasks.append(TaskCorrelation(task, matched, policies, tuple(r), tuple(s), mode, stats, checks))
    average = {}
    for kind in STATISTICS:
        if not values[kind]:
            average[kind] = Estimate(None, f"undefined or left out on every task ({len(tasks)})", None, None,
                                     n_resamples)
            continue
        stacked = np.stack(samples[kind])
        defined = ~np.isnan(stacked)
        counts = defined.sum(axis=0)
        with np.errstate(invalid="ignore"):
            mean = np.where(counts > 0, np.where(defined, stacked, 0.0).sum(axis=0) / np.maximum(counts, 1), np.nan)
        average[kind] = _estimate(float(np.mean(values[kind])), None, mean, confidence)
    return CorrelationReport(labels, tuple(tasks), average, {k: len(v) for k, v in values.items()}, tuple(unmatched),
                             confidence, n_resamples, seed, convention, {k: v for k, v in left_out.items() if v})


def task_checks(policies: Sequence[str], real: Sequence[float], sim: Sequence[float], pearson: float | None,
                labels: tuple[str, str] = ("real", "sim"), confidence: float = 0.95, seed: int = DEFAULT_SEED,
                convention: MmrvConvention = SIMPLER) -> Checks:
    """k, Fisher-z interval, drop-one leverage and the permutation p-value of one task."""
    k = len(policies)
    low, high, why = fisher_interval(pearson, k, confidence)
    dropped: dict[str, list[float | None]] = {kind: [] for kind in STATISTICS}
    moved: list[tuple[float, str]] = []
    if k >= 3:
        for i, policy in enumerate(policies):
            r_sub = [v for j, v in enumerate(real) if j != i]
            s_sub = [v for j, v in enumerate(sim) if j != i]
            for kind in STATISTICS:
                dropped[kind].append(correlation(kind, r_sub, s_sub, labels, convention)[0])
            value = dropped["pearson"][-1]
            if value is not None and pearson is not None:
                moved.append((abs(value - pearson), policy))
    most = min(moved, key=lambda m: (-m[0], m[1]))[1] if moved else None
    p, floor, mode = permutation_p(real, sim, seed)
    return Checks(k, low, high, why, leverage(dropped), most, p, floor, mode)
