"""Report figures: Matplotlib drawn to inline SVG (no JavaScript, works offline), keyframes as PNG.

Matplotlib is imported lazily and always with the non-interactive Agg backend,
so building a report never needs a display.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from assay.metrics import Leaderboard
from assay.report.data import RobustnessRow
from assay.store import read_video

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
    """Suite score per policy with its bootstrap interval, best on top."""
    plt = _pyplot()
    rows = [r for r in board.rows if r.score is not None]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * max(2, len(rows)) + 0.8))
    y = np.arange(len(rows))[::-1]
    scores = [r.score for r in rows]
    low = [r.score - (r.ci_low if r.ci_low is not None else r.score) for r in rows]
    high = [(r.ci_high if r.ci_high is not None else r.score) - r.score for r in rows]
    ax.barh(y, scores, color="#1565c0", alpha=0.8)
    ax.errorbar(scores, y, xerr=[low, high], fmt="none", ecolor="black", capsize=4)
    ax.set_yticks(y, [f"{r.policy}  (rank {r.rank_text})" for r in rows])
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"suite success rate, {board.confidence:.0%} bootstrap interval")
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
    ax.legend(loc="lower right", fontsize=8, ncols=4)
    return _svg(fig)


def robustness_svg(rows: Sequence[RobustnessRow]) -> str:
    """Retention per variant, one group of bars per policy."""
    plt = _pyplot()
    variants = sorted({r.variant for r in rows})
    policies = sorted({r.policy for r in rows})
    index = {(r.policy, r.variant): r for r in rows}
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * max(2, len(variants)) * max(1, len(policies)) ** 0.5 + 0.8))
    height = 0.8 / max(1, len(policies))
    y = np.arange(len(variants))[::-1]
    for k, policy in enumerate(policies):
        values = [index[(policy, v)].retention if (policy, v) in index and index[(policy, v)].retention is not None
                  else 0.0 for v in variants]
        ax.barh(y + (k - (len(policies) - 1) / 2) * height, values, height=height, label=policy)
    ax.axvline(1.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(y, variants)
    ax.set_xlabel("retention = success(variant) / success(nominal), paired seeds")
    ax.legend(fontsize=8)
    return _svg(fig)


def png_data_uri(image: np.ndarray) -> str:
    """An RGB uint8 image as a ``data:image/png`` URI (Matplotlib's PNG writer, no extra dependency)."""
    plt = _pyplot()
    buffer = io.BytesIO()
    plt.imsave(buffer, np.ascontiguousarray(image), format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def keyframes(store_root: Path, relpath: str, count: int = 4) -> list[tuple[int, str]]:
    """``count`` evenly spaced frames of a video, first and last included, as (frame index, PNG URI)."""
    frames = read_video(store_root, relpath)
    picks = sorted({int(round(i)) for i in np.linspace(0, len(frames) - 1, count)})
    return [(i, png_data_uri(frames[i])) for i in picks]


def mp4_data_uri(store_root: Path, relpath: str) -> str:
    return "data:video/mp4;base64," + base64.b64encode((store_root / relpath).read_bytes()).decode("ascii")


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
    for ax, (factor, members) in zip(axes[0], swept.items()):
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
