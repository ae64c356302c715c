"""Server: ``assay serve``, a FastAPI dashboard and JSON API over one store.

Reads the store (catalog, step files, videos) and starts or cancels campaigns as
``assay run`` subprocesses; it never runs episodes itself.
"""

from assay.server.app import create_app
from assay.server.config import ServerConfig, is_loopback
from assay.server.runs import Run, RunManager, RunState

__all__ = ["Run", "RunManager", "RunState", "ServerConfig", "create_app", "is_loopback"]
