"""Metrics: success rates and intervals, and (as they land) comparisons, rankings, correlation.

May import ``assay.spec`` and ``assay.store`` only; reads the catalog, never the runner.
"""

from assay.metrics.rates import GROUP_FIELDS, Interval, RateRow, rate_table, success_interval

__all__ = ["GROUP_FIELDS", "Interval", "RateRow", "rate_table", "success_interval"]
