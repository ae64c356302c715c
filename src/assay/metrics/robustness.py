"""Robustness retention on paired seeds, and the per-axis robustness profile.

For a policy and a non-nominal variant, a *pair* is one (task, seed) that ran both
nominal and under the variant (seeds are shared by construction); pairs where
either side is ``error`` are dropped. Retention = successes under the variant /
successes at nominal over the same pairs (the ratio of the two rates), with the
MOVER-R interval of that paired ratio (``metrics.intervals.retention_interval``:
closed form, never a point even with no discordant pair, exact coverage ≥ 0.93 at the
edges in docs/STATISTICS.md) and McNemar's exact test on the discordant pairs. Retention is undefined (None)
when nominal never succeeded.
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
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from assay.errors import AssayError
from assay.metrics.comparisons import mcnemar_exact
from assay.metrics.intervals import retention_interval
from assay.spec.libero_catalog import plus_category
from assay.store import EpisodeRecord, Outcome


@dataclass(frozen=True)
class RetentionRow:
    """One policy's retention under one variant, on the seeds both nominal and the variant ran."""

    policy: str
    variant: str
    axis: str
    factors: str
    pairs: int
    nominal_successes: int
    variant_successes: int
    retention: float | None
    ci_low: float | None
    ci_high: float | None
    only_nominal: int  # discordant: succeeded at nominal, failed under the variant
    only_variant: int
    p_value: float

    def to_dict(self) -> dict[str, object]:
        """The row as a JSON-ready dict."""
        return asdict(self)


def _axis(record: EpisodeRecord) -> str:
    axes = sorted({p["axis"] for p in record.variant.get("perturbations", [])})
    label = "+".join(axes) if axes else "nominal"
    if (record.provenance.get("instruction") or {}).get("conflict_with"):
        label += ":conflict"  # marked: the words name another task; scored by the scene's task, pooled apart
    return label


def _factors(record: EpisodeRecord) -> str:
    return ",".join(sorted(p["factor"] for p in record.variant.get("perturbations", [])))


def _retention(nominal: np.ndarray, variant: np.ndarray, confidence: float,
               ) -> tuple[float | None, float | None, float | None]:
    if nominal.sum() == 0:
        return None, None, None
    both = int(np.sum((nominal == 1) & (variant == 1)))
    nominal_only, variant_only = int(nominal.sum()) - both, int(variant.sum()) - both
    neither = len(nominal) - both - nominal_only - variant_only
    interval = retention_interval(both, nominal_only, variant_only, neither, confidence)
    point = float(variant.sum() / nominal.sum())
    return point, (interval.low if interval else None), (interval.high if interval else None)


def retention_table(records: Iterable[EpisodeRecord], confidence: float = 0.95) -> list[RetentionRow]:
    """One row per (policy, non-nominal variant), sorted by policy, axis and variant name."""
    outcomes: dict[tuple[str, str], dict[tuple[str, int], bool]] = defaultdict(dict)
    described: dict[str, EpisodeRecord] = {}
    for record in records:
        if record.outcome is Outcome.ERROR:
            continue
        cell = outcomes[(record.policy_name, record.variant_key)]
        cell[(record.task_id, record.seed)] = record.outcome is Outcome.SUCCESS
        described.setdefault(record.variant_key, record)
    if "nominal" not in described and described:
        raise AssayError("robustness retention needs nominal episodes on the same seeds: add 'nominal' to the variants")
    rows = []
    for (policy, variant_key), results in outcomes.items():
        if variant_key == "nominal":
            continue
        nominal = outcomes.get((policy, "nominal"), {})
        paired = sorted(set(results) & set(nominal))
        base = np.array([nominal[k] for k in paired], dtype=float)
        perturbed = np.array([results[k] for k in paired], dtype=float)
        retention, low, high = _retention(base, perturbed, confidence) if paired else (None, None, None)
        only_nominal = int(np.sum((base == 1) & (perturbed == 0)))
        only_variant = int(np.sum((base == 0) & (perturbed == 1)))
        example = described[variant_key]
        rows.append(RetentionRow(policy, example.variant_name, _axis(example), _factors(example), len(paired),
                                 int(base.sum()), int(perturbed.sum()), retention, low, high, only_nominal,
                                 only_variant, mcnemar_exact(only_nominal, only_variant)))
    return sorted(rows, key=lambda r: (r.policy, r.axis, r.variant))


@dataclass(frozen=True)
class AxisProfile:
    """One policy's pooled retention on one perturbation axis, and the variant that hurts it most."""

    policy: str
    axis: str
    variants: int
    pairs: int
    retention: float | None  # pooled over every level of every factor on the axis
    worst_variant: str | None
    worst_retention: float | None

    def to_dict(self) -> dict[str, object]:
        """The profile as a JSON-ready dict."""
        return asdict(self)


def robustness_profile(rows: Iterable[RetentionRow]) -> list[AxisProfile]:
    """Per policy and axis: pooled retention and the variant that hurts most."""
    groups: dict[tuple[str, str], list[RetentionRow]] = defaultdict(list)
    for row in rows:
        groups[(row.policy, row.axis)].append(row)
    profile = []
    for (policy, axis), members in sorted(groups.items()):
        nominal = sum(r.nominal_successes for r in members)
        defined = [r for r in members if r.retention is not None]
        worst = min(defined, key=lambda r: r.retention) if defined else None  # type: ignore[arg-type, return-value]
        profile.append(AxisProfile(policy, axis, len(members), sum(r.pairs for r in members),
                                   sum(r.variant_successes for r in members) / nominal if nominal else None,
                                   worst.variant if worst else None, worst.retention if worst else None))
    return profile


@dataclass(frozen=True)
class CategoryProfile:
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

    def to_dict(self) -> dict[str, object]:
        """The row as JSON-ready fields."""
        return asdict(self)


def category_profile(rows: Iterable[RetentionRow], confidence: float = 0.95) -> list[CategoryProfile]:
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
                                      confidence) if nominal else None
        defined = [r for r in members if r.retention is not None]
        worst = min(defined, key=lambda r: r.retention) if defined else None  # type: ignore[arg-type, return-value]
        profile.append(CategoryProfile(policy, category, len(members), pairs, nominal, variant,
                                       variant / nominal if nominal else None,
                                       interval.low if interval else None, interval.high if interval else None,
                                       worst.variant if worst else None, worst.retention if worst else None))
    return profile
