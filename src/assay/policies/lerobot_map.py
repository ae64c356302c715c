"""How a LeRobot policy's features meet an Assay task: pure data, no lerobot import.

A ``PreTrainedPolicy`` directory saved by lerobot holds ``config.json`` whose
``input_features`` / ``output_features`` name what the policy reads and writes::

    "input_features": {"observation.state": {"type": "STATE", "shape": [39]},
                       "observation.images.front": {"type": "VISUAL", "shape": [3, 64, 64]}},
    "output_features": {"action": {"type": "ACTION", "shape": [4]}}

:func:`map_features` pairs each with an Assay observation: ``observation.state`` with
``state`` (dimensions must agree), ``observation.images.<camera>`` with the task's
camera ``<camera>`` rendered at the same size (``image.<camera>``, HWC uint8 ->
CHW float in [0, 1]), and ``action`` with the task's action. Anything else, or a
shape that differs, is a :class:`ContractError` of one line naming the lerobot side
and the Assay side. :func:`lerobot_batch` and :func:`assay_actions` convert at run time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import ContractError, SpecError
from assay.spec import TaskSpec

STATE_FEATURE = "observation.state"
IMAGE_PREFIX = "observation.images."
ACTION_FEATURE = "action"


@dataclass(frozen=True)
class FeatureMap:
    """Which Assay observation feeds which lerobot input, and the action's dimension."""

    state_dim: int | None  # None: the policy reads no state
    images: tuple[tuple[str, str, tuple[int, int, int]], ...]  # (lerobot key, Assay camera, (C, H, W))
    action_dim: int
    chunk_size: int


def read_config(path: str | Path) -> dict[str, Any]:
    """``config.json`` of a lerobot PreTrainedPolicy directory; SpecError naming the file otherwise."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise SpecError(
            f"{path} is not a lerobot policy directory: no config.json (save one with policy.save_pretrained)"
        )
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise SpecError(f"{file} is not valid JSON: {exc}") from None
    if (
        not isinstance(config, dict)
        or not isinstance(config.get("input_features"), dict)
        or not isinstance(config.get("output_features"), dict)
    ):
        raise SpecError(f"{file} has no input_features/output_features; is it a lerobot PreTrainedConfig?")
    return config


def _shape(feature: Any, key: str) -> tuple[int, ...]:
    shape = feature.get("shape") if isinstance(feature, dict) else None
    if not isinstance(shape, list) or not all(isinstance(s, int) for s in shape):
        raise SpecError(f"lerobot feature {key!r} has no integer 'shape'")
    return tuple(shape)


def map_features(config: Mapping[str, Any], task: TaskSpec) -> FeatureMap:
    """The pairing of a lerobot config's features with ``task``; ContractError (one line, both sides) on a mismatch."""
    cameras = {c.name: c for c in task.cameras}
    state_dim: int | None = None
    images: list[tuple[str, str, tuple[int, int, int]]] = []
    for key, feature in sorted(config["input_features"].items()):
        shape = _shape(feature, key)
        if key == STATE_FEATURE:
            if shape != (task.state_dim,):
                raise ContractError(
                    f"lerobot input {key!r} has shape {list(shape)}; Assay task {task.id} gives state "
                    f"of shape [{task.state_dim}]"
                )
            state_dim = task.state_dim
        elif key.startswith(IMAGE_PREFIX):
            camera = key[len(IMAGE_PREFIX) :]
            if camera not in cameras:
                raise ContractError(
                    f"lerobot input {key!r} needs camera {camera!r}; Assay task {task.id} renders "
                    f"{sorted(cameras) or 'no cameras'} (add {{name: {camera}, ...}} to the campaign's cameras)"
                )
            spec = cameras[camera]
            if len(shape) != 3 or shape != (3, spec.height, spec.width):
                raise ContractError(
                    f"lerobot input {key!r} has shape {list(shape)}; Assay camera {camera!r} renders "
                    f"[3, {spec.height}, {spec.width}]"
                )
            images.append((key, camera, (3, spec.height, spec.width)))
        else:
            raise ContractError(
                f"lerobot input {key!r} has no Assay counterpart; Assay gives {STATE_FEATURE!r} and "
                f"{[IMAGE_PREFIX + c for c in sorted(cameras)]}"
            )
    action = config["output_features"].get(ACTION_FEATURE)
    if action is None:
        raise ContractError(f"lerobot outputs {sorted(config['output_features'])}; Assay needs {ACTION_FEATURE!r}")
    action_shape = _shape(action, ACTION_FEATURE)
    if action_shape != (task.action.dim,):
        raise ContractError(
            f"lerobot output 'action' has shape {list(action_shape)}; Assay task {task.id} takes "
            f"actions of shape [{task.action.dim}]"
        )
    chunk = config.get("n_action_steps") or config.get("chunk_size") or 1
    return FeatureMap(state_dim, tuple(images), task.action.dim, int(chunk))


def lerobot_batch(features: FeatureMap, observations: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Assay's batched observations as lerobot inputs: float32 state (B, D), images float32 (B, 3, H, W) in [0, 1]."""
    batch: dict[str, np.ndarray] = {}
    if features.state_dim is not None:
        batch[STATE_FEATURE] = np.asarray(observations["state"], dtype=np.float32).reshape(-1, features.state_dim)
    for key, camera, (channels, height, width) in features.images:
        frames = np.asarray(observations[f"image.{camera}"])
        if frames.shape[1:] != (height, width, channels):
            raise ContractError(
                f"lerobot input {key!r} expects {height}x{width} frames; Assay camera {camera!r} "
                f"gave {list(frames.shape[1:])}"
            )
        batch[key] = np.ascontiguousarray(frames.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
    return batch


def assay_actions(features: FeatureMap, actions: Any, rows: int) -> np.ndarray:
    """lerobot's actions (B, A) or chunk (B, H, A) as Assay's; ContractError if the action dimension differs."""
    array = np.asarray(actions, dtype=np.float64)
    if array.ndim not in (2, 3) or array.shape[0] != rows or array.shape[-1] != features.action_dim:
        raise ContractError(
            f"lerobot policy returned actions of shape {list(array.shape)}; Assay expects "
            f"[{rows}, {features.action_dim}] or [{rows}, H, {features.action_dim}]"
        )
    return array
