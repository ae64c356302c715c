"""Every result says how complete it is, and names its variant scope (issue 36).

Golden cases: a campaign killed at a known point (after its 6th episode, in plan order) reports exactly
its recorded/planned counts per cell and per campaign in ``results``, ``compare``, ``leaderboard``, the
report and the dashboard; a ranking over cells with no episode is refused unless ``--allow-partial``;
complete, the CLI, the report's data and the dashboard's JSON agree on the same scope and numbers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.metrics import (
    campaign_completeness,
    completeness,
    missing_rows,
    planned_cells,
    rate_table,
    variant_scope,
)
from assay.report import gather
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.server import ServerConfig, create_app
from assay.spec import campaign_from_data
from assay.store import Store
from tests.stats_fixtures import records as fake_records

TASKS = ["metaworld/reach@1", "metaworld/button-press-topdown@1"]
CAMPAIGN = {"name": "killed", "seed": 0, "episodes": 2, "envs_per_worker": 1, "horizon": 40, "tasks": TASKS,
            "policies": ["expert", "random"], "variants": ["nominal", {"action.noise": 0.5}]}
NOISE = "action.noise=0.5"
KILLED_AFTER = 6  # plan order: expert × reach × (nominal, noise), expert × button × nominal, then the kill


# -- the rules, without a simulator -------------------------------------------------------------------------------

def test_the_default_scope_is_nominal_when_planned_else_all_and_always_named():
    assert variant_scope(["nominal", NOISE]).label == "nominal only"
    assert variant_scope(["nominal", NOISE], "all").label == f"pooled over variants nominal, {NOISE}"
    assert variant_scope(["nominal", NOISE], NOISE).label == f"variant {NOISE} only"
    assert variant_scope([NOISE, "light"]).label == f"pooled over variants {NOISE}, light"  # no nominal planned
    assert variant_scope([NOISE]).label == f"variant {NOISE} only"
    assert variant_scope(["nominal", NOISE], separately=True).label == f"each variant separately (nominal, {NOISE})"
    with pytest.raises(AssayError, match=r"no variant 'x'; valid: all, nominal, action.noise=0.5"):
        variant_scope(["nominal", NOISE], "x")


def test_planned_cells_come_from_the_plan_or_the_full_grid_and_adaptive_stops():
    listed = {"cells": [{"policy": "a", "task": "t", "variant": "nominal", "planned": 3}], "campaign": {}}
    assert planned_cells(listed) == ({("a", "t", "nominal"): 3}, False)
    grid = {"campaign": {"episodes": 4}, "policies": [{"name": "a"}, {"name": "b"}], "tasks": [{"id": "t"}],
            "variants": [{"name": "nominal", "key": "k0"}, {"name": "v", "key": "k1"}]}
    assert planned_cells(grid)[0] == {(p, "t", v): 4 for p in "ab" for v in ("nominal", "v")}
    adaptive = {**grid, "campaign": {"episodes": 40, "adaptive": {"max_episodes": 40}}}
    assert planned_cells(adaptive)[1] is True  # still running: planned is the horizon, never complete
    state = {"cells": [{"policy": p, "task": "t", "variant": k, "episodes": 8, "reason": "decided"}
                       for p in "ab" for k in ("k0", "k1")]}
    planned, provisional = planned_cells(adaptive, state)
    assert not provisional and set(planned.values()) == {8}


def test_completeness_counts_cells_names_the_empty_ones_and_refuses_a_ranking_over_them():
    records = fake_records({("a", "t1"): "SS", ("b", "t1"): "F"})
    planned = {(p, t, "nominal"): 2 for p in "ab" for t in ("t1", "t2")}
    found = campaign_completeness({"cells": [{"policy": p, "task": t, "variant": v, "planned": n}
                                             for (p, t, v), n in planned.items()]}, records)
    assert found.summary() == {"planned": 8, "recorded": 3, "complete": False}
    assert [c.label for c in found.missing] == ["a × t2 × nominal", "b × t2 × nominal"]
    assert found.of({"policy": "b", "task": "t1"}).summary() == {"planned": 2, "recorded": 1, "complete": False}
    assert found.select(tasks=["t1"]).missing == ()
    assert found.describe() == ("incomplete: 3 of 8 planned episodes recorded; 2 cell(s) have none "
                                "(a × t2 × nominal, b × t2 × nominal); 1 partial")
    with pytest.raises(AssayError, match=r"^the leaderboard: refused, 2 of its 4 cells have no episode yet "
                                         r"\(a × t2 × nominal, b × t2 × nominal; 3 of 8 planned .*--allow-partial$"):
        found.refuse_missing("the leaderboard", allow_partial=False)
    found.refuse_missing("the leaderboard", allow_partial=True)
    rows = rate_table(records)
    assert [(r.group, r.episodes, r.rate) for r in missing_rows(found, ["policy", "task"], rows)] == [
        ({"policy": "a", "task": "t2"}, 0, None), ({"policy": "b", "task": "t2"}, 0, None)]
    done = completeness({("a", "t", "nominal"): 1}, {("a", "t", "nominal"): 1})
    assert done.complete and done.describe() == "complete: 1 of 1 planned episodes recorded"


# -- a real campaign killed at a known point ----------------------------------------------------------------------

class Killed(Exception):
    pass


class StopAfter:
    """An executor killed after ``n`` episodes (the driver has written the rows of each finished batch)."""

    def __init__(self, inner, n: int) -> None:
        self.inner, self.n = inner, n

    def run(self, batches):
        for count, record in enumerate(self.inner.run(batches), start=1):
            yield record
            if count == self.n:
                raise Killed


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    """(the campaign killed after 6 episodes, the same campaign resumed to completion)."""
    base = tmp_path_factory.mktemp("completeness")
    killed, complete = base / "killed", base / "complete"
    plan = prepare_campaign(campaign_from_data(CAMPAIGN))
    with Store(killed) as store, pytest.raises(Killed):
        run_campaign(plan, store, StopAfter(InlineExecutor(killed), KILLED_AFTER))
    shutil.copytree(killed, complete)
    with Store(complete) as store:
        run_campaign(plan, store, InlineExecutor(complete))
    return killed, complete


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _json(*args: str) -> dict:
    result = _cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.sim
def test_a_killed_campaign_reports_exactly_what_it_recorded_and_refuses_an_unflagged_ranking(stores):
    killed, _ = stores
    document = _json("results", "--store", str(killed))
    assert document["scope"]["label"] == "nominal only"
    assert {k: document["completeness"][k] for k in ("planned", "recorded", "complete")} == \
        {"planned": 8, "recorded": 4, "complete": False}
    assert document["completeness"]["campaign"] == {"planned": 16, "recorded": KILLED_AFTER, "complete": False}
    assert document["completeness"]["missing_cells"] == [f"random × {t} × nominal" for t in sorted(TASKS)]
    rows = {(r["group"]["policy"], r["group"]["task"]): (r["recorded"], r["planned"], r["complete"])
            for r in document["results"]}
    assert rows == {("expert", t): (2, 2, True) for t in TASKS} | {("random", t): (0, 2, False) for t in TASKS}
    assert document["leaderboard"] is None and "refused, 2 of its 4 cells" in document["leaderboard_withheld"]
    by_variant = _json("results", "--store", str(killed), "--by", "policy,task,variant")
    assert by_variant["scope"]["label"] == f"each variant separately (nominal, {NOISE})"
    assert by_variant["completeness"]["recorded"] == KILLED_AFTER and len(by_variant["results"]) == 8
    for command in (["leaderboard"], ["compare", "expert", "random"]):
        refused = _cli(*command, "--store", str(killed), "--campaign", "killed")
        assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.output
        assert "refused, 2 of its 4 cells have no episode yet" in refused.stderr
        assert "--allow-partial" in refused.stderr
    partial = _json("leaderboard", "--store", str(killed), "--allow-partial")
    assert partial["completeness"]["complete"] is False and partial["completeness"]["recorded"] == 4
    assert [(r["policy"], r["recorded"], r["planned"]) for r in partial["leaderboard"]["rows"]] == [("expert", 4, 4)]
    # the noisy variant alone: the expert ran reach only, so button-press has no episode yet either
    noisy = _cli("leaderboard", "--store", str(killed), "--variant", NOISE)
    assert noisy.exit_code == 2 and f"expert × metaworld/button-press-topdown@1 × {NOISE}" in noisy.stderr
    text = _cli("results", "--store", str(killed)).stdout.replace("\n", " ")
    assert "campaign killed (nominal only)" in text and "incomplete: 4 of 8 planned episodes recorded" in text
    gate = _cli("results", "--store", str(killed), "--fail-under", "0")  # a CI gate fails on a planned empty cell
    assert gate.exit_code == 1 and "policy random, task metaworld/reach@1: no episode recorded yet" in gate.stderr


@pytest.mark.sim
def test_the_report_and_the_dashboard_mark_the_killed_campaign_and_withhold_its_ranking(stores, tmp_path):
    killed, _ = stores
    with Store(killed, create=False) as store:
        data = gather(store, "killed", n_resamples=200)
        allowed = gather(store, "killed", n_resamples=200, allow_partial=True)
    assert data.scoring is not None and data.leaderboard is None and data.comparisons == ()
    assert "refused, 2 of its 4 cells" in data.scoring.withheld
    assert data.scoring.campaign.summary() == {"planned": 16, "recorded": KILLED_AFTER, "complete": False}
    assert allowed.leaderboard is not None and allowed.scoring is not None and not allowed.scoring.withheld
    out = tmp_path / "killed.html"
    assert _cli("report", "killed", "--store", str(killed), "-o", str(out)).exit_code == 0
    html = out.read_text()
    assert "id='incomplete'>This campaign is incomplete: 6 of 16 planned episodes recorded" in html
    assert "id='leaderboard-withheld'" in html and "Leaderboard (nominal only)" in html
    # the checkpoint comparison is withheld for the same reason, not "one policy only"; sections name their scope
    assert "id='checkpoints-withheld'>the leaderboard and the checkpoint comparison: refused" in html
    assert "One policy only" not in html
    for title in ("Checkpoint comparison (nominal only)", "Real-to-sim agreement (nominal only)",
                  "Robustness profile (each variant vs nominal)", "Failure breakdown (every variant)"):
        assert f"<h2>{title}</h2>" in html, title
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    with TestClient(create_app(ServerConfig(killed, "t", campaigns)), base_url="http://127.0.0.1") as client:
        board = client.get("/api/campaigns/killed/leaderboard", params={"resamples": 200}).json()
        assert board["rows"] == [] and "allow_partial=true" in board["withheld"]
        assert board["completeness"]["recorded"] == 4 and board["scope"]["label"] == "nominal only"
        shown = client.get("/api/campaigns/killed/leaderboard", params={"resamples": 200, "allow_partial": True})
        assert [r["policy"] for r in shown.json()["rows"]] == ["expert"]
        campaign = client.get("/api/campaigns/killed").json()
        assert campaign["interval"] == "mid-p 95%"
        assert campaign["completeness"]["recorded"] == KILLED_AFTER and len(campaign["rates"]) == 8
        assert sum(r["recorded"] for r in campaign["rates"]) == KILLED_AFTER


@pytest.mark.sim
def test_complete_the_cli_the_report_and_the_dashboard_agree_on_scope_and_numbers(stores, tmp_path):
    _, complete = stores
    results = _json("results", "--store", str(complete))
    board = _json("leaderboard", "--store", str(complete))
    assert results["completeness"]["complete"] is True and board["completeness"]["complete"] is True
    with Store(complete, create=False) as store:
        data = gather(store, "killed")
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    with TestClient(create_app(ServerConfig(complete, "t", campaigns)), base_url="http://127.0.0.1") as client:
        dashboard = client.get("/api/campaigns/killed/leaderboard").json()
    assert data.scoring is not None and data.leaderboard is not None
    labels = {results["scope"]["label"], board["scope"]["label"], data.scoring.scope.label, dashboard["scope"]["label"]}
    assert labels == {"nominal only"}
    scores = [{r["policy"]: (r["score"], r["ci_low"], r["ci_high"]) for r in rows} for rows in (
        results["leaderboard"]["rows"], board["leaderboard"]["rows"], dashboard["rows"])]
    scores.append({r.policy: (r.score, r.ci_low, r.ci_high) for r in data.leaderboard.rows})
    assert all(s == scores[0] for s in scores) and set(scores[0]) == {"expert", "random"}
    rates = {(r["group"]["policy"], r["group"]["task"]): (r["successes"], r["scored"]) for r in results["results"]}
    assert rates == {(r.group["policy"], r.group["task"]): (r.successes, r.scored) for r in data.rates}
    assert all(n == 2 for _, n in rates.values())  # nominal only: 2 of the 4 episodes of each (policy, task)
    pooled = _json("results", "--store", str(complete), "--variant", "all")
    assert pooled["scope"]["label"] == f"pooled over variants nominal, {NOISE}"
    assert all(r["scored"] == 4 and r["planned"] == 4 for r in pooled["results"])
