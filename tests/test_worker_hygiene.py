"""A worker whose policy exhausted a resource is replaced before its next batch (issue 25)."""

from __future__ import annotations

import os

import pytest

from assay.run import LocalExecutor
from assay.run.faults import FaultPolicy, exhausted, rss_mb
from assay.store import Outcome
from tests.test_faults import run_and_collect


@pytest.mark.sim
def test_exhausted_names_resource_errors_only(tmp_path):
    from dataclasses import replace

    _, _, records = run_and_collect(tmp_path, LocalExecutor(tmp_path, workers=1), {
        "name": "one", "seed": 1, "episodes": 1, "horizon": 5, "tasks": ["metaworld/reach@1"], "policies": ["random"]})
    record = records[0]
    assert exhausted([record]) is None
    assert exhausted([replace(record, outcome=Outcome.ERROR, reason="policy raised ValueError: x")]) is None
    oom = replace(record, outcome=Outcome.ERROR, reason="policy raised MemoryError: leaked")
    assert exhausted([record, oom]) == "policy raised MemoryError: leaked"
    assert (rss_mb(os.getpid()) or 0) > 10 and rss_mb(-1) is None


@pytest.mark.slow
def test_a_worker_is_replaced_after_a_memory_error(tmp_path):
    data = {"name": "leaks", "seed": 11, "episodes": 6, "envs_per_worker": 1, "horizon": 30,
            "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "leaker", "entrypoint": "tests.faulty_policies:LeakingExpert",
                          "params": {"modulo": 2}}]}
    executor = LocalExecutor(tmp_path, workers=1, faults=FaultPolicy(max_attempts=1))
    _, _, records = run_and_collect(tmp_path, executor, data)
    records.sort(key=lambda r: r.episode_index)
    poisoned = [r for r in records if r.seed % 2 == 0]
    first = min(r.episode_index for r in poisoned)
    assert any(r.seed % 2 and r.episode_index > first for r in records), "the seeds must put a clean one after a leak"
    for record in records:
        if record.seed % 2 == 0:
            assert record.outcome is Outcome.ERROR and "MemoryError: leaked" in record.reason
        else:  # a fresh process: never "the previous policy leaked everything"
            assert record.outcome is not Outcome.ERROR, record.reason
    assert executor.restarts == len(poisoned)


@pytest.mark.sim
def test_a_worker_above_its_memory_ceiling_is_replaced(tmp_path):
    data = {"name": "big", "seed": 2, "episodes": 2, "envs_per_worker": 1, "horizon": 5,
            "tasks": ["metaworld/reach@1"], "policies": ["random"]}
    executor = LocalExecutor(tmp_path, workers=1, faults=FaultPolicy(worker_rss_limit_mb=1.0))  # every worker is "big"
    _, _, records = run_and_collect(tmp_path, executor, data)
    assert all(r.outcome is not Outcome.ERROR for r in records) and executor.restarts == 2


def test_json_stdout_stays_clean_json_whatever_else_writes_to_it():
    import json
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "from assay.cli import render\n"
        "with render.json_stdout(True):\n"
        "    print('(raylet) a worker was killed')\n"
        "    os.write(1, b'C library noise\\n')\n"
        "    render.print_json({'ran': 3})\n"
        "print('(raylet) after the block, as Ray prints seconds later')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ran": 3}, "stdout is the document alone, also after the block"
    assert "(raylet) a worker was killed" in done.stderr and "C library noise" in done.stderr
    assert "(raylet) after the block" in done.stderr
