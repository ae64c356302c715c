"""The server's command line, ``python -m assay.served BACKEND [--host H] [--port P] [--clients N]``: what
``assay serve-sim`` starts (in the backend's own environment, which needs neither Typer nor the store)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from assay.errors import AssayError
from assay.served.server import SimServer, SimServerConfig


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; prints one ``serving ...`` line once it listens."""
    parser = argparse.ArgumentParser(prog="python -m assay.served", description=__doc__)
    parser.add_argument("backend")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8710)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s assay-serve-sim %(message)s")
    try:
        from assay.served.backends import backend_of

        backend_of(args.backend)
        server = SimServer(SimServerConfig(args.backend, args.host, args.port, args.clients))
        port = server.bind()
    except AssayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    print(f"serving {args.backend} on ws://{args.host}:{port} ({args.clients} clients at once)", flush=True)
    server.serve_forever()
    return 0
