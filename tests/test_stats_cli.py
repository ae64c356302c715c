"""The statistics commands on a tiny real campaign (Meta-World reach, 2 episodes, inline executor)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app

runner = CliRunner()

CAMPAIGN = """
name: tiny
seed: 4
episodes: 2
envs_per_worker: 2
tasks: [metaworld/reach@1]
policies:
  - expert
  - name: shaky
    builtin: degraded-expert
    params: {action_noise: 0.3}
  - random
"""


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    path = root / "campaign.yaml"
    path.write_text(CAMPAIGN)
    result = invoke("run", str(path), "--store", str(root / "store"), "--executor", "inline", "--json")
    assert result.exit_code == 0, result.output
    return root / "store"


def _json(*args: str):
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.sim
def test_openloop_scores_the_expert_perfectly_on_its_own_trajectories(store):
    doc = _json("openloop", "--store", str(store), "--reference", "expert")
    rows = {r["policy"]: r for r in doc["openloop"]}
    assert rows["expert"]["mse"] == 0.0 and rows["expert"]["r2"] == 1.0
    assert rows["expert"]["episodes"] == 2 and rows["expert"]["steps"] > 2
    # Noise of std 0.3 on each action dimension: MSE near 0.09 (clipping to [-1, 1] only shrinks it).
    assert 0.03 < rows["shaky"]["mse"] < 0.12 and rows["shaky"]["r2"] < 1.0
    assert rows["random"]["mse"] > rows["shaky"]["mse"]
    (agreement,) = doc["agreement"]
    assert agreement["task"] == "metaworld/reach@1" and set(agreement["policies"]) == {"expert", "shaky", "random"}
    assert 0.0 <= agreement["mmrv"] <= 1.0
    assert _json("openloop", "--store", str(store), "--reference", "expert") == doc  # deterministic
    only = _json("openloop", "--store", str(store), "--policies", "shaky", "--episodes", "1")
    assert [(r["policy"], r["episodes"]) for r in only["openloop"]] == [("shaky", 1)]
    bad = invoke("openloop", "--store", str(store), "--reference", "nobody")
    assert bad.exit_code == 2 and "valid: expert, shaky, random" in bad.stderr


@pytest.mark.sim
def test_compare_leaderboard_and_results_carry_ranks_and_signoff(store):
    doc = _json("compare", "expert", "random", "--store", str(store))
    suite = next(c for c in doc["comparisons"] if c["task"] == "suite")
    assert (suite["pairs"], suite["a_only"], suite["b_only"]) == (2, 2, 0)
    assert suite["p_value"] == pytest.approx(0.5) and suite["verdict"] == "no detectable difference"
    board = _json("leaderboard", "--store", str(store))
    rows = {r["policy"]: r for r in board["leaderboard"]["rows"]}
    assert rows["expert"]["rank"] == 1 and rows["random"]["score"] == 0.0
    assert board["signoff"][0]["status"] == "not validated for sign-off"
    results = _json("results", "--store", str(store))
    assert results["leaderboard"]["rows"] == board["leaderboard"]["rows"]
    assert "not validated for sign-off" in invoke("results", "--store", str(store)).stdout
    assert "rank" in invoke("leaderboard", "--store", str(store)).stdout


@pytest.mark.sim
def test_correlate_against_a_campaign_records_calibration_that_the_gate_reads(store, tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("task,policy,successes,trials\nmetaworld/reach,expert,19,20\nmetaworld/reach,shaky,12,20\n"
                    "metaworld/reach,random,0,20\n")
    doc = _json("correlate", "--real", str(real), "--campaign", "tiny", "--store", str(store), "--record",
                "--resamples", "200")
    try:
        _check_recorded(doc, store, real)
    finally:
        (store / "calibration.json").unlink()  # the other tests see an uncalibrated store


def _check_recorded(doc, store, real):
    (task,) = doc["tasks"]
    assert task["other_task"] == "metaworld/reach@1" and task["resampling"] == "episodes"
    assert doc["calibration_file"].endswith("calibration.json")
    board = _json("leaderboard", "--store", str(store), "--min-policies", "3", "--max-mmrv", "1",
                  "--min-pearson", "-1", "--min-pearson-low", "-1")
    assert board["signoff"][0]["calibration"]["policies"] == 3
    # three policies are never evidence, whatever the thresholds on r and MMRV: the permutation p is >= 1/6
    assert board["signoff"][0]["validated"] is False and board["signoff"][0]["status"] == "insufficient evidence"
    assert board["signoff"][0]["reason"].startswith("permutation p ")
    assert doc["signoff_evidence"] == {"metaworld/reach@1": "calibrated on 3 policies < 4"}
    assert board["signoff"][0]["calibration"]["policy_names"] == ["expert", "random", "shaky"]
    # compare, openloop and stability show the same gate
    assert _json("compare", "expert", "random", "--store", str(store))["signoff"][0]["task"] == "metaworld/reach@1"
    assert "sign-off gate" in invoke("compare", "expert", "random", "--store", str(store)).stdout
    strict = _json("leaderboard", "--store", str(store), "--min-policies", "4")
    assert strict["signoff"][0]["validated"] is False and "3 policies < 4" in strict["signoff"][0]["reason"]
    assert "insufficient evidence" in invoke("leaderboard", "--store", str(store)).stdout
    stab = _json("stability", "tiny", str(real), "--store", str(store), "--resamples", "200")
    assert stab["suite_policies"] == ["expert", "random", "shaky"]
    assert stab["report"]["tasks"][0]["stats"]["mmrv"]["value"] is not None
