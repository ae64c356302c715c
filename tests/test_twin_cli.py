"""``assay twin`` commands: documents, and one-line errors with exit status 2."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from assay.cli import twin_commands

app = typer.Typer()
twin_commands.register(app)  # the twin commands alone, as cli.app registers them
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["twin", *args])


def test_show_prints_layers_and_version(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text("name: cell\ntask: metaworld/push@1\ncontrol: {control.gain: 0.7}\nrendering: {camera.yaw: 10}\n")
    result = invoke("show", str(path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["control"] == {"control.gain": 0.7} and document["dynamics"] == {}
    assert len(document["version"]) == 16


def test_bad_inputs_are_one_line_errors(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text("name: cell\ntask: metaworld/push@1\nrendering: {friction: 0.5}\n")
    result = invoke("show", str(path))
    assert result.exit_code == 2
    assert "friction belongs to the dynamics layer, not rendering" in result.output
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nepisodes: 1\ntasks: [metaworld/reach@1]\npolicies: [{name: e, builtin: expert}]\n")
    path.write_text("name: cell\ntask: metaworld/push@1\n")
    real = tmp_path / "real.csv"
    real.write_text("task,policy,successes,trials\nmetaworld/push@1,e,1,2\n")
    result = invoke("attribute", str(study), "--calibrated", str(path), "--real", str(real),
                    "--store", str(tmp_path / "store"))
    assert result.exit_code == 2
    assert "a twin study runs exactly the twin's task" in result.output


@pytest.mark.sim
def test_run_writes_the_results_csv(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nepisodes: 1\nhorizon: 5\ntasks: [metaworld/push@1]\n"
                     "policies: [{name: e, builtin: expert}]\n")
    twin = tmp_path / "cell.yaml"
    twin.write_text("name: cell\ntask: metaworld/push@1\ndynamics: {friction: 0.5}\n")
    out = tmp_path / "real.csv"
    result = invoke("run", str(study), "--twin", str(twin), "--results-out", str(out),
                    "--store", str(tmp_path / "store"), "--json")
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines() == ["task,policy,successes,trials", "metaworld/push@1,e,0,1"]
    twin.with_name("start.yaml").write_text("name: start\ntask: metaworld/push@1\ndynamics: {friction: 0.5}\n")
    sysid = invoke("sysid", "--twin", str(twin.with_name("start.yaml")), "--real-campaign", "s",
                   "--parameters", "control.latency", "--max-evaluations", "12", "--store", str(tmp_path / "store"),
                   "--json")
    assert sysid.exit_code == 0, sysid.output
    document = json.loads(sysid.stdout)
    assert document["fitted"] == {"control.latency": 0.0} and document["intervals"]["control.latency"][0] == 0.0
    refused = invoke("calibrate-rendering", str(study), "--twin", str(twin), "--real-campaign", "s", "--policy", "e",
                     "--parameters", "friction", "--store", str(tmp_path / "store"))
    assert refused.exit_code == 2
    assert "cannot fit friction from a camera policy's trace; valid: light.intensity" in refused.output


@pytest.mark.sim
def test_attribute_on_real_episodes_names_the_layer_their_replays_need(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nepisodes: 3\nhorizon: 30\ntasks: [metaworld/reach@1]\n"
                     "policies: [{name: e, builtin: expert}]\n")
    reality = tmp_path / "reality.yaml"
    reality.write_text("name: weak\ntask: metaworld/reach@1\ncontrol: {control.gain: 0.5}\n")
    real = tmp_path / "real.csv"
    ran = invoke("run", str(study), "--twin", str(reality), "--results-out", str(real),
                 "--store", str(tmp_path / "lab"))
    assert ran.exit_code == 0, ran.output
    args = ("attribute", str(study), "--calibrated", str(reality), "--real", str(real), "--real-campaign", "s",
            "--real-store", str(tmp_path / "lab"), "--store", str(tmp_path / "sim"))
    refused = invoke(*args, "--trace-policy", "camera")
    assert refused.exit_code == 2 and "--trace-policy 'camera' has no episodes in 's'; valid: e" in refused.output
    result = invoke(*args, "--fitted-on", "1", "--json")
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)["trajectories"]["state"]
    assert state["episodes"] == 2 and state["held_out"]  # the first episode is left out
    assert state["gaps"]["calibrated"] == 0.0 < 0.001 < state["gaps"]["nominal"]
    assert state["named"] == ["control"] and state["unexplained"] == 0.0
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    assert "state gap in 3 real episodes (in-sample" in table.output and "named by the states: control" in table.output


def test_attribute_prints_a_flagged_layer_and_never_attributes_it(tmp_path, monkeypatch):
    """``twin attribute`` on a golden attribution (no simulator): dynamics, named by the held-out states only,
    closes none of the success gap beyond noise: labelled flagged, with its reason, and not the attributed layer
    (in the table and in --json)."""
    from assay.twin.trajectory_gap import TrajectoryAttribution, TrajectoryLayer
    from tests.test_twin_flags import golden_attribution

    attribution = golden_attribution(0.5, 0.2, {"control": (0.3, (0.1, 0.5)), "dynamics": (0.02, (-0.1, 0.12)),
                                                "rendering": (0.0, (0.0, 0.0))})
    states = TrajectoryAttribution(
        "state", 4, True, 0.0005, {"nominal": 0.02, "calibrated": 0.001}, {},
        (TrajectoryLayer("control", True, 0.01, (0.008, 0.012), 0.5, True),
         TrajectoryLayer("dynamics", True, 0.009, (0.007, 0.011), 0.5, True),
         TrajectoryLayer("rendering", False, 0.0, (0.0, 0.0), None, False)), 0.05, ("control", "dynamics"), 300)
    monkeypatch.setattr(twin_commands, "attribute", lambda *args, **kwargs: attribution)
    monkeypatch.setattr(twin_commands, "_trajectory_measures", lambda *args: {"state": states})
    study = tmp_path / "study.yaml"
    study.write_text("name: s\nepisodes: 2\ntasks: [metaworld/push@1]\npolicies: [{name: expert, builtin: expert}]\n")
    calibrated = tmp_path / "calibrated.yaml"
    calibrated.write_text("name: fit\ntask: metaworld/push@1\ncontrol: {control.gain: 0.6}\n"
                          "dynamics: {joint.damping: 5}\n")
    real = tmp_path / "real.csv"
    real.write_text("task,policy,successes,trials\nmetaworld/push@1,expert,0,6\n")
    args = ("attribute", str(study), "--calibrated", str(calibrated), "--real", str(real), "--real-campaign", "lab",
            "--store", str(tmp_path / "sim"))
    table = runner.invoke(app, ["twin", *args], env={"COLUMNS": "240"})
    assert table.exit_code == 0, table.output
    text = " ".join(table.output.split())
    assert ("named layers: control (by success, states), dynamics (by states; flagged); attributed layer: "
            "control") in text
    assert ("flagged, not a clean hit: dynamics: named by the states but its calibration closes none of the success "
            "gap beyond noise (nominal 0.500 -> calibrated 0.200; its closure +0.020 [-0.100, +0.120], lower bound "
            "<= 0; the nominal gap is significant, p = 0.001): the fit may be wrong") in text
    assert text.count("(flagged)") == 1 and "no (flagged)" in text  # the layers table: not beyond noise, flagged
    document = json.loads(invoke(*args, "--json").stdout)
    assert list(document["flagged"]) == ["dynamics"] and document["attributed"] == "control"
    assert document["named_by"] == {"success": ["control"], "state": ["control", "dynamics"]}
