"""Open loop compares like with like: one variant, actions inside the action box, Kendall τ and MMRV with
bootstrap intervals over evaluation seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from assay.metrics.openloop import OpenLoopRow, Trajectory, openloop_table, rank_agreement
from assay.store import EpisodeRecord, Outcome


def _trajectory(seed: int, actions: np.ndarray, task: str = "t@1") -> Trajectory:
    record = EpisodeRecord(key=f"k{seed}", campaign="c", task_id=task, task_hash="h", variant_key="nominal",
                           variant_name="nominal", variant={}, policy_name="expert", policy_version="1",
                           policy_spec={}, seed=seed, episode_index=seed, instruction="", outcome=Outcome.SUCCESS,
                           reason="", steps=len(actions), total_return=0.0, success_step=None, trajectory_hash="")
    return Trajectory(record, np.zeros((len(actions), 3)), actions)


def test_recorded_actions_beyond_the_box_are_clipped_before_the_error():
    # the expert recorded 3.0 where the environment executes 1.0; a policy answering 1.0 did exactly that
    recorded = np.array([[3.0, -0.5], [1.0, -2.0], [0.2, 0.1]])
    trajectories = [_trajectory(0, recorded)]
    saturating = {"p": lambda group: [np.clip(t.actions, -1.0, 1.0) for t in group]}
    (raw,) = openloop_table(trajectories, saturating)
    (inside,) = openloop_table(trajectories, saturating, {"t@1": (-1.0, 1.0)})
    assert raw.mse == pytest.approx((2.0 ** 2 + 1.0 ** 2) / 6) and not raw.clipped
    assert inside.mse == 0.0 and inside.clipped
    # a prediction outside the box is clipped too: the environment would execute the clipped action
    (over,) = openloop_table(trajectories, {"p": lambda group: [t.actions * 5 for t in group]}, {"t@1": (-1.0, 1.0)})
    assert over.per_episode == ((0, pytest.approx(float(np.sum((np.clip(recorded * 5, -1, 1)
                                                                 - np.clip(recorded, -1, 1)) ** 2))), 6),)


def _rows(mse_by_seed: dict[str, list[float]]) -> list[OpenLoopRow]:
    return [OpenLoopRow(p, "t@1", len(v), len(v), float(np.mean(v)), None, None, 0, True,
                        tuple((seed, float(e), 1) for seed, e in enumerate(v))) for p, v in mse_by_seed.items()]


def test_kendall_and_mmrv_carry_a_seed_bootstrap_interval_holding_the_estimate():
    rng = np.random.default_rng(0)
    # three policies, ten seeds: closed-loop success falls with the open-loop error (agreement), with noise
    errors = {"a": list(rng.uniform(0.0, 0.2, 10)), "b": list(rng.uniform(0.1, 0.4, 10)),
              "c": list(rng.uniform(0.3, 0.9, 10))}
    outcomes = {("a", "t@1"): {s: float(rng.random() < 0.9) for s in range(10)},
                ("b", "t@1"): {s: float(rng.random() < 0.6) for s in range(10)},
                ("c", "t@1"): {s: float(rng.random() < 0.2) for s in range(10)}}
    closed = {k: float(np.mean(list(v.values()))) for k, v in outcomes.items()}
    (agreement,) = rank_agreement(_rows(errors), closed, outcomes, resamples=500, seed=3)
    assert agreement.resamples == 500 and agreement.kendall_interval is not None
    low, high = agreement.kendall_interval
    assert -1.0 <= low <= agreement.kendall <= high <= 1.0 and low < high
    mlow, mhigh = agreement.mmrv_interval
    assert 0.0 <= mlow <= agreement.mmrv <= mhigh
    assert rank_agreement(_rows(errors), closed, outcomes, resamples=500, seed=3) == [agreement]  # deterministic
    # without per-seed outcomes: the figures alone, as before
    (bare,) = rank_agreement(_rows(errors), closed)
    assert bare.kendall == agreement.kendall and bare.kendall_interval is None and bare.resamples == 0


def test_the_seed_bootstrap_resamples_disjoint_seed_sets_apart():
    # olcl: open loop on held-out demos (seeds 0-9), closed loop on separate evaluation seeds (100-119)
    errors = {"a": [0.01] * 10, "b": [0.5] * 10}
    outcomes = {("a", "t@1"): {100 + s: 1.0 for s in range(20)}, ("b", "t@1"): {100 + s: 0.0 for s in range(20)}}
    (agreement,) = rank_agreement(_rows(errors), {("a", "t@1"): 1.0, ("b", "t@1"): 0.0}, outcomes, resamples=200)
    # every draw keeps 10 demos and 20 evaluation seeds: the order never changes, τ = 1 and MMRV 0 exactly
    assert agreement.kendall_interval == (1.0, 1.0) and agreement.mmrv_interval == (0.0, 0.0)
    assert agreement.undefined_resamples == 0


def test_a_policy_needing_an_observation_a_recording_lacks_is_refused_in_one_line():
    from assay.cli.stats_openloop import replay
    from assay.errors import AssayError
    from assay.testing import fake_task

    class NeedsDepth:
        def reset(self, context):
            pass

        def act(self, observations):
            return observations["depth.front"]

    expected = (r"cannot replay this policy open loop: it needs observation depth.front; a replay has the "
                r"recorded state, instruction and camera frames \(env_ids, instruction, state\)")
    with pytest.raises(AssayError, match=expected):
        replay(NeedsDepth(), fake_task(action_dim=2), [_trajectory(0, np.zeros((3, 2)))])


DARK = """
name: dark-openloop
seed: 2
episodes: 2
horizon: 80
envs_per_worker: 2
tasks: [metaworld/reach@1]
policies:
  - expert
  - {name: shaky, builtin: degraded-expert, params: {action_noise: 0.3}}
  - random
variants:
  - nominal
  - {light.intensity: 0.0}
  - {control.gain: 0.3}
"""


@pytest.mark.sim
@pytest.mark.slow
def test_openloop_on_a_campaign_with_a_dark_variant_ranks_on_nominal_only(tmp_path: Path):
    from assay.cli.app import app
    from assay.metrics import rate_table
    from assay.store import Store

    runner = CliRunner()
    (tmp_path / "c.yaml").write_text(DARK)
    store = tmp_path / "store"
    ran = runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(store), "--executor", "inline", "--json"])
    assert ran.exit_code == 0, ran.output
    shown = runner.invoke(app, ["openloop", "--store", str(store), "--json", "--resamples", "200"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["variant"] == "nominal"
    with Store(store) as opened:
        records = opened.catalog.episodes(campaign="dark-openloop")
    nominal = [r for r in records if r.variant_name == "nominal"]
    expected = {(r.group["policy"], r.group["task"]): r.rate for r in rate_table(nominal)}
    pooled = {(r.group["policy"], r.group["task"]): r.rate for r in rate_table(records)}
    assert pooled != {**pooled, **expected}  # the test means something: the variants move the closed-loop rates
    # the reference's two nominal episodes are replayed, not its dark ones; the closed-loop rates are nominal's
    assert {r["episodes"] for r in doc["openloop"]} == {2}
    assert {(c["policy"], c["task"]): c["rate"] for c in doc["closed_loop"]} == expected
    rows = {r["policy"]: r for r in doc["openloop"]}
    assert rows["expert"]["mse"] == 0.0 and rows["expert"]["clipped"]
    (agreement,) = doc["agreement"]
    assert agreement["resamples"] == 200 and agreement["mmrv_interval"] is not None
    # the dark variant on its own is another question, with its own rates
    name = next(r.variant_name for r in records if "light" in r.variant_name)
    dark = json.loads(runner.invoke(app, ["openloop", "--store", str(store), "--json", "--variant", name]).stdout)
    assert {r["episodes"] for r in dark["openloop"]} == {2} and dark["variant"] == name
    dark_rates = {(r.group["policy"], r.group["task"]): r.rate
                  for r in rate_table([r for r in records if r.variant_name == name])}
    assert {(c["policy"], c["task"]): c["rate"] for c in dark["closed_loop"]} == dark_rates
    bad = runner.invoke(app, ["openloop", "--store", str(store), "--variant", "foggy"])
    assert bad.exit_code == 2 and "--variant 'foggy' has no episodes in campaign dark-openloop; valid:" in bad.stderr
