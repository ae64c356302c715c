"""Robustness retention on paired seeds, and the per-axis robustness profile.

For a policy and a non-nominal variant, a *pair* is one (task, seed) that ran both
nominal and under the variant (seeds are shared by construction); pairs where
either side is ``error`` are dropped. Retention = successes under the variant /
successes at nominal over the same pairs (the ratio of the two rates), with the
MOVER-R interval of that paired ratio (``metrics.intervals.retention_interval``:
closed form, never a point even with no discordant pair; its coverage dips to about 0.90
between grid points, docs/STATISTICS.md, so ``method="exact"`` gives the Bonferroni
Clopper–Pearson interval, ≥ 0.95 at every rate) and McNemar's exact test on the
discordant pairs. Retention is undefined (None) when nominal never succeeded.
The profile pools every level of every factor of one axis. An episode marked as
running under a conflicting instruction (``provenance.instruction.conflict_with``:
the words name another task, and the scene's task scores it) is reported on its own
axis, ``semantic:conflict``: there, retention is how often the policy did the
scene's task *against* the words (1.0 for a policy that ignores language).

:func:`category_profile` pools the same way per benchmark category instead of per
axis: LIBERO-Plus's seven (``spec.libero_catalog.plus_category``: a variant's
category is its LIBERO-Plus factors' categories), each with the paired retention's
interval of the pooled counts and the variant that hurts most.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.metrics.comparisons import mcnemar_exact
from assay.metrics.intervals import retention_interval
from assay.metrics.outcomes import patterns_of
from assay.serialize import DictMixin
from assay.spec.libero_catalog import plus_category
from assay.store import Catalog, EpisodeRecord, Outcome
from assay.store.aggregates import (
    FAILED,
    MISSING,
    SUCCESS,
    CellTotals,
    Pattern,
    seed_patterns,
    variant_examples,
)


@dataclass(frozen=True)
class RetentionRow(DictMixin):
    """One policy's retention under one variant, on the seeds both nominal and the variant ran."""

    policy: str
    variant: str
    axis: str
    factors: str
    pairs: int
    nominal_successes: int
    variant_successes: int
    retention: float | None
    ci_low: float | None  # MOVER-R interval of the paired ratio (metrics.intervals.retention_interval)
    ci_high: float | None
    only_nominal: int  # discordant: succeeded at nominal, failed under the variant
    only_variant: int
    p_value: float


def _axis(variant: dict[str, Any], conflict: bool) -> str:
    axes = sorted({p["axis"] for p in variant.get("perturbations", [])})
    label = "+".join(axes) if axes else "nominal"
    if conflict:
        label += ":conflict"  # marked: the words name another task; scored by the scene's task, pooled apart
    return label


def _factors(variant: dict[str, Any]) -> str:
    return ",".join(sorted(p["factor"] for p in variant.get("perturbations", [])))


def _retention(pairs: tuple[int, int, int, int], confidence: float,
               method: str = "mover") -> tuple[float | None, float | None, float | None]:
    both, nominal_only, variant_only, neither = pairs
    if both + nominal_only == 0:
        return None, None, None
    interval = retention_interval(both, nominal_only, variant_only, neither, confidence, method)
    point = float((both + variant_only) / (both + nominal_only))
    return point, (interval.low if interval else None), (interval.high if interval else None)


@dataclass(frozen=True)
class VariantExample:
    """What a retention row says of its variant: its name and stored dump, and whether its first scored
    episode (in listing order) ran under a conflicting instruction."""

    name: str
    variant: dict[str, Any]
    conflict: bool = False


def retention_table(records: Iterable[EpisodeRecord], confidence: float = 0.95) -> list[RetentionRow]:
    """One row per (policy, non-nominal variant), sorted by policy, axis and variant name."""
    records = list(records)
    keys = sorted({r.variant_key for r in records})
    examples: dict[str, VariantExample] = {}
    for record in records:
        if record.outcome is not Outcome.ERROR and record.variant_key not in examples:
            marks = record.provenance.get("instruction") or {}
            examples[record.variant_key] = VariantExample(record.variant_name, record.variant,
                                                          bool(marks.get("conflict_with")))
    return retention_rows(patterns_of(records, keys, across="variant"), keys, examples, confidence)


def retention_rows(patterns: Iterable[Pattern], variant_keys: Sequence[str], examples: Mapping[str, VariantExample],
                   confidence: float = 0.95, method: str = "mover") -> list[RetentionRow]:
    """:func:`retention_table` from seed patterns across ``variant_keys`` (``aggregates.seed_patterns(...,
    across="variant")``) and an example of each variant with a scored episode (``aggregates.variant_examples``)."""
    if "nominal" not in examples and examples:
        raise AssayError("robustness retention needs nominal episodes on the same seeds: add 'nominal' to the variants")
    index = {key: i for i, key in enumerate(variant_keys)}
    scored = {SUCCESS, FAILED}
    tables: dict[tuple[str, str], list[int]] = {}
    for pattern in patterns:
        policy, codes = pattern.group[0], pattern.codes
        base = codes[index["nominal"]] if "nominal" in index else MISSING
        for key, i in index.items():
            if key == "nominal" or codes[i] not in scored:
                continue
            table = tables.setdefault((policy, key), [0, 0, 0, 0])
            if base in scored:
                table[(0 if base == SUCCESS else 2) + (0 if codes[i] == SUCCESS else 1)] += pattern.count
    rows = []
    for (policy, key), (both, nominal_only, variant_only, neither) in tables.items():
        example = examples[key]
        pairs = (both, nominal_only, variant_only, neither)
        retention, low, high = _retention(pairs, confidence, method)
        rows.append(RetentionRow(policy, example.name, _axis(example.variant, example.conflict),
                                 _factors(example.variant), sum(pairs), both + nominal_only, both + variant_only,
                                 retention, low, high, nominal_only, variant_only,
                                 mcnemar_exact(nominal_only, variant_only)))
    return sorted(rows, key=lambda r: (r.policy, r.axis, r.variant))


def stored_retention(catalog: Catalog, campaign: str, totals: Iterable[CellTotals],
                     confidence: float = 0.95, method: str = "mover") -> list[RetentionRow]:
    """:func:`retention_table` of a campaign's episodes in ``totals``' cells, from the database's seed patterns
    across variants (AssayError, as there, when scored variants have no nominal episodes to pair with)."""
    cells = list(totals)
    keys = sorted({c.variant_key for c in cells})
    names = {c.variant for c in cells}
    if not cells:
        return []
    examples = {key: VariantExample(*found) for key, found in variant_examples(catalog, campaign).items()
                if key in keys}
    patterns = seed_patterns(catalog, campaign, "variant", keys, sorted(names), sorted({c.task for c in cells}))
    return retention_rows(patterns, keys, examples, confidence, method)


@dataclass(frozen=True)
class AxisProfile(DictMixin):
    """One policy's pooled retention on one perturbation axis, and the variant that hurts it most."""

    policy: str
    axis: str
    variants: int
    pairs: int
    retention: float | None  # pooled over every level of every factor on the axis
    worst_variant: str | None
    worst_retention: float | None


def robustness_profile(rows: Iterable[RetentionRow]) -> list[AxisProfile]:
    """Per policy and axis: pooled retention and the variant that hurts most."""
    groups: dict[tuple[str, str], list[RetentionRow]] = defaultdict(list)
    for row in rows:
        groups[(row.policy, row.axis)].append(row)
    profile = []
    for (policy, axis), members in sorted(groups.items()):
        nominal = sum(r.nominal_successes for r in members)
        defined = [r for r in members if r.retention is not None]
        worst = min(defined, key=_retention_of) if defined else None
        profile.append(AxisProfile(policy, axis, len(members), sum(r.pairs for r in members),
                                   sum(r.variant_successes for r in members) / nominal if nominal else None,
                                   worst.variant if worst else None, worst.retention if worst else None))
    return profile


@dataclass(frozen=True)
class CategoryProfile(DictMixin):
    """One policy's retention pooled over a LIBERO-Plus category's variants, with its interval and worst variant."""

    policy: str
    category: str  # LIBERO-Plus's (layout, camera, robot, language, light, background, noise), or several joined by +
    variants: int
    pairs: int
    nominal_successes: int
    variant_successes: int
    retention: float | None  # pooled over every level of every variant of the category
    ci_low: float | None  # MOVER-R interval of the pooled paired counts (pairs of different variants counted apart)
    ci_high: float | None
    worst_variant: str | None
    worst_retention: float | None


def category_profile(rows: Iterable[RetentionRow], confidence: float = 0.95,
                     method: str = "mover") -> list[CategoryProfile]:
    """Per policy and LIBERO-Plus category: pooled retention with its interval, and the variant that hurts most."""
    groups: dict[tuple[str, str], list[RetentionRow]] = defaultdict(list)
    for row in rows:
        category = plus_category(row.factors.split(","))
        if category is not None:
            groups[(row.policy, category)].append(row)
    profile = []
    for (policy, category), members in sorted(groups.items()):
        nominal = sum(r.nominal_successes for r in members)
        variant = sum(r.variant_successes for r in members)
        only_nominal, only_variant = sum(r.only_nominal for r in members), sum(r.only_variant for r in members)
        pairs = sum(r.pairs for r in members)
        both = nominal - only_nominal
        interval = retention_interval(both, only_nominal, only_variant, pairs - both - only_nominal - only_variant,
                                      confidence, method) if nominal else None
        defined = [r for r in members if r.retention is not None]
        worst = min(defined, key=_retention_of) if defined else None
        profile.append(CategoryProfile(policy, category, len(members), pairs, nominal, variant,
                                       variant / nominal if nominal else None,
                                       interval.low if interval else None, interval.high if interval else None,
                                       worst.variant if worst else None, worst.retention if worst else None))
    return profile


def _retention_of(row: RetentionRow) -> float:
    """The retention of a row that has one (the key to pick a policy's worst variant)."""
    assert row.retention is not None
    return row.retention
