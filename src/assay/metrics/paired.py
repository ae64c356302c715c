"""Two runs of the same episodes, paired by (task, variant, seed): their difference, and their equivalence.

``assay protocol diff`` switches one knob of a protocol and asks how much the success rate moved;
``assay equivalence`` runs one campaign under two environments and asks whether they are the same within a
margin; ``assay compare`` on two bundles pairs two labs' episodes. All three read outcomes keyed by the pair's
identity (``PairKey``) on each side: ``True`` success, ``False`` failure or timeout, ``None`` an ``error``
episode (dropped from the pairs, and counted).

* **Difference** B − A: Newcombe's paired square-and-add interval (``metrics.intervals``) and McNemar's exact
  test on the discordant pairs (``metrics.comparisons``).
* **Equivalence** (TOST, two one-sided tests at level α, Schuirmann 1987): A and B are equivalent within
  ``margin`` when both one-sided nulls are rejected: H0⁺ "B − A ≥ margin" and H0⁻ "B − A ≤ −margin". Each
  one-sided test is **exact and unconditional** on the paired table: its statistic is Tango's score (the
  difference of the discordant counts less n·margin, over its standard error at the restricted maximum-likelihood
  share of discordant pairs), and its p-value is the largest probability, over the nuisance (the share of
  pairs only A won; a grid of ``NUISANCE_GRID`` + 1 values), of a score at most the observed one, summed over
  every paired table of n pairs. The size at the margin is therefore at most α whatever the discordance, up to
  the grid (``benchmarks/equivalence_type1.py`` measures it); the interval-inclusion form with Newcombe's
  interval reached 0.11 at n = 50 there and was not used. Beyond ``MAX_EXACT`` pairs the score's normal
  approximation is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cache

import numpy as np
from scipy import special, stats

from assay.errors import AssayError
from assay.metrics.comparisons import mcnemar_exact
from assay.metrics.intervals import newcombe_paired_interval

PairKey = tuple[str, str, int]  # (task, variant, seed)
NUISANCE_GRID = 300
MAX_EXACT = 2000  # pairs: beyond, the score test's normal approximation (the exact one holds n² tables)


@dataclass(frozen=True)
class PairedDifference:
    """B − A on the episodes both ran: the paired table, the difference, its interval and McNemar's p."""

    both: int
    a_only: int  # A succeeded, B did not
    b_only: int
    neither: int
    dropped: int  # pairs with an error on either side, or run on one side only
    difference: float  # rate(B) − rate(A) over the pairs
    low: float
    high: float
    p_value: float
    confidence: float

    @property
    def pairs(self) -> int:
        """Pairs scored on both sides."""
        return self.both + self.a_only + self.b_only + self.neither

    @property
    def rate_a(self) -> float:
        """A's success rate over the pairs."""
        return (self.both + self.a_only) / self.pairs

    @property
    def rate_b(self) -> float:
        """B's success rate over the pairs."""
        return (self.both + self.b_only) / self.pairs

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval leaves out 0 (the difference is detected at this confidence)."""
        return self.low > 0.0 or self.high < 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {**asdict(self), "pairs": self.pairs, "rate_a": self.rate_a, "rate_b": self.rate_b,
                "excludes_zero": self.excludes_zero}


def paired_table(a: Mapping[PairKey, bool | None], b: Mapping[PairKey, bool | None]) -> tuple[int, int, int, int, int]:
    """(both, A only, B only, neither, dropped) over the union of the keys."""
    both = a_only = b_only = neither = dropped = 0
    for key in set(a) | set(b):
        first, second = a.get(key), b.get(key)
        if first is None or second is None:
            dropped += 1
        elif first and second:
            both += 1
        elif first:
            a_only += 1
        elif second:
            b_only += 1
        else:
            neither += 1
    return both, a_only, b_only, neither, dropped


def paired_difference(a: Mapping[PairKey, bool | None], b: Mapping[PairKey, bool | None],
                      confidence: float = 0.95) -> PairedDifference:
    """B − A over the keys both scored (module doc); AssayError when no pair is scored on both sides."""
    both, a_only, b_only, neither, dropped = paired_table(a, b)
    n = both + a_only + b_only + neither
    if n == 0:
        raise AssayError("no episode was scored on both sides (same task, variant and seed)")
    interval = newcombe_paired_interval(both, b_only, a_only, neither, confidence)  # p_B − p_A
    assert interval is not None
    return PairedDifference(both, a_only, b_only, neither, dropped, (b_only - a_only) / n, interval.low,
                            interval.high, mcnemar_exact(a_only, b_only), confidence)


def score(b: np.ndarray, c: np.ndarray, n: int, margin: float) -> np.ndarray:
    """Tango's score statistic of H0 "B − A = margin" at the paired counts (``b`` only A, ``c`` only B succeeded):
    (c − b − n·margin) / sqrt(n·(2q̃ + margin − margin²)), q̃ the restricted maximum-likelihood share of A-only
    pairs (the root of 2n q² − (b(s − 2m) + c s − 2 r m) q − b m s = 0, s = 1 − m, r = n − b − c)."""
    b, c = np.asarray(b, dtype=float), np.asarray(c, dtype=float)
    s, r = 1.0 - margin, n - b - c
    linear = -(b * (s - 2.0 * margin) + c * s - 2.0 * r * margin)
    q = (-linear + np.sqrt(linear * linear + 8.0 * n * b * margin * s)) / (4.0 * n)
    return np.asarray((c - b - n * margin) / np.sqrt(n * (2.0 * q + margin - margin * margin)))


@cache
def null_distribution(n: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Every paired table of n pairs sorted by its score, and for each the largest P(score ≤ it) over the nuisance
    (the share of A-only pairs q, B-only q + margin) on a grid of ``NUISANCE_GRID`` + 1 values."""
    b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    keep = b + c <= n
    b, c = b[keep].astype(float), c[keep].astype(float)
    z = score(b, c, n, margin)
    order = np.argsort(z, kind="stable")
    rest = n - b - c
    base = special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(rest + 1)
    best = np.zeros(len(z))
    for q in np.linspace(0.0, (1.0 - margin) / 2.0, NUISANCE_GRID + 1):
        neither = max(1.0 - 2.0 * q - margin, 0.0)
        with np.errstate(divide="ignore"):
            log = base + special.xlogy(b, q) + special.xlogy(c, q + margin) + special.xlogy(rest, neither)
        best = np.maximum(best, np.cumsum(np.exp(log)[order]))
    return z[order], np.minimum(best, 1.0)


def one_sided_p(n: int, against: int, towards: int, margin: float) -> float:
    """The p-value of H0 "the side with ``towards`` pairs is better by at least ``margin``" (``against``: the pairs
    only the other side won): exact and unconditional up to ``MAX_EXACT`` pairs (Tango's score, its largest tail
    over the nuisance), beyond that the score's normal approximation."""
    observed = float(score(np.array([against]), np.array([towards]), n, margin)[0])
    if n > MAX_EXACT:
        return float(stats.norm.cdf(observed))
    ordered, tails = null_distribution(n, margin)
    index = int(np.searchsorted(ordered, observed + 1e-12 * max(1.0, abs(observed)), side="right")) - 1
    return float(tails[index]) if index >= 0 else 0.0


@dataclass(frozen=True)
class Equivalence:
    """TOST of B − A within ±margin at level α (exact, unconditional), with the paired difference it read."""

    margin: float
    alpha: float
    difference: PairedDifference  # its interval at confidence 1 − 2α, for reading
    p_upper: float  # H0: B − A ≥ +margin
    p_lower: float  # H0: B − A ≤ −margin
    equivalent: bool
    verdict: str

    @property
    def p_value(self) -> float:
        """The TOST p-value: the larger of the two one-sided p-values."""
        return max(self.p_upper, self.p_lower)

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"margin": self.margin, "alpha": self.alpha, "equivalent": self.equivalent, "verdict": self.verdict,
                "p_value": self.p_value, "p_upper": self.p_upper, "p_lower": self.p_lower,
                "method": "TOST, exact unconditional on the paired table (statistic: B-only − A-only pairs)",
                "difference": self.difference.to_dict()}


def equivalence(a: Mapping[PairKey, bool | None], b: Mapping[PairKey, bool | None], margin: float,
                alpha: float = 0.05) -> Equivalence:
    """Whether B and A are equivalent within ``margin`` (module doc: TOST by interval inclusion)."""
    if not 0.0 < margin < 1.0:
        raise AssayError(f"margin {margin} is not valid; give a difference in success rate between 0 and 1 (e.g. 0.05)")
    if not 0.0 < alpha < 0.5:
        raise AssayError(f"alpha {alpha} is not valid; give a level between 0 and 0.5 (e.g. 0.05)")
    difference = paired_difference(a, b, 1.0 - 2.0 * alpha)
    n = difference.pairs
    upper = one_sided_p(n, difference.a_only, difference.b_only, margin)  # H0: B − A ≥ margin
    lower = one_sided_p(n, difference.b_only, difference.a_only, margin)  # H0: A − B ≥ margin
    inside = max(upper, lower) <= alpha
    said = (f"B − A = {difference.difference:+.3f} over {n} pairs (TOST p = {max(upper, lower):.3g}; "
            f"{1 - 2 * alpha:.0%} interval [{difference.low:+.3f}, {difference.high:+.3f}])")
    verdict = (f"equivalent within ±{margin:g} at alpha {alpha:g}: {said}" if inside else
               f"not shown equivalent within ±{margin:g} at alpha {alpha:g}: {said}")
    return Equivalence(margin, alpha, difference, upper, lower, inside, verdict)
