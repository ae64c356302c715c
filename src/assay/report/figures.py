"""Report figures: Matplotlib drawn to inline SVG (no JavaScript, works offline), keyframes as PNG.

Matplotlib is imported lazily and always with the non-interactive Agg backend,
so building a report never needs a display.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from assay.metrics import (
    Comparison,
    CorrelationReport,
    Leaderboard,
    OpenLoopRow,
    Verdict,
)
from assay.report import labels
from assay.report.data import RobustnessRow
from assay.store import read_video
from assay.store.roots import Root

OUTCOME_COLOURS = {"success": "#2e7d32", "failure": "#c62828", "timeout": "#ef6c00", "error": "#6a1b9a"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("report figures need matplotlib: pip install 'matplotlib>=3.8'") from None
    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["svg.fonttype"] = "none"  # real text in the SVG: smaller, selectable, searchable
    matplotlib.rcParams["svg.hashsalt"] = "assay"  # stable element ids: the same data gives the same file
    import matplotlib.pyplot as plt

    return plt


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    _pyplot().close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG is inlined into HTML


def leaderboard_svg(board: Leaderboard) -> str:
    """Suite score per policy with its interval (mid-p confidence draws), best on top."""
    plt = _pyplot()
    scored = [(r, r.score) for r in board.rows if r.score is not None]
    rows = [r for r, _ in scored]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * max(2, len(rows)) + 0.8))
    y = np.arange(len(rows))[::-1]
    scores = [score for _, score in scored]
    low = [score - (r.ci_low if r.ci_low is not None else score) for r, score in scored]
    high = [(r.ci_high if r.ci_high is not None else score) - score for r, score in scored]
    ax.barh(y, scores, color="#1565c0", alpha=0.8)
    ax.errorbar(scores, y, xerr=[low, high], fmt="none", ecolor="black", capsize=4)
    ax.set_yticks(y, [f"{r.policy}  (rank {r.rank_text})" for r in rows])
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"suite success rate, {board.confidence:.0%} interval")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def outcomes_svg(outcomes: dict[str, dict[str, int]]) -> str:
    """Stacked outcome counts per policy."""
    plt = _pyplot()
    policies = sorted(outcomes)
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * max(2, len(policies)) + 0.8))
    left = np.zeros(len(policies))
    y = np.arange(len(policies))[::-1]
    for outcome, colour in OUTCOME_COLOURS.items():
        counts = np.array([outcomes[p].get(outcome, 0) for p in policies], dtype=float)
        if counts.any():
            ax.barh(y, counts, left=left, color=colour, label=outcome)
        left += counts
    ax.set_yticks(y, policies)
    ax.set_xlabel("episodes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)  # beside the bars
    return _svg(fig)


def distinct_colours(n: int) -> list[Any]:
    """``n`` colours no two alike: Matplotlib's ten-colour cycle, tab20 up to 20, evenly spaced turbo beyond."""
    plt = _pyplot()
    if n <= 10:
        return [f"C{k}" for k in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(k) for k in range(n)]
    return [plt.get_cmap("turbo")(k / (n - 1)) for k in range(n)]


def robustness_svg(rows: Sequence[RobustnessRow]) -> str:
    """Retention per variant, one group of bars per policy."""
    plt = _pyplot()
    variants = sorted({r.variant for r in rows})
    policies = sorted({r.policy for r in rows})
    index = {(r.policy, r.variant): r for r in rows}
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * max(2, len(variants)) * max(1, len(policies)) ** 0.5 + 0.8))
    height = 0.8 / max(1, len(policies))
    y = np.arange(len(variants))[::-1]
    colours = distinct_colours(len(policies))
    for k, policy in enumerate(policies):
        values = [index[(policy, v)].retention if (policy, v) in index and index[(policy, v)].retention is not None
                  else 0.0 for v in variants]
        ax.barh(y + (k - (len(policies) - 1) / 2) * height, values, height=height, label=policy,
                color=colours[k])
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(y, variants)
    ax.set_xlabel("retention = success(variant) / success(nominal), paired seeds")
    handles, names = ax.get_legend_handles_labels()  # listed top to bottom, as each group's bars stand
    ax.legend(handles[::-1], names[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)  # beside, never on, the bars
    return _svg(fig)


def png_data_uri(image: np.ndarray) -> str:
    """An RGB uint8 image as a ``data:image/png`` URI (Matplotlib's PNG writer, no extra dependency)."""
    plt = _pyplot()
    buffer = io.BytesIO()
    plt.imsave(buffer, np.ascontiguousarray(image), format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def keyframes(data_root: Root, relpath: str, count: int = 4, around: int | None = None) -> list[tuple[int, str]]:
    """Frames of a video in the data root as (frame index, PNG URI): ``count`` evenly spaced, first and last
    included; with ``around`` (a step, e.g. the point of no return) the first, two before it, it, one after and
    the last."""
    frames = read_video(data_root, relpath)
    last = len(frames) - 1
    if around is None:
        picks = sorted({int(round(i)) for i in np.linspace(0, last, count)})
    else:
        t = min(max(around, 0), last)
        picks = sorted({0, max(0, t - 10), max(0, t - 3), t, min(last, t + 5), last})
    return [(i, png_data_uri(frames[i])) for i in picks]


def mp4_data_uri(data: bytes) -> str:
    """An MP4 file's bytes as a ``data:video/mp4`` URI (a report that embeds its videos)."""
    return "data:video/mp4;base64," + base64.b64encode(data).decode("ascii")


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def sweep_svg(rows: Sequence[RobustnessRow]) -> str | None:
    """Success vs value for every single factor swept over two or more numeric values (None when there is none).

    One panel per factor, one line per policy; the policy's nominal rate on the same seeds is the dashed line.
    """
    by_factor: dict[str, list[RobustnessRow]] = {}
    for row in rows:
        if "," not in row.factor and _number(row.value) is not None and row.variant_rate is not None:
            by_factor.setdefault(row.factor, []).append(row)
    swept = {f: rs for f, rs in sorted(by_factor.items()) if len({r.value for r in rs}) >= 2}
    if not swept:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(swept), figsize=(3.6 * len(swept) + 0.8, 2.8), squeeze=False)
    for ax, (factor, members) in zip(axes[0], swept.items(), strict=True):
        for k, policy in enumerate(sorted({r.policy for r in members})):
            points = sorted((_number(r.value), r.variant_rate, r.nominal_rate) for r in members if r.policy == policy)
            colour = f"C{k}"
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colour, label=policy)
            nominal = [p[2] for p in points if p[2] is not None]
            if nominal:
                ax.axhline(sum(nominal) / len(nominal), color=colour, ls="--", lw=0.8)
        ax.set_title(factor, fontsize=10)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("value")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success rate")
    axes[0][-1].legend(fontsize=8)
    return _svg(fig)


def real_to_sim_svg(report: CorrelationReport, scope: str) -> str:
    """Real vs sim success per policy, one panel per task, with the y = x line and the task's r and MMRV."""
    plt = _pyplot()
    tasks = report.tasks
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.3 * len(tasks) + 0.6, 3.3), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
        ax.scatter(task.reference_rates, task.other_rates, color="#1565c0", zorder=3)
        r, m = task.stats["pearson"].value, task.stats["mmrv"].value
        ax.set_title(f"{task.task}\nr = {'undefined' if r is None else f'{r:.2f}'}, MMRV = "
                     f"{'undefined' if m is None else f'{m:.3f}'}", fontsize=9)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("real success rate")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"sim success rate ({scope})")
    fig.tight_layout()  # the panels' final places, before labels are fitted inside them
    for ax, task in zip(axes[0], tasks, strict=True):
        labels.place(ax, labels.point_groups(task.policies, task.reference_rates, task.other_rates))
    return _svg(fig)


def openloop_svg(rows: Sequence[OpenLoopRow], closed: dict[tuple[str, str], float]) -> str:
    """Open-loop action MSE against closed-loop success, one point per (policy, task)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    tasks = sorted({r.task for r in rows})
    named: list[OpenLoopRow] = []
    for k, task in enumerate(tasks):
        cells = [r for r in rows if r.task == task and (r.policy, task) in closed]
        ax.scatter([r.mse for r in cells], [closed[(r.policy, task)] for r in cells], color=f"C{k}",
                   label=task, zorder=3)
        named += cells
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("open-loop action MSE on recorded observations")
    ax.set_ylabel("closed-loop success rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # tasks, by colour
    # A policy on the same point for several tasks is named once there (the colours tell the tasks apart).
    labels.place(ax, labels.point_groups([r.policy for r in named], [r.mse for r in named],
                                         [closed[(r.policy, r.task)] for r in named]))
    return _svg(fig)


def comparison_svg(comparisons: Sequence[Comparison], baseline: str) -> str:
    """Suite difference (policy − baseline) with its interval, one row per policy: a forest plot."""
    plt = _pyplot()
    suite = [(c, c.difference) for c in comparisons if c.task == "suite" and c.difference is not None]
    rows = [c for c, _ in suite]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * max(2, len(rows)) + 0.9))
    y = np.arange(len(rows))[::-1]
    # compare() reports baseline − other; the plot shows other − baseline so "better" is to the right
    diffs = [-difference for _, difference in suite]
    low = [d - (-c.ci_high if c.ci_high is not None else d) for d, c in zip(diffs, rows, strict=True)]
    high = [(-c.ci_low if c.ci_low is not None else d) - d for d, c in zip(diffs, rows, strict=True)]
    # the verdict is the baseline's: "worse" means this policy is detectably better
    colours = [{Verdict.WORSE: "#2e7d32", Verdict.BETTER: "#c62828"}.get(c.verdict, "#616161") for c in rows]
    ax.errorbar(diffs, y, xerr=[low, high], fmt="none", ecolor="black", capsize=4)
    ax.scatter(diffs, y, color=colours, zorder=3)
    ax.axvline(0.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(y, [c.b for c in rows])
    ax.set_xlim(-1.05, 1.05)
    ax.set_xlabel(f"success − {baseline}'s (suite, paired seeds, 95% interval)")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def trace_svg(arrays: dict[str, np.ndarray], ponr_t: int | None) -> str | None:
    """A failed episode's distances over time (hand–object, object–goal), the point of no return in red."""
    def usable(name: str) -> bool:
        values = arrays.get(f"info.{name}")
        return values is not None and values.dtype.kind == "f" and bool(np.isfinite(values).any())

    # Assay's event distances where the task defines them, else Meta-World's own object-to-target distance
    names = [n for n in ("ee_obj_dist", "obj_goal_dist") if usable(n)] or [n for n in ("obj_to_target",) if usable(n)]
    if not names:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(3.6, 1.5))
    for name in names:
        ax.plot(arrays[f"info.{name}"], lw=1.0, label=name.replace("_dist", "").replace("_to_", "–").replace("_", "–"))
    if ponr_t is not None:
        ax.axvline(ponr_t, color="red", lw=1.0)
    ax.set_xlabel("step", fontsize=7)
    ax.set_ylabel("distance (m)", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6, loc="upper right")
    return _svg(fig)
