"""The mistakes everyone makes on the first day, each answered in one accurate line (issue 45)."""

from __future__ import annotations

import textwrap
import time

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import SpecError
from assay.spec import load_campaign
from assay.spec.loading import field_line

runner = CliRunner()

BASE = """\
name: t
episodes: 2
tasks: [gymnasium/Pendulum-v1]
policies: [random]
"""


def _file(tmp_path, text: str, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_an_unknown_key_gets_the_closest_valid_names_and_the_list_of_valid_keys(tmp_path):
    path = _file(tmp_path, BASE + "horizn: 40\n")
    with pytest.raises(SpecError) as raised:
        load_campaign(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:5: horizn: unknown field; did you mean 'horizon'? valid: adaptive, cameras,")
    assert "envs_per_worker" in message and "video_fps" in message


def test_an_unknown_key_inside_a_policy_names_the_policy_fields(tmp_path):
    path = _file(tmp_path, """\
        name: t
        episodes: 2
        tasks: [gymnasium/Pendulum-v1]
        policies:
          - random
          - {name: s, builtin: degraded-expert, parms: {action_noise: 0.5}}
        """)
    with pytest.raises(SpecError, match=r":6: policies\[1\]\.parms: unknown field; did you mean 'params'\? "
                                         r"valid: builtin, entrypoint, name, params, remote, version$"):
        load_campaign(path)


def test_a_key_like_nothing_valid_gets_only_the_list(tmp_path):
    path = _file(tmp_path, BASE + "zzz: 1\n")
    with pytest.raises(SpecError, match=r":5: zzz: unknown field; valid: adaptive, "):
        load_campaign(path)


@pytest.mark.parametrize(("body", "line", "message"), [
    ("name: t\nepisodes: 2\ntasks: [metaworld/reach@1]\npolicies:\n  - expert\n"
     "  - {name: s, builtin: degraded-expert,\n     params: {noise: 0.5}}\n", 7,
     "policy 's': params.noise: unknown parameter (valid parameters: action_noise, action_delay, bias, freeze_prob)"),
    ("name: t\nepisodes: 2\ntasks:\n  - metaworld/reach@1\n  - metaworld/reech@1\npolicies: [expert]\n", 5,
     "unknown task 'metaworld/reech@1'"),
    ("name: t\nepisodes: 2\ntasks: [metaworld/reach@1]\npolicies: [expert]\nvariants:\n  - nominal\n"
     "  - {sweep: {control.latency: [4, 2]}}\n  - {light.intensity: 9}\n", 8,
     "factor light.intensity: value 9 is not valid"),
    ("name: t\nepisodes: 2\ntasks: [metaworld/reach@1]\npolicies: [expert]\nvariants:\n  - nominal\n"
     "  - {light.intensty: 0.5}\n", 7, "unknown factor 'light.intensty'; did you mean light.intensity"),
])
def test_an_error_found_after_loading_names_the_files_line(tmp_path, body, line, message):
    path = _file(tmp_path, body)
    result = runner.invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "-x", "inline"])
    assert result.exit_code == 2
    [shown] = result.stderr.strip().splitlines()
    assert shown.startswith(f"error: {path}:{line}: ") and message in shown, shown
    assert not (tmp_path / "s").exists()


def test_a_variant_after_a_sweep_is_found_at_its_own_entry(tmp_path):
    path = _file(tmp_path, BASE + "variants:\n  - nominal\n  - {sweep: {action.noise: [0.1, 0.2, 0.1]}}\n"
                                  "  - {control.latency: 2}\n")
    # expanded: nominal, noise 0.1, noise 0.2, latency 2 (the repeated 0.1 is one variant)
    assert [field_line(path, ("variants", i)) for i in range(4)] == [6, 7, 7, 8]
    assert field_line(tmp_path / "gone.yaml", ("tasks", 0)) == 1


@pytest.mark.parametrize("command", [["results"], ["episodes", "ls"], ["store", "verify"], ["failures", "mine"]])
def test_a_store_path_that_is_a_file_is_one_accurate_line(tmp_path, command):
    (tmp_path / "afile").write_text("")
    result = runner.invoke(app, [*command, "--store", str(tmp_path / "afile")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: the store path {tmp_path / 'afile'} is a file, not a directory; give "
                                     "--store a directory (assay run creates a new one there)")


def test_a_run_into_a_store_path_under_a_file_says_which_part_is_the_file(tmp_path):
    (tmp_path / "afile").write_text("")
    path = _file(tmp_path, BASE)
    for store, expected in ((tmp_path / "afile", f"the store path {tmp_path / 'afile'} is a file"),
                            (tmp_path / "afile" / "sub",
                             f"{tmp_path / 'afile'} (on the store path {tmp_path / 'afile' / 'sub'}) is a file")):
        result = runner.invoke(app, ["run", str(path), "--store", str(store), "-x", "inline"])
        assert result.exit_code == 2
        [shown] = result.stderr.strip().splitlines()
        assert shown.startswith(f"error: {expected}, not a directory"), shown


@pytest.fixture(scope="module")
def two_campaigns(tmp_path_factory):
    root = tmp_path_factory.mktemp("two")
    for name in ("first", "second"):
        time.sleep(1.1)  # the catalog's update times have a resolution of one second
        path = root / f"{name}.yaml"
        path.write_text(BASE.replace("name: t", f"name: {name}") + "horizon: 5\n")
        assert runner.invoke(app, ["run", str(path), "--store", str(root / "s"), "-x", "inline"]).exit_code == 0
    return root / "s"


@pytest.mark.sim
@pytest.mark.parametrize("command", [["results"], ["failures", "mine"], ["leaderboard"]])
def test_a_command_that_picks_the_latest_campaign_says_which(two_campaigns, command):
    result = runner.invoke(app, [*command, "--store", str(two_campaigns)])
    assert result.exit_code == 0, result.output
    said = f"campaign second, the latest of 2 campaigns in {two_campaigns} (no --campaign given)"
    assert said in result.stderr.splitlines()
    named = runner.invoke(app, [*command, "--store", str(two_campaigns), "--campaign", "first"])
    assert "no --campaign given" not in named.stderr


@pytest.mark.sim
def test_the_report_names_its_store_relative_to_where_it_is_written(two_campaigns, tmp_path):
    beside = two_campaigns.parent / "reports" / "second.html"
    assert runner.invoke(app, ["report", "second", "--store", str(two_campaigns), "-o", str(beside)]).exit_code == 0
    html = beside.read_text()
    assert "store ../s</p>" in html and "--store ../s" in html
    assert str(two_campaigns.parent) not in html  # no absolute path of this machine
    far = tmp_path / "a" / "b" / "c" / "d" / "r.html"
    assert runner.invoke(app, ["report", "second", "--store", str(two_campaigns), "-o", str(far)]).exit_code == 0
    assert "store s</p>" in far.read_text() and str(two_campaigns) not in far.read_text()
