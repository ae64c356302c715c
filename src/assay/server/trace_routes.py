"""The dashboard's per-layer timeline: ``/timeline#KEY`` (a page of its own, ``static/timeline.html`` and
``timeline.js``) over ``GET /api/episodes/{key}/timeline`` (``assay.report.timeline``'s data, with the episode's
videos and its point of no return). The failure gallery's rows link to it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from assay.failures.ponr import load_ponrs
from assay.report.timeline import timeline
from assay.server import views
from assay.server.routes import STATIC, StoreDep, call
from assay.store import Store

router = APIRouter()


def episode_timeline(store: Store, key: str) -> dict[str, Any]:
    """The episode's timeline (a unique key prefix), its videos, and where the data came from."""
    record = store.catalog.episode(key)
    found = load_ponrs(store.root).get(record.key)
    data = timeline(store, record, found.point if found is not None else None)
    return {**data, "videos": views.videos(store, record), "campaign": record.campaign}


@router.get("/api/episodes/{key}/timeline", tags=["episodes"],
            summary="One episode's per-layer timeline: a lane per layer (series, events), marks, video frames")
async def get_timeline(key: str, store: StoreDep) -> dict[str, Any]:
    """The per-layer trace of one episode as lanes, for the timeline page."""
    return await call(episode_timeline, store, key)


@router.get("/timeline", response_class=HTMLResponse, include_in_schema=False)
def timeline_page() -> str:
    """The timeline page (the episode key is its URL's fragment)."""
    return (STATIC / "timeline.html").read_text(encoding="utf-8")


@router.get("/timeline.js", include_in_schema=False)
def timeline_script() -> HTMLResponse:
    """The timeline page's script."""
    return HTMLResponse((STATIC / "timeline.js").read_text(encoding="utf-8"), media_type="text/javascript")
