"""What the browser tests share: Debian's chromium (never a downloaded browser) and the layout checks."""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

_BOXES = """sel => [...document.querySelectorAll(sel)]
  .filter(t => t.textContent.trim() !== '')
  .map(t => { const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })"""


def text_boxes(page: object, selector: str) -> list[tuple[str, float, float, float, float]]:
    """(text, left, top, right, bottom) of every non-empty element under ``selector``, as rendered."""
    return [tuple(box) for box in page.evaluate(_BOXES, selector)]


def overlapping_labels(page: object, selector: str, tolerance: float = 0.5) -> list[list[str]]:
    """Pairs of non-empty text elements under ``selector`` whose rendered boxes intersect by more than
    ``tolerance`` pixels each way."""
    boxes = text_boxes(page, selector)
    hits = []
    for i, (a, al, at, ar, ab) in enumerate(boxes):
        for b, bl, bt, br, bb in boxes[i + 1:]:
            if al < br - tolerance and bl < ar - tolerance and at < bb - tolerance and bt < ab - tolerance:
                hits.append([a, b])
    return hits


def box(page: object, selector: str) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of the first element matching ``selector``, as rendered."""
    return tuple(page.evaluate(
        "sel => { const r = document.querySelector(sel).getBoundingClientRect();"
        " return [r.left, r.top, r.right, r.bottom]; }", selector))


def clipped_labels(page: object, container: str, selector: str = "text") -> list[str]:
    """Texts under ``selector`` that reach outside the first ``container`` element's box (cut off when drawn)."""
    left, top, right, bottom = box(page, container)
    return [text for text, tl, tt, tr, tb in text_boxes(page, f"{container} {selector}")
            if tl < left - 0.5 or tt < top - 0.5 or tr > right + 0.5 or tb > bottom + 0.5]


def shot(page: object, name: str, directory: Path | None = None) -> None:
    """A full-page screenshot into ``directory`` and into $ASSAY_SCREENSHOTS when set (to look at the layout)."""
    for where in (directory, os.environ.get("ASSAY_SCREENSHOTS")):
        if where:
            page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=True)
