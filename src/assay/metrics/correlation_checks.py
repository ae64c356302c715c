"""How much a real-to-sim correlation can be trusted: the checks printed beside it.

Real-to-sim correlations are usually computed from 3–8 policies. With so few
points one policy can carry the whole figure, and the smallest attainable p-value
is large. For one task with k policies, reference rates R and other rates S:

* ``k`` itself.
* Fisher-z interval of Pearson r: tanh(atanh(r) ± z_{(1+c)/2} / √(k − 3)); it
  needs k ≥ 4 (undefined, with a reason, below) and |r| < 1 (an r of ±1 gives the
  degenerate interval [r, r], which is reported as such).
* Drop-one leverage: the range [min, max] of each statistic over the k
  leave-one-policy-out subsets (k ≥ 3; subsets where the statistic is undefined are
  skipped and counted), and the policy whose removal moves Pearson r most.
* Exact permutation p-value of Pearson r, one-sided (agreement is the
  hypothesis): the share of the k! assignments of S to R whose r is ≥ the observed
  r (ties within 1e-12 count as ≥). Its floor is 1/k! when all values are distinct
  (only the observed assignment reaches the maximum): 1/6 for 3 policies, so no
  3-policy correlation is ever "significant" at 0.05. Exact up to k = 9
  (362 880 permutations); above, ``permutations`` seeded random permutations with
  p = (1 + #≥) / (1 + permutations) (Phipson & Smyth 2010), marked ``sampled``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from assay.serialize import DictMixin

EXACT_UP_TO = 9
DEFAULT_PERMUTATIONS = 100_000


@dataclass(frozen=True)
class Leverage:
    """The range of a statistic over the leave-one-policy-out subsets."""
    low: float | None
    high: float | None
    undefined_subsets: int


@dataclass(frozen=True)
class Checks(DictMixin):
    """What limits one task's correlation: k, Fisher-z interval, leverage, permutation p and its floor."""
    k: int
    fisher_low: float | None
    fisher_high: float | None
    fisher_reason: str | None
    leverage: dict[str, Leverage]
    most_influential: str | None  # policy whose removal changes Pearson r most
    permutation_p: float | None
    permutation_floor: float | None  # 1 / k!
    permutation_mode: str  # "exact", "sampled" or "undefined: ..."


def fisher_interval(r: float | None, k: int, confidence: float = 0.95) -> tuple[float | None, float | None, str | None]:
    """(low, high, None) or (None, None, reason): the Fisher-z interval of Pearson r over k policies."""
    if r is None:
        return None, None, "undefined: Pearson r is undefined"
    if k < 4:
        return None, None, f"undefined: Fisher z needs at least 4 policies, got {k}"
    if abs(r) >= 1.0:
        return float(r), float(r), None
    half = float(norm.ppf(0.5 + confidence / 2)) / math.sqrt(k - 3)
    z = math.atanh(r)
    return math.tanh(z - half), math.tanh(z + half), None


def _pearson_rows(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Pearson r of a fixed reference r (k,) against each row of s (rows, k)."""
    rc = r - r.mean()
    sc = s - s.mean(axis=1, keepdims=True)
    return (sc @ rc) / (np.sqrt((sc**2).sum(axis=1)) * math.sqrt(float((rc**2).sum())))


def permutation_p(real: Sequence[float], sim: Sequence[float], seed: int = 0,
                  permutations: int = DEFAULT_PERMUTATIONS) -> tuple[float | None, float | None, str]:
    """(p, floor, mode) of the one-sided permutation test of Pearson r (see the module docstring)."""
    r, s = np.asarray(real, dtype=np.float64), np.asarray(sim, dtype=np.float64)
    k = r.size
    if k < 2 or np.all(r == r[0]) or np.all(s == s[0]):
        return None, None, "undefined: needs at least 2 policies and non-constant rates on both sides"
    floor = 1.0 / math.factorial(k)
    observed = float(_pearson_rows(r, s[None, :])[0])
    if k <= EXACT_UP_TO:
        perms = np.array(list(itertools.permutations(range(k))), dtype=np.int64)
        values = _pearson_rows(r, s[perms])
        return float(np.mean(values >= observed - 1e-12)), floor, "exact"
    rng = np.random.default_rng(seed)
    values = _pearson_rows(r, np.stack([s[rng.permutation(k)] for _ in range(permutations)]))
    return float((1 + np.sum(values >= observed - 1e-12)) / (1 + permutations)), floor, "sampled"


def leverage(kind_values: dict[str, list[float | None]]) -> dict[str, Leverage]:
    """Leverage ranges from each statistic's leave-one-out values (None where undefined)."""
    out = {}
    for kind, values in kind_values.items():
        defined = [v for v in values if v is not None]
        out[kind] = Leverage(min(defined) if defined else None, max(defined) if defined else None,
                             len(values) - len(defined))
    return out
