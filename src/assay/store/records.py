"""The episode record: one row of the catalog, the per-episode half of the data contract."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from assay.annotations import public_api

SCHEMA_VERSION = 1


@public_api
class Outcome(str, Enum):
    """How an episode ended. ``error`` is infrastructure or a broken policy, never a skill failure."""

    SUCCESS = "success"
    FAILURE = "failure"  # ended (terminated) without success
    TIMEOUT = "timeout"  # horizon reached without success
    ERROR = "error"  # simulator or policy raised, or an invalid action; see ``reason``


@public_api
@dataclass(frozen=True)
class EpisodeRecord:
    """One episode's catalog row (the data contract): what ran, its outcome, its step file and its provenance."""

    key: str
    campaign: str
    task_id: str
    task_hash: str
    variant_key: str
    variant_name: str
    variant: dict[str, Any]
    policy_name: str
    policy_version: str
    policy_spec: dict[str, Any]
    seed: int
    episode_index: int
    instruction: str
    outcome: Outcome
    reason: str
    steps: int
    total_return: float
    success_step: int | None
    trajectory_hash: str
    initial_conditions: dict[str, Any] = field(default_factory=dict)
    policy_info: dict[str, Any] = field(default_factory=dict)  # the policy's own account (chosen skill, ...)
    data_path: str | None = None
    data_sha256: str | None = None
    data_bytes: int | None = None  # the step file's size, what a resume checks (None: recorded before sizes)
    timings: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict, its outcome by value."""
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return data
