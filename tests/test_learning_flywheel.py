"""The learning CLI end to end: train-bc from a campaign, and the flywheel on a tiny budget."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")

from assay.cli.app import app  # noqa: E402

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.sim
def test_train_bc_cli_and_bad_input(tmp_path):
    store = str(tmp_path / "store")
    campaign = tmp_path / "demos.yaml"
    campaign.write_text("name: demos\nseed: 1\nepisodes: 3\nhorizon: 100\ntasks: [metaworld/reach@1]\npolicies: [expert]\n")
    assert invoke("run", str(campaign), "--store", store).exit_code == 0
    out = tmp_path / "ckpt" / "bc.pt"
    result = invoke("train-bc", "--data", "campaign=demos", "--out", str(out), "--store", store, "--epochs", "2",
                    "--hidden", "16", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["demos"] == 3 and document["path"] == str(out) and out.is_file()
    assert document["version"].startswith("builtin-1-c")
    bad = invoke("train-bc", "--data", "colour=red", "--out", str(out), "--store", store)
    assert bad.exit_code == 2 and "KEY one of campaign" in bad.stderr
    bad = invoke("train-bc", "--data", "campaign=demos", "--out", str(out), "--store", store, "--hidden", "wide")
    assert bad.exit_code == 2 and "--hidden" in bad.stderr


@pytest.mark.sim
@pytest.mark.slow
def test_flywheel_runs_end_to_end_on_a_tiny_budget(tmp_path):
    store = tmp_path / "store"
    args = ["flywheel", "--task", "metaworld/reach@1", "--base", "3", "--extra", "3", "--probe", "6", "--eval", "6",
            "--epochs", "10", "--horizon", "100", "--store", str(store), "--json"]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (row,) = document["results"]
    # one training seed: the pooled test is that seed's test, on the same discordant pairs
    assert document["pooled"] == {"pairs": 6, "base": row["base"]["successes"], "control": row["control"]["successes"],
                                  "flywheel": row["flywheel"]["successes"], "flywheel_only": row["flywheel_only"],
                                  "control_only": row["control_only"], "mcnemar_p": row["mcnemar_p"]}
    assert row["flywheel"]["successes"] - row["control"]["successes"] == row["flywheel_only"] - row["control_only"]
    for arm in ("base", "control", "flywheel"):
        assert row[arm]["trials"] == 6 and 0 <= row[arm]["low"] <= row[arm]["rate"] <= row[arm]["high"] <= 1
    assert row["contaminated"] == {"base": 0, "control": 0, "flywheel": 0}  # held-out seeds only
    assert 0 < row["recovery_demos"] <= 3 and row["recovery_frames"] > 0 and 0 < row["mcnemar_p"] <= 1
    if row["control"]["rate"] > row["base"]["rate"]:
        gain = (row["flywheel"]["rate"] - row["base"]["rate"]) / (row["control"]["rate"] - row["base"]["rate"])
        assert row["gain_ratio"] == pytest.approx(gain)
    else:
        assert row["gain_ratio"] is None
    # rerunning resumes every campaign (nothing reruns) and, training being deterministic, gives the same result
    again = invoke(*args)
    assert again.exit_code == 0 and json.loads(again.stdout)["results"] == [row]
