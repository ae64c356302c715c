"""The quality gate for training exports, and the safety filter's counts per cell.

The online safety filter is ``assay.sim.safety``; each episode's record keeps its
interventions (``provenance["run"]["interventions"]``), and
:func:`intervention_rows` sums them per (policy, task, variant) for ``results``,
the report and the dashboard.

:func:`quality_gate` checks exported trajectories and says why each dropped one
was dropped: missing required fields, instability (non-finite values or an
``info.unstable`` step), or jitter (mean absolute second difference of the
actions above a threshold).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.store import REQUIRED_COLUMNS, EpisodeRecord, Store, step_matrix
from assay.store.aggregates import safety_totals

SAFETY_KINDS = ("nan", "limit", "workspace")


def intervention_rows(records: Sequence[EpisodeRecord]) -> list[dict[str, Any]]:
    """Per (policy, task, variant) of the cells run with the safety filter: episodes, steps, and each kind of
    intervention (a step that had a NaN replaced, an action clipped, a move out of the workspace stopped)."""
    cells: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        run = r.provenance.get("run") if isinstance(r.provenance, dict) else None
        if not isinstance(run, dict) or not run.get("safety"):
            continue
        row = cells.setdefault((r.policy_name, r.task_id, r.variant_name),
                               {"policy": r.policy_name, "task": r.task_id, "variant": r.variant_name, "episodes": 0,
                                "steps": 0, **{k: 0 for k in SAFETY_KINDS}})
        row["episodes"] += 1
        row["steps"] += r.steps
        for kind in SAFETY_KINDS:
            row[kind] += int((run.get("interventions") or {}).get(kind, 0))
    return [cells[k] for k in sorted(cells)]


def campaign_interventions(store: Store, campaign: str) -> list[dict[str, Any]]:
    """:func:`intervention_rows` of a campaign's episodes, summed by the database (no row decoded)."""
    return safety_totals(store.catalog, campaign, SAFETY_KINDS)


@dataclass(frozen=True)
class GateResult:
    """The quality gate's verdict: the trajectories kept and, for each one dropped, why."""

    kept: tuple[str, ...]
    dropped: dict[str, str]  # name -> why


def quality_gate(trajectories: dict[str, Any], jitter_threshold: float = 0.5) -> GateResult:
    """``trajectories``: name -> pyarrow step table. Keep the clean ones; say why others are dropped."""
    kept, dropped = [], {}
    for name, table in sorted(trajectories.items()):
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            dropped[name] = f"missing field(s): {', '.join(missing)}"
            continue
        actions, states = step_matrix(table, "action"), step_matrix(table, "observation.state")
        unstable = "info.unstable" in table.column_names and np.nansum(table.column("info.unstable").to_numpy()) > 0
        if unstable or not (np.all(np.isfinite(actions)) and np.all(np.isfinite(states))):
            dropped[name] = "unstable: non-finite values or a simulator instability event"
            continue
        jitter = float(np.mean(np.abs(np.diff(actions, n=2, axis=0)))) if len(actions) > 2 else 0.0
        if jitter > jitter_threshold:
            dropped[name] = f"jitter {jitter:.3f} above {jitter_threshold}"
            continue
        kept.append(name)
    return GateResult(tuple(kept), dropped)
