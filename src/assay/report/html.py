"""One self-contained HTML file from ``ReportData``: inline CSS, inline SVG, base64 media, no network.

Every value from the store is escaped. Videos of gallery episodes are embedded
(``embed_video=True``, the default: the file stays valid when moved) or linked
relative to the store.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

import yaml

from assay.metrics.adaptive import YARDSTICKS
from assay.metrics.adaptive_power import equal_power_view
from assay.report import figures
from assay.report import sections as parts
from assay.report.data import ReportData
from assay.report.flywheel import section as flywheel_section
from assay.report.markup import number, pct, table
from assay.report.reliability import section as reliability_section
from assay.store import Store

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#0d47a1;color:#fff;padding:18px 32px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;opacity:.85}
main{max-width:1100px;margin:0 auto;padding:8px 32px 48px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:8px;padding:16px 20px;margin:18px 0}
h2{font-size:18px;margin:0 0 10px}table{border-collapse:collapse;width:100%;margin:8px 0}
th,td{border-bottom:1px solid #eee;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#2e7d32;font-weight:600}.warn{color:#c62828;font-weight:600}
.figure svg{max-width:100%;height:auto}
.gallery{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:14px}
.card{border:1px solid #e0e0e0;border-radius:6px;padding:10px}.card h3{font-size:14px;margin:0 0 6px}
.frames{display:flex;gap:4px;flex-wrap:wrap}.frames figure{margin:0;text-align:center;font-size:11px;color:#666}
.frames img{width:72px;height:72px;image-rendering:pixelated;border:1px solid #ddd}.frames img.ponr{border:2px solid #c62828}
.trace svg{max-width:100%;height:auto}code{background:#eceff1;padding:0 3px;border-radius:3px}
video{width:192px;image-rendering:pixelated;background:#000}
pre{background:#263238;color:#eceff1;padding:10px;border-radius:6px;overflow:auto;font-size:12.5px}
.muted{color:#666}
"""


def _leaderboard(data: ReportData) -> str:
    board = data.leaderboard
    if data.scoring is not None and data.scoring.withheld:
        return f"<p class='warn' id='leaderboard-withheld'>{escape(data.scoring.withheld)}</p>"
    if board is None:
        return "<p class='muted'>No scored episodes yet.</p>"
    rows = [[escape(r.policy), escape(r.rank_text), pct(r.score), f"[{pct(r.ci_low)}, {pct(r.ci_high)}]",
             str(r.scored), str(r.errors)] for r in board.rows]
    signoffs = [[escape(s.task), escape(", ".join(s.variants)),
                 f"<span class='{'ok' if s.validated else 'warn'}'>{escape(s.label)}</span>",
                 escape(s.reason)] for s in data.signoffs]
    scope = data.scoring.scope.label if data.scoring is not None else "all variants"
    return (
        f"<p class='muted'>Scope: {escape(scope)}; {board.n_resamples} bootstrap resamples (ranks), seed "
        f"{board.seed}; the score's interval from mid-p confidence draws of each task's rate.</p>"
        + table(["policy", "rank [interval]", "score", f"{board.confidence:.0%} interval", "scored", "errors"],
                 rows, {2, 3, 4, 5})
        + f"<div class='figure'>{figures.leaderboard_svg(board)}</div>"
        + "<h3>Sign-off</h3><p class='muted'>Validated only by a calibration of the same task, variant set "
          "and policies.</p>" + table(["task", "variants", "status", "why"], signoffs)
    )


def _rates(data: ReportData) -> str:
    covered = data.scoring.completeness if data.scoring is not None else None

    def recorded(group: dict[str, str]) -> str:
        if covered is None:
            return "-"
        part = covered.of(group)
        text = f"{part.recorded}/{part.planned}"
        return text if part.complete else f"<span class='warn'>{text}</span>"

    rows = [[escape(r.group["policy"]), escape(r.group["task"]), pct(r.rate), f"[{pct(r.ci_low)}, {pct(r.ci_high)}]",
             f"{r.successes}/{r.scored}", str(r.timeouts), str(r.failures), str(r.errors), recorded(r.group)]
            for r in data.rates]
    missing = "" if covered is None or not covered.missing else (
        "<p class='warn'>No episode yet: " + escape(", ".join(c.label for c in covered.missing)) + "</p>")
    return table(["policy", "task", "success", "mid-p 95%", "succ/n", "timeout", "fail", "error", "recorded"], rows,
                 {2, 3, 4, 5, 6, 7, 8}) + missing


def _robustness(data: ReportData) -> str:
    if not data.robustness:
        return "<p class='muted'>This campaign ran the nominal variant only; no robustness profile.</p>"
    rows = [[escape(r.policy), escape(r.axis), escape(r.factor), escape(r.value), str(r.pairs), pct(r.nominal_rate),
             pct(r.variant_rate), number(r.retention),
             f"[{number(r.ci_low)}, {number(r.ci_high)}]" if r.ci_low is not None else "–"]
            for r in sorted(data.robustness, key=lambda r: (r.policy, r.axis, r.factor, r.value))]
    sweep = figures.sweep_svg(data.robustness)
    axes = [[escape(a.policy), escape(a.axis), str(a.variants), str(a.pairs), number(a.retention),
             escape(a.worst_variant or "–"), number(a.worst_retention)] for a in data.axes]
    return ("<h3>By axis</h3><p class='muted'>Retention pooled over every variant on the axis "
            "(successes under the variants / successes on the paired nominal episodes).</p>"
            + table(["policy", "axis", "variants", "pairs", "retention", "worst variant", "its retention"], axes,
                    {2, 3, 4, 6})
            + _categories(data)
            + "<h3>By factor</h3>"
            + table(["policy", "axis", "factor", "value", "pairs", "nominal", "variant", "retention", "95% CI"], rows,
                   {4, 5, 6, 7, 8})
            + _semantic_notes(data)
            + f"<div class='figure'>{figures.robustness_svg(data.robustness)}</div>"
            + (f"<h3>Sweep curves</h3><div class='figure'>{sweep}</div>" if sweep else ""))


def _categories(data: ReportData) -> str:
    """LIBERO-Plus's per-category profile, where the campaign ran its factors."""
    if not data.categories:
        return ""
    rows = [[escape(c.policy), escape(c.category), str(c.variants), str(c.pairs), number(c.retention),
             f"[{number(c.ci_low)}, {number(c.ci_high)}]" if c.ci_low is not None else "–",
             escape(c.worst_variant or "–"), number(c.worst_retention)] for c in data.categories]
    return ("<h3>By LIBERO-Plus category</h3><p class='muted'>Retention pooled over every level of every variant of "
            "the category, with the MOVER-R interval of the pooled paired counts.</p>"
            + table(["policy", "category", "variants", "pairs", "retention", "95% CI", "worst variant",
                     "its retention"], rows, {2, 3, 4, 5, 7}))


def _semantic_notes(data: ReportData) -> str:
    """What the semantic rows mean: a policy blind to the words retains exactly 1.0; conflict rows are marked."""
    semantic = [r for r in data.robustness if r.axis.startswith("semantic")]
    notes = []
    for policy in sorted({r.policy for r in semantic}):
        mine = [r for r in semantic if r.policy == policy]
        if all(r.retention == 1.0 and r.discordant == 0 for r in mine):
            notes.append(f"<b>{escape(policy)}</b>: semantic retention exactly 1.0 on all {len(mine)} variants, no "
                         "pair changed outcome: its behaviour does not depend on the instruction's words (a policy "
                         "that ignores language, such as the scripted expert, must show exactly this).")
    if any(r.axis == "semantic:conflict" for r in semantic):
        notes.append("Axis <b>semantic:conflict</b>: the words name another task of the suite; the episode is marked "
                     "and scored by the scene's own task, so a low retention there means the policy followed the words.")
    return "".join(f"<p class='muted'>{n}</p>" for n in notes)


def _failures(data: ReportData) -> str:
    outcome_rows = [[escape(p), *(str(c[o]) for o in ("success", "failure", "timeout", "error"))]
                    for p, c in sorted(data.outcomes_by_policy.items())]
    out = table(["policy", "success", "failure", "timeout", "error"], outcome_rows, {1, 2, 3, 4})
    if data.outcomes_by_policy:
        out += f"<div class='figure'>{figures.outcomes_svg(data.outcomes_by_policy)}</div>"
    if data.failure_categories:
        cat_rows = [[escape(p), escape(c), str(n)] for p, cats in sorted(data.failure_categories.items())
                    for c, n in sorted(cats.items())]
        out += "<h3>By category</h3>" + table(["policy", "category", "episodes"], cat_rows, {2})
    else:
        out += (f"<p class='muted'>Failures not categorized yet: <code>assay failures mine --campaign "
                f"{escape(data.campaign)}</code>.</p>")
    out += parts.attribution_table(data)
    reasons = data.error_reasons
    if reasons:
        out += "<h3>Errors (infrastructure or policy contract)</h3>" + table(
            ["reason", "episodes"], [[escape(k), str(v)] for k, v in sorted(reasons.items())], {1})
    return out


def _provenance(data: ReportData) -> str:
    p = data.provenance
    rows = [["code revision", escape(", ".join(f"{k} ({v} episodes)" for k, v in p["code_revisions"].items()))],
            ["python", escape(", ".join(p["python"]))],
            ["hosts", escape(", ".join(p["hosts"]))],
            ["episode seeds", escape(", ".join(map(str, p["seeds"][:40])) + (" …" if len(p["seeds"]) > 40 else ""))]]
    rows += [[escape(name), escape(", ".join(versions))] for name, versions in p["packages"].items()]
    spec_yaml = yaml.safe_dump(data.spec.get("campaign", {}), sort_keys=False)
    return (table(["what", "value"], rows)
            + f"<h3>Campaign ({escape(data.campaign)}.yaml)</h3><pre>{escape(spec_yaml)}</pre>"
            + "<h3>Reproduce</h3><p>Save the YAML above as the file named below, then:</p>"
            + f"<pre>{escape(chr(10).join(data.reproduce))}</pre>")


def _adaptive(data: ReportData) -> str:
    state = data.adaptive
    if state is None:
        return "<p class='muted'>A fixed-n campaign: every cell ran all its episodes.</p>"
    d = state["design"]
    rows = [[escape(q["task"]), escape(" vs ".join(q["policies"]) if q["kind"] == "compare" else q["policies"][0]),
             str(q["episodes"]), escape(q["reason"] or "running"), number(q["estimate"], 3),
             f"[{number(q['low'], 3)}, {number(q['high'], 3)}]",
             "-" if q["p_value"] is None else f"{q['p_value']:.3g}"] for q in state["questions"]]
    # a progress campaign is judged by the betting confidence sequence, whatever the binary method says
    test = ("progress score, betting confidence sequence" if d.get("endpoint") == "progress"
            else f"{d['method']} test")
    return (f"<p>Goal <b>{escape(d['goal'])}</b>, {escape(test)}, α {d['alpha']}, power {d['power']}, "
            f"δ {d['delta']}, batch {d['batch']}, horizon {d['max_episodes']}. Anytime-valid p-values and confidence "
            "sequences: the fixed-n p-values elsewhere in this report are not valid after optional stopping.</p>"
            + table(["task", "question", "episodes/cell", "stopped because", "estimate", "interval", "seq. p"],
                    rows, {2, 4, 6})
            + _adaptive_saved(state))


def _adaptive_saved(state: dict[str, Any]) -> str:
    """Episodes used against the fixed-n design of the power the cap reaches (and of the power asked for)."""
    d = state["design"]
    view = equal_power_view(state)
    if view is None:
        return (f"<p>Episodes used {state['episodes_used']} against {state['episodes_fixed']} for the fixed-n design "
                f"of the same error rates ({escape(YARDSTICKS.get(d['goal'], ''))}): {pct(state['saved'])} saved.</p>")
    reached = ", ".join(f"{p['reached']:.3f} ({'simulated' if p['reached_se'] else 'exact'}) at α {p['level']:.3g}"
                        for p in view["powers"])
    warning = f"<p class='warn'>Warning: {escape(view['warning'])}.</p>" if view["warning"] else ""
    return (f"<p>Episodes used {state['episodes_used']} against <b>{view['fixed_equal_power']}</b> for the exact "
            f"fixed-n McNemar design of the power this cap of {d['max_episodes']} pairs reaches at δ {d['delta']} "
            f"({reached}): <b>{pct(view['saved_equal_power'])} saved at equal power and α</b>. Against the fixed-n "
            f"design of the requested power {d['power']} ({escape(YARDSTICKS.get(d['goal'], ''))}, "
            f"{state['episodes_fixed']} episodes): {pct(state['saved'])}"
            + ("" if view["reachable"] else ", a power this design does not reach") + ".</p>" + warning)


def render_html(data: ReportData, store: Store, embed_video: bool = True, out_dir: Path | None = None) -> str:
    done, total = data.progress
    scope = f" ({data.scoring.scope.label})" if data.scoring is not None else ""
    sections: list[tuple[str, str, str]] = [
        ("leaderboard", f"Leaderboard{scope}", _leaderboard(data)),
        ("rates", f"Success by policy × task{scope}", _rates(data)),
        ("reliability", f"Reliability: pass^{data.pass_k.k if data.pass_k else 'k'}{scope}",
         reliability_section(data.pass_k, data.scoring.scope.label if data.scoring else "")),
        *([("adaptive", "Adaptive stopping", _adaptive(data))] if data.adaptive is not None else []),
        ("checkpoints", f"Checkpoint comparison{scope}", parts.checkpoints(data)),
        ("robustness", "Robustness profile (each variant vs nominal)", _robustness(data)),
        ("real-to-sim", f"Real-to-sim agreement{scope}", parts.real_to_sim(data)),
        ("openloop", "Open loop vs closed loop", parts.openloop(data)),
        *([("flywheel", "Flywheel: targeted vs random data", flywheel_section(data.flywheel))] if data.flywheel else []),
        ("failures", "Failure breakdown (every variant)", _failures(data)),
        ("gallery", "Failure gallery (every variant)", parts.gallery(data, store, embed_video, out_dir or Path.cwd())),
        ("regression", "Regression sets", parts.regression(data)),
        ("integrity", "Leakage and safety", parts.integrity(data)),
        ("provenance", "Provenance and reproduction", _provenance(data)),
    ]
    nav = " · ".join(f"<a href='#{key}' style='color:#fff'>{escape(title)}</a>" for key, title, _ in sections)
    body = "".join(f"<section id='{key}'><h2>{escape(title)}</h2>{html}</section>" for key, title, html in sections)
    notes = "".join(f"<p class='warn'>{escape(n)}</p>" for n in data.notes)
    meta: dict[str, Any] = {"campaign": data.campaign, "episodes": done, "jobs": total,
                            **(data.scoring.to_dict() if data.scoring is not None else {})}
    progress = f"{done} of {total} episodes recorded"
    if data.scoring is not None:
        whole = data.scoring.campaign
        progress = whole.describe()
        if not whole.complete:
            notes = f"<p class='warn' id='incomplete'>This campaign is {escape(whole.describe())}.</p>" + notes
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Assay report: {escape(data.campaign)}</title><style>{CSS}</style>"
        f"<script type='application/json' id='assay-meta'>{escape(json.dumps(meta))}</script></head><body>"
        f"<header><h1>Assay report: {escape(data.campaign)}</h1>"
        f"<p>{escape(progress)} · store {escape(data.store_root)}</p><p>{nav}</p></header>"
        f"<main>{notes}{body}</main></body></html>"
    )
