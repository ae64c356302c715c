"""The CLI on a served simulator: `assay run --simulator` resumes and mines and reports as in process,
`assay sim-parity` names a planted difference, `assay env create` and `assay serve-sim` refuse what they cannot do."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from tests.served_support import served

runner = CliRunner()
CAMPAIGN = """name: served-cli
seed: 2
episodes: 2
horizon: 60
tasks: [metaworld/reach]
variants: [{}, {object.init_range: 2.0}]
policies: [expert, random]
"""


@pytest.mark.sim
def test_run_with_a_served_simulator_resumes_mines_and_reports_as_in_process(tmp_path):
    path = tmp_path / "campaign.yaml"
    path.write_text(CAMPAIGN)
    local, remote = str(tmp_path / "local"), str(tmp_path / "served")
    assert runner.invoke(app, ["run", str(path), "--store", local, "-x", "inline", "--json"]).exit_code == 0
    with served("metaworld") as server:
        first = runner.invoke(app, ["run", str(path), "--store", remote, "-x", "inline", "--json", "--simulator",
                                    f"metaworld={server.url}"])
        again = runner.invoke(app, ["run", str(path), "--store", remote, "-x", "inline", "--simulator",
                                    f"metaworld={server.url}"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["ran"] == 8 and "0 run now, 8 already in the store" in again.stdout
    listings = [json.loads(runner.invoke(app, ["episodes", "ls", "--store", store, "--json"]).stdout)["episodes"]
                for store in (local, remote)]
    def outcomes(listing: list[dict]) -> list[tuple[str, str]]:
        return sorted((e["key"], e["outcome"]) for e in listing)

    assert outcomes(listings[0]) == outcomes(listings[1])
    mined = runner.invoke(app, ["failures", "mine", "--store", remote, "--campaign", "served-cli"])
    assert mined.exit_code == 0, mined.output
    report = runner.invoke(app, ["report", "served-cli", "--store", remote, "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and (tmp_path / "r.html").stat().st_size > 10_000


def test_sim_parity_prints_the_planted_difference_and_exits_1():
    task = "gymnasium/tests.served_plant:AssayTest/Planted-v0"
    with served("gymnasium", env={"ASSAY_PLANTED_STEP": "4"}) as planted:
        result = runner.invoke(app, ["sim-parity", "gymnasium", "--url", planted.url, "--task", task,
                                     "--episodes", "3", "--steps", "10"])
    assert result.exit_code == 1
    assert f"first difference: {task}@1 seed 0 step 4: observation state[1]: in process" in result.stdout
    with served("gymnasium") as honest:
        result = runner.invoke(app, ["sim-parity", "gymnasium", "--url", honest.url, "--task", task,
                                     "--episodes", "3", "--steps", "10"])
    assert result.exit_code == 0 and result.stdout.startswith("identical: 3 episodes, 30 steps")


def test_env_create_serve_sim_and_run_refuse_in_one_line(tmp_path):
    result = runner.invoke(app, ["env", "create", "metaworld"])
    assert result.exit_code == 2 and "metaworld runs in this environment (it has no lock of its own)" in result.output
    result = runner.invoke(app, ["serve-sim", "mujoco-world"])
    assert result.exit_code == 2 and "unknown backend 'mujoco-world'; valid: gymnasium, libero, metaworld" in \
        result.output
    path = tmp_path / "campaign.yaml"
    path.write_text(CAMPAIGN)
    result = runner.invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "--simulator", "metaworld=host:1"])
    assert result.exit_code == 2 and "write BACKEND=ws://HOST:PORT" in result.output
