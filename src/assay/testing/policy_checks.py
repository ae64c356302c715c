"""``check_policy``: what every Policy must do, checked against a task.

A policy author calls ``check_policy(policy, task)`` in their own tests (pass
``env`` to feed it real observations instead of synthetic ones). Each failed
check raises :class:`ConformanceError` with one of the messages below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from assay.annotations import public_api
from assay.errors import ConformanceError
from assay.policies.protocol import (
    CALIB_PREFIX,
    DEPTH_PREFIX,
    ENV_IDS,
    IMAGE_PREFIX,
    INSTRUCTION,
    STATE,
    Policy,
    PolicyContext,
    SupportsEpisodeInfo,
    SupportsStepTrace,
)
from assay.sim.protocol import Observation, SimEnv
from assay.spec import TaskSpec, canonical_json

NOT_A_POLICY = "{policy} is not a Policy: it lacks {missing}"
ACT_RAISED = "act() raised {error} on a well-formed batch of {rows} rows"
NOT_AN_ARRAY = "act() returned {kind}, expected a float array (B, A) or chunks (B, H, A)"
WRONG_ACTION_SHAPE = "act() returned shape {shape} for {rows} rows, expected ({rows}, {dim}) or ({rows}, H, {dim})"
WRONG_DTYPE = "act() returned dtype {dtype}, expected floating point"
NON_FINITE_ACTION = "act() returned NaN or infinity"
OUT_OF_BOUNDS = "act() returned values outside the task's action box [{low}, {high}] (max |a| = {peak:.3g})"
NONDETERMINISTIC_ACT = (
    "act() after reset() with the same seeds gave different actions: the policy is not seeded from the context")
BATCH_DEPENDENT = (
    "row {row} of a {rows}-row batch differs from the same environment asked alone: results depend on batching")
BAD_EPISODE_INFO = "episode_info({slot}) is not a JSON-able mapping: {error}"
BAD_STEP_TRACE = "step_trace({slot}) is not a JSON-able mapping: {error}"


def _check_protocol(policy: Any) -> None:
    missing = [name for name in ("reset", "act") if not callable(getattr(policy, name, None))]
    if missing:
        raise ConformanceError(NOT_A_POLICY.format(policy=type(policy).__name__, missing=", ".join(missing)))


def synthetic_observation(task: TaskSpec, seed: int) -> Observation:
    """One environment's observation with the task's keys and shapes, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    specs = task.observation_spec()
    observation: Observation = {STATE: rng.uniform(-0.5, 0.5, specs[STATE].shape)}
    for camera in task.cameras:
        image = specs[IMAGE_PREFIX + camera.name]
        observation[image.name] = rng.integers(0, 256, image.shape, dtype=image.dtype)
        if camera.depth:
            depth = specs[DEPTH_PREFIX + camera.name]
            observation[depth.name] = rng.uniform(0.5, 2.0, depth.shape).astype(depth.dtype)  # metres, in view
        observation[CALIB_PREFIX + camera.name] = np.zeros(10)
    return observation


def _batch(observations: Sequence[Observation], instructions: Sequence[str], slots: Sequence[int]) -> dict[str, Any]:
    """The runner's batch for ``slots``: stacked arrays, instructions and env_ids."""
    batch: dict[str, Any] = {key: np.stack([observations[s][key] for s in slots]) for key in observations[slots[0]]}
    batch[INSTRUCTION] = [instructions[s] for s in slots]
    batch[ENV_IDS] = np.asarray(slots)
    return batch


def check_actions(actions: Any, task: TaskSpec, rows: int, bounded: bool = False) -> np.ndarray:
    """``actions`` is a finite float ``(rows, A)`` or ``(rows, H, A)`` array (within bounds if ``bounded``)."""
    if not isinstance(actions, np.ndarray):
        raise ConformanceError(NOT_AN_ARRAY.format(kind=type(actions).__name__))
    spec = task.action_spec()
    (dim,) = spec.shape
    if actions.ndim not in (2, 3) or actions.shape[0] != rows or actions.shape[-1] != dim or 0 in actions.shape:
        raise ConformanceError(WRONG_ACTION_SHAPE.format(shape=actions.shape, rows=rows, dim=dim))
    if not spec.dtype_conforms(actions.dtype):
        raise ConformanceError(WRONG_DTYPE.format(dtype=actions.dtype))
    if not np.all(np.isfinite(actions)):
        raise ConformanceError(NON_FINITE_ACTION)
    if bounded and (actions.min() < spec.minimum - 1e-9 or actions.max() > spec.maximum + 1e-9):
        raise ConformanceError(OUT_OF_BOUNDS.format(low=spec.minimum, high=spec.maximum,
                                                    peak=float(np.abs(actions).max())))
    return actions


def _act(policy: Policy, batch: Mapping[str, Any], task: TaskSpec, rows: int, bounded: bool) -> np.ndarray:
    try:
        actions = policy.act(batch)
    except Exception as exc:  # noqa: BLE001 - the check reports any fault as a finding
        raise ConformanceError(ACT_RAISED.format(error=f"{type(exc).__name__}: {exc}", rows=rows)) from exc
    return check_actions(actions, task, rows, bounded)


@public_api
def check_policy(policy: Policy, task: TaskSpec, env: SimEnv | None = None, seeds: Sequence[int] = (0, 1, 2),
                 batch_invariant: bool = True, bounded: bool = False) -> None:
    """Check ``policy`` against the Policy contract on ``task``; raise ConformanceError on a finding.

    Observations come from ``env.reset(seed)`` when ``env`` is given, else are synthetic (the
    task's keys and shapes). Checks: ``reset`` and ``act``; a finite float ``(B, A)`` or
    ``(B, H, A)`` answer (within the action box if ``bounded``); the same answer after a second
    ``reset`` with the same seeds; with ``batch_invariant``, each row equal to that environment
    asked alone; ``step_trace`` and ``episode_info`` (when declared) JSON-able for every slot.
    """
    _check_protocol(policy)
    seeds = tuple(seeds)
    observations = [env.reset(seed) if env is not None else synthetic_observation(task, seed) for seed in seeds]
    instructions = tuple(task.instructions[i % len(task.instructions)] for i in range(len(seeds)))
    context = PolicyContext(task, seeds, instructions)
    slots = list(range(len(seeds)))
    policy.reset(context)
    first = _act(policy, _batch(observations, instructions, slots), task, len(slots), bounded)
    policy.reset(context)
    again = _act(policy, _batch(observations, instructions, slots), task, len(slots), bounded)
    if not np.array_equal(first, again):
        raise ConformanceError(NONDETERMINISTIC_ACT)
    if batch_invariant and len(slots) > 1:
        policy.reset(context)
        for slot in slots:
            alone = _act(policy, _batch(observations, instructions, [slot]), task, 1, bounded)
            if alone.shape[1:] != first.shape[1:] or not np.allclose(alone[0], first[slot], rtol=1e-6, atol=1e-9):
                raise ConformanceError(BATCH_DEPENDENT.format(row=slot, rows=len(slots)))
    hooks: list[tuple[Callable[[int], Mapping[str, Any]], str]] = []
    if isinstance(policy, SupportsStepTrace):
        hooks.append((policy.step_trace, BAD_STEP_TRACE))
    if isinstance(policy, SupportsEpisodeInfo):
        hooks.append((policy.episode_info, BAD_EPISODE_INFO))
    for hook, message in hooks:
        for slot in slots:
            try:
                canonical_json(dict(hook(slot)))
            except Exception as exc:  # noqa: BLE001 - any fault of the hook is a finding
                raise ConformanceError(message.format(slot=slot, error=exc)) from None
