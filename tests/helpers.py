"""Policies and fakes for tests (importable as ``tests.helpers:...`` by worker processes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext
from assay.sim import Transition
from assay.spec import ActionSpec, SuccessMode, TaskSpec


class FlakyExpert:
    """The expert, except: raises on seeds with ``seed % 3 == 0``, returns NaN on ``seed % 3 == 1``."""

    def __init__(self) -> None:
        self._expert = ExpertPolicy()
        self._seeds: tuple[int, ...] = ()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)
        self._seeds = context.seeds

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        seeds = [self._seeds[i] for i in observations["env_ids"]]
        if any(s % 3 == 0 for s in seeds):
            raise RuntimeError("flaky policy refuses this seed")
        actions = self._expert.act(observations)
        for row, seed in enumerate(seeds):
            if seed % 3 == 1:
                actions[row] = np.nan
        return actions


def fake_task(horizon: int = 10, success: SuccessMode = SuccessMode.ANY_STEP) -> TaskSpec:
    return TaskSpec(name="fake/counter", version=1, backend="gymnasium", env_name="Fake-v0", instructions=("count",),
                    horizon=horizon, control_hz=10.0, state_dim=1, action=ActionSpec(dim=1), success=success)


class FunctionEnv:
    """A SimEnv made of functions (after Gymnasium's GenericTestEnv): the runner without a simulator."""

    def __init__(self, task: TaskSpec, step_fn: Callable[[int, int, np.ndarray], Transition]) -> None:
        self.task = task
        self.step_fn = step_fn
        self.seed = -1
        self.t = 0

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        self.seed, self.t = seed, 0
        return {"state": np.array([float(seed)])}

    def step(self, action: np.ndarray) -> Transition:
        self.t += 1
        return self.step_fn(self.seed, self.t, action)

    def initial_conditions(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def close(self) -> None:
        pass


class ConstantPolicy:
    def __init__(self, value: float = 0.5) -> None:
        self.value = value

    def reset(self, context: PolicyContext) -> None:
        self.context = context

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.full((len(observations["env_ids"]), 1), self.value)


def comparable_steps(store: Any, record: Any) -> bytes | None:
    """An episode's step data minus wall-clock latency, as bytes: equal bytes mean a bit-identical
    episode (NaN events included, which a table comparison would call unequal)."""
    import pyarrow as pa

    if record.data_path is None:
        return None
    table = store.steps(record).drop_columns(["policy_latency_ms"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class SloppyExpert:
    """The expert, except every 5th action is NaN and every action is scaled past the limits."""

    def __init__(self) -> None:
        self._expert = ExpertPolicy()
        self._steps: dict[int, int] = {}

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)
        self._steps = {}

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        actions = 3.0 * self._expert.act(observations)
        for row, slot in enumerate(observations["env_ids"]):
            self._steps[slot] = self._steps.get(slot, 0) + 1
            if self._steps[slot] % 5 == 0:
                actions[row] = np.nan
        return actions


def kill_after_episodes(command: list[str], store: Any, count: int, timeout_s: float = 120) -> int:
    """Start ``command`` in its own process group and SIGKILL the whole group once the store's catalog
    holds ``count`` episodes; return how many it held then."""
    import os
    import signal
    import sqlite3
    import subprocess
    import time

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    done = 0
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
        try:
            with sqlite3.connect(store / "catalog.sqlite") as conn:
                done = conn.execute("select count(*) from episodes").fetchone()[0]
        except sqlite3.OperationalError:
            continue
        if done >= count:
            os.killpg(process.pid, signal.SIGKILL)  # the driver and any worker processes
            break
    process.wait()
    return done
