"""``check_sim_env``: what every SimEnv backend must do, checked on a live environment.

After dm_env's ``EnvironmentTestMixin`` and Gymnasium's ``env_checker``: a
backend author calls ``check_sim_env(env, seeds)`` in their own tests. Each
failed check raises :class:`ConformanceError` with one of the messages below
(formatted), so a test can match the exact problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from assay.annotations import public_api
from assay.errors import ConformanceError
from assay.policies.protocol import ENVIRONMENT_STATE, OBSERVATION_PREFIXES, STATE
from assay.sim.protocol import SimEnv, Transition
from assay.spec import TaskSpec, canonical_json

NOT_A_SIM_ENV = "{env} is not a SimEnv: it lacks {missing}"
NO_TASK = "{env}.task is {value!r}, expected a TaskSpec"
OBSERVATION_NOT_MAPPING = "{where}: the observation is {kind}, expected a dict of arrays"
MISSING_KEY = "{where}: the observation has no {key!r} (keys: {keys})"
UNDOCUMENTED_KEY = ("{where}: observation key {key!r} is not one a policy can receive "
                    "(state, environment_state, image.*, depth.*, calib.*, privileged.*)")
BAD_ARRAY = "{where}: {key!r} has shape {shape} and dtype {dtype}, expected shape {expected} and dtype {dtype_expected}"
NON_FINITE = "{where}: {key!r} contains NaN or infinity"
NOT_A_TRANSITION = "step returned {kind}, expected a Transition"
BAD_FIELD = "step: Transition.{field} is {value!r}, expected {expected}"
BAD_INFO = "step: info[{key!r}] is {value!r}, expected a finite float scalar (info is recorded)"
NOT_JSON = "initial_conditions() is not JSON-able: {error}"
NONDETERMINISTIC_RESET = "reset({seed}) is not deterministic: {what} differs from the first reset with this seed"
SEED_IGNORED = "reset({a}) and reset({b}) gave the same observation and initial conditions: the seed is ignored"
NONDETERMINISTIC_STEP = "seed {seed}: step {step} differs between two runs with the same actions ({what})"
REUSED_ARRAY = ("{where}: {key!r} {how}: the environment reuses an array it returned (the recorder keeps every "
                "step's arrays); return a fresh one each time (Gymnasium's check_returned_data_not_reused)")
RESET_AFTER_DONE = ("reset({seed}) after an episode ran to its end differs from a fresh reset ({what}): "
                    "the environment keeps state across episodes")


def _where_keys(observation: Mapping[str, Any]) -> str:
    return ", ".join(sorted(observation)) or "none"


def check_observation(observation: Any, task: TaskSpec, where: str) -> None:
    """The observation has the task's keys, shapes and dtypes, finite values, and documented keys only."""
    if not isinstance(observation, Mapping):
        raise ConformanceError(OBSERVATION_NOT_MAPPING.format(where=where, kind=type(observation).__name__))
    for key, spec in task.observation_spec().items():
        if key not in observation:
            raise ConformanceError(MISSING_KEY.format(where=where, key=key, keys=_where_keys(observation)))
        value = np.asarray(observation[key])
        if not spec.conforms(value):
            expected = "float" if spec.floating else str(spec.dtype)
            raise ConformanceError(BAD_ARRAY.format(where=where, key=key, shape=value.shape, dtype=value.dtype,
                                                    expected=spec.shape, dtype_expected=expected))
        if spec.floating and not np.all(np.isfinite(value)):
            raise ConformanceError(NON_FINITE.format(where=where, key=key))
    for key in observation:
        if key not in (STATE, ENVIRONMENT_STATE) and not any(key.startswith(p) for p in OBSERVATION_PREFIXES):
            raise ConformanceError(UNDOCUMENTED_KEY.format(where=where, key=key))


def check_transition(transition: Any, task: TaskSpec) -> None:
    """A Transition with a checked observation, a finite float reward, bool flags and float info."""
    if not isinstance(transition, Transition):
        raise ConformanceError(NOT_A_TRANSITION.format(kind=type(transition).__name__))
    check_observation(transition.observation, task, "step")
    if not isinstance(transition.reward, (float, int)) or not math.isfinite(transition.reward):
        raise ConformanceError(BAD_FIELD.format(field="reward", value=transition.reward, expected="a finite float"))
    for name in ("terminated", "truncated", "success"):
        value = getattr(transition, name)
        if not isinstance(value, (bool, np.bool_)):
            raise ConformanceError(BAD_FIELD.format(field=name, value=value, expected="a bool"))
    for key, value in transition.info.items():
        if not isinstance(value, (float, int, np.floating, np.integer)) or not math.isfinite(float(value)):
            raise ConformanceError(BAD_INFO.format(key=key, value=value))


def _difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The first key whose arrays differ (bitwise; NaN equal to NaN), or None."""
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            return f"key {key!r}"
        x, y = np.asarray(a[key]), np.asarray(b[key])
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return f"observation {key!r}"
    return None


def _initial(env: SimEnv, seed: int) -> tuple[dict[str, Any], str]:
    observation = env.reset(seed)
    check_observation(observation, env.task, f"reset({seed})")
    try:
        conditions = canonical_json(env.initial_conditions())
    except (TypeError, ValueError) as exc:
        raise ConformanceError(NOT_JSON.format(error=exc)) from None
    return dict(observation), conditions


def _action(task: TaskSpec, seed: int, step: int) -> np.ndarray:
    """A deterministic in-bounds action for ``step`` of seed ``seed``'s check episode."""
    return task.action_spec().sample(np.random.default_rng([seed, step]))


def _episode(env: SimEnv, seed: int, steps: int) -> list[Transition]:
    """Up to ``steps`` checked transitions from ``reset(seed)``, stopping when the episode ends."""
    env.reset(seed)
    transitions: list[Transition] = []
    for step in range(steps):
        transition = env.step(_action(env.task, seed, step))
        check_transition(transition, env.task)
        transitions.append(transition)
        if transition.terminated or transition.truncated:
            break
    return transitions


def _check_arrays_not_reused(env: SimEnv, seed: int, steps: int) -> None:
    """Every array of the task's observation spec that ``reset`` and ``step`` return is its own: no later call
    writes into it or hands out memory it shares (a render buffer returned twice would corrupt the recording)."""
    keys = tuple(env.task.observation_spec())
    kept: list[tuple[str, str, np.ndarray, np.ndarray]] = []  # where, key, the array returned, its values then

    def keep(where: str, observation: Mapping[str, Any]) -> None:
        for key in keys:
            if key in observation:
                array = observation[key]
                for earlier_where, earlier_key, earlier, _ in kept:
                    if isinstance(array, np.ndarray) and np.may_share_memory(array, earlier):
                        how = f"shares memory with {earlier_key!r} of {earlier_where}"
                        raise ConformanceError(REUSED_ARRAY.format(where=where, key=key, how=how))
                kept.append((where, key, np.asarray(array), np.array(array, copy=True)))

    keep(f"reset({seed})", env.reset(seed))
    for step in range(steps):
        transition = env.step(_action(env.task, seed, step))
        keep(f"step {step + 1}", transition.observation)
        if transition.terminated or transition.truncated:
            break
    for where, key, array, values in kept:
        if not np.array_equal(array, values, equal_nan=array.dtype.kind == "f"):
            raise ConformanceError(REUSED_ARRAY.format(where=where, key=key, how="changed after later calls"))


def _check_protocol(env: Any) -> None:
    required = ("reset", "step", "initial_conditions", "close")
    missing = [name for name in required if not callable(getattr(env, name, None))]
    missing += [] if hasattr(env, "task") else ["task"]
    if missing:
        raise ConformanceError(NOT_A_SIM_ENV.format(env=type(env).__name__, missing=", ".join(missing)))
    if not isinstance(env.task, TaskSpec):
        raise ConformanceError(NO_TASK.format(env=type(env).__name__, value=env.task))


@public_api
def check_sim_env(env: SimEnv, seeds: Sequence[int] = (0, 1), steps: int = 5, episode_steps: int | None = None) -> None:
    """Check ``env`` against the SimEnv contract on ``seeds`` (at least one; two to check the seed is used).

    Checks: the protocol's members; observations with the task's keys, shapes and dtypes; a
    deterministic reset (same observation and initial conditions on a repeat, also after other
    seeds); different seeds giving different episodes; steps that return well-formed Transitions
    and repeat exactly for the same actions; and a reset after an episode ran to its end (the
    horizon, or ``episode_steps`` when set, or until it terminated) that equals a fresh one; and
    observation arrays that stay as they were returned (no buffer reused: the recorder keeps them).
    Raises ConformanceError.
    """
    _check_protocol(env)
    if not seeds:
        raise ValueError("check_sim_env needs at least one seed")
    firsts = {seed: _initial(env, seed) for seed in seeds}
    for seed in seeds:  # again, after the other seeds: nothing leaks from one reset to the next
        observation, conditions = _initial(env, seed)
        what = _difference(firsts[seed][0], observation)
        if what is None and conditions != firsts[seed][1]:
            what = "initial_conditions()"
        if what is not None:
            raise ConformanceError(NONDETERMINISTIC_RESET.format(seed=seed, what=what))
    if len(seeds) > 1:
        a, b = seeds[0], seeds[1]
        if _difference(firsts[a][0], firsts[b][0]) is None and firsts[a][1] == firsts[b][1]:
            raise ConformanceError(SEED_IGNORED.format(a=a, b=b))
    seed = seeds[0]
    _check_arrays_not_reused(env, seed, steps)
    first, second = _episode(env, seed, steps), _episode(env, seed, steps)
    for step, (x, y) in enumerate(zip(first, second, strict=False)):
        what = _difference(x.observation, y.observation)
        if what is None and (x.reward, x.terminated, x.truncated, x.success, x.info) != (
                y.reward, y.terminated, y.truncated, y.success, y.info):
            what = "reward, flags or info"
        if what is not None or len(first) != len(second):
            raise ConformanceError(NONDETERMINISTIC_STEP.format(seed=seed, step=step + 1, what=what or "length"))
    _episode(env, seed, episode_steps or env.task.horizon)  # to the end of an episode
    observation, conditions = _initial(env, seed)
    what = _difference(firsts[seed][0], observation)
    if what is None and conditions != firsts[seed][1]:
        what = "initial_conditions()"
    if what is not None:
        raise ConformanceError(RESET_AFTER_DONE.format(seed=seed, what=what))
