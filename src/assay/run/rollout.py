"""The closed-loop episode loop: several environments in lockstep, one policy call per step.

Faults are outcomes, not exceptions: a reset or step that raises, a policy that
raises, or an action that is not a finite ``(action_dim,)`` vector ends *that*
episode as ``error`` with the reason, and the others go on. When a batched
``act`` raises, each environment is asked again alone, so one bad seed never
takes its batch-mates down (and results do not depend on how jobs were batched).
A finished environment is never stepped again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from assay.policies import Policy, PolicyContext
from assay.run.recorder import EpisodeRecorder
from assay.sim import Observation, SimEnv, Transition
from assay.spec import EpisodeJob, SuccessMode, TaskSpec
from assay.store import Outcome


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _check_action(action: np.ndarray, task: TaskSpec) -> str | None:
    if action.shape != (task.action.dim,):
        return f"invalid action: shape {action.shape}, expected ({task.action.dim},)"
    if not np.all(np.isfinite(action)):
        return "invalid action: contains NaN or infinity"
    return None


def _outcome(task: TaskSpec, transition: Transition, steps: int) -> Outcome | None:
    """The outcome after this transition, or None while the episode goes on."""
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


def _act(policy: Policy, batch: dict[str, Any], rows: int, action_dim: int) -> list[np.ndarray | str]:
    """One action (or an error string) per row; if the batched call raises, ask each row alone."""
    try:
        actions = np.asarray(policy.act(batch), dtype=np.float64)
    except Exception as exc:  # noqa: BLE001 - any policy fault becomes an outcome
        if rows == 1:
            return [f"policy raised {describe_error(exc)}"]
        results: list[np.ndarray | str] = []
        for row in range(rows):
            single = {name: values[row : row + 1] for name, values in batch.items()}
            results.extend(_act(policy, single, 1, action_dim))
        return results
    if actions.ndim == 2 and actions.shape[0] == rows:
        return list(actions)
    if rows == 1 and actions.size == action_dim:
        return [actions.reshape(-1)]
    return [f"invalid action batch: shape {actions.shape}, expected ({rows}, {action_dim})"] * rows


def rollout(envs: Sequence[SimEnv], policy: Policy, jobs: Sequence[EpisodeJob]) -> list[EpisodeRecorder]:
    """Run ``jobs`` (one cell) on ``envs`` in lockstep; every recorder comes back finished."""
    task = jobs[0].task
    recorders = [EpisodeRecorder(job) for job in jobs]
    observations: list[Observation | None] = [None] * len(jobs)
    started = time.perf_counter()
    active: list[int] = []
    for slot, (env, job) in enumerate(zip(envs, jobs)):
        t0 = time.perf_counter()
        try:
            observations[slot] = env.reset(job.seed)
            recorders[slot].initial_conditions = env.initial_conditions()
            active.append(slot)
        except Exception as exc:  # noqa: BLE001
            recorders[slot].finish(Outcome.ERROR, f"reset failed: {describe_error(exc)}")
        recorders[slot].reset_s = time.perf_counter() - t0
    try:
        policy.reset(PolicyContext(task, tuple(j.seed for j in jobs), tuple(j.instruction for j in jobs)))
    except Exception as exc:  # noqa: BLE001
        for slot in active:
            recorders[slot].finish(Outcome.ERROR, f"policy reset raised {describe_error(exc)}")
        active = []

    while active:
        batch: dict[str, Any] = {name: np.stack([observations[slot][name] for slot in active])  # type: ignore[index]
                                 for name in observations[active[0]]}  # type: ignore[union-attr]
        batch["instruction"] = [jobs[slot].instruction for slot in active]
        batch["env_ids"] = np.asarray(active)
        t0 = time.perf_counter()
        actions = _act(policy, batch, len(active), task.action.dim)
        latency = time.perf_counter() - t0
        share = latency / len(active)
        still_active: list[int] = []
        for slot, action in zip(active, actions):
            recorder = recorders[slot]
            recorder.policy_s += share
            problem = action if isinstance(action, str) else _check_action(action, task)
            if problem is not None:
                recorder.finish(Outcome.ERROR, f"step {recorder.steps}: {problem}")
                continue
            t1 = time.perf_counter()
            try:
                transition = envs[slot].step(action)
            except Exception as exc:  # noqa: BLE001
                recorder.finish(Outcome.ERROR, f"step {recorder.steps}: simulator raised {describe_error(exc)}")
                continue
            finally:
                recorder.sim_s += time.perf_counter() - t1
            recorder.add(observations[slot], action, transition, latency * 1000.0)  # type: ignore[arg-type]
            observations[slot] = transition.observation
            outcome = _outcome(task, transition, recorder.steps)
            if outcome is None:
                still_active.append(slot)
            else:
                recorder.finish(outcome)
                recorder.duration_s = time.perf_counter() - started
        active = still_active
    for recorder in recorders:
        if recorder.duration_s == 0.0:
            recorder.duration_s = time.perf_counter() - started
    return recorders
