"""Recovery demonstrations: the expert, started from states just before the point of no return.

For a failed episode with point of no return ``t`` (found on a verified replay),
each start ``s`` in
``[t - before, t]`` replays the recorded actions to ``s`` and lets the expert
finish within the search's fixed budget; successful recoveries are written as training data in the episode step
schema (``assay.store.build_table``) to ``demos/<source key>/<start>.parquet``,
with provenance in the file metadata: purpose ``recovery``, source episode,
start step, point of no return. Only successful recoveries are kept, and only
those the quality gate (``assay.failures.safety.quality_gate``: instability,
jitter, missing fields) passes; :func:`gated_recovery_demos` also says why each
dropped one was dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from assay.failures.ponr import PointOfNoReturn
from assay.failures.replay import Replayer
from assay.failures.safety import quality_gate
from assay.store import build_table, write_blob


def recovery_columns(
    states: list[np.ndarray], actions: list[np.ndarray], transitions: list, control_hz: float
) -> dict[str, np.ndarray]:
    """The step columns of a recovery demo from its states, actions and transitions, as the recorder writes them."""
    n = len(actions)
    columns: dict[str, np.ndarray] = {
        "step": np.arange(n, dtype=np.int32),
        "t": np.arange(n, dtype=np.float64) / control_hz,
        "observation.state": np.asarray(states[:n], dtype=np.float64).reshape(n, -1),
        "action": np.asarray(actions, dtype=np.float64).reshape(n, -1),
        "reward": np.asarray([t.reward for t in transitions], dtype=np.float64),
        "success": np.asarray([t.success for t in transitions], dtype=bool),
        "terminated": np.asarray([t.terminated for t in transitions], dtype=bool),
        "truncated": np.asarray([t.truncated for t in transitions], dtype=bool),
    }
    for key in sorted({k for t in transitions for k in t.info}):
        columns[f"info.{key}"] = np.asarray([t.info.get(key, np.nan) for t in transitions], dtype=np.float64)
    return columns


def recovery_demos(replayer: Replayer, root: Path, ponr: PointOfNoReturn, seed: int, actions: np.ndarray,
                   before: int = 10, every: int = 5, instruction: str = "") -> list[str]:
    """Write the successful recoveries that pass the quality gate; return their paths relative to ``root``."""
    return gated_recovery_demos(replayer, root, ponr, seed, actions, before, every, instruction)[0]


def gated_recovery_demos(replayer: Replayer, root: Path, ponr: PointOfNoReturn, seed: int, actions: np.ndarray,
                         before: int = 10, every: int = 5, instruction: str = "") -> tuple[list[str], dict[str, str]]:
    """(paths written relative to ``root``, {start step: why the quality gate dropped it})."""
    dropped: dict[str, str] = {}
    if ponr.t is None or ponr.verified is False:  # never from a replay that is not the recording
        return [], dropped
    budget = ponr.budget or replayer.task.horizon
    written = []
    for start in range(max(0, ponr.t - before), ponr.t + 1, every):
        rollout = replayer.handoff(seed, actions, start, budget, instruction)
        if not rollout.success or not rollout.actions:
            continue
        columns = recovery_columns(rollout.states, rollout.actions, rollout.transitions, replayer.task.control_hz)
        table = build_table(columns, {"purpose": "recovery", "source_episode": ponr.key, "start_step": start,
                                      "point_of_no_return": ponr.t, "task_id": replayer.task.id,
                                      "variant": replayer.variant.name, "seed": seed})
        gate = quality_gate({str(start): table})
        if gate.dropped:
            dropped.update(gate.dropped)
            continue
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        relpath = f"demos/{ponr.key}/{start:04d}.parquet"
        write_blob(root, relpath, sink.getvalue().to_pybytes())
        written.append(relpath)
    return written, dropped
