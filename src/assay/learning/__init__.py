"""The learning loop: behaviour cloning from the store, the flywheel experiment, open-loop vs
closed-loop evidence, and the leakage check.

May import ``assay.spec``, ``sim``, ``policies``, ``store``, ``metrics``, ``failures`` and
``run`` (the experiments orchestrate campaigns). The ``bc`` policy itself lives in
``assay.policies.bc`` so that campaigns can run checkpoints without this package.

Every name is loaded on first use (PEP 562), as ``assay.metrics``' are: ``assay results`` reads the leakage check
without importing the trainers, the flywheel or the runner they drive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.errors import DataQueryError
from assay.lazy import lazy_names

if TYPE_CHECKING:
    from assay.learning.bc import TrainConfig, TrainResult, train_bc
    from assay.learning.data import DataQuery, Demo, load_demos
    from assay.learning.flywheel import FlywheelConfig, SeedResult, run_flywheel
    from assay.learning.flywheel_design import FlywheelDesign, load_design
    from assay.learning.flywheel_run import run_design
    from assay.learning.leakage import contaminated, leakage_report
    from assay.learning.noise import Recipe, compare_recipes, load_recipe, noise
    from assay.learning.olcl import OLCLConfig, OLCLResult, run_olcl

_LAZY = {
    "assay.learning.bc": ("TrainConfig", "TrainResult", "train_bc"),
    "assay.learning.data": ("DataQuery", "Demo", "load_demos"),
    "assay.learning.flywheel": ("FlywheelConfig", "SeedResult", "run_flywheel"),
    "assay.learning.flywheel_design": ("FlywheelDesign", "load_design"),
    "assay.learning.flywheel_run": ("run_design",),
    "assay.learning.leakage": ("contaminated", "leakage_report"),
    "assay.learning.noise": ("Recipe", "compare_recipes", "load_recipe", "noise"),
    "assay.learning.olcl": ("OLCLConfig", "OLCLResult", "run_olcl"),
}

__all__ = [
    "DataQuery", "DataQueryError", "Demo", "FlywheelConfig", "FlywheelDesign", "OLCLConfig", "OLCLResult", "run_olcl",
    "SeedResult", "TrainConfig", "TrainResult",
    "contaminated", "leakage_report", "load_demos", "load_design", "run_design", "run_flywheel", "train_bc",
    "Recipe", "compare_recipes", "load_recipe", "noise",
]

__getattr__ = lazy_names(__name__, _LAZY, globals())
