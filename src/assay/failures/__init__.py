"""Failure mining: categories from recorded events, capability attribution, the point of
no return, regression sets, boundary search, recovery demos, collection priorities, and
the safety filter and quality gate.

May import ``assay.spec``, ``assay.sim``, ``assay.policies``, ``assay.store`` and
``assay.metrics``; running campaigns is the CLI's glue (``cli/failures_commands.py``).
"""

from assay.failures.attribution import Attribution, attribute, coverage
from assay.failures.categories import Categorized, Category, categorize, family_of, signals, step_arrays
from assay.failures.ponr import PointOfNoReturn, bisect_ponr, find_ponr, scan_ponr
from assay.failures.regression import (
    Case,
    RegressionSet,
    SetStatus,
    add_sets,
    case_from,
    diff_runs,
    load_set,
    record_run,
    statuses,
)
from assay.failures.replay import Replayer, Replayers
from assay.failures.table import FailureTable

__all__ = [
    "Attribution", "Case", "Categorized", "Category", "FailureTable", "PointOfNoReturn", "RegressionSet",
    "Replayer", "Replayers", "SetStatus", "add_sets", "attribute", "bisect_ponr", "case_from", "categorize", "coverage",
    "diff_runs", "family_of", "find_ponr", "load_set", "record_run", "scan_ponr", "signals", "statuses", "step_arrays",
]
