"""The dashboard: a FastAPI app over one store (JSON API documented at ``/docs``) plus a static page.

Reads are open (the server binds loopback by default). Anything that changes
state (starting or cancelling a campaign) needs ``Authorization: Bearer TOKEN``:
missing -> 401, wrong -> 403. Bound to loopback, requests whose ``Host`` is not a loopback
name get 400 (DNS rebinding). Files are served only from the ``videos`` and
``episodes`` folders of the store's data root (the store directory, a ``--data``
directory, or an fsspec URL read through fsspec) and the store's ``campaigns`` folder,
after resolving symlinks, so no request path (``..``, encoded slashes, links) reaches
anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from assay.errors import AssayError, StoreError
from assay.metrics import (
    campaign_signoff,
    interval_label,
    leaderboard,
    missing_rows,
    outcome_grid,
    rate_table,
    variant_scope,
)
from assay.report.data import campaign_scoring
from assay.server import regression, views
from assay.server.runs import RunManager
from assay.store import Store

STATIC = files("assay.server") / "static"


@dataclass(frozen=True)
class ServerConfig:
    store_root: Path
    token: str
    campaigns_dir: Path
    catalog_url: str | None = None
    executor: str = "local"
    workers: int = 2
    poll_s: float = 1.0  # how often the progress stream looks at the catalog
    host: str = "127.0.0.1"  # the interface served; on loopback, only loopback Host headers are answered


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> list[str]:
    """Host headers answered. Bound to loopback: loopback names only, so a page of another site whose
    name a DNS rebinding points at 127.0.0.1 cannot read the open API. Bound elsewhere: any (the
    operator exposed it on purpose; writes still need the token)."""
    return ["127.0.0.1", "localhost", "[::1]", host] if is_loopback(host) else ["*"]


class StartRequest(BaseModel):
    path: str = Field(description="Campaign YAML, relative to the server's campaign directory.")


bearer = HTTPBearer(auto_error=False, description="The token printed by `assay serve` (or given with --token).")


def create_app(config: ServerConfig) -> FastAPI:
    """The app for one store; the store must exist (StoreError otherwise)."""
    store = Store(config.store_root, config.catalog_url, create=False)
    runs = RunManager(store.root, config.campaigns_dir, config.catalog_url, config.executor, config.workers)
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        runs.shutdown()  # cancel the campaigns this server started
        store.close()

    app = FastAPI(title="Assay dashboard", version="1", lifespan=lifespan,
                  description="Campaigns, leaderboards, episodes, failures and regression sets of one Assay store. "
                              "Writes need `Authorization: Bearer TOKEN`.")
    app.state.store, app.state.runs, app.state.config = store, runs, config
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(config.host))

    def require_token(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
        if creds is None:
            raise HTTPException(401, "this action needs a token: Authorization: Bearer TOKEN",
                                headers={"WWW-Authenticate": "Bearer"})
        if not secrets.compare_digest(creds.credentials.encode(), config.token.encode()):
            raise HTTPException(403, "wrong token")

    async def call(fn: Any, *args: Any, status: int = 404) -> Any:
        try:
            return await run_in_threadpool(fn, *args)
        except AssayError as exc:
            raise HTTPException(status, str(exc)) from None

    # -- pages ------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index() -> str:
        return (STATIC / "index.html").read_text(encoding="utf-8")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Any:
        allowed = {"app.js": "text/javascript", "style.css": "text/css"}
        if name not in allowed:
            raise HTTPException(404, "not found")
        return HTMLResponse((STATIC / name).read_text(encoding="utf-8"), media_type=allowed[name])

    # -- reads ------------------------------------------------------------------
    @app.get("/api/campaigns", tags=["campaigns"], summary="Campaigns with progress (episodes recorded / jobs)")
    async def list_campaigns() -> list[dict[str, Any]]:
        rows = await call(views.campaign_rows, store)
        return [r | {"running": runs.running(r["name"])} for r in rows]

    @app.get("/api/campaigns/{name}", tags=["campaigns"], summary="One campaign: progress and success table")
    async def get_campaign(name: str) -> dict[str, Any]:
        row = await call(views.campaign_row, store, name)

        def rates() -> dict[str, Any]:
            from assay.failures.safety import intervention_rows
            from assay.learning.leakage import campaign_leakage

            records = store.catalog.episodes(campaign=name)
            scoring = campaign_scoring(store, name, records)
            groups = ("policy", "task", "variant")
            whole = scoring.campaign  # every variant: this table shows each one separately
            found = rate_table(records, by=groups) if records else []
            table = [r.to_dict() | whole.of(r.group).summary() for r in found + missing_rows(whole, groups, found)]
            return {"rates": table, "interval": interval_label(),
                    "rates_scope": variant_scope(scoring.variants or ["nominal"], separately=True).to_dict(),
                    "completeness": whole.to_dict(), "safety": intervention_rows(records),
                    "leakage": [leak.to_dict() for leak in campaign_leakage(records, store)]}

        return row | {"running": runs.running(name), **await call(rates)}

    @app.get("/api/campaigns/{name}/events", tags=["campaigns"],
             summary="Live progress as server-sent events (`progress` events, then `done` when complete)")
    async def campaign_events(name: str, request: Request) -> StreamingResponse:
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

    @app.get("/api/campaigns/{name}/leaderboard", tags=["results"],
             summary="Suite scores with bootstrap intervals, rank intervals and sign-off (in the campaign's "
                     "variant scope: nominal when planned; withheld while a cell has no episode)")
    async def get_leaderboard(name: str, confidence: float = Query(0.95, gt=0.5, lt=1.0),
                              resamples: int = Query(2000, ge=100, le=100_000),
                              seed: int = Query(0, ge=0, le=2**32 - 1),
                              allow_partial: bool = Query(False, description="Rank even while a cell has no "
                                                                             "episode (default: withheld)")
                              ) -> dict[str, Any]:
        await call(views.campaign_row, store, name)

        def compute() -> dict[str, Any]:
            records = store.catalog.episodes(campaign=name)
            scoring = campaign_scoring(store, name, records, allow_partial,
                                       hint="ask for it: /leaderboard?allow_partial=true")
            scored = scoring.scope.keep(records)
            empty = {"rows": [], "signoff": [], "rank_text": {}, **scoring.to_dict()}
            if not scored or scoring.withheld:
                return empty
            board = leaderboard(outcome_grid(scored), confidence, resamples, seed)
            gates = campaign_signoff(scored, store.root)
            document = board.to_dict()
            document["rows"] = [r.to_dict() | scoring.completeness.select([r.policy]).summary() for r in board.rows]
            return document | scoring.to_dict() | {"signoff": [g.to_dict() for g in gates],
                                                   "rank_text": {r.policy: r.rank_text for r in board.rows}}

        return await call(compute, status=400)

    @app.get("/api/campaigns/{name}/pass-k", tags=["results"],
             summary="pass^k: P(k independent episodes all succeed), C(c,k)/C(n,k) with an interval, per policy × "
                     "task and per policy")
    async def get_pass_k(name: str, k: int = Query(3, ge=1, le=1000),
                         confidence: float = Query(0.95, gt=0.5, lt=1.0)) -> dict[str, Any]:
        from assay.metrics.passk import pass_k_table

        await call(views.campaign_row, store, name)
        return await call(lambda: pass_k_table(store.catalog.episodes(campaign=name), k,
                                               confidence=confidence).to_dict(), status=400)

    @app.get("/api/campaigns/{name}/episodes", tags=["episodes"], summary="Episodes of a campaign")
    async def list_episodes(name: str, policy: str | None = None, outcome: str | None = None,
                            limit: int = Query(1000, ge=1, le=100_000)) -> list[dict[str, Any]]:
        await call(views.campaign_row, store, name)
        records = await call(lambda: store.catalog.episodes(campaign=name, policy=policy, outcome=outcome, limit=limit))
        return [views.episode_summary(r) for r in records]

    @app.get("/api/campaigns/{name}/failures", tags=["results"],
             summary="Unsuccessful episodes by policy and outcome, with their videos")
    async def get_failures(name: str) -> dict[str, Any]:
        await call(views.campaign_row, store, name)
        return await call(views.failures, store, name)

    @app.get("/api/regression", tags=["regression"],
             summary="Regression sets at their latest version, with every rerun's passed count and diff")
    async def list_regression(campaign: str | None = Query(None, description="Only sets mined from this campaign")
                              ) -> list[dict[str, Any]]:
        if campaign is not None:
            await call(views.campaign_row, store, campaign)
        return await call(regression.set_rows, store.root, campaign, status=500)

    @app.get("/api/regression/{name}", tags=["regression"],
             summary="One regression set: its runs and, per case, each run's outcome and rerun episode key")
    async def get_regression(name: str) -> dict[str, Any]:
        return await call(regression.set_detail, store.root, name)

    @app.get("/api/episodes/{key}", tags=["episodes"],
             summary="One episode: record, step series (actions, states, reward), events, videos")
    async def get_episode(key: str) -> dict[str, Any]:
        return await call(views.episode_detail, store, key)

    @app.get("/api/files/{relpath:path}", tags=["files"],
             summary="A file of the store (videos and episode Parquet from its data root, resolved campaigns); "
                     "nothing outside them")
    async def get_file(relpath: str) -> Response:
        try:
            found = await run_in_threadpool(views.served_file, store, relpath)
        except StoreError as exc:
            raise HTTPException(404, str(exc)) from None
        media = "video/mp4" if relpath.endswith(".mp4") else None
        if isinstance(found, Path):
            return FileResponse(found, media_type=media)
        return Response(found, media_type=media or "application/octet-stream")

    @app.get("/api/runs", tags=["runs"], summary="Campaign runs started by this server")
    def list_runs() -> list[dict[str, Any]]:
        return [r.to_dict() for r in runs.runs.values()]

    # -- writes (token) ---------------------------------------------------------
    @app.post("/api/runs", tags=["runs"], status_code=201, dependencies=[Depends(require_token)],
              summary="Start a campaign (`assay run` on a YAML file inside the campaign directory)")
    async def start_run(body: StartRequest) -> dict[str, Any]:
        run = await call(runs.start, body.path, status=400)
        return run.to_dict()

    @app.post("/api/runs/{run_id}/cancel", tags=["runs"], dependencies=[Depends(require_token)],
              summary="Cancel a run (SIGTERM to its process group; finished episodes stay)")
    async def cancel_run(run_id: str) -> dict[str, Any]:
        run = await call(runs.cancel, run_id)
        return run.to_dict()

    return app
