"""TaskSpec: what a task is, independent of any simulator object.

A task id reads ``name@version`` (``metaworld/pick-place@1``). A change of
behaviour (horizon, success semantics, instructions, environment) is a new
version; the content hash of the whole record is stored with every episode, so a
silent change without a version bump still never reuses old results.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from assay.annotations import public_api
from assay.errors import SpecError
from assay.spec.arrays import DEPTH_PREFIX, IMAGE_PREFIX, STATE, Array, BoundedArray
from assay.spec.hashing import content_hash
from assay.spec.names import clean_name

# backend/name[/more], where a Gymnasium name may carry a plugin module (gymnasium/pkg:ns/Env-v0).
_TASK_REF = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_.\-]*/(?:[A-Za-z_][\w.]*:)?[A-Za-z0-9][A-Za-z0-9_.\-]*"
                       r"(?:/[A-Za-z0-9][A-Za-z0-9_.\-]*)*)(?:@(?P<version>\d+))?$")


class SuccessMode(str, Enum):
    """When success is judged: at any step (ends the episode, the default) or at the end."""

    ANY_STEP = "any_step"
    AT_END = "at_end"
    NONE = "none"  # the environment has no success notion; only return is scored


class Level(str, Enum):
    """A task's difficulty level: one skill, several chained, or a long-horizon sequence."""

    ATOMIC = "atomic"
    COMPOSITE = "composite"
    LONG_HORIZON = "long-horizon"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


@public_api
class ActionSpec(_Frozen):
    """The action space: a box of ``dim`` values in [low, high], and what they mean."""

    dim: int = Field(gt=0)
    low: float = -1.0
    high: float = 1.0
    kind: str = "delta_ee_gripper"  # e.g. delta end-effector xyz + gripper effort


@public_api
class CameraSpec(_Frozen):
    """A rendered view: frames come back as ``image.<name>`` (and ``depth.<name>``) observations."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    width: int = Field(default=128, ge=16, le=1024)
    height: int = Field(default=128, ge=16, le=1024)
    depth: bool = False
    # A faster drawing that is not the benchmark's own (LIBERO: no shadows or reflections, ~2.5x faster on CPU):
    # an explicit choice, recorded in the task hash; the default draws what the benchmark's renderer draws.
    fast: bool = False

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("fast"):  # left out at its default: task hashes and stored specs stay as they were
            data.pop("fast", None)
        return data

    @field_validator("width", "height")
    @classmethod
    def _even(cls, size: int) -> int:
        if size % 2:
            raise ValueError(f"camera size {size} must be even (H.264 video)")
        return size


@public_api
class TaskSpec(_Frozen):
    """A versioned task: backend, environment, instructions, horizon, spaces and tags."""

    name: str
    version: int = Field(ge=1)
    backend: str
    env_name: str
    instructions: tuple[str, ...] = Field(min_length=1)
    horizon: int = Field(gt=0)
    control_hz: float = Field(gt=0)
    observations: tuple[str, ...] = ("state",)
    cameras: tuple[CameraSpec, ...] = ()
    state_dim: int = Field(gt=0)
    action: ActionSpec
    success: SuccessMode = SuccessMode.ANY_STEP
    skill: str = ""
    family: str = ""
    level: Level = Level.ATOMIC
    tags: tuple[str, ...] = ()
    # How an episode whose instruction names another task (instruction.conflict) is scored: 'marked' (by this
    # task's success, the episode marked and reported apart) or 'instructed' (against the task the words name).
    conflict_scoring: Literal["marked", "instructed"] = "marked"
    # A benchmark with fixed initial states (LIBERO): episode i of a campaign with seed s starts from
    # state s + i of the task's list, as the benchmark's own evaluation does; 0 means states sampled from the seed.
    initial_states: int = Field(default=0, ge=0)
    settle_steps: int = Field(default=0, ge=0, description="no-op steps after reset, before the policy acts")
    video_fps: float | None = Field(
        default=None, gt=0, le=1000,
        description="frames per second of the recorded videos when a campaign sets no video_fps (default: every "
                    "step); a recording default, not part of the task's hash (an episode's key holds its rate)")

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        name = clean_name(name, "task name")
        if not _TASK_REF.fullmatch(name) or "@" in name:
            raise ValueError(f"task name {name!r} must look like 'backend/task-name' (or 'backend/suite/task-name')")
        return name

    @property
    def id(self) -> str:
        """The versioned task id, ``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def instruction(self) -> str:
        """The nominal instruction (the first template)."""
        return self.instructions[0]

    def observation_spec(self) -> dict[str, Array]:
        """The arrays every observation holds (dm_env's ``observation_spec``): ``state`` (``state_dim`` floats)
        and, per camera, ``image.<name>`` ((H, W, 3) uint8) and, with depth, ``depth.<name>`` ((H, W) float32).

        A camera task's observations carry ``calib.<name>`` besides; a step whose frames were skipped
        (``SupportsFramesOnDemand``) carries no ``image.*``/``depth.*``."""
        specs = {STATE: Array((self.state_dim,), np.dtype(np.float64), STATE)}
        for camera in self.cameras:
            image = IMAGE_PREFIX + camera.name
            specs[image] = Array((camera.height, camera.width, 3), np.dtype(np.uint8), image)
            if camera.depth:
                depth = DEPTH_PREFIX + camera.name
                specs[depth] = Array((camera.height, camera.width), np.dtype(np.float32), depth)
        return specs

    def action_spec(self) -> BoundedArray:
        """One action (dm_env's ``action_spec``): ``action.dim`` floats in ``[action.low, action.high]``."""
        return BoundedArray((self.action.dim,), np.dtype(np.float64), "action", self.action.low, self.action.high)

    def content_hash(self) -> str:
        """The content hash every episode records; fields older hashes lacked are left out at their defaults."""
        record = self.model_dump(mode="json")
        if record["conflict_scoring"] == "marked":  # left out at its default: older hashes stay valid
            del record["conflict_scoring"]
        for optional in ("initial_states", "settle_steps"):  # left out at their defaults: older hashes stay valid
            if not record[optional]:
                del record[optional]
        del record["video_fps"]  # how episodes are recorded, not what the task is: the episode key holds it
        return content_hash(record)


def parse_task_ref(ref: str) -> tuple[str, int | None]:
    """Split ``'metaworld/pick-place@1'`` into ``('metaworld/pick-place', 1)``; no version gives None."""
    match = _TASK_REF.match(ref.strip())
    if not match:
        raise SpecError(f"task id {ref!r} is malformed: expected 'backend/name' or 'backend/name@VERSION' "
                        "(LIBERO: 'libero/SUITE/TASK@VERSION'; Gymnasium: 'gymnasium/ID', "
                        "'gymnasium/namespace/ID' or 'gymnasium/module:ID')")
    version = match.group("version")
    return match.group("name"), int(version) if version else None
