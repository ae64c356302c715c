"""Policies whose sensitivity to each protocol knob is known by construction (importable by worker processes).

Each is the scripted expert gated on one thing a protocol knob sets, and otherwise still (zero motion, gripper
open): it succeeds exactly where the expert does when its gate is open, and never when it is shut.

* ``SizeGatedExpert(width)``: the gate is the width of the camera frame it receives (the ``image`` knob);
* ``PromptGatedExpert``: the gate is the instruction being the task's own (the ``prompt`` knob, under a
  variant that rewrites the instruction);
* ``ChunkExpert(horizon)``: always the expert's first action then ``horizon - 1`` still ones, as one chunk (the
  ``replan`` knob: executing the whole chunk slows it ``horizon``-fold);
* ``BothGatedExpert(width)``: the gate is the width AND the instruction (two knobs that matter only together:
  each alone changes nothing, their interaction everything);
* ``WaitingExpert(wait)``: still for its first ``wait`` steps, then the expert (the ``horizon`` knob: it
  succeeds only when the horizon leaves the expert its steps after the wait).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext
from assay.policies.protocol import ENV_IDS


class _Gated:
    reads = False

    def __init__(self) -> None:
        self._expert = ExpertPolicy()
        self._nominal = ""

    def reads_frames(self) -> bool:
        return self.reads

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)
        self._nominal = context.task.instruction

    def open(self, observations: Mapping[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        actions = np.array(self._expert.act(observations), dtype=np.float64)
        still = np.zeros_like(actions)
        still[:, -1] = -1.0
        return np.where(self.open(observations)[:, None], actions, still)


class SizeGatedExpert(_Gated):
    """The expert when the ``camera`` frame is ``width`` pixels wide; still otherwise."""

    reads = True

    def __init__(self, width: int = 48, camera: str = "front") -> None:
        super().__init__()
        self.width, self.camera = width, camera

    def open(self, observations: Mapping[str, Any]) -> np.ndarray:
        frames = observations[f"image.{self.camera}"]
        return np.full(len(frames), np.asarray(frames).shape[2] == self.width)


class PromptGatedExpert(_Gated):
    """The expert when the instruction is the task's own; still otherwise."""

    def open(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.array([text == self._nominal for text in observations["instruction"]])


class BothGatedExpert(SizeGatedExpert):
    """The expert when the frame is ``width`` wide AND the instruction is the task's own."""

    def open(self, observations: Mapping[str, Any]) -> np.ndarray:
        said = np.array([text == self._nominal for text in observations["instruction"]])
        return super().open(observations) & said


class ChunkExpert:
    """A chunk per query: the expert's action, then ``horizon - 1`` still actions."""

    def __init__(self, horizon: int = 10) -> None:
        self._expert = ExpertPolicy()
        self.horizon = horizon

    def reads_frames(self) -> bool:
        return False

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        actions = np.array(self._expert.act(observations), dtype=np.float64)
        chunk = np.zeros((len(actions), self.horizon, actions.shape[1]))
        chunk[:, :, -1] = -1.0
        chunk[:, 0] = actions
        return chunk


class WaitingExpert(_Gated):
    """Still for the first ``wait`` steps of each episode, then the expert."""

    def __init__(self, wait: int = 100) -> None:
        super().__init__()
        self.wait = wait
        self._steps: dict[int, int] = {}

    def reset(self, context: PolicyContext) -> None:
        super().reset(context)
        self._steps = {}

    def open(self, observations: Mapping[str, Any]) -> np.ndarray:
        ids = [int(i) for i in observations[ENV_IDS]]
        for i in ids:
            self._steps[i] = self._steps.get(i, 0) + 1
        return np.array([self._steps[i] > self.wait for i in ids])
