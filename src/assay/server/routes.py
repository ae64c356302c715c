"""The dashboard's routes, one APIRouter per concern; ``app.create_app`` includes them all.

Each route takes what it needs of the app (the store, the run manager, the config) through a
dependency reading ``request.app.state`` (``StoreDep``, ``RunsDep``, ``ConfigDep``), and writes need
the token (``require_token``). Nothing here holds state of its own.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from assay.errors import AssayError, StoreError
from assay.metrics import (
    interval_label,
    leaderboard,
    missing_rows,
    planned_variants,
    rate_rows,
    stored_grid,
    totals_signoff,
    variant_scope,
)
from assay.metrics.coverage_certificate import coverage_note
from assay.metrics.rates import DEFAULT_INTERVAL
from assay.report.data import campaign_scoring
from assay.server import regression, views
from assay.server.config import ServerConfig
from assay.server.runs import RunManager
from assay.store import Store
from assay.store.aggregates import cell_totals

STATIC = files("assay.server") / "static"

bearer = HTTPBearer(auto_error=False, description="The token printed by `assay serve` (or given with --token).")


def _store(request: Request) -> Store:
    return request.app.state.store


def _runs(request: Request) -> RunManager:
    return request.app.state.runs


def _config(request: Request) -> ServerConfig:
    return request.app.state.config


StoreDep = Annotated[Store, Depends(_store)]
RunsDep = Annotated[RunManager, Depends(_runs)]
ConfigDep = Annotated[ServerConfig, Depends(_config)]


def require_token(config: ConfigDep,
                  creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    """401 without a token, 403 with the wrong one."""
    if creds is None:
        raise HTTPException(401, "this action needs a token: Authorization: Bearer TOKEN",
                            headers={"WWW-Authenticate": "Bearer"})
    if not secrets.compare_digest(creds.credentials.encode(), config.token.encode()):
        raise HTTPException(403, "wrong token")


async def call(fn: Any, *args: Any, status: int = 404) -> Any:
    """``fn(*args)`` on a worker thread; an AssayError becomes HTTP ``status`` with its one line."""
    try:
        return await run_in_threadpool(fn, *args)
    except AssayError as exc:
        raise HTTPException(status, str(exc)) from None


class StartRequest(BaseModel):
    """The body of ``POST /api/runs``."""

    path: str = Field(description="Campaign YAML, relative to the server's campaign directory.")


pages = APIRouter()
campaigns = APIRouter()
results = APIRouter()
episodes = APIRouter()
regression_sets = APIRouter()
files_api = APIRouter()
runs_api = APIRouter()
ROUTERS = (pages, campaigns, results, episodes, regression_sets, files_api, runs_api)


@pages.get("/", response_class=HTMLResponse, include_in_schema=False)
def index() -> str:
    """The dashboard page."""
    return (STATIC / "index.html").read_text(encoding="utf-8")

@pages.get("/static/{name}", include_in_schema=False)
def static(name: str) -> Any:
    """The page's script and style sheet, and nothing else of the package."""
    allowed = {"app.js": "text/javascript", "style.css": "text/css"}
    if name not in allowed:
        raise HTTPException(404, "not found")
    return HTMLResponse((STATIC / name).read_text(encoding="utf-8"), media_type=allowed[name])

@campaigns.get("/api/campaigns", tags=["campaigns"], summary="Campaigns with progress (episodes recorded / jobs)")
async def list_campaigns(store: StoreDep, runs: RunsDep) -> list[dict[str, Any]]:
    """Every campaign of the store: episodes recorded of jobs planned, and whether this server is running it."""
    rows = await call(views.campaign_rows, store)
    return [r | {"running": runs.running(r["name"])} for r in rows]

@campaigns.get("/api/campaigns/{name}", tags=["campaigns"], summary="One campaign: progress and success table")
async def get_campaign(name: str, store: StoreDep, runs: RunsDep) -> dict[str, Any]:
    """Per (policy, task, variant): rates with their intervals and completeness, from the campaign's kept cell
    counts only (one row per cell, whatever the campaign's size); safety and leakage are ``/extras``."""
    row = await call(views.campaign_row, store, name)

    def rates() -> dict[str, Any]:
        totals = cell_totals(store.catalog, name)  # the counts the catalog keeps: one row per cell
        scoring = campaign_scoring(store, name, totals)
        groups = ("policy", "task", "variant")
        whole = scoring.campaign  # every variant: this table shows each one separately
        found = rate_rows(totals, by=groups) if totals else []
        table = [r.to_dict() | whole.of(r.group).summary() for r in found + missing_rows(whole, groups, found)]
        each = variant_scope(scoring.variants or ["nominal"], separately=True).to_dict()
        note = coverage_note(DEFAULT_INTERVAL, [r.scored for r in found])
        return {"rates": table, "interval": interval_label(), "coverage_note": note, "rates_scope": each,
                "completeness": whole.to_dict(), "stamp": scoring.to_dict()["stamp"]}

    return row | {"running": runs.running(name), **await call(rates)}

@campaigns.get("/api/campaigns/{name}/extras", tags=["campaigns"],
               summary="Safety interventions per cell and the leakage check of each bc checkpoint")
async def get_extras(name: str, store: StoreDep) -> dict[str, Any]:
    """What the campaign page shows beside its tables once it arrives: the safety filter's interventions per
    (policy, task, variant) (``safety_scope``: each variant, as the rates) and, per bc checkpoint, which of its
    episodes are scenes it was trained on (reading only those checkpoints' rows)."""
    await call(views.campaign_row, store, name)

    def extras() -> dict[str, Any]:
        from assay.failures.safety import campaign_interventions
        from assay.learning.leakage import stored_leakage

        scoring = campaign_scoring(store, name, cell_totals(store.catalog, name))
        each = variant_scope(scoring.variants or ["nominal"], separately=True).to_dict()
        return {"safety": campaign_interventions(store, name), "safety_scope": each,
                "leakage": [leak.to_dict() for leak in stored_leakage(store, name)]}

    return await call(extras)

@campaigns.get("/api/campaigns/{name}/events", tags=["campaigns"],
         summary="Live progress as server-sent events (`progress` events, then `done` when complete)")
async def campaign_events(name: str, request: Request, store: StoreDep, runs: RunsDep,
                          config: ConfigDep) -> StreamingResponse:
    """A `progress` event whenever the campaign's row changes, then `done` once every job is recorded and no run is on.
    """
    await call(views.campaign_row, store, name)

    async def stream() -> AsyncIterator[str]:
        last = None
        while not await request.is_disconnected():
            row = await run_in_threadpool(views.campaign_row, store, name)
            row["running"] = runs.running(name)
            if row != last:
                yield f"event: progress\ndata: {json.dumps(row)}\n\n"
                last = row
            if row["episodes"] >= row["jobs"] and not row["running"]:
                yield f"event: done\ndata: {json.dumps(row)}\n\n"
                return
            await asyncio.sleep(config.poll_s)

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

@results.get("/api/campaigns/{name}/leaderboard", tags=["results"],
         summary="Suite scores with bootstrap intervals, rank intervals and sign-off (in the campaign's "
                 "variant scope: nominal when planned; withheld while a cell has no episode)")
async def get_leaderboard(name: str, store: StoreDep, confidence: float = Query(0.95, gt=0.5, lt=1.0),
                          resamples: int = Query(2000, ge=100, le=100_000),
                          seed: int = Query(0, ge=0, le=2**32 - 1),
                          allow_partial: bool = Query(False, description="Rank even while a cell has no "
                                                                         "episode (default: withheld)")
                          ) -> dict[str, Any]:
    """The campaign's leaderboard over its variant scope, with each task's sign-off; 400 for a bad setting."""
    await call(views.campaign_row, store, name)

    def compute() -> dict[str, Any]:
        totals = cell_totals(store.catalog, name)
        scoring = campaign_scoring(store, name, totals, allow_partial,
                                   hint="ask for it: /leaderboard?allow_partial=true")
        chosen = set(scoring.scope.variants)
        scored = [t for t in totals if t.variant in chosen]
        empty = {"rows": [], "signoff": [], "rank_text": {}, **scoring.to_dict()}
        if not scored or scoring.withheld:
            return empty
        board = leaderboard(stored_grid(store.catalog, name, scored), confidence, resamples, seed)
        gates = totals_signoff(scored, store.root)
        document = board.to_dict()
        document["rows"] = [r.to_dict() | scoring.completeness.select([r.policy]).summary() for r in board.rows]
        return document | scoring.to_dict() | {"signoff": [g.to_dict() for g in gates],
                                               "rank_text": {r.policy: r.rank_text for r in board.rows}}

    return await call(compute, status=400)

@results.get("/api/campaigns/{name}/pass-k", tags=["results"],
         summary="pass^k: P(k independent episodes all succeed), C(c,k)/C(n,k) with an interval, per policy × "
                 "task and per policy")
async def get_pass_k(name: str, store: StoreDep, k: int = Query(3, ge=1, le=1000),
                     confidence: float = Query(0.95, gt=0.5, lt=1.0)) -> dict[str, Any]:
    """Per policy and task, and per policy: P(k episodes all succeed) and its interval, in the campaign's variant
    scope (as `results --pass-k`: nominal when planned, named in ``scope``); 400 for a bad k."""
    from assay.metrics.passk import pass_k_rows

    await call(views.campaign_row, store, name)

    def compute() -> dict[str, Any]:
        totals = cell_totals(store.catalog, name)
        scoring = campaign_scoring(store, name, totals)
        chosen = set(scoring.scope.variants)
        table = pass_k_rows([t for t in totals if t.variant in chosen], k, confidence=confidence)
        return table.to_dict() | {"scope": scoring.scope.to_dict()}

    return await call(compute, status=400)

def _next_link(request: Request, following: str | None, response: Response) -> None:
    """The next page's address in a ``Link`` header (RFC 8288, as GitHub's API pages), the query kept."""
    if following is not None:
        query = {k: v for k, v in request.query_params.items() if k != "after"} | {"after": following}
        response.headers["Link"] = f'<{request.url.path}?{urlencode(query)}>; rel="next"'


PageLimit = Annotated[int, Query(ge=1, le=views.MAX_PAGE, description="Episodes per page.")]
After = Annotated[str | None, Query(description="The key of the last episode of the previous page (its `next`): "
                                                "the page holds the episodes linked before it.")]


@episodes.get("/api/campaigns/{name}/episodes", tags=["episodes"],
              summary="Episodes of a campaign, newest first, a page at a time (`?after=KEY&limit=50`)")
async def list_episodes(name: str, store: StoreDep, request: Request, response: Response, policy: str | None = None,
                        outcome: str | None = None, after: After = None, limit: PageLimit = views.PAGE,
                        ) -> list[dict[str, Any]]:
    """The campaign's episodes (filtered by policy and outcome), newest first (in the order they were recorded for
    the campaign), at most ``limit`` after the episode ``after``; the next page's address is the ``Link`` header
    (none on the last page). Keyset pages: an episode recorded meanwhile never shifts a later page."""
    await call(views.campaign_row, store, name)
    outcomes = views.OUTCOMES if outcome is None else (outcome,)
    records, following = await call(views.episode_page, store, name, policy, outcomes, after, limit, status=400)
    _next_link(request, following, response)
    return [views.episode_summary(r) for r in records]

@results.get("/api/campaigns/{name}/failures", tags=["results"],
         summary="Unsuccessful episodes counted by policy and outcome, and a page of them (newest first) with their "
                 "videos")
async def get_failures(name: str, store: StoreDep, request: Request, response: Response, policy: str | None = None,
                       after: After = None, limit: PageLimit = views.PAGE) -> dict[str, Any]:
    """The campaign's failures, timeouts and errors counted by policy (``by_policy``, from the kept cell counts),
    and a page of them, newest first, with their videos and categories, over every variant (``scope``:
    ``by_policy`` pools them; each episode names its own); ``next`` (and the ``Link`` header): the next page."""
    await call(views.campaign_row, store, name)

    def compute() -> dict[str, Any]:
        row = store.catalog.campaign(name)
        variants = planned_variants(row.spec if row is not None else {}) or sorted(
            {t.variant for t in cell_totals(store.catalog, name)}) or ["nominal"]
        return views.failures(store, name, after, limit, policy) | {"scope": variant_scope(variants, "all").to_dict()}

    found = await call(compute, status=400)
    _next_link(request, found["next"], response)
    return found

@regression_sets.get("/api/regression", tags=["regression"],
         summary="Regression sets at their latest version, with every rerun's passed count and diff")
async def list_regression(store: StoreDep,
                          campaign: str | None = Query(None, description="Only sets mined from this campaign")
                          ) -> list[dict[str, Any]]:
    """Every regression set (or those mined from one campaign) with its reruns."""
    if campaign is not None:
        await call(views.campaign_row, store, campaign)
    return await call(regression.set_rows, store.root, campaign, status=500)

@regression_sets.get("/api/regression/{name}", tags=["regression"],
         summary="One regression set: its runs and, per case, each run's outcome and rerun episode key")
async def get_regression(name: str, store: StoreDep) -> dict[str, Any]:
    """One regression set with each case's reruns."""
    return await call(regression.set_detail, store.root, name)

@episodes.get("/api/episodes/{key}", tags=["episodes"],
         summary="One episode: record, step series (actions, states, reward), events, videos")
async def get_episode(key: str, store: StoreDep) -> dict[str, Any]:
    """One episode: its record, step series, events and videos."""
    return await call(views.episode_detail, store, key)

@files_api.get("/api/files/{relpath:path}", tags=["files"],
         summary="A file of the store (videos and episode Parquet from its data root, resolved campaigns); "
                 "nothing outside them")
async def get_file(relpath: str, store: StoreDep) -> Response:
    """A video or step file of the data root, or a resolved campaign; 404 for anything else."""
    try:
        found = await run_in_threadpool(views.served_file, store, relpath)
    except StoreError as exc:
        raise HTTPException(404, str(exc)) from None
    media = "video/mp4" if relpath.endswith(".mp4") else None
    if isinstance(found, Path):
        return FileResponse(found, media_type=media)
    return Response(found, media_type=media or "application/octet-stream")

@runs_api.get("/api/runs", tags=["runs"], summary="Campaign runs started by this server")
def list_runs(runs: RunsDep) -> list[dict[str, Any]]:
    """The runs this server started, with their state."""
    return [r.to_dict() for r in runs.runs.values()]

@runs_api.post("/api/runs", tags=["runs"], status_code=201, dependencies=[Depends(require_token)],
          summary="Start a campaign (`assay run` on a YAML file inside the campaign directory)")
async def start_run(body: StartRequest, runs: RunsDep) -> dict[str, Any]:
    """Start ``assay run`` on a campaign file of the campaign directory (the token required)."""
    run = await call(runs.start, body.path, status=400)
    return run.to_dict()

@runs_api.post("/api/runs/{run_id}/cancel", tags=["runs"], dependencies=[Depends(require_token)],
          summary="Cancel a run (SIGTERM to its process group; finished episodes stay)")
async def cancel_run(run_id: str, runs: RunsDep) -> dict[str, Any]:
    """Cancel a run this server started (the token required)."""
    run = await call(runs.cancel, run_id)
    return run.to_dict()
