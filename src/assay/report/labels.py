"""Point labels that never overprint: each label takes the first of a fixed list of places around its point
whose drawn box stays inside the axes and clear of every label and marker placed before it.

Boxes are measured with Matplotlib's own text metrics (the report's SVG keeps text as text, drawn by the
reader's copy of the same DejaVu font), so the check is exact up to font hinting. Deterministic: the same
points give the same layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

MARKER_PT = 3.5  # half the default scatter marker (s = 36 pt²) plus a hair: labels keep off every marker
GAP_PT = 4.0  # label to point
LINE_PT = 10.0  # one stacked row at fontsize 7
PAD_PT = 1.5  # kept clear around each label: a browser's line box is taller than the glyphs Matplotlib measures
LEADER = {"arrowstyle": "-", "color": "#777777", "lw": 0.5, "shrinkA": 0, "shrinkB": 3}

Group = tuple[str, tuple[float, float]]  # the text and the point it names


def point_groups(names: Sequence[str], xs: Sequence[float], ys: Sequence[float]) -> list[Group]:
    """One label per distinct point (policies on the same point share it, comma-joined, in input order,
    each name once), top to bottom then left to right, the order in which :func:`place` gives out places."""
    groups: dict[tuple[float, float], list[str]] = {}
    for name, x, y in zip(names, xs, ys, strict=True):
        members = groups.setdefault((float(x), float(y)), [])  # the same point; near ones get separate places
        if name not in members:
            members.append(name)
    return [(", ".join(members), point) for point, members in sorted(groups.items(), key=lambda g: (-g[0][1], g[0][0]))]


def _places(rows: int = 6) -> list[tuple[float, float, str, str]]:
    """(dx, dy in points, horizontal and vertical alignment): the four corners first, then straight above and
    below, then rows stacked farther up and down on both sides."""
    near = [(GAP_PT, GAP_PT, "left", "bottom"), (GAP_PT, -GAP_PT, "left", "top"),
            (-GAP_PT, GAP_PT, "right", "bottom"), (-GAP_PT, -GAP_PT, "right", "top"),
            (0.0, GAP_PT + 2, "center", "bottom"), (0.0, -GAP_PT - 2, "center", "top")]
    far = [(sx * GAP_PT, sy * (GAP_PT + LINE_PT * k), "left" if sx > 0 else "right", "bottom" if sy > 0 else "top")
           for k in range(1, rows + 1) for sy in (1, -1) for sx in (1, -1)]
    return near + far


def _overlap(a: Any, b: Any) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def _distance(box: Any, x: float, y: float) -> float:
    return float(np.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1)))


def place(ax: Any, groups: Sequence[Group], fontsize: float = 7) -> list[Any]:
    """Annotate ``ax`` with every group's label; returns the annotations. A label with no free place takes the
    one it overlaps least (only when a panel holds more labels than the places around them). A label nearer
    another point than its own gets a thin leader line to its own."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.canvas.draw()  # settle autoscaled limits and the layout: places are measured on the final axes
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    px = fig.dpi / 72
    centres = [tuple(c) for c in ax.transData.transform([point for _, point in groups])] if groups else []
    markers = [Bbox.from_extents(x - MARKER_PT * px, y - MARKER_PT * px, x + MARKER_PT * px, y + MARKER_PT * px)
               for x, y in centres]
    taken: list[Any] = []  # the labels placed so far, padded
    out: list[Any] = []
    for text, point in groups:
        best: tuple[float, Any, Any] | None = None
        for dx, dy, ha, va in _places():
            label = ax.annotate(text, point, textcoords="offset points", xytext=(dx, dy), ha=ha, va=va,
                                fontsize=fontsize, annotation_clip=False)
            glyphs = label.get_window_extent(renderer)
            box = glyphs.padded(PAD_PT * px)
            outside = max(frame.x0 - box.x0, box.x1 - frame.x1, frame.y0 - box.y0, box.y1 - frame.y1, 0.0)
            cost = (sum(_overlap(box, other) for other in taken) + outside * box.height * 10
                    + sum(_overlap(glyphs, m) for k, m in enumerate(markers) if k != len(out)))
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, label, box)
            else:
                label.remove()
            if cost == 0:
                break
        assert best is not None
        _, label, box = best
        taken.append(box)
        own = _distance(box, *centres[len(out)])
        if any(_distance(box, *c) < own for k, c in enumerate(centres) if k != len(out)):
            label.remove()
            label = ax.annotate(text, point, textcoords="offset points", xytext=label.xyann, ha=label.get_ha(),
                                va=label.get_va(), fontsize=fontsize, annotation_clip=False, arrowprops=LEADER)
        out.append(label)
    return out
