"""One self-contained HTML file from ``ReportData``: inline CSS, inline SVG, base64 media, no network.

The page is ``templates/report.html`` and its sections are built from templates and escaped
fragments (``report.markup``: Jinja2 with autoescape), so every value from the store is escaped
without a caller having to. Videos of gallery episodes are embedded (``embed_video=True``, the
default: the file stays valid when moved) or linked relative to the store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from markupsafe import Markup

from assay.metrics.adaptive import YARDSTICKS
from assay.metrics.adaptive_power import equal_power_view
from assay.metrics.coverage_certificate import coverage_note
from assay.report import figures
from assay.report import sections as parts
from assay.report.data import ReportData
from assay.report.flywheel import section as flywheel_section
from assay.report.markup import figure, html, join, number, pct, render, table
from assay.report.reliability import section as reliability_section
from assay.spec.libero_catalog import PLUS_LABEL
from assay.store import Store


def _leaderboard(data: ReportData) -> Markup:
    board = data.leaderboard
    if data.scoring is not None and data.scoring.withheld:
        return html("<p class='warn' id='leaderboard-withheld'>{}</p>", data.scoring.withheld)
    if board is None:
        return Markup("<p class='muted'>No scored episodes yet.</p>")
    rows = [[r.policy, r.rank_text, pct(r.score), f"[{pct(r.ci_low)}, {pct(r.ci_high)}]", str(r.scored),
             str(r.errors)] for r in board.rows]
    signoffs = [[s.task, ", ".join(s.variants), html("<span class='{}'>{}</span>", "ok" if s.validated else "warn",
                                                     s.label), s.reason] for s in data.signoffs]
    scope = data.scoring.scope.label if data.scoring is not None else "all variants"
    return join([
        html("<p class='muted'>Scope: {}; {} bootstrap resamples (ranks), seed {}; the score's interval from mid-p "
             "confidence draws of each task's rate.</p>", scope, board.n_resamples, board.seed),
        table(["policy", "rank [interval]", "score", f"{board.confidence:.0%} interval", "scored", "errors"],
              rows, {2, 3, 4, 5}),
        figure(figures.leaderboard_svg(board)),
        Markup("<h3>Sign-off</h3><p class='muted'>Validated only by a calibration of the same task, variant set "
               "and policies.</p>"),
        table(["task", "variants", "status", "why"], signoffs),
    ])


def _rates(data: ReportData) -> Markup:
    covered = data.scoring.completeness if data.scoring is not None else None

    def recorded(group: dict[str, str]) -> str | Markup:
        if covered is None:
            return "-"
        part = covered.of(group)
        text = f"{part.recorded}/{part.planned}"
        return text if part.complete else html("<span class='warn'>{}</span>", text)

    rows = [[r.group["policy"], r.group["task"], pct(r.rate), f"[{pct(r.ci_low)}, {pct(r.ci_high)}]",
             f"{r.successes}/{r.scored}", str(r.timeouts), str(r.failures), str(r.errors), recorded(r.group)]
            for r in data.rates]
    missing = Markup("") if covered is None or not covered.missing else html(
        "<p class='warn'>No episode yet: {}</p>", ", ".join(c.label for c in covered.missing))
    note = coverage_note("midp", [r.scored for r in data.rates])
    dips = Markup("") if note is None else html("<p class='warn' id='coverage-note'>{}.</p>", note)
    stamp = data.scoring.stamp if data.scoring is not None else None
    stamped = Markup("") if stamp is None else html("<p class='{}' id='stamp'>{}</p>",
                                                    "ok" if stamp.reportable else "warn", stamp.label)
    return join([stamped, table(["policy", "task", "success", "mid-p 95%", "succ/n", "timeout", "fail", "error",
                                 "recorded"], rows, {2, 3, 4, 5, 6, 7, 8}), dips, missing])


def _robustness(data: ReportData) -> Markup:
    if not data.robustness:
        return Markup("<p class='muted'>This campaign ran the nominal variant only; no robustness profile.</p>")
    rows = [[r.policy, r.axis, r.factor, r.value, str(r.pairs), pct(r.nominal_rate), pct(r.variant_rate),
             number(r.retention), f"[{number(r.ci_low)}, {number(r.ci_high)}]" if r.ci_low is not None else "–"]
            for r in sorted(data.robustness, key=lambda r: (r.policy, r.axis, r.factor, r.value))]
    sweep = figures.sweep_svg(data.robustness)
    axes = [[a.policy, a.axis, str(a.variants), str(a.pairs), number(a.retention), a.worst_variant or "–",
             number(a.worst_retention)] for a in data.axes]
    return join([
        Markup("<h3>By axis</h3><p class='muted'>Retention pooled over every variant on the axis "
               "(successes under the variants / successes on the paired nominal episodes).</p>"),
        table(["policy", "axis", "variants", "pairs", "retention", "worst variant", "its retention"], axes,
              {2, 3, 4, 6}),
        _categories(data),
        Markup("<h3>By factor</h3>"),
        table(["policy", "axis", "factor", "value", "pairs", "nominal", "variant", "retention", "95% CI"], rows,
              {4, 5, 6, 7, 8}),
        _semantic_notes(data),
        figure(figures.robustness_svg(data.robustness)),
        join([Markup("<h3>Sweep curves</h3>"), figure(sweep)]) if sweep else Markup(""),
    ])


def _categories(data: ReportData) -> Markup:
    """The per-category profile over the LIBERO-Plus-style axes, where the campaign ran their factors."""
    if not data.categories:
        return Markup("")
    rows = [[c.policy, c.category, str(c.variants), str(c.pairs), number(c.retention),
             f"[{number(c.ci_low)}, {number(c.ci_high)}]" if c.ci_low is not None else "–",
             c.worst_variant or "–", number(c.worst_retention)] for c in data.categories]
    return join([Markup(f"<h3>By category: {PLUS_LABEL}</h3><p class='muted'>Retention pooled over every level of "
                        "every variant of the category, with the MOVER-R interval of the pooled paired counts. These "
                        "are Assay's procedural axes after LIBERO-Plus's seven categories, not LIBERO-Plus's "
                        "released variant set.</p>"),
                 table(["policy", "category", "variants", "pairs", "retention", "95% CI", "worst variant",
                        "its retention"], rows, {2, 3, 4, 5, 7})])


def _semantic_notes(data: ReportData) -> Markup:
    """What the semantic rows mean: a policy blind to the words retains exactly 1.0; conflict rows are marked."""
    semantic = [r for r in data.robustness if r.axis.startswith("semantic")]
    notes = []
    for policy in sorted({r.policy for r in semantic}):
        mine = [r for r in semantic if r.policy == policy]
        if all(r.retention == 1.0 and r.discordant == 0 for r in mine):
            notes.append(html("<b>{}</b>: semantic retention exactly 1.0 on all {} variants, no pair changed "
                              "outcome: its behaviour does not depend on the instruction's words (a policy that "
                              "ignores language, such as the scripted expert, must show exactly this).",
                              policy, len(mine)))
    if any(r.axis == "semantic:conflict" for r in semantic):
        notes.append(Markup("Axis <b>semantic:conflict</b>: the words name another task of the suite; the episode is "
                            "marked and scored by the scene's own task, so a low retention there means the policy "
                            "followed the words."))
    return join(html("<p class='muted'>{}</p>", n) for n in notes)


def _failures(data: ReportData) -> Markup:
    outcome_rows = [[p, *(str(c[o]) for o in ("success", "failure", "timeout", "error"))]
                    for p, c in sorted(data.outcomes_by_policy.items())]
    out = [table(["policy", "success", "failure", "timeout", "error"], outcome_rows, {1, 2, 3, 4})]
    if data.outcomes_by_policy:
        out.append(figure(figures.outcomes_svg(data.outcomes_by_policy)))
    if data.failure_categories:
        cat_rows = [[p, c, str(n)] for p, cats in sorted(data.failure_categories.items())
                    for c, n in sorted(cats.items())]
        out += [Markup("<h3>By category</h3>"), table(["policy", "category", "episodes"], cat_rows, {2})]
    else:
        out.append(html("<p class='muted'>Failures not categorized yet: <code>assay failures mine --campaign "
                        "{}</code>.</p>", data.campaign))
    out.append(parts.attribution_table(data))
    reasons = data.error_reasons
    if reasons:
        out += [Markup("<h3>Errors (infrastructure or policy contract)</h3>"),
                table(["reason", "episodes"], [[k, str(v)] for k, v in sorted(reasons.items())], {1})]
    return join(out)


def _provenance(data: ReportData) -> Markup:
    p = data.provenance
    rows = [["code revision", ", ".join(f"{k} ({v} episodes)" for k, v in p["code_revisions"].items())],
            ["python", ", ".join(p["python"])],
            ["hosts", ", ".join(p["hosts"])],
            ["episode seeds", ", ".join(map(str, p["seeds"][:40])) + (" …" if len(p["seeds"]) > 40 else "")]]
    rows += [[name, ", ".join(versions)] for name, versions in p["packages"].items()]
    spec_yaml = yaml.safe_dump(data.spec.get("campaign", {}), sort_keys=False)
    return join([table(["what", "value"], rows),
                 html("<h3>Campaign ({}.yaml)</h3><pre>{}</pre>", data.campaign, spec_yaml),
                 html("<h3>Reproduce</h3><p>Save the YAML above as the file named below, then:</p><pre>{}</pre>",
                      "\n".join(data.reproduce))])


def _adaptive(data: ReportData) -> Markup:
    state = data.adaptive
    if state is None:
        return Markup("<p class='muted'>A fixed-n campaign: every cell ran all its episodes.</p>")
    d = state["design"]
    rows = [[q["task"], " vs ".join(q["policies"]) if q["kind"] == "compare" else q["policies"][0],
             str(q["episodes"]), q["reason"] or "running", number(q["estimate"], 3),
             f"[{number(q['low'], 3)}, {number(q['high'], 3)}]",
             "-" if q["p_value"] is None else f"{q['p_value']:.3g}"] for q in state["questions"]]
    # a progress campaign is judged by the betting confidence sequence, whatever the binary method says
    test = ("progress score, betting confidence sequence" if d.get("endpoint") == "progress"
            else f"{d['method']} test")
    return join([html("<p>Goal <b>{}</b>, {}, α {}, power {}, δ {}, batch {}, horizon {}. Anytime-valid p-values and "
                      "confidence sequences: the fixed-n p-values elsewhere in this report are not valid after "
                      "optional stopping.</p>", d["goal"], test, d["alpha"], d["power"], d["delta"], d["batch"],
                      d["max_episodes"]),
                 table(["task", "question", "episodes/cell", "stopped because", "estimate", "interval", "seq. p"],
                       rows, {2, 4, 6}),
                 _adaptive_saved(state)])


def _adaptive_saved(state: dict[str, Any]) -> Markup:
    """Episodes used against the exact fixed-n McNemar design of the power the cap reaches and of the power asked
    for (one yardstick), and the expected pairs per comparison at δ and at no difference."""
    d = state["design"]
    view = equal_power_view(state)
    if view is None:
        return html("<p>Episodes used {} against {} for the fixed-n design of the same error rates ({}): {} saved.</p>",
                    state["episodes_used"], state["episodes_fixed"], YARDSTICKS.get(d["goal"], ""), pct(state["saved"]))
    reached = ", ".join(f"{p['reached']:.3f} ({'simulated' if p['reached_se'] else 'exact'}) at α {p['level']:.3g}"
                        for p in view["powers"])
    warning = html("<p class='warn'>Warning: {}.</p>", view["warning"]) if view["warning"] else Markup("")
    pairs = [html("<p>Expected pairs per comparison at α {}: {} at δ {}, {} at no difference{}; fixed-n {} at the "
                  "power reached, {} at the power requested.</p>", f"{p['level']:.3g}",
                  f"{p['mean_pairs_at_delta']:.1f}", p["delta"], f"{p['mean_pairs_at_null']:.1f}",
                  "" if p["endpoint"] == "progress" else " (upper bounds: the futility stop is left out)",
                  p["fixed_n_equal_power"], p["fixed_n_requested"]) for p in view["powers"]]
    return join([html("<p>Episodes used {} against <b>{}</b> for the exact fixed-n McNemar design of the power this "
                      "cap of {} pairs reaches at δ {} ({}): <b>{}</b>. Against the exact "
                      "fixed-n McNemar design of the requested power {} ({}, {} episodes): {}{}.</p>",
                      state["episodes_used"], view["fixed_equal_power"], d["max_episodes"], d["delta"], reached,
                      f"{pct(view['saved_equal_power'])} saved at equal power and α" if view["comparable"]
                      else "not comparable: the cap's power is ≤ α", d["power"], YARDSTICKS.get(d["goal"], ""),
                      view["fixed_requested"], pct(view["saved_requested"]),
                      "" if view["reachable"] else ", a power this design does not reach"),
                 *pairs, warning])


def render_html(data: ReportData, store: Store, embed_video: bool = True, out_dir: Path | None = None) -> str:
    """The report page (``templates/report.html``) with every section."""
    done, total = data.progress
    scope = f" ({data.scoring.scope.label})" if data.scoring is not None else ""
    sections: list[tuple[str, str, Markup]] = [
        ("leaderboard", f"Leaderboard{scope}", _leaderboard(data)),
        ("rates", f"Success by policy × task{scope}", _rates(data)),
        ("reliability", f"Reliability: pass^{data.pass_k.k if data.pass_k else 'k'}{scope}",
         reliability_section(data.pass_k, data.scoring.scope.label if data.scoring else "")),
        *([("adaptive", "Adaptive stopping", _adaptive(data))] if data.adaptive is not None else []),
        ("checkpoints", f"Checkpoint comparison{scope}", parts.checkpoints(data)),
        ("robustness", "Robustness profile (each variant vs nominal)", _robustness(data)),
        ("real-to-sim", f"Real-to-sim agreement{scope}", parts.real_to_sim(data)),
        ("openloop", "Open loop vs closed loop", parts.openloop(data)),
        *([("flywheel", "Flywheel: targeted vs random data", flywheel_section(data.flywheel))]
          if data.flywheel else []),
        ("failures", "Failure breakdown (every variant)", _failures(data)),
        ("gallery", "Failure gallery (every variant)", parts.gallery(data, store, embed_video, out_dir or Path.cwd())),
        ("timelines", "Trace timelines (the gallery's failures)", parts.timelines(data, store)),
        ("collect-next", "What to collect next", parts.collect_next(data)),
        ("regression", "Regression sets", parts.regression(data)),
        ("integrity", "Leakage and safety", parts.integrity(data)),
        ("provenance", "Provenance and reproduction", _provenance(data)),
    ]
    notes = [html("<p class='warn'>{}</p>", n) for n in data.notes]
    meta: dict[str, Any] = {"campaign": data.campaign, "episodes": done, "jobs": total,
                            **(data.scoring.to_dict() if data.scoring is not None else {})}
    progress = f"{done} of {total} episodes recorded"
    if data.scoring is not None:
        whole = data.scoring.campaign
        progress = whole.describe()
        if not whole.complete:
            notes.insert(0, html("<p class='warn' id='incomplete'>This campaign is {}.</p>", whole.describe()))
    return str(render("report.html", campaign=data.campaign, meta_json=json.dumps(meta), progress=progress,
                      store_root=data.store_root, sections=sections, notes=notes))
