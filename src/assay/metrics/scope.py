"""Which variants a headline number scores: one rule for the CLI, the report and the dashboard.

``assay results`` and ``compare`` used to pool every variant by default (a policy's "success
rate" then mixed its nominal episodes with each perturbation the campaign happened to include,
weighted by their episode counts), while ``assay report`` and the dashboard scored the nominal
variant only, under the same titles: three answers to one question.

The default, everywhere, is the **nominal variant** when the campaign plans one: the number a
policy is known by does not change when a campaign adds or drops a perturbation, and robustness
has its own views (retention per variant, ``results --profile``, the report's robustness
section). A campaign of perturbed variants only is pooled over all of them, and says so. Asked
for explicitly: one variant by name, or ``all`` (pooled; comparisons stay paired by seed within
each variant). A table grouped by variant shows each variant separately. Every table, JSON
document, report section and dashboard view carries the scope's label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from assay.errors import AssayError
from assay.store import EpisodeRecord

NOMINAL = "nominal"
ALL = "all"
R = TypeVar("R", bound=EpisodeRecord)


@dataclass(frozen=True)
class VariantScope:
    """The variants a result scores and whether they are pooled into one number."""

    variants: tuple[str, ...]
    pooled: bool  # several variants counted as one (False: one variant, or each shown on its own)
    separately: bool = False  # grouped by variant: each variant its own row

    @property
    def label(self) -> str:
        """How titles name the scope: ``nominal only``, ``variant X only``, ``pooled over variants a, b``."""
        if self.separately:
            return f"each variant separately ({', '.join(self.variants)})"
        if self.pooled:
            return f"pooled over variants {', '.join(self.variants)}"
        (only,) = self.variants
        return "nominal only" if only == NOMINAL else f"variant {only} only"

    def keep(self, records: Iterable[R]) -> list[R]:
        """The records in scope."""
        chosen = set(self.variants)
        return [r for r in records if r.variant_name in chosen]

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON: the variants, pooled or separately, and the label."""
        return {"variants": list(self.variants), "pooled": self.pooled, "separately": self.separately,
                "label": self.label}


def variant_scope(available: Sequence[str], requested: str | None = None, separately: bool = False) -> VariantScope:
    """The scope of a result over a campaign planning ``available`` variants (in plan order).

    ``requested``: None (the default rule above), ``all``, or one variant's name (AssayError when it is
    not one of ``available``). ``separately``: the result is grouped by variant.
    """
    names = tuple(dict.fromkeys(available))
    if not names:
        raise AssayError("a campaign without variants has nothing to score")
    if requested is not None and requested != ALL:
        if requested not in names:
            raise AssayError(f"the campaign has no variant {requested!r}; valid: {ALL}, {', '.join(names)}")
        return VariantScope((requested,), pooled=False)
    if separately:
        return VariantScope(names, pooled=False, separately=True)
    if requested is None and NOMINAL in names:
        return VariantScope((NOMINAL,), pooled=False)
    return VariantScope(names, pooled=len(names) > 1)


def planned_variants(resolved: dict[str, object], records: Iterable[EpisodeRecord] = ()) -> list[str]:
    """The variants a campaign plans (its resolved document), else those its records ran under."""
    variants = resolved.get("variants")
    if isinstance(variants, list) and variants:
        return [str(v["name"]) for v in variants if isinstance(v, dict)]
    return sorted({r.variant_name for r in records})
