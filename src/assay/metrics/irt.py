"""Ranking models for sparse leaderboards: a two-parameter item-response model and Bradley–Terry.

Averaging a policy's per-task rates ranks it by the tasks it happened to be run on: on a leaderboard
where most (policy, task) cells are empty, a policy evaluated only on easy tasks outranks a better one
evaluated on hard ones. A model that gives every task its own difficulty compares policies on a common
scale from whatever cells exist.

* **2PL item response** (``irt``): P(success | policy i, task j) = σ(a_j (θ_i − b_j)), ability θ_i,
  task difficulty b_j, discrimination a_j = exp(α_j) > 0. Fitted by penalized maximum likelihood on the
  binomial counts of the observed cells (missing cells simply contribute nothing), with the priors that
  fix the scale and keep all-success cells finite: θ ~ N(0, 1), α ~ N(0, 0.5²), b ~ N(0, 2²)
  (``scipy.optimize.minimize``, BFGS, analytic gradient). Policies rank by θ.
* **Bradley–Terry** (``bt``): P(i beats j) = σ(s_i − s_j), s ~ N(0, 2²), fitted on wins. From a campaign
  the wins use the paired structure: on each (task, seed) where both scored, i beats j when i succeeded
  and j did not (ties carry no information and are dropped). From a results CSV (counts only) the
  expected wins of independent episodes stand in: min(n_i, n_j)·p_i(1 − p_j) per task both ran.
* **Rank intervals**: the central ``confidence`` range of the ranks over refits on resampled data,
  competition ranks (ties, scores equal to 1e-6, share the better rank). A campaign is resampled as
  ``ranking.leaderboard`` does, whole rows of each task's seed × policy table (the pairing kept); a results
  CSV by redrawing each cell Binomial(n, (k + ½)/(n + 1)) (so a 10 of 10 cell still varies). Seeded: same
  data, same intervals.
* Beside each model score: the plain average of the policy's observed rates and its rank, the baseline
  the model is meant to beat (``benchmarks/sparse_ranking.py``, docs/STATISTICS.md).

A policy with no scored cell has no score and no rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, special

from assay.errors import AssayError
from assay.metrics.bootstrap import check_settings
from assay.metrics.outcomes import OutcomeGrid
from assay.metrics.ranking import competition_ranks
from assay.metrics.results_csv import RateEntry
from assay.serialize import DictMixin

MODELS = ("irt", "bt")
TIE_DIGITS = 6  # scores equal to 1e-6 share a rank
THETA_SD, LOG_A_SD, B_SD, BT_SD = 1.0, 0.5, 2.0, 2.0


@dataclass(frozen=True)
class Counts:
    """Successes and scored trials per (policy, task); trials 0 marks a missing cell."""

    policies: tuple[str, ...]
    tasks: tuple[str, ...]
    successes: np.ndarray  # (policies, tasks)
    trials: np.ndarray

    @property
    def coverage(self) -> float:
        """The share of (policy, task) cells with at least one scored trial."""
        return float((self.trials > 0).mean())


def counts_from_grid(grid: OutcomeGrid) -> Counts:
    """A campaign's counts: each task's scored episodes per policy."""
    pairs = [[t.counts(p) for t in grid.tasks] for p in grid.policies]
    return Counts(grid.policies, grid.task_ids, np.array([[k for k, _ in row] for row in pairs], dtype=float),
                  np.array([[n for _, n in row] for row in pairs], dtype=float))


def counts_from_entries(entries: list[RateEntry]) -> Counts:
    """A results CSV's counts (rows need successes,trials); absent (task, policy) rows are missing cells."""
    without = [e for e in entries if e.successes is None or e.trials is None]
    if without:
        raise AssayError(f"{without[0].source} row {without[0].row}: a ranking model needs successes,trials, not only "
                         "success_rate (the counts weigh each cell)")
    policies = tuple(sorted({e.policy for e in entries}))
    tasks = tuple(sorted({e.task for e in entries}))
    successes, trials = np.zeros((len(policies), len(tasks))), np.zeros((len(policies), len(tasks)))
    for e in entries:
        i, j = policies.index(e.policy), tasks.index(e.task)
        successes[i, j], trials[i, j] = float(e.successes or 0), float(e.trials or 0)
    return Counts(policies, tasks, successes, trials)


def fit_irt(successes: np.ndarray, trials: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """The 2PL fit: the parameter vector [θ (policies), α (tasks), b (tasks)] at the penalized optimum."""
    n_pol, n_task = successes.shape
    failures = trials - successes

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        theta, alpha, b = x[:n_pol], x[n_pol:n_pol + n_task], x[n_pol + n_task:]
        a = np.exp(alpha)
        z = a[None, :] * (theta[:, None] - b[None, :])
        nll = float((successes * np.logaddexp(0.0, -z) + failures * np.logaddexp(0.0, z)).sum())
        residual = trials * special.expit(z) - successes  # d nll / d z
        g_theta = (residual * a[None, :]).sum(axis=1) + theta / THETA_SD**2
        g_alpha = (residual * z).sum(axis=0) + alpha / LOG_A_SD**2
        g_b = -(residual * a[None, :]).sum(axis=0) + b / B_SD**2
        penalty = 0.5 * (float((theta**2).sum()) / THETA_SD**2 + float((alpha**2).sum()) / LOG_A_SD**2
                         + float((b**2).sum()) / B_SD**2)
        return nll + penalty, np.concatenate([g_theta, g_alpha, g_b])

    x0 = np.zeros(n_pol + 2 * n_task) if start is None else start
    return np.asarray(optimize.minimize(objective, x0, jac=True, method=_method(x0.size)).x)


def fit_bt(wins: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Bradley–Terry strengths from ``wins[i, j]`` (times i beat j), at the penalized optimum."""

    def objective(s: np.ndarray) -> tuple[float, np.ndarray]:
        diff = s[:, None] - s[None, :]
        nll = float((wins * np.logaddexp(0.0, -diff)).sum())
        pull = wins * special.expit(-diff)  # d nll / d diff = -wins·σ(-diff)
        grad = -pull.sum(axis=1) + pull.sum(axis=0) + s / BT_SD**2
        return nll + 0.5 * float((s**2).sum()) / BT_SD**2, grad

    x0 = np.zeros(wins.shape[0]) if start is None else start
    return np.asarray(optimize.minimize(objective, x0, jac=True, method=_method(x0.size)).x)


def _method(parameters: int) -> str:
    """BFGS for the usual sizes; L-BFGS-B (no dense d × d matrix) beyond 2000 parameters. L-BFGS-B's
    BLAS threads made a 12 × 8 fit 50× slower on a shared 2-core machine, so it is not the default."""
    return "BFGS" if parameters <= 2000 else "L-BFGS-B"


def paired_wins(values: list[np.ndarray]) -> np.ndarray:
    """Wins over each task's seed × policy table (1/0/NaN): i beats j on a row where i succeeded and j failed."""
    wins = 0.0
    for table in values:
        scored = (~np.isnan(table)).astype(float)
        success = np.where(np.isnan(table), 0.0, table)
        wins = wins + success.T @ (scored - success)
    return np.asarray(wins)


def expected_wins(successes: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """Wins of independent episodes from counts: Σ over tasks both ran of min(n_i, n_j)·p_i(1 − p_j)."""
    seen = trials > 0
    rate = np.where(seen, successes / np.maximum(trials, 1.0), 0.0)
    wins = np.zeros((successes.shape[0], successes.shape[0]))
    for j in range(successes.shape[1]):
        both = seen[:, j][:, None] & seen[:, j][None, :]
        pairs = np.minimum(trials[:, j][:, None], trials[:, j][None, :])
        wins += np.where(both, pairs * rate[:, j][:, None] * (1.0 - rate[:, j][None, :]), 0.0)
    np.fill_diagonal(wins, 0.0)
    return wins


def average_scores(counts: Counts) -> np.ndarray:
    """The plain average of each policy's observed per-task rates (NaN with none)."""
    seen = counts.trials > 0
    rates = np.where(seen, counts.successes / np.maximum(counts.trials, 1.0), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen.any(axis=1), rates.sum(axis=1) / seen.sum(axis=1), np.nan)


def model_scores(model: str, counts: Counts, tables: list[np.ndarray] | None = None,
                 start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(score per policy, the fitted parameter vector); ``tables``: the campaign's paired tables, for ``bt``."""
    if model not in MODELS:
        raise AssayError(f"ranking model {model!r} is not valid; valid: {', '.join(MODELS)}")
    if model == "irt":
        x = fit_irt(counts.successes, counts.trials, start)
        scores = x[:len(counts.policies)]
    else:
        wins = paired_wins(tables) if tables is not None else expected_wins(counts.successes, counts.trials)
        x = scores = fit_bt(wins, start)
    # identical data give scores equal up to the optimizer's last digits: round so that they tie
    return np.round(scores, TIE_DIGITS), x


@dataclass(frozen=True)
class ModelRow(DictMixin):
    """One policy on a model leaderboard, with the plain average beside it."""

    policy: str
    score: float | None  # θ (irt) or log-strength (bt); None without a scored cell
    rank: int | None
    rank_low: int | None
    rank_high: int | None
    tasks_scored: int
    average: float | None  # plain average of its observed rates
    average_rank: int | None

    @property
    def rank_text(self) -> str:
        """``2 [1–3]`` (``-`` when unranked)."""
        if self.rank is None:
            return "-"
        return str(self.rank) if self.rank_low == self.rank_high else f"{self.rank} [{self.rank_low}–{self.rank_high}]"


@dataclass(frozen=True)
class ModelLeaderboard:
    """Policies ranked by a fitted model, with rank intervals; tasks' fitted parameters for ``irt``."""

    model: str
    rows: tuple[ModelRow, ...]  # best first; unranked last
    tasks: tuple[dict[str, object], ...]  # irt: task, discrimination, difficulty, policies scored
    coverage: float  # share of (policy, task) cells observed
    resampling: str
    confidence: float
    n_resamples: int
    seed: int

    def to_dict(self) -> dict[str, object]:

        """A JSON-ready dict of every field."""
        return {**{k: v for k, v in asdict(self).items() if k not in ("rows", "tasks")},
                "rows": [r.to_dict() for r in self.rows], "tasks": list(self.tasks)}


def _resampled(counts: Counts, tables: list[np.ndarray] | None, rng: np.random.Generator
               ) -> tuple[Counts, list[np.ndarray] | None]:
    """One resample: the campaign's seed rows per task (paired), or each cell redrawn from its counts."""
    if tables is None:
        smoothed = (counts.successes + 0.5) / (counts.trials + 1.0)
        drawn = rng.binomial(counts.trials.astype(np.int64), smoothed).astype(float)
        return Counts(counts.policies, counts.tasks, drawn, counts.trials), None
    drawn_tables = [table[rng.integers(0, table.shape[0], table.shape[0])] for table in tables]
    successes = np.stack([np.nansum(t, axis=0) for t in drawn_tables], axis=1)
    trials = np.stack([(~np.isnan(t)).sum(axis=0) for t in drawn_tables], axis=1).astype(float)
    return Counts(counts.policies, counts.tasks, successes, trials), drawn_tables


def model_leaderboard(model: str, counts: Counts, tables: list[np.ndarray] | None = None, confidence: float = 0.95,
                      n_resamples: int = 500, seed: int = 0) -> ModelLeaderboard:
    """Rank the policies of ``counts`` by ``model`` with bootstrap rank intervals (module doc).

    ``tables``: per task (in ``counts.tasks`` order) the seed × policy table of a campaign (1/0/NaN), for the
    paired resampling and the paired wins; None for counts from a results CSV.
    """
    check_settings(confidence, n_resamples)
    ranked = counts.trials.sum(axis=1) > 0
    if not ranked.any():
        raise AssayError("no scored cell: nothing to rank")
    scores, x = model_scores(model, counts, tables)
    rng = np.random.default_rng(seed)
    boot = np.empty((n_resamples, int(ranked.sum())))
    for r in range(n_resamples):
        again, again_tables = _resampled(counts, tables, rng)
        boot[r] = model_scores(model, again, again_tables, start=x)[0][ranked]
    boot_ranks = competition_ranks(boot)
    point = competition_ranks(scores[ranked])
    average = average_scores(counts)
    average_rank = competition_ranks(average[ranked])
    tail = (1.0 - confidence) / 2.0
    rows = []
    k = 0
    for i, policy in enumerate(counts.policies):
        scored = int((counts.trials[i] > 0).sum())
        if not ranked[i]:
            rows.append(ModelRow(policy, None, None, None, None, 0, None, None))
            continue
        low, high = np.quantile(boot_ranks[:, k], [tail, 1.0 - tail], method="inverted_cdf")
        rows.append(ModelRow(policy, float(scores[i]), int(point[k]), int(low), int(high), scored,
                             float(average[i]), int(average_rank[k])))
        k += 1
    rows.sort(key=lambda r: (r.score is None, -(r.score or 0.0), r.policy))
    tasks: list[dict[str, object]] = []
    if model == "irt":
        n_pol, n_task = len(counts.policies), len(counts.tasks)
        tasks = [{"task": t, "discrimination": float(np.exp(x[n_pol + j])), "difficulty": float(x[n_pol + n_task + j]),
                  "policies_scored": int((counts.trials[:, j] > 0).sum())} for j, t in enumerate(counts.tasks)]
    resampling = ("seed rows of each task, paired across policies" if tables is not None
                  else "each cell redrawn Binomial(n, (k + 0.5)/(n + 1))")
    return ModelLeaderboard(model, tuple(rows), tuple(tasks), counts.coverage, resampling, confidence, n_resamples,
                            seed)
