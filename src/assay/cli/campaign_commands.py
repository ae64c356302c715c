"""``assay run``: running a campaign (``results_commands`` reads what it stored)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from assay.cli import render
from assay.cli.adaptive_render import adaptive_render, power_warning
from assay.cli.common import (
    DEFAULT_STORE,
    CatalogOpt,
    JsonOpt,
    StoreOpt,
    create_store,
    open_store,
    say_waiting,
    user_errors,
)
from assay.cli.dry_run import dry_run as check_only
from assay.cli.gates import FailUnderOpt, check_rates, gate_failed
from assay.cli.options import AddressOpt, ExecutorOpt, ProtocolOpt, ProtocolPolicyOpt, UpstreamOpt
from assay.cli.progress import CampaignProgress, interrupt_told
from assay.cli.scoring import scored_campaign
from assay.errors import AssayError
from assay.metrics import missing_rows, rate_rows
from assay.metrics.adaptive import judge_for
from assay.metrics.adaptive_power import equal_power_view
from assay.run import CampaignPlan, CampaignSummary, FaultPolicy, make_executor, run_campaign
from assay.run.adaptive import load_state
from assay.run.catalog_writer import DEFAULT_COMMIT_ROWS, DEFAULT_COMMIT_SECONDS, CommitPolicy
from assay.run.leases import DEFAULT_LEASE_S
from assay.spec import CampaignSpec, SuccessMode
from assay.store import Store, run_lock
from assay.store.aggregates import CellTotals, renderer_totals
from assay.store.provenance import renderer_notes_of


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``assay`` command."""
    app.command()(run)


def run(
    campaign: Annotated[Path | None, typer.Argument(help="Campaign YAML file (or --protocol).")] = None,
    protocol: ProtocolOpt = None,
    policy: ProtocolPolicyOpt = None,
    upstream: UpstreamOpt = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    workers: Annotated[str, typer.Option("--workers", "-w", metavar="N|auto", help="Worker processes (local) or "
                                         "actors (ray); auto: a short probe of this host, backend and policy picks "
                                         "the local processes (and envs_per_worker: auto the environments).")] = "2",
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    data: Annotated[str | None, typer.Option(
        "--data", help="Where step files go: a shared directory or fsspec URL (default: the store).")] = None,
    retry_errors: Annotated[bool, typer.Option(
        "--retry-errors", help="Also re-run episodes recorded as error (e.g. a policy server was down).")] = False,
    episode_timeout: Annotated[float | None, typer.Option(
        "--episode-timeout", min=0.001, help="Wall-clock limit of one batch of episodes, seconds (default: the "
        "campaign's episode_timeout_s, else 900); a hung episode becomes an error (local and ray executors).")] = None,
    verify_files: Annotated[bool, typer.Option(
        "--verify-files", help="Before resuming, read and hash every recorded step file (what `assay store verify` "
        "checks) and re-run the damaged ones; by default a resume trusts the catalog and checks only that each "
        "file exists with its recorded size.")] = False,
    new_catalog: Annotated[bool, typer.Option(
        "--new-catalog", help="Index this store with another catalog than the one it names in store.json.")] = False,
    commit_rows: Annotated[int, typer.Option(
        "--commit-rows", min=1, help="Commit catalog rows in transactions of at most this many.",
    )] = DEFAULT_COMMIT_ROWS,
    commit_seconds: Annotated[float, typer.Option(
        "--commit-seconds", min=0.001, help="... or once the oldest finished row has waited this long (a kill "
        "loses at most this much finished work, which a rerun runs again).")] = DEFAULT_COMMIT_SECONDS,
    lease: Annotated[float, typer.Option(
        "--lease-seconds", min=0.001, help="Job leases: how long the jobs this run has claimed stay its own without a "
        "heartbeat; another run on the same store takes over a job this long after its driver died (renewed every "
        "third of it).")] = DEFAULT_LEASE_S,
    fail_under: FailUnderOpt = None,
    allow_errors: Annotated[bool, typer.Option(
        "--allow-errors", help="Exit 0 even when every episode of a policy ended as error (a broken policy, a server "
        "that was down); the error episodes of the run are counted by reason either way.")] = False,
    progress_every: Annotated[float, typer.Option(
        "--progress-every", min=0.0, metavar="SECONDS",
        help="Without a terminal (a cluster log, CI), print a progress line to stderr this often.")] = 30.0,
    json_out: JsonOpt = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Resolve the tasks and variants, build each policy once, check every contract and print "
        "the episode count (planned, stored, to run); run nothing and create no store.")] = False,
    simulator: Annotated[list[str] | None, typer.Option(
        "--simulator", metavar="BACKEND=ws://HOST:PORT", help="Step BACKEND's environments on the simulator `assay "
        "serve-sim BACKEND` serves there (repeat per backend; overrides the campaign's simulators:); the episodes "
        "are the same.")] = None,
) -> None:
    """Run a campaign; rerunning the same command resumes it (finished episodes are skipped)."""
    from assay.cli.protocol_build import campaign_plan, keep_manifest

    with user_errors():
        spec, planned, manifest = campaign_plan(campaign, protocol, policy, upstream, simulator or [])
        (auto_workers, count), faults = worker_count(workers, executor), fault_policy(spec, episode_timeout)
        if dry_run:
            check_only(planned, store, catalog, json_out)
            return
        slow_frames = _warn_before(spec, planned, executor, address)
        make_executor(executor, data if data is not None else store, count, address=address)  # bad options fail here
        create_store(store, catalog, data, new_catalog)
        # the run holds the lock shared: other runs go on beside it, job leases keep each job to one of them
        with render.json_stdout(json_out), run_lock(store, on_wait=say_waiting, shared=True), \
                open_store(store, catalog, create=True, data_url=data) as opened:
            keep_manifest(opened.root, manifest)  # the stamp finds the manifest a campaign ran in its store
            runner = make_executor(executor, str(opened.data_root), count, address=address, faults=faults)
            progress = CampaignProgress(render.err_console, enabled=not json_out or not render.err_console.is_terminal,
                                        every=progress_every)
            with interrupt_told(progress, render.err_console), progress:
                summary = run_campaign(planned, opened, runner, on_start=_say_sizing(progress.start),
                                       on_record=progress.record, auto_workers=auto_workers, retry_errors=retry_errors,
                                       verify_files=verify_files,
                                       commit=CommitPolicy(commit_rows, commit_seconds), lease_s=lease,
                                       judge=judge_for(spec) if spec.adaptive is not None else None)
                progress.ran_elsewhere(summary.elsewhere)
            adaptive = load_state(opened, spec.name) if spec.adaptive is not None else None
            _report_run(opened, spec, planned, summary, adaptive, json_out, fail_under,
                        warned_software=slow_frames is not None, allow_errors=allow_errors)


def _warn_before(spec: CampaignSpec, planned: CampaignPlan, executor: str, address: str | None) -> str | None:
    """Warn (stderr) of a campaign too small to decide what it compares and of frames a GPU host would draw in
    software; the latter's text, or None."""
    for warning in (power_warning(spec), slow := software_rendering(planned, executor, address)):
        if warning is not None:
            render.err_console.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    return slow


def software_rendering(planned: CampaignPlan, executor: str, address: str | None) -> str | None:
    """The warning ``assay run`` prints before the first episode when this host has an NVIDIA GPU but the
    campaign's cameras would be drawn in software (``assay.sim.render.gpu_software_warning``); None when no task
    renders a camera, or the episodes run on a Ray cluster's hosts (``--address``), whose GL this host cannot see."""
    if not any(task.cameras for task in planned.tasks) or (executor == "ray" and address is not None):
        return None
    from assay.sim.render import gpu_software_warning

    return gpu_software_warning()


def _report_run(opened: Store, spec: CampaignSpec, planned: CampaignPlan, summary: CampaignSummary,
                adaptive: dict[str, Any] | None, json_out: bool, fail_under: float | None,
                warned_software: bool = False, allow_errors: bool = False) -> None:
    """What ``assay run`` says after the episodes: renderer notes, the rate table in the campaign's scope (or the
    JSON document), the adaptive rounds, the counts, the run's error episodes by reason, and the gates: a policy
    whose every episode ended as error (unless ``allow_errors``), then ``--fail-under``. ``warned_software``: the
    software-rendering warning was printed before the first episode, so stderr does not repeat it (the JSON
    document's notes keep it)."""
    totals = renderer_totals(opened.catalog, spec.name)
    notes = renderer_notes_of(totals)  # several renderers, or software rendering on a GPU host
    for note in renderer_notes_of(totals, software=False) if warned_software else notes:
        render.err_console.print(note, highlight=False, soft_wrap=True)
    scored = scored_campaign(opened, spec.name, None)  # the scope `results` shows, from counts
    covered = scored.within()
    rows = rate_rows(scored.scoped, by=("policy", "task"))
    rows += missing_rows(covered, ("policy", "task"), rows)
    if json_out:
        render.print_json({"campaign": spec.name, "store": str(opened.root), "total": summary.total,
                           "skipped": summary.skipped, "ran": summary.ran, "repaired": summary.repaired,
                           "retried": summary.retried, "elsewhere": summary.elsewhere, "outcomes": summary.outcomes,
                           "sizing": summary.sizing,
                           **scored.document(covered), "notes": notes,
                           "results": [r.to_dict() | covered.of(r.group).summary() for r in rows],
                           "errors": {kind: vars(found) for kind, found in summary.errors.items()},
                           **({"adaptive": adaptive, "adaptive_equal_power": equal_power_view(adaptive)}
                              if adaptive is not None else {})})
        _check_errors(summary, scored.totals, allow_errors)
        check_rates(rows, fail_under)
        return
    no_success = frozenset(t.id for t in planned.tasks if t.success is SuccessMode.NONE)
    title = scored.title(f"campaign {spec.name}: success by policy × task")
    render.console.print(render.rate_table(rows, title, no_success, completeness=covered))
    if not covered.complete:
        scored.say(covered)
    else:
        scored.say_stamp()
    if adaptive is not None:
        for part in adaptive_render(adaptive):
            render.console.print(part, highlight=False, soft_wrap=True)
    render.console.print(
        f"{summary.total} episodes: {summary.ran} run now, {summary.skipped} already in the store"
        + (f", {summary.elsewhere} run meanwhile by another run on this store" if summary.elsewhere else "")
        + (f" ({summary.repaired} re-run: step file or catalog row damaged)" if summary.repaired else "")
        + (f" ({summary.retried} error episodes retried)" if summary.retried else "") + ". "
        f"Results stored in {opened.root} (catalog {opened.catalog.display_url})",
        highlight=False, soft_wrap=True)
    _check_errors(summary, scored.totals, allow_errors)
    check_rates(rows, fail_under)


def _check_errors(summary: CampaignSummary, cells: Sequence[CellTotals], allow_errors: bool) -> None:
    """Count the run's ``error`` episodes by reason on stderr (each kind with its first reason), then fail the run
    (exit 1) when every episode the campaign holds of some policy is an error, unless ``allow_errors``."""
    if summary.errors:
        told = sum(found.count for found in summary.errors.values())
        render.err_console.print(f"warning: {told} episode{'s' if told != 1 else ''} of this run ended as error, by "
                                 "reason (assay episodes ls --outcome error lists them):", highlight=False,
                                 soft_wrap=True, markup=False)
        for kind, found in sorted(summary.errors.items(), key=lambda item: -item[1].count):
            render.err_console.print(f"  {found.count} {kind}; first, policy {found.policy!r}: {found.first}",
                                     highlight=False, soft_wrap=True, markup=False)
    totals: dict[str, list[int]] = {}
    for cell in cells:
        counted = totals.setdefault(cell.policy, [0, 0])
        counted[0] += cell.episodes
        counted[1] += cell.errors
    broken = [f"every episode of policy {policy!r} ended as error ({errors} of {episodes}); fix it and re-run with "
              "--retry-errors, or pass --allow-errors to exit 0 anyway"
              for policy, (episodes, errors) in totals.items() if episodes and errors == episodes]
    if broken and not allow_errors:
        gate_failed(broken)


def worker_count(workers: str, executor: str) -> tuple[bool, int]:
    """(``--workers auto``?, the count to build the executor with): a whole number ≥ 1, or auto (local only)."""
    if workers == "auto":
        if executor != "local":
            raise AssayError(f"--workers auto sizes local worker processes on this host; the {executor} executor "
                             "takes a number (--workers N)")
        from assay.run import usable_cores

        return True, usable_cores()
    if not (workers.isascii() and workers.isdecimal()) or int(workers) < 1:
        raise AssayError(f"--workers {workers!r} is not valid; valid: a whole number ≥ 1, or auto")
    return False, int(workers)


def _say_sizing(start: Any) -> Any:
    """``on_start`` that first prints what ``auto`` chose, once (an adaptive campaign starts once a round)."""
    said: list[bool] = []

    def started(summary: CampaignSummary) -> None:
        if summary.sizing is not None and not said:
            render.err_console.print(summary.sizing["line"], highlight=False, soft_wrap=True)
            said.append(True)
        start(summary)

    return started


def fault_policy(spec: CampaignSpec, episode_timeout: float | None) -> FaultPolicy:
    """The run's limits: ``--episode-timeout``, else the campaign's ``episode_timeout_s``, else the default."""
    chosen = episode_timeout if episode_timeout is not None else spec.episode_timeout_s
    return FaultPolicy() if chosen is None else FaultPolicy(episode_timeout_s=chosen)
