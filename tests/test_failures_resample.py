"""Targeted resampling around a failure: nearby factor values within the radius, fresh seeds, a local rate."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.failures.resample import neighbourhood, variant_request
from assay.sim import FACTORS


def test_neighbours_stay_within_the_radius_and_the_valid_range():
    request = {"action.noise": 0.95, "light.color": [1.0, 0.5, 0.5], "control.latency": 3,
               "instruction.paraphrase": "terse"}
    near = neighbourhood(request, radius=0.1, samples=20, seed=7)
    assert near == neighbourhood(request, radius=0.1, samples=20, seed=7)  # deterministic
    assert near != neighbourhood(request, radius=0.1, samples=20, seed=8)
    for moved in near:
        assert abs(moved["action.noise"] - 0.95) <= 0.1 * 1.0 and moved["action.noise"] <= FACTORS["action.noise"].high
        assert all(abs(a - b) <= 0.3 for a, b in zip(moved["light.color"], request["light.color"], strict=True))
        assert isinstance(moved["control.latency"], int) and abs(moved["control.latency"] - 3) <= 1
        assert moved["instruction.paraphrase"] == "terse"
    assert variant_request({"perturbations": [{"axis": "visual", "factor": "light.intensity", "value": 2.0}]}) == {
        "light.intensity": 2.0}
    with pytest.raises(AssayError, match="--radius 1.5 is not valid"):
        neighbourhood(request, radius=1.5, samples=1, seed=0)


@pytest.mark.sim
def test_resample_estimates_the_local_failure_rate(tmp_path, write_campaign):
    path = write_campaign("""
        name: noisy
        seed: 4
        episodes: 3
        horizon: 60
        tasks: [metaworld/reach@1]
        policies: [random]
        variants: [{action.noise: 0.5}]
    """)
    runner = CliRunner()
    store = str(tmp_path / "store")
    assert runner.invoke(app, ["run", str(path), "--store", store, "--executor", "inline"]).exit_code == 0
    failed = json.loads(runner.invoke(app, ["episodes", "ls", "--store", store, "--json"]).stdout)["episodes"][0]
    assert failed["outcome"] != "success"
    result = runner.invoke(app, ["failures", "resample", failed["key"], "--samples", "2", "--seeds", "2",
                                 "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["variants"], document["episodes"]) == (3, 6)
    assert document["failure_rate"] == 1.0 and document["interval"][0] > 0.5  # random never reaches
    assert len(document["by_variant"]) == 3 and "action.noise=0.5" in document["by_variant"]
    assert document["initial_conditions"]["per_variant"] == 2 and document["initial_conditions"]["max_distance"] < 0.3
    # a nominal failure: --samples is honoured, over initial conditions
    nominal = str(tmp_path / "nominal")
    path.write_text(path.read_text().replace("variants: [{action.noise: 0.5}]", "variants: [nominal]"))
    assert runner.invoke(app, ["run", str(path), "--store", nominal, "--executor", "inline"]).exit_code == 0
    failed = json.loads(runner.invoke(app, ["episodes", "ls", "--store", nominal, "--json"]).stdout)["episodes"][0]
    counts = [json.loads(runner.invoke(app, ["failures", "resample", failed["key"], "--samples", str(n), "--seeds", "2",
                                             "--store", nominal, "--json"]).stdout)["episodes"] for n in (1, 2)]
    assert counts == [2, 4]
    resampled = [c for c in _campaigns(nominal) if c.startswith("resample-")]
    assert sorted(resampled) == [f"resample-{failed['key'][:12]}-{n}x2-r0.1" for n in (1, 2)]  # results sees them


@pytest.mark.sim
def test_boundary_bisects_a_real_factor(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["boundary", "--task", "metaworld/pick-place@1", "--factor", "action.noise",
                                 "--safe", "0", "--hard", "1", "--episodes", "2", "--iterations", "1",
                                 "--store", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    levels = [p["level"] for p in document["probes"]]
    assert levels == [0.0, 1.0, 0.5]  # both ends, then one bisection step
    assert document["probes"][0]["successes"] == 2  # the expert with no latency
    assert document["boundary"] is not None
    assert document["interval"] is not None and document["bracket"][1] == document["boundary"]
    # each probed level is a campaign of its own (the one episode loop): results reads it like any other
    for probe in document["probes"]:
        names = [c for c in _campaigns(tmp_path / "s") if c.startswith(f"boundary-action.noise-{probe['level']:.6g}-")]
        assert len(names) == 1, names
        shown = json.loads(runner.invoke(app, ["results", "--store", str(tmp_path / "s"), "--campaign", names[0],
                                               "--json"]).stdout)
        [row] = shown["leaderboard"]["rows"]
        assert shown["completeness"]["complete"] and row["recorded"] == probe["episodes"]
        assert row["score"] * row["scored"] == pytest.approx(probe["successes"])
    again = json.loads(runner.invoke(app, ["boundary", "--task", "metaworld/pick-place@1", "--factor", "action.noise",
                                           "--safe", "0", "--hard", "1", "--episodes", "2", "--iterations", "1",
                                           "--store", str(tmp_path / "s"), "--json"]).stdout)
    assert again == document  # a rerun resumes: the same episodes, nothing run twice


def _campaigns(store):
    from assay.store import Store

    with Store(store, create=False) as opened:
        return [c.name for c in opened.catalog.campaigns()]
