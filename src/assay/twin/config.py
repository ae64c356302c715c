"""Twin configuration: three named layers (control, dynamics, rendering), each a set of factor values.

A twin is the nominal simulator plus factor values from the catalog of
:mod:`assay.sim.factors`, each factor owned by exactly one layer. Running a twin
means running its :class:`~assay.spec.Variant` (the union of its layers' values),
so every episode already records the twin: its ``variant`` column holds the
values and its ``variant_key`` is the twin's version (a content hash of the
values; ``nominal`` for the untouched simulator). Two twins with the same values
are the same twin whatever they are called.

Twin files load through the campaign loader's machinery (:mod:`assay.spec.loading`): every
mistake is one ``file:line: field: message`` line, an unknown key with the closest valid
names; they are written by the store's one atomic writer (:func:`assay.store.write_blob`).
"""

from __future__ import annotations

import fnmatch
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from assay.errors import AssayError, SpecError, TwinError
from assay.sim import get_factor, resolve_variant
from assay.spec import TaskSpec, Variant, load_yaml
from assay.spec.loading import validation_error
from assay.store import write_blob


class Layer(str, Enum):
    """The layers of a twin: how commands become motion, how the world responds, and how it looks."""

    CONTROL = "control"
    DYNAMICS = "dynamics"
    RENDERING = "rendering"


# Which layer owns each factor (glob patterns over the factor catalog). Factors that are
# no subsystem of a twin (initial-state range, observation noise, instruction wording,
# render-time distractors) are left out on purpose: a twin models the robot cell, not the test.
LAYER_PATTERNS: dict[Layer, tuple[str, ...]] = {
    Layer.CONTROL: ("control.gain", "control.latency", "control.frame_skip", "action.noise"),
    Layer.DYNAMICS: ("object.mass", "friction", "joint.damping"),
    Layer.RENDERING: ("light.*", "camera.*", "*.color"),
}


def layer_of(factor: str) -> Layer:
    """The layer that owns ``factor``, or a TwinError listing the layers' factors."""
    get_factor(factor)  # unknown names get the catalog's "did you mean" error
    for layer, patterns in LAYER_PATTERNS.items():
        if any(fnmatch.fnmatchcase(factor, p) for p in patterns):
            return layer
    owned = "; ".join(f"{layer.value}: {', '.join(p)}" for layer, p in LAYER_PATTERNS.items())
    raise TwinError(f"factor {factor} belongs to no twin layer; valid: {owned}")


def check_factor(layer: Layer, factor: str, value: Any) -> Any:
    """``value`` validated for ``factor`` in ``layer``: an unknown factor is a SpecError with the closest names,
    a factor of another layer a ValueError naming its layer, a value out of range the factor's SpecError."""
    owner = layer_of(factor)
    if owner is not layer:
        raise ValueError(f"factor {factor} belongs to the {owner.value} layer, not {layer.value}")
    return get_factor(factor).validate(value)


def _canonical(values: Any) -> Any:
    return list(values) if isinstance(values, tuple) else values


class Twin(BaseModel):
    """A named twin of one task: ``{layer: {factor: value}}``; absent factors keep their nominal value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(default="twin", pattern=r"^[A-Za-z0-9][\w.\-]*$")
    task: str
    control: dict[str, Any] = Field(default_factory=dict)
    dynamics: dict[str, Any] = Field(default_factory=dict)
    rendering: dict[str, Any] = Field(default_factory=dict)

    @field_validator("control", "dynamics", "rendering")
    @classmethod
    def _owned(cls, values: dict[str, Any], info: Any) -> dict[str, Any]:
        layer = Layer(info.field_name)
        return {k: _canonical(check_factor(layer, k, v)) for k, v in sorted(values.items())}

    def layer(self, layer: Layer) -> dict[str, Any]:
        """One layer's factor values."""
        return dict(getattr(self, layer.value))

    def values(self) -> dict[str, Any]:
        """Every factor value of every layer: the campaign's variant request."""
        return {**self.control, **self.dynamics, **self.rendering}

    def variant(self, task: TaskSpec) -> Variant:
        """The twin as a variant of ``task`` (a twin is a variant)."""
        return resolve_variant(self.values(), task)

    @property
    def version(self) -> str:
        """The content hash every episode of this twin records as its ``variant_key``."""
        values = self.values()
        if not values:
            return "nominal"
        return Variant(perturbations=tuple(_perturbations(values))).key

    def with_layer(self, layer: Layer, values: dict[str, Any], name: str | None = None) -> Twin:
        """This twin with one layer replaced (the others untouched)."""
        return self.model_copy(update={layer.value: dict(values), "name": name or self.name})

    def describe(self) -> dict[str, Any]:
        """The twin's name, task, version and layers as a JSON-ready dict."""
        return {"name": self.name, "task": self.task, "version": self.version,
                **{layer.value: self.layer(layer) for layer in Layer}}


def _perturbations(values: dict[str, Any]) -> list[Any]:
    from assay.spec import Perturbation

    out = []
    for name, value in values.items():
        factor = get_factor(name)
        out.append(Perturbation(axis=factor.axis, factor=name, value=factor.validate(value)))
    return out


def nominal_twin(task: str, name: str = "nominal") -> Twin:
    """A twin with every factor at its nominal value."""
    return Twin(name=name, task=task)


def twin_from_values(task: str, values: dict[str, Any], name: str = "twin") -> Twin:
    """Split flat ``{factor: value}`` into layers (e.g. a recorded episode's variant, or a fit)."""
    layers: dict[str, dict[str, Any]] = {layer.value: {} for layer in Layer}
    for factor, value in values.items():
        layers[layer_of(factor).value][factor] = value
    return _build(name=name, task=task, **layers)


def twin_of_record(variant: dict[str, Any], task: str, name: str = "recorded") -> Twin:
    """The twin an episode ran under, from its recorded ``variant`` column."""
    return twin_from_values(task, {p["factor"]: p["value"] for p in variant.get("perturbations", [])}, name)


def _build(**fields: Any) -> Twin:
    try:
        return Twin(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "twin"
        raise TwinError(f"twin {fields.get('name', '?')}: {where}: {first['msg']}") from None


def load_twin(path: str | Path) -> Twin:
    """A twin from YAML: ``name``, ``task``, and optional ``control``/``dynamics``/``rendering`` maps.

    Every mistake is one TwinError ``file:line: field: message`` (:mod:`assay.spec.loading`); an unknown key
    names the closest valid keys and lists them."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TwinError(f"cannot read twin file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data, lines = load_yaml(text, str(path))
    except SpecError as exc:
        raise TwinError(str(exc)) from None
    if not isinstance(data, dict):
        raise TwinError(f"{path}:1: a twin file is a mapping with name, task, control, dynamics, rendering")
    layers = {layer.value for layer in Layer}
    data = {k: ({} if v is None and k in layers else v) for k, v in data.items()}
    for layer in Layer:  # each factor's own line (the model would only know its layer's)
        values = data.get(layer.value)
        for factor, value in (values.items() if isinstance(values, dict) else ()):
            try:
                check_factor(layer, str(factor), value)
            except (AssayError, ValueError) as exc:
                raise TwinError(f"{path}:{lines.get((layer.value, factor), 1)}: {layer.value}: "
                                f"{exc}") from None
    try:
        return Twin.model_validate(data)
    except ValidationError as exc:
        raise TwinError(str(validation_error(exc, str(path), lines, model=Twin))) from None


def save_twin(twin: Twin, path: str | Path) -> Path:
    """Write the twin as YAML atomically (:func:`assay.store.write_blob`: a reader never sees a partial file)."""
    path = Path(path)
    data = {"name": twin.name, "task": twin.task, **{layer.value: twin.layer(layer) for layer in Layer}}
    write_blob(path.parent, path.name, yaml.safe_dump(data, sort_keys=False).encode("utf-8"), what="twin file")
    return path
