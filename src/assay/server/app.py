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

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.middleware.trustedhost import TrustedHostMiddleware

from assay.server.config import ServerConfig, allowed_hosts
from assay.server.routes import ROUTERS
from assay.server.runs import RunManager
from assay.server.trace_routes import router as timeline_router
from assay.store import Store


def create_app(config: ServerConfig) -> FastAPI:
    """The app for one store, its routes from ``assay.server.routes``; the store must exist (StoreError otherwise)."""
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
    for router in (*ROUTERS, timeline_router):
        app.include_router(router)
    return app
