"""The online safety filter on actions and the quality gate for training exports.

:class:`SafetyFilter` wraps a SimEnv: a non-finite action becomes a zero action
(``nan``), components outside the action box are clipped (``limit``), and a
translation that would take the hand (obs[0:3]) out of the workspace box is
zeroed on that axis (``workspace``). Each step's interventions are added to the
step's ``info`` as ``safety.<kind>`` (1.0 when it intervened), so they are
recorded per step and counted per episode by summing the column.

:func:`quality_gate` checks exported trajectories and says why each dropped one
was dropped: missing required fields, instability (non-finite values or an
``info.unstable`` step), or jitter (mean absolute second difference of the
actions above a threshold).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.sim import Observation, SimEnv, Transition
from assay.store.episodes import REQUIRED_COLUMNS

WORKSPACE = (np.array([-0.525, 0.348, 0.05]), np.array([0.525, 1.025, 0.7]))  # Sawyer hand box (Meta-World mocap)


class SafetyFilter:
    def __init__(self, env: SimEnv, workspace: tuple[np.ndarray, np.ndarray] = WORKSPACE) -> None:
        self.env = env
        self.task = env.task
        self.low, self.high = workspace
        self._state: np.ndarray | None = None
        self.counts = {"nan": 0, "limit": 0, "workspace": 0}

    def reset(self, seed: int, *args: Any) -> Observation:
        observation = self.env.reset(seed, *args)
        self._state = observation["state"]
        self.counts = {k: 0 for k in self.counts}
        return observation

    def filter(self, action: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        action = np.asarray(action, dtype=np.float64).copy()
        hit = {"nan": 0.0, "limit": 0.0, "workspace": 0.0}
        if not np.all(np.isfinite(action)):
            action = np.zeros_like(action)
            hit["nan"] = 1.0
        clipped = np.clip(action, self.task.action.low, self.task.action.high)
        if not np.array_equal(clipped, action):
            hit["limit"] = 1.0
        action = clipped
        if self._state is not None:
            hand = self._state[0:3]
            outward = ((hand <= self.low) & (action[:3] < 0)) | ((hand >= self.high) & (action[:3] > 0))
            if outward.any():
                action[:3][outward] = 0.0
                hit["workspace"] = 1.0
        return action, hit

    def step(self, action: np.ndarray) -> Transition:
        safe, hit = self.filter(action)
        for kind, value in hit.items():
            self.counts[kind] += int(value)
        transition = self.env.step(safe)
        self._state = transition.observation["state"]
        info = {**transition.info, **{f"safety.{k}": v for k, v in hit.items()}}
        return Transition(transition.observation, transition.reward, transition.terminated, transition.truncated,
                          transition.success, info)

    def initial_conditions(self) -> dict[str, Any]:
        return self.env.initial_conditions()

    def close(self) -> None:
        self.env.close()


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
