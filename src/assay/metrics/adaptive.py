"""Decisions of an adaptive campaign, from the outcomes of its completed batches only.

A cell is (policy, task, variant). Its outcomes are listed in seed order (episode
index 0, 1, ...): 1.0 success, 0.0 failure or timeout, NaN ``error`` (never a
failure; a pair with an error on either side is left out of a comparison, a cell's
error leaves its interval's denominator). Looks happen at the end of every batch
(``batch`` episodes per active cell); a question is judged at the looks it has
data for, in order, so the same outcomes give the same stopping points whatever
the worker count or executor, and recomputing from the store after a resume gives
the same answer.

Questions, per task × variant:

* ``compare``: policies A, B; the sequential test of ``metrics/sequential.py``
  (``method`` lattice or mixture) at level α, the futility bound at δ, the horizon
  ``max_episodes``.
* ``rank``: every pair of the listed policies, each at α / (number of pairs)
  (Bonferroni, so the whole order is right with probability ≥ 1 − α). A policy keeps
  running while any of its pairs is unresolved — the next batches go only to the
  policies whose order is still open (overlapping).
* ``interval``: each cell's Beta-mixture confidence sequence at level α; the cell
  stops when its half-width is ≤ ``width``.
* ``robustness``: per policy × task, each variant's retention interval
  (``metrics/adaptive_robustness.py``) until its half-width is ≤ ``width``; the next
  batches go to the open variants whose interval is widest (the others wait:
  ``deferred``), and nominal runs while any variant is open.

The ``endpoint`` says what an outcome is: ``success`` (default) 0/1 as above;
``progress`` a score in [0, 1] (``assay.run.adaptive.progress_score``), judged by
the betting confidence sequence instead (``metrics/sequential_scores.py``: compare
and rank decide when the CS of E[a − b] excludes 0; interval uses the betting CS of
the cell's mean score). Looks, pairing, errors and yardsticks are the same.

The fixed-n yardstick per cell: paired McNemar at (α, power, δ) for compare, at
(α / pairs, power, δ) for rank, and ⌈z²_{1−α/2} · ¼ / w²⌉ (the Wald interval at
p = ½) for interval, and for robustness the delta-method ratio interval of the
retention at planning rates ½ (``retention_fixed_n``: 2 z² / w² per cell).
``saved`` = 1 − used / fixed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import norm

from assay.metrics.adaptive_robustness import NOMINAL_KEY, retention_fixed_n, robustness_round
from assay.metrics.sequential import BUDGET, DECIDED, NARROW, compare_stop, fixed_n_pairs, mean_cs, rate_cs
from assay.metrics.sequential_scores import scores_compare_stop
from assay.spec import CampaignSpec

Cell = tuple[str, str, str]  # (policy, task, variant key)
RANKED = "ranked (every pair resolved)"


@dataclass(frozen=True)
class Design:
    """The design of an adaptive campaign's goal (from its ``adaptive:`` block)."""
    goal: str
    policies: tuple[str, ...]
    alpha: float
    power: float
    delta: float
    max_episodes: int
    batch: int
    width: float | None
    method: str
    endpoint: str = "success"  # or "progress"


@dataclass(frozen=True)
class Question:
    """One comparison (A vs B) or one interval (a cell's rate) and where it stands."""
    kind: str  # "compare" or "interval"
    task: str
    variant: str
    policies: tuple[str, ...]  # (A, B) or (policy,)
    episodes: int  # per cell, at the look that stopped it (or the last look)
    reason: str | None  # None: still open
    p_value: float | None
    estimate: float  # A − B, or the rate
    low: float
    high: float
    a_only: int | None = None
    b_only: int | None = None


@dataclass(frozen=True)
class CellState:
    """One (policy, task, variant) cell: episodes run and why it stopped (None: still running)."""
    policy: str
    task: str
    variant: str
    episodes: int
    reason: str | None  # None: still running
    fixed_n: int


@dataclass(frozen=True)
class AdaptiveState:
    """Every question and cell after the completed rounds; ``active`` are the cells to run next."""
    design: Design
    questions: tuple[Question, ...]
    cells: tuple[CellState, ...]
    episodes_used: int
    episodes_fixed: int
    deferred: tuple[Cell, ...] = ()  # open cells that wait this round (robustness: not among the widest)

    @property
    def active(self) -> tuple[Cell, ...]:
        """The cells that still run in the next round."""
        return tuple((c.policy, c.task, c.variant) for c in self.cells
                     if c.reason is None and (c.policy, c.task, c.variant) not in self.deferred)

    @property
    def saved(self) -> float:
        """1 − episodes used / episodes of the fixed-n design (0 without a design)."""
        return 1.0 - self.episodes_used / self.episodes_fixed if self.episodes_fixed else 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON (the default endpoint is left out: success campaigns write what they always did)."""
        data = {**asdict(self), "saved": self.saved}
        if not self.deferred:
            del data["deferred"]
        if self.design.endpoint == "success":
            del data["design"]["endpoint"]
        return data


def _looks(n: int, batch: int, horizon: int) -> list[int]:
    ends = list(range(batch, min(n, horizon) + 1, batch))
    if n >= horizon and (not ends or ends[-1] != horizon):
        ends.append(horizon)
    return ends


def _compare(design: Design, alpha: float, task: str, variant: str, a_name: str, b_name: str,
             a: np.ndarray, b: np.ndarray) -> Question:
    n = min(a.size, b.size)
    ends = _looks(n, design.batch, design.max_episodes)
    valid = ~(np.isnan(a[:n]) | np.isnan(b[:n]))
    counts = np.cumsum(valid)
    x, y = a[:n][valid], b[:n][valid]
    looks = [int(counts[e - 1]) for e in ends]
    at_budget = n >= design.max_episodes
    if not looks:
        result = None
    elif design.endpoint == "progress":
        result = scores_compare_stop(x, y, alpha=alpha, power=design.power, delta=design.delta,
                                     max_pairs=design.max_episodes, looks=looks, final=at_budget)
    else:
        result = compare_stop(x, y, alpha=alpha, power=design.power, delta=design.delta,
                              max_pairs=design.max_episodes, method=design.method, looks=looks, final=at_budget)
    if result is None:
        reason = BUDGET if at_budget else None
        return Question("compare", task, variant, (a_name, b_name), ends[-1] if ends else 0, reason,
                        1.0 if reason else None,
                        float(np.mean(x - y)) if x.size else 0.0, -1.0, 1.0, *_one_sided(design, x, y))
    episodes = ends[looks.index(result.pairs)] if result.pairs in looks else ends[-1]
    return Question("compare", task, variant, (a_name, b_name), episodes, result.reason, result.p_value,
                    result.difference, result.ci_low, result.ci_high, result.a_only, result.b_only)


def _one_sided(design: Design, x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """Pairs won by A and by B: discordant successes, or (progress) the higher score."""
    if design.endpoint == "progress":
        return int(np.sum(x > y)), int(np.sum(x < y))
    return int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))


def _interval(design: Design, task: str, variant: str, policy: str, values: np.ndarray) -> Question:
    assert design.width is not None
    ends = _looks(values.size, design.batch, design.max_episodes)
    last = None
    for end in ends:
        scored = values[:end][~np.isnan(values[:end])]
        ci = (mean_cs(scored.tolist(), design.alpha) if design.endpoint == "progress"
              else rate_cs(int(scored.sum()), int(scored.size), design.alpha))
        rate = float(scored.mean()) if scored.size else 0.0
        if ci.width / 2 <= design.width + 1e-12:
            return Question("interval", task, variant, (policy,), end, NARROW, None, rate, ci.low, ci.high)
        last = Question("interval", task, variant, (policy,), end,
                        BUDGET if end >= design.max_episodes else None, None, rate, ci.low, ci.high)
    return last or Question("interval", task, variant, (policy,), 0, None, None, 0.0, 0.0, 1.0)


def interval_fixed_n(alpha: float, width: float) -> int:
    """Episodes per cell a fixed-n Wald interval needs for half-width ``width`` at p = ½."""
    z = float(norm.ppf(1 - alpha / 2))
    return math.ceil(z * z * 0.25 / (width * width) - 1e-9)


YARDSTICKS = {"compare": "paired McNemar at (α, power, δ)", "rank": "paired McNemar at α / pairs",
              "interval": "Wald interval at p = ½",
              "robustness": "delta-method retention-ratio interval at planning rates ½"}


def decide(design: Design, outcomes: Mapping[Cell, Sequence[float]]) -> AdaptiveState:
    """Every question's state and every cell's, from the outcomes run so far (seed order per cell)."""
    arrays = {cell: np.asarray(v, dtype=np.float64) for cell, v in outcomes.items()}
    if design.goal == "robustness":
        return _robustness(design, arrays)
    groups = sorted({(task, variant) for _, task, variant in arrays})
    questions: list[Question] = []
    cells: list[CellState] = []
    for task, variant in groups:
        policies = [p for p in design.policies if (p, task, variant) in arrays]
        if design.goal == "interval":
            fixed = interval_fixed_n(design.alpha, design.width or 0.1)
            for p in policies:
                q = _interval(design, task, variant, p, arrays[(p, task, variant)])
                questions.append(q)
                cells.append(CellState(p, task, variant, q.episodes, q.reason, fixed))
            continue
        pairs = list(itertools.combinations(policies, 2))
        alpha = design.alpha / max(1, len(pairs))
        fixed = fixed_n_pairs(alpha, design.power, design.delta)
        qs = [_compare(design, alpha, task, variant, a, b, arrays[(a, task, variant)], arrays[(b, task, variant)])
              for a, b in pairs]
        questions.extend(qs)
        for p in policies:
            own = [q for q in qs if p in q.policies]
            ran = int(arrays[(p, task, variant)].size)
            if any(q.reason is None for q in own) and ran < design.max_episodes:
                reason = None
            elif design.goal == "rank" and all(q.reason not in (None, BUDGET) for q in own):
                reason = RANKED
            else:
                reason = own[0].reason if len(own) == 1 else (BUDGET if ran >= design.max_episodes else RANKED)
            cells.append(CellState(p, task, variant, ran, reason, fixed))
    used = sum(c.episodes for c in cells)
    return AdaptiveState(design, tuple(questions), tuple(cells), used, sum(c.fixed_n for c in cells))


def _robustness(design: Design, arrays: Mapping[Cell, np.ndarray]) -> AdaptiveState:
    fixed = retention_fixed_n(design.alpha, design.width or 0.1)
    questions: list[Question] = []
    cells: list[CellState] = []
    deferred: list[Cell] = []
    for policy, task in sorted({(p, t) for p, t, k in arrays if k == NOMINAL_KEY}):
        rows, widest, nominal_reason = robustness_round(design.alpha, design.width or 0.1, design.max_episodes,
                                                        policy, task, arrays)
        cells.append(CellState(policy, task, NOMINAL_KEY, int(arrays[(policy, task, NOMINAL_KEY)].size),
                               nominal_reason, fixed))
        for key, episodes, reason, point, low, high in rows:
            questions.append(Question("retention", task, key, (policy,), episodes, reason, None,
                                      0.0 if math.isnan(point) else point, low, high))
            cells.append(CellState(policy, task, key, episodes, reason, fixed))
            if reason is None and key not in widest:
                deferred.append((policy, task, key))
    used = sum(c.episodes for c in cells)
    return AdaptiveState(design, tuple(questions), tuple(cells), used, sum(c.fixed_n for c in cells), tuple(deferred))


def design_for(spec: CampaignSpec) -> Design:
    """The adaptive design of a campaign spec (ValueError if it is not adaptive)."""
    ad = spec.adaptive
    if ad is None:
        raise ValueError(f"campaign {spec.name!r} is not adaptive")
    policies = ad.policies or tuple(p.name for p in spec.policies)
    return Design(ad.goal.value, tuple(policies), ad.alpha, ad.power, ad.delta, ad.max_episodes, ad.batch,
                  ad.width, ad.method, ad.endpoint.value)


def judge_for(spec: CampaignSpec) -> Callable[[Mapping[Cell, Sequence[float]]], AdaptiveState]:
    """What ``run_campaign(..., judge=...)`` calls after every round of an adaptive campaign."""
    design = design_for(spec)
    return lambda outcomes: decide(design, outcomes)


__all__ = ["DECIDED", "RANKED", "AdaptiveState", "CellState", "Design", "Question", "decide", "design_for",
           "YARDSTICKS", "interval_fixed_n", "judge_for"]
