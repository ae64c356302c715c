"""The flywheel section: what ``assay flywheel --design`` stored in ``STORE/learning/flywheel/NAME.json``.

The report reads the document (it never trains or runs anything); a campaign's report shows the
flywheel experiments whose pool, probe or evaluation campaigns include it. ``summary_lines`` is the
plain-text account the CLI prints after its table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from assay.report.markup import table
from assay.store import Store

RESULT_DIR = "learning/flywheel"


def load_flywheel(store: Store, campaign: str) -> list[dict[str, Any]]:
    """Every stored flywheel result that ran ``campaign`` (empty when none did)."""
    folder = store.root / RESULT_DIR
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        names = {n for rep in document.get("replicates", []) for n in rep.get("campaigns", {}).values()}
        if campaign in names:
            found.append(document)
    return found


def _ci(values: list[float] | None) -> str:
    return "–" if not values else f"[{values[0]:+.3f}, {values[1]:+.3f}]"


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The primary endpoint, the gain ratio, what mining chose and the leakage check, one sentence each."""
    analysis, design = document["analysis"], document["design"]
    primary, gain, power = analysis["primary"], analysis["gain_ratio"], document["power"]
    ratio = "undefined (random gained nothing)" if gain["ratio"] is None else f"{gain['ratio']:.2f}"
    ttest = "–" if primary["replicate_ttest_p"] is None else f"{primary['replicate_ttest_p']:.3g}"
    lines = [
        f"primary endpoint (targeted − random, {primary['pairs']} pairs over {primary['replicates']} replicates): "
        f"{primary['difference']:+.3f}, replicate-bootstrap 95% CI {_ci(primary['bootstrap_ci'])}; McNemar exact "
        f"p = {primary['mcnemar_p']:.3g} ({primary['arm_only']} targeted-only vs {primary['against_only']} "
        "random-only); "
        f"t test over the replicate differences p = {ttest}",
        f"gain ratio (targeted − base) / (random − base) = {ratio}, bootstrap 95% CI "
        + ("–" if not gain["bootstrap_ci"] else f"[{gain['bootstrap_ci'][0]:.2f}, {gain['bootstrap_ci'][1]:.2f}]")
        + (f" ({gain['undefined_resamples']} resamples without a random gain left out)"
           if gain["undefined_resamples"] else ""),
        f"power plan: {power['episodes_per_cell']} pairs detect {design['delta']} at power {power['power']} "
        f"(baseline {power['baseline']}, {power['formula']}); the design has {power['planned_pairs']}",
        f"mining located the uncovered region with precision {_fraction(document['mining']['precision'])} and recall "
        f"{_fraction(document['mining']['recall'])} (mean over replicates, on the evaluation scenes)",
        f"leakage: {document['leakage']['contaminated']} evaluation episodes in any arm's data; "
        f"{document['leakage']['scene_overlap']} evaluation scenes shared with a pool or probe scene",
    ]
    for name, group in _variants(document).items():
        rates, versus = group["rates"], group["against_random"]
        counts = ", ".join(f"{arm} {r['successes']}/{r['trials']}" for arm, r in rates.items())
        targeted = versus.get("targeted")
        versus_random = "" if targeted is None or targeted["difference"] is None else (
            f"; targeted − random {targeted['difference']:+.3f} (McNemar exact p = {targeted['mcnemar_p']:.3g})")
        lines.append(f"variant {name}: {counts}{versus_random}")
    for rep in document["replicates"]:
        mining = rep["mining"]
        chosen = mining.get("target") or (mining["region"]["label"] if mining["region"] else "nothing")
        lines.append(f"replicate {rep['replicate']}: mining chose {chosen} ({mining['why']}); budget "
                     f"{rep['budget']['episodes']} episodes, {rep['budget']['frames']} frames per extra arm"
                     + _composition_text(rep.get("composition")))
        if rep.get("shortfall"):  # an arm found fewer extra demos than asked: every arm was cut to that
            lines.append(f"replicate {rep['replicate']}: {rep['shortfall']}")
    return lines


def _composition_text(composition: dict[str, Any] | None) -> str:
    """How many of each arm's extra demos lie outside the slice (a document written before this: nothing)."""
    if not composition:
        return ""
    parts = [f"{arm} {c['outside_slice']}/{sum(c['variants'].values()) - c['unresolved']}"
             for arm, c in composition.items() if sum(c["variants"].values()) > c["unresolved"]]
    return "; extra demos outside the slice: " + ", ".join(parts) if parts else ""


def _variants(document: dict[str, Any]) -> dict[str, Any]:
    """The per-variant secondary endpoints of a design over several variants (none for one variant, or for a
    document written before variants)."""
    groups = document.get("by_variant") or {}
    return groups if len(groups) > 1 else {}


def _slice_text(slice_: dict[str, Any]) -> str:
    parts = []
    if slice_.get("component") is not None:
        parts.append(f"init[{slice_['component']}] {'<' if slice_['below'] else '>='} {slice_['threshold']}")
    if slice_.get("variants") is not None:
        names = ", ".join(json.dumps(v, sort_keys=True) if v else "nominal" for v in slice_["variants"])
        parts.append(f"variant(s) {names}")
    return " in ".join(parts) or "everything"


def _fraction(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _rate(rate: dict[str, Any]) -> str:
    if not rate["trials"]:
        return "–"
    return f"{rate['successes']}/{rate['trials']} = {rate['rate']:.2f} [{rate['low']:.2f}, {rate['high']:.2f}]"


def section(documents: Sequence[dict[str, Any]]) -> str:
    """The HTML of every flywheel experiment that ran this campaign."""
    parts = []
    for document in documents:
        design, analysis = document["design"], document["analysis"]
        rows = []
        for arm, rate in analysis["rates"].items():
            versus = analysis["against_random"].get(arm)
            rows.append([escape(arm), _rate(rate), _rate(document["by_region"]["slice"][arm]),
                         _rate(document["by_region"]["uncovered"][arm]),
                         "" if versus is None else f"{versus['difference']:+.3f} (p = {versus['mcnemar_p']:.3g})"])
        variants = _variants(document)
        arms = list(analysis["rates"])
        per_variant = [[escape(name)] + [_rate(group["rates"][arm]) for arm in arms]
                       + ["" if group["against_random"].get("targeted") is None
                          or group["against_random"]["targeted"]["difference"] is None else
                          f"{group['against_random']['targeted']['difference']:+.3f} "
                          f"(p = {group['against_random']['targeted']['mcnemar_p']:.3g})"]
                       for name, group in variants.items()]
        parts.append(
            f"<h3>{escape(design['name'])} on {escape(design['task'])}</h3>"
            f"<p class='muted'>Base trained on {escape(_slice_text(design['slice']))} only; every arm adds the same "
            f"episodes and frames; pooled over "
            f"{design['replicates']} replicates with their own demo, probe and evaluation seeds (mid-p 95%).</p>"
            + table(["arm", "all", "slice", "uncovered", "vs random (McNemar exact)"], rows, {1, 2, 3, 4})
            + ("" if not variants else
               "<p class='muted'>Per variant (secondary endpoints):</p>"
               + table(["variant", *arms, "targeted − random"], per_variant, set(range(1, len(arms) + 2))))
            + "<ul>" + "".join(f"<li>{escape(line)}</li>" for line in summary_lines(document)) + "</ul>")
    return "".join(parts)
