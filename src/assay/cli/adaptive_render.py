"""Tables for adaptive campaigns: why each question stopped, its sequential p-value and interval, episodes saved."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from assay.metrics.adaptive import YARDSTICKS
from assay.metrics.adaptive_power import cap_for_power, design_power, equal_power_view
from assay.spec import CampaignSpec

NOT_COMPARABLE = "not comparable: the cap's power is ≤ α"


def _variant(key: str) -> str:
    return "nominal" if key == "nominal" else key[:8]


def adaptive_render(state: dict[str, Any]) -> list[Table | str]:
    """The questions table and one line of episodes used against the fixed-n design (from adaptive.json)."""
    design = state["design"]
    progress = design.get("endpoint") == "progress"  # absent: the success endpoint
    test = "progress score, betting CS" if progress else f"{design['method']} test"
    title = (f"adaptive goal {design['goal']} ({test}, alpha {design['alpha']}, power "
             f"{design['power']}, delta {design['delta']}, batch {design['batch']}, horizon {design['max_episodes']}): "
             "anytime-valid p-values and confidence sequences (fixed-n p-values are invalid after optional stopping)")
    table = Table(title=title, title_justify="left")
    for column in ("task", "variant", "question", "episodes/cell", "stopped because", "estimate", "interval",
                   "seq. p"):
        table.add_column(column, justify="right" if column in ("episodes/cell", "estimate", "seq. p") else "left")
    for q in state["questions"]:
        label = "retention" if q["kind"] == "retention" else "mean progress" if progress else "rate"
        name = " vs ".join(q["policies"]) if q["kind"] == "compare" else f"{q['policies'][0]} {label}"
        if q["kind"] == "compare" and q["a_only"] is not None:
            name += f" ({q['a_only']}:{q['b_only']} {'higher' if progress else 'discordant'})"
        table.add_row(q["task"], _variant(q["variant"]), name, str(q["episodes"]), q["reason"] or "running",
                      f"{q['estimate']:+.3f}" if q["kind"] == "compare" else f"{q['estimate']:.3f}",
                      f"[{q['low']:.3f}, {q['high']:.3f}]",
                      "-" if q["p_value"] is None else f"{q['p_value']:.3g}")
    return [table, *saved_lines(state)]


def saved_lines(state: dict[str, Any]) -> list[str]:
    """Episodes used against the exact fixed-n McNemar design of the power the cap reaches and of the power asked
    for (one yardstick: :func:`~assay.metrics.adaptive_power.equal_power_view`), and the expected pairs per
    comparison at δ and at no difference."""
    design = state["design"]
    view = equal_power_view(state)
    if view is None:
        return [f"episodes used {state['episodes_used']} against {state['episodes_fixed']} for the fixed-n design of "
                f"the same error rates ({YARDSTICKS.get(design['goal'], '')}): {state['saved']:.0%} saved"]
    reached = ", ".join(f"{p['reached']:.3f}" + (f" ± {p['reached_se']:.3f} (simulated)" if p["reached_se"] else
                                                  " (exact)") + f" at alpha {p['level']:.3g}" for p in view["powers"])
    lines = [f"episodes used {state['episodes_used']} against {view['fixed_equal_power']} for the exact fixed-n "
             f"McNemar design of the power this cap of {design['max_episodes']} pairs reaches at delta "
             f"{design['delta']} ({reached}): " + (f"{view['saved_equal_power']:.0%} saved at equal power and alpha"
                                                   if view["comparable"] else NOT_COMPARABLE),
             f"against the exact fixed-n McNemar design of the requested power {design['power']} "
             f"({YARDSTICKS.get(design['goal'], '')}, {view['fixed_requested']} episodes): "
             f"{view['saved_requested']:.0%}" + ("" if view["reachable"] else ", a power this design does not reach"),
             *[expected_pairs(p) for p in view["powers"]]]
    if view["warning"]:
        lines.append(f"[yellow]warning:[/] {view['warning']}")
    return lines


def expected_pairs(power: dict[str, Any]) -> str:
    """One level's expected pairs per comparison at δ and at no difference, beside its fixed-n designs."""
    bound = "" if power["endpoint"] == "progress" else " (upper bounds: the futility stop is left out)"
    return (f"expected pairs per comparison at alpha {power['level']:.3g}: {power['mean_pairs_at_delta']:.1f} at delta "
            f"{power['delta']}, {power['mean_pairs_at_null']:.1f} at no difference{bound}; fixed-n "
            f"{power['fixed_n_equal_power']} at the power reached, {power['fixed_n_requested']} at the power requested")


def power_warning(spec: CampaignSpec) -> str | None:
    """Before an adaptive compare/rank campaign runs: a warning when its cap cannot reach its power, with the
    cap that would (None when it can, or the goal tests nothing)."""
    ad = spec.adaptive
    if ad is None or ad.goal.value not in ("compare", "rank"):
        return None
    policies = len(ad.policies or spec.policies)
    level = ad.alpha / max(1, policies * (policies - 1) // 2 if ad.goal.value == "rank" else 1)
    power = design_power(level, ad.delta, ad.max_episodes, ad.batch, ad.method, ad.power, ad.endpoint.value)
    if power.reachable:
        return None
    needed = cap_for_power(level, ad.delta, ad.batch, ad.method, ad.power, ad.endpoint.value)
    return (f"adaptive.max_episodes {ad.max_episodes} cannot reach the requested power {ad.power} at delta {ad.delta} "
            f"(alpha {level:.3g} per comparison): it reaches {power.reached:.2f}"
            + (f"; max_episodes {needed} reaches it" if needed else "")
            + f". Episodes saved will be read against the fixed-n design of power {power.reached:.2f} "
              f"({power.fixed_n_equal_power} pairs per cell, not {power.fixed_n_requested})")
