"""The report's reliability section: pass^k per cell and per policy (``metrics.passk``)."""

from __future__ import annotations

from html import escape

from assay.metrics.passk import PassKTable
from assay.report.markup import number, table


def _interval(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def section(passk: PassKTable | None, scope: str = "") -> str:
    """pass^k tables (cells by policy × task, then policies) in the report's variant scope (``scope``: its label),
    or what the section needs."""
    if passk is None:
        return "<p class='muted'>No scored episodes yet.</p>"
    k = passk.k
    cells = [[escape(g["policy"]), escape(g["task"]), f"{c.successes}/{c.trials}", number(c.estimate, 3),
              escape(c.fraction), _interval(c.ci_low, c.ci_high), escape(c.reason or "")] for g, c in passk.cells]
    policies = [[escape(p.policy), str(p.tasks), number(p.estimate, 3), _interval(p.ci_low, p.ci_high),
                 escape(p.reason or "")] for p in passk.policies]
    return (f"<p class='muted'>pass^{k}: the probability that {k} independent episodes of a cell all succeed, "
            f"estimated without bias by C(c,{k})/C(n,{k}) from c successes in n scored episodes; interval: the mid-p "
            f"{passk.confidence:.0%} interval of the rate raised to the power {k} (its coverage is the rate "
            f"interval's). Per policy: the mean over its tasks. Choose k with <code>assay report --pass-k K</code>."
            + (f" Variants: {escape(scope)}." if scope else "") + "</p>"
            + table(["policy", "task", "succ/n", f"pass^{k}", "C(c,k)/C(n,k)", "interval", "why undefined"], cells,
                    {2, 3, 4, 5})
            + "<h3>Per policy (mean over its tasks)</h3>"
            + table(["policy", "tasks", f"pass^{k}", "interval", "why undefined"], policies, {1, 2, 3}))
