"""The contract handshake: what a policy expects, checked against a task before episode 1.

A policy (local, or a server in its metadata frame) may declare a
:class:`PolicyContract`: its observation keys and shapes (openpi's wire names,
``observation/state``, ``observation/image`` ...), image size and layout, state
layout, action space (dimension, absolute or delta, gripper polarity, range),
chunk length and control rate. :func:`check_contract` compares it with a
:class:`TaskSpec`:

* a mismatch that would feed the policy or the simulator garbage (a missing key, a
  wrong shape, another state layout, another action dimension, delta vs absolute,
  the gripper's sign flipped, a task outside the ones a checkpoint was trained on) is an
  *error*: the campaign does not start;
* a mismatch of ranges (action bounds, control rate) is a *warning*.

Fields left out of a contract (``None``) are not checked.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from assay.annotations import public_api
from assay.errors import ContractError, ContractWarning, SpecError
from assay.spec import IMAGE_PREFIX, STATE, TaskSpec

STATE_KEY = "observation/state"
PROMPT_KEY = "prompt"
IMAGE_KEYS = ("observation/image", "observation/wrist_image")
"""The wire keys openpi policies read images from, given to a task's cameras in order
(a third camera and beyond get ``observation/image_<n>``); a campaign may map them itself."""


def camera_wire_keys(cameras: Sequence[str], mapping: Mapping[str, str] | None = None) -> dict[str, str]:
    """Wire key -> camera name: ``mapping`` when given (each camera must exist), else the default order."""
    if mapping:
        unknown = sorted(set(mapping.values()) - set(cameras))
        if unknown:
            raise SpecError(f"images: camera {', '.join(unknown)} is not rendered by the campaign; "
                            f"cameras: {', '.join(cameras) or 'none (add cameras: to the campaign)'}")
        return dict(mapping)
    names = list(IMAGE_KEYS) + [f"observation/image_{n}" for n in range(len(IMAGE_KEYS), len(cameras))]
    return dict(zip(names, cameras, strict=False))  # more names than cameras


class ActionMode(str, Enum):
    """Whether actions move the robot by a delta or command an absolute target."""

    DELTA = "delta"
    ABSOLUTE = "absolute"


class GripperPolarity(str, Enum):
    """What a positive gripper command does, or that the action has no gripper dimension."""

    POSITIVE_CLOSES = "positive_closes"
    POSITIVE_OPENS = "positive_opens"
    NONE = "none"


class ImageLayout(str, Enum):
    """The axis order of an image array: height, width, channels or channels first."""

    HWC = "HWC"
    CHW = "CHW"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@public_api
class ArraySpec(_Frozen):
    """The shape and dtype of one observation entry per environment."""

    shape: tuple[int, ...]
    dtype: str = "float32"


@public_api
class ImageSpec(_Frozen):
    """The size, channels and layout of one camera image."""

    height: int = Field(gt=0)
    width: int = Field(gt=0)
    channels: int = Field(default=3, gt=0)
    layout: ImageLayout = ImageLayout.HWC


@public_api
class ActionContract(_Frozen):
    """The action a policy answers: its dimension, mode, gripper polarity and bounds (None: not declared)."""

    dim: int = Field(gt=0)
    mode: ActionMode | None = None
    gripper: GripperPolarity | None = None
    low: float | None = None
    high: float | None = None


@public_api
class PolicyContract(_Frozen):
    """What a policy consumes and produces. ``observations`` maps wire keys to array specs."""

    observations: dict[str, ArraySpec]
    images: dict[str, ImageSpec] = Field(default_factory=dict)
    state_layout: str | None = None
    action: ActionContract
    chunk_length: int = Field(default=1, gt=0)
    control_hz: float | None = Field(default=None, gt=0)
    tasks: tuple[str, ...] | None = None  # the only task ids the policy can run (a checkpoint's trained tasks)

    @classmethod
    def from_metadata(cls, metadata: Any) -> PolicyContract | None:
        """The contract inside a server's metadata frame (key ``contract``), or None when it has none."""
        if not isinstance(metadata, dict) or not isinstance(metadata.get("contract"), dict):
            return None
        return cls.model_validate(metadata["contract"])


@dataclass(frozen=True)
class TaskInterface:
    """What a task gives a policy and expects back, in the contract's terms. ``images`` maps the
    image wire keys to the camera behind each (the client resizes them to what a contract declares)."""

    observations: dict[str, tuple[int, ...]]
    state_layout: str
    action_dim: int
    mode: ActionMode | None
    gripper: GripperPolarity | None
    low: float
    high: float
    control_hz: float
    images: dict[str, str] = field(default_factory=dict)


# What each action kind of a TaskSpec means; a kind not listed leaves mode and polarity unchecked.
_ACTION_KINDS: dict[str, tuple[ActionMode, GripperPolarity]] = {
    "delta_ee_gripper": (ActionMode.DELTA, GripperPolarity.POSITIVE_CLOSES),
    # Meta-World v3: xyz end-effector deltas, then the gripper effort (+1 closes, -1 opens)
    "delta_ee_xyz+gripper": (ActionMode.DELTA, GripperPolarity.POSITIVE_CLOSES),
}


def task_interface(task: TaskSpec, images: Mapping[str, str] | None = None) -> TaskInterface:
    """The task's side of the handshake; its cameras appear under their image wire keys
    (``images``: wire key -> camera, default :data:`IMAGE_KEYS` in camera order)."""
    mode, gripper = _ACTION_KINDS.get(task.action.kind, (None, None))
    specs, action = task.observation_spec(), task.action_spec()
    observations: dict[str, tuple[int, ...]] = {STATE_KEY: specs[STATE].shape}
    for camera in task.cameras:  # a camera task also gives its rendered images
        observations[IMAGE_PREFIX + camera.name] = specs[IMAGE_PREFIX + camera.name].shape
    wire = camera_wire_keys([camera.name for camera in task.cameras], images)  # and each under its wire key
    for key, name in wire.items():
        observations[key] = specs[IMAGE_PREFIX + name].shape
    metaworld = task.backend == "metaworld"
    layout = f"{task.backend}/state-{task.state_dim}" if metaworld else f"{task.backend}/{task.env_name}"
    return TaskInterface(observations, layout, action.shape[0], mode, gripper, action.minimum, action.maximum,
                         task.control_hz, wire)


@dataclass(frozen=True)
class ContractReport:
    """The contract handshake's findings: errors refuse the pairing, warnings are emitted."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    def raise_or_warn(self, policy: str, task: TaskSpec) -> None:
        """Raise ContractError listing every error; otherwise emit each warning as a ContractWarning."""
        if self.errors:
            diff = "; ".join(self.errors)
            raise ContractError(f"policy {policy!r} does not fit task {task.id}: {diff}")
        for message in self.warnings:
            warnings.warn(f"policy {policy!r} on task {task.id}: {message}", ContractWarning, stacklevel=3)


def check_contract(contract: PolicyContract, task: TaskSpec, images: Mapping[str, str] | None = None) -> ContractReport:
    """Compare a contract with a task; every difference is one ``field: policy X, task Y`` line.

    Images are resized to the size a contract declares, so only their presence is checked."""
    given = task_interface(task, images)
    errors: list[str] = []
    found: list[str] = []
    if contract.tasks is not None and task.id not in contract.tasks:
        errors.append(f"task: policy was trained on {', '.join(contract.tasks)} only, not on {task.id} "
                      "(train it on this task, or run it on one it knows)")
    for key, spec in contract.observations.items():
        if key == PROMPT_KEY:
            continue
        if key not in given.observations:
            errors.append(f"observation {key!r}: policy requires it, task gives only {sorted(given.observations)}")
        elif key in given.images:
            continue
        elif tuple(spec.shape) != given.observations[key]:
            errors.append(f"observation {key!r}: policy expects shape {tuple(spec.shape)}, task gives "
                          f"{given.observations[key]}")
        elif key == STATE_KEY and _kind(spec.dtype) != "f":
            errors.append(f"observation {key!r}: policy expects dtype {spec.dtype}, task gives floating-point state")
    for key in contract.images:
        if key not in given.observations:
            # an in-process policy reads image.<camera>, a remote one the wire keys: list the same kind
            rendered = sorted(k for k in given.observations if k.startswith("image.")) if key.startswith("image.") \
                else sorted(given.images)
            errors.append(f"image {key!r}: policy requires it, task renders {rendered or 'no images'} "
                          "(add the camera to the campaign)")
    if contract.state_layout is not None and contract.state_layout != given.state_layout:
        errors.append(f"state layout: policy {contract.state_layout!r}, task {given.state_layout!r}")
    action = contract.action
    if action.dim != given.action_dim:
        errors.append(f"action dim: policy {action.dim}, task {given.action_dim}")
    if action.mode is not None and given.mode is not None and action.mode != given.mode:
        errors.append(f"action mode: policy {action.mode.value}, task {given.mode.value}")
    if action.gripper is not None and given.gripper is not None and action.gripper != given.gripper:
        errors.append(f"gripper polarity: policy {action.gripper.value}, task {given.gripper.value}")
    if action.low is not None and action.low < given.low:
        found.append(f"action low: policy {action.low}, task {given.low} (actions below are clipped)")
    if action.high is not None and action.high > given.high:
        found.append(f"action high: policy {action.high}, task {given.high} (actions above are clipped)")
    if contract.control_hz is not None and abs(contract.control_hz - given.control_hz) > 1e-6 * given.control_hz:
        found.append(f"control rate: policy {contract.control_hz:g} Hz, task {given.control_hz:g} Hz")
    return ContractReport(tuple(errors), tuple(found))


def _kind(dtype: str) -> str:
    try:
        import numpy as np

        return np.dtype(dtype).kind
    except TypeError:
        return "?"
