"""``assay report`` (a self-contained HTML file) and ``assay serve`` (the web dashboard)."""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, StoreOpt, create_store, user_errors
from assay.cli.gates import is_stdout
from assay.cli.options import ExecutorOpt
from assay.errors import AssayError


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``serve`` to ``app``."""
    app.command("report")(report)
    app.command("serve")(serve)


def report(
    campaign: Annotated[str, typer.Argument(help="Campaign name in the store.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The HTML file to write (`-`: stdout).")] = Path("report.html"),
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    link_video: Annotated[bool, typer.Option(
        "--link-video", help="Link gallery videos relative to the report instead of embedding them (smaller file, "
                             "needs the store beside it).")] = False,
    real: Annotated[Path | None, typer.Option("--real", help="Real-world results CSV (task,policy,successes,trials) "
                                                 "to plot against the campaign; default: those `assay correlate "
                                                 "--record` stored.")] = None,
    baseline: Annotated[str | None, typer.Option("--baseline", help="Policy the checkpoint comparison is "
                                                    "against (default: the campaign's first).")] = None,
    pass_k: Annotated[int, typer.Option("--pass-k", min=1, max=1000, metavar="K", help="The k of the pass^k "
                                        "section (K episodes in a row all succeed).")] = 3,
    allow_partial: Annotated[bool, typer.Option(
        "--allow-partial", help="Show the leaderboard and checkpoint comparison even while some cell of the campaign "
                                "has no episode (default: withheld, the report says why).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a line.")] = False,
) -> None:
    """Write one self-contained HTML report of a campaign (works offline: inline SVG figures, embedded video)."""
    from assay.cli.scoring import refuse_failed
    from assay.learning.leakage import stored_leakage
    from assay.metrics import read_results_csv
    from assay.report import write_report
    from assay.store import Store

    with user_errors(), tempfile.TemporaryDirectory(prefix="assay-report-") as scratch:
        to_stdout = is_stdout(output)
        if to_stdout and link_video:
            raise AssayError("--link-video links videos relative to the report file; with -o - embed them (drop "
                             "--link-video)")
        entries = read_results_csv(real) if real is not None else None
        target = Path(scratch) / f"{campaign}.html" if to_stdout else output
        with Store(store, catalog, create=False) as opened:
            known = {c.name for c in opened.catalog.campaigns()}
            if campaign in known:
                refuse_failed(opened, campaign)  # what `store verify` found wrong is repaired first
            # only the rows of the campaign's bc and pixel-bc policies are read: the check is about their checkpoints
            leaks = [leak.to_dict() for leak in stored_leakage(opened, campaign)] if campaign in known else []
            path = write_report(opened, campaign, target, embed_video=not link_video, real=entries, baseline=baseline,
                                leakage=leaks, pass_k=pass_k, allow_partial=allow_partial)
        size = path.stat().st_size
        if to_stdout:  # the HTML alone on stdout; what was written, on stderr
            sys.stdout.write(path.read_text(encoding="utf-8"))
            sys.stdout.flush()
            render.err_console.print(f"report of {campaign} written to stdout ({size / 1e6:.1f} MB)", highlight=False)
            return
    if json_out:
        render.print_json({"campaign": campaign, "report": str(path), "bytes": size})
    else:
        render.console.print(f"report of {campaign} written to {path} ({size / 1e6:.1f} MB)")


def serve(
    host: Annotated[str, typer.Option(
        help="Interface to bind; anything but loopback exposes the dashboard.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8080,
    token: Annotated[str | None, typer.Option("--token", help="Token for writes (start/cancel); "
                                                 "generated and printed when omitted (env ASSAY_TOKEN).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    campaigns: Annotated[Path | None, typer.Option("--campaigns", help="Directory of campaign YAML files that "
                                                      "may be started (default: the current directory).")] = None,
    executor: ExecutorOpt = "local",
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Workers for started campaigns.")] = 2,
) -> None:
    """Serve the dashboard and JSON API (OpenAPI at /docs) over a store."""
    import uvicorn

    from assay.server import ServerConfig, create_app, is_loopback

    with user_errors():
        campaigns_dir = (campaigns or Path.cwd()).expanduser().resolve()
        if not campaigns_dir.is_dir():
            raise AssayError(f"campaign directory {campaigns_dir} does not exist")
        token = token or os.environ.get("ASSAY_TOKEN") or secrets.token_urlsafe(24)
        if create_store(Path(store), catalog):  # a first campaign can be started from the dashboard
            render.err_console.print(f"created an empty store at {Path(store).resolve()}", highlight=False,
                                     soft_wrap=True)
        config = ServerConfig(Path(store), token, campaigns_dir, catalog, executor, workers, host=host)
        app = create_app(config)
    if not is_loopback(host):
        render.err_console.print(f"[bold yellow]warning:[/] binding {host}: the dashboard and its read API are open "
                                 "to anyone who can reach this address; writes still need the token",
                                 highlight=False, soft_wrap=True)
    render.console.print(f"Assay dashboard on http://{host}:{port}/  (API docs /docs, store {config.store_root})",
                         highlight=False, soft_wrap=True)
    render.console.print(f"write token: {token}", highlight=False, soft_wrap=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
