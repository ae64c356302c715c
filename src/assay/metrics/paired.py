"""Two runs of the same episodes, paired by (task, variant, seed): their difference, and their equivalence.

``assay protocol diff`` switches one knob of a protocol and asks how much the success rate moved;
``assay equivalence`` runs one campaign under two environments and asks whether they are the same within a
margin; ``assay compare`` on two bundles pairs two labs' episodes. All three read outcomes keyed by the pair's
identity (``PairKey``) on each side: ``True`` success, ``False`` failure or timeout, ``None`` an ``error``
episode (dropped from the pairs, and counted).

* **Difference** B − A: Newcombe's paired square-and-add interval (``metrics.intervals``) and McNemar's exact
  test on the discordant pairs (``metrics.comparisons``).
* **Equivalence** (TOST, two one-sided tests at level α): A and B are equivalent within ``margin`` when the
  ``1 − 2α`` Newcombe interval of B − A lies inside ``(−margin, margin)``; this is the interval-inclusion form
  of TOST (Schuirmann 1987). Its size at the margin, for paired binary outcomes, is measured by
  ``benchmarks/equivalence_type1.py`` (docs/PROTOCOLS.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from assay.errors import AssayError
from assay.metrics.comparisons import mcnemar_exact
from assay.metrics.intervals import newcombe_paired_interval

PairKey = tuple[str, str, int]  # (task, variant, seed)


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


@dataclass(frozen=True)
class Equivalence:
    """TOST of B − A within ±margin at level α, with the paired difference it read."""

    margin: float
    alpha: float
    difference: PairedDifference  # at confidence 1 − 2α
    equivalent: bool
    verdict: str

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"margin": self.margin, "alpha": self.alpha, "equivalent": self.equivalent, "verdict": self.verdict,
                "difference": self.difference.to_dict()}


def equivalence(a: Mapping[PairKey, bool | None], b: Mapping[PairKey, bool | None], margin: float,
                alpha: float = 0.05) -> Equivalence:
    """Whether B and A are equivalent within ``margin`` (module doc: TOST by interval inclusion)."""
    if not 0.0 < margin < 1.0:
        raise AssayError(f"margin {margin} is not valid; give a difference in success rate between 0 and 1 (e.g. 0.05)")
    if not 0.0 < alpha < 0.5:
        raise AssayError(f"alpha {alpha} is not valid; give a level between 0 and 0.5 (e.g. 0.05)")
    difference = paired_difference(a, b, 1.0 - 2.0 * alpha)
    inside = -margin < difference.low and difference.high < margin
    bounds = f"[{difference.low:+.3f}, {difference.high:+.3f}]"
    verdict = (f"equivalent within ±{margin:g}: the {1 - 2 * alpha:.0%} interval of B − A, {bounds}, lies inside"
               if inside else f"not shown equivalent within ±{margin:g}: the {1 - 2 * alpha:.0%} interval of B − A, "
               f"{bounds}, reaches past the margin ({difference.pairs} pairs)")
    return Equivalence(margin, alpha, difference, inside, verdict)
