"""Campaigns end to end on Meta-World: determinism across executors, resume after a kill, fault isolation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store
from tests.helpers import comparable_steps, kill_after_episodes

pytestmark = pytest.mark.sim

SMALL = {
    "name": "det",
    "seed": 7,
    "episodes": 3,
    "envs_per_worker": 2,
    "tasks": ["metaworld/reach@1", "metaworld/drawer-open@1"],
    "policies": ["expert", {"name": "shaky", "builtin": "degraded-expert",
                            "params": {"action_noise": 0.8, "action_delay": 3, "freeze_prob": 0.2}}],
}


def _run(tmp_path: Path, executor_name: str, workers: int = 1, data: dict = SMALL):
    root = tmp_path / f"{executor_name}-{workers}"
    executors = {"inline": lambda: InlineExecutor(root), "inline-serial": lambda: InlineExecutor(root, pipelined=False)}
    executor = executors.get(executor_name, lambda: LocalExecutor(root, workers))()
    with Store(root) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(data)), store, executor)
        records = store.catalog.episodes(campaign=data["name"])
        steps = {r.key: comparable_steps(store, r) for r in records}  # bit-identical, latency aside
        return summary, {r.key: (r.outcome, r.steps, r.trajectory_hash, steps[r.key]) for r in records}, records


@pytest.mark.slow
def test_same_results_on_any_executor_and_worker_count(tmp_path):
    _, inline, records = _run(tmp_path, "inline")
    _, inline_again, _ = _run(tmp_path / "again", "inline")
    _, serial, _ = _run(tmp_path, "inline-serial")  # files written on the stepping thread
    _, local1, _ = _run(tmp_path, "local", 1)
    _, local2, _ = _run(tmp_path, "local", 2)
    assert len(inline) == 12
    assert inline == inline_again == serial == local1 == local2
    outcomes = {r.outcome for r in records}
    assert Outcome.SUCCESS in outcomes and len({r.trajectory_hash for r in records}) == 12
    expert = [r for r in records if r.policy_name == "expert"]
    assert all(r.outcome is Outcome.SUCCESS for r in expert)


def test_pipelined_writes_pass_on_what_finished_before_an_infrastructure_error(tmp_path, monkeypatch):
    """The writer thread holds batch 1 while batch 2 rolls out; if batch 2 raises, batch 1 still reaches
    the catalog (its files exist), and a rerun runs only what is missing."""
    from assay.run.worker import Worker

    data = {**SMALL, "name": "broken", "tasks": ["metaworld/reach@1"], "policies": ["expert"], "episodes": 4}
    original, calls = Worker.roll, []

    def roll(self, jobs):
        calls.append(len(jobs))
        if len(calls) == 2:
            raise OSError("disk went away")
        return original(self, jobs)

    monkeypatch.setattr(Worker, "roll", roll)
    with Store(tmp_path) as store:
        planned = prepare_campaign(campaign_from_data(data))
        with pytest.raises(OSError, match="disk went away"):
            run_campaign(planned, store, InlineExecutor(tmp_path))
        first = store.catalog.episodes(campaign="broken")
        assert len(first) == 2 and all(r.outcome is Outcome.SUCCESS for r in first)
        assert all((tmp_path / r.data_path).is_file() for r in first)
        monkeypatch.setattr(Worker, "roll", original)
        summary = run_campaign(planned, store, InlineExecutor(tmp_path))
        assert summary.ran == 2 and len(store.catalog.episodes(campaign="broken")) == 4


def test_rerun_skips_everything_already_done(tmp_path):
    first, results, _ = _run(tmp_path, "inline")
    second, again, _ = _run(tmp_path, "inline")
    assert (first.ran, first.skipped) == (12, 0)
    assert (second.ran, second.skipped) == (0, 12)
    assert again == results


def test_episodes_are_shared_between_campaigns_not_rerun(tmp_path):
    _run(tmp_path, "inline")
    bigger = {**SMALL, "name": "det-bigger", "episodes": 4}
    summary, results, records = _run(tmp_path, "inline", data=bigger)
    assert (summary.ran, summary.skipped) == (4, 12)
    assert len(results) == 16 and {r.campaign for r in records} == {"det-bigger"}


def test_a_flaky_policy_yields_error_episodes_and_the_campaign_completes(tmp_path):
    data = {**SMALL, "name": "flaky", "seed": 2, "episodes": 6, "tasks": ["metaworld/reach@1"],
            "policies": ["expert", "tests.helpers:FlakyExpert"]}
    summary, _, records = _run(tmp_path, "local", 2, data)
    assert summary.ran == 12
    flaky = [r for r in records if r.policy_name == "FlakyExpert"]
    for record in flaky:
        if record.seed % 3 == 0:
            assert record.outcome is Outcome.ERROR and "flaky policy refuses" in record.reason
        elif record.seed % 3 == 1:
            assert record.outcome is Outcome.ERROR and "NaN" in record.reason
        else:
            assert record.outcome is Outcome.SUCCESS
    assert {r.seed % 3 for r in flaky} == {0, 1, 2}, "pick a campaign seed that exercises every branch"
    assert all(r.outcome is Outcome.SUCCESS for r in records if r.policy_name == "expert")


@pytest.mark.slow
def test_killed_campaign_resumes_with_every_job_exactly_once(tmp_path, write_campaign):
    path = write_campaign("""
        name: resume
        seed: 1
        episodes: 8
        envs_per_worker: 1
        tasks: [metaworld/reach@1, metaworld/drawer-open@1]
        policies: [expert, random]
    """)
    store = tmp_path / "store"
    command = [sys.executable, "-m", "assay.cli.app", "run", str(path), "--store", str(store), "--executor", "inline"]
    done = kill_after_episodes(command, store, 5)
    assert 5 <= done < 32, f"the kill should land mid-campaign (saw {done} episodes)"

    with Store(store) as opened:
        spec = campaign_from_data({"name": "resume", "seed": 1, "episodes": 8, "envs_per_worker": 1,
                                   "tasks": ["metaworld/reach@1", "metaworld/drawer-open@1"],
                                   "policies": ["expert", "random"]})
        planned = prepare_campaign(spec)
        summary = run_campaign(planned, opened, InlineExecutor(store))
        records = opened.catalog.episodes(campaign="resume")
        assert summary.skipped >= 5 and summary.ran + summary.skipped == 32
        assert sorted(r.key for r in records) == sorted(j.key for j in planned.jobs)
        for record in records:
            opened.steps(record)  # every file is complete and matches its checksum
    leftovers = [p for p in (store / "episodes").rglob("*") if p.is_file() and not p.name.endswith(".parquet")]
    assert leftovers == []
    files = list((store / "episodes").rglob("*.parquet"))
    assert len(files) == 32


def test_local_workers_all_exit_cleanly_by_the_time_the_run_returns(tmp_path, monkeypatch):
    """A worker retired early (3 batches, 2 workers: one runs out of work first) is not waited for while the
    other works, yet when the run returns every worker process has exited, with status 0 (``os._exit`` after
    closing its environments), and the pool holds none."""
    from assay.run import executors

    spawned: list = []
    pools: list = []
    original_spawn, original_init = executors._ProcessPool.spawn, executors._ProcessPool.__init__

    def spawn(self):
        worker = original_spawn(self)
        spawned.append(self.slots[worker].process)
        return worker

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        pools.append(self)

    monkeypatch.setattr(executors._ProcessPool, "spawn", spawn)
    monkeypatch.setattr(executors._ProcessPool, "__init__", init)
    data = {**SMALL, "name": "exits", "episodes": 3, "envs_per_worker": 1, "tasks": ["metaworld/reach@1"],
            "policies": ["expert"]}
    with Store(tmp_path / "store") as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(data)), store, LocalExecutor(tmp_path / "store", 2))
    assert summary.ran == 3
    assert len(spawned) == 2
    assert [p.exitcode for p in spawned] == [0, 0]  # exited, not killed, and reaped before the return
    assert pools[0].slots == {} and pools[0].stopping == []
