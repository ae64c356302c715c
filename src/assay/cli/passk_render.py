"""The pass^k tables of ``assay results --pass-k K`` (the JSON under ``pass_k`` carries the same figures)."""

from __future__ import annotations

from rich.table import Table

from assay.metrics.passk import PassKTable
from assay.metrics.rates import METHOD_NAMES


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def pass_k_tables(table: PassKTable, title: str) -> list[Table]:
    """One table per cell of the grouping, one per policy (mean over its tasks)."""
    k = table.k
    cells = Table(title=f"{title}: pass^{k} = P({k} independent episodes all succeed), C(c,{k})/C(n,{k}) with the "
                        f"{METHOD_NAMES[table.method]} {table.confidence:.0%} interval of p raised to {k}",
                  title_justify="left")
    for name in table.by:
        cells.add_column(name)
    for column in ("succ/n", f"pass^{k}", "as a fraction", "interval", "why undefined"):
        cells.add_column(column, justify="left" if column == "why undefined" else "right")
    for group, cell in table.cells:
        cells.add_row(*(group[name] for name in table.by), f"{cell.successes}/{cell.trials}", _value(cell.estimate),
                      cell.fraction, _interval(cell.ci_low, cell.ci_high), cell.reason or "")
    policies = Table(title=f"pass^{k} per policy: the mean over its tasks of the per-task pass^{k}",
                     title_justify="left")
    separate = any(row.variant is not None for row in table.policies)  # each variant its own row
    for column in ("policy", *(("variant",) if separate else ()), "tasks", f"pass^{k}", "interval", "why undefined"):
        policies.add_column(column, justify="right" if column in ("tasks", f"pass^{k}", "interval") else "left")
    for row in table.policies:
        policies.add_row(row.policy, *((row.variant or "",) if separate else ()), str(row.tasks),
                         _value(row.estimate), _interval(row.ci_low, row.ci_high), row.reason or "")
    return [cells, policies]
