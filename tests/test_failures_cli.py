"""The failure-mining CLI end to end on a small real campaign (reach: random fails, expert succeeds)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from assay.cli.app import app

pytestmark = pytest.mark.sim
runner = CliRunner()

CAMPAIGN = """
name: mine
seed: 4
episodes: 4
envs_per_worker: 4
tasks: [metaworld/reach@1]
policies: [random]
"""


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("failures")
    (root / "c.yaml").write_text(CAMPAIGN)
    invoke("run", str(root / "c.yaml"), "--store", str(root / "s"), "--executor", "inline")
    return root / "s"


def test_mine_categorizes_and_attributes(store):
    document = json.loads(invoke("failures", "mine", "--store", str(store), "--json").stdout)
    assert document["failures"] == 4
    assert sum(document["categories"].values()) == 4 and "uncategorized" not in document["categories"]
    assert sum(row["failures"] for row in document["attribution"]) == 4


def test_regression_set_rerun_reports_fixed_then_still_passing(store):
    added = json.loads(invoke("regress", "add", "hard", "--from", "mine", "--store", str(store), "--holdout", "0.25",
                              "--json").stdout)
    mined, held = added["mined"]["cases"], (added["heldout"] or {"cases": 0})["cases"]
    assert mined + held == 4 and added["mined"]["version"] == 1
    again = json.loads(invoke("regress", "add", "hard", "--from", "mine", "--store", str(store), "--json").stdout)
    assert again["mined"]["version"] == 1  # same cases: same version
    first = json.loads(invoke("regress", "run", "hard", "--policy", "random", "--store", str(store), "--json").stdout)
    assert first[0]["still_failing"] == mined and first[0]["fixed"] == 0  # the same policy, the same seeds
    second = json.loads(invoke("regress", "run", "hard", "--policy", "expert", "--store", str(store), "--json").stdout)
    assert second[0]["fixed"] == mined and second[0]["baseline"] == "run 1"
    assert [row["split"] for row in second] == ["mined", "heldout"][: len(second)]
    third = json.loads(invoke("regress", "run", "hard", "--policy", "random", "--store", str(store), "--json").stdout)
    assert third[0]["newly_failing"] == mined


def test_point_of_no_return_plot_demos_and_priorities(store):
    ls = json.loads(invoke("episodes", "ls", "--store", str(store), "--campaign", "mine", "--json").stdout)
    key = ls["episodes"][0]["key"] if isinstance(ls, dict) else ls[0]["key"]
    found = json.loads(invoke("failures", "ponr", key, "--store", str(store), "--demos", "--json").stdout)
    assert found["t"] is not None and 0 < found["t"] <= found["steps"]
    assert (store / "failures" / "keyframes" / f"{found['key']}.png").stat().st_size > 1000
    assert found["demos"], "the expert recovers from just before the point of no return"
    demo = pq.read_table(store / found["demos"][0])
    assert demo.schema.metadata[b"purpose"] == b"recovery" and demo.schema.metadata[b"source_episode"] == found["key"].encode()
    assert demo.column("success").to_pylist()[-1] is True
    rows = json.loads(invoke("priorities", "--store", str(store), "--campaign", "mine", "--json").stdout)
    assert rows[0]["score"] is not None and rows[0]["recoverable"] == 1 and rows[0]["policy"] == "random"
    assert rows[0]["advice"].startswith(f"collect {rows[0]['demos']} demos of metaworld/reach@1 in nominal")
    assert rows[0]["demos"] == 3 * rows[0]["failures"] and "the expert recovers 1/1 searched" in rows[0]["advice"]
    text = invoke("priorities", "--store", str(store), "--campaign", "mine").output
    assert "collect" in text and "random" in text
    bad = runner.invoke(app, ["priorities", "--store", str(store), "--campaign", "mine", "--policy", "nobody"])
    assert bad.exit_code == 2 and "valid: random" in bad.output


def test_ponr_picks_a_campaigns_failures_and_never_redoes_one(store):
    ls = json.loads(invoke("episodes", "ls", "--store", str(store), "--campaign", "mine", "--json").stdout)
    episodes = ls["episodes"] if isinstance(ls, dict) else ls
    first = json.loads(invoke("failures", "ponr", "--campaign", "mine", "--policy", "random", "--limit", "2",
                              "--store", str(store), "--json").stdout)
    assert len(first) == 2 and {f["key"] for f in first} <= {e["key"] for e in episodes}
    again = json.loads(invoke("failures", "ponr", "--campaign", "mine", "--limit", "2", "--store", str(store),
                              "--json").stdout)
    assert [(f["key"], f["t"], f.get("cached")) for f in again] == [(f["key"], f["t"], True) for f in first]
    for args, message in ((["--campaign", "mine", "--policy", "nobody"], "has no policy 'nobody'; valid: random"),
                          ([first[0]["key"], "--campaign", "mine"], "not both")):
        result = runner.invoke(app, ["failures", "ponr", *args, "--store", str(store)])
        assert result.exit_code == 2 and message in result.output, result.output


def test_regression_set_of_one_policys_failures(store):
    result = runner.invoke(app, ["regress", "add", "x", "--from", "mine", "--policy", "expert", "--store", str(store)])
    assert result.exit_code == 2 and "has no policy 'expert'; valid: random" in result.output
    added = json.loads(invoke("regress", "add", "rnd", "--from", "mine", "--policy", "random", "--holdout", "0",
                              "--store", str(store), "--json").stdout)
    assert added["mined"]["cases"] == 4 and added["heldout"] is None


SAFE_CAMPAIGN = """
name: safe-cells
seed: 2
episodes: 2
horizon: 40
envs_per_worker: 2
safety: true
replan_every: 2
tasks: [metaworld/reach@1]
policies:
  - random
  - {name: shaky, builtin: degraded-expert, params: {action_noise: 0.9, action_delay: 3}}
"""


def test_a_rerun_of_a_safety_cell_keeps_every_setting(tmp_path):
    """On b6a562f a rerun dropped safety and replan_every (another episode than the one mined) and a
    parametrised policy such as ``shaky`` could not be named."""
    (tmp_path / "c.yaml").write_text(SAFE_CAMPAIGN)
    store = str(tmp_path / "s")
    invoke("run", str(tmp_path / "c.yaml"), "--store", store, "--executor", "inline")
    invoke("regress", "add", "safe", "--from", "safe-cells", "--holdout", "0", "--store", store)
    from assay.failures.regression import load_set
    from assay.store import Store

    cases = load_set(tmp_path / "s", "safe").cases
    assert cases and all(c.run_settings == {"safety": True, "replan_every": 2, "pipeline": "lockstep"} for c in cases)
    for policy in ("random", "shaky"):
        [row] = json.loads(invoke("regress", "run", "safe", "--policy", policy, "--store", store, "--json").stdout)
        assert row["cases"] == len(cases)
    with Store(tmp_path / "s", create=False) as opened:
        original = {r.key for r in opened.catalog.episodes(campaign="safe-cells")}
        listed = {c.name for c in opened.catalog.campaigns()}
        names = sorted(n for n in listed if n.startswith("regress-safe-v1-"))
        reruns = [r for name in names for r in opened.catalog.episodes(campaign=name)]
    # one campaign per policy (named by it and its identity): results and the dashboard see them
    assert [n.rsplit("-", 1)[0] for n in names] == ["regress-safe-v1-random", "regress-safe-v1-shaky"]
    assert reruns and all(r.provenance["run"]["safety"] and r.provenance["run"]["replan_every"] == 2 for r in reruns)
    # the same policy with the same settings is the same episode: the mined failures themselves
    mined = {c.source_key for c in cases}
    assert mined <= {r.key for r in reruns} and mined <= original
    for bad, message in (("{name: x}", "--policy '{name: x}' is not valid"), ("nosuch", "unknown builtin 'nosuch'")):
        result = runner.invoke(app, ["regress", "run", "safe", "--policy", bad, "--store", store])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
        assert "shaky" in result.output  # the campaign's own policies are listed as valid


def test_a_backend_without_events_says_so_in_one_line_instead_of_uncategorized(tmp_path):
    """Gymnasium records no per-step events: its failures are named as not categorized, with the reason."""
    (tmp_path / "g.yaml").write_text("name: g\nepisodes: 2\nhorizon: 5\ntasks: [gymnasium/Pendulum-v1]\n"
                                     "policies: [random]\n")
    invoke("run", str(tmp_path / "g.yaml"), "--store", str(tmp_path / "s"), "--executor", "inline")
    document = json.loads(invoke("failures", "mine", "--store", str(tmp_path / "s"), "--json").stdout)
    reason = "backend gymnasium records no per-step events, and categories are read from them"
    assert document["categories"] == {} and document["failures"] == 2
    assert document["not_categorized"] == [{"backend": "gymnasium", "failures": 2,
                                           "reason": reason + " (Meta-World and LIBERO record them)"}]
    text = invoke("failures", "mine", "--store", str(tmp_path / "s")).stdout
    assert f"2 failures not categorized: {reason}" in " ".join(text.split()) and "uncategorized" not in text
