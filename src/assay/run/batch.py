"""The episode loop's typed values: a batch of one cell's jobs, and the faults that end episodes.

``EpisodeBatch`` carries the cell's settings (task, variant, policy, ``replan_every``,
pipeline, safety, ``video_fps``, the opt-in trace groups) once, checked equal across its jobs, instead
of reading them off ``jobs[0]``. A :class:`Fault` is what the loop passes where an action was expected
(or where a reset or step failed): its ``kind`` says which part broke, its
``message`` is the recorded reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from assay.spec import EpisodeJob, Pipeline, ResolvedPolicy, TaskSpec, Variant


class FaultKind(str, Enum):
    """Which part of the loop failed an episode (each becomes outcome ``error``)."""

    SETUP = "setup"                            # building the environments or the policy
    RESET = "reset"                            # the environment's reset raised
    POLICY_RESET = "policy_reset"              # the policy's reset raised
    POLICY = "policy"                          # act() raised
    POLICY_UNAVAILABLE = "policy_unavailable"  # the policy server is gone
    INVALID_ACTION = "invalid_action"          # an answer of the wrong shape, dtype or values
    SIMULATOR = "simulator"                    # the environment's step raised


@dataclass(frozen=True)
class Fault:
    """Why an episode ends as ``error``: the kind of fault and the one-line reason."""

    kind: FaultKind
    message: str

    def at_step(self, step: int) -> Fault:
        """The same fault, its message prefixed with the step it happened at."""
        return Fault(self.kind, f"step {step}: {self.message}")


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (what a reason records of an exception)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@dataclass(frozen=True)
class EpisodeBatch:
    """Jobs of one cell run together; the cell's settings are held once."""

    jobs: tuple[EpisodeJob, ...]
    task: TaskSpec
    variant: Variant
    policy: ResolvedPolicy
    replan_every: int | None
    pipeline: Pipeline
    safety: bool
    video_fps: float | None = None
    trace: tuple[str, ...] = ()  # the opt-in trace groups (spec.tracing)

    @classmethod
    def of(cls, jobs: Sequence[EpisodeJob]) -> EpisodeBatch:
        """The batch of ``jobs``; ValueError when they are empty or not of one cell with one set of settings."""
        if not jobs:
            raise ValueError("an episode batch needs at least one job")
        first = jobs[0]
        settings = (first.cell, first.replan_every, first.pipeline, first.safety, first.video_fps, first.trace)
        for job in jobs[1:]:
            if (job.cell, job.replan_every, job.pipeline, job.safety, job.video_fps, job.trace) != settings:
                raise ValueError(f"job {job.key} is not of the batch's cell and settings {settings}")
        return cls(tuple(jobs), first.task, first.variant, first.policy, first.replan_every, first.pipeline,
                   first.safety, first.video_fps, first.trace)

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def seeds(self) -> tuple[int, ...]:
        """Each job's episode seed, in slot order."""
        return tuple(job.seed for job in self.jobs)

    @property
    def instructions(self) -> tuple[str, ...]:
        """Each job's instruction, in slot order."""
        return tuple(job.instruction for job in self.jobs)
