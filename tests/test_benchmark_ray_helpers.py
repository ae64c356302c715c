"""The throughput benchmark's Ray helpers label its Ray rounds; they are checked here against processes whose
ancestry and names are known, and against a scripted clock.

``_idle_ray_workers`` counts the processes named ``ray::IDLE`` (as Ray names its idle workers) that descend from a
root process, at any depth, and none outside its tree nor any other name; ``_settle_ray`` polls until that count is
reached or its limit passes, then waits a second's grace; ``_ray_best_note`` and ``_by_round`` name the round that
gave Ray's best and each round's ratio.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "eval_throughput.py"
# A root process with, below it: an idle worker as its child, another two shells down, and an actor.
TREE = ("(exec -a ray::IDLE sleep 60) & "
        "bash -c '(exec -a ray::IDLE sleep 60) & wait; exit 0' & "
        "(exec -a ray::EnvActor sleep 60) & wait")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eval_throughput_under_test", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Shell processes each in a process group of its own, killed whole (and waited for) after the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _shell(command: str, started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(["bash", "-c", command], start_new_session=True)
    started.append(process)
    return process


def _named(name: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(name):
                found.append(int(entry.name))
    return found


def _until(done: Callable[[], bool]) -> None:
    """Poll ``done()`` until it holds (processes take a moment to start and to be renamed)."""
    for _ in range(500):
        if done():
            return
        time.sleep(0.02)
    raise AssertionError("the processes never reached the expected state")


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_counts_the_idle_workers_below_the_root_at_any_depth_and_nothing_else(
        bench: ModuleType, groups: list[subprocess.Popen[bytes]]) -> None:
    root = _shell(TREE, groups)
    outside = _shell("exec -a ray::IDLE sleep 60", groups)  # a sibling of the root: outside its tree

    def mine(name: bytes) -> list[int]:  # the processes so named in the root's process group
        found = []
        for pid in _named(name):
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) == root.pid:
                    found.append(pid)
        return found

    _until(lambda: len(mine(b"ray::IDLE")) == 2 and len(mine(b"ray::EnvActor")) == 1
           and outside.pid in _named(b"ray::IDLE"))
    assert bench._idle_ray_workers(root.pid) == 2  # the child and the one two shells down; not the actor
    assert bench._idle_ray_workers(outside.pid) == 0  # the renamed process itself is its root, not below it
    child = next(pid for pid in mine(b"ray::IDLE") if _parent(pid) == root.pid)
    os.kill(child, signal.SIGKILL)
    _until(lambda: len(mine(b"ray::IDLE")) == 1)
    assert bench._idle_ray_workers(root.pid) == 1


class _Clock:
    """``_settle_ray``'s ``time``: a clock that moves only when slept on (whole milliseconds), sleeps recorded."""

    def __init__(self) -> None:
        self.ms = 0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.ms / 1000

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.ms += round(seconds * 1000)


def _settle(bench: ModuleType, monkeypatch: pytest.MonkeyPatch, counts: list[int | None], workers: int,
            limit_s: float) -> tuple[list[float], int]:
    """The sleeps ``_settle_ray`` makes while the idle count reads ``counts`` in turn, and how many it read."""
    clock, read = _Clock(), iter(counts)
    asked: list[int | None] = []

    def count() -> int | None:
        asked.append(next(read))
        return asked[-1]

    monkeypatch.setattr(bench, "time", clock)
    monkeypatch.setattr(bench, "_idle_ray_workers", count)
    bench._settle_ray(workers, limit_s=limit_s)
    return clock.slept, len(asked)


def test_settle_polls_until_the_workers_are_up_then_waits_the_grace(bench: ModuleType,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settle(bench, monkeypatch, [0, 1, 2], workers=2, limit_s=15) == ([0.2, 0.2, 1.0], 3)
    assert _settle(bench, monkeypatch, [3], workers=2, limit_s=15) == ([1.0], 1)  # already more than asked: n = 1


def test_settle_gives_up_at_its_limit(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # none come: polls at 0, 0.2, ..., 1.0 s; at the limit it stops polling and still waits the grace
    assert _settle(bench, monkeypatch, [0] * 10, workers=2, limit_s=1.0) == ([0.2] * 5 + [1.0], 6)


def test_settle_does_not_wait_where_proc_cannot_be_read(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settle(bench, monkeypatch, [None], workers=2, limit_s=15) == ([], 1)


def test_best_note_and_rounds(bench: ModuleType) -> None:
    rates = {bench.RAY: [90.0, 100.0, 80.0, 95.0], bench.LOCAL_BESIDE_RAY: [100.0, 98.0, 100.0, 100.0]}
    note = bench._ray_best_note(rates, [0, 2, 0, None])
    # round 2 (2 idle workers) gave Ray's best; over rounds 1 and 3 (none): 90 / 100
    assert note == "Ray's best round had 2 idle Ray workers before it; over the rounds with none, best to best 0.90"
    assert bench._ray_best_note(rates, [0, 0, 0, 0]) == "Ray's best round had 0 idle Ray workers before it"
    assert bench._ray_best_note(rates, [None] * 4) == "Ray's best round had ? idle Ray workers before it"
    line = bench._by_round(rates, bench.RAY, bench.LOCAL_BESIDE_RAY, "Ray / local")
    assert line == "Ray / local 0.90, 1.02, 0.80, 0.95 (median 0.93)"
    tie = {bench.RAY: [1.0, 1.0], bench.LOCAL_BESIDE_RAY: [1.0, 1.0]}  # n = 2, a tie: the first best round
    assert bench._ray_best_note(tie, [3, 0]) == ("Ray's best round had 3 idle Ray workers before it; over the rounds "
                                                 "with none, best to best 1.00")
