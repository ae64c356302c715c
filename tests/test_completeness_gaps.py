"""Issue 36, the gaps an audit found after tests/test_completeness.py: golden cases, no simulator.

* ``leaderboard --model`` counts a planned task no policy reached (it used to drop out of the count, and the
  board said complete) and refuses it unless ``--allow-partial``.
* An adaptive campaign killed after round 1 reports its full plan (each round used to save its own batch as the
  campaign's plan: earlier cells 0/0, progress past 100%).
* ``correlate --campaign`` (``--record`` too), ``stability`` and ``estimate-real`` say how complete the campaign
  is and refuse one with a cell that has no episode, unless ``--allow-partial``.
* A campaign that plans no nominal variant is pooled, and the report's sections, the CLI and the dashboard say
  so under one label; the dashboard's failures and safety JSON name their scope.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from assay.cli.app import app
from assay.metrics import RateEntry
from assay.metrics.adaptive import judge_for
from assay.report import gather, sections
from assay.run import EpisodeRecorder, prepare_campaign, run_campaign
from assay.server import ServerConfig, create_app
from assay.spec import campaign_from_data
from assay.store import Outcome, Store, provenance
from tests.record_store import fake_store
from tests.stats_fixtures import records

runner = CliRunner()


def _plan(policies: str, tasks: tuple[str, ...], planned: int, variants: tuple[str, ...] = ("nominal",)) -> dict:
    """A resolved campaign document planning ``planned`` episodes per policy × task × variant."""
    return {"campaign": {"name": "c", "episodes": planned},
            "policies": [{"name": p} for p in policies], "tasks": [{"id": t} for t in tasks],
            "variants": [{"name": v, "key": v} for v in variants],
            "cells": [{"policy": p, "task": t, "variant": v, "planned": planned}
                      for p in policies for t in tasks for v in variants]}


def _refused(*args: str) -> str:
    """The one-line error of a refused command (a note naming the campaign it chose may come before it)."""
    result = runner.invoke(app, list(args))
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _totals(document: dict) -> dict:
    return {k: document[k] for k in ("planned", "recorded", "complete")}


# -- 1. leaderboard --model: a planned task nobody reached ---------------------------------------------------------

def test_the_model_leaderboard_counts_a_planned_task_nobody_reached_and_refuses_it(tmp_path):
    # t2@1 is planned for both policies and has no episode at all (planned last, the campaign was stopped)
    table = {("a", "t1@1"): "SSSSSSSF", ("b", "t1@1"): "SSSFFFFF"}
    store = str(fake_store(tmp_path / "s", "c", records(table), _plan("ab", ("t1@1", "t2@1"), 8)))
    base = ["leaderboard", "--store", store, "--model", "irt", "--resamples", "100"]
    refused = _refused(*base)
    assert ("the model leaderboard of campaign c: refused, 1 planned task(s) have no episode yet (t2@1; 16 of 32 "
            "planned episodes recorded)") in refused and "--allow-partial" in refused
    assert "t2@1" in _refused(*base, "--tasks", "t2")
    doc = _json(*base, "--allow-partial")
    assert _totals(doc["completeness"]) == {"planned": 32, "recorded": 16, "complete": False}
    assert doc["completeness"]["missing_cells"] == ["a × t2@1 × nominal", "b × t2@1 × nominal"]
    assert {r["policy"]: (r["recorded"], r["planned"], r["complete"]) for r in doc["leaderboard"]["rows"]} == \
        {"a": (8, 16, False), "b": (8, 16, False)}
    assert doc["leaderboard"]["coverage"] == 1.0  # the model saw every cell of the task it ranks
    text = " ".join(runner.invoke(app, [*base, "--allow-partial"]).stdout.split())
    assert "incomplete: 16 of 32 planned episodes recorded; 2 cell(s) have none" in text
    only = _json(*base, "--tasks", "t1")  # the task that ran: complete, nothing refused
    assert _totals(only["completeness"]) == {"planned": 16, "recorded": 16, "complete": True}


# -- 2. an adaptive campaign killed after round 1 ------------------------------------------------------------------

ADAPTIVE = {"name": "adapt", "seed": 11, "tasks": ["metaworld/reach@1"], "horizon": 60,
            "policies": ["expert", "random"],
            "adaptive": {"goal": "compare", "delta": 0.3, "max_episodes": 16, "batch": 4}}


class Killed(Exception):
    pass


class Scripted:
    """An executor that runs no simulator (the expert succeeds, random fails) and is killed in round ``dies_in``."""

    def __init__(self, dies_in: int) -> None:
        self.dies_in, self.rounds = dies_in, 0

    def run(self, batches):
        self.rounds += 1  # the runner calls it once per round
        if self.rounds == self.dies_in:
            raise Killed
        for batch in batches:
            for job in batch:
                recorder = EpisodeRecorder(job)
                recorder.finish(Outcome.SUCCESS if job.policy.name == "expert" else Outcome.FAILURE)
                yield recorder.record(provenance(), None, None)


def test_an_adaptive_campaign_killed_after_round_one_reports_its_full_plan(tmp_path):
    spec = campaign_from_data(ADAPTIVE, "c.yaml")
    root = tmp_path / "s"
    with Store(root) as store, pytest.raises(Killed):
        run_campaign(prepare_campaign(spec), store, Scripted(dies_in=2), judge=judge_for(spec))
    with Store(root, create=False) as store:
        row = store.catalog.campaign("adapt")
        assert row is not None and len(store.catalog.episodes(campaign="adapt")) == 8  # round 1: 4 seeds × 2
    assert row.spec["jobs"] == 32  # the horizon, 16 per policy; round 1's batch alone was 8
    assert [(c["policy"], c["planned"]) for c in row.spec["cells"]] == [("expert", 16), ("random", 16)]
    doc = _json("results", "--store", str(root))
    assert _totals(doc["completeness"]) == {"planned": 32, "recorded": 8, "complete": False}
    assert doc["completeness"]["provisional"] is True  # its stopping rule has not finished
    assert {r["group"]["policy"]: (r["recorded"], r["planned"]) for r in doc["results"]} == \
        {"expert": (4, 16), "random": (4, 16)}
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    with TestClient(create_app(ServerConfig(root, "t", campaigns)), base_url="http://127.0.0.1") as client:
        (listed,) = client.get("/api/campaigns").json()
    assert (listed["episodes"], listed["jobs"]) == (8, 32)  # progress 25%, never past 100%


# -- 3. correlate, stability and estimate-real ----------------------------------------------------------------------

def _sim_store(root: Path, complete: bool) -> str:
    """Policies a, b, c planned 4 episodes each on t@1; c has none unless ``complete``."""
    table = {("a", "t@1"): "SSSF", ("b", "t@1"): "SFFF"} | ({("c", "t@1"): "FFFF"} if complete else {})
    return str(fake_store(root, "sim", records(table), _plan("abc", ("t@1",), 4)))


def test_correlate_and_stability_say_how_complete_the_campaign_is_and_refuse_an_empty_cell(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("task,policy,successes,trials\nt,a,9,10\nt,b,4,10\n")  # c: not tried on the robot
    store = _sim_store(tmp_path / "s", complete=False)
    correlate = ["correlate", "--real", str(real), "--campaign", "sim", "--store", store, "--resamples", "200"]
    refused = _refused(*correlate, "--record")
    assert refused.startswith("error: correlating real with sim (campaign sim, nominal only): refused, 1 of its 3 "
                              "cells have no episode yet (c × t@1 × nominal; 8 of 12 planned")
    assert not (Path(store) / "calibration.json").exists()  # nothing recorded from a refused campaign
    doc = _json(*correlate, "--allow-partial")
    assert doc["campaign"] == "sim" and doc["scope"]["label"] == "nominal only"
    assert _totals(doc["completeness"]) == {"planned": 12, "recorded": 8, "complete": False}
    assert doc["completeness"]["missing_cells"] == ["c × t@1 × nominal"]
    text = " ".join(runner.invoke(app, [*correlate, "--allow-partial"]).stdout.split())
    assert "campaign sim: incomplete: 8 of 12 planned episodes recorded; 1 cell(s) have none (c × t@1 × nominal)" \
        in text
    stability = ["stability", "sim", str(real), "--store", store, "--resamples", "200"]
    assert "ranking stability of sim (campaign sim, nominal only): refused, 1 of its 3 cells" in _refused(*stability)
    stable = _json(*stability, "--allow-partial")
    first, second = stable["sources"]
    assert first["source"] == "sim" and _totals(first["completeness"]) == \
        {"planned": 12, "recorded": 8, "complete": False}
    assert second == {"source": str(real), "campaign": None, "scope": None, "completeness": None}
    assert "sim (nominal only): incomplete: 8 of 12" in " ".join(
        runner.invoke(app, [*stability, "--allow-partial"]).stdout.split())
    whole = _sim_store(tmp_path / "whole", complete=True)
    done = _json("correlate", "--real", str(real), "--campaign", "sim", "--store", whole, "--resamples", "200")
    assert _totals(done["completeness"]) == {"planned": 12, "recorded": 12, "complete": True}
    from_csv = _json("correlate", "--real", str(real), "--sim", str(real), "--resamples", "200")
    assert (from_csv["campaign"], from_csv["scope"], from_csv["completeness"]) == (None, None, None)


def test_estimate_real_says_how_complete_the_campaign_is_and_refuses_an_empty_cell(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("task,policy,seed,success\n" + "".join(f"t,a,{s},{int(s < 3)}\n" for s in range(4)))
    store = _sim_store(tmp_path / "s", complete=False)
    base = ["estimate-real", "--real", str(real), "--campaign", "sim", "--store", store]
    assert "estimating real success (campaign sim, nominal only): refused, 1 of its 3 cells" in _refused(*base)
    doc = _json(*base, "--allow-partial")
    assert doc["campaign"] == "sim" and doc["scope"]["label"] == "nominal only"
    assert _totals(doc["completeness"]) == {"planned": 12, "recorded": 8, "complete": False}
    assert doc["cells"][0]["counts"]["sim_episodes"] == 4
    text = " ".join(runner.invoke(app, [*base, "--allow-partial"]).stdout.split())
    assert "campaign sim (nominal only): incomplete: 8 of 12 planned episodes recorded" in text
    whole = _json("estimate-real", "--real", str(real), "--campaign", "sim", "--store",
                  _sim_store(tmp_path / "whole", complete=True))
    assert whole["completeness"]["complete"] is True and whole["cells"] == doc["cells"]


# -- 5. one label for a pooled scope, everywhere -------------------------------------------------------------------

POOLED = "pooled over variants noisy, dark"


def test_a_campaign_without_nominal_is_pooled_under_one_label_in_the_cli_report_and_dashboard(tmp_path):
    table = {("a", "t@1"): "SSSS", ("b", "t@1"): "SFFF"}
    both = records(table, variant="noisy") + records({("a", "t@1"): "SSSF", ("b", "t@1"): "FFFF"}, variant="dark")
    root = fake_store(tmp_path / "s", "c", both, _plan("ab", ("t@1",), 4, ("noisy", "dark")))
    real = [RateEntry("t", "a", 0.9, 9, 10), RateEntry("t", "b", 0.2, 2, 10)]
    with Store(root, create=False) as store:
        data = gather(store, "c", n_resamples=200, real=real)
    assert data.scoring is not None and data.scoring.scope.label == POOLED
    # each section's opening paragraph (the words; the real-to-sim figure's axis is figures.py's)
    real_to_sim = str(sections.real_to_sim(data)).split("</p>")[0]
    checkpoints = str(sections.checkpoints(data)).split("</p>")[0]
    assert f"sim = this campaign's episodes, {POOLED}." in real_to_sim and "nominal" not in real_to_sim
    assert f"on the same seeds, paired within each variant ({POOLED})" in checkpoints
    assert "nominal" not in checkpoints
    assert _json("results", "--store", str(root))["scope"]["label"] == POOLED
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    with TestClient(create_app(ServerConfig(root, "t", campaigns)), base_url="http://127.0.0.1") as client:
        board = client.get("/api/campaigns/c/leaderboard", params={"resamples": 200}).json()
        failures = client.get("/api/campaigns/c/failures").json()
        campaign = client.get("/api/campaigns/c").json()
        extras = client.get("/api/campaigns/c/extras").json()
    assert board["scope"]["label"] == POOLED
    assert failures["scope"]["label"] == POOLED  # by_policy pools every variant; each episode names its own
    assert failures["by_policy"] == {"a": {"failure": 1}, "b": {"failure": 7}}
    assert extras["safety_scope"]["label"] == "each variant separately (noisy, dark)"
    assert extras["safety_scope"] == campaign["rates_scope"]


def test_retention_columns_name_their_interval_method(tmp_path):
    nominal = records({("a", "t@1"): "SSSS"})
    noisy = records({("a", "t@1"): "SSFF"}, variant="noisy")
    root = fake_store(tmp_path / "s", "c", nominal + noisy, _plan("a", ("t@1",), 4, ("nominal", "noisy")))
    shown = runner.invoke(app, ["results", "--store", str(root), "--profile"], env={"COLUMNS": "240"})
    assert shown.exit_code == 0, shown.output
    assert "95% CI (MOVER-R)" in shown.stdout and "95% CI (mid-p)" in shown.stdout  # retention; the leaderboard
    assert not re.search(r"95% CI(?! \()", shown.stdout)  # no interval column without its method
