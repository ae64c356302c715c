"""A failing policy fails loudly (issue 50): its params are checked against its constructor before any episode
(one line, with "did you mean"; a mistyped class name too), and a run counts its error episodes by reason and exits
1 when every episode of a policy is an error (``--allow-errors`` to exit 0)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run.plan import CampaignSummary, error_kind

runner = CliRunner()


def _campaign(tmp_path: Path, policies: str, name: str = "loud") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: {name}
        episodes: 2
        horizon: 5
        tasks: [gymnasium/Pendulum-v1]
        policies:
        """) + textwrap.indent(textwrap.dedent(policies), "  "))
    return path


@pytest.mark.parametrize(("policy", "line", "message"), [
    ("- {name: g, entrypoint: 'tests.helpers:GainPolicy', params: {gian: 10}}\n", 6,
     "policy 'g': params.gian: unknown parameter; did you mean 'gain'? (valid parameters of tests.helpers:GainPolicy: "
     "gain, offset)"),
    ("- {name: g, entrypoint: 'tests.helpers:GainPolicy', params: {gain: ten}}\n", 6,
     "policy 'g': params.gain: Input should be a valid number, unable to parse string as a number, got 'ten' "
     "(tests.helpers:GainPolicy takes gain: float)"),
    ("- {name: g, entrypoint: 'tests.helpers:GainPolcy'}\n", 6,
     "policy 'g': module 'tests.helpers' has no attribute 'GainPolcy'; did you mean 'GainPolicy'?"),
    ("- {name: k, entrypoint: 'tests.faulty_policies:KillingExpert', params: {modulo: 2}}\n", 6,
     "policy 'k': params.marker_dir: missing, tests.faulty_policies:KillingExpert requires it (valid parameters of "
     "tests.faulty_policies:KillingExpert: marker_dir, modulo, once)"),
    ("- random\n- {name: d, builtin: degraded-expert, params: {action_nosie: 0.1}}\n", 7,
     "policy 'd': params.action_nosie: unknown parameter; did you mean 'action_noise'? (valid parameters: "
     "action_noise, action_delay, bias, freeze_prob)"),
])
def test_a_mistyped_policy_is_one_line_before_any_episode(tmp_path: Path, policy: str, line: int,
                                                          message: str) -> None:
    path = _campaign(tmp_path, policy)
    result = runner.invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "-x", "inline"])
    assert result.exit_code == 2
    [shown] = result.stderr.strip().splitlines()
    assert shown == f"error: {path}:{line}: {message}"
    assert not (tmp_path / "s").exists(), "nothing ran"


def test_params_a_constructor_takes_pass_and_open_keywords_are_not_refused() -> None:
    from assay.policies import resolve_policy
    from assay.spec import PolicySpec

    resolve_policy(PolicySpec(name="g", entrypoint="tests.helpers:GainPolicy", params={"gain": 2, "offset": 0.5}))
    resolve_policy(PolicySpec(name="f", entrypoint="tests.helpers:FlakyExpert"))


def test_a_policy_whose_every_episode_errors_fails_the_run_and_says_why(tmp_path: Path) -> None:
    path = _campaign(tmp_path, """\
        - {name: good, entrypoint: 'tests.helpers:GainPolicy', params: {gain: 0.5}}
        - {name: wrong, entrypoint: 'tests.helpers:WrongShape'}
        """)
    store = str(tmp_path / "s")
    result = runner.invoke(app, ["run", str(path), "--store", store, "-x", "inline"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert "warning: 2 episodes of this run ended as error, by reason (assay episodes ls --outcome error lists them):" \
        in lines
    assert "  2 invalid action; first, policy 'wrong': step 0: invalid action: shape (2,), expected (1,) or a chunk " \
        "(H, 1)" in lines
    assert lines[-1] == ("gate failed: every episode of policy 'wrong' ended as error (2 of 2); fix it and re-run "
                         "with --retry-errors, or pass --allow-errors to exit 0 anyway")
    assert "good" not in lines[-1]
    again = runner.invoke(app, ["run", str(path), "--store", store, "-x", "inline", "--allow-errors"])
    assert again.exit_code == 0 and "gate failed" not in again.stderr, "a resume with --allow-errors exits 0"
    resumed = runner.invoke(app, ["run", str(path), "--store", store, "-x", "inline", "--json"])
    assert resumed.exit_code == 1, "the campaign still holds a policy that never ran an episode without error"


def test_a_policy_with_some_errors_passes_and_the_reasons_are_counted(tmp_path: Path) -> None:
    path = _campaign(tmp_path, "- {name: flaky, entrypoint: 'tests.helpers:FlakyExpert'}\n- random\n")
    path.write_text(path.read_text().replace("gymnasium/Pendulum-v1", "metaworld/reach@1").replace("episodes: 2",
                                                                                                  "episodes: 4"))
    result = runner.invoke(app, ["run", str(path), "--store", str(tmp_path / "s"), "-x", "inline", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "of this run ended as error, by reason" in result.stderr


def test_error_kinds_leave_out_the_step_and_the_details() -> None:
    assert error_kind("step 3: invalid action: shape (5,), expected (4,)") == "invalid action"
    assert error_kind("step 0: policy raised RemotePolicyError: policy server ws://h failed: E_POLICY: x") == \
        "policy raised RemotePolicyError"
    assert error_kind("wall_timeout: episode ran past its 7 s wall-clock limit") == "wall_timeout"
    assert error_kind("") == "no reason recorded"
    summary = CampaignSummary("c", 3, 0)
    for policy, reason in (("a", "step 1: invalid action: x"), ("b", "step 4: invalid action: y"),
                           ("a", "setup failed: z")):
        summary.count_error(policy, reason)
    assert {k: (v.count, v.first, v.policy) for k, v in summary.errors.items()} == {
        "invalid action": (2, "step 1: invalid action: x", "a"), "setup failed": (1, "setup failed: z", "a")}
