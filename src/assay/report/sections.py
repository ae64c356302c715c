"""The report sections built on other commands' results: real-to-sim, open- vs closed-loop,
checkpoint comparison, regression sets, and the failure gallery with attribution and the point
of no return. Each says which command fills it when its input is missing.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from assay.errors import StoreError
from assay.failures import step_arrays
from assay.report import figures
from assay.report.data import GalleryItem, ReportData
from assay.report.markup import number, pct, table
from assay.store import Store
from assay.store.roots import local_path


def _interval(low: float | None, high: float | None, digits: int = 2) -> str:
    return "–" if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def _span(interval: tuple[float, float] | None, digits: int = 2) -> str:
    return "–" if interval is None else _interval(interval[0], interval[1], digits)


def real_to_sim(data: ReportData) -> str:
    report = data.real_to_sim
    if report is None:
        return f"<p class='muted'>{escape(data.real_to_sim_note)}.</p>"
    rows = []
    for task in report.tasks:
        r, m = task.stats["pearson"], task.stats["mmrv"]
        rows.append([escape(task.task), escape(task.other_task), str(len(task.policies)),
                     number(r.value) if r.value is not None else escape(r.reason or "undefined"),
                     _interval(r.ci_low, r.ci_high), number(m.value, 3), _interval(m.ci_low, m.ci_high, 3)])
    average = report.average
    rows.append(["<b>average</b>", "", "", number(average["pearson"].value),
                 _interval(average["pearson"].ci_low, average["pearson"].ci_high), number(average["mmrv"].value, 3),
                 _interval(average["mmrv"].ci_low, average["mmrv"].ci_high, 3)])
    left_out = "".join(f"<p class='muted'>Left out of the average {escape(kind)}: "
                       + escape("; ".join(f"{task} ({why})" for task, why in tasks.items())) + ".</p>"
                       for kind, tasks in report.left_out.items() if kind in ("pearson", "mmrv"))
    return (f"<p class='muted'>{escape(data.real_to_sim_note)}; sim = this campaign's nominal episodes. "
            f"{report.confidence:.0%} bootstrap intervals over {report.n_resamples} resamples. MMRV is the mean "
            "maximum rank violation (0 = sim orders policies as real does).</p>"
            + table(["real task", "sim task", "policies", "Pearson r", "interval", "MMRV", "interval"], rows,
                    {2, 3, 4, 5, 6}) + left_out
            + f"<div class='figure'>{figures.real_to_sim_svg(report)}</div>")


def openloop(data: ReportData) -> str:
    saved = data.openloop
    if saved is None:
        return (f"<p class='muted'>Not computed yet: <code>assay openloop --campaign {escape(data.campaign)}</code> "
                "replays the reference policy's recorded observations through every policy and saves the scores "
                "this section shows.</p>")
    rows, closed, agreement = saved["rows"], saved["closed"], saved["agreement"]
    score_rows = [[escape(r.policy), escape(r.task), str(r.episodes), f"{r.mse:.4g}",
                   number(r.r2) if r.r2 is not None else escape(r.r2_reason or "–"), pct(closed.get((r.policy, r.task)))]
                  for r in sorted(rows, key=lambda r: (r.task, r.mse))]
    agree_rows = [[escape(a.task), str(len(a.policies)),
                   number(a.kendall) if a.kendall is not None else escape(a.kendall_reason or "undefined"),
                   _span(a.kendall_interval), number(a.mmrv, 3), _span(a.mmrv_interval, 3),
                   escape(", ".join(f"{x} < {y}" for x, y in a.misranked) or "none")]
                  for a in agreement]
    variant = saved.get("variant")
    scope = (f" on the <b>{escape(str(variant))}</b> variant (recorded episodes and closed-loop rates)" if variant
             else " (every variant pooled: saved before <code>--variant</code> existed)")
    clipped = " Actions are clipped to the task's action box before the error." if any(r.clipped for r in rows) else ""
    resamples = max((a.resamples for a in agreement), default=0)
    boot = (f" Intervals: 95% bootstrap over evaluation seeds ({resamples} resamples)." if resamples else "")
    return (f"<p class='muted'>Open loop: each policy predicts actions on <b>{escape(str(saved['reference']))}</b>'s "
            f"recorded observations (it never sees its own consequences){scope}; closed loop: its success in this "
            f"campaign.{clipped}{boot} A low MSE that does not come with a high success is the open-loop trap.</p>"
            + table(["policy", "task", "episodes", "action MSE", "R²", "closed-loop success"], score_rows, {2, 3, 4, 5})
            + "<h3>Do the two orders agree?</h3>"
            + table(["task", "policies", "Kendall τ", "interval", "MMRV", "interval",
                     "misranked (lower MSE, lower success)"], agree_rows, {1, 2, 3, 4, 5})
            + f"<div class='figure'>{figures.openloop_svg(rows, closed)}</div>")


def checkpoints(data: ReportData) -> str:
    if data.scoring is not None and data.scoring.withheld:  # refused over cells with no episode, not "one policy"
        return f"<p class='warn' id='checkpoints-withheld'>{escape(data.scoring.withheld)}</p>"
    if data.baseline is None or not data.comparisons:
        return "<p class='muted'>One policy only: nothing to compare.</p>"
    rows = []
    for c in data.comparisons:
        # compare() reports baseline − other; show other − baseline so a positive number means "better"
        diff = None if c.difference is None else 0.0 - c.difference  # 0.0 - x: never "-0.00"
        low = None if c.ci_high is None else 0.0 - c.ci_high
        high = None if c.ci_low is None else 0.0 - c.ci_low
        verdict = {"better": "worse", "worse": "better"}.get(c.verdict.value, c.verdict.value)
        css = {"better": "ok", "worse": "warn"}.get(verdict, "muted")
        label = "<b>suite</b>" if c.task == "suite" else escape(c.task)
        better = data.posteriors.get(c.b, {}).get(c.task)
        rows.append([escape(c.b), label, pct(c.b_rate), pct(c.a_rate), number(diff), _interval(low, high),
                     str(c.pairs), f"{c.p_adjusted:.3g}", f"<span class='{css}'>{escape(verdict)}</span>",
                     "-" if better is None else f"{better:.3f}"])
    return (f"<p class='muted'>Every policy against <b>{escape(data.baseline)}</b> (choose with "
            "<code>assay report --baseline NAME</code>) on the same nominal seeds: McNemar's exact test on discordant "
            "pairs, Holm-adjusted over all rows, Newcombe paired interval of the difference; P(better) is the "
            "posterior probability that the policy's success rate exceeds the baseline's (Beta(1 + s, 1 + f) per "
            "cell, uniform prior; the suite row compares task-averaged rates by joint draws), as TRI's LBM "
            "evaluation reports it.</p>"
            + table(["policy", "task", "success", f"{data.baseline}", "difference", "95% interval", "pairs",
                     "p (Holm)", "verdict", "P(better)"], rows, {2, 3, 4, 5, 6, 7, 9})
            + f"<div class='figure'>{figures.comparison_svg(data.comparisons, data.baseline)}</div>")


def regression(data: ReportData) -> str:
    if not data.regression:
        return (f"<p class='muted'>No regression set mined from this campaign: <code>assay regress add NAME --from "
                f"{escape(data.campaign)}</code> freezes its failures, <code>assay regress run NAME -p POLICY</code> "
                "reruns them.</p>")
    rows = []
    for s in data.regression:
        latest = s.latest
        if latest is None:
            status = "<span class='muted'>never rerun</span>"
            history = ""
        else:
            diff = latest["diff"]
            css = "ok" if latest["passed"] == latest["cases"] else "warn"
            status = (f"<span class='{css}'>{latest['passed']}/{latest['cases']} pass</span> with "
                      f"{escape(latest['policy'])}: fixed {diff.get('fixed', 0)}, still failing "
                      f"{diff.get('still_failing', 0)}, newly failing {diff.get('newly_failing', 0)}")
            history = " → ".join(f"{r['passed']}/{r['cases']}" for r in s.runs)
        rows.append([escape(s.name), escape(s.split), f"v{s.version}", str(s.cases), str(len(s.runs)), status,
                     escape(history)])
    return table(["set", "split", "version", "cases", "runs", "latest run", "pass history"], rows, {3, 4})


def attribution_table(data: ReportData) -> str:
    if not data.attribution:
        return ""
    rows = [[escape(str(a.get("policy", ""))), escape(str(a["capability"])), escape(str(a["confidence"])),
             str(a["failures"]), pct(float(a["share"]))] for a in data.attribution]
    return ("<h3>By capability (attribution)</h3><p class='muted'>Shares are of each policy's own failures. trace: "
            "the policy's own per-step account (detections, chosen skill) names the layer; paired: the nominal twin "
            "on the same seed succeeded and the perturbed axis names the capability; category: inferred from the "
            "failure's category alone; unknown: no evidence.</p>"
            + table(["policy", "capability", "evidence", "failures", "share of its failures"], rows, {3, 4}))


def _facts(item: GalleryItem) -> str:
    facts = item.facts
    if facts is None:
        return ""
    lines = []
    if facts.category is not None:
        lines.append(f"category <b>{escape(facts.category)}</b>")
    if facts.attribution is not None:
        a = facts.attribution
        why = f"{a.confidence}: {a.evidence}" if a.confidence in ("paired", "trace") else f"from its {a.evidence}" \
            if a.confidence == "category" else a.evidence
        lines.append(f"attributed to <b>{escape(a.capability)}</b> ({escape(why)})")
    if facts.trace:
        told = ", ".join(f"{escape(k)} {v:.2f}" if isinstance(v, float) else f"{escape(k)} {escape(str(v))}"
                         for k, v in sorted(facts.trace.items()))
        lines.append(f"the policy's own account (mean over steps): {told}")
    if facts.ponr is not None:
        p = facts.ponr
        lines.append(f"point of no return: <b>{escape(p.describe())}</b> ({p.handoffs} hand-overs)")
    if facts.category is None:
        lines.append("<span class='muted'>not mined yet (<code>assay failures mine</code>)</span>")
    if facts.ponr is None:
        lines.append(f"<span class='muted'>no point of no return yet (<code>assay failures ponr "
                     f"{escape(item.record.key[:12])}</code>)</span>")
    return "<p>" + "<br>".join(lines) + "</p>"


def _media(item: GalleryItem, store: Store, embed_video: bool, out_dir: Path) -> list[str]:
    ponr_t = item.facts.ponr.point if item.facts is not None and item.facts.ponr is not None else None
    media = []
    if item.record.data_path is not None:
        try:
            trace = figures.trace_svg(step_arrays(store.steps(item.record)), ponr_t)
        except StoreError:
            trace = None
        if trace:
            media.append(f"<div class='figure trace'>{trace}</div>")
    for camera, relpath in item.videos:
        try:
            frames = figures.keyframes(store.data_root, relpath, around=ponr_t)
        except StoreError:
            continue
        media.append("<div class='frames'>" + "".join(
            f"<figure><img alt='{escape(camera)} frame {i}' src='{uri}'{' class=ponr' if i == ponr_t else ''}>"
            f"<figcaption>{'PONR ' if i == ponr_t else ''}step {i}</figcaption></figure>" for i, uri in frames)
            + "</div>")
        local = local_path(store.data_root)  # a video in an object store cannot be linked to: it is embedded
        src = figures.mp4_data_uri(store.files.read(relpath)) if embed_video or local is None else \
            escape(os.path.relpath(local / relpath, out_dir))
        # the last keyframe as poster: a paused video shows where the episode ended, not a black box
        media.append(f"<video controls muted loop preload='metadata' poster='{frames[-1][1]}' src='{src}'></video>")
    if not item.videos:
        media.append("<p class='muted'>No camera video recorded (campaign without cameras).</p>")
    return media


def gallery(data: ReportData, store: Store, embed_video: bool, out_dir: Path) -> str:
    if not data.gallery:
        return "<p class='muted'>No failed episodes.</p>"
    cards = []
    for item in data.gallery:
        r = item.record
        cards.append(
            f"<div class='card'><h3>{escape(r.policy_name)} · {escape(r.task_id)} · {escape(r.variant_name)}</h3>"
            f"<p><b>{escape(r.outcome.value)}</b> after {r.steps} steps, seed {r.seed}, return {r.total_return:.1f}"
            f"{(' — ' + escape(r.reason)) if r.reason else ''}<br><span class='muted'>episode {escape(r.key)}</span></p>"
            + _facts(item) + "".join(_media(item, store, embed_video, out_dir)) + "</div>")
    total = data.unsuccessful
    more = (f"<p class='muted'>Showing {len(data.gallery)} of {total} unsuccessful episodes: those with a point of "
            "no return first, then one per (policy, category) in turn. The red line marks the point of no return: "
            "the last step from which the expert, taking over, still succeeds.</p>")
    return more + "<div class='gallery'>" + "".join(cards) + "</div>"


def integrity(data: ReportData) -> str:
    """Leakage (evaluation scenes in a checkpoint's training data) and the safety filter's interventions."""
    parts = []
    if data.leakage:
        rows = [[escape(str(leak["checkpoint"])), str(leak["episodes"]),
                 "–" if leak.get("error") else str(leak["contaminated"]),
                 "<span class='warn'>not checked: " + escape(str(leak["error"])) + "</span>" if leak.get("error")
                 else "<span class='warn'>contaminated</span>" if leak["contaminated"] else "clean"]
                for leak in data.leakage]
        parts.append("<h3>Leakage</h3><p class='muted'>An episode is contaminated when its scene (task id and "
                     "version, variant, seed; not the horizon) is in the checkpoint's training data.</p>"
                     + table(["checkpoint", "episodes", "contaminated", "verdict"], rows, {1, 2}))
    else:
        parts.append("<p class='muted'>No bc checkpoint in this campaign: nothing to check for leakage "
                     "(<code>assay leakage CKPT --campaign NAME</code> checks any checkpoint).</p>")
    if data.safety:
        rows = [[escape(r["policy"]), escape(r["task"]), escape(r["variant"])]
                + [str(r[k]) for k in ("episodes", "steps", "nan", "limit", "workspace")] for r in data.safety]
        parts.append("<h3>Safety filter interventions</h3><p class='muted'>Steps where the filter replaced a "
                     "non-finite action (nan), clipped one to the action box (limit) or stopped a move out of "
                     "the workspace (workspace).</p>"
                     + table(["policy", "task", "variant", "episodes", "steps", "nan", "limit", "workspace"], rows,
                             {3, 4, 5, 6, 7}))
    return "".join(parts)
