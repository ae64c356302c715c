"""The perception-in-the-loop expert: the scripted expert, fed by a camera instead of ground truth.

It segments the goal marker (and, as a diagnostic, the puck) in the RGB image by
colour, back-projects the pixels through the depth image and the camera's
*calibration* (the nominal pose the environment reports, as a robot's calibration
file would), and replaces the goal position in the state with its estimate before
asking Meta-World's expert for an action. Lighting, colour and camera
perturbations therefore degrade it the way they degrade a real perception stack:
a goal it cannot see defaults to the middle of the table, and a moved camera
with a stale calibration puts the goal in the wrong place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.policies.builtin import ExpertPolicy
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

# Tasks whose object is the dark-red puck on the table and whose goal is a visible marker.
# Resting centre height of the puck and of the push goal marker, from the object model.
PUCK_HEIGHT = 0.0194


@dataclass(frozen=True)
class Target:
    """What to look for: the dominant colour channel, the height band, and the known centre height."""

    channel: int  # 0 red, 1 green, 2 blue
    min_z: float
    max_z: float
    centre_height: float | None  # None: trust the depth-derived height (objects in the air)
    dominance: float | None = None  # how much the channel must dominate, if stricter than the policy's


# Per task: the goal marker drives control; the object (where listed) is estimated as a
# diagnostic. Meta-World's scripted grasps need millimetre accuracy that a 128-px colour
# detector cannot give while the gripper occludes the puck, so the object stays proprioceptive.
PERCEIVABLE: dict[str, dict[str, Target]] = {
    "push-v3": {"goal": Target(1, -0.05, 0.1, PUCK_HEIGHT), "object": Target(0, -0.05, 0.1, PUCK_HEIGHT)},
    "push-back-v3": {"goal": Target(1, -0.05, 0.1, PUCK_HEIGHT), "object": Target(0, -0.05, 0.1, PUCK_HEIGHT)},
    "push-wall-v3": {"goal": Target(1, -0.05, 0.1, PUCK_HEIGHT), "object": Target(0, -0.05, 0.1, PUCK_HEIGHT)},
    # Reach's goal is a saturated red sphere in the air, in the height band of the red arm and
    # beside a dark-red puck: only the marker is that pure (red over 6x green/blue; the arm's
    # red is about 5x, at any lighting), the puck is below the band.
    "reach-v3": {"goal": Target(0, 0.06, 0.5, None, dominance=6.0)},
}


class PerceptionParams(BaseModel):
    """The ``perception-expert`` policy's params: the depth camera it reads and its detector's thresholds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    camera: str = Field(default="front", description="camera with depth whose images are used")
    min_pixels: int = Field(default=2, ge=1, description="pixels needed to accept a detection")
    dominance: float = Field(default=2.0, gt=1.0, description="how much the target's colour channel must dominate")


def back_project(
    rows: np.ndarray, cols: np.ndarray, depth: np.ndarray, calib: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """World points of pixels at z-depth ``depth``, with ``calib`` = position, forward, up (3 each), fovy (deg)."""
    height, width = shape
    position, forward, up, fovy = calib[0:3], calib[3:6], calib[6:9], calib[9]
    focal = 0.5 * height / np.tan(np.deg2rad(fovy) / 2)
    right = np.cross(forward, up)
    x = (cols + 0.5 - width / 2) / focal
    y = (rows + 0.5 - height / 2) / focal
    directions = forward[None] + x[:, None] * right[None] - y[:, None] * up[None]
    points: np.ndarray = position[None] + depth[:, None] * directions
    return points


def detect(rgb: np.ndarray, depth: np.ndarray, calib: np.ndarray, target: Target, dominance: float,
           min_pixels: int, radius: float = 0.02) -> tuple[np.ndarray, int] | None:
    """Position and pixel count of the blob whose colour channel dominates within the target's
    height band; None if too few pixels.

    Depth places each pixel in 3D (the red robot arm is outside the bands); each surface
    point is pushed one (known) object radius further along its pixel ray, and the
    estimate is the median of those, at the target's known centre height if it has one.
    """
    image = rgb.astype(np.float32)
    main = image[..., target.channel]
    others = np.delete(image, target.channel, axis=-1)
    mask = (main > 40.0) & np.all(main[..., None] > dominance * others, axis=-1)
    rows, cols = np.nonzero(mask)
    if rows.size < min_pixels:
        return None
    points = back_project(rows, cols, depth[rows, cols].astype(np.float64), calib, depth.shape)
    keep = ((points[:, 2] > target.min_z) & (points[:, 2] < target.max_z)
            & (np.abs(points[:, 0]) < 0.6) & (points[:, 1] > 0.3))
    if keep.sum() < min_pixels:
        return None
    points = points[keep]
    rays = points - calib[0:3]
    centres = points + radius * rays / np.linalg.norm(rays, axis=1, keepdims=True)
    estimate = np.median(centres, axis=0)
    if target.centre_height is not None:
        estimate[2] = target.centre_height
    return estimate, int(keep.sum())


class PerceptionExpertPolicy:
    """The scripted expert acting on the goal position estimated from RGB-D instead of the state."""

    Params = PerceptionParams
    version = "1"

    def __init__(self, **params: Any) -> None:
        self.params = PerceptionParams(**params)
        self._expert = ExpertPolicy()
        self._targets: dict[str, Target] = {}
        self._estimates: list[dict[str, np.ndarray]] = []
        self._detections: list[dict[str, int]] = []
        self._errors: list[dict[str, float]] = []
        self._seen: list[dict[str, float]] = []  # this request's detections, per slot (the step trace)

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Refuse tasks its colour detector does not know, or that have no depth camera, saying what to add."""
        if task.env_name not in PERCEIVABLE:
            return f"its colour detector knows {', '.join(PERCEIVABLE)} only"
        if not any(camera.depth for camera in task.cameras):
            return "it needs a camera with depth: add `cameras: [{name: front, width: 128, height: 128, depth: true}]`"
        return None

    def reset(self, context: PolicyContext) -> None:
        """Reset the expert and forget every slot's estimates and detections."""
        self._expert.reset(context)
        self._targets = PERCEIVABLE[context.task.env_name]
        self._estimates = [{} for _ in context.seeds]
        self._detections = [{name: 0 for name in self._targets} for _ in context.seeds]
        self._errors = [{} for _ in context.seeds]
        self._seen = [{} for _ in context.seeds]

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """The expert's actions with object positions estimated from RGB-D instead of read from the state."""
        camera = self.params.camera
        needed = [f"image.{camera}", f"depth.{camera}", f"calib.{camera}"]
        missing = [name for name in needed if name not in observations]
        if missing:
            raise KeyError(f"perception-expert needs observation(s) {', '.join(missing)}")
        states = np.array(observations["state"], dtype=np.float64, copy=True)
        for row, slot in enumerate(observations["env_ids"]):
            rgb, depth, calib = (observations[name][row] for name in needed)
            for name, target in self._targets.items():
                dominance = max(self.params.dominance, target.dominance or 0.0)
                found = detect(rgb, depth, calib, target, dominance, self.params.min_pixels)
                self._seen[slot][f"detected.{name}"] = float(found is not None)
                if found is not None:
                    self._estimates[slot][name] = found[0]
                    self._detections[slot][name] += 1
            truth = {"object": states[row, 4:7], "goal": states[row, 36:39]}
            for name, estimate in self._estimates[slot].items():  # how far perception is off (diagnostic)
                self._errors[slot][name] = float(np.linalg.norm(estimate - truth[name]))
                self._seen[slot][f"error_m.{name}"] = self._errors[slot][name]
            # Never seen: the goal defaults to the middle of the table, as a real stack would report.
            states[row, 36:39] = self._estimates[slot].get("goal", np.array([0.0, 0.65, PUCK_HEIGHT]))
        return self._expert.act({**observations, "state": states})

    def step_trace(self, slot: int) -> dict[str, float]:
        """Per request: ``detected.<target>`` (1 if this frame found it), ``error_m.<target>`` (the
        current estimate's distance from the truth, where there is an estimate)."""
        return dict(self._seen[slot])

    def episode_info(self, slot: int) -> dict[str, Any]:
        """Per episode: frames with a detection, and the last estimate's error in metres, per target."""
        return {"detections": dict(self._detections[slot]),
                "estimate_error_m": {k: round(v, 4) for k, v in self._errors[slot].items()}}
