"""What a behaviour-cloning network reads and predicts, from the state's layout (``assay.spec.state_layout``).

Three rules, each the fix of a way a learner fails closed-loop while fitting its demonstrations open-loop:

* **Rotations enter in a continuous form.** An axis-angle vector (LIBERO's state: openpi's formula, which
  jumps from about +pi to -pi where the angle passes pi, as it does near the hand's pointing-down pose) or a
  quaternion (whose sign is arbitrary) becomes the first two columns of its rotation matrix, the 6-D form of
  Zhou et al. (2019): continuous everywhere and the same for ``q`` and ``-q``.
* **Normalisation is on each quantity's own scale.** A feature is centred on its mean and divided by its
  standard deviation, floored at ``REL_FLOOR`` of its segment's scale: the largest standard deviation among
  the features of the same quantity (x, y and z of one position share metres), or 1 for a rotation's
  unit-vector entries. So a dimension the data barely moves (the orientation of a hand the expert never
  turns) is not blown up into a huge input the moment the policy moves it a little. A feature the data
  never moves at all carries nothing and is fed as 0.
* **Action dimensions the data never varies are predicted exactly.** A target whose standard deviation over
  the data is at most ``FIXED_TOLERANCE`` (the scripted LIBERO expert's rotation, exactly 0 on every step) is
  not learned: the policy outputs its data value, so small learned noise cannot turn the hand.

The fitted pieces are plain lists in a checkpoint (read back with ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.spec.state_layout import Quantity, Segment, StateLayout

REL_FLOOR = 0.05  # a feature's scale is at least this share of its segment's scale
ROTATION_SCALE = 1.0  # a rotation feature is an entry of a unit vector
FIXED_TOLERANCE = 1e-3  # an action dimension whose std is at most this (of the [-1, 1] box) is kept exact
_CONSTANT = 1e-12  # a feature whose range is below this is constant


def matrix_from_axis_angle(vectors: np.ndarray) -> np.ndarray:
    """(N, 3) rotation vectors -> (N, 3, 3) rotation matrices (Rodrigues' formula; any angle, also above pi)."""
    v = np.asarray(vectors, dtype=np.float64).reshape(-1, 3)
    theta = np.linalg.norm(v, axis=1)
    small = theta < 1e-9
    axis = v / np.where(small, 1.0, theta)[:, None]
    x, y, z = axis[:, 0], axis[:, 1], axis[:, 2]
    zero = np.zeros_like(x)
    k = np.stack([np.stack([zero, -z, y], 1), np.stack([z, zero, -x], 1), np.stack([-y, x, zero], 1)], 1)
    sin, cos = np.sin(theta)[:, None, None], np.cos(theta)[:, None, None]
    matrices: np.ndarray = np.eye(3) + sin * k + (1.0 - cos) * (k @ k)
    matrices[small] = np.eye(3)
    return matrices


def matrix_from_quaternion(quaternions: np.ndarray) -> np.ndarray:
    """(N, 4) quaternions read as (x, y, z, w) -> (N, 3, 3) matrices; the same for ``q`` and ``-q``. A zero
    quaternion (a padded, absent object) gives a zero matrix."""
    q = np.asarray(quaternions, dtype=np.float64).reshape(-1, 4)
    norm = np.linalg.norm(q, axis=1)
    absent = norm < 1e-9
    x, y, z, w = (q / np.where(absent, 1.0, norm)[:, None]).T
    matrices = np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], 1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], 1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], 1),
    ], 1)
    matrices[absent] = 0.0
    return matrices


def six_d(matrices: np.ndarray) -> np.ndarray:
    """(N, 3, 3) -> (N, 6): the first two columns, the continuous 6-D rotation representation."""
    return np.concatenate([matrices[:, :, 0], matrices[:, :, 1]], axis=1)


def _segment_features(raw: np.ndarray, segment: Segment) -> np.ndarray:
    values = raw[:, segment.start:segment.stop]
    if segment.quantity is Quantity.AXIS_ANGLE:
        return six_d(matrix_from_axis_angle(values))
    if segment.quantity is Quantity.QUATERNION:
        return six_d(matrix_from_quaternion(values))
    return np.asarray(values, dtype=np.float64)


def expand(raw: np.ndarray, layout: StateLayout) -> tuple[np.ndarray, list[int]]:
    """(N, dim) states -> (N, F) features (rotations in 6-D form) and each feature's segment index."""
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 2 or raw.shape[1] != layout.dim:
        raise ValueError(f"states of shape (N, {layout.dim}) expected, got {raw.shape}")
    parts, owners = [], []
    for index, segment in enumerate(layout.segments):
        block = _segment_features(raw, segment)
        parts.append(block)
        owners += [index] * block.shape[1]
    features = np.concatenate(parts, axis=1) if parts else np.zeros((len(raw), 0))
    return features, owners


@dataclass(frozen=True)
class InputFeatures:
    """A fitted input map: ``(expand(state) - mean) / scale``, with features the data never moved fed as 0."""

    layout: StateLayout
    mean: np.ndarray  # (F,)
    scale: np.ndarray  # (F,)
    used: np.ndarray  # (F,) bool

    @property
    def width(self) -> int:
        """The number of features the network reads."""
        return len(self.mean)

    @staticmethod
    def fit(raw: np.ndarray, layout: StateLayout) -> InputFeatures:
        """Fit the means, floored scales and used mask to the training states (see the module docstring)."""
        features, owners = expand(raw, layout)
        mean, std = features.mean(axis=0), features.std(axis=0)
        used = np.ptp(features, axis=0) > _CONSTANT * np.maximum(1.0, np.abs(mean))
        segment_scale = np.zeros(len(layout.segments))
        for index, segment in enumerate(layout.segments):
            mine = [f for f, owner in enumerate(owners) if owner == index]
            segment_scale[index] = ROTATION_SCALE if segment.quantity.rotation else float(std[mine].max(initial=0.0))
        floor = np.maximum(REL_FLOOR * segment_scale[owners], _CONSTANT) if owners else np.zeros(0)
        scale = np.where(used, np.maximum(std, floor), 1.0)
        return InputFeatures(layout, mean, scale, used)

    def apply(self, raw: np.ndarray) -> np.ndarray:
        """(N, dim) states -> (N, F) float32 network inputs."""
        features, _ = expand(raw, self.layout)
        return np.where(self.used, (features - self.mean) / self.scale, 0.0).astype(np.float32)

    def to_checkpoint(self) -> dict[str, Any]:
        """Plain lists for a checkpoint."""
        return {"layout": self.layout.to_list(), "mean": [float(v) for v in self.mean],
                "scale": [float(v) for v in self.scale], "used": [bool(v) for v in self.used]}

    @staticmethod
    def from_checkpoint(data: Mapping[str, Any]) -> InputFeatures:
        """The map ``to_checkpoint`` wrote."""
        return InputFeatures(StateLayout.from_list(data["layout"]), np.asarray(data["mean"], dtype=np.float64),
                             np.asarray(data["scale"], dtype=np.float64), np.asarray(data["used"], dtype=bool))


@dataclass(frozen=True)
class ActionHead:
    """Which action dimensions are learned, and the data value of those kept exact."""

    fixed: np.ndarray  # (A,) bool
    values: np.ndarray  # (A,) the data value of each fixed dimension (0 where learned)

    @property
    def learned(self) -> int:
        """How many outputs the network has."""
        return int((~self.fixed).sum())

    @staticmethod
    def fit(actions: np.ndarray) -> ActionHead:
        """Keep exact every dimension whose standard deviation over the data is at most ``FIXED_TOLERANCE``."""
        actions = np.asarray(actions, dtype=np.float64)
        fixed = actions.std(axis=0) <= FIXED_TOLERANCE
        if fixed.all():
            fixed[:] = False  # nothing would be learned: learn them all (a constant is then learned as one)
        return ActionHead(fixed, np.where(fixed, actions.mean(axis=0), 0.0))

    def targets(self, actions: np.ndarray) -> np.ndarray:
        """The learned dimensions of the actions (the network's training targets)."""
        return np.asarray(actions)[:, ~self.fixed]

    def assemble(self, learned: np.ndarray) -> np.ndarray:
        """(N, learned) network outputs -> (N, A) actions, fixed dimensions at their data value."""
        out = np.tile(self.values.astype(np.float32), (len(learned), 1))
        out[:, ~self.fixed] = learned
        return out

    def to_checkpoint(self) -> dict[str, Any]:
        """Plain lists for a checkpoint."""
        return {"fixed": [bool(v) for v in self.fixed], "values": [float(v) for v in self.values]}

    @staticmethod
    def from_checkpoint(data: Mapping[str, Any]) -> ActionHead:
        """The head ``to_checkpoint`` wrote."""
        return ActionHead(np.asarray(data["fixed"], dtype=bool), np.asarray(data["values"], dtype=np.float64))
