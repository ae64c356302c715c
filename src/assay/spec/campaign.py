"""CampaignSpec (the grid) and EpisodeJob (one cell × one seed), and the planner.

Identity rules, relied on by resume, determinism and paired statistics:

* ``episode_seed = derive_seed(campaign_seed, task_id, episode_index)``: the same
  seeds for every policy and every variant of a task, so comparisons between
  policies and between a variant and nominal are *paired* by construction.
* ``job key = hash(task id, task hash, variant, policy identity, seed)``: the same
  job has the same key on any machine, worker count or executor; the campaign name
  is not part of it, so two campaigns that ask for the same episode share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from assay.spec.hashing import content_hash, derive_seed
from assay.spec.policy import PolicySpec
from assay.spec.task import CameraSpec, TaskSpec
from assay.spec.variant import Variant

# A variant as a campaign asks for it: factor -> value ({} is nominal). The factor catalog
# (in assay.sim) resolves each request into a Variant with axes and checks the values.
VariantRequest = dict[str, Any]
# Fields that change how a campaign is executed, never what its episodes are: left out of its hash,
# so changing them keeps the campaign (and the stores that hold it) the same campaign.
EXECUTION_SETTINGS = {"episode_timeout_s"}


class Pipeline(str, Enum):
    """How a worker interleaves simulation and inference (never changes results).

    ``lockstep``: all environments wait for one policy call, then all step.
    ``decoupled``: the environments form two groups; while one group's request is
    in flight (a remote server computing), the other group steps.
    """

    LOCKSTEP = "lockstep"
    DECOUPLED = "decoupled"


class CampaignSpec(BaseModel):
    """The grid: policies × tasks × variants × ``episodes`` seeds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$", max_length=100)
    seed: int = Field(default=0, ge=0, le=2**63 - 1, strict=True)
    episodes: int = Field(gt=0, le=1_000_000, strict=True)
    tasks: tuple[str, ...] = Field(min_length=1)
    policies: tuple[PolicySpec, ...] = Field(min_length=1)
    variants: tuple[VariantRequest, ...] = ({},)
    cameras: tuple[CameraSpec, ...] = ()
    horizon: int | None = Field(default=None, gt=0, strict=True, description="cap every task's horizon (a new task hash)")
    envs_per_worker: int = Field(default=4, gt=0, le=256, strict=True)
    replan_every: int | None = Field(
        default=None, gt=0, le=10_000, strict=True,
        description="execute at most this many actions of each returned chunk before asking again (default: all)")
    pipeline: Pipeline = Pipeline.LOCKSTEP
    safety: bool = Field(default=False, description="filter every action (NaN, limits, workspace) and count interventions")
    episode_timeout_s: float | None = Field(
        default=None, gt=0, le=7 * 86_400,
        description="wall-clock limit of one batch of episodes in seconds (default 900): past it the worker is "
                    "killed and its episodes are errors (an execution setting: not part of the campaign's hash)")
    description: str = ""

    @field_validator("policies")
    @classmethod
    def _unique_policy_names(cls, policies: tuple[PolicySpec, ...]) -> tuple[PolicySpec, ...]:
        names = [p.name for p in policies]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"policy name(s) {', '.join(duplicated)} used twice; give each policy its own 'name'")
        return policies

    def content_hash(self) -> str:
        return content_hash(self.model_dump(mode="json", exclude=EXECUTION_SETTINGS))


@dataclass(frozen=True)
class ResolvedPolicy:
    """A PolicySpec with the version that goes into episode keys."""

    spec: PolicySpec
    version: str

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: task × variant × policy × seed, and its key."""

    campaign: str
    task: TaskSpec
    variant: Variant
    policy: ResolvedPolicy
    episode_index: int
    seed: int
    key: str
    instruction: str
    replan_every: int | None = None
    pipeline: Pipeline = Pipeline.LOCKSTEP
    safety: bool = False

    @property
    def cell(self) -> tuple[str, str, str]:
        """The (policy, task, variant) cell this job belongs to."""
        return (self.policy.name, self.task.id, self.variant.key)


def episode_seed(campaign_seed: int, task: TaskSpec, episode_index: int) -> int:
    return derive_seed("episode", campaign_seed, task.id, episode_index)


def episode_key(
    task: TaskSpec,
    variant: Variant,
    policy: ResolvedPolicy,
    seed: int,
    instruction: str | None = None,
    replan_every: int | None = None,
    safety: bool = False,
) -> str:
    """The job's identity. ``instruction`` counts when it differs from the task's own, and
    ``replan_every`` when set (both change behaviour), so nominal keys stay as they were."""
    identity: dict[str, Any] = {
        "task": task.id,
        "task_hash": task.content_hash(),
        "variant": variant.model_dump(mode="json"),
        "policy": policy.spec.identity(policy.version),
        "seed": seed,
    }
    if instruction is not None and instruction != task.instruction:
        identity["instruction"] = instruction
    if replan_every is not None:
        identity["replan_every"] = replan_every
    if safety:  # the filter changes what reaches the simulator
        identity["safety"] = True
    return content_hash(identity, length=24)


def plan(
    campaign: CampaignSpec,
    tasks: list[TaskSpec],
    policies: list[ResolvedPolicy],
    variants: list[Variant] | None = None,
    instruction_for: Callable[[TaskSpec, Variant, int], str] | None = None,
) -> list[EpisodeJob]:
    """Every job of the campaign, in a fixed order (policy, task, variant, index).

    ``variants`` are the resolved variants (nominal only when None); ``instruction_for``
    gives the instruction an episode (task, variant, seed) runs under (semantic perturbations change it).
    """
    variants = variants if variants is not None else [Variant()]
    jobs: list[EpisodeJob] = []
    for policy in policies:
        for task in tasks:
            for variant in variants:
                for index in range(campaign.episodes):
                    seed = episode_seed(campaign.seed, task, index)
                    instruction = instruction_for(task, variant, seed) if instruction_for else task.instruction
                    key = episode_key(task, variant, policy, seed, instruction, campaign.replan_every, campaign.safety)
                    jobs.append(EpisodeJob(campaign.name, task, variant, policy, index, seed, key, instruction,
                                           campaign.replan_every, campaign.pipeline, campaign.safety))
    return jobs


def batch_jobs(jobs: list[EpisodeJob], batch_size: int) -> list[tuple[EpisodeJob, ...]]:
    """Group jobs of one cell into lockstep batches of at most ``batch_size`` environments.

    Results never depend on the grouping (policies keep per-environment state keyed
    by seed), so resuming with a different set of pending jobs changes nothing.
    """
    batches: list[tuple[EpisodeJob, ...]] = []
    current: list[EpisodeJob] = []
    for job in jobs:
        if current and (len(current) == batch_size or current[0].cell != job.cell):
            batches.append(tuple(current))
            current = []
        current.append(job)
    if current:
        batches.append(tuple(current))
    return batches
