"""The report's reliability section: pass^k per cell and per policy (``metrics.passk``)."""

from __future__ import annotations

from markupsafe import Markup

from assay.metrics.passk import PassKTable
from assay.report.markup import html, join, number, table


def _interval(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def section(passk: PassKTable | None, scope: str = "") -> Markup:
    """pass^k tables (cells by policy × task, then policies) in the report's variant scope (``scope``: its label),
    or what the section needs."""
    if passk is None:
        return Markup("<p class='muted'>No scored episodes yet.</p>")
    k = passk.k
    cells = [[g["policy"], g["task"], f"{c.successes}/{c.trials}", number(c.estimate, 3),
              c.fraction, _interval(c.ci_low, c.ci_high), c.reason or ""] for g, c in passk.cells]
    policies = [[p.policy, str(p.tasks), number(p.estimate, 3), _interval(p.ci_low, p.ci_high),
                 p.reason or ""] for p in passk.policies]
    intro = html("<p class='muted'>pass^{0}: the probability that {0} independent episodes of a cell all succeed, "
                 "estimated without bias by C(c,{0})/C(n,{0}) from c successes in n scored episodes; interval: the "
                 "mid-p {1:.0%} interval of the rate raised to the power {0} (its coverage is the rate interval's). "
                 "Per policy: the mean over its tasks. Choose k with <code>assay report --pass-k K</code>.{2}</p>",
                 k, passk.confidence, f" Variants: {scope}." if scope else "")
    return join([intro,
                 table(["policy", "task", "succ/n", f"pass^{k}", "C(c,k)/C(n,k)", "interval", "why undefined"], cells,
                       {2, 3, 4, 5}),
                 Markup("<h3>Per policy (mean over its tasks)</h3>"),
                 table(["policy", "tasks", f"pass^{k}", "interval", "why undefined"], policies, {1, 2, 3})])
