"""The step file's features, declared once, and its format version, checked on read.

After LeRobot's ``DEFAULT_FEATURES`` and ``check_version_compatibility``: every column a step file
may hold is declared here (a fixed name, or a prefix and the family it names), writers are held to
it (``build_table`` refuses an undeclared column) and readers check the file's format version
before they trust a byte of it. A step file records its format as ``schema_version`` in its
metadata, the same number the catalog and ``store.json`` carry (``records.SCHEMA_VERSION``).

A file of another format is one line that says what to do: one written before formats were
versioned or by an older Assay is re-run into a new store (``assay run`` re-runs a file that
does not match its row), one written by a newer Assay needs that Assay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from assay.errors import StoreError
from assay.store.records import SCHEMA_VERSION

STEP_FORMAT = SCHEMA_VERSION  # the step files this Assay writes and reads


@dataclass(frozen=True)
class Feature:
    """One step column (or, with ``prefix``, a family of them: ``info.<name>``): its type and meaning."""

    name: str
    dtype: str  # int32, float64, bool, float64[n] (a fixed-size list per step), float64|str
    required: bool
    description: str
    prefix: bool = False


STEP_FEATURES: tuple[Feature, ...] = (
    Feature("step", "int32", True, "the step's index t, from 0"),
    Feature("t", "float64", True, "the step's time in seconds, t / control_hz"),
    Feature("observation.state", "float64[n]", True, "the state the policy acted on"),
    Feature("observation.environment_state", "float64[n]", False, "the scene's low-dimensional state where the "
            "backend gives one (LIBERO: each goal object's and target's position)"),
    Feature("action", "float64[n]", True, "the action executed at the step"),
    Feature("reward", "float64", True, "the reward the step returned"),
    Feature("success", "bool", True, "the task's success flag after the step"),
    Feature("terminated", "bool", True, "the episode ended in the environment at the step"),
    Feature("truncated", "bool", True, "the environment cut the episode at the step"),
    Feature("policy_latency_ms", "float64", False, "the wall time of the policy call that chose the action"),
    Feature("chunk_id", "int32", False, "which answer of the policy (an action or a chunk) the action came from"),
    Feature("chunk_index", "int32", False, "the action's place in its chunk"),
    Feature("observation.images.", "int32", False, "the frame of the camera's video that shows the step (-1: "
            "none, a video at video_fps)", prefix=True),
    Feature("info.", "float64", False, "a scalar the step's info returned (events, safety interventions)",
            prefix=True),
    Feature("trace.", "float64|str", False, "the policy's own account of its answer (SupportsStepTrace)", prefix=True),
)

REQUIRED_COLUMNS = tuple(f.name for f in STEP_FEATURES if f.required)
FORMAT_KEY = b"schema_version"


def feature_of(column: str) -> Feature | None:
    """The declared feature a column belongs to, or None."""
    for feature in STEP_FEATURES:
        named = column.startswith(feature.name) and column != feature.name if feature.prefix else column == feature.name
        if named:
            return feature
    return None


def check_step_columns(columns: Iterable[str]) -> None:
    """Refuse step columns that are not declared (one line naming them and the declared ones)."""
    unknown = sorted(c for c in columns if feature_of(c) is None)
    if unknown:
        declared = ", ".join(f.name + ("*" if f.prefix else "") for f in STEP_FEATURES)
        raise StoreError(f"step column(s) {', '.join(unknown)} are not declared step features; declared: {declared}")


def format_problem(metadata: Mapping[bytes, bytes] | None) -> str | None:
    """Why a step file's metadata is not of this Assay's format (in words, with what to do), or None."""
    found = (metadata or {}).get(FORMAT_KEY, b"").decode("utf-8", "replace")
    if found == str(STEP_FORMAT):
        return None
    if not found.isdigit():
        return (f"it has no step-format version ({FORMAT_KEY.decode()} {found or 'missing'}) and this Assay reads "
                f"format {STEP_FORMAT}: re-run its campaign into a new store")
    if int(found) > STEP_FORMAT:
        return f"it has step format {found} and this Assay reads format {STEP_FORMAT}: read it with a newer Assay"
    return (f"it has step format {found}, from an older Assay, and this Assay reads format {STEP_FORMAT}: re-run "
            "its campaign into a new store")


def check_step_format(metadata: Mapping[bytes, bytes] | None, where: str) -> None:
    """Raise a one-line StoreError naming ``where`` when the file is not of this Assay's step format."""
    problem = format_problem(metadata)
    if problem is not None:
        raise StoreError(f"step file {where}: {problem}")
