"""Perturbation and Variant records: a variant is a set of (axis, factor, value).

Only the records live here; applying a perturbation to a simulator belongs to
``assay.sim``. The empty variant is ``nominal``.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, field_validator

from assay.spec.hashing import canonical_json, content_hash


class Axis(str, Enum):
    VISUAL = "visual"
    BEHAVIORAL = "behavioral"
    SEMANTIC = "semantic"


class Perturbation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    axis: Axis
    factor: str
    value: float | int | str | tuple[float, ...]

    def label(self) -> str:
        value = self.value if not isinstance(self.value, tuple) else list(self.value)
        return f"{self.factor}={canonical_json(value)}"


class Variant(BaseModel):
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
        return not self.perturbations

    @property
    def name(self) -> str:
        """Human-readable and unique: ``nominal`` or ``factor=value,factor=value``."""
        return "nominal" if self.is_nominal else ",".join(p.label() for p in self.perturbations)

    @property
    def key(self) -> str:
        return "nominal" if self.is_nominal else content_hash(self.model_dump(mode="json"))


NOMINAL = Variant()
