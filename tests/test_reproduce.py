"""Protocol conformance and the reproduction registry: field-by-field checks, the exact rate test, the verdicts,
the impossible-rate lint, and `assay reproduce` against fake policy servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.metrics.reproduction import FIELDS, check_protocol, lint_rate, load_registry, parse_rate, reproduce
from assay.run import prepare_campaign
from assay.spec.loading import load_campaign
from tests.record_store import fake_store
from tests.stats_fixtures import records

ROOT = Path(__file__).parents[1]
ENTRY = "openpi/pi05_libero/libero_spatial"  # 98.8% of 500
runner = CliRunner()


def _libero_resolved(tmp_path: Path, **changes: object) -> dict:
    """examples/libero.yaml resolved (the served policy swapped for a builtin: no server needed), with ``changes``."""
    data = yaml.safe_load((ROOT / "examples" / "libero.yaml").read_text())
    data.update({"policies": ["random"], **changes})
    path = tmp_path / "libero.yaml"
    path.write_text(yaml.safe_dump(data))
    return prepare_campaign(load_campaign(path)).resolved()


def _episodes(resolved: dict, successes: int, policy: str = "random") -> list:
    """50 episodes per task of the resolved campaign, ``successes`` in all spread over its tasks."""
    tasks = [t["id"] for t in resolved["tasks"]]
    per_task = [successes // len(tasks) + (i < successes % len(tasks)) for i in range(len(tasks))]
    return records({(policy, task): "S" * k + "F" * (50 - k) for task, k in zip(tasks, per_task, strict=True)})


def test_the_libero_example_follows_openpis_protocol_field_by_field(tmp_path):
    registry = load_registry()
    resolved = _libero_resolved(tmp_path)
    checks, tasks = check_protocol(registry.protocols["openpi/libero_spatial"], resolved)
    assert [c.name for c in checks] == list(FIELDS) and all(c.matches for c in checks) and len(tasks) == 10
    assert {c.name: c.campaign for c in checks} == {
        "horizon": 220, "settle_steps": 10, "init_states": "fixed from state 0", "episodes_per_task": 50,
        "camera_size": "224x224", "replan_steps": 5, "control_hz": 20.0, "tasks": 10}
    lerobot, _ = check_protocol(registry.protocols["lerobot/libero_spatial"], resolved)
    assert {c.name for c in lerobot if not c.matches} == {"horizon", "episodes_per_task", "camera_size",
                                                          "replan_steps"}
    oft, _ = check_protocol(registry.protocols["openvla-oft/libero_spatial"], resolved)
    assert [(c.name, c.published, c.campaign) for c in oft if not c.matches] == [("replan_steps", 8, 5)]


def test_camera_size_is_what_the_policy_receives(tmp_path):
    """openpi renders 256 px and its client sends resize_with_pad(..., 224, 224): a campaign with 256 px cameras
    and a remote policy's ``image_size: [224, 224]`` matches; the same cameras sent as rendered do not."""
    from assay.spec import PolicySpec

    registry = load_registry()
    cameras = [{"name": "agentview", "width": 256, "height": 256}, {"name": "wrist", "width": 256, "height": 256}]
    resolved = _libero_resolved(tmp_path, cameras=cameras)  # resolving a remote policy would connect to it
    served = {"name": "pi05-libero", "remote": "ws://127.0.0.1:8000", "version": "pi05_libero"}
    resolved["policies"] = [{"name": spec["name"], "spec": PolicySpec.model_validate(spec).model_dump(mode="json")}
                            for spec in ({**served, "params": {"image_size": [224, 224]}},
                                         {**served, "name": "as-rendered"})]
    protocol = registry.protocols["openpi/libero_spatial"]
    sizes = {policy: {c.name: (c.campaign, c.matches) for c in check_protocol(protocol, resolved, policy)[0]}
             ["camera_size"] for policy in ("pi05-libero", "as-rendered")}
    assert sizes == {"pi05-libero": ("224x224", True), "as-rendered": ("256x256", False)}


def test_a_faithful_campaign_reproduces_and_an_out_of_interval_rate_does_not(tmp_path):
    registry, resolved = load_registry(), _libero_resolved(tmp_path)
    faithful = reproduce(registry, ENTRY, resolved, _episodes(resolved, 492))
    assert faithful.verdict == "reproduced" and faithful.published_in_interval
    assert (faithful.successes, faithful.trials, faithful.published_n) == (492, 500, 500)
    assert faithful.test.startswith("Fisher's exact test, measured 492/500 vs published 494/500")
    worse = reproduce(registry, ENTRY, resolved, _episodes(resolved, 440))
    assert worse.verdict == "not reproduced" and not worse.published_in_interval and worse.p_value < 1e-6
    assert worse.measured_high < 0.988


def test_a_horizon_mismatch_is_named_and_the_verdict_is_protocol_differs(tmp_path):
    registry = load_registry()
    resolved = _libero_resolved(tmp_path, horizon=100, seed=0)
    result = reproduce(registry, ENTRY, resolved, _episodes(resolved, 494))
    assert result.verdict == "protocol differs"
    assert result.reasons == ("horizon: published 220, campaign 100",)
    shifted = _libero_resolved(tmp_path, seed=0, episodes=10)
    fields = {c.name: c for c in check_protocol(registry.protocols["openpi/libero_spatial"], shifted)[0]}
    assert not fields["episodes_per_task"].matches and fields["init_states"].matches


def test_entries_without_a_protocol_or_n_test_the_rate_alone_and_say_so(tmp_path):
    registry, resolved = load_registry(), _libero_resolved(tmp_path)
    smol = reproduce(registry, "smolvla-0.45b/libero_spatial", resolved, _episodes(resolved, 450))  # 90%
    assert smol.verdict == "reproduced" and smol.fields == () and smol.published_n is None
    assert smol.test.startswith("exact binomial test")
    assert any("only the rate is tested" in n for n in smol.notes) and any("n: not found" in n for n in smol.notes)


def test_policy_choice_errors_and_unknown_entries(tmp_path):
    registry, resolved = load_registry(), _libero_resolved(tmp_path)
    two = _episodes(resolved, 490, "a") + _episodes(resolved, 490, "b")
    with pytest.raises(AssayError, match="policies a, b; name the one"):
        reproduce(registry, ENTRY, resolved, two)
    assert reproduce(registry, ENTRY, resolved, two, policy="b").policy == "b"
    with pytest.raises(AssayError, match="no policy 'c'"):
        reproduce(registry, ENTRY, resolved, two, policy="c")
    with pytest.raises(AssayError, match="no registry entry 'nope'.*valid: .*openpi/pi05_libero/libero_spatial"):
        reproduce(registry, "nope", resolved, two)


def test_a_campaign_with_tasks_not_yet_run_is_refused_and_a_partial_one_is_marked(tmp_path):
    """Issue 36 for reproduce: the suite's tasks run in plan order, so a campaign killed after 3 of its 10 tasks
    measured only those (and the plan still said 10 tasks x 50: every protocol field matched)."""
    registry, resolved = load_registry(), _libero_resolved(tmp_path)
    tasks = [t["id"] for t in resolved["tasks"]]
    killed = records({("random", task): "S" * 50 for task in tasks[:3]})
    with pytest.raises(AssayError, match=r"^reproducing openpi/pi05_libero/libero_spatial with policy 'random': "
                                         r"refused, 7 of its 10 cells have no episode yet .*--allow-partial$"):
        reproduce(registry, ENTRY, resolved, killed)
    allowed = reproduce(registry, ENTRY, resolved, killed, allow_partial=True)
    assert (allowed.successes, allowed.trials) == (150, 150) and allowed.completeness["complete"] is False
    assert (allowed.completeness["planned"], allowed.completeness["recorded"]) == (500, 150)
    assert any(n.startswith("the campaign is incomplete: 150 of 500 planned episodes recorded; 7 cell(s) have none")
               for n in allowed.notes)
    short = records({("random", task): "S" * (50 if i else 20) for i, task in enumerate(tasks)})  # all tasks, one short
    marked = reproduce(registry, ENTRY, resolved, short)
    assert marked.completeness["complete"] is False and marked.completeness["recorded"] == 470
    whole = reproduce(registry, ENTRY, resolved, _episodes(resolved, 492))
    assert whole.completeness["complete"] is True and whole.scope["label"] == "nominal only"
    assert not any("incomplete" in n for n in whole.notes)


def test_a_campaign_of_perturbed_variants_only_differs_in_protocol_and_a_mixed_one_scores_nominal(tmp_path):
    """Published rates are unperturbed: a campaign that ran only a perturbed variant was tested as if it were the
    published protocol (``not reproduced``), and one with two perturbed variants and no nominal found no episode."""
    registry, resolved = load_registry(), _libero_resolved(tmp_path)
    tasks = [t["id"] for t in resolved["tasks"]]
    noisy = "action.noise=0.5"
    perturbed = {**resolved, "variants": [{"name": noisy, "key": "k1"}],
                 "cells": [{**c, "variant": noisy} for c in resolved["cells"]]}
    only = records({("random", task): "F" * 50 for task in tasks}, variant=noisy)
    result = reproduce(registry, ENTRY, perturbed, only)
    assert result.verdict == "protocol differs" and result.trials == 500
    assert result.reasons == (f"variant: published nominal, campaign variant {noisy} only",)
    assert result.scope["label"] == f"variant {noisy} only" and result.completeness["complete"] is True
    both = {**resolved, "variants": [{"name": "nominal", "key": "k0"}, {"name": noisy, "key": "k1"}],
            "cells": resolved["cells"] + perturbed["cells"]}
    mixed = reproduce(registry, ENTRY, both, _episodes(resolved, 492) + only)
    assert mixed.verdict == "reproduced" and (mixed.successes, mixed.trials) == (492, 500)
    assert "nominal variant only (the published numbers are unperturbed)" in mixed.notes


def test_impossible_rates_are_flagged():
    bad = lint_rate("43.9%", 500)
    assert not bad.possible and bad.successes_needed == pytest.approx(219.5) and bad.nearest == ("43.8%", "44.0%")
    assert "impossible" in bad.message
    assert lint_rate("97.9%", 1500).fitting == (1468, 1469) and not lint_rate("97.9%", 500).possible
    assert lint_rate("0.62", 50).possible and lint_rate("62%", 50).possible and not lint_rate("0.621", 50).possible
    assert lint_rate("100%", 1).possible and lint_rate("0%", 7).possible and lint_rate("33.3%", 3).fitting == (1,)
    assert parse_rate("43.9")[2] and not parse_rate("0.439")[2]  # 43.9 without '%' is a percentage
    for text, message in [("abc", "not a number"), ("120%", "above 100%"), ("-3%", "not valid")]:
        with pytest.raises(AssayError, match=message):
            lint_rate(text, 10)
    with pytest.raises(AssayError, match="at least 1"):
        lint_rate("50%", 0)


def test_the_nearest_possible_rates_are_neighbours_in_numeric_order():
    """Candidates sorted as text named 33.3% and 100.0% around 66.6% of 3, and 8.0% and 12.0% around 10.5% of 50."""
    assert lint_rate("66.6%", 3).nearest == ("33.3%", "66.7%")
    assert lint_rate("10.5%", 50).nearest == ("10.0%", "12.0%")
    assert lint_rate("0.105", 50).nearest == ("0.100", "0.120")
    assert lint_rate("9.5%", 100).nearest == ("9.0%", "10.0%")  # 10.0% sorts before 9.0% as text
    assert lint_rate("0.5%", 10).nearest == ("0.0%", "10.0%")  # the ends: nothing possible beyond them
    assert lint_rate("99.5%", 10).nearest == ("90.0%", "100.0%")


def test_ties_round_half_up_or_half_even_never_half_down():
    """27/200 = 13.5% prints as 14% half up and half even (4 is even); 13% needs half down, which nobody uses.
    25/200 = 12.5% prints as 13% half up and 12% half even: both fit."""
    assert lint_rate("13%", 200).fitting == (25, 26)
    assert lint_rate("14%", 200).fitting == (27, 28, 29)
    assert lint_rate("12%", 200).fitting == (23, 24, 25)
    assert lint_rate("0.13", 8).fitting == (1,) and lint_rate("0.12", 8).fitting == (1,)  # 0.125: up 0.13, even 0.12
    assert not lint_rate("0.37", 8).possible  # 3/8 = 0.375: up 0.38, even 0.38; 0.37 is half down only
    assert lint_rate("0.37", 8).nearest == ("0.25", "0.38")


def test_every_published_rate_in_the_registry_is_possible_and_cited():
    registry = load_registry()
    assert len(registry.results) >= 20 and len(registry.protocols) >= 12
    for name, result in registry.results.items():
        assert result["citation"] and result["source"] in ("primary", "secondary"), name
        assert result["reproduced"] is None, name  # filled only by a run here, recorded in its store
        if result["n"] is not None:
            assert lint_rate(result["rate"], result["n"]).possible, name
    for protocol in registry.protocols.values():
        assert set(protocol["sources"]) == set(FIELDS) - {"tasks"} and protocol["tasks"] == 10


def test_a_registry_with_an_impossible_rate_or_a_bad_shape_is_refused(tmp_path):
    doc = json.loads((ROOT / "src/assay/metrics/data/reproduction.json").read_text())
    doc["results"]["x"] = {**doc["results"][ENTRY], "rate": "43.9%"}
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(AssayError, match="result 'x': 43.9% of 500 is impossible"):
        load_registry(path)
    path.write_text(json.dumps({"schema_version": 9}))
    with pytest.raises(AssayError, match="schema_version 2"):
        load_registry(path)
    path.write_text("{")
    with pytest.raises(AssayError, match="not JSON"):
        load_registry(path)


def test_the_registry_says_source_and_leaves_reproduced_to_runs_here(tmp_path):
    registry = load_registry()
    assert {p["manifest"] for p in registry.protocols.values()} >= {"openpi-libero@1:spatial",
                                                                    "lerobot-libero-main@1:10"}
    doc = json.loads((ROOT / "src/assay/metrics/data/reproduction.json").read_text())
    doc["results"][ENTRY]["reproduced"] = {"policy": "pi05", "rate": 0.99}  # filled by hand: no bundle, no run
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(AssayError, match=r"result 'openpi/pi05_libero/libero_spatial': 'reproduced' is filled only "
                                         r"by a run here .* \(missing campaign, protocol, "):
        load_registry(path)
    old = {"schema_version": 1, "protocols": {}, "results": {"x": {"checkpoint": "c", "protocol": None, "rate": "50%",
                                                                   "n": 2, "source": "a paper", "verified": "primary",
                                                                   "task_prefix": "metaworld/"}}}
    path.write_text(json.dumps(old))
    upgraded = load_registry(path).results["x"]  # version 1 reads as 2: verified is source, source is citation
    assert (upgraded["source"], upgraded["citation"], upgraded["reproduced"]) == ("primary", "a paper", None)


def test_reproduce_and_lint_rate_commands(tmp_path):
    resolved = _libero_resolved(tmp_path)
    store = fake_store(tmp_path / "s", "libero-spatial", _episodes(resolved, 493), resolved)
    doc = json.loads(runner.invoke(app, ["reproduce", ENTRY, "--campaign", "libero-spatial", "--store", str(store),
                                         "--json"]).stdout)
    assert doc["verdict"] == "reproduced" and doc["measured_rate"] == pytest.approx(0.986)
    assert all(f["matches"] for f in doc["fields"]) and doc["registry"].startswith("assay's registry")
    shown = runner.invoke(app, ["reproduce", ENTRY, "--campaign", "libero-spatial", "--store", str(store)])
    assert shown.exit_code == 0 and "reproduced" in shown.stdout and "horizon" in shown.stdout
    listed = runner.invoke(app, ["reproduce", "--list"])
    assert listed.exit_code == 0 and "openvla-oft/libero_goal" in listed.stdout
    assert doc["scope"]["label"] == "nominal only" and doc["completeness"]["complete"] is True
    killed = fake_store(tmp_path / "k", "libero-spatial", records({("random", resolved["tasks"][0]["id"]): "S" * 50}),
                        resolved)
    refused = runner.invoke(app, ["reproduce", ENTRY, "--campaign", "libero-spatial", "--store", str(killed)])
    assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "refused, 9 of its 10 cells have no episode yet" in refused.stderr
    partial = runner.invoke(app, ["reproduce", ENTRY, "--campaign", "libero-spatial", "--store", str(killed),
                                  "--allow-partial"])
    assert partial.exit_code == 0 and "the campaign is incomplete: 50 of 500" in " ".join(partial.stdout.split())
    missing = runner.invoke(app, ["reproduce", ENTRY])
    assert missing.exit_code == 2 and "--campaign" in missing.stderr
    lint = runner.invoke(app, ["lint-rate", "43.9%", "--trials", "500"])
    assert lint.exit_code == 1 and "nearest possible rates are 43.8% and 44.0%" in lint.stdout
    ok = runner.invoke(app, ["lint-rate", "97.9", "-n", "1500", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["fitting"] == [1468, 1469]


STANDIN_REGISTRY = {
    "schema_version": 1,
    "protocols": {"standin/reach": {
        "description": "a cheap stand-in for a published protocol: Meta-World reach",
        "task_prefix": "metaworld/reach", "tasks": 1,
        "fields": {"horizon": 150, "settle_steps": 0, "init_states": "sampled from the seed", "episodes_per_task": 6,
                   "camera_size": "no camera", "replan_steps": "whole chunk", "control_hz": 80},
        "sources": {}, "verified": "primary"}},
    "results": {"standin/expert/reach": {"checkpoint": "Meta-World's scripted expert", "protocol": "standin/reach",
                                         "rate": "100%", "n": 50, "source": "this test", "verified": "primary",
                                         "unverified": []}},
}


@pytest.mark.sim
@pytest.mark.slow
def test_reproduce_against_fake_policy_servers_that_do_and_do_not_reproduce(tmp_path):
    """Two policy servers over the openpi protocol (websocket + msgpack): one serves the expert the entry
    publishes (faithful), one a random policy (not); a third campaign runs the faithful one at another horizon."""
    from assay.policies import ExpertPolicy, RandomPolicy
    from assay.sim import default_registry
    from tests.remote_support import serving

    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps(STANDIN_REGISTRY))
    store = tmp_path / "store"
    reach = default_registry().get("metaworld/reach@1")
    with serving(ExpertPolicy(), reach) as faithful, serving(RandomPolicy(), reach) as unfaithful:
        for name, horizon in (("standin", 150), ("standin-short", 30)):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump({
                "name": name, "seed": 0, "episodes": 6, "horizon": horizon, "envs_per_worker": 6,
                "tasks": ["metaworld/reach@1"],
                "policies": [{"name": "faithful", "remote": faithful.url},
                             {"name": "unfaithful", "remote": unfaithful.url}]}))
            ran = runner.invoke(app, ["run", str(path), "--store", str(store), "--executor", "inline", "--json"])
            assert ran.exit_code == 0, ran.output

    def verdict(campaign: str, policy: str) -> dict:
        result = runner.invoke(app, ["reproduce", "standin/expert/reach", "--campaign", campaign, "--policy", policy,
                                     "--registry", str(registry), "--store", str(store), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    good = verdict("standin", "faithful")
    assert good["verdict"] == "reproduced" and (good["successes"], good["trials"]) == (6, 6)
    assert all(f["matches"] for f in good["fields"])
    bad = verdict("standin", "unfaithful")
    assert bad["verdict"] == "not reproduced" and bad["successes"] == 0 and not bad["published_in_interval"]
    short = verdict("standin-short", "faithful")
    assert short["verdict"] == "protocol differs" and short["reasons"] == ["horizon: published 150, campaign 30"]


@pytest.mark.libero
@pytest.mark.slow
def test_reproduce_a_tiny_libero_campaign_against_a_fake_openpi_server(tmp_path):
    """One LIBERO-Spatial episode, 7 steps, against the openpi-protocol stand-in (tests/openpi_libero_server.py):
    the campaign's recorded protocol is read back from the catalog and differs from openpi's exactly in the
    fields the campaign changed (horizon, episodes, tasks); the rest (settle steps, fixed initial states from 0,
    224 px cameras, replanning every 5, 20 Hz) is openpi's."""
    from tests.chaos_support import free_port, kill_group
    from tests.test_libero import _start_openpi_server

    port, store = free_port(), tmp_path / "store"
    data = yaml.safe_load((ROOT / "examples" / "libero.yaml").read_text())
    data.update(name="tiny-libero", episodes=1, horizon=7, tasks=data["tasks"][:1],
                policies=[{"name": "openpi", "remote": f"ws://127.0.0.1:{port}", "version": "fake-openpi-1"}])
    campaign = tmp_path / "tiny.yaml"
    campaign.write_text(yaml.safe_dump(data))
    server = _start_openpi_server(port, tmp_path / "requests.jsonl")
    try:
        ran = runner.invoke(app, ["run", str(campaign), "--store", str(store), "--executor", "inline", "--json"])
        assert ran.exit_code == 0, ran.output
    finally:
        kill_group(server)
    result = runner.invoke(app, ["reproduce", ENTRY, "--campaign", "tiny-libero", "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "protocol differs" and (doc["successes"], doc["trials"]) == (0, 1)
    assert doc["reasons"] == ["horizon: published 220, campaign 7", "episodes_per_task: published 50, campaign 1",
                              "tasks: published 10, campaign 1"]
    assert {f["name"] for f in doc["fields"] if f["matches"]} == {"settle_steps", "init_states", "camera_size",
                                                                   "replan_steps", "control_hz"}
