"""The per-layer trace: which step columns say what each layer did at each step, and its format version.

One trace hangs every layer of an episode on one clock: the policy (its answers, requests, latency), the
action processing between the policy and the simulator (chunk scheduling, latency injection, noise, clipping,
the safety filter's verdicts), the controller (its target, saturation, tracking error), physics (contacts,
penetration, warnings), rendering (frames drawn, what they show, time) and the recorder; the executor's part
(batch formation, set-up, the worker's wait) is per episode, in the step file's metadata.

The trace is step columns of the step file (``layer.<layer>.<field>``, one declared feature family in
``store.features``) plus columns that were there before it and belong to a layer (``action``, ``chunk_id``,
``info.safety.*``, ...). :data:`TRACE_FIELDS` declares each one: its layer, its **stage** (where in a step it
is decided: the policy decides, the action is processed, the controller commands, physics simulates, the
controller's tracking is what physics left, the frame is drawn, the step is recorded), its **kind** (a
``value`` the episode's own inputs determine, compared by ``assay trace diff``; a ``timing`` on the wall
clock; ``context``, how it ran: batch rows, frame indices), its unit and whether it is always recorded or
belongs to an opt-in group (``spec.tracing.TRACE_GROUPS``, a campaign's ``trace: [...]``).

Times are milliseconds on the batch's clock: 0 is when the batch's first reset began, so a batch's episodes
share one timeline. The step file's metadata carries the trace format (``trace_version``, checked on read,
as the step format is) and the episode's trace facts (``trace``: JSON with the groups, the executor's and the
reset's timings). A step file without a trace (written before tracing existed) is one line that says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from assay.errors import TraceError
from assay.lazy import deferred_module
from assay.store.columns import step_matrix
from assay.store.records import EpisodeRecord

if TYPE_CHECKING:
    import pyarrow as pa
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")


class _StepSource(Protocol):
    """What the reader needs of a ``Store`` (not imported: ``store.store`` imports the writer's side, which imports
    this module)."""

    def steps(self, record: EpisodeRecord) -> pa.Table: ...


TRACE_FORMAT = 1  # 1: layers policy, action, controller, physics, render, recorder; executor in the metadata
TRACE_VERSION_KEY = b"trace_version"
TRACE_META_KEY = b"trace"
LAYER_PREFIX = "layer."


class Layer(str, Enum):
    """A layer of the closed loop, in the order a step passes through them."""

    POLICY = "policy"
    ACTION = "action"
    CONTROLLER = "controller"
    PHYSICS = "physics"
    RENDER = "render"
    RECORDER = "recorder"
    EXECUTOR = "executor"


class Stage(IntEnum):
    """Where in a step a field is decided; within one step an earlier stage causes the later ones."""

    DECIDE = 0  # the policy answers the observation
    PROCESS = 1  # the answer becomes the applied action (scheduling, latency, noise, clipping, safety)
    COMMAND = 2  # the controller turns it into a target from the state the step began in
    SIMULATE = 3  # physics integrates: contacts, forces, warnings
    TRACK = 4  # how well the controller followed, which is what physics left
    DRAW = 5  # the frames of the new state
    RECORD = 6  # the recorder keeps the step


class Kind(str, Enum):
    """What a field's value depends on (``assay trace diff`` compares ``value`` fields only)."""

    VALUE = "value"  # the episode's inputs (task, seed, variant, policy) determine it
    TIMING = "timing"  # wall-clock time: differs from run to run
    CONTEXT = "context"  # how the episode ran (batch formation, which video frame), not what it computed


@dataclass(frozen=True)
class TraceField:
    """One declared trace column (or, with ``prefix``, a family of them)."""

    column: str
    layer: Layer
    stage: Stage
    kind: Kind
    unit: str
    description: str
    group: str | None = None  # None: always recorded; else the opt-in group (spec.tracing.TRACE_GROUPS)
    prefix: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The field as JSON data (``assay trace export`` writes the schema beside the data)."""
        return {"column": self.column + ("*" if self.prefix else ""), "layer": self.layer.value,
                "stage": self.stage.name.lower(), "kind": self.kind.value, "unit": self.unit,
                "group": self.group, "description": self.description}


def _f(column: str, layer: Layer, stage: Stage, kind: Kind, unit: str, description: str,
       group: str | None = None, prefix: bool = False) -> TraceField:
    return TraceField(column, layer, stage, kind, unit, description, group, prefix)


P, A, C, PH, R, RC = Layer.POLICY, Layer.ACTION, Layer.CONTROLLER, Layer.PHYSICS, Layer.RENDER, Layer.RECORDER
V, T, X = Kind.VALUE, Kind.TIMING, Kind.CONTEXT

TRACE_FIELDS: tuple[TraceField, ...] = (
    # the policy
    _f("action", P, Stage.DECIDE, V, "action units", "the policy's answer executed at the step"),
    _f("chunk_id", P, Stage.DECIDE, V, "request", "which request of the episode (an action or a chunk) it came from"),
    _f("policy_latency_ms", P, Stage.DECIDE, T, "ms", "the client's wall time of that request (a served policy: "
       "its round trip)"),
    _f("layer.policy.start_ms", P, Stage.DECIDE, T, "ms", "when that request began, on the batch's clock"),
    _f("layer.policy.rows", P, Stage.DECIDE, X, "rows", "the rows (environments) asked in that request"),
    _f("trace.", P, Stage.DECIDE, V, "", "the policy's own account of its answer (SupportsStepTrace; a served "
       "policy: the server's batch size and timings, server_* and policy_*, next to the client's round trip); "
       "names ending _ms or _s are timings, names with batch_size context", prefix=True),
    # action processing
    _f("chunk_index", A, Stage.PROCESS, V, "index", "the action's place in its chunk (chunk scheduling; 0: a replan)"),
    _f("layer.action.applied", A, Stage.PROCESS, V, "action units", "the action the simulator received (after "
       "latency, noise, clipping and the safety filter)"),
    _f("layer.action.clipped", A, Stage.PROCESS, V, "components", "components clipped to the action box"),
    _f("layer.action.delay_steps", A, Stage.PROCESS, V, "steps", "the injected control latency (where the variant "
       "sets control.latency)"),
    _f("layer.action.noise", A, Stage.PROCESS, V, "action units", "the norm of the action noise drawn (where the "
       "variant sets action.noise)"),
    _f("info.safety.", A, Stage.PROCESS, V, "0/1", "the safety filter's verdicts (nan, limit, workspace)",
       prefix=True),
    # the controller
    _f("layer.controller.target", C, Stage.COMMAND, V, "m", "the end-effector position the controller is sent to "
       "(Meta-World: the mocap target; LIBERO: the OSC goal)"),
    _f("layer.controller.saturated", C, Stage.COMMAND, V, "components", "commands held at a limit (Meta-World: "
       "target components at the mocap box; LIBERO: joint torques at their limits at the step's first substep)"),
    _f("layer.controller.tracking_error", C, Stage.TRACK, V, "m", "the distance from the target to where the "
       "end effector is after the step"),
    _f("layer.controller.effort", C, Stage.TRACK, V, "N or N·m", "the norm of the controller's effort (Meta-World: "
       "the weld's force on the hand; LIBERO: the joint torques)", group="controller.effort"),
    _f("layer.controller.effort_limited", C, Stage.TRACK, V, "joints", "joint torques at their limit (LIBERO)",
       group="controller.effort"),
    # physics
    _f("layer.physics.start_ms", PH, Stage.SIMULATE, T, "ms", "when the environment's step began, on the batch's "
       "clock"),
    _f("layer.physics.ms", PH, Stage.SIMULATE, T, "ms", "the environment's step less its rendering (action "
       "processing and the controller included)"),
    _f("layer.physics.contacts", PH, Stage.SIMULATE, V, "contacts", "contacts after the step"),
    _f("layer.physics.penetration", PH, Stage.SIMULATE, V, "m", "the deepest penetration among them (0: none)"),
    _f("layer.physics.warnings", PH, Stage.SIMULATE, V, "warnings", "simulator warnings raised during the step "
       "(MuJoCo's counters; Meta-World's unstable-simulation flag)"),
    _f("layer.physics.contact_force", PH, Stage.SIMULATE, V, "N", "the sum of the contacts' normal forces",
       group="physics.forces"),
    _f("layer.physics.max_contact_force", PH, Stage.SIMULATE, V, "N", "the largest contact normal force",
       group="physics.forces"),
    _f("layer.physics.constraints", PH, Stage.SIMULATE, V, "rows", "active constraint rows (contacts, limits, "
       "equalities)", group="physics.forces"),
    _f("layer.physics.constraint_violation", PH, Stage.SIMULATE, V, "m or rad", "the largest constraint "
       "violation among the active rows (an equality's residual, a limit's or a contact's penetration)",
       group="physics.forces"),
    _f("layer.physics.solver_iterations", PH, Stage.SIMULATE, V, "iterations", "the constraint solver's "
       "iterations in the step's last physics substep", group="physics.forces"),
    # rendering
    _f("layer.render.frames", R, Stage.DRAW, V, "frames", "camera frames drawn for the observation after the step "
       "(0: nobody read it)"),
    _f("layer.render.mean", R, Stage.DRAW, V, "0-255", "the mean pixel value of those frames (NaN: none drawn)"),
    _f("layer.render.ms", R, Stage.DRAW, T, "ms", "the time the backend spent drawing them"),
    # the recorder
    _f("layer.recorder.ms", RC, Stage.RECORD, T, "ms", "the time the recorder took to keep the step"),
    _f("observation.images.", RC, Stage.RECORD, X, "frame", "the video frame that shows the step (-1: none)",
       prefix=True),
)

# Per-episode trace facts, in the step file's metadata (``trace``): what they hold.
EPISODE_FACTS = {
    "executor.batch_size": "environments stepped together in the episode's batch (batch formation)",
    "executor.slot": "the episode's place in its batch",
    "executor.pid": "the worker process",
    "executor.setup_ms": "building the batch's policy and environments (0: kept from an earlier batch)",
    "executor.idle_ms": "the worker's wait for this batch since its previous one ended (its queue wait)",
    "executor.started_unix": "when the batch's clock started, in seconds since the epoch",
    "reset.start_ms": "when the episode's reset began, on the batch's clock",
    "reset.ms": "the reset's duration",
    "end_ms": "when the episode ended, on the batch's clock",
}

_EXACT = {f.column: f for f in TRACE_FIELDS if not f.prefix}
_PREFIXED = tuple(f for f in TRACE_FIELDS if f.prefix)


def field_of(column: str) -> TraceField | None:
    """The declared trace field a step column belongs to, or None (not part of the trace)."""
    found = _EXACT.get(column)
    if found is not None:
        return found
    for candidate in _PREFIXED:
        if column.startswith(candidate.column) and column != candidate.column:
            return candidate
    return None


def kind_of(column: str) -> Kind | None:
    """The kind of a trace column: its field's, except that a policy's own ``trace.*`` account is a timing when
    its name ends ``_ms`` or ``_s`` and context when it names a batch size."""
    found = field_of(column)
    if found is None:
        return None
    if found.column == "trace.":
        name = column[len("trace."):]
        if name.endswith(("_ms", "_s")):
            return Kind.TIMING
        if "batch_size" in name:
            return Kind.CONTEXT
    return found.kind


def check_trace_columns(columns: Mapping[str, Any]) -> None:
    """Refuse ``layer.*`` columns that are not declared trace fields (one line naming them)."""
    unknown = sorted(c for c in columns if c.startswith(LAYER_PREFIX) and c not in _EXACT)
    if unknown:
        declared = ", ".join(f.column for f in TRACE_FIELDS if f.column.startswith(LAYER_PREFIX))
        raise TraceError(f"trace column(s) {', '.join(unknown)} are not declared trace fields; declared: {declared}")


def codecs(columns: Sequence[str]) -> dict[str, str]:
    """Each step column's Parquet codec: zstd, except the trace's ``layer.*`` columns, written uncompressed. zstd
    costs ~35 µs a column chunk whatever its length, ten times a plain chunk's, and the trace's dozen small columns
    (wall-clock times, contact counts) barely shrink under it; uncompressed they add ~5 KB to a 50-step episode."""
    return {name: "none" if name.startswith(LAYER_PREFIX) else "zstd" for name in columns}


def trace_metadata(groups: tuple[str, ...], facts: Mapping[str, Any]) -> dict[str, str]:
    """The step file's metadata entries of a traced episode: the trace format and its facts as JSON."""
    return {TRACE_VERSION_KEY.decode(): str(TRACE_FORMAT),
            TRACE_META_KEY.decode(): json.dumps({"groups": list(groups), **facts}, sort_keys=True)}


def trace_problem(metadata: Mapping[bytes, bytes] | None) -> str | None:
    """Why a step file's metadata holds no trace this Assay reads (in words, with what to do), or None."""
    found = (metadata or {}).get(TRACE_VERSION_KEY, b"").decode("utf-8", "replace")
    if found == str(TRACE_FORMAT):
        return None
    if not found.isdigit():
        return ("recorded no per-layer trace (its step file predates trace format "
                f"{TRACE_FORMAT}): re-run its campaign into a new store to record one")
    if int(found) > TRACE_FORMAT:
        return f"has trace format {found} and this Assay reads format {TRACE_FORMAT}: read it with a newer Assay"
    return f"has trace format {found}, from an older Assay; this Assay reads format {TRACE_FORMAT}: re-run it"


@dataclass(frozen=True)
class EpisodeTrace:
    """One episode's trace: its trace columns by name (vectors as ``(steps, n)``), the per-episode facts and
    the step-file columns the timeline also shows (``t``, ``success``, events)."""

    key: str
    steps: int
    columns: dict[str, np.ndarray]
    facts: dict[str, Any]
    context: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def groups(self) -> tuple[str, ...]:
        """The opt-in groups the episode recorded."""
        return tuple(self.facts.get("groups", ()))

    def of(self, layer: Layer) -> dict[str, np.ndarray]:
        """The layer's columns."""
        return {name: values for name, values in self.columns.items()
                if (f := field_of(name)) is not None and f.layer is layer}


def _numpy(table: pa.Table, name: str) -> np.ndarray:
    kind = table.schema.field(name).type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.asarray(table.column(name).to_pylist(), dtype=object)
    return step_matrix(table, name, np.float64 if pa.types.is_fixed_size_list(kind) else None)


def episode_trace(table: pa.Table, key: str) -> EpisodeTrace:
    """The trace in an episode's step table; TraceError (one line) when the file recorded none."""
    problem = trace_problem(table.schema.metadata)
    if problem is not None:
        raise TraceError(f"episode {key[:12]} {problem}")
    raw = (table.schema.metadata or {}).get(TRACE_META_KEY, b"{}")
    try:
        facts = json.loads(raw)
    except ValueError:
        raise TraceError(f"episode {key[:12]}: its trace facts are not JSON (a damaged step file: `assay store "
                         "verify`)") from None
    columns = {name: _numpy(table, name) for name in table.column_names if field_of(name) is not None}
    context = {name: _numpy(table, name) for name in table.column_names
               if name in ("t", "success", "reward") or name.startswith("info.")}
    return EpisodeTrace(key, table.num_rows, columns, facts if isinstance(facts, dict) else {}, context)


def read_trace(store: _StepSource, record: EpisodeRecord) -> EpisodeTrace:
    """An episode's trace from its step file (checked against its catalog row); TraceError (one line) when it
    recorded none or its step data is gone."""
    if record.data_path is None:
        raise TraceError(f"episode {record.key[:12]} has no step file ({record.outcome.value}"
                         f"{': ' + record.reason if record.reason else ''}), so no trace")
    return episode_trace(store.steps(record), record.key)
