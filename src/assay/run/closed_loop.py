"""The closed-loop episode loop: several environments, batched policy calls, action chunks.

A policy answers each row with one action ``(A,)`` or a chunk ``(H, A)``; the
runner executes the first ``replan_every`` actions of a chunk (all of it by
default) before asking again for that environment. Every step records its chunk
id, its index within the chunk, and the latency of the request that produced it.

Faults are outcomes, not exceptions: a reset or step that raises, a policy that
raises, or an action that is not a finite floating-point ``(A,)`` / ``(H, A)``
array ends *that* episode as ``error`` with the reason, and the others go on.
When a batched ``act`` raises, each environment is asked again alone, so one bad
seed never takes its batch-mates down (and results do not depend on batching);
a policy server that is gone fails the batch at once, without asking row by row.
A policy that answers row by row (``SupportsRowAnswers``: a remote policy, whose
server steps a session per answer) is never asked again: a row that failed ends
with its own error and the answered rows go on, so a neighbour's failure never
steps a session twice. A finished environment is never stepped again.

Frames are rendered on demand: before a step the runner knows whether its
observation will be read, by the policy (the slot's queue is then empty, so a
replan follows, and the policy reads frames: ``policies.reads_frames``) or by a
video (a frame at the job's ``video_fps``); when neither, an environment that
supports it (``SupportsFramesOnDemand``) skips rendering that observation. A
chunk-5 camera policy thus renders a fifth of the steps, a policy that reads no
frame renders only the video's, with the same actions and outcomes as rendering
every step (``render_on_demand=False``). A policy that reads no frame is given none.

Every step is traced per layer (``assay.store.trace``): the request that produced its action (when it began,
its rows), the environment's step (when it began, how long), what the environment's layers did
(``SupportsLayerTrace``: the controller, physics, drawing time; the wrappers' action processing), the frames
drawn and what they show, and the recorder's time. Tracing reads and never writes, so a traced episode is the
untraced one (``tracing=False``, for comparisons), bit for bit.

Pipelines: ``lockstep`` asks for every environment that needs actions in one
call. ``decoupled`` splits the environments into two groups and keeps one
group's request in flight (on a thread) while the other group steps, so neither
the simulator nor a remote policy server sits idle. Both give identical
trajectories for a policy whose rows are independent.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from assay.errors import PolicyUnavailableError
from assay.policies import (
    Policy,
    PolicyContext,
    SupportsEpisodeInfo,
    SupportsRowAnswers,
    SupportsStepTrace,
    reads_frames,
)
from assay.run.batch import EpisodeBatch, Fault, FaultKind, describe_error
from assay.run.recorder import EpisodeRecorder
from assay.sim import (
    Observation,
    SimEnv,
    SupportsFramesOnDemand,
    Transition,
    innermost_steps_together,
    step_together,
)
from assay.spec import BoundedArray, EpisodeJob, Pipeline, SuccessMode, TaskSpec
from assay.store import Outcome


def _check_chunk(chunk: np.ndarray, spec: BoundedArray, filtered: bool = False) -> Fault | None:
    """Why the policy's answer cannot be executed under the task's action ``spec``, or None. With the safety
    filter on (``filtered``), non-finite values pass: the filter replaces and counts them."""
    (dim,) = spec.shape
    if not spec.dtype_conforms(chunk.dtype):
        return Fault(FaultKind.INVALID_ACTION, f"invalid action: dtype {chunk.dtype}, expected floating point")
    if chunk.shape != spec.shape and not (chunk.ndim == 2 and chunk.shape[1:] == spec.shape and chunk.shape[0] > 0):
        return Fault(FaultKind.INVALID_ACTION, f"invalid action: shape {chunk.shape}, expected ({dim},) or a chunk "
                                               f"(H, {dim})")
    if not filtered and not np.isfinite(chunk).all():
        return Fault(FaultKind.INVALID_ACTION, "invalid action: contains NaN or infinity")
    return None


def outcome_after(task: TaskSpec, transition: Transition, steps: int) -> Outcome | None:
    """The outcome after this transition (the episode's ``steps``-th), or None while the episode goes on; a
    replay judges its transitions with it too."""
    at_horizon = steps >= task.horizon or transition.truncated
    if task.success is SuccessMode.ANY_STEP and transition.success:
        return Outcome.SUCCESS
    if task.success is SuccessMode.AT_END and (at_horizon or transition.terminated):
        return Outcome.SUCCESS if transition.success else Outcome.FAILURE
    if transition.terminated:
        return Outcome.FAILURE
    if at_horizon:
        return Outcome.TIMEOUT
    return None


_FRAME_PREFIXES = ("image.", "depth.")  # the observation keys a policy that reads no frame is not given

Answer = np.ndarray | Fault  # what the policy gave one row: an action or chunk, or why not


def _act(policy: Policy, batch: dict[str, Any], rows: int, action_dim: int) -> list[Answer]:
    """One action or chunk (or a Fault) per row; if the batched call raises, ask each row alone."""
    try:
        actions = np.asarray(policy.act(batch))
    except PolicyUnavailableError as exc:
        return [Fault(FaultKind.POLICY_UNAVAILABLE, f"policy unavailable: {exc}")] * rows
    except Exception as exc:  # noqa: BLE001 - any policy fault becomes an outcome
        if rows == 1:
            return [Fault(FaultKind.POLICY, f"policy raised {describe_error(exc)}")]
        results: list[Answer] = []
        for row in range(rows):
            single = {name: values[row : row + 1] for name, values in batch.items()}
            results.extend(_act(policy, single, 1, action_dim))
        return results
    if actions.ndim in (2, 3) and actions.shape[0] == rows:
        return list(actions)
    if rows == 1 and actions.ndim == 1 and actions.size == action_dim:
        return [actions]
    expected = f"expected ({rows}, {action_dim}) or ({rows}, H, {action_dim})"
    return [Fault(FaultKind.INVALID_ACTION, f"invalid action batch: shape {actions.shape}, {expected}")] * rows


def _failed(exc: BaseException) -> Fault:
    if isinstance(exc, PolicyUnavailableError):
        return Fault(FaultKind.POLICY_UNAVAILABLE, f"policy unavailable: {exc}")
    return Fault(FaultKind.POLICY, f"policy raised {describe_error(exc)}")


def _act_rows(policy: SupportsRowAnswers, batch: dict[str, Any], rows: int) -> list[Answer]:
    """One action or chunk (or a Fault) per row from a policy that answers row by row; nothing is asked twice."""
    try:
        answers = list(policy.act_rows(batch))
    except Exception as exc:  # noqa: BLE001 - any policy fault becomes an outcome
        return [_failed(exc)] * rows
    if len(answers) != rows:
        return [Fault(FaultKind.INVALID_ACTION, f"invalid action batch: {len(answers)} answers for {rows} rows")] * rows
    return [_failed(answer) if isinstance(answer, BaseException) else np.asarray(answer) for answer in answers]


def _rows(values: list[Any]) -> np.ndarray:
    """The rows stacked, as ``np.stack`` does: by ``np.array`` (a quarter of its cost), and where rows differ in
    shape, by ``np.stack`` itself, for its error."""
    try:
        return np.array(values)
    except ValueError:
        return np.stack(values)


def _trace_hook(env: SimEnv) -> Callable[[frozenset[str]], Any] | None:
    """The environment's ``layer_trace`` (``SupportsLayerTrace``), looked up by name: a runtime Protocol check per
    environment and batch cost more than a short episode's trace."""
    hook = getattr(env, "layer_trace", None)
    return hook if callable(hook) else None


Request = tuple[float, int]  # a policy request: when it began (ms on the batch's clock), the rows it asked
_Queued = tuple[np.ndarray, int, int, float, dict[str, Any] | None, Request]


@dataclass
class _Slot:
    """One environment's queue of actions still to execute from its latest chunk."""

    queue: deque[_Queued] = field(default_factory=deque)
    chunks: int = 0


class _Episodes:
    """The state of one batch of episodes; ``request`` and ``step`` work on any subset of slots."""

    def __init__(
        self, envs: Sequence[SimEnv], policy: Policy, batch: EpisodeBatch, render_on_demand: bool = True,
        on_started: Callable[[], None] | None = None, tracing: bool = True,
    ) -> None:
        self.envs, self.policy, self.batch, self.jobs = envs, policy, batch, batch.jobs
        self.on_started = on_started  # called once, when the first answer is accepted (then None)
        # the environments that can leave frames out of an observation nobody reads
        self.on_demand: list[SupportsFramesOnDemand | None] = [
            env if render_on_demand and batch.task.cameras and isinstance(env, SupportsFramesOnDemand) else None
            for env in envs]
        self.task = batch.task
        self.action = batch.task.action_spec()  # every answer is checked against it: built once
        self.replan_every = batch.replan_every
        # a served simulator's sessions step in one round trip per lockstep step (decided once)
        self.together = len(envs) > 1 and any(innermost_steps_together(env) for env in envs)
        # decided once: a runtime Protocol check costs ~50 us, too much for every answer
        self.traces = isinstance(policy, SupportsStepTrace)
        self.rows_apart = isinstance(policy, SupportsRowAnswers)
        # the per-layer trace: each environment's own hook (decided once, like the checks above), the opt-in
        # groups, and whether frames are drawn at all
        self.tracing = tracing
        self.layered = [_trace_hook(env) if tracing else None for env in envs]
        self.groups = frozenset(batch.trace)
        self.draws = tracing and bool(batch.task.cameras)
        self.frames_read = True  # whether the policy reads image.*/depth.* (asked after its reset)
        jobs = batch.jobs
        self.recorders = [EpisodeRecorder(job) for job in jobs]
        self.observations: list[Observation | None] = [None] * len(jobs)
        self.slots = [_Slot() for _ in jobs]
        self.started = time.perf_counter()

    def reset(self) -> list[int]:
        active: list[int] = []
        for slot, (env, job) in enumerate(zip(self.envs, self.jobs, strict=True)):
            t0 = time.perf_counter()
            self.recorders[slot].reset_ms = (t0 - self.started) * 1000.0
            try:
                observation = self.observations[slot] = env.reset(job.seed)
                self.recorders[slot].observe(observation)
                self.recorders[slot].started(env.initial_conditions())
                active.append(slot)
            except Exception as exc:  # noqa: BLE001 - a backend's reset fault becomes that episode's outcome
                self.recorders[slot].fail(Fault(FaultKind.RESET, f"reset failed: {describe_error(exc)}"))
            self.recorders[slot].timed("reset", time.perf_counter() - t0)
        try:
            self.policy.reset(PolicyContext(self.task, self.batch.seeds, self.batch.instructions))
            self.frames_read = reads_frames(self.policy)
        except Exception as exc:  # noqa: BLE001 - a policy's reset fault becomes the batch's outcome
            fault = Fault(FaultKind.POLICY_RESET, f"policy reset raised {describe_error(exc)}")
            for slot in active:
                self.recorders[slot].fail(fault)
            active = []
        return active

    def needing(self, slots: Sequence[int]) -> list[int]:
        return [s for s in slots if not self.recorders[s].done and not self.slots[s].queue]

    def ask(self, slots: Sequence[int]) -> tuple[list[Answer], float, Request]:
        """Call the policy for ``slots`` (thread-safe: touches nothing shared); the answers, the latency and
        the request (when it began, how many rows)."""
        observations = [o for o in (self.observations[slot] for slot in slots) if o is not None]
        assert len(observations) == len(slots)  # a slot is asked only once it has an observation
        first = observations[0]
        names = first if self.frames_read else [name for name in first if not name.startswith(_FRAME_PREFIXES)]
        batch: dict[str, Any] = {name: _rows([o[name] for o in observations]) for name in names}
        batch["instruction"] = [self.jobs[slot].instruction for slot in slots]
        batch["env_ids"] = np.asarray(slots)
        t0 = time.perf_counter()
        answers = (_act_rows(cast(SupportsRowAnswers, self.policy), batch, len(slots)) if self.rows_apart
                   else _act(self.policy, batch, len(slots), self.task.action.dim))
        return answers, time.perf_counter() - t0, ((t0 - self.started) * 1000.0, len(slots))

    def _trace(self, slot: int) -> dict[str, Any] | None:
        """The policy's own account of its latest answer for ``slot`` (optional ``step_trace`` hook)."""
        if not self.traces:
            return None
        try:
            return dict(cast(SupportsStepTrace, self.policy).step_trace(slot))
        except Exception as exc:  # noqa: BLE001 - a diagnostic hook never fails an episode
            return {"error": describe_error(exc)}

    def accept(self, slots: Sequence[int], answers: list[Answer], latency: float,
               request: Request = (math.nan, 0)) -> None:
        """Queue each slot's chunk (its first ``replan_every`` actions) or end the episode on a bad answer.
        The first call tells ``on_started`` (on the rollout's own thread: the first ``act`` has returned)."""
        if self.on_started is not None:
            started, self.on_started = self.on_started, None
            started()
        for slot, answer in zip(slots, answers, strict=True):
            recorder, state = self.recorders[slot], self.slots[slot]
            recorder.timed("policy", latency / len(slots))
            problem = answer if isinstance(answer, Fault) else _check_chunk(answer, self.action, self.batch.safety)
            if problem is not None:
                recorder.fail(problem.at_step(recorder.steps))
                continue
            assert isinstance(answer, np.ndarray)
            chunk = answer.reshape(-1, self.task.action.dim).astype(np.float64)
            keep = chunk[: self.replan_every] if self.replan_every else chunk
            trace = self._trace(slot)
            for index, action in enumerate(keep):
                state.queue.append((action, state.chunks, index, latency * 1000.0, trace, request))
            state.chunks += 1

    def step(self, slots: Sequence[int]) -> None:
        """Execute the next queued action of every live slot in ``slots``."""
        if self.together:
            self._step_together(slots)
            return
        for slot in slots:
            move = self._next(slot)
            if move is None:
                continue
            t1 = time.perf_counter()
            try:
                transition: Transition | Exception = self.envs[slot].step(move[0])
            except Exception as exc:  # noqa: BLE001 - a simulator fault becomes that episode's outcome
                transition = exc
            self._stepped(slot, move, transition, t1, time.perf_counter())

    def _step_together(self, slots: Sequence[int]) -> None:
        """As :meth:`step`, the slots' environments stepped in one call (``assay.sim.together``: a served
        simulator's sessions in one round trip); each slot is timed its share of the call."""
        moves = [(slot, move) for slot in slots if (move := self._next(slot)) is not None]
        if not moves:
            return
        t1 = time.perf_counter()
        outcomes = step_together([self.envs[slot] for slot, _ in moves], [move[0] for _, move in moves])
        share = (time.perf_counter() - t1) / len(moves)
        for order, ((slot, move), outcome) in enumerate(zip(moves, outcomes, strict=True)):
            start = t1 + order * share
            self._stepped(slot, move, outcome, start, start + share)

    def _next(self, slot: int) -> _Queued | None:
        """The slot's next queued action (None when its episode is over or its queue empty); tells its
        environment to leave out the frames of the observation it returns when nobody reads them."""
        recorder, queue = self.recorders[slot], self.slots[slot].queue
        if recorder.done or not queue:
            return None
        move = queue.popleft()
        skipper = self.on_demand[slot]
        # the next observation's frames are read if a replan follows (empty queue) and the policy reads
        # frames, or if the video keeps its frame; never after the horizon's last step
        following = recorder.steps + 1
        if skipper is not None and (following >= self.task.horizon or (
                (queue or not self.frames_read) and not recorder.records_frame(following))):
            skipper.skip_next_frames()
        return move

    def _stepped(self, slot: int, move: _Queued, transition: Transition | Exception, t1: float, t2: float) -> None:
        """Record the slot's step (``transition``, or what its environment's step raised), taken from ``t1`` to
        ``t2``, and end its episode when the step ended it."""
        began = time.perf_counter()
        action, chunk_id, index, latency_ms, trace, request = move
        recorder, queue = self.recorders[slot], self.slots[slot].queue
        recorder.timed("sim", t2 - t1)
        if isinstance(transition, Exception):  # a simulator fault becomes that episode's outcome
            fault = Fault(FaultKind.SIMULATOR, f"simulator raised {describe_error(transition)}")
            recorder.fail(fault.at_step(recorder.steps))
            return
        observation = self.observations[slot]
        assert observation is not None  # every slot is reset before its first step
        layers = self._layers(slot, request, t1, t2, transition.observation) if self.tracing else None
        recorder.add(observation, action, transition, latency_ms, chunk_id, index, trace)
        self.observations[slot] = transition.observation
        recorder.observe(transition.observation)
        if layers is not None:
            layers["recorder.ms"] = (time.perf_counter() - began) * 1000.0
            recorder.layers.append(layers)
        outcome = outcome_after(self.task, transition, recorder.steps)
        if outcome is not None:
            recorder.finish(outcome, duration_s=time.perf_counter() - self.started)
            queue.clear()

    def _layers(self, slot: int, request: Request, t1: float, t2: float,
                observation: Observation) -> dict[str, Any]:
        """The step's per-layer trace (names without ``layer.``): the environment's own fields, its request, its
        timing on the batch's clock, and the frames drawn for the observation it returned."""
        hook = self.layered[slot]
        found = hook(self.groups) if hook is not None else {}
        fields: dict[str, Any] = found if type(found) is dict else dict(found)  # a hook's dict is its to give
        fields["policy.start_ms"], fields["policy.rows"] = request
        fields["physics.start_ms"] = (t1 - self.started) * 1000.0
        fields["physics.ms"] = (t2 - t1) * 1000.0 - float(fields.get("render.ms", 0.0))
        if self.draws:
            frames = [value for name, value in observation.items() if name.startswith("image.")]
            fields["render.frames"] = float(len(frames))
            fields["render.mean"] = float(np.mean([frame.mean() for frame in frames])) if frames else math.nan
        return fields

    def live(self, slots: Sequence[int]) -> list[int]:
        return [s for s in slots if not self.recorders[s].done]

    def finish(self) -> list[EpisodeRecorder]:
        # optional: what the policy decided (skill, ...)
        info = self.policy.episode_info if isinstance(self.policy, SupportsEpisodeInfo) else None
        for slot, recorder in enumerate(self.recorders):
            recorder.settle_duration(time.perf_counter() - self.started)
            if info is not None and recorder.steps:
                try:
                    recorder.note_policy_info(dict(info(slot)))
                except Exception as exc:  # noqa: BLE001 - a diagnostic hook never fails an episode
                    recorder.note_policy_info({"episode_info_error": describe_error(exc)})
        return self.recorders


def _lockstep(episodes: _Episodes, active: list[int]) -> None:
    while active:
        need = episodes.needing(active)
        if need:
            episodes.accept(need, *episodes.ask(need))
        episodes.step(active)
        active = episodes.live(active)


def _decoupled(episodes: _Episodes, active: list[int]) -> None:
    """Two groups; group A's request is in flight while group B executes its actions, then swap."""
    if len(active) < 2:
        _lockstep(episodes, active)
        return
    groups = [active[0::2], active[1::2]]
    with ThreadPoolExecutor(1, thread_name_prefix="assay-decoupled") as pool:
        need = episodes.needing(groups[0])
        episodes.accept(need, *episodes.ask(need))
        turn = 1
        while any(groups):
            asking, stepping = groups[turn], groups[1 - turn]
            need = episodes.needing(asking)
            future = pool.submit(episodes.ask, need) if need else None
            episodes.step(stepping)  # overlaps the request in flight
            if future is not None:
                episodes.accept(need, *future.result())
            groups[1 - turn] = episodes.live(stepping)
            groups[turn] = episodes.live(asking)
            turn = 1 - turn
            if not groups[turn] and groups[1 - turn]:
                # one group is done: the other goes on alone in lockstep
                _lockstep(episodes, groups[1 - turn])
                return


def rollout(envs: Sequence[SimEnv], policy: Policy, jobs: Sequence[EpisodeJob] | EpisodeBatch,
            pipeline: Pipeline | None = None, render_on_demand: bool = True,
            on_started: Callable[[], None] | None = None, tracing: bool = True) -> list[EpisodeRecorder]:
    """Run ``jobs`` (one cell) on ``envs``; every recorder comes back finished.

    ``pipeline`` defaults to the jobs' own (the campaign's ``pipeline`` field). ``render_on_demand=False``
    renders every observation (the same results, slower; for comparisons). ``on_started`` is called once
    the environments and the policy are reset and the policy's first ``act`` has returned (answered or
    raised), before the first step: a worker tells its driver, so a batch that hangs before this point (in
    a constructor, a reset or the first inference, which every job alone would repeat) is recorded whole
    instead of split and retried job by job. Not called when no episode gets that far (every reset failed).
    ``tracing=False`` records no per-layer trace (the same episodes: for comparisons and the overhead benchmark).
    """
    batch = jobs if isinstance(jobs, EpisodeBatch) else EpisodeBatch.of(jobs)
    episodes = _Episodes(envs, policy, batch, render_on_demand, on_started, tracing)
    active = episodes.reset()
    mode = pipeline or batch.pipeline
    (_decoupled if mode is Pipeline.DECOUPLED else _lockstep)(episodes, active)
    return episodes.finish()
