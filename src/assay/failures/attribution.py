"""Capability attribution of failures, from evidence: the policy's own trace, paired seeds, the category.

Three kinds of evidence, taken in this order; the first that names a capability wins:

1. ``trace``: the policy's own per-step account (``trace.<name>`` step columns,
   summarised in the category's evidence). A perception stack that detected its
   goal in under half of the steps, or whose goal estimate ended more than
   ``PERCEPTION_ERROR_M`` off, failed at ``perception``; a router that ran a skill
   other than the task's failed at ``language_grounding`` when its instruction
   was not the task's own, and at ``planning`` when it chose the wrong skill for
   an instruction stated plainly. This needs no nominal twin: the same dark
   episodes are perception failures however the campaign was built.
2. ``paired``: seeds are shared across variants (``episode_seed``), so an episode
   under a one-axis variant has a nominal twin (same policy, task and seed). When
   the twin succeeds and the variant fails, the perturbed axis is the evidence:
   visual -> ``perception``, semantic -> ``language_grounding``, behavioral ->
   ``contact`` or ``control`` by the failure's category.
3. ``category``: the category alone, where it names a phase (contact or control
   phases, instability -> ``simulation``, policy error -> ``policy_error``; a LIBERO
   ``wrong_object`` -> ``language_grounding``: it went for another object than the
   one its instruction names).

Everything else is ``unknown`` (confidence ``none``): nothing is labelled
without evidence. :func:`coverage` gives each policy's shares of its own
failures, so a random baseline's timeouts never dilute another policy's
profile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from assay.failures.categories import (
    CONTACT_CATEGORIES,
    CONTROL_CATEGORIES,
    GROUNDING_CATEGORIES,
    Categorized,
    Category,
)
from assay.spec import Axis
from assay.store import Outcome

AXIS_CAPABILITY = {Axis.VISUAL.value: "perception", Axis.SEMANTIC.value: "language_grounding"}
CAPABILITIES = ("perception", "language_grounding", "planning", "contact", "control", "simulation", "policy_error",
                "unknown")
DETECTION_RATE = 0.5  # a perception stack that found its goal in fewer of the steps than this was blind
PERCEPTION_ERROR_M = 0.05  # a goal estimate this far off (metres) puts the goal somewhere else
SKILL_MATCH = 0.5  # a router that ran the task's skill in fewer of the steps than this ran the wrong one


class Failed(Protocol):
    """What attribution reads of an episode: an :class:`~assay.store.EpisodeRecord` has it all, and so may a lighter
    record of its catalog facts (the report attributes every failure of a large campaign from those)."""

    @property
    def key(self) -> str:
        """The episode key."""
    @property
    def policy_name(self) -> str:
        """The policy's name in its campaign."""
    @property
    def task_id(self) -> str:
        """The task."""
    @property
    def seed(self) -> int:
        """The episode seed (paired across variants)."""
    @property
    def variant_key(self) -> str:
        """The variant's key (``nominal``: none)."""
    @property
    def variant_name(self) -> str:
        """The variant's name."""
    @property
    def variant(self) -> dict[str, Any]:
        """The variant's dump (its ``perturbations``)."""
    @property
    def instruction(self) -> str:
        """The instruction the episode ran under."""
    @property
    def outcome(self) -> Outcome:
        """How the episode ended."""


@dataclass(frozen=True)
class Attribution:
    """One failed episode's capability label, how confident the evidence is, and the evidence in words."""

    key: str
    capability: str  # one of CAPABILITIES
    confidence: str  # trace, paired, category, none
    evidence: str
    policy: str = ""


def _phase(category: Category | None) -> str | None:
    if category in CONTACT_CATEGORIES:
        return "contact"
    if category in CONTROL_CATEGORIES:
        return "control"
    if category in GROUNDING_CATEGORIES:
        return "language_grounding"
    if category is Category.INSTABILITY:
        return "simulation"
    if category is Category.POLICY_ERROR:
        return "policy_error"
    return None


def _axes(record: Failed) -> set[str]:
    return {p["axis"] for p in record.variant.get("perturbations", [])}


def from_trace(record: Failed, trace: Mapping[str, Any]) -> tuple[str, str] | None:
    """(capability, evidence) when the policy's own account shows which layer failed; else None."""
    detected = trace.get("detected.goal")
    if isinstance(detected, float) and detected < DETECTION_RATE:
        return "perception", f"its own trace: goal detected in {detected:.0%} of steps"
    error = trace.get("error_m.goal")
    if isinstance(error, float) and error > PERCEPTION_ERROR_M:
        return "perception", f"its own trace: goal estimate off by {error:.3f} m"
    match = trace.get("skill_matches_task")
    if isinstance(match, float) and match < SKILL_MATCH:
        skill = trace.get("skill", "another skill")
        paraphrased = Axis.SEMANTIC.value in _axes(record)
        if paraphrased:
            return "language_grounding", (f"its own trace: ran {skill} for {record.task_id} "
                                          f"(instruction {record.instruction!r})")
        return "planning", f"its own trace: ran {skill} for {record.task_id} under the task's own instruction"
    return None


def attribute(records: Sequence[Failed], categories: Mapping[str, Categorized],
              nominal_successes: dict[tuple[str, str, int], str] | None = None) -> list[Attribution]:
    """One attribution per non-successful episode of ``records``. ``nominal_successes``: the key of each
    successful nominal episode by (policy, task, seed), when ``records`` does not hold them (the report reads
    only unsuccessful rows); by default found among ``records``."""
    if nominal_successes is None:
        nominal_successes = {(r.policy_name, r.task_id, r.seed): r.key for r in records
                             if r.variant_key == "nominal" and r.outcome is Outcome.SUCCESS}
    out = []
    for record in records:
        if record.outcome is Outcome.SUCCESS:
            continue
        found = categories.get(record.key)
        category = found.category if found is not None else None
        trace = found.evidence.get("trace") if found is not None else None
        from_policy = from_trace(record, trace) if isinstance(trace, dict) else None
        if from_policy is not None:
            out.append(Attribution(record.key, from_policy[0], "trace", from_policy[1], record.policy_name))
            continue
        twin = nominal_successes.get((record.policy_name, record.task_id, record.seed))
        axes = _axes(record)
        if twin is not None and twin != record.key and len(axes) == 1:
            axis = next(iter(axes))
            capability = AXIS_CAPABILITY.get(axis) or _phase(category)
            if capability is not None:
                out.append(Attribution(record.key, capability, "paired",
                                       f"nominal twin {twin[:12]} succeeded; fails under {record.variant_name}"
                                       + (f" ({category.value})" if axis == Axis.BEHAVIORAL.value and category else ""),
                                       record.policy_name))
                continue
        phase = _phase(category)
        if phase is not None and category is not None:
            out.append(Attribution(record.key, phase, "category", f"category {category.value}", record.policy_name))
        else:
            why = "category unknown (no object evidence)" if category is Category.UNKNOWN else "no category"
            out.append(Attribution(record.key, "unknown", "none", f"no trace, no successful nominal twin, {why}",
                                   record.policy_name))
    return out


def coverage(attributions: list[Attribution]) -> list[dict[str, object]]:
    """Rows (policy, capability, confidence, failures, share of that policy's failures), per policy by
    name, largest first within it."""
    return coverage_of(Counter((a.policy, a.capability, a.confidence) for a in attributions))


def coverage_of(counts: Mapping[tuple[str, str, str], int]) -> list[dict[str, object]]:
    """:func:`coverage` of attributions counted by (policy, capability, confidence) (a report counts a large
    campaign's a chunk at a time, never holding them)."""
    totals: Counter[str] = Counter()
    for (policy, _, _), n in counts.items():
        totals[policy] += n
    return [{"policy": policy, "capability": cap, "confidence": conf, "failures": n, "share": n / totals[policy]}
            for (policy, cap, conf), n in sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0][1:]))
            if n]
