"""Calling policies on recorded observations, for ``assay openloop`` (metrics never builds policies).

The trajectories of one task are replayed in lockstep: the policy is reset once
with the episodes' seeds, and at step t it gets the recorded states of the
episodes that are that long (with their recorded frames and environment state),
keyed by ``env_ids``, exactly as in a closed-loop batch; so a stateful policy
(delays, per-environment noise) behaves as it would closed loop, given the same
observations. A policy that answers a chunk is scored on its first action: the
one it would execute at that step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.metrics import Predictor, Trajectory
from assay.policies import PolicyContext, make_policy
from assay.spec import ENVIRONMENT_STATE, PolicySpec, TaskSpec


def replay(policy: Any, task: TaskSpec, trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
    """A policy's action at every recorded step of each trajectory, the trajectories stepped together as one batch."""
    seeds = tuple(t.record.seed for t in trajectories)
    instructions = tuple(t.record.instruction for t in trajectories)
    policy.reset(PolicyContext(task, seeds, instructions))
    predicted = [np.zeros_like(t.actions) for t in trajectories]
    for step in range(max(len(t.actions) for t in trajectories)):
        active = [i for i, t in enumerate(trajectories) if len(t.actions) > step]
        batch = {"state": np.stack([trajectories[i].observations[step] for i in active]),
                 "instruction": [instructions[i] for i in active], "env_ids": np.asarray(active)}
        for camera in trajectories[0].frames:  # recorded frames, for policies that look (pixel-bc)
            batch[f"image.{camera}"] = np.stack([trajectories[i].frames[camera][step] for i in active])
        environments = [trajectories[i].environment for i in active]
        if all(e is not None for e in environments):  # LIBERO's goal positions, for a bc that reads them
            batch[ENVIRONMENT_STATE] = np.stack([e[step] for e in environments if e is not None])
        try:
            actions = np.asarray(policy.act(batch), dtype=np.float64)
        except KeyError as exc:  # an observation the recording does not keep (depth, calibration)
            why = str(exc.args[0]) if exc.args else ""
            why = why if " " in why else f"it needs observation {why}"
            raise AssayError(f"cannot replay this policy open loop: {why}; a replay has the recorded state, "
                             f"instruction and camera frames ({', '.join(sorted(batch))})") from None
        if actions.ndim == 3 and actions.shape[0] == len(active):
            actions = actions[:, 0]  # a chunk: the action it would execute at this step
        if actions.shape != (len(active), task.action.dim):
            raise AssayError(f"policy returned actions of shape {actions.shape}; expected "
                             f"{(len(active), task.action.dim)}")
        for row, i in enumerate(active):
            predicted[i][step] = actions[row]
    return predicted


def predictor(spec: PolicySpec, tasks: Mapping[str, TaskSpec]) -> Predictor:
    """A Predictor that builds the policy once and replays each task's trajectories with it."""
    policy = make_policy(spec)

    def predict(trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
        task_id = trajectories[0].record.task_id
        if task_id not in tasks:
            raise AssayError(f"task {task_id} is not in the campaign's resolved spec")
        return replay(policy, tasks[task_id], trajectories)

    return predict
