"""The throughput benchmark's Ray helpers label its Ray rounds; they are checked here against processes whose
ancestry and names are known.

``_idle_ray_workers`` counts the processes named ``ray::IDLE`` (as Ray names its idle workers) that descend from
this process, at any depth, and none that do not (another Ray on the machine, an orphan); ``_settle_ray`` returns
as soon as that count is reached, and gives up at its limit; ``_ray_best_note`` and ``_by_round`` name the round
that gave Ray's best and each round's ratio.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.skipif(not Path("/proc").is_dir() or sys.platform != "linux", reason="reads /proc"),
              pytest.mark.skipif(shutil.which("bash") is None, reason="names processes with bash's exec -a")]

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "eval_throughput.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("eval_throughput_under_test", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _named(name: str, depth: int = 0) -> subprocess.Popen[bytes]:
    """A process whose command line starts with ``name``: this process's child (``depth`` 0) or ``depth`` shells
    below it (each shell runs one more command after its child, so it cannot ``exec`` into it)."""
    command = f"exec -a {name} sleep 60"
    for _ in range(depth):
        command = f"bash -c {shlex.quote(command)}; exit 0"
    return subprocess.Popen(["bash", "-c", command], start_new_session=True)  # its group: killed whole after


def _orphan(name: str) -> int:
    """A process named ``name`` whose parent has exited (it is no descendant of this process); its pid."""
    out = subprocess.run(["bash", "-c", f"(exec -a {name} sleep 60) </dev/null >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _named_below(root: int, name: bytes) -> int:
    """The pid of the process named ``name`` that descends from ``root`` (waits for it to appear)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if not (entry / "cmdline").read_bytes().startswith(name):
                    continue
                pid = int(entry.name)
                while pid > 1 and pid != root:
                    pid = _parent(pid)
            except OSError:
                continue
            if pid == root:
                return int(entry.name)
        time.sleep(0.02)
    raise AssertionError(f"no process named {name!r} appeared below {root}")


def _wait_named(pid: int, name: bytes) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(name):
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never showed the name {name!r}")


Started = list[int | subprocess.Popen[bytes]]


@pytest.fixture
def cleanup() -> Iterator[Started]:
    """Processes (or pids) killed after the test: a ``Popen``'s whole process group (the shells below it too), and
    it waited for."""
    started: Started = []
    yield started
    for process in reversed(started):
        if isinstance(process, subprocess.Popen):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(timeout=10)
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(process, 9)


def _no_idle_workers_of_ours(bench: ModuleType) -> None:
    """Skip unless this process has no Ray idle workers below it (a Ray an earlier test in this process started)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("a Ray this process started is up: its idle workers would be counted too")
    deadline = time.monotonic() + 10  # a Ray an earlier test shut down may still have workers leaving
    while bench._idle_ray_workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    if bench._idle_ray_workers():
        pytest.skip("idle Ray workers of an earlier Ray in this process are still up")


class _Clock:
    """``_settle_ray``'s ``time``: the real monotonic clock; sleeps recorded, and short (the 1 s grace is not
    waited here). Only the benchmark module's name ``time`` is replaced, not the ``time`` module."""

    def __init__(self, fail: bool = False) -> None:
        self.slept: list[float] = []
        self.fail = fail
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        if self.fail:
            pytest.fail(f"slept {seconds} s")
        self.slept.append(seconds)
        time.sleep(min(seconds, 0.05))


def test_counts_only_idle_workers_descended_from_this_process(bench: ModuleType, cleanup: Started) -> None:
    _no_idle_workers_of_ours(bench)
    orphan = _orphan("ray::IDLE")
    cleanup.append(orphan)
    _wait_named(orphan, b"ray::IDLE")
    if _parent(orphan) == os.getpid():  # this process is PID 1 or a subreaper: it adopts orphans
        pytest.skip("this process adopts orphans, so no process outside its tree can be made here")
    child, deep, busy = _named("ray::IDLE"), _named("ray::IDLE", depth=2), _named("ray::EnvActor")
    cleanup.extend([child, deep, busy])
    below = _named_below(deep.pid, b"ray::IDLE")
    cleanup.append(below)
    assert _parent(_parent(below)) == deep.pid  # two shells below this process's child
    _wait_named(child.pid, b"ray::IDLE")
    _wait_named(busy.pid, b"ray::EnvActor")
    assert bench._idle_ray_workers() == 2  # the child and the one three levels down; not the orphan, not the actor
    child.kill()
    child.wait(timeout=10)
    assert bench._idle_ray_workers() == 1


def test_settle_returns_once_reached_and_gives_up_at_its_limit(bench: ModuleType, cleanup: Started,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _no_idle_workers_of_ours(bench)
    clock = _Clock()
    monkeypatch.setattr(bench, "time", clock)
    started = time.monotonic()
    bench._settle_ray(1, limit_s=0.5)  # none of ours will come: it gives up at the limit
    assert 0.5 <= time.monotonic() - started < 5 and clock.slept[-1] == 1.0
    process = _named("ray::IDLE")
    cleanup.append(process)
    _wait_named(process.pid, b"ray::IDLE")
    clock.slept.clear()
    bench._settle_ray(1, limit_s=30)  # already reached: no poll, only the import grace
    assert clock.slept == [1.0]


def test_settle_does_not_wait_where_proc_cannot_be_read(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "_idle_ray_workers", lambda: None)
    monkeypatch.setattr(bench, "time", _Clock(fail=True))
    bench._settle_ray(2)


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
