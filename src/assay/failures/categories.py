"""Failure categories from recorded per-step events, per task family.

Each category is a predicate over an episode's events (``info.<event>`` step
columns written by ``assay.sim.events``) and its outcome; :func:`signals`
returns every predicate that holds, :func:`categorize` the first of them in
:data:`PRECEDENCE` (the most basic cause first: an unstable simulation explains
everything downstream of it). An episode without the event columns gets no
category (``None``): a label is never invented without evidence.

Families come from ``spec/metaworld_catalog.py``. Grasp families (pick-place,
insert, tool-use) go approach -> grasp -> lift -> transport -> place; contact
families (push, open-close, press, turn, pull) go approach -> contact -> move to
goal; ``reach`` has no object phase. The object counts as touched when a finger
touched it or its joints moved (``object_moved``, the evidence articulated
tasks have: a drawer that slid 5 cm was reached). An object phase with no
object evidence at all (every object event NaN and no joint displacement) is
``unknown``: the events cannot say, so nothing is guessed.

LIBERO families (``libero-pick-place``: every goal predicate is ``in``/``on``;
``libero-articulated``: an ``open``/``close``/``turnon`` one) read the events of
``assay.sim.libero_events``, restricted to the steps of the subgoal the episode ended
on, in this order: the gripper touched an object the goal never names and never held
its own (``wrong_object``); it never came within ``REACH_M`` of the object nor touched
it (``approach_failure``, or ``stagnation`` when hand and object stood still at the
end); it reached it and never held it while trying to lift it (``grasp_failure``: never
``grasped``, or held only while the hand did not rise ``HELD_RISE_M``, as a closed hand
that comes down on a bowl's rim and wedges it between its fingertips) or held it, raised
the hand and never lifted it (``lift_failure``); the goal's progress was still rising over the last
``PROGRESS_STEPS`` steps of a timeout that ended holding the object
(``timeout_progressing``: slow, not wrong); it
let go of the lifted object away from its target (``drop_during_transport``); else it
set it down near its target, not in it (``placement_miss``: placed short). An
articulated goal goes approach -> contact -> move, as Meta-World's contact families.

Each episode's trace summary (``trace.<name>`` step columns: the policy's own
account) goes into the evidence as ``trace``: the mean of each numeric column,
the most frequent value of each text column, for attribution to read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from assay.spec.libero_catalog import SUITES, libero_entry
from assay.spec.metaworld_catalog import METAWORLD_TASKS
from assay.store import EpisodeRecord, Outcome, step_matrix

STALL_STEPS = 40  # the last this many steps ...
STALL_HAND_M = 0.01  # ... moved the hand less than this (range per axis) ...
STALL_OBJECT_M = 0.005  # ... and the object less than this: the policy gave up
GRASP_FAMILIES = frozenset({"pick-place", "insert", "tool-use"})
REQUIRED_EVENTS = ("contact", "grasped", "dropped", "collision", "unstable", "goal_progress")
MOVED = 0.01  # object_moved above this (1 cm, or 0.01 rad) is a real displacement, not contact jitter
REACH_M = 0.05  # the gripper came this close to the object (LIBERO): it was reached
HELD_RISE_M = 0.01  # the hand rose this much while holding the object (LIBERO): it tried to lift it
PROGRESS_STEPS = 20  # a LIBERO timeout whose goal progress rose over its last this many steps ...
PROGRESS_RISE = 0.05  # ... by more than this was still on its way


class Category(str, Enum):
    """A failure category, read from an episode's events (see the module docstring for the order they are tried in)."""

    POLICY_ERROR = "policy_error"
    INSTABILITY = "instability"
    COLLISION = "collision"
    APPROACH_FAILURE = "approach_failure"  # never touched or moved the object
    WRONG_OBJECT = "wrong_object"  # touched an object the goal never names, never held its own (LIBERO)
    GRASP_FAILURE = "grasp_failure"  # touched, never held (grasp families)
    CONTACT_FAILURE = "contact_failure"  # touched, the object never moved (contact families)
    LIFT_FAILURE = "lift_failure"  # held, never lifted (grasp families)
    TIMEOUT_PROGRESSING = "timeout_progressing"  # the goal's progress still rising when time ran out (LIBERO)
    DROP = "drop_during_transport"
    STAGNATION = "stagnation"
    SHORT_OF_GOAL = "short_of_goal"  # moved the object (or joint), not to the goal (contact families)
    PLACEMENT_MISS = "placement_miss"  # lifted and carried, not placed (grasp families)
    UNKNOWN = "unknown"  # the object phase has no evidence (no object events, no joint displacement)


PRECEDENCE = tuple(Category)

# The phase each category belongs to, for capability attribution of behavioral failures.
CONTACT_CATEGORIES = frozenset({Category.GRASP_FAILURE, Category.CONTACT_FAILURE, Category.LIFT_FAILURE,
                                Category.DROP, Category.COLLISION})
CONTROL_CATEGORIES = frozenset({Category.APPROACH_FAILURE, Category.PLACEMENT_MISS, Category.SHORT_OF_GOAL,
                                Category.STAGNATION, Category.TIMEOUT_PROGRESSING})
GROUNDING_CATEGORIES = frozenset({Category.WRONG_OBJECT})  # went for another object than the instruction's


def family_of(task_id: str) -> str:
    """The task family of ``metaworld/<name>`` and ``libero/<suite>/<task>`` ids; ``unknown`` for other backends."""
    if task_id.startswith("libero/"):
        return _libero_family(task_id.split("@", 1)[0])
    name = task_id.split("/", 1)[-1] + "-v3"
    return METAWORLD_TASKS[name][2] if name in METAWORLD_TASKS else "unknown"


def _libero_family(name: str) -> str:
    _, short, task = (name.split("/", 2) + ["", ""])[:3]
    suite = SUITES.get(short)
    try:
        goal = libero_entry(f"{suite.benchmark}/{task}")["goal"] if suite else None
    except KeyError:
        goal = None
    if goal is None:
        return "unknown"
    return "libero-pick-place" if all(p[0] in ("in", "on") and len(p) == 3 for p in goal) else "libero-articulated"


@dataclass(frozen=True)
class Categorized:
    """An episode's category, every category its events signal, its task family and the evidence read."""

    category: Category | None
    signals: tuple[Category, ...]
    family: str
    evidence: dict[str, Any] = field(default_factory=dict)


def _stalled(state: np.ndarray) -> bool:
    if len(state) < STALL_STEPS:
        return False
    tail = state[-STALL_STEPS:]
    hand = np.ptp(tail[:, 0:3], axis=0).max()
    obj = np.ptp(tail[:, 4:7], axis=0).max()
    return bool(hand < STALL_HAND_M and obj < STALL_OBJECT_M)


def signals(
    family: str, outcome: Outcome, reason: str, steps: Mapping[str, np.ndarray]
) -> tuple[tuple[Category, ...], dict[str, Any]]:
    """Every category whose predicate holds, in precedence order, and the numbers behind them."""
    if outcome is Outcome.SUCCESS:
        return (), {}
    found: list[Category] = []
    if outcome is Outcome.ERROR:
        simulator = "simulator raised" in reason or "reset failed" in reason
        found.append(Category.INSTABILITY if simulator else Category.POLICY_ERROR)
    missing = [e for e in REQUIRED_EVENTS if f"info.{e}" not in steps]
    if missing or "observation.state" not in steps or len(steps["observation.state"]) == 0:
        return tuple(found), {"missing_events": missing}
    libero = family.startswith("libero-")
    steps = _last_subgoal(steps) if libero else steps
    ev = {name: np.asarray(steps[f"info.{name}"], dtype=np.float64) for name in REQUIRED_EVENTS}
    state = np.asarray(steps["observation.state"], dtype=np.float64)
    stalled = _stalled_libero(state, steps) if libero else _stalled(state)
    has_object = bool(np.isfinite(ev["contact"]).any())  # NaN object events: no object to read, not "0"
    moved = _finite_max(steps.get("info.object_moved"))
    lifted = steps.get("info.lifted")
    evidence: dict[str, Any] = {
        "steps": int(len(state)),
        "unstable_steps": int(np.nansum(ev["unstable"])),
        "collision_steps": int(np.nansum(ev["collision"])),
        "contact_steps": int(np.nansum(ev["contact"])) if has_object else None,
        "grasped_steps": int(np.nansum(ev["grasped"])) if has_object else None,
        "lifted_steps": int(np.nansum(lifted)) if lifted is not None and np.isfinite(lifted).any() else None,
        "drops": int(np.nansum(ev["dropped"])) if has_object else None,
        "object_moved": moved,
        "max_goal_progress": _finite_max(ev["goal_progress"]),
        "stalled": stalled,
    }
    if "info.ee_obj_dist" in steps and np.isfinite(steps["info.ee_obj_dist"]).any():
        evidence["min_ee_obj_dist"] = float(np.nanmin(steps["info.ee_obj_dist"]))
    if evidence["unstable_steps"] and Category.INSTABILITY not in found:
        found.append(Category.INSTABILITY)
    if evidence["collision_steps"]:
        found.append(Category.COLLISION)
    if outcome is Outcome.ERROR or found:
        # An unstable simulation or a hard collision explains what follows it; the phase
        # evidence after one is a consequence, so it is not read as a second cause.
        return tuple(c for c in PRECEDENCE if c in found), evidence
    if libero:
        evidence["subgoal"] = int(np.asarray(steps["info.subgoal"])[-1]) if "info.subgoal" in steps else None
        evidence["held_rise_m"] = held_rise(state[:, 2], ev["grasped"]) if has_object else None
        evidence["wrong_object_steps"] = int(np.nansum(steps.get("info.wrong_object", np.zeros(0))))
        found.append(_libero_phase(family, outcome, stalled, moved, evidence, ev))
    else:
        found.append(_phase(family, stalled, has_object, moved, evidence, ev["grasped"]))
    return tuple(c for c in PRECEDENCE if c in found), evidence


def _last_subgoal(steps: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The steps of the subgoal a LIBERO episode ended on (its object's events; earlier ones were met)."""
    subgoal = steps.get("info.subgoal")
    if subgoal is None or len(subgoal) == 0:
        return dict(steps)
    keep = np.asarray(subgoal) == np.asarray(subgoal)[-1]
    return {name: np.asarray(values)[keep] if len(values) == len(keep) else values for name, values in steps.items()}


def _stalled_libero(state: np.ndarray, steps: Mapping[str, np.ndarray]) -> bool:
    """Hand and object still over the last STALL_STEPS steps (the object from its distance to the target)."""
    if len(state) < STALL_STEPS:
        return False
    hand = np.ptp(state[-STALL_STEPS:, 0:3], axis=0).max()
    distance = np.asarray(steps.get("info.obj_goal_dist", np.zeros(len(state))), dtype=np.float64)[-STALL_STEPS:]
    if not np.isfinite(distance).all():
        distance = np.asarray(steps.get("info.object_moved", np.zeros(len(state))), dtype=np.float64)[-STALL_STEPS:]
    return bool(hand < STALL_HAND_M and np.ptp(distance) < STALL_OBJECT_M)


def _libero_phase(family: str, outcome: Outcome, stalled: bool, moved: float | None, evidence: dict[str, Any],
                  ev: Mapping[str, np.ndarray]) -> Category:
    """The phase a LIBERO episode without instability or collision failed in (module docstring)."""
    touched = bool(evidence["contact_steps"])
    nearest = evidence.get("min_ee_obj_dist")
    reached = touched or (nearest is not None and nearest < REACH_M)
    if evidence["wrong_object_steps"] and not evidence["grasped_steps"]:
        return Category.WRONG_OBJECT
    if not reached:
        return Category.STAGNATION if stalled else Category.APPROACH_FAILURE
    progress, holding = ev["goal_progress"], ev["grasped" if family == "libero-pick-place" else "contact"]
    progressing = (outcome is Outcome.TIMEOUT and len(progress) > PROGRESS_STEPS and bool(holding[-1] > 0)
                   and float(progress[-1] - progress[-1 - PROGRESS_STEPS]) > PROGRESS_RISE)
    if family == "libero-articulated":
        if progressing:
            return Category.TIMEOUT_PROGRESSING
        if not touched or (moved is not None and moved <= MOVED):
            return Category.CONTACT_FAILURE
        return Category.SHORT_OF_GOAL
    if not evidence["grasped_steps"]:
        return Category.GRASP_FAILURE
    if not evidence["lifted_steps"]:
        return Category.LIFT_FAILURE if (evidence.get("held_rise_m") or 0.0) >= HELD_RISE_M else \
            Category.GRASP_FAILURE
    if progressing:
        return Category.TIMEOUT_PROGRESSING
    if evidence["drops"]:
        return Category.DROP
    return Category.PLACEMENT_MISS


def held_rise(hand_z: np.ndarray, grasped: np.ndarray) -> float:
    """The most the hand rose (m) within one unbroken stretch of steps holding the object: above the lowest
    point of the stretch so far."""
    best, low = 0.0, None
    for z, held in zip(np.asarray(hand_z, dtype=np.float64), np.asarray(grasped) > 0, strict=True):
        if not held:
            low = None
            continue
        low = z if low is None else min(low, z)
        best = max(best, float(z - low))
    return best


def _finite_max(values: Any) -> float | None:
    if values is None:
        return None
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmax(values)) if np.isfinite(values).any() else None


def _phase(family: str, stalled: bool, has_object: bool, moved: float | None, evidence: dict[str, Any],
           grasped: np.ndarray) -> Category:
    """The phase an episode without instability or collision got stuck in (module docstring)."""
    if family == "reach":
        return Category.STAGNATION if stalled else Category.APPROACH_FAILURE
    if not has_object and moved is None:
        return Category.UNKNOWN
    displaced = moved is not None and moved > MOVED
    touched = bool(evidence["contact_steps"]) or displaced
    if not touched:
        return Category.STAGNATION if stalled else Category.APPROACH_FAILURE
    if family in GRASP_FAMILIES and has_object:
        if evidence["grasped_steps"] == 0:
            return Category.STAGNATION if stalled else Category.GRASP_FAILURE
        if evidence["lifted_steps"] == 0:
            return Category.STAGNATION if stalled else Category.LIFT_FAILURE
        if evidence["drops"] and not grasped[-1] > 0:
            return Category.DROP
        return Category.STAGNATION if stalled else Category.PLACEMENT_MISS
    if moved is not None and not displaced:
        return Category.STAGNATION if stalled else Category.CONTACT_FAILURE
    return Category.STAGNATION if stalled else Category.SHORT_OF_GOAL


def categorize(record: EpisodeRecord, steps: Mapping[str, np.ndarray] | None) -> Categorized:
    """The episode's primary category (``None`` for successes and episodes without events)."""
    family = family_of(record.task_id)
    found, evidence = signals(family, record.outcome, record.reason, steps or {})
    trace = trace_summary(steps or {})
    if trace and record.outcome is not Outcome.SUCCESS:
        evidence = {**evidence, "trace": trace}
    return Categorized(found[0] if found else None, found, family, evidence)


def trace_summary(steps: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The policy's own account over the episode: numeric ``trace.*`` means, text ``trace.*`` modes."""
    out: dict[str, Any] = {}
    for name, values in sorted(steps.items()):
        if not name.startswith("trace."):
            continue
        values = np.asarray(values)
        if values.dtype.kind in "fiub":
            finite = values.astype(np.float64)[np.isfinite(values.astype(np.float64))]
            if finite.size:
                out[name[6:]] = round(float(finite.mean()), 6)
        elif values.size:
            texts, counts = np.unique(values.astype(str), return_counts=True)
            out[name[6:]] = str(texts[int(np.argmax(counts))])
    return out


def step_arrays(table: Any) -> dict[str, np.ndarray]:
    """The columns categorization reads, as NumPy arrays, from an episode's step table."""
    from pyarrow import types as pa_types

    wanted = ["observation.state"] + [c for c in table.column_names if c.startswith(("info.", "trace."))]
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        if name not in table.column_names:
            continue
        kind = table.schema.field(name).type
        if name.startswith("trace.") and not (pa_types.is_floating(kind) or pa_types.is_integer(kind)):
            out[name] = np.asarray(table.column(name).to_pylist(), dtype=object)
        else:
            out[name] = step_matrix(table, name)
    return out
