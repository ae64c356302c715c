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

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from assay.annotations import public_api
from assay.errors import SpecError
from assay.spec.hashing import canonical_json, content_hash, derive_seed
from assay.spec.names import clean_name
from assay.spec.policy import PolicySpec
from assay.spec.protocol import ProtocolRef
from assay.spec.task import CameraSpec, TaskSpec
from assay.spec.tracing import check_trace_groups
from assay.spec.variant import Axis, Variant

# A variant as a campaign asks for it: factor -> value ({} is nominal). The factor catalog
# (in assay.sim) resolves each request into a Variant with axes and checks the values.
VariantRequest = dict[str, Any]
# Fields that change how a campaign is executed, never what its episodes are: left out of its hash,
# so changing them keeps the campaign (and the stores that hold it) the same campaign.
EXECUTION_SETTINGS = {"episode_timeout_s", "storage", "simulators"}
DEFAULT_ENVS_PER_WORKER = 4
# Fields added later, left out of the hash and the dump when unset, so older campaigns hash as before.
OPTIONAL_SETTINGS = ("adaptive", "video_fps", "preset", "storage", "prompt", "protocol", "trace", "simulators")


class Pipeline(str, Enum):
    """How a worker interleaves simulation and inference (never changes results).

    ``lockstep``: all environments wait for one policy call, then all step.
    ``decoupled``: the environments form two groups; while one group's request is
    in flight (a remote server computing), the other group steps.
    """

    LOCKSTEP = "lockstep"
    DECOUPLED = "decoupled"


class Goal(str, Enum):
    """What an adaptive campaign stops for (see docs/STATISTICS.md, "Adaptive campaigns")."""

    COMPARE = "compare"  # two policies: is one better, per task × variant
    RANK = "rank"  # a leaderboard: every pair of policies resolved, per task × variant
    INTERVAL = "interval"  # every cell's confidence sequence narrower than ± width
    ROBUSTNESS = "robustness"  # every variant's retention interval narrower than ± width, widest first


class Endpoint(str, Enum):
    """What an adaptive campaign's sequential tests read from each episode (docs/STATISTICS.md)."""

    SUCCESS = "success"  # 0/1 success: discordant-pair tests (lattice or mixture)
    PROGRESS = "progress"  # the task's continuous progress score in [0, 1]: the betting confidence sequence


class Pack(str, Enum):
    """How a campaign's step files are laid out (never changes keys or results; ``assay.store.packs``)."""

    EPISODE = "episode"  # one Parquet file per episode (the default)
    BATCH = "batch"  # one Parquet file per batch of a worker, a row group per episode


class StorageSpec(BaseModel):
    """How a campaign's episodes are stored: an execution setting (not part of the campaign's hash or of any
    episode key), so a campaign resumed with another ``pack`` keeps its episodes and writes new ones the new way."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pack: Pack = Field(
        default=Pack.EPISODE,
        description="episode: one step file per episode; batch: one per batch of a worker (up to envs_per_worker "
                    "episodes, a row group each), read back as the same tables")


class AdaptiveSpec(BaseModel):
    """Run in batches of paired seeds and stop each cell as soon as its question is answered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    goal: Goal
    policies: tuple[str, ...] = Field(default=(), description="the policies the goal is about (default: all)")
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    power: float = Field(default=0.8, gt=0.0, lt=1.0)
    delta: float = Field(default=0.1, gt=0.0, le=0.5, description="the smallest difference worth detecting")
    max_episodes: int = Field(default=200, gt=0, le=100_000, description="per cell; the horizon")
    batch: int = Field(default=8, gt=0, le=10_000, description="episodes per cell between looks")
    width: float | None = Field(default=None, gt=0.0, lt=0.5, description="interval goal: half-width to reach")
    method: str = Field(default="lattice", pattern=r"^(lattice|mixture)$")
    endpoint: Endpoint = Field(default=Endpoint.SUCCESS, description="success (0/1) or progress (a score in [0, 1])")

    @model_validator(mode="after")
    def _consistent(self) -> AdaptiveSpec:
        if self.goal in (Goal.INTERVAL, Goal.ROBUSTNESS) and self.width is None:
            raise ValueError(f"adaptive goal '{self.goal.value}' needs 'width' (the half-width to reach, e.g. 0.1)")
        if self.goal == Goal.COMPARE and self.policies and len(self.policies) != 2:
            raise ValueError(f"adaptive goal 'compare' takes exactly 2 policies; got {len(self.policies)}")
        if self.batch > self.max_episodes:
            raise ValueError(f"adaptive batch {self.batch} is larger than max_episodes {self.max_episodes}")
        return self


@public_api
class CampaignSpec(BaseModel):
    """The grid: policies × tasks × variants × ``episodes`` seeds (or adaptively, up to ``adaptive.max_episodes``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$", max_length=100)
    seed: int = Field(default=0, ge=0, le=2**63 - 1, strict=True)
    episodes: int = Field(gt=0, le=1_000_000, strict=True)
    tasks: tuple[str, ...] = Field(min_length=1)
    policies: tuple[PolicySpec, ...] = Field(min_length=1)
    variants: tuple[VariantRequest, ...] = ({},)
    preset: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9_-]*$",
        description="a backend's named evaluation conventions, applied to its tasks before `cameras` and `horizon` "
                    "(LIBERO: openpi, the default, or lerobot: 256 px image/image2 cameras and LeRobot's horizons)")
    cameras: tuple[CameraSpec, ...] | None = Field(
        default=None, description="the cameras every task renders (unset: each task's own; []: none at all)")
    horizon: int | None = Field(
        default=None, gt=0, strict=True, description="cap every task's horizon (a new task hash)")
    envs_per_worker: Annotated[int, Field(gt=0, le=256, strict=True)] | Literal["auto"] = Field(
        default=DEFAULT_ENVS_PER_WORKER,
        description="environments each worker steps in lockstep per policy call; auto: a short probe of this host, "
                    "backend and policy picks it when the campaign runs (assay.run.autosize). It never changes "
                    "results, so auto hashes as the default")
    replan_every: int | None = Field(
        default=None, gt=0, le=10_000, strict=True,
        description="execute at most this many actions of each returned chunk before asking again (default: all)")
    pipeline: Pipeline = Pipeline.LOCKSTEP
    safety: bool = Field(
        default=False, description="filter every action (NaN, limits, workspace) and count interventions")
    video_fps: float | None = Field(
        default=None, gt=0, le=1000,
        description="frames per second of each camera's recorded video (default: the task's video_fps, else every "
                    "step; LIBERO tasks record 4); frames between are rendered only when the policy reads them")
    episode_timeout_s: float | None = Field(
        default=None, gt=0, le=7 * 86_400,
        description="wall-clock limit of one batch of episodes in seconds (default 900): past it the worker is "
                    "killed and its episodes are errors (an execution setting: not part of the campaign's hash)")
    storage: StorageSpec | None = Field(
        default=None, description="how step files are laid out: {pack: episode} (default) or {pack: batch}, one "
                                  "file per batch (an execution setting: not part of the campaign's hash)")
    prompt: Literal["variant", "task"] | None = Field(
        default=None, description="the instruction each episode sends: variant (the default: the one the variant "
                                  "defines, e.g. a LIBERO-PRO language suite's) or task (the task's own, as openpi's "
                                  "and LeRobot's LIBERO scripts send on every suite)")
    protocol: ProtocolRef | None = Field(
        default=None, description="the protocol manifest this campaign claims to run (name, version, hash, suites): "
                                  "what makes its score reportable (assay.metrics.stamp)")
    trace: tuple[str, ...] | None = Field(
        default=None, description="opt-in groups of heavy per-layer trace fields (spec.tracing.TRACE_GROUPS; the "
                                  "cheap fields are always recorded); what is recorded, never what happens")
    simulators: dict[str, str] | None = Field(
        default=None, description="served simulators by backend, e.g. {libero: ws://HOST:PORT} (`assay serve-sim`): "
                                  "those backends' environments are stepped there, with the same episodes (an "
                                  "execution setting: not part of the campaign's hash)")
    description: str = ""
    adaptive: AdaptiveSpec | None = None

    @field_validator("simulators")
    @classmethod
    def _websocket_urls(cls, simulators: dict[str, str] | None) -> dict[str, str] | None:
        for backend, url in (simulators or {}).items():
            if not url.startswith(("ws://", "wss://")):
                raise ValueError(f"simulators.{backend}: {url!r} is not a websocket URL; write ws://HOST:PORT "
                                 f"(where `assay serve-sim {backend} --port PORT` listens)")
        return simulators

    @property
    def packed(self) -> bool:
        """Whether workers pack each batch's step tables into one file (``storage: {pack: batch}``)."""
        return self.storage is not None and self.storage.pack is Pack.BATCH

    @model_validator(mode="before")
    @classmethod
    def _adaptive_horizon(cls, data: Any) -> Any:
        """In an adaptive campaign ``episodes`` is the horizon: it defaults to adaptive.max_episodes and back."""
        if not isinstance(data, dict) or not isinstance(data.get("adaptive"), dict):
            return data
        adaptive = dict(data["adaptive"])
        if "episodes" in data and "max_episodes" in adaptive and data["episodes"] != adaptive["max_episodes"]:
            raise ValueError(f"episodes {data['episodes']} and adaptive.max_episodes {adaptive['max_episodes']} "
                             "differ; in an adaptive campaign give one of them (the horizon per cell)")
        if "episodes" in data:
            adaptive.setdefault("max_episodes", data["episodes"])
        else:
            horizon = adaptive.get("max_episodes", AdaptiveSpec.model_fields["max_episodes"].default)
            data = {**data, "episodes": horizon}
        return {**data, "adaptive": adaptive}

    @model_validator(mode="after")
    def _adaptive_policies(self) -> CampaignSpec:
        if self.adaptive is None:
            return self
        names = [p.name for p in self.policies]
        unknown = [p for p in self.adaptive.policies if p not in names]
        if unknown:
            raise ValueError(f"adaptive policy {', '.join(unknown)} is not in the campaign; valid: {', '.join(names)}")
        listed = self.adaptive.policies or tuple(names)
        left = [n for n in names if n not in listed]
        if left:
            raise ValueError(f"policy {', '.join(left)} is not in adaptive.policies; list it or remove it")
        if self.adaptive.goal == Goal.COMPARE and len(listed) != 2:
            raise ValueError(f"adaptive goal 'compare' takes exactly 2 policies; the campaign has {len(listed)}")
        if self.adaptive.goal == Goal.RANK and len(listed) < 2:
            raise ValueError("adaptive goal 'rank' needs at least 2 policies")
        if self.adaptive.goal == Goal.ROBUSTNESS and ({} not in self.variants or len(self.variants) < 2):
            raise ValueError("adaptive goal 'robustness' needs the nominal variant ({} or 'nominal') and at least "
                             "one other variant")
        return self

    def dump(self) -> dict[str, Any]:
        """The spec as JSON data; unset ``adaptive``, ``video_fps`` and ``cameras`` are left out."""
        data = self.model_dump(mode="json")
        _drop_unset(data)
        if data.get("cameras") is None:
            data.pop("cameras", None)
        return data

    @field_validator("name", mode="before")
    @classmethod
    def _clean_name(cls, name: Any) -> Any:
        return clean_name(name, "campaign name") if isinstance(name, str) else name

    @field_validator("envs_per_worker", mode="before")
    @classmethod
    def _envs_per_worker(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 256):
            return value
        raise ValueError(f"envs_per_worker {value!r} is not valid; valid: a whole number 1-256, or auto")

    @field_validator("tasks", mode="before")
    @classmethod
    def _clean_tasks(cls, tasks: Any) -> Any:
        if not isinstance(tasks, list | tuple):
            return tasks
        return type(tasks)(clean_name(t, "task") if isinstance(t, str) else t for t in tasks)

    @field_validator("trace")
    @classmethod
    def _trace_groups(cls, trace: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if trace is None else check_trace_groups(trace) or None  # []: none asked, as unset

    @field_validator("policies")
    @classmethod
    def _unique_policy_names(cls, policies: tuple[PolicySpec, ...]) -> tuple[PolicySpec, ...]:
        names = [p.name for p in policies]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"policy name(s) {', '.join(duplicated)} used twice; give each policy its own 'name'")
        return policies

    def content_hash(self) -> str:
        """The campaign's content hash: what it asks for, without the execution settings (workers, executor, ...)."""
        data = self.model_dump(mode="json", exclude=EXECUTION_SETTINGS)
        _drop_unset(data)  # unset, they hash as campaigns did before the settings existed
        # unset cameras hash as before ([] meant each task's own); an explicit [] (no camera) is another campaign
        data["cameras"] = "none" if data["cameras"] == [] else data["cameras"] or []
        if data["envs_per_worker"] == "auto":  # chosen when it runs; batching never changes an episode
            data["envs_per_worker"] = DEFAULT_ENVS_PER_WORKER
        return content_hash(data)


def _drop_unset(data: dict[str, Any]) -> None:
    """Leave out settings added later while unset: top-level ones when None, ``adaptive.endpoint`` at its default."""
    for optional in OPTIONAL_SETTINGS:
        if data.get(optional) is None:
            data.pop(optional, None)
    if isinstance(data.get("adaptive"), dict) and data["adaptive"].get("endpoint") == Endpoint.SUCCESS.value:
        del data["adaptive"]["endpoint"]


@dataclass(frozen=True)
class ResolvedPolicy:
    """A PolicySpec with the version that goes into episode keys."""

    spec: PolicySpec
    version: str

    @property
    def name(self) -> str:
        """The policy's display name."""
        return self.spec.name


@dataclass(frozen=True, slots=True)  # a million-job plan holds a million of these
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
    video_fps: float | None = None
    pack: bool = False  # write the step table into its batch's pack file (how it is stored: not in the key)
    trace: tuple[str, ...] = ()  # the opt-in trace groups recorded beside the cheap fields (spec.tracing)
    simulator: str | None = None  # the served simulator (ws:// URL) that steps it (how it is run: not in the key)

    @property
    def cell(self) -> tuple[str, str, str]:
        """The (policy, task, variant) cell this job belongs to."""
        return (self.policy.name, self.task.id, self.variant.key)


SAFETY_FILTER_VERSION = 2  # 2: the workspace is the task's own hand box, tested on the next hand position
# How an episode key is derived from its inputs. It is one of the inputs from format 2 on; format 1, every key
# written before formats were numbered, leaves it out, so the keys of existing stores stay as they are.
KEY_FORMAT = 1
UNNUMBERED_KEY_FORMAT = 1


def episode_seed(campaign_seed: int, task: TaskSpec, episode_index: int) -> int:
    """A derived seed; for a task with fixed initial states, the state's index (campaign seed + episode index)."""
    if task.initial_states:
        return campaign_seed + episode_index
    return derive_seed("episode", campaign_seed, task.id, episode_index)


def episode_key(
    task: TaskSpec,
    variant: Variant,
    policy: ResolvedPolicy,
    seed: int,
    instruction: str | None = None,
    replan_every: int | None = None,
    safety: bool = False,
    video_fps: float | None = None,
    trace: tuple[str, ...] = (),
) -> str:
    """The job's identity. ``instruction`` counts when it differs from the task's own, and
    ``replan_every`` when set (both change behaviour), and ``video_fps`` and the opt-in ``trace`` groups when
    set (they change what is recorded, never the trajectory), so nominal keys stay as they were; ``KEY_FORMAT``
    counts from format 2 on."""
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
    if safety:  # the filter changes what reaches the simulator; its version, since its behaviour changed
        identity["safety"] = SAFETY_FILTER_VERSION
    if video_fps is not None:
        identity["video_fps"] = video_fps
    if trace:
        identity["trace"] = sorted(trace)
    if KEY_FORMAT != UNNUMBERED_KEY_FORMAT:
        identity["key_format"] = KEY_FORMAT
    return content_hash(identity, length=24)


class _CellKeys:
    """:func:`episode_key` for every job of one (policy, task, variant) cell, with the parts that do not change
    from job to job serialized once: the same canonical JSON, byte for byte (``tests/test_spec.py``)."""

    def __init__(self, task: TaskSpec, variant: Variant, policy: ResolvedPolicy, replan_every: int | None,
                 safety: bool, video_fps: float | None, trace: tuple[str, ...] = ()) -> None:
        fixed: dict[str, Any] = {"task": task.id, "task_hash": task.content_hash(),
                                 "variant": variant.model_dump(mode="json"),
                                 "policy": policy.spec.identity(policy.version)}
        if replan_every is not None:
            fixed["replan_every"] = replan_every
        if safety:
            fixed["safety"] = SAFETY_FILTER_VERSION
        if video_fps is not None:
            fixed["video_fps"] = video_fps
        if trace:
            fixed["trace"] = sorted(trace)
        if KEY_FORMAT != UNNUMBERED_KEY_FORMAT:
            fixed["key_format"] = KEY_FORMAT
        # Sorted keys: "instruction" (when it differs) < every fixed key < ... with "seed" in its sorted place.
        parts = [f"{canonical_json(name)}:{canonical_json(value)}" for name, value in sorted(fixed.items())]
        before = [p for name, p in zip(sorted(fixed), parts, strict=True) if name < "seed"]
        after = [p for name, p in zip(sorted(fixed), parts, strict=True) if name > "seed"]
        self._head = "".join(f"{p}," for p in before) + '"seed":'
        self._tail = "".join(f",{p}" for p in after) + "}"
        self._nominal_instruction = task.instruction

    def key(self, seed: int, instruction: str) -> str:
        """The job's key (what :func:`episode_key` gives for this cell, ``seed`` and ``instruction``)."""
        said = f'"instruction":{canonical_json(instruction)},' if instruction != self._nominal_instruction else ""
        text = "{" + said + self._head + str(int(seed)) + self._tail
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _samples_layouts(variant: Variant) -> bool:
    """Whether a variant draws each episode's layout from its seed instead of a fixed initial state
    (``libero.init: sampled``): then any seed is a scene of its own."""
    return any(p.factor == "libero.init" and p.value == "sampled" for p in variant.perturbations)


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
    seen: dict[str, str] = {}
    for policy in policies:  # two names for one policy would record one episode twice under two names
        identity = content_hash(policy.spec.identity(policy.version))
        if identity in seen:
            raise SpecError(f"campaign {campaign.name!r}: policies {seen[identity]!r} and {policy.name!r} are the same "
                            "policy (same source, params and version), so their episodes would be the same ones; "
                            "list it once", at=("policies",))
        seen[identity] = policy.name
    jobs: list[EpisodeJob] = []
    seeds = {task.id: [episode_seed(campaign.seed, task, i) for i in range(campaign.episodes)] for task in tasks}
    for policy in policies:
        for task in tasks:
            video_fps = campaign.video_fps if campaign.video_fps is not None else task.video_fps
            trace = campaign.trace or ()
            simulator = (campaign.simulators or {}).get(task.backend)
            for variant in variants:
                if task.initial_states and not _samples_layouts(variant) and \
                        campaign.seed + campaign.episodes > task.initial_states:
                    raise SpecError(
                        f"campaign {campaign.name!r}: task {task.id} has {task.initial_states} fixed initial states; "
                        f"seed + episodes must be at most {task.initial_states}, not "
                        f"{campaign.seed + campaign.episodes} (or sample layouts: libero.init: sampled)")
                keys = _CellKeys(task, variant, policy, campaign.replan_every, campaign.safety, video_fps, trace)
                # Only a semantic factor makes the instruction depend on the episode's seed: otherwise one call.
                per_seed = any(p.axis is Axis.SEMANTIC for p in variant.perturbations)
                fixed = instruction_for(task, variant, seeds[task.id][0]) if instruction_for and not per_seed and \
                    campaign.episodes else task.instruction
                for index, seed in enumerate(seeds[task.id]):
                    instruction = instruction_for(task, variant, seed) if instruction_for and per_seed else fixed
                    key = keys.key(seed, instruction)
                    jobs.append(EpisodeJob(campaign.name, task, variant, policy, index, seed, key, instruction,
                                           campaign.replan_every, campaign.pipeline, campaign.safety, video_fps,
                                           campaign.packed, trace, simulator))
    return jobs


def _one_batch(first: EpisodeJob, job: EpisodeJob) -> bool:
    """Whether ``job`` may share ``first``'s lockstep batch: one cell, one task as run (a plan's jobs share the
    task object; a campaign of explicit jobs may not), and every run setting alike."""
    return (first.cell == job.cell and (first.task is job.task or first.task == job.task)
            and (first.replan_every, first.pipeline, first.safety, first.video_fps, first.trace, first.simulator)
            == (job.replan_every, job.pipeline, job.safety, job.video_fps, job.trace, job.simulator))


def batch_jobs(jobs: list[EpisodeJob], batch_size: int) -> list[tuple[EpisodeJob, ...]]:
    """Group consecutive jobs of one cell (and one task and run settings) into lockstep batches of at most
    ``batch_size`` environments.

    Results never depend on the grouping (policies keep per-environment state keyed
    by seed), so resuming with a different set of pending jobs changes nothing.
    """
    batches: list[tuple[EpisodeJob, ...]] = []
    current: list[EpisodeJob] = []
    for job in jobs:
        if current and (len(current) == batch_size or not _one_batch(current[0], job)):
            batches.append(tuple(current))
            current = []
        current.append(job)
    if current:
        batches.append(tuple(current))
    return batches
