"""The CLI in process: listings with --json, results, episodes, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app

runner = CliRunner()

CAMPAIGN = """
name: cli
seed: 2
episodes: 2
envs_per_worker: 2
tasks: [metaworld/reach@1]
policies: [expert, random]
"""


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_tasks_and_policies_list_and_filter():
    result = invoke("tasks", "--json", "--family", "open-close")
    assert result.exit_code == 0
    ids = [t["id"] for t in json.loads(result.stdout)["tasks"]]
    assert "metaworld/drawer-open@1" in ids and all(t["family"] == "open-close" for t in json.loads(result.stdout)["tasks"])
    assert "metaworld/pick-place@1" not in ids
    result = invoke("policies", "--json")
    names = {p["name"]: p for p in json.loads(result.stdout)["policies"]}
    assert set(names) == {"expert", "random", "degraded-expert", "mlp", "perception-expert", "router", "bc", "pixel-bc",
                          "lerobot", "libero-faulty-expert"}
    assert "action_noise" in names["degraded-expert"]["params"]
    assert "drawer-open" in invoke("tasks").stdout


@pytest.mark.sim
def test_run_results_and_episodes(tmp_path, write_campaign):
    path = write_campaign(CAMPAIGN)
    store = str(tmp_path / "store")
    result = invoke("run", str(path), "--store", store, "--executor", "inline", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["ran"], document["skipped"]) == (4, 0)
    rows = {r["group"]["policy"]: r for r in document["results"]}
    assert rows["expert"]["successes"] == 2 and rows["random"]["successes"] == 0
    assert rows["expert"]["ci_low"] == pytest.approx(0.05 ** 0.5, abs=1e-9)  # mid-p 95% for 2/2: ½p² = 0.025

    result = invoke("run", str(path), "--store", store, "--executor", "inline")
    assert result.exit_code == 0 and "0 run now, 4 already in the store" in result.stdout

    result = invoke("results", "--store", store, "--by", "policy", "--json")
    assert {r["group"]["policy"] for r in json.loads(result.stdout)["results"]} == {"expert", "random"}
    assert "mid-p 95%" in invoke("results", "--store", store).stdout

    episodes = json.loads(invoke("episodes", "ls", "--store", store, "--outcome", "success", "--json").stdout)["episodes"]
    assert len(episodes) == 2 and all(e["outcome"] == "success" for e in episodes)
    shown = invoke("episodes", "show", episodes[0]["key"][:10], "--store", store, "--json")
    assert shown.exit_code == 0
    detail = json.loads(shown.stdout)
    assert detail["steps"]["rows"] == episodes[0]["steps"]
    assert detail["steps"]["columns"]["observation.state"]["dims"] == 39
    assert "trajectory hash" in invoke("episodes", "show", episodes[0]["key"], "--store", store).stdout


@pytest.mark.parametrize(
    "campaign, message",
    [
        ("name: x\nepisodes: [2\n", "malformed YAML"),
        ("name: x\nepisodes: 1\ntasks: [metaworld/pick-plac]\npolicies: [expert]\n",
         "unknown task 'metaworld/pick-plac'; did you mean metaworld/pick-place"),
        ("name: x\nepisodes: 1\ntasks: [metaworld/reach]\npolicies: [experts]\n",
         "unknown builtin 'experts'; valid: bc, degraded-expert, expert, lerobot, libero-faulty-expert, mlp, perception-expert, pixel-bc, random, router"),
        ("name: x\nepisodes: 1\ntasks: [metaworld/reach]\npolicies: [no_such_module.sub:Policy]\n",
         "no module 'no_such_module' (a module:attr policy is imported from the Python path"),
        ("name: x\nepisodes: 1\ntasks: [metaworld/reach]\npolicies: [tests.helpers:Missing]\n",
         "module 'tests.helpers' has no attribute 'Missing'"),
        ("name: x\nepisodes: 1\ntasks: [metaworld/reach]\npolicies:\n  - {name: s, builtin: degraded-expert, params: {noise: 1}}\n",
         "params.noise: unknown parameter (valid parameters: action_noise, action_delay, bias, freeze_prob)"),
        ("name: x\nepisodes: 1\ntasks: [gymnasium/Pusher-v5]\npolicies: [expert]\n",
         "policy 'expert' cannot run gymnasium/Pusher-v5@1"),
    ],
)
def test_bad_campaigns_are_one_line_errors_with_exit_2(tmp_path, write_campaign, campaign, message):
    path = write_campaign(campaign)
    result = invoke("run", str(path), "--store", str(tmp_path / "s"), "--executor", "inline")
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # nothing was written for a campaign that never started


def test_missing_file_and_unwritable_store_are_one_line_errors(tmp_path, write_campaign):
    result = invoke("run", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2 and "no such campaign file" in result.stderr
    path = write_campaign(CAMPAIGN)
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    result = invoke("run", str(path), "--store", str(blocker / "store"), "--executor", "inline")
    assert result.exit_code == 2 and f"{blocker} (on the store path {blocker / 'store'}) is a file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_reading_a_missing_store_or_unknown_key_is_one_line(tmp_path):
    result = invoke("results", "--store", str(tmp_path / "none"))
    assert result.exit_code == 2 and "no store at" in result.stderr
    result = invoke("episodes", "ls", "--store", str(tmp_path), "--outcome", "wat")
    assert result.exit_code == 2 and "valid: success, failure, timeout, error" in result.stderr


@pytest.mark.parametrize(("command", "valid"), [
    (("run", "campaign.yaml"), "'inline', 'local', 'ray'"),
    (("serve",), "'inline', 'local', 'ray'"),
    (("failures", "resample", "KEY"), "'inline', 'local'."),  # resampling has no Ray executor
])
def test_an_unknown_executor_is_refused_naming_the_valid_ones_before_anything_runs(tmp_path, command, valid):
    result = invoke(*command, "--executor", "fast", "--store", str(tmp_path / "never"))
    message = " ".join(line.strip("│ ") for line in result.stderr.splitlines())
    assert result.exit_code == 2 and "'fast' is not one of" in message and valid in message
    assert not (tmp_path / "never").exists()


def test_factors_are_listed_with_axis_range_and_stage():
    document = json.loads(invoke("factors", "--json").stdout)
    factors = {f["name"]: f for f in document["factors"]}
    assert factors["light.intensity"]["axis"] == "visual" and factors["light.intensity"]["valid"] == "[0, 5] x nominal"
    assert factors["control.latency"]["stage"] == "reset" and "gymnasium" in factors["control.latency"]["backends"]
    assert {f["axis"] for f in document["factors"]} == {"visual", "behavioral", "semantic"}
    assert "[r, g, b]" in invoke("factors", "--axis", "visual").stdout
    assert invoke("factors", "--axis", "smell").exit_code == 2
    # Applicability: the object factors list the 19 Meta-World tasks they cannot change; --task says per task.
    assert len(factors["object.mass"]["not_applicable_tasks"]) == 19
    assert "metaworld/drawer-open@1" in factors["object.color"]["not_applicable_tasks"]
    assert factors["friction"]["not_applicable_tasks"] == []
    drawer = {f["name"]: f for f in json.loads(invoke("factors", "--task", "metaworld/drawer-open", "--json").stdout)
              ["factors"]}
    assert drawer["object.mass"]["applies"] is False and "no object body" in drawer["object.mass"]["why_not"]
    assert drawer["friction"]["applies"] is True and drawer["libero.swap"]["applies"] is False


@pytest.mark.sim
def test_sweep_prints_the_curve_and_results_profile_the_retention(tmp_path):
    store = str(tmp_path / "store")
    result = invoke("sweep", "--factor", "action.noise", "--values", "0.5,1.0", "--task", "metaworld/reach@1",
                    "--policy", "expert", "--episodes", "3", "--executor", "inline", "--store", store, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    curve = document["curve"]
    assert [p["level"] for p in curve] == [None, 0.5, 1.0]
    # one sign-off row per level (each is its own ranking), none calibrated in a fresh store
    assert len(document["signoff"]) == 3 and not any(g["validated"] for g in document["signoff"])
    assert {tuple(g["variants"]) for g in document["signoff"]} >= {("nominal",)}
    assert curve[0]["rate"] == 1.0 and curve[0]["retention"] == 1.0
    assert all(p["scored"] == 3 for p in curve)
    profile = json.loads(invoke("results", "--store", store, "--profile", "--json").stdout)
    assert {r["variant"] for r in profile["retention"]} == {"action.noise=0.5", "action.noise=1.0"}
    assert all(r["pairs"] == 3 for r in profile["retention"])
    assert profile["profile"][0]["axis"] == "behavioral"
    assert "robustness profile" in invoke("results", "--store", store, "--profile").stdout
    bad = invoke("sweep", "--factor", "light.intensity", "--values", "9", "--store", store)
    assert bad.exit_code == 2 and "valid: [0, 5] x nominal" in bad.stderr


@pytest.mark.sim
def test_a_sweeps_horizon_caps_every_episode_and_is_part_of_its_campaign(tmp_path):
    store = str(tmp_path / "store")
    args = ["sweep", "--factor", "action.noise", "--values", "0.5", "--task", "gymnasium/Pendulum-v1", "--policy",
            "random", "--episodes", "2", "-x", "inline", "--store", store, "--json"]
    capped = json.loads(invoke(*args, "--horizon", "7").stdout)
    assert [p["scored"] for p in capped["curve"]] == [2, 2]
    steps = [e["steps"] for e in json.loads(invoke("episodes", "ls", "--store", store, "--campaign", capped["campaign"],
                                                   "--json").stdout)["episodes"]]
    assert steps == [7, 7, 7, 7]  # Pendulum never ends by itself: every episode runs to the cap
    full = json.loads(invoke(*args).stdout)
    assert full["campaign"] != capped["campaign"]  # another horizon, another campaign (and other episode keys)
    bad = invoke(*args, "--horizon", "0")
    assert bad.exit_code == 2 and "--horizon" in bad.stderr


def test_an_unknown_name_is_one_wording_with_the_closest_known_names():
    from assay.errors import unknown_name

    assert unknown_name("campaign", "libero-zoo-stat", ["libero-zoo-state-best", "tiny", "libero-zoo-pixel"], "/s") \
        == "no campaign 'libero-zoo-stat' in /s; known: libero-zoo-pixel, libero-zoo-state-best, tiny; did you " \
           "mean 'libero-zoo-state-best' or 'libero-zoo-pixel'?"
    assert unknown_name("campaign", "x", []) == "no campaign 'x'; known: none yet"  # an empty store
    assert unknown_name("regression set", "zzz", ["abc"]) == "no regression set 'zzz'; known: abc"  # none close
