"""``--workers auto`` and ``envs_per_worker: auto`` (issue 57): the model's choice on known probe figures, a real
probe on Meta-World, and whole runs whose episodes equal a fixed setting's (the choice never changes a result)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run import prepare_campaign
from assay.run.autosize import ProbePoint, choose, predicted_s, size_run
from assay.spec import campaign_from_data
from assay.store import Store

runner = CliRunner()


def _jobs(episodes: int, tasks: tuple[str, ...] = ("metaworld/reach@1",), policies: tuple[str, ...] = ("expert",),
          horizon: int = 100):
    spec = campaign_from_data({"name": "sizing", "seed": 0, "episodes": episodes, "tasks": list(tasks),
                               "policies": list(policies), "horizon": horizon})
    return list(prepare_campaign(spec).jobs)


# One worker's lockstep step with B environments: a fixed policy call of 4 ms plus 1 ms an environment, so a
# step costs 4 + B ms and steps/s rise with B; building an environment costs 0.5 s.
CALL = [ProbePoint(b, (4 + b) / 1000, 0.5, 100.0) for b in (1, 2, 4, 8)]


def test_the_model_predicts_rounds_of_batches_times_the_horizon_plus_the_builds():
    jobs = _jobs(16)
    point = CALL[2]  # 4 environments: 4 batches of the one cell, 2 rounds on 2 workers
    assert predicted_s(point, 2, jobs, 100) == pytest.approx(4 * 0.5 + 2 * 100 * 0.008)
    assert predicted_s(point, 1, jobs, 100) == pytest.approx(4 * 0.5 + 4 * 100 * 0.008)


def test_a_policy_call_that_dominates_is_amortised_over_more_environments_on_every_core():
    workers, point, seconds = choose(CALL, _jobs(400), 100, cores=4)
    assert (workers, point.envs) == (4, 8)  # 13 batches a worker: the most environments, every core
    assert seconds == pytest.approx(8 * 0.5 + 13 * 100 * 0.012)


def test_few_episodes_choose_few_environments_and_no_idle_process():
    # 6 episodes in one cell, builds of 3 s (a LIBERO scene): one environment each on 2 cores beats 2 x 3
    scene = [ProbePoint(b, (10 + b) / 1000, 3.0, 400.0) for b in (1, 2, 4)]
    workers, point, _ = choose(scene, _jobs(6), 300, cores=2)
    assert (workers, point.envs) == (2, 1)
    assert choose(scene, _jobs(1), 300, cores=8)[0] == 1  # one episode: one process (a tie goes to fewer)


def test_memory_caps_the_environments_and_a_fixed_process_count_is_kept():
    # 80% of 1000 MiB holds 8 environments: 4 x 2 (31 s predicted) beats 2 x 4 (42 s) and 1 x 8 (64 s)
    workers, point, seconds = choose(CALL, _jobs(400), 100, cores=4, memory_mib=1000.0)
    assert (workers, point.envs) == (4, 2) and seconds == pytest.approx(2 * 0.5 + 50 * 100 * 0.006)
    assert choose(CALL, _jobs(400), 100, cores=4, workers=1)[0] == 1
    fallback = choose(CALL, _jobs(400), 100, cores=4, memory_mib=10.0)  # nothing fits: the fewest, one process
    assert (fallback[0], fallback[1].envs) == (1, 1)


def test_the_probe_times_the_largest_pending_cell():
    from assay.run.autosize import _probe_cell

    jobs = _jobs(5, policies=("expert", "random"))
    resumed = jobs[:1] + jobs[5:]  # the expert's cell has one episode left, random's five
    cell = _probe_cell(resumed)
    assert [j.key for j in cell] == [j.key for j in jobs[5:]] and {j.task.horizon for j in cell} == {30}


def test_a_fixed_environment_count_needs_no_probe_and_takes_one_process_a_core_up_to_the_batches():
    sized = size_run(_jobs(6), workers=None, envs_per_worker=4, cores=8)
    assert (sized.workers, sized.envs_per_worker, sized.points, sized.probe_s) == (2, 4, (), 0.0)
    singles = size_run(_jobs(1, tasks=("metaworld/reach@1", "metaworld/push@1")), None, None, cores=8)
    assert (singles.workers, singles.envs_per_worker, singles.points) == (2, 1, ())  # one episode a cell: no probe
    nothing = size_run([], workers=None, envs_per_worker=None, cores=8)
    assert (nothing.workers, nothing.envs_per_worker, nothing.pending) == (1, 1, 0)


@pytest.mark.sim
def test_a_real_probe_times_the_cell_on_1_then_2_environments(monkeypatch):
    from assay.run import autosize

    monkeypatch.setattr(autosize, "GAIN", 0.0)  # never stop for want of gain ...
    monkeypatch.setattr(autosize, "PROBE_BUDGET_S", 1e9)  # ... nor of time: what is probed is the cell's to say
    points = autosize.probe(_jobs(3, policies=("expert", "random")), lambda point, spent: True)
    assert [p.envs for p in points] == [1, 2]  # 4 would exceed the cell's 3 episodes
    assert all(p.step_s > 0 and p.build_s > 0 for p in points)
    assert points[0].build_s == points[1].build_s  # the first build's imports are not charged to an environment


@pytest.mark.sim
def test_a_probe_worth_less_than_its_cost_stops_after_its_first_roll(monkeypatch):
    from assay.run import autosize

    monkeypatch.setattr(autosize, "PROBE_SHARE", 0.0)  # any cost is too much: the first roll decides
    small = size_run(_jobs(3), None, None, cores=2)
    assert [p.envs for p in small.points] == [1] and (small.workers, small.envs_per_worker) == (2, 1)
    assert small.describe().startswith("auto: 2 workers x 1 environment for 3 episodes on 2 cores")


class BrokenPolicy:
    """A policy whose constructor raises: the campaign records it; the probe must not size from it."""

    def __init__(self) -> None:
        raise RuntimeError("no weights here")


@pytest.mark.sim
def test_a_probe_whose_episode_fails_falls_back_to_the_defaults_and_says_why():
    spec = campaign_from_data({"name": "broken", "seed": 0, "episodes": 64, "tasks": ["metaworld/reach@1"],
                               "horizon": 400, "policies": [{"name": "broken",
                                                             "entrypoint": "tests.test_autosize:BrokenPolicy"}]})
    sized = size_run(list(prepare_campaign(spec).jobs), None, None, cores=2)
    assert (sized.workers, sized.envs_per_worker, sized.points, sized.predicted_s) == (2, 4, (), None)
    assert "the probe's episode failed" in sized.describe() and "no weights here" in sized.describe()


@pytest.mark.sim
def test_a_probe_that_hangs_is_left_behind_and_the_defaults_are_used(monkeypatch):
    from assay.run import autosize

    monkeypatch.setattr(autosize, "PROBE_TIMEOUT_S", 3.0)
    spec = campaign_from_data({"name": "hung", "seed": 0, "episodes": 64, "tasks": ["metaworld/reach@1"],
                               "horizon": 400, "policies": [{"name": "hung", "entrypoint":
                                                             "tests.faulty_policies:HangingExpert",
                                                             "params": {"modulo": 1, "at_step": 0}}]})
    sized = size_run(list(prepare_campaign(spec).jobs), None, None, cores=2)  # returns: the policy sleeps an hour
    assert (sized.workers, sized.envs_per_worker, sized.points) == (2, 4, ())
    assert "the probe did not finish in 3 s: the defaults" in sized.describe()


def test_envs_per_worker_auto_is_refused_for_an_executor_whose_workers_run_elsewhere(tmp_path):
    from assay.errors import UnsupportedError
    from assay.run import run_campaign

    class Elsewhere:  # a cluster executor: no local process count (Ray's has actors)
        name = "ray"

        def run(self, batches, claim=None):
            raise AssertionError("never reached")

    spec = campaign_from_data({"name": "far", "seed": 0, "episodes": 2, "tasks": ["metaworld/reach@1"],
                               "policies": ["expert"], "envs_per_worker": "auto"})
    with Store(tmp_path / "s") as store, pytest.raises(UnsupportedError, match="the ray executor's workers run "
                                                       "elsewhere: give envs_per_worker a number"):
        run_campaign(prepare_campaign(spec), store, Elsewhere())


CAMPAIGN = """
name: {name}
seed: 3
episodes: 3
horizon: 60
envs_per_worker: {envs}
tasks: [metaworld/reach@1, metaworld/push@1]
policies:
  - expert
  - {{name: shaky, builtin: degraded-expert, params: {{action_noise: 0.5}}}}
"""


def _episodes(store, name: str) -> dict[str, tuple[str, str, int]]:
    with Store(store) as opened:
        return {r.key: (r.outcome.value, r.trajectory_hash, r.steps) for r in opened.catalog.episodes(campaign=name)}


@pytest.mark.sim
@pytest.mark.slow
def test_auto_runs_the_same_episodes_as_a_fixed_setting(tmp_path, write_campaign):
    fixed = write_campaign(CAMPAIGN.format(name="fixed", envs=1), "fixed.yaml")
    auto = write_campaign(CAMPAIGN.format(name="auto", envs="auto"), "auto.yaml")
    ran = runner.invoke(app, ["run", str(fixed), "--store", str(tmp_path / "a"), "-x", "inline", "--json"])
    assert ran.exit_code == 0, ran.output
    ran = runner.invoke(app, ["run", str(auto), "--store", str(tmp_path / "b"), "--workers", "auto", "--json"])
    assert ran.exit_code == 0, ran.output
    sizing = json.loads(ran.stdout)["sizing"]
    assert 1 <= sizing["workers"] <= sizing["cores"] and 1 <= sizing["envs_per_worker"] <= 3
    assert sizing["line"].startswith("auto: ") and sizing["points"]
    assert _episodes(tmp_path / "a", "fixed") == _episodes(tmp_path / "b", "auto")  # same keys, same trajectories
    assert len(_episodes(tmp_path / "b", "auto")) == 12


@pytest.mark.parametrize(("workers", "executor", "message"), [
    ("0", "local", "--workers '0' is not valid; valid: a whole number ≥ 1, or auto"),
    ("many", "local", "--workers 'many' is not valid; valid: a whole number ≥ 1, or auto"),
    ("²", "local", "--workers '²' is not valid; valid: a whole number ≥ 1, or auto"),
    ("auto", "ray", "--workers auto sizes local worker processes on this host; the ray executor takes a number"),
    ("auto", "inline", "the inline executor takes a number"),
])
def test_a_bad_worker_count_is_one_line_before_a_store_is_made(tmp_path, write_campaign, workers, executor, message):
    path = write_campaign(CAMPAIGN.format(name="bad", envs=2))
    ran = runner.invoke(app, ["run", str(path), "--store", str(tmp_path / "never"), "-w", workers, "-x", executor])
    assert ran.exit_code == 2 and message in " ".join(ran.stderr.split())
    assert not (tmp_path / "never").exists()
