"""The flywheel section: what ``assay flywheel --design`` stored in ``STORE/learning/flywheel/NAME.json``.

The report reads the document (it never trains or runs anything); a campaign's report shows the
flywheel experiments whose pool, probe or evaluation campaigns include it. ``summary_lines`` is the
plain-text account the CLI prints after its table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

from assay.report.markup import html, join, table
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


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def gain_ratio_text(gain: dict[str, Any]) -> str:
    """``gain ratio ... = 1.16, bootstrap 95% CI [1.04, 1.31]``; an unbounded side prints as ∞ (a document
    written before unbounded sides existed prints its interval with the resamples it left out)."""
    ratio = "undefined (random gained nothing)" if gain["ratio"] is None else f"{gain['ratio']:.2f}"
    ci = gain["bootstrap_ci"]
    if "unbounded_above" not in gain:  # schema 2: undefined resamples were dropped
        interval = "–" if not ci else f"[{ci[0]:.2f}, {ci[1]:.2f}]"
        left_out = f" ({gain['undefined_resamples']} resamples without a random gain left out)"
        return (f"gain ratio (targeted − base) / (random − base) = {ratio}, bootstrap 95% CI {interval}"
                + (left_out if gain["undefined_resamples"] else ""))
    if ci is None:
        interval = "– (no resample has a finite ratio)"
    else:
        low = "(−∞" if gain["unbounded_below"] else f"[{ci[0]:.2f}"
        high = "∞)" if gain["unbounded_above"] else f"{ci[1]:.2f}]"
        interval = f"{low}, {high}"
    count = gain["undefined_resamples"]
    counted = "" if not count else (f" ({count} resamples where random gained nothing count as ±∞: +∞ in "
                                    f"{gain['random_gained_nothing']['targeted_gained']} where targeted gained)")
    return f"gain ratio (targeted − base) / (random − base) = {ratio}, bootstrap 95% CI {interval}{counted}"


def endpoint_lines(analysis: dict[str, Any]) -> list[str]:
    """The declared primary endpoint first, then the other test and the bootstrap, labelled secondary."""
    primary = analysis["primary"]
    declared = primary.get("declared")
    pairs = f"{primary['pairs']} pairs over {primary['replicates']} replicates"
    mcnemar = (f"McNemar exact over the pooled (replicate, scene) pairs: {primary['difference']:+.3f} ({pairs}), "
               f"p = {primary['mcnemar_p']:.3g} ({primary['arm_only']} targeted-only vs {primary['against_only']} "
               "random-only)")
    mean = primary.get("mean_replicate_difference")
    ttest = ("two-sided t test over the replicate differences: "
             + ("" if mean is None else f"mean {mean:+.3f} per scene, ") + f"p = {_p(primary['replicate_ttest_p'])}")
    bootstrap = f"replicate-bootstrap 95% CI of the pooled difference {_ci(primary['bootstrap_ci'])}"
    if declared is None:  # schema 2: no declaration stored; the runs of that schema declared McNemar in RESULTS.md
        return [f"targeted − random (no primary declared in this result): {mcnemar}; {ttest}; {bootstrap}"]
    alpha = declared.get("alpha", 0.05)
    if declared["test"] == "ttest":
        first, second = ttest, mcnemar
    else:
        first, second = mcnemar, ttest
    verdict = "below" if primary["p"] is not None and primary["p"] < alpha else "not below"
    changed = primary.get("changed_after_run")
    if changed:  # the design file's primary was edited after the run recorded its own: the recorded one stands
        now = changed["now"]
        return [f"primary changed after the run: recorded {changed['recorded']['test']} over "
                f"{changed['recorded']['unit']}s at {changed['recorded_at']}, the design file now says {now['test']} "
                f"over {now['unit']}s; the recorded primary, targeted − random: {first}; p {verdict} alpha {alpha:g}",
                f"secondary (the edited primary is one of these): {second}", f"secondary: {bootstrap}"]
    return [f"primary endpoint (declared), targeted − random: {first}; p {verdict} alpha {alpha:g}",
            f"secondary: {second}", f"secondary: {bootstrap}"]


def power_lines(document: dict[str, Any]) -> list[str]:
    """The power plan in the declared primary's unit, the pooled-scene budget beside it, and the gain ratio's
    ceiling and the power at the goal (a document written before schema 4: the pooled-scene plan alone)."""
    power, design = document["power"], document["design"]
    pooled = (f"power plan: {power['episodes_per_cell']} pairs detect {design['delta']} at power {power['power']} "
              f"(baseline {power['baseline']}, {power['formula']}); the design has {power['planned_pairs']}")
    primary = power.get("primary_plan")
    if primary is None:
        lines = [pooled]
        plan = power.get("replicate_plan")
        if plan:
            lines.append(f"replicate-level plan: t test power {plan['power']:.2f} for {plan['effect']} at sd "
                         f"{plan['sd']} over {plan['replicates']} replicates ({plan['replicates_for_0.8']} for 0.8, "
                         "noncentral t)")
        return lines
    if power["unit"] == "replicate":
        head = ("power plan (primary unit: replicates): " + primary["missing"] if primary["power"] is None else
                f"power plan (primary unit: replicates): t test power {primary['power']:.2f} for {primary['effect']} "
                f"at sd {primary['sd']} over {primary['replicates']} replicates ({primary['replicates_for_0.8']} "
                "for 0.8, noncentral t)")
        lines = [head, "secondary " + pooled + " (pooled scenes: not the unit that varies the data)"]
    else:
        lines = [f"power plan (primary unit: scenes): McNemar power {primary['power']:.2f} for {primary['effect']} "
                 f"over {primary['planned_pairs']} pairs ({primary['pairs_for_0.8']} for 0.8)"]
    ratio = power.get("gain_ratio")
    if ratio is not None:
        lines.append(_ratio_line(ratio))
    return lines


def _ratio_line(ratio: dict[str, Any]) -> str:
    if ratio["ceiling"] is None:
        return f"gain ratio goal {ratio['goal']}: {ratio['missing']}"
    reach = (f"gain ratio goal {ratio['goal']}: the largest ratio this design can reach is {ratio['ceiling']:.2f} "
             f"(random {ratio['random']}, base {ratio['base']}, targeted at 1)")
    if not ratio["reachable"]:
        return f"{reach}; the goal is out of reach"
    power = "not planned (power_sd missing)" if ratio["power"] is None else f"{ratio['power']:.2f}"
    return f"{reach}; power at the goal (a difference of {ratio['effect']:.3f}): {power}"


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The declared primary endpoint, the secondary ones, the gain ratio, what mining chose and the leakage
    check, one sentence each."""
    analysis = document["analysis"]
    lines = [
        *endpoint_lines(analysis),
        "secondary: " + gain_ratio_text(analysis["gain_ratio"]),
        *power_lines(document),
    ]
    lines += [
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
        lines.append(f"replicate {rep['replicate']}: mining chose {chosen} ({mining['why']}); "
                     + _budget_text(rep["budget"]) + _composition_text(rep.get("composition")))
        if rep.get("shortfall"):  # an arm found fewer extra demos than asked: its group was cut to that
            lines.append(f"replicate {rep['replicate']}: {rep['shortfall']}")
    return lines


def _budget_text(budget: dict[str, Any]) -> str:
    """The primary pair's budget and the secondary arms' own (a document written before: one budget)."""
    if "secondary" not in budget:
        return f"budget {budget['episodes']} episodes, {budget['frames']} frames per extra arm"
    text = f"budget {budget['episodes']} episodes, {budget['frames']} frames for targeted and random"
    secondary = budget["secondary"]
    if secondary:
        text += f"; secondary arms {secondary['episodes']} episodes, {secondary['frames']} frames"
        if secondary.get("empty"):
            text += f" ({', '.join(secondary['empty'])} found no data and kept none)"
    return text


def _composition_text(composition: dict[str, Any] | None) -> str:
    """How many of each arm's extra demos lie outside the slice and, where recorded, inside the mined target (a
    document written before composition was recorded: nothing)."""
    if not composition:
        return ""
    parts = []
    for arm, c in composition.items():
        resolved = sum(c["variants"].values()) - c["unresolved"]
        if resolved > 0:
            parts.append(f"{arm} {c['outside_slice']}/{resolved}"
                         + (f" (in target {c['in_target']})" if "in_target" in c else ""))
    return "; extra demos outside the slice: " + ", ".join(parts) if parts else ""


def composition_rows(document: dict[str, Any]) -> list[list[str]]:
    """Each extra arm's data pooled over the replicates: its budget group, the extra episodes and frames it
    trained on, how many lie outside the slice and inside the mined target (of those resolvable to a pool or
    probe episode), and per variant. Empty for a document that recorded no composition."""
    totals: dict[str, dict[str, Any]] = {}
    for rep in document["replicates"]:
        budget = rep["budget"]
        secondary = budget.get("secondary") or {}
        for arm, c in (rep.get("composition") or {}).items():
            row = totals.setdefault(arm, {"episodes": 0, "frames": 0, "outside": 0, "target": 0, "resolved": 0,
                                          "target_known": "in_target" in c, "variants": {}})
            primary = arm in ("targeted", "random") or not secondary
            row["group"] = "primary pair" if primary else "secondary"
            empty = arm in (secondary.get("empty") or [])
            row["episodes"] += 0 if empty else budget["episodes"] if primary else secondary["episodes"]
            row["frames"] += 0 if empty else budget["frames"] if primary else secondary["frames"]
            row["resolved"] += sum(c["variants"].values()) - c["unresolved"]
            row["outside"] += c["outside_slice"]
            row["target"] += c.get("in_target", 0)
            for name, count in c["variants"].items():
                row["variants"][name] = row["variants"][name] + count if name in row["variants"] else count
    return [[arm, row["group"], f"{row['episodes']} ep, {row['frames']} frames",
             f"{row['outside']}/{row['resolved']}" if row["resolved"] else "–",
             f"{row['target']}/{row['resolved']}" if row["resolved"] and row["target_known"] else "–",
             ", ".join(f"{name} {count}" for name, count in sorted(row["variants"].items()))]
            for arm, row in totals.items()]


COMPOSITION_HEADER = ["arm", "budget group", "extra data (sum over replicates)", "outside the slice",
                      "in the mined target", "per variant"]


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


def section(documents: Sequence[dict[str, Any]]) -> Markup:
    """The HTML of every flywheel experiment that ran this campaign."""
    parts = []
    for document in documents:
        design, analysis = document["design"], document["analysis"]
        rows = []
        for arm, rate in analysis["rates"].items():
            versus = analysis["against_random"].get(arm)
            rows.append([arm, _rate(rate), _rate(document["by_region"]["slice"][arm]),
                         _rate(document["by_region"]["uncovered"][arm]),
                         "" if versus is None else f"{versus['difference']:+.3f} (p = {versus['mcnemar_p']:.3g})"])
        variants = _variants(document)
        composition = composition_rows(document)
        arms = list(analysis["rates"])
        per_variant = [[name] + [_rate(group["rates"][arm]) for arm in arms]
                       + ["" if group["against_random"].get("targeted") is None
                          or group["against_random"]["targeted"]["difference"] is None else
                          f"{group['against_random']['targeted']['difference']:+.3f} "
                          f"(p = {group['against_random']['targeted']['mcnemar_p']:.3g})"]
                       for name, group in variants.items()]
        parts.append(join([
            html("<h3>{} on {}</h3><p class='muted'>Base trained on {} only; the primary pair (targeted, random) adds "
                 "the same episodes and frames, the secondary arms their own equal budget (at most the pair's); "
                 "pooled over {} replicates with their own demo, probe and evaluation seeds (mid-p 95%).</p>",
                 design["name"], design["task"], _slice_text(design["slice"]), design["replicates"]),
            table(["arm", "all", "slice", "uncovered", "vs random (McNemar exact)"], rows, {1, 2, 3, 4}),
            Markup("") if not composition else join([
                Markup("<p class='muted'>Each arm's extra data, pooled over the replicates (demos resolvable to a pool "
                       "or probe episode; PoNR recoveries are not):</p>"),
                table(COMPOSITION_HEADER, composition, {2, 3, 4})]),
            Markup("") if not variants else join([
                Markup("<p class='muted'>Per variant (secondary endpoints):</p>"),
                table(["variant", *arms, "targeted − random"], per_variant, set(range(1, len(arms) + 2)))]),
            html("<ul>{}</ul>", join(html("<li>{}</li>", line) for line in summary_lines(document))),
        ]))
    return join(parts)
