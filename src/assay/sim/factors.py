"""The factor catalog: every perturbation factor declared once.

A factor has a name, an axis (visual, behavioral, semantic), a unit, a valid
range, a default (the nominal value), the stage at which it applies (``reset``:
applied at each reset and undone before the next, so environments are reused) and
the backends it applies to. ``resolve_variant`` turns a campaign's
request (``{factor: value}``) into a validated :class:`~assay.spec.Variant`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from assay.errors import SpecError, UnsupportedError
from assay.spec import Axis, Perturbation, TaskSpec, Variant
from assay.spec.libero_catalog import PLUS_CATEGORIES, PLUS_LEVELS
from assay.spec.metaworld_catalog import NO_OBJECT_BODY


class Stage(str, Enum):
    """When a factor is applied: at each reset (and undone before the next)."""

    RESET = "reset"  # applied at each reset, undone before the next; environments are never rebuilt


class Kind(str, Enum):
    """A factor's value type: a float or int in a range, an RGB triple, or one of named choices."""

    FLOAT = "float"
    INT = "int"
    RGB = "rgb"  # three floats in [low, high]
    CHOICE = "choice"


# The levels of the semantic factors; what each does to the words is assay.sim.semantic's (word lists
# semantic-v1). They are plain values here, so the catalogue sits below both the backends and the text layer.
SYNONYM_PARTS = ("nominal", "verbs", "nouns", "both")
FORMS = ("imperative", "declarative", "question", "wish", "object-first")
LENGTHS = ("terse", "nominal", "verbose", "rambling")
REFERRING = ("nominal", "colour", "spatial", "function")
TEMPLATES = ("nominal", "unseen")
CONFLICTS = ("nominal", "same-family", "other-family")
OBJECT_SWAPS = ("nominal", "same-category", "other-category", "wrong-colour")
WITHHELD = ("nominal", "empty", "other-task")
MAX_DISTRACTORS = 3
MAX_TYPO_RATE = 0.5

ALL_BACKENDS = frozenset({"metaworld", "gymnasium", "libero"})
METAWORLD = frozenset({"metaworld"})
ROBOSUITE_TOO = frozenset({"metaworld", "robosuite"})  # robosuite 1.5 applies these itself (sim.robosuite_env)
CONTROL = ALL_BACKENDS | {"robosuite"}  # applied on the campaign's side (sim.perturbed), whatever the backend
LIBERO = frozenset({"libero"})
PRO = ("nominal", "pro")


@dataclass(frozen=True)
class Factor:
    """One factor of the catalogue: its axis, value type, unit, range, default, stage, backends and description."""

    name: str
    axis: Axis
    kind: Kind
    unit: str
    low: float
    high: float
    default: Any
    stage: Stage
    description: str
    backends: frozenset[str] = METAWORLD
    choices: tuple[str, ...] = ()
    needs_object: bool = False  # changes the manipulated object's body: no-op (refused) on a task without one
    category: str = ""  # a benchmark's own grouping of the factor (LIBERO-Plus's seven categories)

    @property
    def valid(self) -> str:
        """What values the factor takes, in words (for one-line errors and ``assay factors``)."""
        if self.kind is Kind.CHOICE:
            return "one of " + ", ".join(self.choices)
        if self.kind is Kind.RGB:
            return f"[r, g, b] with each in [{self.low:g}, {self.high:g}]"
        return f"[{self.low:g}, {self.high:g}] {self.unit}".rstrip()

    def validate(self, value: Any) -> float | int | str | tuple[float, ...]:
        """The value in canonical form, or a one-line SpecError naming the valid range."""
        problem = f"factor {self.name}: value {value!r} is not valid; valid: {self.valid}"
        if self.kind is Kind.CHOICE:
            if value not in self.choices:
                raise SpecError(problem)
            return str(value)
        if self.kind is Kind.RGB:
            if not isinstance(value, (list, tuple)) or len(value) != 3:
                raise SpecError(problem)
            values = tuple(self._number(v, problem) for v in value)
            if any(not self.low <= v <= self.high for v in values):
                raise SpecError(problem)
            return values
        number = self._number(value, problem)
        if self.kind is Kind.INT:
            if number != int(number):
                raise SpecError(problem)
            number = int(number)
        if not self.low <= number <= self.high:
            raise SpecError(problem)
        return number

    @staticmethod
    def _number(value: Any, problem: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(problem)
        return float(value)


def _f(name, axis, kind, unit, low, high, default, stage, description, backends=METAWORLD, choices=()):
    return Factor(name, Axis(axis), Kind(kind), unit, low, high, default, Stage(stage), description, backends, choices,
                  needs_object=name in OBJECT_FACTORS)


OBJECT_FACTORS = frozenset({"object.mass", "object.color"})


PARAPHRASE_STYLES = ("nominal", "synonym", "reorder", "terse", "verbose", "distractor", "typos", "indirect")

# The semantic axis: rewrites of the instruction (assay.sim.semantic, word lists semantic-v1). Another
# backend's semantic factors (e.g. LIBERO-PRO's) go in their own block below; the order here is display order.
SEMANTIC_FACTORS = (
    _f("instruction.paraphrase", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "instruction rewritten in a fixed style, ordered by distance from the "
       "template", ALL_BACKENDS, PARAPHRASE_STYLES),
    _f("instruction.synonym", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "verbs and/or object nouns swapped for synonyms drawn from the episode seed", ALL_BACKENDS, SYNONYM_PARTS),
    _f("instruction.distractor", "semantic", "int", "clauses", 0, MAX_DISTRACTORS, 0, "reset",
       "irrelevant clauses appended ('... and ignore the red block'), drawn from the episode seed", ALL_BACKENDS),
    _f("instruction.form", "semantic", "choice", "", 0, 0, "imperative", "reset",
       "sentence form and word order: imperative, declarative, question, wish, object first", ALL_BACKENDS, FORMS),
    _f("instruction.typo_rate", "semantic", "float", "per letter", 0.0, MAX_TYPO_RATE, 0.0, "reset",
       "character noise: each letter swapped, dropped, doubled or mistyped with this probability", ALL_BACKENDS),
    _f("instruction.length", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "instruction length: terse (content words only), nominal, verbose or rambling padding", ALL_BACKENDS, LENGTHS),
    _f("instruction.referring", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "the goal object named by a referring expression: its rendered colour, a place, or its function", ALL_BACKENDS,
       REFERRING),
    _f("instruction.template", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "the instruction wrapped in a template never used in training, drawn from the episode seed", ALL_BACKENDS,
       TEMPLATES),
    _f("instruction.conflict", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "the words name another task of the suite (same or other family); scored as the task declares", METAWORLD,
       CONFLICTS),
    _f("instruction.object", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "the goal object renamed: another object of its category, of another category, or a wrong colour", ALL_BACKENDS,
       OBJECT_SWAPS),
    _f("instruction.withheld", "semantic", "choice", "", 0, 0, "nominal", "reset",
       "the instruction withheld (a language-shortcut probe, assay validity): empty, or another task's (of the same "
       "LIBERO suite, or another Meta-World task), drawn from the episode seed; scored on the scene's own task",
       ALL_BACKENDS, WITHHELD),
)

def _plus(name, axis, description):
    return replace(_f(name, axis, "int", "level", 0, PLUS_LEVELS, 0, "reset", description, LIBERO),
                   category=PLUS_CATEGORIES[name])


P = "LIBERO-Plus-style (procedural)"
PLUS_FACTORS = (
    _plus("libero_plus.layout", "behavioral", f"{P} objects layout: the goal's objects moved 2 cm x level in a "
          "direction drawn from the seed"),
    _plus("libero_plus.camera", "visual", f"{P} camera viewpoint: the agent view moved 2.5 cm x level and turned "
          "2.5 deg x level (direction and axis drawn from the seed)"),
    _plus("libero_plus.robot_init", "behavioral", f"{P} robot initial state: each arm joint offset by 0.03 rad x "
          "level (signs drawn from the seed)"),
    _plus("libero_plus.language", "semantic", f"{P} language: the instruction rewritten, meaning kept and "
          "grammatical, more with each level (padding, verbs and form, context sentences)"),
    _plus("libero_plus.light", "visual", f"{P} light: intensity x (1 +- 0.12 level), direction tilted 6 deg x "
          "level, colour tinted up to 6% x level"),
    _plus("libero_plus.background", "visual", f"{P} background: table, floor and walls tinted 12% x level; from "
          "level 3 their textures exchanged"),
    _plus("libero_plus.noise", "visual", f"{P} sensor noise: Gaussian noise of 4/255 x level on every camera "
          "frame, per step"),
    replace(_f("libero_plus.corruption", "visual", "int", "index", 0, 50, 0, "reset",
               "LIBERO-Plus's released sensor noise by its index (…_noise_N): 1-10 motion blur (refused: needs "
               "ImageMagick), 11-20 gaussian blur, 21-30 zoom blur, 31-40 fog, 41-50 glass blur at severity 1-10, "
               "on the agent view only, per step", LIBERO), category=PLUS_CATEGORIES["libero_plus.corruption"]),
)

FACTORS: dict[str, Factor] = {
    f.name: f
    for f in (
        # visual
        _f("light.intensity", "visual", "float", "x nominal", 0.0, 5.0, 1.0, "reset",
           "scale of every light's diffuse and specular", ROBOSUITE_TOO),
        _f("light.azimuth", "visual", "float", "deg", -180.0, 180.0, 0.0, "reset",
           "rotation of every light's direction about the vertical; with shadows off (as Assay renders) it moves "
           "shading only, about 1-3/255 per pixel: use light.intensity or light.color for a visible change"),
        _f("light.color", "visual", "rgb", "x nominal", 0.0, 3.0, (1.0, 1.0, 1.0), "reset",
           "per-channel scale of the lights' diffuse colour"),
        _f("camera.yaw", "visual", "float", "deg", -60.0, 60.0, 0.0, "reset",
           "rendered camera's azimuth offset about the table centre"),
        _f("camera.pitch", "visual", "float", "deg", -30.0, 30.0, 0.0, "reset", "rendered camera's elevation offset"),
        _f("camera.distance", "visual", "float", "m", -0.6, 0.8, 0.0, "reset",
           "rendered camera's distance offset from the table centre"),
        _f("camera.fovy", "visual", "float", "deg", 20.0, 90.0, 45.0, "reset",
           "rendered camera's vertical field of view"),
        _f("table.color", "visual", "rgb", "rgb", 0.0, 1.0, (1.0, 1.0, 1.0), "reset",
           "table material colour (multiplies its texture)"),
        _f("object.color", "visual", "rgb", "rgb", 0.0, 1.0, (1.0, 0.0, 0.0), "reset",
           "colour of the manipulated object's geoms"),
        _f("background.color", "visual", "rgb", "rgb", 0.0, 1.0, (0.5, 0.5, 0.5), "reset", "colour of floor and walls"),
        _f("distractor.count", "visual", "int", "objects", 0, 3, 0, "reset",
           "coloured blocks drawn on the table (seen, never touched)"),
        # behavioral
        _f("object.init_range", "behavioral", "float", "x nominal", 0.25, 2.0, 1.0, "reset",
           "scale of the object/goal initial-position range about its centre"),
        _f("object.mass", "behavioral", "float", "x nominal", 0.1, 10.0, 1.0, "reset",
           "mass (and inertia) of the manipulated object"),
        _f("friction", "behavioral", "float", "x nominal", 0.1, 3.0, 1.0, "reset", "sliding friction of every geom",
           ROBOSUITE_TOO),
        _f("joint.damping", "behavioral", "float", "x nominal", 0.0, 10.0, 1.0, "reset", "damping of every joint"),
        _f("control.gain", "behavioral", "float", "x nominal", 0.25, 4.0, 1.0, "reset",
           "end-effector displacement per unit action (the controller's gain)"),
        _f("control.frame_skip", "behavioral", "int", "physics steps", 1, 20, 5, "reset",
           "physics steps per action (control rate = 1 / (frame_skip x 2.5 ms))"),
        _f("action.noise", "behavioral", "float", "std", 0.0, 1.0, 0.0, "reset",
           "Gaussian noise added to each applied action", CONTROL),
        _f("observation.noise", "behavioral", "float", "std", 0.0, 0.2, 0.0, "reset",
           "Gaussian noise added to the state the policy sees", CONTROL),
        _f("control.latency", "behavioral", "int", "steps", 0, 10, 0, "reset",
           "actions are applied this many steps late", CONTROL),
        # semantic
        *SEMANTIC_FACTORS,
        # LIBERO-PRO (assay.sim.libero_pro): one factor is its shipped suite; several, or environment, the scene
        # upstream's generator writes (libero.task combines with none)
        _f("libero.object", "visual", "choice", "", 0, 0, "nominal", "reset",
           "LIBERO-PRO object perturbation: objects replaced by look-alikes of other colour, size or "
           "texture", LIBERO, PRO),
        _f("libero.environment", "visual", "choice", "", 0, 0, "nominal", "reset",
           "LIBERO-PRO environment perturbation: the scene's table replaced by another (upstream's choice: the "
           "living-room table); generated, so each episode's layout is sampled from its seed", LIBERO, PRO),
        _f("libero.swap", "behavioral", "choice", "", 0, 0, "nominal", "reset",
           "LIBERO-PRO position perturbation: objects' initial positions swapped (the layout changes)", LIBERO, PRO),
        _f("libero.language", "semantic", "choice", "", 0, 0, "nominal", "reset",
           "LIBERO-PRO language perturbation: the instruction rephrased (the perturbed BDDL file's :language, "
           "which openpi's and LeRobot's scripts do not send), the task unchanged", LIBERO, PRO),
        _f("libero.task", "semantic", "choice", "", 0, 0, "nominal", "reset",
           "LIBERO-PRO task perturbation: another goal in the same scene, with its instruction; combines with no "
           "other LIBERO-PRO factor", LIBERO, PRO),
        # Where an episode's layout comes from: the benchmark's fixed initial state (seed % 50), or LIBERO's own
        # placement initialiser drawing a new one from the seed (as upstream's generate_init_states.py did)
        _f("libero.init", "behavioral", "choice", "", 0, 0, "fixed", "reset",
           "LIBERO initial layout: the benchmark's fixed initial state (seed % its count), or sampled: a new layout "
           "drawn from the episode seed by LIBERO's own placement initialiser (scenes beyond the fixed 50)",
           LIBERO, ("fixed", "sampled")),
        # LIBERO-Plus (assay.sim.libero_plus): seven categories, a level each, drawn from the episode seed
        *PLUS_FACTORS,
    )
}


def get_factor(name: str) -> Factor:
    """The factor named ``name``; an unknown name is a SpecError with the closest names."""
    try:
        return FACTORS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(FACTORS), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SpecError(f"unknown factor {name!r}; {hint}`assay factors` lists all {len(FACTORS)}") from None


def not_applicable(factor: Factor, task: TaskSpec) -> str | None:
    """Why ``factor`` cannot change anything on ``task`` (None when it applies)."""
    if task.backend not in factor.backends:
        return f"backend {task.backend}; it applies to: {', '.join(sorted(factor.backends))}"
    if factor.needs_object and task.backend == "metaworld" and task.env_name in NO_OBJECT_BODY:
        return "the task has no object body for it to change (it would be a silent no-op)"
    if factor.name == "libero_plus.layout" and not _moves_an_object(task):
        return "its goal moves no object (it only opens, closes or turns something on), so there is nothing to move"
    return None


def _moves_an_object(task: TaskSpec) -> bool:
    from assay.spec.libero_catalog import libero_entry

    return any(p[0] in ("in", "on") and len(p) == 3 for p in libero_entry(task.env_name)["goal"])


def object_free_tasks() -> list[str]:
    """The Meta-World task ids (``metaworld/<name>@1``) where object.mass and object.color cannot apply."""
    return sorted(f"metaworld/{name.removesuffix('-v3')}@1" for name in NO_OBJECT_BODY)


def resolve_variant(request: dict[str, Any], task: TaskSpec) -> Variant:
    """Validate a ``{factor: value}`` request against the catalog, the task's backend and its scene."""
    perturbations = []
    for name, value in request.items():
        factor = get_factor(str(name))
        why = not_applicable(factor, task)
        if why is not None:
            raise UnsupportedError(f"factor {factor.name} does not apply to {task.id}: {why}")
        value = factor.validate(value)
        if factor.name == "instruction.conflict" and value != "nominal" and task.conflict_scoring == "instructed":
            raise UnsupportedError(
                f"factor instruction.conflict: {task.id} declares conflict_scoring 'instructed', but a {task.backend} "
                "scene holds one task and cannot score the instructed one; valid for it: conflict_scoring 'marked'")
        perturbations.append(Perturbation(axis=factor.axis, factor=factor.name, value=value))
    return Variant(perturbations=tuple(perturbations))


def value_of(variant: Variant, name: str) -> Any:
    """The variant's value for a factor, or the factor's default."""
    for perturbation in variant.perturbations:
        if perturbation.factor == name:
            return perturbation.value
    return FACTORS[name].default
