"""Capability attribution of failures by counterfactual pairs on paired seeds.

Seeds are shared across variants (``episode_seed``), so an episode under a
one-axis variant has a nominal twin: same policy, task and seed. When the twin
succeeds and the variant fails, the perturbed axis is the evidence:

* visual   -> ``perception``
* semantic -> ``language_grounding``
* behavioral -> ``contact`` or ``control``, split by the failure's category
  (grasp failure, drop, collision -> contact; approach, placement, stagnation -> control)

Confidence ``paired`` marks those. A failure without such a pair (a nominal
failure, a twin that also failed, a multi-axis variant) is attributed from its
category alone, with confidence ``category``, only where the category names a
capability (contact or control phases, instability -> ``simulation``, policy
error -> ``policy_error``); everything else stays ``unattributed``. Nothing is
labelled without one of these two kinds of evidence.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from assay.failures.categories import CONTACT_CATEGORIES, CONTROL_CATEGORIES, Categorized, Category
from assay.spec import Axis
from assay.store import EpisodeRecord, Outcome

AXIS_CAPABILITY = {Axis.VISUAL.value: "perception", Axis.SEMANTIC.value: "language_grounding"}


@dataclass(frozen=True)
class Attribution:
    key: str
    capability: str  # perception, language_grounding, contact, control, simulation, policy_error, unattributed
    confidence: str  # paired, category, none
    evidence: str


def _phase(category: Category | None) -> str | None:
    if category in CONTACT_CATEGORIES:
        return "contact"
    if category in CONTROL_CATEGORIES:
        return "control"
    if category is Category.INSTABILITY:
        return "simulation"
    if category is Category.POLICY_ERROR:
        return "policy_error"
    return None


def _axes(record: EpisodeRecord) -> set[str]:
    return {p["axis"] for p in record.variant.get("perturbations", [])}


def attribute(records: list[EpisodeRecord], categories: dict[str, Categorized]) -> list[Attribution]:
    """One attribution per non-successful episode of ``records``."""
    nominal = {(r.policy_name, r.task_id, r.seed): r for r in records if r.variant_key == "nominal"}
    out = []
    for record in records:
        if record.outcome is Outcome.SUCCESS:
            continue
        category = categories[record.key].category if record.key in categories else None
        twin = nominal.get((record.policy_name, record.task_id, record.seed))
        axes = _axes(record)
        if twin is not None and twin.key != record.key and twin.outcome is Outcome.SUCCESS and len(axes) == 1:
            axis = next(iter(axes))
            capability = AXIS_CAPABILITY.get(axis) or _phase(category)
            if capability is not None:
                out.append(Attribution(record.key, capability, "paired",
                                       f"nominal twin {twin.key[:12]} succeeded; fails under {record.variant_name}"
                                       + (f" ({category.value})" if axis == Axis.BEHAVIORAL.value and category else "")))
                continue
        phase = _phase(category)
        if phase is not None:
            out.append(Attribution(record.key, phase, "category", f"category {category.value}"))  # type: ignore[union-attr]
        else:
            out.append(Attribution(record.key, "unattributed", "none", "no successful nominal twin and no category"))
    return out


def coverage(attributions: list[Attribution]) -> list[dict[str, object]]:
    """Rows (capability, confidence, failures, share of all failures), largest first."""
    total = len(attributions)
    counts = Counter((a.capability, a.confidence) for a in attributions)
    return [{"capability": cap, "confidence": conf, "failures": n, "share": n / total}
            for (cap, conf), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
