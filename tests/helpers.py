"""Policies and fakes for tests (importable as ``tests.helpers:...`` by worker processes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext
from assay.testing import ConstantPolicy, FunctionEnv, fake_task

__all__ = ["ConstantPolicy", "FlakyExpert", "FunctionEnv", "GainPolicy", "SloppyExpert", "WrongShape",
           "comparable_steps", "fake_task", "kill_after_episodes", "record_as_error"]


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


def comparable_steps(store: Any, record: Any) -> bytes | None:
    """An episode's step data minus wall-clock latency, as bytes: equal bytes mean a bit-identical
    episode (NaN events included, which a table comparison would call unequal)."""
    import pyarrow as pa

    if record.data_path is None:
        return None
    table = store.steps(record)
    # wall-clock facts: the request latency, and how many requests the server happened to batch together
    table = table.drop_columns([c for c in ("policy_latency_ms", "trace.server_batch_size") if c in table.column_names])
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


class SevenDimPolicy:
    """Declares a 7-dim action contract (a 7-DoF arm's policy): the handshake refuses it on Meta-World."""

    @staticmethod
    def contract(params: Mapping[str, Any]) -> Any:
        from assay.policies.contract import ActionContract, ArraySpec, PolicyContract

        return PolicyContract(observations={"observation/state": ArraySpec(shape=(39,))}, action=ActionContract(dim=7))

    def reset(self, context: PolicyContext) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.zeros((len(observations["env_ids"]), 7))


def record_as_error(root: Any, record: Any, reason: str = "policy server gone") -> None:
    """Make a recorded episode look as if it had ended in an error: its catalog row, and its step file's seal
    and checksum with it (a row alone contradicts the seal, and is re-run as damaged)."""
    import hashlib
    from pathlib import Path

    import pyarrow.parquet as pq

    from assay.store import Store
    from assay.store.catalog import episodes

    path = Path(root) / record.data_path
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"outcome": b"error"}), path)
    with Store(root) as store, store.catalog.engine.begin() as conn:
        conn.execute(episodes.update().where(episodes.c.key == record.key).values(
            outcome="error", reason=reason, data_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
            data_bytes=path.stat().st_size))


def popen_as_from_a_terminal(command: list[str], **options: Any) -> Any:
    """``subprocess.Popen`` whose child takes SIGINT as a process started from a terminal does (Python's
    KeyboardInterrupt). A shell without job control starts background commands with SIGINT ignored (a
    `make test &`, `nohup`), and an ignored signal stays ignored across exec, so Ctrl-C tests would see a
    child that never hears it. A handler installed here is reset to the default by exec; the parent's
    own disposition comes back after the spawn."""
    import signal
    import subprocess

    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(command, **options)
    finally:
        if before == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class GainPolicy:
    """Answers ``gain`` x the first state value + ``offset`` in every action dimension: typed constructor params."""

    def __init__(self, gain: float = 1.0, offset: float = 0.0) -> None:
        self.gain, self.offset, self.dim = gain, offset, 1

    def reset(self, context: PolicyContext) -> None:
        self.dim = context.task.action.dim

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        state = np.asarray(observations["state"])
        return np.repeat(self.gain * state[:, :1] + self.offset, self.dim, axis=1).clip(-1.0, 1.0)


class WrongShape(GainPolicy):
    """One action dimension too many for every row: every episode is an error."""

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.zeros((len(observations["state"]), self.dim + 1))
