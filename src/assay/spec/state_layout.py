"""What each number of a backend's state means: positions, rotations, gripper, other.

A learner needs to know which rows of a state are a rotation (to feed it in a continuous form) and which rows
measure the same quantity (to normalise them on one scale). That is the backend's knowledge, declared here as
data, per backend, for the state it records as ``observation.state`` (and, for LIBERO, the
``environment_state`` it records beside it):

* **LIBERO** (openpi's 8-d state): end-effector position (0:3), its orientation as an axis-angle vector
  (3:6: openpi's formula, no sign canonicalisation, so it jumps where the angle passes pi, which it does
  near the hand's usual pointing-down pose), the two finger joints (6:8). Its ``environment_state``: the
  position of each pick-and-place goal predicate's object and target, 6 numbers a predicate.
* **Meta-World** (39-d): hand position (0:3), gripper opening (3), two objects' position and quaternion
  (4:7, 7:11, 11:14, 14:18; a task with one object pads the second with zeros), the same 18 of the previous
  step (18:36), the goal position (36:39). Meta-World's tasks write their quaternions in two orders (MuJoCo's
  w-first and SciPy's w-last); the rotation features below are sign-invariant and continuous in either.
* Any other backend (Gymnasium): one segment of unknown meaning, normalised on one shared scale.

Imports nothing of assay: pure data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Quantity(str, Enum):
    """What a segment of a state measures."""

    POSITION = "position"  # metres (a point, or several points' coordinates)
    AXIS_ANGLE = "axis_angle"  # a rotation vector (3)
    QUATERNION = "quaternion"  # a unit quaternion (4); all zeros where a backend pads an absent object
    GRIPPER = "gripper"  # finger joints or opening
    OTHER = "other"  # unknown meaning

    @property
    def rotation(self) -> bool:
        """Whether the segment is a rotation (fed to a learner as a rotation matrix's first two columns)."""
        return self in (Quantity.AXIS_ANGLE, Quantity.QUATERNION)


ROTATION_WIDTH = {Quantity.AXIS_ANGLE: 3, Quantity.QUATERNION: 4}


@dataclass(frozen=True)
class Segment:
    """Rows ``start:stop`` of a state, one quantity (``proprio``: the robot's own, not the scene's)."""

    name: str
    quantity: Quantity
    start: int
    stop: int
    proprio: bool = True

    def __post_init__(self) -> None:
        width = ROTATION_WIDTH.get(self.quantity)
        if self.stop <= self.start or (width is not None and self.stop - self.start != width):
            raise ValueError(f"segment {self.name}: rows {self.start}:{self.stop} do not fit a {self.quantity.value}")

    @property
    def width(self) -> int:
        """How many rows the segment spans."""
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        """Plain data (a checkpoint stores its layout)."""
        return {"name": self.name, "quantity": self.quantity.value, "start": self.start, "stop": self.stop,
                "proprio": self.proprio}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Segment:
        """The segment ``to_dict`` wrote."""
        return Segment(str(data["name"]), Quantity(data["quantity"]), int(data["start"]), int(data["stop"]),
                       bool(data.get("proprio", True)))


@dataclass(frozen=True)
class StateLayout:
    """A state's segments, in row order, covering rows ``0:dim`` exactly."""

    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        row = 0
        for segment in self.segments:
            if segment.start != row:
                raise ValueError(f"state layout: segment {segment.name} starts at row {segment.start}, not {row}")
            row = segment.stop

    @property
    def dim(self) -> int:
        """The state's number of rows."""
        return self.segments[-1].stop if self.segments else 0

    def select(self, rows: Sequence[int]) -> StateLayout:
        """The layout of ``state[rows]`` (rows in increasing order; a rotation is kept whole or not at all)."""
        kept: list[Segment] = []
        wanted = set(rows)
        at = 0
        for segment in self.segments:
            inside = [r for r in range(segment.start, segment.stop) if r in wanted]
            if not inside:
                continue
            if segment.quantity.rotation and len(inside) != segment.width:
                raise ValueError(f"state layout: rows {inside} cut the rotation {segment.name}")
            kept.append(Segment(segment.name, segment.quantity, at, at + len(inside), segment.proprio))
            at += len(inside)
        if at != len(wanted):
            raise ValueError(f"state layout: rows {sorted(wanted)} are not all within 0:{self.dim}")
        return StateLayout(tuple(kept))

    def then(self, other: StateLayout, prefix: str) -> StateLayout:
        """This layout followed by ``other`` (its segment names prefixed), for a concatenated input."""
        shifted = tuple(Segment(f"{prefix}{s.name}", s.quantity, s.start + self.dim, s.stop + self.dim, s.proprio)
                        for s in other.segments)
        return StateLayout(self.segments + shifted)

    def to_list(self) -> list[dict[str, Any]]:
        """Plain data (a checkpoint stores its layout)."""
        return [segment.to_dict() for segment in self.segments]

    @staticmethod
    def from_list(data: Iterable[Mapping[str, Any]]) -> StateLayout:
        """The layout ``to_list`` wrote."""
        return StateLayout(tuple(Segment.from_dict(item) for item in data))


def _segments(*parts: tuple[str, Quantity, int, bool]) -> StateLayout:
    """A layout from (name, quantity, width, proprio) parts in row order."""
    segments, row = [], 0
    for name, quantity, width, proprio in parts:
        segments.append(Segment(name, quantity, row, row + width, proprio))
        row += width
    return StateLayout(tuple(segments))


P, AA, Q, G = Quantity.POSITION, Quantity.AXIS_ANGLE, Quantity.QUATERNION, Quantity.GRIPPER
_METAWORLD_STEP = (("hand", P, 3, True), ("gripper", G, 1, True), ("object1", P, 3, False),
                   ("object1_quat", Q, 4, False), ("object2", P, 3, False), ("object2_quat", Q, 4, False))
LAYOUTS: dict[str, StateLayout] = {
    "libero": _segments(("eef", P, 3, True), ("eef_axis_angle", AA, 3, True), ("fingers", G, 2, True)),
    "metaworld": _segments(*_METAWORLD_STEP, *((f"previous_{n}", q, w, p) for n, q, w, p in _METAWORLD_STEP),
                           ("goal", P, 3, False)),
}


def backend_of(task_ids: Iterable[str]) -> str:
    """The one backend of these task ids (``libero/object/x@2`` -> ``libero``); ValueError for several or none."""
    backends = sorted({task.split("/", 1)[0] for task in task_ids})
    if len(backends) != 1:
        raise ValueError(f"one backend's tasks expected, got {', '.join(backends) or 'none'}")
    return backends[0]


def state_layout(backend: str, dim: int) -> StateLayout:
    """The layout of a backend's ``dim``-row state; one segment of unknown meaning for a backend (or a
    dimension) not declared here."""
    layout = LAYOUTS.get(backend)
    if layout is not None and layout.dim == dim:
        return layout
    return StateLayout((Segment("state", Quantity.OTHER, 0, dim),)) if dim > 0 else StateLayout(())


def environment_layout(backend: str, dim: int) -> StateLayout:
    """The layout of a backend's ``environment_state`` (LIBERO: every goal object's and target's position)."""
    if dim == 0:
        return StateLayout(())
    if backend == "libero" and dim % 3 == 0:
        return StateLayout((Segment("goal_positions", Quantity.POSITION, 0, dim, proprio=False),))
    return StateLayout((Segment("environment", Quantity.OTHER, 0, dim, proprio=False),))
