"""Rich tables for the statistics commands (the JSON documents carry the same figures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:  # the statistics modules load scipy: `assay results` draws its tables without them
    from assay.metrics import (
        Comparison,
        CorrelationReport,
        Leaderboard,
        OpenLoopRow,
        PosteriorComparison,
        RankAgreement,
        ReturnComparison,
        Signoff,
    )
    from assay.metrics.correlation import Estimate


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(low: float | None, high: float | None, digits: int = 2) -> str:
    return "-" if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


# keyed by `metrics.Verdict`'s values (a str enum: `Verdict.BETTER == "better"`)
VERDICT_STYLE = {"better": "green", "worse": "red", "no detectable difference": "dim"}


def comparison_table(rows: Sequence[Comparison], title: str) -> Table:
    """The ``assay compare`` table: one row per (B, task) with the test, difference, interval and Holm-adjusted p."""
    table = Table(title=title, title_justify="left")
    for column in ("B", "task", "test", "A", "B rate", "A − B", "95% CI", "n", "p", "p (Holm)", "verdict"):
        table.add_column(column, justify="left" if column in ("B", "task", "test", "verdict") else "right")
    table.caption = ("95% CI of A − B: Newcombe's square-and-add (paired) or hybrid score (unpaired) interval; the "
                     "suite row over several tasks: seeded draws (paired: each task's Jeffreys Dirichlet posterior; "
                     "unpaired: each side's mid-p distribution)")
    for r in rows:
        test = f"McNemar {r.a_only}:{r.b_only}" if r.pairing.value == "paired" else "Fisher/Newcombe"
        n = str(r.pairs) if r.pairing.value == "paired" else f"{r.a_n}/{r.b_n}"
        style = "bold" if r.task == "suite" else ""
        table.add_row(r.b, r.task, test, _num(r.a_rate), _num(r.b_rate), _num(r.difference, 3),
                      _ci(r.ci_low, r.ci_high, 3), n, f"{r.p_value:.3g}", f"{r.p_adjusted:.3g}",
                      f"[{VERDICT_STYLE[r.verdict]}]{r.verdict.value}[/]", style=style)
    return table


def return_comparison_table(rows: Sequence[ReturnComparison], title: str, confidence: float = 0.95) -> Table:
    """The paired comparison of returns: one row per (B, task) with the paired t test."""
    table = Table(title=title, title_justify="left")
    for column in ("B", "task", "test", "A return", "B return", "A − B", f"{confidence:.0%} CI", "pairs", "p",
                   "p (Holm)", "verdict"):
        table.add_column(column, justify="left" if column in ("B", "task", "test", "verdict") else "right")
    for r in rows:
        table.add_row(r.b, r.task, "paired t", _num(r.a_mean, 1), _num(r.b_mean, 1), _num(r.difference, 1),
                      _ci(r.ci_low, r.ci_high, 1), str(r.pairs), f"{r.p_value:.3g}", f"{r.p_adjusted:.3g}",
                      f"[{VERDICT_STYLE[r.verdict]}]{r.verdict.value}[/]", style="bold" if r.task == "suite" else "")
    return table


def leaderboard_table(board: Leaderboard, title: str) -> Table:
    """The leaderboard table: rank (with its interval), policy, suite score and its interval."""
    table = Table(title=title, title_justify="left")
    for column in ("rank", "policy", "suite score", f"{board.confidence:.0%} CI (mid-p)", "scored", "errors"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for row in board.rows:
        table.add_row(row.rank_text, row.policy, _num(row.score), _ci(row.ci_low, row.ci_high), str(row.scored),
                      f"[red]{row.errors}[/]" if row.errors else "0")
    return table


def p_better_table(board: Leaderboard) -> Table:
    """The matrix of bootstrap probabilities that the row's policy is better than the column's."""
    ranked = [r.policy for r in board.rows if r.rank is not None]
    table = Table(title="P(row better than column), paired bootstrap", title_justify="left")
    table.add_column("")
    for policy in ranked:
        table.add_column(policy, justify="right")
    for a in ranked:
        table.add_row(a, *["-" if a == b else f"{board.p_better[a][b]:.2f}" for b in ranked])
    return table


def signoff_table(rows: Sequence[Signoff]) -> Table:
    """The sign-off table: each task's status and reason."""
    table = Table(title="sign-off gate (calibration of this task, variant set and policies)", title_justify="left")
    for column in ("task", "variants", "status", "reason"):
        table.add_column(column)
    for row in rows:
        status = f"[green]{row.label}[/]" if row.validated else f"[yellow]{row.label}[/]"
        table.add_row(row.task, ", ".join(row.variants), status, row.reason)
    return table


def _estimate(e: Estimate, digits: int = 3) -> str:
    if e.value is None:
        return f"[yellow]{e.reason}[/]"
    widened = "*" if e.widened else ""
    note = f" [yellow]({e.note})[/]" if e.note else ""
    return f"{e.value:.{digits}f} {_ci(e.ci_low, e.ci_high, digits)}{widened}{note}"


def correlation_table(report: CorrelationReport, title: str) -> Table:
    """The correlation table: each task's statistics with intervals, and their averages."""
    from assay.metrics.correlation import STATISTICS

    table = Table(title=title, title_justify="left")
    for column in ("task", "policies", "resampling", *STATISTICS):
        table.add_column(column, justify="left" if column in ("task", "resampling") else "right")
    for t in report.tasks:
        name = t.task if t.task == t.other_task else f"{t.task} ~ {t.other_task}"
        table.add_row(name, str(len(t.policies)), t.resampling, *[_estimate(t.stats[k]) for k in STATISTICS])
    counts = report.tasks_averaged
    table.add_row("[bold]mean over tasks[/]", "", "", *[
        f"{_estimate(report.average[k])} ({counts[k]} tasks)" for k in STATISTICS])
    if any(e.widened for t in report.tasks for e in t.stats.values()) or any(
            e.widened for e in report.average.values()):
        table.caption = "* the bootstrap interval did not hold the estimate and was widened to it"
    return table


def left_out_lines(report: CorrelationReport) -> list[str]:
    """One line per statistic naming the tasks left out of its average and why."""
    return [f"{kind}: left out of the average: " + "; ".join(f"{task} ({why})" for task, why in tasks.items())
            for kind, tasks in report.left_out.items()]


def posterior_table(a: str, others: Sequence[str], posteriors: Sequence[PosteriorComparison]) -> Table:
    """The posterior table: P(A > B) per task and for the suite."""
    table = Table(title=f"Beta-binomial posteriors (uniform prior): P({a} > B)", title_justify="left")
    for column in ("B", "task", f"P({a} > B)"):
        table.add_column(column, justify="right" if column.startswith("P(") else "left")
    for b, post in zip(others, posteriors, strict=True):
        for task, p in post.per_task.items():
            table.add_row(b, task, f"{p:.3f}")
        table.add_row(b, "suite", f"{post.suite:.3f}", style="bold")
    return table


def correlation_checks_table(report: CorrelationReport) -> Table:
    """How far to trust each task's correlation: Fisher z and bootstrap intervals, drop-one leverage, permutation floor.
    """
    conv = report.mmrv_convention
    table = Table(title=f"how far to trust it (MMRV: {conv.weight}-gap weighting, ties by '{conv.ties}')",
                  title_justify="left")
    for column in ("task", "k", "Pearson r", "Fisher-z CI", "bootstrap CI", "drop-one r", "most influential",
                   "perm. p (one-sided)", "floor 1/k!"):
        table.add_column(column, justify="left" if column in ("task", "most influential") else "right")
    for t in report.tasks:
        c = t.checks
        if c is None:
            continue
        r = t.stats["pearson"]
        fisher = _ci(c.fisher_low, c.fisher_high, 3) if c.fisher_reason is None else f"[yellow]{c.fisher_reason}[/]"
        lev = c.leverage["pearson"]
        sampled = " (sampled)" if c.permutation_mode == "sampled" else ""
        perm = "-" if c.permutation_p is None else f"{c.permutation_p:.3g}{sampled}"
        table.add_row(t.task, str(c.k), _num(r.value, 3), fisher, _ci(r.ci_low, r.ci_high, 3),
                      _ci(lev.low, lev.high, 3), c.most_influential or "-", perm,
                      "-" if c.permutation_floor is None else f"{c.permutation_floor:.3g}")
    return table


def openloop_tables(rows: Sequence[OpenLoopRow], agreement: Sequence[RankAgreement], source: str) -> list[Table]:
    """The open-loop scores and the side-by-side orders with Kendall τ and MMRV (bootstrap over seeds)."""
    clipped = " (actions clipped to the action box)" if any(r.clipped for r in rows) else ""
    scores = Table(title=f"open-loop on {source}{clipped}", title_justify="left")
    for column in ("policy", "task", "episodes", "steps", "action MSE", "R²"):
        scores.add_column(column, justify="left" if column in ("policy", "task") else "right")
    for r in rows:
        scores.add_row(r.policy, r.task, str(r.episodes), str(r.steps), f"{r.mse:.4g}",
                       _num(r.r2, 3) if r.r2 is not None else f"[yellow]{r.r2_reason}[/]")
    resamples = max((a.resamples for a in agreement), default=0)
    side = Table(title="open-loop vs closed-loop ranking" + (f" (95% bootstrap over evaluation seeds, {resamples} "
                                                             "resamples)" if resamples else ""), title_justify="left")
    columns = ("task", "closed-loop order (success)", "open-loop order (MSE)", "Kendall τ", "MMRV", "misranked pairs")
    for column in columns:
        side.add_column(column)
    for a in agreement:
        closed = sorted(zip(a.policies, a.closed_loop, strict=True), key=lambda x: (-x[1], x[0]))
        opened = sorted(zip(a.policies, a.open_loop_mse, strict=True), key=lambda x: (x[1], x[0]))
        side.add_row(a.task, " > ".join(f"{p} {v:.2f}" for p, v in closed),
                     " > ".join(f"{p} {v:.3g}" for p, v in opened),
                     (_num(a.kendall, 3) + _span(a.kendall_interval)) if a.kendall is not None
                     else str(a.kendall_reason),
                     "undefined (one policy)" if a.mmrv is None else f"{a.mmrv:.3f}{_span(a.mmrv_interval)}",
                     ", ".join(f"{x}<{y}" for x, y in a.misranked) or "none")
    return [scores, side]


def _span(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"


def routing_table(rows: Sequence[Any]) -> Table:
    """Routing accuracy per (policy, task, variant): how often the router chose the task's own skill."""
    table = Table(title="routing accuracy (chosen skill = the task's own; mid-p 95%)", title_justify="left")
    for column in ("policy", "task", "variant", "routed right", "accuracy", "success | right", "success | wrong",
                   "misrouted to"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.policy, r.task, r.variant, f"{r.routed_correctly}/{r.episodes}",
                      f"{r.accuracy:.2f} {_ci(r.ci_low, r.ci_high)}", _num(r.success_when_correct),
                      _num(r.success_when_misrouted),
                      ", ".join(f"{skill} ({n})" for skill, n in r.misrouted_to.items()) or "-")
    return table


def safety_table(rows: list[dict[str, Any]]) -> Table:
    """The safety filter's interventions per cell (steps where it replaced a NaN, clipped, stopped a move)."""
    table = Table(title="safety filter interventions (steps)", title_justify="left")
    for column in ("policy", "task", "variant", "episodes", "steps", "nan", "limit", "workspace"):
        table.add_column(column, justify="left" if column in ("policy", "task", "variant") else "right")
    for row in rows:
        table.add_row(row["policy"], row["task"], row["variant"], *(str(row[k]) for k in
                                                                    ("episodes", "steps", "nan", "limit", "workspace")))
    return table


def leakage_table(leaks: list[Any]) -> Table:
    """Each bc checkpoint against the campaign's episodes: how many are scenes it was trained on."""
    table = Table(title="leakage: evaluation episodes whose scene (task, variant, seed) was in the training data",
                  title_justify="left")
    for column in ("checkpoint", "episodes", "contaminated", "verdict"):
        table.add_column(column, justify="right" if column in ("episodes", "contaminated") else "left")
    for leak in leaks:
        verdict = "[yellow]not checked[/]" if leak.error else "clean" if leak.clean else "[red]contaminated[/]"
        table.add_row(leak.checkpoint, str(leak.episodes), "–" if leak.error else str(len(leak.keys)), verdict)
    return table
