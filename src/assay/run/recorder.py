"""The recorder: collects one episode's steps and turns them into a record and a table.

Step columns include the action-chunk bookkeeping: ``chunk_id`` (the n-th policy
request of this episode), ``chunk_index`` (the action's position in that chunk)
and ``policy_latency_ms`` (the latency of the request that produced the chunk).

The policy's own per-step account is the ``trace.<name>`` columns: what a policy
that has a ``step_trace(slot)`` hook said about the request that produced the
step's action (a perception stack's detections, a router's chosen skill and
whether it is the task's). Numbers are float64 (NaN where a step has no value),
text is a string column. The run's settings (safety filter, ``replan_every``,
pipeline) and the safety filter's intervention counts go into the record's
``provenance["run"]``, so a rerun can reproduce the cell and a report can count.

Camera frames go to one video per camera at the job's ``video_fps`` (default: every
step). Step ``i`` is a video frame when ``floor(i * fps / control_hz)`` advances there
(always at step 0); ``observation.images.<camera>`` holds the index of the frame that
is the image seen at that step, and ``-1`` at steps the video has no frame of.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.run.batch import Fault
from assay.sim import Observation, Transition, conflict_marks, renderer_info
from assay.spec import ENVIRONMENT_STATE, EpisodeJob
from assay.store import EpisodeRecord, Outcome

_TIMED = {"reset": "reset_s", "policy": "policy_s", "sim": "sim_s"}
_Taken = tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]  # state, environment state, frames
NO_FRAME = -1  # the frame index of a step whose image the video does not hold


def records_frame(step: int, video_fps: float | None, control_hz: float) -> bool:
    """Whether the video keeps the image seen at ``step`` (every step without ``video_fps``, or at or above
    the control rate; else the first step of each frame period, so frame ``j`` is the image at time ~ j / fps)."""
    if video_fps is None or video_fps >= control_hz:
        return True
    return step == 0 or int(step * video_fps // control_hz) != int((step - 1) * video_fps // control_hz)
SAFETY_KINDS = ("nan", "limit", "workspace")  # the safety filter's ``info.safety.<kind>`` columns


class _Kept:
    """The arrays of one observation key an episode keeps, copied only where needed.

    The conformance kit requires a backend to return a fresh array each call (``env_checks.REUSED_ARRAY``), so
    arrays are kept by reference. They are taken as they arrive (``EpisodeRecorder.observe``, before the next
    step could write into them); the first of each episode is copied, and once an array shares memory with the
    one before it (a backend that reuses a buffer) every later one is copied too: no recorded step is corrupted."""

    def __init__(self) -> None:
        self._last: np.ndarray | None = None
        self._copying = False

    def keep(self, value: np.ndarray) -> np.ndarray:
        """``value`` as it may be kept: itself, or a copy of it as above."""
        array = np.asarray(value)
        first = self._last is None
        if not first and not self._copying and np.may_share_memory(array, self._last):
            self._copying = True
        self._last = array
        return array.copy() if first or self._copying else array


class EpisodeRecorder:
    """Per-step buffers of one episode; cheap appends on the hot path."""

    def __init__(self, job: EpisodeJob) -> None:
        self.job = job
        self._kept_state = _Kept()
        self._kept_environment = _Kept()
        self._kept_frames = {camera.name: _Kept() for camera in job.task.cameras}
        self._observed: _Taken | None = None  # taken by observe(), for add()
        self.states: list[np.ndarray] = []
        self.environment_states: list[np.ndarray] = []  # the backend's environment_state, where it gives one
        self.frames: dict[str, list[np.ndarray]] = {camera.name: [] for camera in job.task.cameras}
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.successes: list[bool] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.latencies_ms: list[float] = []
        self.chunk_ids: list[int] = []
        self.chunk_indices: list[int] = []
        self.frame_indices: list[int] = []
        self.infos: list[dict[str, float]] = []
        self.traces: list[Mapping[str, float | str]] = []
        self.initial_conditions: dict[str, Any] = {}
        self.policy_info: dict[str, Any] = {}
        self.outcome: Outcome | None = None
        self.reason = ""
        self.success_step: int | None = None
        self.reset_s = 0.0
        self.policy_s = 0.0
        self.sim_s = 0.0
        self.duration_s = 0.0

    @property
    def steps(self) -> int:
        """The number of steps recorded so far."""
        return len(self.actions)

    @property
    def total_return(self) -> float:
        """The sum of the rewards so far (what the record and the step file's seal hold)."""
        return float(np.sum(self.rewards)) if self.rewards else 0.0

    @property
    def done(self) -> bool:
        """Whether the episode has an outcome (then nothing more is recorded)."""
        return self.outcome is not None

    @property
    def video_rate(self) -> float:
        """The videos' frames per second: ``video_fps``, at most the control rate (default: the control rate)."""
        control_hz = self.job.task.control_hz
        return min(self.job.video_fps or control_hz, control_hz)

    def records_frame(self, step: int) -> bool:
        """Whether the video keeps the image of ``step`` (see the module docstring)."""
        return bool(self.frames) and records_frame(step, self.job.video_fps, self.job.task.control_hz)

    def add(self, observation: Observation, action: np.ndarray, transition: Transition, latency_ms: float,
            chunk_id: int = 0, chunk_index: int = 0, trace: Mapping[str, float | str] | None = None) -> None:
        """Record the observation the policy acted on (its arrays as ``observe`` took them, when it was told of
        it), its action and what the step returned."""
        observed, self._observed = self._observed, None
        state, environment, frames = observed if observed is not None else self._take(observation)
        self.states.append(state)
        if environment is not None:
            self.environment_states.append(environment)
        if self.frames:
            for camera, frame in frames.items():
                self.frames[camera].append(frame)
            self.frame_indices.append(len(next(iter(self.frames.values()))) - 1 if frames else NO_FRAME)
        self.actions.append(action)
        self.rewards.append(transition.reward)
        self.successes.append(transition.success)
        self.terminated.append(transition.terminated)
        self.truncated.append(transition.truncated)
        self.latencies_ms.append(latency_ms)
        self.chunk_ids.append(chunk_id)
        self.chunk_indices.append(chunk_index)
        self.infos.append(transition.info)
        self.traces.append(trace or {})
        if transition.success and self.success_step is None:
            self.success_step = len(self.actions) - 1

    def observe(self, observation: Observation) -> None:
        """Take what the episode keeps of an observation as it arrives, before the environment steps again (a
        backend that reuses its buffers would overwrite it); the next ``add`` records it."""
        no_frame = not self.frames or not self.records_frame(len(self.actions))
        rendered = no_frame or all(f"image.{camera}" in observation for camera in self.frames)
        # The last observation of an episode is not rendered, and never recorded: ``add`` takes it if it comes.
        self._observed = self._take(observation) if rendered else None

    def _take(self, observation: Observation) -> _Taken:
        """The state, the environment state (where the backend gives one) and (at a video's frame) the frames
        to keep."""
        state = self._kept_state.keep(observation["state"])
        environment = observation.get(ENVIRONMENT_STATE)
        kept_environment = None if environment is None else self._kept_environment.keep(environment)
        if not self.frames or not self.records_frame(len(self.actions)):
            return state, kept_environment, {}
        frames = {camera: kept.keep(observation[f"image.{camera}"]) for camera, kept in self._kept_frames.items()}
        return state, kept_environment, frames

    def started(self, initial_conditions: Mapping[str, Any]) -> None:
        """The environment was reset; ``initial_conditions`` is what it chose."""
        self.initial_conditions = dict(initial_conditions)

    def timed(self, part: str, seconds: float) -> None:
        """Add ``seconds`` to the episode's ``reset``, ``policy`` or ``sim`` time."""
        if part not in _TIMED:
            raise ValueError(f"unknown timed part {part!r}; valid: {', '.join(_TIMED)}")
        attribute = _TIMED[part]
        setattr(self, attribute, getattr(self, attribute) + seconds)

    def finish(self, outcome: Outcome, reason: str = "", duration_s: float | None = None) -> None:
        """End the episode (the first outcome wins); ``duration_s`` when the loop knows it now."""
        if self.outcome is None:
            self.outcome, self.reason = outcome, reason
            if duration_s is not None:
                self.duration_s = duration_s

    def fail(self, fault: Fault) -> None:
        """End the episode as ``error`` for ``fault``."""
        self.finish(Outcome.ERROR, fault.message)

    def settle_duration(self, elapsed_s: float) -> None:
        """The episode's wall time, unless it was set when the episode ended."""
        if self.duration_s == 0.0:
            self.duration_s = elapsed_s

    def note_policy_info(self, info: Mapping[str, Any]) -> None:
        """What the policy decided for this episode (its ``episode_info`` hook)."""
        self.policy_info = dict(info)

    def columns(self) -> dict[str, np.ndarray]:
        """The episode's time-aligned step columns, as the step file stores them."""
        control_hz = self.job.task.control_hz
        n = self.steps
        columns: dict[str, np.ndarray] = {
            "step": np.arange(n, dtype=np.int32),
            "t": np.arange(n, dtype=np.float64) / control_hz,
            "observation.state": np.asarray(self.states, dtype=np.float64).reshape(n, -1),
            **self._environment_column(n),
            "action": np.asarray(self.actions, dtype=np.float64).reshape(n, -1),
            "reward": np.asarray(self.rewards, dtype=np.float64),
            "success": np.asarray(self.successes, dtype=bool),
            "terminated": np.asarray(self.terminated, dtype=bool),
            "truncated": np.asarray(self.truncated, dtype=bool),
            "policy_latency_ms": np.asarray(self.latencies_ms, dtype=np.float64),
            "chunk_id": np.asarray(self.chunk_ids, dtype=np.int32),
            "chunk_index": np.asarray(self.chunk_indices, dtype=np.int32),
        }
        for camera in self.frames:  # the video frame that is the image seen at the step (-1: none)
            columns[f"observation.images.{camera}"] = np.asarray(self.frame_indices, dtype=np.int32)
        keys = sorted({k for info in self.infos for k in info})
        for key in keys:
            columns[f"info.{key}"] = np.asarray([info.get(key, np.nan) for info in self.infos], dtype=np.float64)
        for key in sorted({k for trace in self.traces for k in trace}):
            values = [trace.get(key) for trace in self.traces]
            if any(isinstance(v, str) for v in values):
                columns[f"trace.{key}"] = np.asarray(["" if v is None else str(v) for v in values], dtype=object)
            else:
                columns[f"trace.{key}"] = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
        return columns

    def _environment_column(self, n: int) -> dict[str, np.ndarray]:
        """``observation.environment_state`` when the backend gave one at every recorded step."""
        if n == 0 or len(self.environment_states) != n:
            return {}
        return {"observation.environment_state": np.asarray(self.environment_states, dtype=np.float64).reshape(n, -1)}

    def run_settings(self) -> dict[str, Any]:
        """How the cell was run (what a rerun must repeat) and what the safety filter did."""
        job = self.job
        settings: dict[str, Any] = {"safety": job.safety, "replan_every": job.replan_every,
                                    "pipeline": job.pipeline.value}
        if job.video_fps is not None:
            settings["video_fps"] = job.video_fps
        if job.safety:
            settings["interventions"] = {kind: int(sum(info.get(f"safety.{kind}", 0.0) for info in self.infos))
                                         for kind in SAFETY_KINDS}
        return settings

    def trajectory_hash(self) -> str:
        """SHA-256 over states, actions and rewards: equal hashes mean equal trajectories."""
        digest = hashlib.sha256()
        digest.update(np.asarray(self.states, dtype=np.float64).tobytes())
        digest.update(np.asarray(self.actions, dtype=np.float64).tobytes())
        digest.update(np.asarray(self.rewards, dtype=np.float64).tobytes())
        digest.update((self.outcome.value if self.outcome else "").encode())
        return digest.hexdigest()[:32]

    def _marks(self) -> dict[str, Any]:
        """An episode whose words name another task is marked (``provenance.instruction``)."""
        marks = conflict_marks(self.job.task, self.job.variant, self.job.seed)
        return {"instruction": marks} if marks else {}

    def record(self, provenance: dict[str, Any], data_path: str | None, data_sha256: str | None,
               data_bytes: int | None = None) -> EpisodeRecord:
        """The episode's catalog record, once finished, with its step file's path, digest and size."""
        job = self.job
        assert self.outcome is not None, "finish() before record()"
        return EpisodeRecord(
            key=job.key,
            campaign=job.campaign,
            task_id=job.task.id,
            task_hash=job.task.content_hash(),
            variant_key=job.variant.key,
            variant_name=job.variant.name,
            variant=job.variant.model_dump(mode="json"),
            policy_name=job.policy.name,
            policy_version=job.policy.version,
            policy_spec=job.policy.spec.model_dump(mode="json"),
            seed=job.seed,
            episode_index=job.episode_index,
            instruction=job.instruction,
            outcome=self.outcome,
            reason=self.reason,
            steps=self.steps,
            total_return=self.total_return,
            success_step=self.success_step,
            trajectory_hash=self.trajectory_hash(),
            initial_conditions=self.initial_conditions,
            policy_info=self.policy_info,
            data_path=data_path,
            data_sha256=data_sha256,
            data_bytes=data_bytes,
            timings={
                "reset_s": round(self.reset_s, 6),
                "policy_s": round(self.policy_s, 6),
                "sim_s": round(self.sim_s, 6),
                "duration_s": round(self.duration_s, 6),
            },
            provenance={**provenance, "run": self.run_settings(), **self._marks(), **self._renderer()},
        )

    def _renderer(self) -> dict[str, Any]:
        """What drew the episode's frames (``provenance.renderer``), when it has a camera and one was drawn."""
        info = renderer_info() if self.job.task.cameras else None
        return {"renderer": info.to_dict()} if info is not None else {}
