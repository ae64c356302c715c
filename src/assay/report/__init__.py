"""Report: one self-contained HTML file per campaign (figures as inline SVG, media as base64).

May import ``assay.spec``, ``assay.store``, ``assay.metrics`` and ``assay.failures`` (what mining stored).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assay.metrics import RateEntry
from assay.report.data import (
    GalleryItem,
    ReportData,
    RobustnessRow,
    gather,
    robustness_rows,
)
from assay.report.html import render_html
from assay.store import Store, write_blob


def write_report(store: Store, campaign: str, output: str | Path, embed_video: bool = True,
                 real: Sequence[RateEntry] | None = None, baseline: str | None = None,
                 leakage: Sequence[dict[str, Any]] = (), pass_k: int = 3, allow_partial: bool = False) -> Path:
    """Write the report of ``campaign`` to ``output`` atomically (never a partial file); return its path.
    ``allow_partial``: show the leaderboard and comparisons even while some cell has no episode."""
    output = Path(output).expanduser().resolve()
    data = gather(store, campaign, real=real, baseline=baseline, leakage=leakage, pass_k=pass_k,
                  out_dir=output.parent, allow_partial=allow_partial)
    html = render_html(data, store, embed_video=embed_video, out_dir=output.parent)
    write_blob(output.parent, output.name, html.encode("utf-8"), what="report")
    return output


__all__ = ["GalleryItem", "ReportData", "RobustnessRow", "gather", "render_html", "robustness_rows", "write_report"]
