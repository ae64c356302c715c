"""Failure categories from recorded per-step events, per task family.

Each category is a predicate over an episode's events (``info.<event>`` step
columns written by ``assay.sim.events``) and its outcome; :func:`signals`
returns every predicate that holds, :func:`categorize` the first of them in
:data:`PRECEDENCE` (the most basic cause first: an unstable simulation explains
everything downstream of it). An episode without the event columns gets no
category (``None``): a label is never invented without evidence.

Families come from ``spec/metaworld_catalog.py``. Grasp families (pick-place,
insert, tool-use) go approach -> grasp -> transport -> place; contact families
(push, open-close, press, turn, pull) go approach -> contact -> move to goal;
``reach`` has no object phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from assay.spec.metaworld_catalog import METAWORLD_TASKS
from assay.store import EpisodeRecord, Outcome

STALL_STEPS = 40  # the last this many steps ...
STALL_HAND_M = 0.01  # ... moved the hand less than this (range per axis) ...
STALL_OBJECT_M = 0.005  # ... and the object less than this: the policy gave up
GRASP_FAMILIES = frozenset({"pick-place", "insert", "tool-use"})
REQUIRED_EVENTS = ("contact", "grasped", "dropped", "collision", "unstable", "goal_progress")


class Category(str, Enum):
    POLICY_ERROR = "policy_error"
    INSTABILITY = "instability"
    COLLISION = "collision"
    APPROACH_FAILURE = "approach_failure"
    GRASP_FAILURE = "grasp_failure"
    DROP = "drop_during_transport"
    STAGNATION = "stagnation"
    PLACEMENT_MISS = "placement_miss"


PRECEDENCE = tuple(Category)

# The phase each category belongs to, for capability attribution of behavioral failures.
CONTACT_CATEGORIES = frozenset({Category.GRASP_FAILURE, Category.DROP, Category.COLLISION})
CONTROL_CATEGORIES = frozenset({Category.APPROACH_FAILURE, Category.PLACEMENT_MISS, Category.STAGNATION})


def family_of(task_id: str) -> str:
    """The task family of ``metaworld/<name>`` ids; ``unknown`` for other backends."""
    name = task_id.split("/", 1)[-1] + "-v3"
    return METAWORLD_TASKS[name][2] if name in METAWORLD_TASKS else "unknown"


@dataclass(frozen=True)
class Categorized:
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


def signals(family: str, outcome: Outcome, reason: str, steps: Mapping[str, np.ndarray]) -> tuple[tuple[Category, ...], dict[str, Any]]:
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
    ev = {name: np.asarray(steps[f"info.{name}"], dtype=np.float64) for name in REQUIRED_EVENTS}
    state = np.asarray(steps["observation.state"], dtype=np.float64)
    stalled = _stalled(state)
    evidence: dict[str, Any] = {
        "steps": int(len(state)),
        "unstable_steps": int(np.nansum(ev["unstable"])),
        "collision_steps": int(np.nansum(ev["collision"])),
        "contact_steps": int(np.nansum(ev["contact"])),
        "grasped_steps": int(np.nansum(ev["grasped"])),
        "drops": int(np.nansum(ev["dropped"])),
        "max_goal_progress": float(np.nanmax(ev["goal_progress"])) if np.isfinite(ev["goal_progress"]).any() else None,
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
    touched = evidence["contact_steps"] > 0
    if family == "reach" or not touched:
        found.append(Category.STAGNATION if stalled else Category.APPROACH_FAILURE)
    elif family in GRASP_FAMILIES and evidence["grasped_steps"] == 0:
        found.append(Category.STAGNATION if stalled else Category.GRASP_FAILURE)
    elif evidence["drops"] > 0 and not ev["grasped"][-1] > 0:
        found.append(Category.DROP)
    else:
        found.append(Category.STAGNATION if stalled else Category.PLACEMENT_MISS)
    return tuple(c for c in PRECEDENCE if c in found), evidence


def categorize(record: EpisodeRecord, steps: Mapping[str, np.ndarray] | None) -> Categorized:
    """The episode's primary category (``None`` for successes and episodes without events)."""
    family = family_of(record.task_id)
    found, evidence = signals(family, record.outcome, record.reason, steps or {})
    return Categorized(found[0] if found else None, found, family, evidence)


def step_arrays(table: Any) -> dict[str, np.ndarray]:
    """The columns categorization reads, as NumPy arrays, from an episode's step table."""
    wanted = ["observation.state"] + [c for c in table.column_names if c.startswith("info.")]
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        if name not in table.column_names:
            continue
        column = table.column(name).combine_chunks()
        if name == "observation.state":
            width = column.type.list_size
            out[name] = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
    return out
