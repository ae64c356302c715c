"""Perturbation and Variant records: a variant is a set of (axis, factor, value).

Only the records live here; applying a perturbation to a simulator belongs to
``assay.sim``. The empty variant is ``nominal``.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, field_validator

from assay.annotations import public_api
from assay.spec.hashing import canonical_json, content_hash


class Axis(str, Enum):
    """The axis a perturbation acts on: what the robot sees, how the world behaves, or what it is told."""

    VISUAL = "visual"
    BEHAVIORAL = "behavioral"
    SEMANTIC = "semantic"


@public_api
class Perturbation(BaseModel):
    """One factor set to one value on one axis."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: Axis
    factor: str
    value: float | int | str | tuple[float, ...]

    def label(self) -> str:
        """``factor=value``, the value as canonical JSON."""
        value = self.value if not isinstance(self.value, tuple) else list(self.value)
        return f"{self.factor}={canonical_json(value)}"


@public_api
class Variant(BaseModel):
    """A set of perturbations applied at reset, sorted by factor, each factor at most once; the empty set is nominal."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    perturbations: tuple[Perturbation, ...] = ()

    @field_validator("perturbations")
    @classmethod
    def _sorted_unique(cls, perturbations: tuple[Perturbation, ...]) -> tuple[Perturbation, ...]:
        factors = [p.factor for p in perturbations]
        duplicated = sorted({f for f in factors if factors.count(f) > 1})
        if duplicated:
            raise ValueError(f"factor(s) {', '.join(duplicated)} appear twice in one variant")
        return tuple(sorted(perturbations, key=lambda p: p.factor))

    @property
    def is_nominal(self) -> bool:
        """Whether the variant perturbs nothing."""
        return not self.perturbations

    @property
    def name(self) -> str:
        """Human-readable and unique: ``nominal`` or ``factor=value,factor=value``."""
        return "nominal" if self.is_nominal else ",".join(p.label() for p in self.perturbations)

    @property
    def key(self) -> str:
        """The key episodes record: ``nominal``, else the content hash of the perturbations."""
        return "nominal" if self.is_nominal else content_hash(self.model_dump(mode="json"))


NOMINAL = Variant()
