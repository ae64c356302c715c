"""``assay sim-parity``: the same seeded episodes in process and on a served simulator, compared exactly.

Each episode resets both environments with the same seed and variant and steps both with the same
actions (uniform in the task's action bounds, drawn from the episode seed), comparing every observation
array (dtype, shape and bytes), reward, flag, ``info`` value and the initial conditions, until the episode
ends or ``steps`` steps. The first difference is reported with where it is (task, seed, step, field)
and both values; none means the served simulator gives the in-process episodes bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from assay.served.client import ServedEnv
from assay.sim import Observation, SimEnv, make_env
from assay.spec import TaskSpec, Variant, derive_seed


@dataclass(frozen=True)
class Difference:
    """The first place the two sides differ: the episode (task, seed), the step (-1: the reset), what, both values."""

    task: str
    seed: int
    step: int
    what: str
    in_process: str
    served: str

    def line(self) -> str:
        """One line: where, what, and both values."""
        at = "reset" if self.step < 0 else f"step {self.step}"
        return (f"first difference: {self.task} seed {self.seed} {at}: {self.what}: in process {self.in_process}, "
                f"served {self.served}")


@dataclass
class ParityResult:
    """How many episodes and steps were compared, and the first difference (None: all identical)."""

    episodes: int = 0
    steps: int = 0
    difference: Difference | None = None
    tasks: list[str] = field(default_factory=list)


def _show(value: Any) -> str:
    text = np.array2string(value, precision=17, threshold=8) if isinstance(value, np.ndarray) else repr(value)
    return " ".join(text.split())[:160]


def _observation_difference(a: Observation, b: Observation) -> tuple[str, str, str] | None:
    if sorted(a) != sorted(b):
        return "observation keys", _show(sorted(a)), _show(sorted(b))
    for name in sorted(a):
        x, y = np.asarray(a[name]), np.asarray(b[name])
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"observation {name} dtype/shape", f"{x.dtype}{x.shape}", f"{y.dtype}{y.shape}"
        if x.tobytes() != y.tobytes():
            if not x.shape:
                return f"observation {name}", _show(x), _show(y)
            first = tuple(int(i) for i in np.argwhere(x != y)[0])
            return f"observation {name}{list(first)}", _show(x[first]), _show(y[first])
    return None


def _transition_difference(a: Any, b: Any) -> tuple[str, str, str] | None:
    seen = _observation_difference(a.observation, b.observation)
    if seen is not None:
        return seen
    for name in ("reward", "terminated", "truncated", "success", "info"):
        x, y = getattr(a, name), getattr(b, name)
        if x != y or type(x) is not type(y):
            return name, _show(x), _show(y)
    return None


def compare_episode(local: SimEnv, served: SimEnv, task: TaskSpec, seed: int, steps: int,
                    variant: Variant | None = None) -> tuple[int, Difference | None]:
    """Steps compared in one episode and its first difference (None: identical)."""
    def found(step: int, seen: tuple[str, str, str]) -> tuple[int, Difference]:
        return step, Difference(task.id, seed, step, *seen)

    seen = _observation_difference(local.reset(seed, variant), served.reset(seed, variant))
    if seen is None and local.initial_conditions() != served.initial_conditions():
        seen = ("initial conditions", _show(local.initial_conditions()), _show(served.initial_conditions()))
    if seen is not None:
        return found(-1, seen)
    rng = np.random.default_rng(derive_seed("sim-parity", seed))
    spec = task.action
    for step in range(min(steps, task.horizon)):
        action = rng.uniform(spec.low, spec.high, spec.dim)
        a, b = local.step(action), served.step(action)
        seen = _transition_difference(a, b)
        if seen is not None:
            return found(step, seen)
        if a.terminated or a.truncated or a.success:
            return step + 1, None
    return min(steps, task.horizon), None


def sim_parity(tasks: Sequence[TaskSpec], url: str, episodes: int, steps: int, seed: int = 0,
               variant: Variant | None = None, build: Callable[[TaskSpec], SimEnv] = make_env) -> ParityResult:
    """``episodes`` seeded episodes per task in process (``build``) and on the served simulator at ``url``,
    stopping at the first difference."""
    result = ParityResult()
    for task in tasks:
        result.tasks.append(task.id)
        local, served = build(task), ServedEnv(task, url)
        try:
            for index in range(episodes):
                compared, difference = compare_episode(local, served, task, seed + index, steps, variant)
                result.episodes += 1
                result.steps += compared
                if difference is not None:
                    result.difference = difference
                    return result
        finally:
            local.close()
            served.close()
    return result
