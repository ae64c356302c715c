"""Failure mining: categories from recorded events, capability attribution, the point of
no return, regression sets, boundary search, recovery demos, collection priorities, and
the safety filter and quality gate.

May import ``assay.spec``, ``assay.sim``, ``assay.policies``, ``assay.store`` and
``assay.metrics``; running campaigns is the CLI's glue (``cli/failures_commands.py``).

Names load on first use (:mod:`assay.lazy`): opening a store registers the failure table without importing
replay or the point-of-no-return search.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.lazy import lazy_names

if TYPE_CHECKING:
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

_LAZY = {
    "assay.failures.attribution": ("Attribution", "attribute", "coverage"),
    "assay.failures.categories": ("Categorized", "Category", "categorize", "family_of", "signals", "step_arrays"),
    "assay.failures.ponr": ("PointOfNoReturn", "bisect_ponr", "find_ponr", "scan_ponr"),
    "assay.failures.regression": ("Case", "RegressionSet", "SetStatus", "add_sets", "case_from", "diff_runs",
                                  "load_set", "record_run", "statuses"),
    "assay.failures.replay": ("Replayer", "Replayers"),
    "assay.failures.table": ("FailureTable",),
}
__getattr__ = lazy_names(__name__, _LAZY, globals())

__all__ = [
    "Attribution", "Case", "Categorized", "Category", "FailureTable", "PointOfNoReturn", "RegressionSet",
    "Replayer", "Replayers", "SetStatus", "add_sets", "attribute", "bisect_ponr", "case_from", "categorize", "coverage",
    "diff_runs", "family_of", "find_ponr", "load_set", "record_run", "scan_ponr", "signals", "statuses", "step_arrays",
]
