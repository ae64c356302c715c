"""pass^k: the unbiased C(c,k)/C(n,k) estimate, its interval, per cell and per policy, and `results --pass-k`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.metrics import leaderboard, outcome_grid, success_interval
from assay.metrics.passk import pass_k, pass_k_table, policy_pass_k
from tests.record_store import fake_store
from tests.stats_fixtures import records


def test_golden_five_of_eight_at_k_three_is_ten_fifty_sixths():
    cell = pass_k(5, 8, 3)
    assert (cell.numerator, cell.denominator, cell.fraction) == (10, 56, "10/56")
    assert cell.estimate == pytest.approx(10 / 56)
    midp = success_interval(5, 8)
    assert (cell.ci_low, cell.ci_high) == pytest.approx((midp.low ** 3, midp.high ** 3))


def test_edges_zero_successes_all_successes_n_one_and_fewer_trials_than_k():
    zero = pass_k(0, 6, 2)
    assert zero.estimate == 0.0 and zero.ci_low == 0.0 and zero.ci_high > 0.0
    full = pass_k(6, 6, 2)
    assert full.estimate == 1.0 and full.ci_high == 1.0 and full.ci_low < 1.0  # never a point at 6 of 6
    one = pass_k(1, 1, 1)
    assert one.estimate == 1.0 and (one.ci_low, one.ci_high) == pytest.approx((0.05, 1.0))  # mid-p 1 of 1: [α, 1]
    short = pass_k(2, 2, 3)  # 2 of 2 cannot say whether 3 in a row succeed: undefined, but bounded
    assert short.estimate is None and short.fraction == "-" and "at least k = 3" in (short.reason or "")
    assert short.ci_low == pytest.approx(success_interval(2, 2).low ** 3) and short.ci_high == 1.0
    nothing = pass_k(0, 0, 1)
    assert nothing.estimate is None and nothing.ci_low is None and "no scored episode" in (nothing.reason or "")


def test_k_one_is_the_success_rate_and_its_interval():
    for c, n in [(0, 5), (3, 7), (9, 9)]:
        cell, rate = pass_k(c, n, 1), success_interval(c, n)
        assert cell.estimate == c / n and (cell.ci_low, cell.ci_high) == (rate.low, rate.high)


@pytest.mark.parametrize(("n", "k", "p"), [(8, 3, 0.6), (10, 5, 0.9), (5, 5, 0.3), (12, 2, 0.05)])
def test_estimate_is_exactly_unbiased_for_p_to_the_k(n, k, p):
    mean = sum(binom.pmf(c, n, p) * math.comb(c, k) / math.comb(n, k) for c in range(n + 1))
    assert mean == pytest.approx(p ** k, rel=1e-12)


def test_interval_covers_p_to_the_k_exactly_as_often_as_the_rate_interval_covers_p():
    n, k = 10, 3
    for p in (0.2, 0.55, 0.9, 0.97):
        rate_cover = sum(binom.pmf(c, n, p) for c in range(n + 1)
                         if success_interval(c, n).low <= p <= success_interval(c, n).high)
        passk_cover = sum(binom.pmf(c, n, p) for c in range(n + 1)
                          if pass_k(c, n, k).ci_low <= p ** k <= pass_k(c, n, k).ci_high)
        assert passk_cover == pytest.approx(rate_cover, abs=1e-12) and passk_cover >= 0.93


def test_bad_k_and_counts_are_one_line_errors():
    for k in (0, -1, 1.5, True):
        with pytest.raises(AssayError, match="pass\\^k needs k a whole number"):
            pass_k(1, 2, k)
    with pytest.raises(AssayError, match="0 <= successes <= trials"):
        pass_k(3, 2, 1)


def test_policy_pass_k_is_the_mean_over_tasks_and_k_one_is_the_suite_score():
    row = policy_pass_k("a", [(5, 8), (8, 8)], 3)
    assert row.estimate == pytest.approx((10 / 56 + 1.0) / 2) and row.ci_low < row.estimate < row.ci_high
    assert row == policy_pass_k("a", [(5, 8), (8, 8)], 3)  # seeded draws: the same interval twice
    table = {("a", "t1@1"): "S" * 8, ("a", "t2@1"): "S" * 8}
    board = leaderboard(outcome_grid(records(table)))
    suite = policy_pass_k("a", [(8, 8), (8, 8)], 1)
    assert (suite.estimate, suite.ci_low, suite.ci_high) == (board.rows[0].score, board.rows[0].ci_low,
                                                              board.rows[0].ci_high)
    short = policy_pass_k("a", [(5, 8), (1, 2)], 3)
    assert short.estimate is None and "1 of 2 tasks have fewer than k = 3" in (short.reason or "")
    assert short.ci_low is not None and short.ci_high is not None
    errored = policy_pass_k("a", [(5, 8), (0, 0)], 3)
    assert errored.estimate is None and errored.ci_low is None and "no scored episode" in (errored.reason or "")


def test_table_groups_cells_leaves_errors_out_and_averages_policies_over_tasks():
    table = {("a", "t1@1"): "SSSSSFFF", ("a", "t2@1"): "SSSE", ("b", "t1@1"): "FFFF", ("b", "t2@1"): "EEEE"}
    doc = pass_k_table(records(table), 3).to_dict()
    cells = {(c["group"]["policy"], c["group"]["task"]): c for c in doc["cells"]}
    assert cells[("a", "t1@1")]["fraction"] == "10/56"
    assert (cells[("a", "t2@1")]["trials"], cells[("a", "t2@1")]["fraction"]) == (3, "1/1")  # the error left out
    assert cells[("b", "t2@1")]["trials"] == 0 and cells[("b", "t2@1")]["estimate"] is None
    policies = {p["policy"]: p for p in doc["policies"]}
    assert policies["a"]["estimate"] == pytest.approx((10 / 56 + 1.0) / 2) and policies["a"]["tasks"] == 2
    assert policies["b"]["estimate"] is None  # t2 has no scored episode
    by_policy = pass_k_table(records(table), 2, by=("policy",)).to_dict()
    assert [c["group"] for c in by_policy["cells"]] == [{"policy": "a"}, {"policy": "b"}]
    assert by_policy["cells"][0]["fraction"] == f"{math.comb(8, 2)}/{math.comb(11, 2)}"
    with pytest.raises(AssayError, match="cannot group by seed"):
        pass_k_table(records(table), 2, by=("seed",))


def test_results_pass_k_prints_the_tables_and_json(tmp_path):
    store = fake_store(tmp_path / "s", "c", records({("a", "t@1"): "SSSSSFFF", ("b", "t@1"): "SF"}))
    runner = CliRunner()
    doc = json.loads(runner.invoke(app, ["results", "--store", str(store), "--pass-k", "3", "--json"]).stdout)
    cells = {c["group"]["policy"]: c for c in doc["pass_k"]["cells"]}
    assert doc["pass_k"]["k"] == 3 and cells["a"]["fraction"] == "10/56"
    assert cells["b"]["estimate"] is None and "at least k = 3" in cells["b"]["reason"]
    assert "pass_k" not in json.loads(runner.invoke(app, ["results", "--store", str(store), "--json"]).stdout)
    shown = runner.invoke(app, ["results", "--store", str(store), "--pass-k", "3"])
    assert shown.exit_code == 0 and "10/56" in shown.stdout and "pass^3 per policy" in shown.stdout
    bad = runner.invoke(app, ["results", "--store", str(store), "--pass-k", "0"])
    assert bad.exit_code == 2


def test_mean_of_draws_matches_the_per_task_interval_with_one_task():
    one = policy_pass_k("a", [(3, 7)], 2)
    cell = pass_k(3, 7, 2)
    assert (one.estimate, one.ci_low, one.ci_high) == (cell.estimate, cell.ci_low, cell.ci_high)
    assert np.isclose(cell.estimate, math.comb(3, 2) / math.comb(7, 2))


def test_dashboard_api_serves_pass_k_and_the_page_shows_it(tmp_path):
    from fastapi.testclient import TestClient

    from assay.server import ServerConfig, create_app

    store = fake_store(tmp_path / "s", "c", records({("a", "t@1"): "SSSSSFFF", ("b", "t@1"): "SF"}))
    app_ = create_app(ServerConfig(store, "token", tmp_path, poll_s=0.05))
    with TestClient(app_, base_url="http://127.0.0.1") as client:
        doc = client.get("/api/campaigns/c/pass-k", params={"k": 3}).json()
        assert doc["k"] == 3 and {c["group"]["policy"]: c["fraction"] for c in doc["cells"]} == {"a": "10/56",
                                                                                                 "b": "-"}
        assert client.get("/api/campaigns/c/pass-k").json()["k"] == 3  # the default
        assert client.get("/api/campaigns/c/pass-k", params={"k": 0}).status_code == 422
        assert client.get("/api/campaigns/nope/pass-k").status_code == 404
        script = client.get("/static/app.js").text
        assert "/pass-k?k=" in script and 'id="pass-k-cells"' in script


def test_report_has_a_pass_k_section_at_the_chosen_k(tmp_path):
    store = fake_store(tmp_path / "s", "c", records({("a", "t@1"): "SSSSSFFF", ("b", "t@1"): "SF"}))
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", "c", "--store", str(store), "-o", str(out), "--pass-k", "3"])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "Reliability: pass^3" in html and "10/56" in html and "at least k = 3" in html
    CliRunner().invoke(app, ["report", "c", "--store", str(store), "-o", str(out), "--pass-k", "1"])
    assert "Reliability: pass^1" in out.read_text() and "5/8" in out.read_text()


@pytest.mark.parametrize(("rates", "n", "k"), [((0.95, 0.98, 0.99), 6, 2), ((0.5, 0.5, 0.5), 6, 3),
                                               ((0.99, 0.95), 10, 3), ((1.0, 0.9, 0.8), 6, 5)])
def test_policy_interval_exact_coverage_at_the_edges(rates, n, k):
    """Every combination of per-task counts weighted by its probability (the draws alone covered 0.919 at
    three tasks of 6 at 0.95/0.98/0.99, k = 2; the outer ends with square-and-add hold)."""
    from assay.metrics.passk import policy_coverage

    assert policy_coverage(rates, [n] * len(rates), k, draws=4000) >= 0.93


def _two_variant_store(tmp_path):
    """Policy a on one task: nominal SSSSSSFF (6 of 8), action.noise FFFFFFFF (0 of 8); cells in the plan."""
    noisy = "action.noise=0.5"
    spec = {"campaign": {"name": "c", "episodes": 8},
            "variants": [{"name": "nominal", "key": "k0"}, {"name": noisy, "key": "k1"}],
            "cells": [{"policy": "a", "task": "t@1", "variant": v, "planned": 8} for v in ("nominal", noisy)]}
    rows = records({("a", "t@1"): "SSSSSSFF"}) + records({("a", "t@1"): "FFFFFFFF"}, variant=noisy)
    return fake_store(tmp_path / "s", "c", rows, spec)


def test_pass_k_has_one_scope_in_the_cli_the_report_and_the_dashboard(tmp_path):
    from fastapi.testclient import TestClient

    from assay.report import gather
    from assay.server import ServerConfig, create_app
    from assay.store import Store

    store = _two_variant_store(tmp_path)
    cli = json.loads(CliRunner().invoke(app, ["results", "--store", str(store), "--pass-k", "2", "--json"]).stdout)
    assert cli["scope"]["label"] == "nominal only"
    assert [c["fraction"] for c in cli["pass_k"]["cells"]] == ["15/28"]  # C(6,2)/C(8,2), nominal only
    with Store(store, create=False) as opened:
        report = gather(opened, "c", n_resamples=100, pass_k=2)
    assert report.pass_k is not None and [c.fraction for _, c in report.pass_k.cells] == ["15/28"]
    with TestClient(create_app(ServerConfig(store, "t", tmp_path)), base_url="http://127.0.0.1") as client:
        dashboard = client.get("/api/campaigns/c/pass-k", params={"k": 2}).json()
    assert [c["fraction"] for c in dashboard["cells"]] == ["15/28"] and dashboard["scope"]["label"] == "nominal only"


def test_pass_k_per_policy_does_not_pool_variants_shown_separately(tmp_path):
    store = _two_variant_store(tmp_path)
    doc = json.loads(CliRunner().invoke(app, ["results", "--store", str(store), "--by", "policy,task,variant",
                                              "--pass-k", "2", "--json"]).stdout)
    assert doc["scope"]["label"].startswith("each variant separately")
    assert sorted(c["fraction"] for c in doc["pass_k"]["cells"]) == ["0/28", "15/28"]
    estimates = sorted(p["estimate"] for p in doc["pass_k"]["policies"])
    assert estimates == pytest.approx([0.0, 15 / 28])  # one row per (policy, variant), never the pooled 0.125
