"""The quality gate for training exports (the online safety filter is ``assay.sim.safety``).

:func:`quality_gate` checks exported trajectories and says why each dropped one
was dropped: missing required fields, instability (non-finite values or an
``info.unstable`` step), or jitter (mean absolute second difference of the
actions above a threshold).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.store.episodes import REQUIRED_COLUMNS


@dataclass(frozen=True)
class GateResult:
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
        width = table.schema.field("action").type.list_size
        actions = table.column("action").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
        states = table.column("observation.state").combine_chunks().flatten().to_numpy(zero_copy_only=False)
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
