"""The CLI in a cluster job or a CI pipeline: plain progress lines without a terminal, gates that exit 1,
``-`` for stdout, ``--version``, ``-h``, shell completion and help without type placeholders."""

from __future__ import annotations

import csv
import io
import re
import sys

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from assay.cli.app import app

pytestmark = pytest.mark.sim

runner = CliRunner()
PLACEHOLDER = re.compile(r"<(?:bool|str|int|float|path|file|dir|choice|list|tuple|datetime|uuid)[^>]*>")
CAMPAIGN = """
name: gate
seed: 4
episodes: 3
horizon: 60
tasks: [metaworld/reach@1]
policies: [expert, random]
"""


def invoke(*args: str):
    return runner.invoke(app, list(args), prog_name="assay")


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory):
    """(store, result of the run): the expert (succeeds) and random (fails) on reach, the run gated at 0.5."""
    root = tmp_path_factory.mktemp("ci")
    (root / "c.yaml").write_text(CAMPAIGN)
    result = invoke("run", str(root / "c.yaml"), "--store", str(root / "s"), "-x", "inline", "--progress-every", "0",
                    "--fail-under", "0.5")
    return root / "s", result


@pytest.fixture(scope="module")
def store(gated_run):
    return gated_run[0]


def test_a_run_without_a_terminal_prints_plain_progress_lines_on_stderr(gated_run):
    _, result = gated_run
    lines = [line for line in result.stderr.splitlines() if line.startswith("campaign gate:")]
    assert lines[0].startswith("campaign gate: 0/6 episodes (0%)")
    assert any(line.startswith("campaign gate: 3/6 episodes (50%)") for line in lines)
    assert lines[-1].startswith("campaign gate: 6/6 episodes (100%)") and "done" in lines[-1]
    assert "\x1b[" not in result.stderr  # no terminal escapes in a log


def test_fail_under_exits_1_naming_the_failing_cells(gated_run):
    store, result = gated_run
    assert result.exit_code == 1, result.output
    assert "gate failed: policy random, task metaworld/reach@1: success rate 0.000 (0/3) < 0.5" in result.stderr
    assert "policy expert" not in result.stderr.split("gate failed", 1)[1]
    assert invoke("results", "--store", str(store), "--campaign", "gate", "--fail-under", "0.5").exit_code == 1
    assert invoke("results", "--store", str(store), "--campaign", "gate", "--fail-under", "0").exit_code == 0
    bad = invoke("results", "--store", str(store), "--fail-under", "1.5")
    assert bad.exit_code == 2 and "--fail-under" in bad.stderr


def test_a_failing_regression_set_and_an_unsigned_gate_exit_1(store):
    assert invoke("regress", "add", "hard", "--from", "gate", "--policy", "random", "--holdout", "0",
                  "--store", str(store)).exit_code == 0
    still = invoke("regress", "run", "hard", "--policy", "random", "--store", str(store), "--fail-under", "1")
    assert still.exit_code == 1 and "gate failed: regression set hard (mined): 0/3 pass < 1" in still.stderr
    fixed = invoke("regress", "run", "hard", "--policy", "expert", "--store", str(store), "--fail-under", "1")
    assert fixed.exit_code == 0, fixed.output
    unsigned = invoke("leaderboard", "--store", str(store), "--campaign", "gate", "--resamples", "200",
                      "--require-signoff")
    assert unsigned.exit_code == 1 and "gate failed: task metaworld/reach@1 is not signed off" in unsigned.stderr
    assert invoke("leaderboard", "--store", str(store), "--campaign", "gate", "--resamples", "200").exit_code == 0


def test_a_dash_writes_the_csv_to_stdout_and_the_tables_to_stderr(store):
    result = invoke("results", "--store", str(store), "--campaign", "gate", "--csv", "-")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["policy"], r["successes"], r["trials"]) for r in rows] == [("expert", "3", "3"), ("random", "0", "3")]
    assert "campaign gate" in result.stderr


@pytest.mark.slow
def test_report_to_stdout(store):
    result = invoke("report", "gate", "--store", str(store), "-o", "-")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.lstrip().lower().startswith("<!doctype html") and result.stdout.rstrip().endswith("</html>")
    assert "written to stdout" in result.stderr


def test_version_short_help_and_completion(monkeypatch):
    from assay import __version__

    # Typer detects the calling shell (shellingham) unless told not to; under make the parent is /bin/sh,
    # which has no completion script, so the shell is named explicitly as `--show-completion bash`.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")

    assert invoke("--version").stdout == f"assay {__version__}\n"
    assert invoke("-h").exit_code == 0 and "Usage: assay" in invoke("-h").stdout
    assert "Usage: assay run" in invoke("run", "-h").stdout
    assert "Usage: assay regress run" in invoke("regress", "run", "-h").stdout
    script = invoke("--show-completion", "bash")
    assert script.exit_code == 0 and "_assay_completion" in script.stdout
    assert "--install-completion" in invoke("--help").stdout


def _commands(group: TyperGroup, prefix: tuple[str, ...] = ()):
    context = typer.Context(group)
    for name in group.list_commands(context):  # the lazy top-level group loads each command here
        command = group.get_command(context, name)
        yield (*prefix, name)
        if isinstance(command, TyperGroup):
            yield from _commands(command, (*prefix, name))


def test_no_help_shows_angle_bracket_type_placeholders():
    commands = list(_commands(typer.main.get_command(app)))
    assert len(commands) > 20
    for command in commands:
        text = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).stdout
        assert "Usage:" in text, command
        assert not PLACEHOLDER.findall(text), (command, PLACEHOLDER.findall(text))


ADAPTIVE = """
name: rounds
seed: 4
horizon: 40
tasks: [gymnasium/Pendulum-v1]
policies: [random]
adaptive: {goal: interval, width: 0.1, max_episodes: 8, batch: 4}  # too narrow for 8: both rounds run
"""


def test_an_adaptive_campaigns_progress_adds_each_round_and_never_passes_100_percent(tmp_path):
    """Each round of an adaptive campaign starts the progress again: its episodes join the total so far (on
    b1f517c a later round printed e.g. 448/32 episodes (1400%) and a rate from the round's start)."""
    (tmp_path / "a.yaml").write_text(ADAPTIVE)
    result = invoke("run", str(tmp_path / "a.yaml"), "--store", str(tmp_path / "s"), "-x", "inline",
                    "--progress-every", "0")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("campaign rounds:")]
    shown = [tuple(map(int, re.match(r"campaign rounds: (\d+)/(\d+) episodes", line).groups())) for line in lines]
    assert all(done <= total for done, total in shown), lines
    assert [total for _, total in shown] == sorted(total for _, total in shown)  # the total only grows
    assert shown[-1][0] == shown[-1][1] == 8 and "done" in lines[-1], lines  # two rounds of 4


def test_assays_warnings_reach_the_terminal_as_one_line(monkeypatch):
    """A CapacityWarning printed as Python's two lines: the file and line of run/campaign.py, then the source line
    `warn_capacity(policy.spec.remote, ...)`. The `assay` command shows Assay's warnings as one line."""
    import warnings

    from assay.cli import app as cli_app
    from assay.cli.gates import show_warning
    from assay.errors import CapacityWarning

    out = io.StringIO()
    show_warning(CapacityWarning("server ws://h:1 accepts 2 connections"), CapacityWarning, "/x/campaign.py", 176,
                 out, "warn_capacity(...)")
    assert out.getvalue() == "warning: server ws://h:1 accepts 2 connections\n"
    other = io.StringIO()
    show_warning(DeprecationWarning("old"), DeprecationWarning, "/x/lib.py", 3, other, "call()")
    assert other.getvalue() == "/x/lib.py:3: DeprecationWarning: old\n  call()\n"  # others as Python shows them
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    monkeypatch.setattr(sys, "argv", ["assay", "--version"])
    with pytest.raises(SystemExit):
        cli_app.main()
    assert warnings.showwarning is show_warning
