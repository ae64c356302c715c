"""``assay protocol list|show|diff``, ``assay bundle`` (write and verify) and ``assay compare --bundle``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from assay.cli import render
from assay.cli.common import DEFAULT_STORE, CatalogOpt, JsonOpt, StoreOpt, open_store, policy_option, user_errors
from assay.cli.lazy import subgroup
from assay.cli.options import ExecutorOpt, UpstreamOpt
from assay.cli.protocol_build import resolve_protocol
from assay.errors import AssayError, BundleError
from assay.metrics.bundle import Bundle, bundle_files, bundle_records, verify_bundle
from assay.metrics.paired import PairedDifference
from assay.metrics.stamp import known_manifests, short_hash
from assay.spec.protocol import ProtocolRef, shipped_protocols

PROTOCOL_HELP = "Protocol manifests: list, show, and the knob-by-knob difference between two (diff)."


def register(app: typer.Typer) -> None:
    """Add ``protocol list|show|diff`` and ``bundle`` to the app."""
    group = subgroup(app, "protocol", PROTOCOL_HELP)
    group.command("list")(list_command)
    group.command("show")(show_command)
    group.command("diff")(diff_command)
    app.command("bundle")(bundle_command)


def list_command(json_out: JsonOpt = False) -> None:
    """The shipped protocol manifests: name@version, hash, suites, trials, knobs."""
    with user_errors():
        manifests = shipped_protocols().all()
    if json_out:
        render.print_json({"protocols": [m.model_dump(mode="json") for m in manifests]})
        return
    table = Table(title="protocol manifests shipped with Assay (assay protocol show NAME)", title_justify="left")
    for column in ("protocol", "hash", "suites (horizon)", "trials", "settle", "image", "replan", "prompt",
                   "variants"):
        table.add_column(column)
    for m in manifests:
        k = m.knobs
        image = f"{k.image.render[1]}→{k.image.received} ({k.image.resize})" if k.image else "none"
        variants = f"{m.variant_set.count:,} upstream" if m.variant_set else str(len(m.variants))
        table.add_row(m.ref, short_hash(m.content_hash()), ", ".join(f"{s.name} ({s.horizon})" for s in m.suites),
                      str(k.trials_per_task), str(k.settle_steps), image, str(k.replan_steps or "chunk"), k.prompt,
                      variants)
    render.console.print(table)


def show_command(
    protocol: Annotated[str, typer.Argument(help="NAME[@VERSION] or a manifest FILE.json.")],
    upstream: UpstreamOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """One manifest: every knob with where it was read, what Assay does not reproduce, and (for a released variant
    set, with --upstream) which variants run here and why the others cannot."""
    from assay.protocols.upstream import upstream_variants

    with user_errors():
        manifest, _ = resolve_protocol(protocol)
        found = upstream_variants(manifest, upstream) if manifest.variant_set is not None and upstream else None
    document: dict[str, Any] = {**manifest.model_dump(mode="json"), "hash": manifest.content_hash()}
    if found is not None:
        document["upstream"] = {"total": found.total, "runs": len(found.runs), "by_category": {
            c: {"runs": r, "cannot": n} for c, (r, n) in found.by_category().items()}, "cannot": found.reasons()}
    if json_out:
        render.print_json(document)
        return
    say = render.console.print
    say(f"[bold]{manifest.ref}[/] {manifest.content_hash()}", highlight=False)
    say(escape(manifest.title), highlight=False, soft_wrap=True)
    for suite in manifest.suites:
        say(f"  suite {suite.name}: {len(suite.tasks)} tasks, horizon {suite.horizon}", highlight=False)
    for name, value in manifest.knobs.model_dump(mode="json").items():
        say(f"  {name}: {value}", highlight=False, soft_wrap=True)
    say(f"  variants: {', '.join(v.label for v in manifest.variants) or 'the released set (--upstream)'}",
        highlight=False, soft_wrap=True)
    for field, where in manifest.sources.items():
        say(f"[dim]  source of {field}: {escape(where)}[/]", highlight=False, soft_wrap=True)
    for line in (*manifest.notes, *(f"not reproduced: {n}" for n in manifest.not_reproduced)):
        say(f"[yellow]  {escape(line)}[/]", highlight=False, soft_wrap=True)
    if found is not None:
        say(f"  of {found.total:,} released variants, {len(found.runs):,} run here:", highlight=False)
        for category, (runs, cannot) in found.by_category().items():
            say(f"    {category}: {runs:,} run, {cannot:,} cannot", highlight=False)
        for reason, count in found.reasons().items():
            say(f"[dim]    {count:,} cannot run: {escape(reason)}[/]", highlight=False, soft_wrap=True)


def diff_command(
    p: Annotated[str, typer.Argument(help="Protocol P: NAME[@VERSION][:SUITES] or FILE.json.")],
    q: Annotated[str, typer.Argument(help="Protocol Q.")],
    policy: Annotated[list[str], typer.Option("--policy", help="The policy to run under both (the forms of assay run "
                                                               "--policy); repeat it for several.")],
    trials: Annotated[int | None, typer.Option("--trials", min=1, help="Episodes per task and variant in every run "
                                               "(default: the fewer of P's and Q's).")] = None,
    video_fps: Annotated[float | None, typer.Option("--video-fps", min=0.001, help="Record frames at this rate in "
                                                    "every run (not a knob: outcomes do not depend on it).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1)] = 2,
    executor: ExecutorOpt = "local",
    json_out: JsonOpt = False,
) -> None:
    """Run one policy under P and Q on paired seeds and split the difference across the knobs that differ (horizon,
    replan, image, settle, prompt, noise, renderer), switching one at a time, with paired 95% intervals, ranked."""
    from assay.protocols.diff import protocol_diff
    from assay.run import make_executor
    from assay.store import Store

    with user_errors():
        (first, suites), (second, other) = resolve_protocol(p), resolve_protocol(q)
        if suites != other:
            raise AssayError(f"give the same suites to both protocols (P: {suites or 'all'}, Q: {other or 'all'})")
        specs = [policy_option(value).spec for value in policy]
        Path(store).mkdir(parents=True, exist_ok=True)
        with Store(store, catalog, create=True) as opened, render.json_stdout(json_out):
            runner = make_executor(executor, str(opened.data_root), workers)
            said = render.err_console.print
            results = protocol_diff(first, second, specs, opened, runner, suites, trials, video_fps,
                                    on_campaign=lambda label, plan: said(
                                        f"running {label}: campaign {plan.spec.name} ({len(plan.jobs)} episodes)",
                                        highlight=False))
    if json_out:
        render.print_json({"diffs": [r.to_dict() for r in results]})
        return
    for result in results:
        _print_diff(result)


def _interval(d: PairedDifference) -> str:
    return f"{d.difference:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def _print_diff(result: Any) -> None:
    total = result.total
    title = (f"{result.p} → {result.q}, policy {result.policy}: {result.tasks} tasks × {result.trials} trials, paired "
             "seeds (diagnostic: a protocol diff is no protocol's traversal)")
    table = Table(title=title, title_justify="left")
    for column in ("knob", f"{result.p}", f"{result.q}", "effect on success (95% CI)", "discordant +/−", "p", ""):
        table.add_column(column)
    for effect in result.effects:
        e = effect.effect
        table.add_row(effect.knob, _short(effect.p_value), _short(effect.q_value), _interval(e),
                      f"{e.b_only}/{e.a_only}", f"{e.p_value:.3g}", "[bold]matters[/]" if effect.matters else "")
    table.caption = ("effect: rate(P with Q's knob alone) − rate(P), Newcombe's paired interval, McNemar's exact p; "
                     f"knobs alike in both: {', '.join(result.same) or 'none'}")
    render.console.print(table)
    render.console.print(
        f"total: {result.q} − {result.p} = {_interval(total)} (rates {total.rate_a:.3f} → {total.rate_b:.3f} over "
        f"{total.pairs} pairs); one knob at a time explains {total.difference - result.interaction:+.3f}, interaction "
        f"(knobs that matter only together) {result.interaction:+.3f}", highlight=False, soft_wrap=True)
    for note in result.notes:
        render.console.print(f"[dim]{escape(note)}[/]", highlight=False, soft_wrap=True)


def _short(value: Any) -> str:
    if isinstance(value, dict) and "render" in value:
        return f"{value['render'][1]}px→{value['policy_input'][1]} {value['resize']}"
    return str(value)


def bundle_command(
    target: Annotated[str, typer.Argument(help="CAMPAIGN to bundle, or 'verify'.")],
    path: Annotated[Path | None, typer.Argument(help="With verify: the bundle directory.")] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="The bundle directory to write (new).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    catalog: CatalogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a campaign's verifiable result vector (``assay bundle CAMPAIGN -o DIR``: per-episode outcomes, package
    versions, the manifest, rates with intervals, the stamp, a SHA-256 manifest) or check one offline (``assay
    bundle verify DIR``: every checksum, every interval and the stamp recomputed, no store needed)."""
    with user_errors():
        if target == "verify":
            if path is None or out is not None:
                raise AssayError("assay bundle verify DIR: give the bundle directory (and no -o)")
            bundle = verify_bundle(path)
        else:
            if out is None or path is not None:
                raise AssayError(f"assay bundle {target} -o DIR: give the directory to write")
            bundle = write_bundle(store, catalog, target, out)
    if json_out:
        render.print_json({"bundle": str(bundle.path), "sha256": bundle.sha256, "campaign": bundle.campaign,
                           "episodes": len(bundle.rows), "protocol_hash": bundle.protocol_hash,
                           "stamp": bundle.stamp.to_dict(), **bundle.results})
        return
    _print_bundle(bundle, verified=target == "verify")


def write_bundle(store: Path, catalog: str | None, campaign: str, out: Path) -> Bundle:
    """Write ``campaign``'s bundle into the new directory ``out`` (whole or not at all) and verify it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BundleError(f"{out} exists and is not an empty directory; give a new one")
    with open_store(store, catalog) as opened:
        row = opened.catalog.campaign(campaign)
        if row is None:
            known = ", ".join(c.name for c in opened.catalog.campaigns()) or "none"
            raise AssayError(f"no campaign {campaign!r} in {opened.root}; known: {known}")
        manifests, _ = known_manifests(opened.root)
        raw = (row.spec.get("campaign") or {}).get("protocol")
        ref = ProtocolRef.model_validate(raw) if raw else None
        manifest = next((m for m in manifests if ref is not None and m.content_hash() == ref.hash
                         and (m.name, m.version) == (ref.name, ref.version)), None)
        files = bundle_files(row.spec, opened.catalog.episodes(campaign=campaign), manifest)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out.parent))  # renamed into place whole
    for name, data in files.items():
        (staging / name).write_bytes(data)
    if out.exists():
        out.rmdir()
    os.replace(staging, out)
    return verify_bundle(out)


def _print_bundle(bundle: Bundle, verified: bool) -> None:
    say = render.console.print
    what = "verified" if verified else "written and verified"
    say(f"bundle {bundle.path} {what}: {len(bundle.rows)} episodes of campaign {bundle.campaign}, sha256 "
        f"{bundle.sha256} (every checksum, interval and the stamp recomputed from its own files)", highlight=False,
        soft_wrap=True)
    table = Table(title=f"pooled over tasks, per policy and variant — {bundle.stamp.status}", title_justify="left")
    for column in ("policy", "variant", "successes", "scored", "errors", "rate", "mid-p 95% CI"):
        table.add_column(column)
    for row in bundle.results["pooled"]:
        rate = "-" if row["rate"] is None else f"{row['rate']:.3f}"
        ci = "-" if row["low"] is None else f"[{row['low']:.3f}, {row['high']:.3f}]"
        table.add_row(row["policy"], row["variant"], str(row["successes"]), str(row["scored"]), str(row["errors"]),
                      rate, ci)
    say(table)
    stamp = escape(bundle.stamp.label)
    say(f"[green]{stamp}[/]" if bundle.stamp.reportable else f"[dim]{stamp}[/]", highlight=False, soft_wrap=True)


def bundle_grid(bundles: list[str]) -> tuple[list[Any], list[Bundle]]:
    """``--bundle [LABEL=]DIR`` values of ``assay compare``: every bundle verified, their episodes as records whose
    policies are named ``LABEL:policy`` (LABEL: the directory's name), one protocol across them."""
    records: list[Any] = []
    verified: list[Bundle] = []
    labels: list[str] = []
    for value in bundles:
        label, _, where = value.rpartition("=") if "=" in value else ("", "", value)
        bundle = verify_bundle(where)
        label = label or Path(where).resolve().name
        if label in labels:
            raise AssayError(f"two bundles are labelled {label!r}; give --bundle LABEL=DIR")
        labels.append(label)
        verified.append(bundle)
        records += bundle_records(bundle, label)
    hashes = sorted({str(b.protocol_hash) for b in verified})
    if len(hashes) > 1:
        raise AssayError(f"the bundles ran different protocols ({', '.join(hashes)}): their seeds do not pair")
    return records, verified


def compare_bundles(a: str, others: list[str], bundles: list[str], alpha: float, confidence: float, resamples: int,
                    seed: int, json_out: bool) -> None:
    """``assay compare A B --bundle [LABEL=]DIR ...``: paired comparisons of policies across verified bundles (two
    labs' result vectors, paired by task, variant and seed), without a store."""
    from assay.cli import stats_render as show
    from assay.metrics import Pairing, compare, outcome_grid

    with user_errors():
        records, verified = bundle_grid(bundles)
        grid = outcome_grid(records)
        rows = compare(grid, a, others, Pairing.PAIRED, alpha, confidence, resamples, seed)
    stamps = {str(b.path): b.stamp.to_dict() for b in verified}
    if json_out:
        render.print_json({"bundles": [{"path": str(b.path), "sha256": b.sha256, "campaign": b.campaign}
                                       for b in verified], "stamps": stamps, "a": a, "others": others,
                           "comparisons": [r.to_dict() for r in rows]})
        return
    status = "reportable" if all(b.stamp.reportable for b in verified) else "diagnostic"
    render.console.print(show.comparison_table(rows, f"bundles {', '.join(str(b.path) for b in verified)}: {a} (A) vs "
                                                     f"{', '.join(others)} (B) — {status}"))
    for bundle in verified:
        render.console.print(f"[dim]{bundle.path} (sha256 {bundle.sha256[:12]}…): {escape(bundle.stamp.label)}[/]",
                             highlight=False, soft_wrap=True)
