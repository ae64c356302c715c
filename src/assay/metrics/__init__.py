"""Metrics: success rates and intervals, paired comparisons, rankings with uncertainty,
episode budgets, real-to-sim correlation, the sign-off gate, open-loop scores,
anytime-valid sequential tests and confidence sequences, and Beta-binomial posteriors.

May import ``assay.spec`` and ``assay.store`` only; reads the catalog, never the
runner, and never builds a policy (open-loop scoring takes a predictor).
See docs/STATISTICS.md for every formula and edge case.

Every name is loaded on first use (PEP 562), as ``assay.run``'s are: ``assay results`` reads rates and intervals
without importing the rankings, the sequential tests or scipy's statistics modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.errors import ResultsCsvError
from assay.lazy import lazy_names

if TYPE_CHECKING:
    from assay.metrics.budget import Budget, episode_budget
    from assay.metrics.calibration import (
        INSUFFICIENT,
        NOT_VALIDATED,
        CalibrationRecord,
        GateCell,
        Signoff,
        Thresholds,
        campaign_signoff,
        evidence_gap,
        gate_cells,
        gate_cells_of,
        load_calibration,
        load_real_results,
        load_thresholds,
        records_from_report,
        save_calibration,
        save_real_results,
        signoff,
        totals_signoff,
    )
    from assay.metrics.comparisons import Comparison, Pairing, Verdict, compare, holm, mcnemar_exact, newcombe_interval
    from assay.metrics.completeness import (
        CellCount,
        Completeness,
        campaign_completeness,
        completeness,
        missing_rows,
        planned_cells,
        recorded_cells,
        recorded_of,
        totals_completeness,
    )
    from assay.metrics.correlation import CorrelationReport, MmrvConvention, correlate, correlation, mmrv
    from assay.metrics.openloop import (
        OpenLoopRow,
        Predictor,
        RankAgreement,
        Trajectory,
        load_openloop,
        load_trajectories,
        openloop_table,
        rank_agreement,
        save_openloop,
    )
    from assay.metrics.outcomes import OutcomeGrid, grid_of, match_tasks, outcome_grid, patterns_of, stored_grid
    from assay.metrics.paired import PairedDifference, paired_difference
    from assay.metrics.posterior import Posterior, PosteriorComparison, posterior, posterior_comparison, prob_greater
    from assay.metrics.ranking import Leaderboard, leaderboard
    from assay.metrics.rates import (
        GROUP_FIELDS,
        INTERVAL_METHODS,
        Interval,
        RateRow,
        interval_label,
        rate_rows,
        rate_table,
        return_interval_of,
        success_interval,
        totals_of,
    )
    from assay.metrics.results_csv import (
        RateEntry,
        entries_from_records,
        entries_of,
        format_results_csv,
        read_results_csv,
        write_results_csv,
    )
    from assay.metrics.returns import ReturnComparison, compare_returns, return_interval
    from assay.metrics.robustness import (
        AxisProfile,
        CategoryProfile,
        RetentionRow,
        VariantExample,
        category_profile,
        retention_rows,
        retention_table,
        robustness_profile,
        stored_retention,
    )
    from assay.metrics.routing import RoutingRow, routing_rows, routing_table
    from assay.metrics.scope import VariantScope, planned_variants, variant_scope
    from assay.metrics.sequential import (
        LatticeBoundary,
        SequentialComparison,
        compare_stop,
        lattice_boundary,
        mean_cs,
        paired_difference_cs,
        rate_cs,
    )
    from assay.metrics.stability import Stability, stability
    from assay.metrics.tables import EPISODE_COLUMNS, results_table

_LAZY = {
    "assay.metrics.budget": ("Budget", "episode_budget"),
    "assay.metrics.calibration": (
        "CalibrationRecord", "GateCell", "INSUFFICIENT", "NOT_VALIDATED", "Signoff", "Thresholds", "campaign_signoff",
        "evidence_gap", "gate_cells", "gate_cells_of", "load_calibration", "load_real_results", "load_thresholds",
        "records_from_report", "save_calibration", "save_real_results", "signoff", "totals_signoff"
    ),
    "assay.metrics.comparisons": (
        "Comparison", "Pairing", "Verdict", "compare", "holm", "mcnemar_exact", "newcombe_interval"
    ),
    "assay.metrics.completeness": (
        "CellCount", "Completeness", "campaign_completeness", "completeness", "missing_rows", "planned_cells",
        "recorded_cells", "recorded_of", "totals_completeness"
    ),
    "assay.metrics.correlation": ("CorrelationReport", "MmrvConvention", "correlate", "correlation", "mmrv"),
    "assay.metrics.openloop": (
        "OpenLoopRow", "Predictor", "RankAgreement", "Trajectory", "load_openloop", "load_trajectories",
        "openloop_table", "rank_agreement", "save_openloop"
    ),
    "assay.metrics.outcomes": ("OutcomeGrid", "grid_of", "match_tasks", "outcome_grid", "patterns_of", "stored_grid"),
    "assay.metrics.paired": ("PairedDifference", "paired_difference"),
    "assay.metrics.posterior": (
        "Posterior", "PosteriorComparison", "posterior", "posterior_comparison", "prob_greater"
    ),
    "assay.metrics.ranking": ("Leaderboard", "leaderboard"),
    "assay.metrics.rates": (
        "GROUP_FIELDS", "INTERVAL_METHODS", "Interval", "RateRow", "interval_label", "rate_rows", "rate_table",
        "return_interval_of", "success_interval", "totals_of"
    ),
    "assay.metrics.results_csv": (
        "RateEntry", "entries_from_records", "entries_of", "format_results_csv", "read_results_csv", "write_results_csv"
    ),
    "assay.metrics.returns": ("ReturnComparison", "compare_returns", "return_interval"),
    "assay.metrics.robustness": (
        "AxisProfile", "CategoryProfile", "RetentionRow", "VariantExample", "category_profile", "retention_rows",
        "retention_table", "robustness_profile", "stored_retention"
    ),
    "assay.metrics.routing": ("RoutingRow", "routing_rows", "routing_table"),
    "assay.metrics.scope": ("VariantScope", "planned_variants", "variant_scope"),
    "assay.metrics.sequential": (
        "LatticeBoundary", "SequentialComparison", "compare_stop", "lattice_boundary", "mean_cs",
        "paired_difference_cs", "rate_cs"
    ),
    "assay.metrics.stability": ("Stability", "stability"),
    "assay.metrics.tables": ("EPISODE_COLUMNS", "results_table"),
}
__getattr__ = lazy_names(__name__, _LAZY, globals())

__all__ = [
    "EPISODE_COLUMNS", "PairedDifference", "paired_difference", "results_table", "AxisProfile", "CategoryProfile",
    "RetentionRow", "category_profile", "retention_table", "robustness_profile", "Budget", "CalibrationRecord",
    "Comparison", "CorrelationReport", "GROUP_FIELDS", "INTERVAL_METHODS", "Interval", "Leaderboard", "NOT_VALIDATED",
    "OpenLoopRow", "OutcomeGrid", "Pairing", "Predictor", "RateEntry", "RateRow", "ReturnComparison", "compare_returns",
    "return_interval", "ResultsCsvError", "Signoff", "Stability", "Thresholds", "Trajectory", "Verdict", "compare",
    "correlate", "correlation", "entries_from_records", "episode_budget", "holm", "leaderboard", "load_calibration",
    "load_openloop", "load_real_results", "load_thresholds", "load_trajectories", "mcnemar_exact", "mmrv",
    "newcombe_interval", "openloop_table", "outcome_grid", "RankAgreement", "rank_agreement", "rate_table",
    "interval_label", "format_results_csv", "read_results_csv", "records_from_report", "save_calibration",
    "save_openloop",
    "save_real_results", "signoff", "stability", "success_interval", "write_results_csv", "LatticeBoundary",
    "MmrvConvention", "Posterior", "PosteriorComparison", "SequentialComparison", "compare_stop", "lattice_boundary",
    "mean_cs", "paired_difference_cs", "posterior", "posterior_comparison", "prob_greater", "rate_cs", "GateCell",
    "campaign_signoff", "gate_cells", "RoutingRow", "routing_table", "CellCount", "Completeness",
    "campaign_completeness", "completeness", "missing_rows", "planned_cells", "recorded_cells", "VariantScope",
    "planned_variants", "variant_scope", "entries_of", "gate_cells_of", "grid_of", "match_tasks", "patterns_of",
    "rate_rows", "recorded_of", "retention_rows", "return_interval_of", "routing_rows", "stored_grid",
    "totals_completeness", "totals_of", "totals_signoff", "VariantExample", "stored_retention", "INSUFFICIENT",
    "evidence_gap"
]
