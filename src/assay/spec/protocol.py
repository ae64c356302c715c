"""Protocol manifests: a published evaluation protocol as versioned data with a content hash.

A **protocol** is what a harness does around a policy: which suites and tasks, which initial states and
how many trials per task, the horizon of each suite, the no-op steps before the policy acts, the cameras,
the size they are rendered at and the size the policy receives, how many actions of a chunk run before
the policy is asked again, where the instruction comes from, how success is judged, and which variants
(perturbations) the traversal visits. A manifest writes all of that down
(``spec/protocols/NAME.vVERSION.json``), with where each value was read (``sources``) and what Assay does not
reproduce (``not_reproduced``).

* **The hash** is ``sha256:`` + the SHA-256 of the canonical JSON of the manifest's *normative* fields
  (``NORMATIVE``: what is run). ``title``, ``sources`` and ``notes`` are documentation and are left out, so
  correcting a citation keeps the hash; changing anything that is run changes it (and must bump ``version``).
  A manifest file records its hash; one whose recorded hash is not its content's is refused in one line.
* **Knobs** (``KNOBS``): the named settings ``assay protocol diff`` switches one at a time: ``horizon`` (per
  suite), ``replan`` (actions of a chunk executed per query; None: the whole chunk), ``image`` (cameras, the
  size rendered, the size the policy receives and who resizes), ``settle`` (no-op steps after reset),
  ``prompt`` (``task``: the task's own instruction, LIBERO's ``task.language`` derived from the BDDL file
  *name*, as openpi's, OpenVLA-OFT's and LeRobot's scripts send; ``variant``: the instruction the variant
  defines, a perturbed BDDL file's ``:language``), ``noise`` (how sensor-noise variants are realised:
  ``upstream``, the benchmark's own image corruptions, or ``assay``, Assay's procedural Gaussian noise) and
  ``renderer`` (``benchmark``: the benchmark's own drawing; ``fast``: without shadows and reflections).
* **Variants**: each entry is a factor request (``{}`` is nominal) with a label, optionally its benchmark
  category and level, the upstream variant it stands for, and the tasks it belongs to (a released variant
  set such as LIBERO-Plus's lists each variant for one task; unset: every task of the manifest).

Nothing here runs anything: ``assay.protocols`` builds campaigns from a manifest, ``assay.metrics.stamp`` judges
a campaign against one.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from assay.errors import ManifestError
from assay.spec.hashing import canonical_json

SCHEMA_VERSION = 1
NORMATIVE = ("schema_version", "name", "version", "backend", "suites", "knobs", "variants", "variant_set")
KNOBS = ("horizon", "replan", "image", "settle", "prompt", "noise", "renderer")
_HASH = r"^sha256:[0-9a-f]{64}$"
_NAME = r"^[a-z][a-z0-9.\-]*$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ImageKnob(_Frozen):
    """The cameras a policy gets: drawn at ``render`` ([height, width]), received at ``policy_input``.

    ``resize`` says who turns one into the other: ``none`` (the same size), ``resize_with_pad`` (the harness,
    openpi's ``image_tools.resize_with_pad``; Assay does it for a remote policy, its ``image_size`` param) or
    ``policy`` (the policy's own preprocessing: the policy receives the rendered frames)."""

    cameras: tuple[str, ...] = Field(min_length=1)
    render: tuple[int, int]
    policy_input: tuple[int, int]
    resize: Literal["none", "resize_with_pad", "policy"]

    @model_validator(mode="after")
    def _consistent(self) -> ImageKnob:
        if self.resize == "none" and self.policy_input != self.render:
            raise ValueError(f"image: resize 'none' needs policy_input {list(self.policy_input)} equal to render "
                             f"{list(self.render)}")
        if self.resize == "policy" and self.policy_input != self.render:
            raise ValueError("image: with resize 'policy' the policy receives the rendered frames; give policy_input "
                             "equal to render (its own preprocessing is not the harness's)")
        return self

    @property
    def received(self) -> str:
        """``WxH`` of the frames the policy receives."""
        return f"{self.policy_input[1]}x{self.policy_input[0]}"


class SuiteSpec(_Frozen):
    """One suite of the traversal: its task ids and their horizon (policy steps after the settle steps)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$")
    tasks: tuple[str, ...] = Field(min_length=1)
    horizon: int = Field(gt=0)


class Knobs(_Frozen):
    """Everything the harness sets besides the tasks and variants (the module doc)."""

    trials_per_task: int = Field(gt=0, description="episodes per task and variant")
    seed: int = Field(ge=0, description="the campaign seed: with fixed initial states, episode i starts from "
                                        "state seed + i")
    settle_steps: int = Field(ge=0)
    image: ImageKnob | None = None
    replan_steps: int | None = Field(default=None, gt=0)
    prompt: Literal["task", "variant"]
    success: Literal["any_step", "at_end"] = "any_step"
    renderer: Literal["benchmark", "fast"] = "benchmark"
    noise: Literal["upstream", "assay"] | None = None
    control_hz: float = Field(gt=0)


class VariantEntry(_Frozen):
    """One variant of the traversal: a factor request, on every task or on ``tasks`` only."""

    label: str = Field(min_length=1)
    factors: dict[str, Any] = Field(default_factory=dict)
    tasks: tuple[str, ...] | None = None
    category: str = ""
    level: int | None = None
    upstream: str | None = None


class VariantSet(_Frozen):
    """A released variant list the manifest is built from, pinned by the SHA-256 of the upstream file."""

    repository: str
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$")
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    count: int = Field(gt=0, description="variants the file lists")


class Manifest(_Frozen):
    """A protocol: the traversal and the knobs (normative, hashed) and their documentation (not hashed)."""

    schema_version: Literal[1] = 1
    name: str = Field(pattern=_NAME, max_length=60)
    version: int = Field(ge=1)
    backend: str
    suites: tuple[SuiteSpec, ...] = Field(min_length=1)
    knobs: Knobs
    variants: tuple[VariantEntry, ...] = (VariantEntry(label="nominal"),)
    variant_set: VariantSet | None = None
    title: str = ""
    sources: dict[str, str] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()
    not_reproduced: tuple[str, ...] = ()
    hash: str | None = Field(default=None, pattern=_HASH)

    @field_validator("suites")
    @classmethod
    def _distinct(cls, suites: tuple[SuiteSpec, ...]) -> tuple[SuiteSpec, ...]:
        names = [s.name for s in suites]
        tasks = [t for s in suites for t in s.tasks]
        if len(set(names)) != len(names) or len(set(tasks)) != len(tasks):
            raise ValueError("a suite or a task is listed twice")
        return suites

    @model_validator(mode="after")
    def _variant_tasks(self) -> Manifest:
        known = set(self.task_ids())
        for entry in self.variants:
            unknown = sorted(set(entry.tasks or ()) - known)
            if unknown:
                raise ValueError(f"variant {entry.label!r} names task {unknown[0]}, which no suite lists")
        if not self.variants and self.variant_set is None:
            raise ValueError("a manifest lists variants (nominal: [{'label': 'nominal'}]) or names a variant_set")
        labels = [v.label for v in self.variants]
        if len(set(labels)) != len(labels):
            raise ValueError("two variants share a label")
        return self

    @property
    def ref(self) -> str:
        """``name@version``."""
        return f"{self.name}@{self.version}"

    def normative(self) -> dict[str, Any]:
        """What is run: the fields the hash covers."""
        data = self.model_dump(mode="json")
        return {key: data[key] for key in NORMATIVE}

    def content_hash(self) -> str:
        """``sha256:`` + the SHA-256 of the canonical JSON of the normative fields."""
        import hashlib

        return "sha256:" + hashlib.sha256(canonical_json(self.normative()).encode("utf-8")).hexdigest()

    def task_ids(self, suites: tuple[str, ...] | None = None) -> list[str]:
        """The task ids of these suites (None: all), in the manifest's order."""
        return [t for s in self.chosen(suites) for t in s.tasks]

    def chosen(self, suites: tuple[str, ...] | None) -> tuple[SuiteSpec, ...]:
        """The suites named (None or empty: all); a one-line ManifestError naming the valid ones."""
        if not suites:
            return self.suites
        names = [s.name for s in self.suites]
        unknown = [s for s in suites if s not in names]
        if unknown:
            raise ManifestError(f"protocol {self.ref} has no suite {unknown[0]!r}; valid: {', '.join(names)}")
        return tuple(s for s in self.suites if s.name in suites)

    def horizon_of(self, task: str) -> int:
        """The horizon of ``task``'s suite."""
        return next(s.horizon for s in self.suites if task in s.tasks)

    def cells(self, suites: tuple[str, ...] | None = None) -> list[tuple[str, VariantEntry]]:
        """Every (task, variant) pair of the traversal, task by task in the manifest's order."""
        return [(task, entry) for task in self.task_ids(suites) for entry in self.variants
                if entry.tasks is None or task in entry.tasks]

    def checked(self) -> Manifest:
        """This manifest with its hash filled in; ManifestError if it records another hash than its content's."""
        actual = self.content_hash()
        if self.hash is not None and self.hash != actual:
            raise ManifestError(f"protocol manifest {self.ref}: its recorded hash {self.hash} is not the hash of its "
                                f"content, {actual}; a changed protocol is a new version (bump 'version')")
        return self.model_copy(update={"hash": actual})


class ProtocolRef(_Frozen):
    """What a campaign says it runs: a manifest by name, version and hash, and the suites it covers (all: None)."""

    name: str = Field(pattern=_NAME)
    version: int = Field(ge=1)
    hash: str = Field(pattern=_HASH)
    suites: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        """``name@version`` and the suites when a subset (``openpi-libero@1 (spatial)``)."""
        part = f" ({', '.join(self.suites)})" if self.suites else ""
        return f"{self.name}@{self.version}{part}"


def parse_manifest(data: Any, source: str) -> Manifest:
    """A manifest from JSON data, its hash checked (``Manifest.checked``); one-line ManifestError otherwise."""
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the manifest"
        raise ManifestError(f"{source}: {where}: {first['msg']}") from None
    return manifest.checked()


def read_manifest(path: str | Path) -> Manifest:
    """A manifest from a JSON file (one-line errors for a missing file, bad JSON, a bad field or a wrong hash)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read protocol manifest {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return parse_manifest(data, str(path))


class ProtocolRegistry:
    """Manifests by ``name@version``: an explicit object; registering a ``name@version`` twice raises."""

    def __init__(self, manifests: tuple[Manifest, ...] = ()) -> None:
        self._manifests: dict[tuple[str, int], Manifest] = {}
        for manifest in manifests:
            self.register(manifest)

    def register(self, manifest: Manifest) -> Manifest:
        """Add a manifest (its hash checked); ManifestError for a ``name@version`` already held."""
        manifest = manifest.checked()
        key = (manifest.name, manifest.version)
        if key in self._manifests:
            raise ManifestError(f"protocol {manifest.ref} is registered twice")
        self._manifests[key] = manifest
        return manifest

    def names(self) -> list[str]:
        """Every ``name@version``, sorted."""
        return [f"{n}@{v}" for n, v in sorted(self._manifests)]

    def all(self) -> list[Manifest]:
        """Every manifest, sorted by name and version."""
        return [self._manifests[k] for k in sorted(self._manifests)]

    def get(self, ref: str) -> Manifest:
        """``name@version``, or ``name`` for its latest version; a one-line ManifestError naming the known ones."""
        name, _, version = ref.strip().partition("@")
        versions = sorted(v for n, v in self._manifests if n == name)
        if not versions or (version and (not version.isdigit() or int(version) not in versions)):
            raise ManifestError(f"unknown protocol {ref!r}; known: {', '.join(self.names()) or 'none'} "
                                "(`assay protocol list`)")
        return self._manifests[(name, int(version) if version else versions[-1])]

    def find(self, ref: ProtocolRef) -> Manifest | None:
        """The manifest a campaign's reference names, if held (whatever its hash)."""
        return self._manifests.get((ref.name, ref.version))


@cache
def _shipped() -> tuple[Manifest, ...]:
    folder = resources.files("assay.spec").joinpath("protocols")
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            source = f"assay's manifest spec/protocols/{entry.name}"
            try:
                data = json.loads(entry.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{source}: not JSON ({exc.msg}, line {exc.lineno})") from None
            found.append(parse_manifest(data, source))
    return tuple(found)


def shipped_protocols() -> ProtocolRegistry:
    """A fresh registry of the manifests shipped with Assay (``spec/protocols/*.json``), every hash checked."""
    return ProtocolRegistry(_shipped())

