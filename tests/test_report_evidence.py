"""The report's evidence sections, each checked against what the command that produced it stored.

The session store (tests/report_support.py) ran, for real: a tiny campaign, ``failures mine``,
a regression set of random's failures rerun with the expert, one point of no return and
``openloop``. Expected values here are recomputed from those files and from ``assay.metrics``.
"""

from __future__ import annotations

import json
import re
import shutil
from html import unescape
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import StoreError
from assay.failures import statuses
from assay.failures.ponr import load_ponrs
from assay.metrics import (
    RateEntry,
    compare,
    correlate,
    entries_from_records,
    load_openloop,
    load_real_results,
    outcome_grid,
    prob_greater,
    read_results_csv,
    save_real_results,
)
from assay.report import gather
from assay.report.evidence import FailureFacts, pick_gallery
from assay.store import EpisodeRecord, Outcome, Store
from tests.report_support import REGRESSION_SET, report_store  # noqa: F401  (session fixture)

runner = CliRunner()


def _section(html: str, name: str) -> str:
    return re.search(rf"<section id='{name}'>(.*?)</section>", html, re.S).group(1)


def _report(store: Path, out: Path, *args: str) -> str:
    result = runner.invoke(app, ["report", "tiny", "--store", str(store), "-o", str(out), "--link-video", *args])
    assert result.exit_code == 0, result.output
    return out.read_text()


@pytest.fixture
def own_store(report_store: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A copy of the session store for tests that write into it."""
    return Path(shutil.copytree(report_store, tmp_path / "store"))


def _real_csv(path: Path) -> Path:
    # input data for the test: the "real" robot did slightly worse than sim on reach
    path.write_text("task,policy,successes,trials\nmetaworld/reach,expert,8,10\nmetaworld/reach,random,1,10\n")
    return path


@pytest.mark.sim
def test_real_to_sim_section_matches_correlate(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    real = _real_csv(tmp_path / "real.csv")
    html = _report(report_store, tmp_path / "r.html", "--real", str(real))
    with Store(report_store, create=False) as store:
        records = store.catalog.episodes(campaign="tiny")
        data = gather(store, "tiny", real=[RateEntry("metaworld/reach", "expert", 0.8, 8, 10),
                                           RateEntry("metaworld/reach", "random", 0.1, 1, 10)])
    nominal = [r for r in records if r.variant_name == "nominal"]
    expected = correlate([RateEntry("metaworld/reach", "expert", 0.8, 8, 10), RateEntry("metaworld/reach", "random", 0.1, 1, 10)],
                         entries_from_records(nominal, "campaign"), ("real", "sim"), n_resamples=2000)
    [task] = data.real_to_sim.tasks
    assert task.other_task == "metaworld/reach@1" and task.policies == ("expert", "random")
    sim = {e.policy: e.rate for e in entries_from_records(nominal, "campaign")}
    assert task.reference_rates == (0.8, 0.1) and task.other_rates == (sim["expert"], sim["random"])
    assert task.stats["mmrv"].value == expected.tasks[0].stats["mmrv"].value
    section = _section(html, "real-to-sim")
    assert "2 of 2 real (task, policy) results (from real.csv) match" in section and "<svg" in section
    mmrv = expected.tasks[0].stats["mmrv"].value
    assert f"<td class=\"num\">{mmrv:.3f}</td>" in section


@pytest.mark.sim
def test_recorded_real_results_reach_the_report(own_store: Path, tmp_path: Path) -> None:
    before = _section(_report(own_store, tmp_path / "a.html"), "real-to-sim")
    assert "no real-world results" in before and "<svg" not in before
    real = _real_csv(tmp_path / "real.csv")
    result = runner.invoke(app, ["correlate", "--real", str(real), "--campaign", "tiny", "--store", str(own_store),
                                 "--record"])
    assert result.exit_code == 0, result.output
    assert [(e.task, e.policy, e.successes, e.trials) for e in load_real_results(own_store)] == \
        [("metaworld/reach", "expert", 8, 10), ("metaworld/reach", "random", 1, 10)]
    after = _section(_report(own_store, tmp_path / "b.html"), "real-to-sim")
    assert "2 of 2 real" in after and "<svg" in after
    # real results for cells this campaign never ran: said so, nothing plotted
    other = tmp_path / "other.csv"
    other.write_text("task,policy,successes,trials\nmetaworld/reach,some-robot-policy,3,10\n")
    unmatched = _section(_report(own_store, tmp_path / "c.html", "--real", str(other)), "real-to-sim")
    assert "share no (task, policy) cell" in unmatched and "<svg" not in unmatched


@pytest.mark.sim
def test_a_campaign_as_a_results_csv_round_trips_through_correlate(own_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "proxy.csv"
    result = runner.invoke(app, ["results", "--store", str(own_store), "--campaign", "tiny", "--variant", "all",
                                 "--csv", str(out)])
    assert result.exit_code == 2 and "pick one with --variant" in result.output and not out.exists()
    result = runner.invoke(app, ["results", "--store", str(own_store), "--campaign", "tiny", "--variant", "nope"])
    assert result.exit_code == 2 and "valid: all, nominal, action.noise=0.5" in result.output
    result = runner.invoke(app, ["results", "--store", str(own_store), "--campaign", "tiny", "--csv", str(out)])
    assert result.exit_code == 0, result.output  # the default scope is one variant: nominal
    with Store(own_store, create=False) as store:
        nominal = [r for r in store.catalog.episodes(campaign="tiny") if r.variant_name == "nominal"]
    written = read_results_csv(out)
    assert [(e.task, e.policy, e.successes, e.trials) for e in written] == \
        [(e.task, e.policy, e.successes, e.trials) for e in entries_from_records(nominal, "x")]
    result = runner.invoke(app, ["correlate", "--real", str(out), "--campaign", "tiny:nominal", "--store",
                                 str(own_store), "--record", "--json"])
    assert result.exit_code == 0, result.output
    [task] = json.loads(result.stdout)["tasks"]
    assert task["stats"]["mmrv"]["value"] == 0.0  # the same episodes on both sides: the same order
    assert task["reference_rates"] == task["other_rates"]
    section = _section(_report(own_store, tmp_path / "r.html"), "real-to-sim")
    assert "(from proxy.csv)" in section and "<svg" in section


def test_saved_real_results_merge_by_cell(tmp_path: Path) -> None:
    save_real_results(tmp_path, [RateEntry("t", "a", 0.5, 1, 2, 2, "x.csv"), RateEntry("t", "b", 0.0, 0, 2, 3, "x.csv")])
    save_real_results(tmp_path, [RateEntry("t", "a", 1.0, 2, 2, 2, "y.csv")])
    assert [(e.policy, e.rate, e.source) for e in load_real_results(tmp_path)] == [("a", 1.0, "y.csv"), ("b", 0.0, "x.csv")]
    data = json.loads((tmp_path / "calibration.json").read_text())
    data["real_results"][0].pop("rate")
    (tmp_path / "calibration.json").write_text(json.dumps(data))
    with pytest.raises(StoreError, match="malformed real_results entry"):
        load_real_results(tmp_path)


@pytest.mark.sim
def test_openloop_section_shows_what_assay_openloop_saved(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    saved = json.loads((report_store / "openloop" / "tiny.json").read_text())
    section = _section(_report(report_store, tmp_path / "r.html"), "openloop")
    for row in saved["openloop"]:
        assert f"<td class=\"num\">{row['mse']:.4g}</td>" in section
    [agreement] = saved["agreement"]
    assert agreement["policies"] == ["expert", "random"]  # the expert's own actions: MSE 0, random's are not
    assert "<svg" in section and "<b>expert</b>'s recorded observations" in section
    with Store(report_store, create=False) as store:
        loaded = load_openloop(store, "tiny")
        assert load_openloop(store, "no-such-campaign") is None
    assert {r.policy: r.mse for r in loaded["rows"]} == {r["policy"]: r["mse"] for r in saved["openloop"]}


@pytest.mark.sim
def test_a_damaged_openloop_file_is_one_clear_error(own_store: Path, tmp_path: Path) -> None:
    (own_store / "openloop" / "tiny.json").write_text("{not json")
    result = runner.invoke(app, ["report", "tiny", "--store", str(own_store), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "rerun `assay openloop --campaign tiny`" in result.output
    assert not (tmp_path / "r.html").exists()


@pytest.mark.sim
def test_checkpoint_comparison_is_the_paired_compare(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    with Store(report_store, create=False) as store:
        records = store.catalog.episodes(campaign="tiny")
        data = gather(store, "tiny", n_resamples=500)
        flipped = gather(store, "tiny", n_resamples=500, baseline="random")
    grid = outcome_grid([r for r in records if r.variant_name == "nominal"])
    assert data.baseline == "expert"  # the campaign's first policy
    assert [c.to_dict() for c in data.comparisons] == [c.to_dict() for c in compare(grid, "expert", ["random"],
                                                                                   n_resamples=500)]
    assert flipped.baseline == "random" and {c.b for c in flipped.comparisons} == {"expert"}
    section = _section(_report(report_store, tmp_path / "r.html", "--baseline", "random"), "checkpoints")
    assert "against <b>random</b>" in section and "-0.00" not in section
    # P(better): the exact Beta-posterior probability per task, from the nominal counts
    for task in grid.tasks:
        expected = prob_greater(*task.counts("random"), *task.counts("expert"))
        assert data.posteriors["random"][task.task] == expected
        assert flipped.posteriors["expert"][task.task] == prob_greater(*task.counts("expert"), *task.counts("random"))
    assert 0.0 <= data.posteriors["random"]["suite"] <= 1.0 and set(data.posteriors) == {"random"}
    assert "P(better)" in section and f"<td class=\"num\">{flipped.posteriors['expert']['suite']:.3f}</td>" in section
    result = runner.invoke(app, ["report", "tiny", "--store", str(report_store), "-o", str(tmp_path / "x.html"),
                                 "--baseline", "nobody"])
    assert result.exit_code == 2 and "baseline 'nobody' is not a policy" in result.output
    assert "valid: expert, random" in result.output


@pytest.mark.sim
def test_regression_status_is_what_the_reruns_recorded(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    [run] = [json.loads(p.read_text()) for p in (report_store / "regression" / REGRESSION_SET / "runs").glob("*.json")]
    [status] = statuses(report_store, source="tiny")
    assert (status.name, status.split, status.version) == (REGRESSION_SET, "mined", 1)
    assert status.latest["passed"] == sum(run["passed"].values()) and status.latest["cases"] == len(run["passed"])
    assert status.latest["diff"] == run["diff"] and status.latest["policy"] == "expert"
    assert statuses(report_store, source="another-campaign") == []
    section = _section(_report(report_store, tmp_path / "r.html"), "regression")
    assert f"{status.latest['passed']}/{status.latest['cases']} pass</span> with expert" in section
    assert f"fixed {run['diff']['fixed']}, still failing {run['diff']['still_failing']}" in section


@pytest.mark.sim
def test_gallery_leads_with_the_point_of_no_return(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    [ponr] = load_ponrs(report_store).values()
    html = _report(report_store, tmp_path / "r.html")
    gallery = _section(html, "gallery")
    first_card = gallery.split("<div class='card'>")[1]
    assert ponr.key in first_card
    assert ponr.verified is True and unescape(ponr.describe()) in unescape(first_card)
    if ponr.point is None:  # random's timeouts: the expert still succeeds from the last state
        assert ponr.lost is False and "never lost" in first_card and "class=ponr" not in first_card
    else:
        assert f"step {ponr.t} of {ponr.steps}" in first_card
        assert f"PONR step {ponr.t}</figcaption>" in first_card and "class=ponr" in first_card
    assert "attributed to <b>" in first_card and "category <b>" in first_card
    assert first_card.count("<svg") == 1  # the distance trace
    others = gallery.split("<div class='card'>")[2:]
    assert others and all("no point of no return yet" in unescape(card) for card in others)


def _failure(key: str, policy: str) -> EpisodeRecord:
    return EpisodeRecord(key=key, campaign="c", task_id="t", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={"perturbations": []}, policy_name=policy, policy_version="v",
                         policy_spec={}, seed=0, episode_index=0, instruction="", outcome=Outcome.TIMEOUT, reason="",
                         steps=10, total_return=0.0, success_step=None, trajectory_hash="t")


def test_gallery_picks_analysed_failures_then_one_per_policy_and_category() -> None:
    failed = [_failure(f"k{i}", policy) for i, policy in enumerate(["a", "a", "a", "b", "b"])]
    categories = ["grasp_failure", "grasp_failure", "drop", "grasp_failure", "grasp_failure"]
    facts = {r.key: FailureFacts(c, None, None) for r, c in zip(failed, categories, strict=True)}
    facts["k4"] = FailureFacts("grasp_failure", None, object())  # type: ignore[arg-type]  (has a PONR)
    assert [r.key for r in pick_gallery(failed, facts, 3)] == ["k4", "k2", "k0"]
    assert [r.key for r in pick_gallery(failed, facts, 10)] == ["k4", "k2", "k0", "k3", "k1"]
