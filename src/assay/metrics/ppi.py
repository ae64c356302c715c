"""Real success from many sim episodes and a few paired real trials: prediction-powered intervals.

Real trials are the expensive part; a simulator's episode on the same seed (initial condition) is a
cheap, biased prediction of the real outcome. Prediction-powered inference (Angelopoulos et al. 2023,
*Science* 382:669) corrects the bias of many predictions with a few paired labels; SureSim (Badithela
et al. 2025, arXiv 2510.04354) frames sim + real robot evaluation this way. With a binary sim outcome
the correction is exact by strata, the two-phase (double) sampling estimator (Neyman 1938):

* Phase 1: N sim episodes of a cell (policy, task), N₁ successes: π̂ = N₁/N, the sim success share.
* Phase 2: n real trials on seeds of those episodes, split by what sim did on the same seed:
  n₁ trials where sim succeeded (r₁ real successes), n₀ where it failed (r₀).
* **Estimate** θ̂ = π̂·r₁/n₁ + (1 − π̂)·r₀/n₀: the real rate in each sim stratum, weighted by how often
  sim lands in it. It is PPI with the sim outcome recalibrated on the paired trials (the prediction
  g(f) = r₁/n₁ when sim succeeded, r₀/n₀ when it failed). A stratum with no real trial (all n trials
  on seeds where sim succeeded, say) has an unknown real rate: the estimate uses the overall real
  rate r/n there, and the interval lets that stratum's rate be anything in [0, 1].
* **Interval** (no normal approximation; coverage shown by simulation, not proven): the real rates
  a = P(real | sim success) and b = P(real | sim failure) are drawn from their *exact*
  (Clopper–Pearson) confidence distributions, Beta(r, n − r + 1) for the lower end and
  Beta(r + 1, n − r) for the upper (a point at 0 or 1 at an edge, and at 0 and 1 when a stratum is
  empty), π from its mid-p confidence distribution (N is large); the lower end is the α/2 quantile
  of b_L + π(a_L − b_L) over seeded draws, the upper the 1 − α/2 quantile of b_U + π(a_U − b_U) (the
  way Fay & Feuer 1997 combine exact Poisson intervals of a weighted sum). Coverage ≥ 0.95 on the
  grid of docs/STATISTICS.md, by simulation.
* **Classical** beside it: Clopper–Pearson on the n real trials alone (the exact interval of the same
  family, so the comparison is like for like).
* **Effective real trials**: n·(W_classical / W_ppi)², the real-only trials whose interval would be as
  narrow (width scales as 1/√n); **saved** = that minus n (negative when sim says little about real,
  as at no correlation, where splitting n trials into two strata costs width).
* For reference, the power-tuned PPI++ estimate (Angelopoulos, Duchi & Zrnic 2023) with its normal
  interval, λ = Cov(y, f)/((1 + n/N)·Var f) clipped to [0, 1]: it under-covers at the n real
  evaluations have (0.50–0.96 on the grid), which is why it is not the interval reported.

Assumption (the design's, say it in a report): within each sim stratum, the seeds given real trials are
a random sample of the stratum's sim seeds. Choosing seeds by what sim did is allowed; choosing them by
anything else that predicts real success is not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from assay.errors import AssayError
from assay.metrics.rates import success_interval
from assay.metrics.trials_csv import Trial

DRAWS = 20000
METHOD = "two-phase PPI: exact (Clopper–Pearson) confidence distributions per sim stratum, seeded draws"
CLASSICAL = "Clopper–Pearson on the real trials alone"


@dataclass(frozen=True)
class PairedCounts:
    """The sufficient counts of one cell: sim episodes, and real trials split by the paired sim outcome."""

    sim_episodes: int  # N
    sim_successes: int  # N₁
    on_sim_success: tuple[int, int]  # (real successes r₁, real trials n₁) on seeds where sim succeeded
    on_sim_failure: tuple[int, int]  # (r₀, n₀) where sim failed

    @property
    def real_trials(self) -> int:
        """n, the real trials paired with a sim episode."""
        return self.on_sim_success[1] + self.on_sim_failure[1]

    @property
    def real_successes(self) -> int:
        """r, their real successes."""
        return self.on_sim_success[0] + self.on_sim_failure[0]

    def check(self) -> None:
        """One-line errors for impossible counts."""
        if not 0 <= self.sim_successes <= self.sim_episodes or self.sim_episodes == 0:
            raise AssayError(f"sim counts {self.sim_successes} of {self.sim_episodes} are not valid: "
                             "need 0 <= successes <= episodes and at least one episode")
        for name, (r, n) in (("sim success", self.on_sim_success), ("sim failure", self.on_sim_failure)):
            if not 0 <= r <= n:
                raise AssayError(f"real counts on seeds of {name}: {r} of {n} are not valid")
        if self.real_trials == 0:
            raise AssayError("no real trial: an estimate of real success needs at least one")


@dataclass(frozen=True)
class RealEstimate:
    """The real success rate of one cell: the prediction-powered estimate and interval, the classical one."""

    task: str
    policy: str
    counts: PairedCounts
    confidence: float
    estimate: float
    ci_low: float
    ci_high: float
    classical_estimate: float
    classical_low: float
    classical_high: float
    effective_real_trials: float | None  # n·(W_classical/W_ppi)²
    trials_saved: float | None  # effective − n (negative: sim made the interval wider)
    clt_estimate: float  # PPI++ (power-tuned), for reference only
    clt_low: float
    clt_high: float
    clt_lambda: float
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:

        """A JSON-ready dict of every field."""
        c = self.counts
        out = asdict(self)
        out["counts"] = {"sim_episodes": c.sim_episodes, "sim_successes": c.sim_successes,
                         "sim_rate": c.sim_successes / c.sim_episodes, "real_trials": c.real_trials,
                         "real_successes": c.real_successes,
                         "on_sim_success": {"real_successes": c.on_sim_success[0], "trials": c.on_sim_success[1]},
                         "on_sim_failure": {"real_successes": c.on_sim_failure[0], "trials": c.on_sim_failure[1]}}
        out["method"], out["classical_method"] = METHOD, CLASSICAL
        out["clt_method"] = "PPI++ (power-tuned) with a normal interval: reference only, under-covers at small n"
        out["notes"] = list(self.notes)
        return out


def _exact_lower(rng: np.random.Generator, k: int, n: int, draws: int) -> np.ndarray:
    """Draws of the exact lower confidence distribution Beta(k, n − k + 1); 0 at k = 0 (or n = 0)."""
    return np.zeros(draws) if k == 0 else rng.beta(k, n - k + 1, size=draws)


def _exact_upper(rng: np.random.Generator, k: int, n: int, draws: int) -> np.ndarray:
    """Draws of the exact upper confidence distribution Beta(k + 1, n − k); 1 at k = n (or n = 0)."""
    return np.ones(draws) if k == n else rng.beta(k + 1, n - k, size=draws)


def two_phase_interval(counts: PairedCounts, confidence: float = 0.95, seed: int = 0,
                       draws: int = DRAWS) -> tuple[float, float]:
    """The prediction-powered interval of the real rate (module doc), from seeded draws."""
    rng = np.random.default_rng(seed)
    (r1, n1), (r0, n0) = counts.on_sim_success, counts.on_sim_failure
    big_n, big_k = counts.sim_episodes, counts.sim_successes
    lower_half = rng.random(draws) < 0.5  # π from its mid-p confidence distribution (the even mixture)
    share = np.where(lower_half, _exact_lower(rng, big_k, big_n, draws), _exact_upper(rng, big_k, big_n, draws))
    a_low, b_low = _exact_lower(rng, r1, n1, draws), _exact_lower(rng, r0, n0, draws)
    a_high, b_high = _exact_upper(rng, r1, n1, draws), _exact_upper(rng, r0, n0, draws)
    tail = (1.0 - confidence) / 2.0
    low = float(np.quantile(b_low + share * (a_low - b_low), tail))
    high = float(np.quantile(b_high + share * (a_high - b_high), 1.0 - tail))
    return max(0.0, low), min(1.0, high)


def _clt(counts: PairedCounts, confidence: float) -> tuple[float, float, float, float]:
    """PPI++ with a power-tuned λ and a normal interval: (estimate, low, high, λ)."""
    n, big_n = counts.real_trials, counts.sim_episodes
    (r1, n1) = counts.on_sim_success
    y_mean, f_mean, big_f = counts.real_successes / n, n1 / n, counts.sim_successes / big_n
    var_f_all = big_f * (1 - big_f) * big_n / (big_n - 1) if big_n > 1 else 0.0
    cov = (r1 / n - y_mean * f_mean) * n / (n - 1) if n > 1 else 0.0
    lam = min(1.0, max(0.0, cov / ((1 + n / big_n) * var_f_all))) if var_f_all > 0 else 0.0
    estimate = y_mean + lam * (big_f - f_mean)
    # variance of the rectifier y − λf on the paired trials, and of λf over the sim episodes
    var_y = y_mean * (1 - y_mean) * n / (n - 1) if n > 1 else 0.0
    var_f = f_mean * (1 - f_mean) * n / (n - 1) if n > 1 else 0.0
    var_rect = max(0.0, var_y + lam**2 * var_f - 2 * lam * cov)
    half = float(stats.norm.ppf(0.5 + confidence / 2)) * math.sqrt(var_rect / n + lam**2 * var_f_all / big_n)
    return estimate, estimate - half, estimate + half, lam


def estimate_real(counts: PairedCounts, task: str = "", policy: str = "", confidence: float = 0.95,
                  seed: int = 0, draws: int = DRAWS) -> RealEstimate:
    """The prediction-powered estimate and interval of a cell's real success rate, beside the classical one."""
    if not 0.0 < confidence < 1.0:
        raise AssayError(f"confidence {confidence} is not valid; give a level strictly between 0 and 1 (e.g. 0.95)")
    counts.check()
    n, r = counts.real_trials, counts.real_successes
    share = counts.sim_successes / counts.sim_episodes
    notes: list[str] = []
    rates = []
    for name, weight, (rs, ns) in (("succeeded", share, counts.on_sim_success),
                                   ("failed", 1 - share, counts.on_sim_failure)):
        if ns == 0 and weight > 0:
            notes.append(f"no real trial on a seed where sim {name} ({weight:.1%} of sim episodes): that stratum's "
                         "real rate is unknown, the interval allows anything in [0, 1] there and the estimate "
                         "uses the overall real rate")
        rates.append(rs / ns if ns else r / n)
    if n >= counts.sim_episodes:
        notes.append(f"{n} real trials for {counts.sim_episodes} sim episodes: no sim episode is left without a real "
                     "trial, so sim only splits the real trials into two strata (a wider interval); read the "
                     "classical one, or run real trials on a few of the sim seeds")
    estimate = share * rates[0] + (1 - share) * rates[1]
    low, high = two_phase_interval(counts, confidence, seed, draws)
    low, high = min(low, estimate), max(high, estimate)
    classical = success_interval(r, n, confidence, "exact")
    assert classical is not None
    width, classical_width = high - low, classical.high - classical.low
    effective = n * (classical_width / width) ** 2 if width > 0 else None
    clt = _clt(counts, confidence)
    return RealEstimate(task, policy, counts, confidence, estimate, low, high, r / n, classical.low, classical.high,
                        effective, None if effective is None else effective - n, *clt, tuple(notes))


def paired_counts(sim: Iterable[Trial], real: Sequence[Trial]) -> dict[tuple[str, str], PairedCounts]:
    """Per (task, policy) of the real trials: the counts pairing each real trial with the sim episode of its seed.

    ``sim``: the scored sim episodes as trials (``trials_from_records``, or a per-trial CSV). A real task id
    without ``@version`` matches the sim task of that name. A real cell with no sim episodes, or a real
    trial whose seed has no scored sim episode of its cell, is a one-line error naming it.
    """
    outcomes: dict[tuple[str, str], dict[int, bool]] = defaultdict(dict)
    for episode in sim:
        cell = outcomes[(episode.task, episode.policy)]
        if episode.seed in cell:
            raise AssayError(f"two sim episodes of {episode.policy} on {episode.task} seed {episode.seed}; "
                             "give one variant (CAMPAIGN:VARIANT)")
        cell[episode.seed] = episode.success
    names: dict[str, set[str]] = defaultdict(set)
    for task, _ in outcomes:
        names[task.split("@")[0]].add(task)
    tallies: dict[tuple[str, str], list[int]] = {}
    missing: dict[tuple[str, str], list[int]] = defaultdict(list)
    for trial in real:
        versions = names.get(trial.task, set())
        task = next(iter(versions)) if "@" not in trial.task and len(versions) == 1 else trial.task
        seen = outcomes.get((task, trial.policy))
        if seen is None:
            known = ", ".join(f"{t} {p}" for t, p in sorted(outcomes)) or "no scored episode"
            raise AssayError(f"{trial.where}: no sim episodes of policy {trial.policy!r} on task {trial.task!r}; "
                             f"sim has {known}")
        if trial.seed not in seen:
            missing[(task, trial.policy)].append(trial.seed)
            continue
        tally = tallies.setdefault((task, trial.policy), [0, 0, 0, 0])  # r1, n1, r0, n0
        offset = 0 if seen[trial.seed] else 2
        tally[offset] += trial.success
        tally[offset + 1] += 1
    if missing:
        (task, policy), seeds = sorted(missing.items())[0]
        raise AssayError(f"real trials of {policy} on {task} at seed {', '.join(map(str, sorted(seeds)[:5]))} have "
                         "no scored sim episode on that seed; a real trial pairs with the sim episode of its seed "
                         "(rerun errors with `assay run --retry-errors`, or drop those trials)")
    return {key: PairedCounts(len(outcomes[key]), sum(outcomes[key].values()), (t[0], t[1]), (t[2], t[3]))
            for key, t in sorted(tallies.items())}
