"""The report sections built on other commands' results: real-to-sim, open- vs closed-loop,
checkpoint comparison, regression sets, and the failure gallery with attribution and the point
of no return. Each says which command fills it when its input is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

from markupsafe import Markup

from assay.errors import StoreError
from assay.failures import step_arrays
from assay.report import figures
from assay.report.data import GalleryItem, ReportData
from assay.report.markup import figure, html, join, number, pct, render, table
from assay.report.timeline import anchor as timeline_anchor
from assay.report.timeline import timelines_section
from assay.store import Store
from assay.store.roots import local_path


def _interval(low: float | None, high: float | None, digits: int = 2) -> str:
    return "–" if low is None or high is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def _span(interval: tuple[float, float] | None, digits: int = 2) -> str:
    return "–" if interval is None else _interval(interval[0], interval[1], digits)


def _scope(data: ReportData) -> str:
    """The label of the variant scope the headline sections score (``metrics.scope``)."""
    return data.scoring.scope.label if data.scoring is not None else "the campaign's default variant scope"


def real_to_sim(data: ReportData) -> Markup:
    """Correlation of real and sim success per task and on average, with intervals and the figure."""
    report = data.real_to_sim
    if report is None:
        return html("<p class='muted'>{}.</p>", data.real_to_sim_note)
    rows: list[list[str | Markup]] = []
    for task in report.tasks:
        r, m = task.stats["pearson"], task.stats["mmrv"]
        rows.append([task.task, task.other_task, str(len(task.policies)),
                     number(r.value) if r.value is not None else r.reason or "undefined",
                     _interval(r.ci_low, r.ci_high), number(m.value, 3), _interval(m.ci_low, m.ci_high, 3)])
    average = report.average
    rows.append([Markup("<b>average</b>"), "", "", number(average["pearson"].value),
                 _interval(average["pearson"].ci_low, average["pearson"].ci_high), number(average["mmrv"].value, 3),
                 _interval(average["mmrv"].ci_low, average["mmrv"].ci_high, 3)])
    left_out = join(html("<p class='muted'>Left out of the average {}: {}.</p>", kind,
                         "; ".join(f"{task} ({why})" for task, why in tasks.items()))
                    for kind, tasks in report.left_out.items() if kind in ("pearson", "mmrv"))
    return join([html("<p class='muted'>{}; sim = this campaign's episodes, {}. {:.0%} bootstrap intervals over {} "
                      "resamples. MMRV is the mean maximum rank violation (0 = sim orders policies as real does).</p>",
                      data.real_to_sim_note, _scope(data), report.confidence, report.n_resamples),
                 table(["real task", "sim task", "policies", "Pearson r", "interval", "MMRV", "interval"], rows,
                       {2, 3, 4, 5, 6}), left_out, figure(figures.real_to_sim_svg(report, _scope(data)))])


def openloop(data: ReportData) -> Markup:
    """Open-loop action error beside closed-loop success, and whether the two orders agree."""
    saved = data.openloop
    if saved is None:
        return html("<p class='muted'>Not computed yet: <code>assay openloop --campaign {}</code> replays the "
                    "reference policy's recorded observations through every policy and saves the scores this "
                    "section shows.</p>", data.campaign)
    rows, closed, agreement = saved["rows"], saved["closed"], saved["agreement"]
    score_rows = [[r.policy, r.task, str(r.episodes), f"{r.mse:.4g}",
                   number(r.r2) if r.r2 is not None else r.r2_reason or "–", pct(closed.get((r.policy, r.task)))]
                  for r in sorted(rows, key=lambda r: (r.task, r.mse))]
    agree_rows = [[a.task, str(len(a.policies)),
                   number(a.kendall) if a.kendall is not None else a.kendall_reason or "undefined",
                   _span(a.kendall_interval), number(a.mmrv, 3), _span(a.mmrv_interval, 3),
                   ", ".join(f"{x} < {y}" for x, y in a.misranked) or "none"]
                  for a in agreement]
    variant = saved.get("variant")
    scope = (html(" on the <b>{}</b> variant (recorded episodes and closed-loop rates)", str(variant)) if variant
             else Markup(" (every variant pooled: saved before <code>--variant</code> existed)"))
    clipped = Markup(" Actions are clipped to the task's action box before the error." if any(r.clipped for r in rows)
                     else "")
    resamples = max((a.resamples for a in agreement), default=0)
    boot = html(" Intervals: 95% bootstrap over evaluation seeds ({} resamples).", resamples) if resamples else ""
    return join([html("<p class='muted'>Open loop: each policy predicts actions on <b>{}</b>'s recorded observations "
                      "(it never sees its own consequences){}; closed loop: its success in this campaign.{}{} A low "
                      "MSE that does not come with a high success is the open-loop trap.</p>",
                      str(saved["reference"]), scope, clipped, boot),
                 table(["policy", "task", "episodes", "action MSE", "R²", "closed-loop success"], score_rows,
                       {2, 3, 4, 5}),
                 Markup("<h3>Do the two orders agree?</h3>"),
                 table(["task", "policies", "Kendall τ", "interval", "MMRV", "interval",
                        "misranked (lower MSE, lower success)"], agree_rows, {1, 2, 3, 4, 5}),
                 figure(figures.openloop_svg(rows, closed))])


def checkpoints(data: ReportData) -> Markup:
    """Every policy against the baseline on the same seeds: difference, interval, Holm-adjusted p, P(better)."""
    if data.scoring is not None and data.scoring.withheld:  # refused over cells with no episode, not "one policy"
        return html("<p class='warn' id='checkpoints-withheld'>{}</p>", data.scoring.withheld)
    if data.baseline is None or not data.comparisons:
        return Markup("<p class='muted'>One policy only: nothing to compare.</p>")
    rows = []
    for c in data.comparisons:
        # compare() reports baseline − other; show other − baseline so a positive number means "better"
        diff = None if c.difference is None else 0.0 - c.difference  # 0.0 - x: never "-0.00"
        low = None if c.ci_high is None else 0.0 - c.ci_high
        high = None if c.ci_low is None else 0.0 - c.ci_low
        verdict = {"better": "worse", "worse": "better"}.get(c.verdict.value, c.verdict.value)
        css = {"better": "ok", "worse": "warn"}.get(verdict, "muted")
        label = Markup("<b>suite</b>") if c.task == "suite" else c.task
        better = data.posteriors.get(c.b, {}).get(c.task)
        rows.append([c.b, label, pct(c.b_rate), pct(c.a_rate), number(diff), _interval(low, high),
                     str(c.pairs), f"{c.p_adjusted:.3g}", html("<span class='{}'>{}</span>", css, verdict),
                     "-" if better is None else f"{better:.3f}"])
    pooled = data.scoring is not None and data.scoring.scope.pooled
    seeds = f"on the same seeds, paired within each variant ({_scope(data)})" if pooled \
        else f"on the same seeds ({_scope(data)})"
    return join([html("<p class='muted'>Every policy against <b>{}</b> (choose with <code>assay report --baseline "
                      "NAME</code>) {}: McNemar's exact test on discordant pairs, Holm-adjusted "
                      "over all rows, Newcombe's paired interval of the difference (the suite row over several "
                      "tasks: the central range of seeded draws from each task's Jeffreys Dirichlet posterior of its "
                      "pairs); P(better) is the posterior "
                      "probability that the policy's success rate exceeds the baseline's (Beta(1 + s, 1 + f) per "
                      "cell, uniform prior; the suite row compares task-averaged rates by joint draws), as TRI's LBM "
                      "evaluation reports it.</p>", data.baseline, seeds),
                 table(["policy", "task", "success", f"{data.baseline}", "difference", "95% interval", "pairs",
                        "p (Holm)", "verdict", "P(better)"], rows, {2, 3, 4, 5, 6, 7, 9}),
                 figure(figures.comparison_svg(data.comparisons, data.baseline))])


def regression(data: ReportData) -> Markup:
    """The regression sets mined from this campaign, each with its latest rerun and pass history."""
    if not data.regression:
        return html("<p class='muted'>No regression set mined from this campaign: <code>assay regress add NAME --from "
                    "{}</code> freezes its failures, <code>assay regress run NAME -p POLICY</code> reruns them.</p>",
                    data.campaign)
    rows = []
    for s in data.regression:
        latest = s.latest
        if latest is None:
            status = Markup("<span class='muted'>never rerun</span>")
            history = ""
        else:
            diff = latest["diff"]
            css = "ok" if latest["passed"] == latest["cases"] else "warn"
            status = html("<span class='{}'>{}/{} pass</span> with {}: fixed {}, still failing {}, newly failing {}",
                          css, latest["passed"], latest["cases"], latest["policy"], diff.get("fixed", 0),
                          diff.get("still_failing", 0), diff.get("newly_failing", 0))
            history = " → ".join(f"{r['passed']}/{r['cases']}" for r in s.runs)
        rows.append([s.name, s.split, f"v{s.version}", str(s.cases), str(len(s.runs)), status, history])
    return table(["set", "split", "version", "cases", "runs", "latest run", "pass history"], rows, {3, 4})


def collect_next(data: ReportData) -> Markup:
    """What to collect next (``assay priorities``): the heaviest (policy, task, region) cells by failure mass x
    recoverability, each as the demos to collect and why."""
    if not data.collect_next:
        return html("<p class='muted'>No failure to collect demos for ({}).</p>",
                    data.collect_next_note or "no episode")
    rows = [[p.policy, p.task, p.region, f"{p.failures}/{p.episodes}" + (f" {_span(p.interval)}" if p.interval else ""),
             ", ".join(f"{c} {n}" for c, n in sorted(p.categories.items(), key=lambda kv: (-kv[1], kv[0]))),
             "unknown" if p.recoverability is None else f"{p.recoverable}/{p.searched}",
             "n/a" if p.score is None else f"{p.score:.3f}", str(p.demos)] for p in data.collect_next]
    return join([html("<p class='muted'>Ranked by failure mass (the cell's share of its policy's episodes on the task) "
                      "x recoverability (the share of searched failures the expert recovers from: <code>assay "
                      "failures ponr</code>); computed {}. <code>assay priorities --campaign {}</code> lists every "
                      "cell.</p>", data.collect_next_note, data.campaign),
                 table(["policy", "task", "region", "failures [95%]", "categories", "recoverable", "score",
                        "demos to collect"], rows, {3, 5, 6, 7})])


def attribution_table(data: ReportData) -> Markup:
    """Failures by the capability their evidence names, per policy."""
    if not data.attribution:
        return Markup("")
    rows = [[str(a.get("policy", "")), str(a["capability"]), str(a["confidence"]), str(a["failures"]),
             pct(float(a["share"]))] for a in data.attribution]
    return join([Markup("<h3>By capability (attribution)</h3><p class='muted'>Shares are of each policy's own "
                        "failures. trace: the policy's own per-step account (detections, chosen skill) names the "
                        "layer; paired: the nominal twin on the same seed succeeded and the perturbed axis names the "
                        "capability; category: inferred from the failure's category alone; unknown: no "
                        "evidence.</p>"),
                 table(["policy", "capability", "evidence", "failures", "share of its failures"], rows, {3, 4})])


def _facts(item: GalleryItem) -> Markup:
    facts = item.facts
    if facts is None:
        return Markup("")
    lines = []
    if facts.category is not None:
        lines.append(html("category <b>{}</b>", facts.category))
    if facts.attribution is not None:
        a = facts.attribution
        why = f"{a.confidence}: {a.evidence}" if a.confidence in ("paired", "trace") else f"from its {a.evidence}" \
            if a.confidence == "category" else a.evidence
        lines.append(html("attributed to <b>{}</b> ({})", a.capability, why))
    if facts.trace:
        told = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in sorted(facts.trace.items()))
        lines.append(html("the policy's own account (mean over steps): {}", told))
    if facts.ponr is not None:
        p = facts.ponr
        lines.append(html("point of no return: <b>{}</b> ({} hand-overs)", p.describe(), p.handoffs))
    if facts.category is None:
        lines.append(Markup("<span class='muted'>not mined yet (<code>assay failures mine</code>)</span>"))
    if facts.ponr is None:
        lines.append(html("<span class='muted'>no point of no return yet (<code>assay failures ponr {}</code>)</span>",
                          item.record.key[:12]))
    return html("<p>{}</p>", join(lines, "<br>"))


def _media(item: GalleryItem, store: Store, embed_video: bool, out_dir: Path) -> list[Markup]:
    ponr_t = item.facts.ponr.point if item.facts is not None and item.facts.ponr is not None else None
    media = []
    if item.record.data_path is not None:
        try:
            trace = figures.trace_svg(step_arrays(store.steps(item.record)), ponr_t)
        except StoreError:
            trace = None
        if trace:
            media.append(figure(trace, "figure trace"))
    for camera, relpath in item.videos:
        try:
            frames = figures.keyframes(store.data_root, relpath, around=ponr_t)
        except StoreError:
            continue
        local = local_path(store.data_root)  # a video in an object store cannot be linked to: it is embedded
        src = figures.mp4_data_uri(store.files.read(relpath)) if embed_video or local is None else \
            os.path.relpath(local / relpath, out_dir)
        # the last keyframe as poster: a paused video shows where the episode ended, not a black box
        media.append(render("media.html", camera=camera, frames=frames, ponr=ponr_t, poster=frames[-1][1], src=src))
    if not item.videos and item.record.data_path is None and item.record.steps > 0:
        media.append(Markup("<p class='muted'>Step file and videos pruned (<code>assay store prune</code>).</p>"))
    elif not item.videos:
        media.append(Markup("<p class='muted'>No camera video recorded (campaign without cameras).</p>"))
    return media


def _timeline_link(item: GalleryItem) -> Markup:
    return html("<p><a class='timeline-link' href='#{}'>per-layer timeline</a></p>", timeline_anchor(item.record.key))


def timelines(data: ReportData, store: Store) -> Markup:
    """Each gallery failure's per-layer timeline (the gallery's cards link to them)."""
    return timelines_section(store, [(item.record, item.facts.ponr.point if item.facts is not None and
                                      item.facts.ponr is not None else None) for item in data.gallery])


def gallery(data: ReportData, store: Store, embed_video: bool, out_dir: Path) -> Markup:
    """The failure gallery: a card per episode with its facts, trace, keyframes and video."""
    if not data.gallery:
        return Markup("<p class='muted'>No failed episodes.</p>")
    cards = [render("card.html", record=item.record, facts=_facts(item),
                    media=join([*_media(item, store, embed_video, out_dir), _timeline_link(item)]))
             for item in data.gallery]
    total = data.unsuccessful
    more = html("<p class='muted'>Showing {} of {} unsuccessful episodes: those with a point of no return first, then "
                "one per (policy, category) in turn. The red line marks the point of no return: the last step from "
                "which the expert, taking over, still succeeds.</p>", len(data.gallery), total)
    return join([more, html("<div class='gallery'>{}</div>", join(cards))])


def integrity(data: ReportData) -> Markup:
    """Leakage (evaluation scenes in a checkpoint's training data) and the safety filter's interventions."""
    parts = []
    if data.leakage:
        rows = [[str(leak["checkpoint"]), str(leak["episodes"]),
                 "–" if leak.get("error") else str(leak["contaminated"]),
                 html("<span class='warn'>not checked: {}</span>", str(leak["error"])) if leak.get("error")
                 else Markup("<span class='warn'>contaminated</span>") if leak["contaminated"] else "clean"]
                for leak in data.leakage]
        parts += [Markup("<h3>Leakage</h3><p class='muted'>An episode is contaminated when its scene (task id and "
                         "version, variant, seed; not the horizon) is in the checkpoint's training data.</p>"),
                  table(["checkpoint", "episodes", "contaminated", "verdict"], rows, {1, 2})]
    else:
        parts.append(Markup("<p class='muted'>No bc checkpoint in this campaign: nothing to check for leakage "
                            "(<code>assay leakage CKPT --campaign NAME</code> checks any checkpoint).</p>"))
    if data.safety:
        rows = [[r["policy"], r["task"], r["variant"]] + [str(r[k]) for k in ("episodes", "steps", "nan", "limit",
                                                                             "workspace")] for r in data.safety]
        parts += [Markup("<h3>Safety filter interventions</h3><p class='muted'>Steps where the filter replaced a "
                         "non-finite action (nan), clipped one to the action box (limit) or stopped a move out of "
                         "the workspace (workspace).</p>"),
                  table(["policy", "task", "variant", "episodes", "steps", "nan", "limit", "workspace"], rows,
                        {3, 4, 5, 6, 7})]
    return join(parts)
