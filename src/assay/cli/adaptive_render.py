"""Tables for adaptive campaigns: why each question stopped, its sequential p-value and interval, episodes saved."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from assay.metrics.adaptive import YARDSTICKS


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
    line = (f"episodes used {state['episodes_used']} against {state['episodes_fixed']} for the fixed-n design of the "
            f"same error rates ({YARDSTICKS.get(design['goal'], '')}): {state['saved']:.0%} saved")
    return [table, line]
