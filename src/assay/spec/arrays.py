"""Array specs that validate and generate values (dm_env's ``specs.Array`` and ``BoundedArray``).

A task says what its observations and actions are with these (``TaskSpec.observation_spec()``,
``TaskSpec.action_spec()``), so the runner, the contract handshake, the conformance kit and the
Ray policy actor read shapes, dtypes and bounds from one place instead of re-deriving them from
``state_dim``, ``cameras`` and ``action``.

A floating-point spec accepts any floating dtype (a backend may hand out float32 or float64; the
spec's own dtype is what :meth:`Array.generate_value` makes); every other spec wants its exact
dtype (camera frames are ``uint8``). Messages are the named constants below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from assay.annotations import public_api
from assay.errors import SpecError

STATE = "state"  # the observation key of the state vector
# The observation key of the scene's low-dimensional state a backend may give beside the robot's (LIBERO: the
# goal's objects' and targets' positions), recorded as ``observation.environment_state`` (LeRobot's name).
ENVIRONMENT_STATE = "environment_state"
IMAGE_PREFIX = "image."  # image.<camera>: (H, W, 3) uint8 frames
DEPTH_PREFIX = "depth."  # depth.<camera>: (H, W) float32 metres

SHAPE_MISMATCH = "{name}: shape {shape}, expected {expected}"
DTYPE_MISMATCH = "{name}: dtype {dtype}, expected {expected}"
NOT_FINITE = "{name}: contains NaN or infinity"
OUT_OF_BOUNDS = "{name}: values outside [{minimum}, {maximum}]"


@public_api
@dataclass(frozen=True)
class Array:
    """An array of a fixed ``shape`` and ``dtype``; ``name`` says which one in messages."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    name: str = ""

    @property
    def floating(self) -> bool:
        """Whether the spec is floating point (then any floating dtype conforms, and values must be finite)."""
        return self.dtype.kind == "f"

    def dtype_conforms(self, dtype: np.dtype[Any]) -> bool:
        """Whether arrays of ``dtype`` conform: any floating dtype for a floating spec, else this exact one."""
        return dtype.kind == "f" if self.floating else dtype == self.dtype

    def conforms(self, value: Any) -> bool:
        """Whether ``value`` has the spec's shape and a conforming dtype (values are not looked at)."""
        array = np.asarray(value)
        return array.shape == self.shape and self.dtype_conforms(array.dtype)

    def validate(self, value: Any) -> np.ndarray:
        """``value`` as an array; a SpecError (the constants above) when its shape, dtype or values do not fit."""
        array = np.asarray(value)
        if array.shape != self.shape:
            raise SpecError(SHAPE_MISMATCH.format(name=self.name, shape=array.shape, expected=self.shape))
        if not self.dtype_conforms(array.dtype):
            expected = "floating point" if self.floating else str(self.dtype)
            raise SpecError(DTYPE_MISMATCH.format(name=self.name, dtype=array.dtype, expected=expected))
        if self.floating and not np.all(np.isfinite(array)):
            raise SpecError(NOT_FINITE.format(name=self.name))
        return array

    def generate_value(self) -> np.ndarray:
        """A value that conforms: zeros of the spec's shape and dtype."""
        return np.zeros(self.shape, self.dtype)


@public_api
@dataclass(frozen=True)
class BoundedArray(Array):
    """An :class:`Array` whose values lie in ``[minimum, maximum]`` (scalars, for every element)."""

    minimum: float = -np.inf
    maximum: float = np.inf

    def validate(self, value: Any) -> np.ndarray:
        """As :meth:`Array.validate`, and every value within the bounds."""
        array = super().validate(value)
        if np.any(array < self.minimum) or np.any(array > self.maximum):
            raise SpecError(OUT_OF_BOUNDS.format(name=self.name, minimum=self.minimum, maximum=self.maximum))
        return array

    def generate_value(self) -> np.ndarray:
        """A value that conforms: the minimum everywhere (as dm_env's)."""
        return np.full(self.shape, self.minimum, self.dtype)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A uniform draw within the bounds from ``rng`` (finite bounds only)."""
        return rng.uniform(self.minimum, self.maximum, self.shape).astype(self.dtype)
