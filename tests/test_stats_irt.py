"""Ranking models for sparse leaderboards: 2PL item response and Bradley–Terry, rank intervals, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import optimize, special, stats
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.metrics import outcome_grid
from assay.metrics.irt import (
    Counts,
    average_scores,
    counts_from_grid,
    expected_wins,
    fit_bt,
    fit_irt,
    model_leaderboard,
    paired_wins,
)
from assay.metrics.irt_evidence import simulate_sparse_ranking
from tests.record_store import fake_store
from tests.stats_fixtures import records

runner = CliRunner()


def _sparse(seed: int = 0, policies: int = 12, tasks: int = 8, coverage: float = 0.6, episodes: int = 50):
    """A known 2PL truth (θ in descending order) observed on ``coverage`` of the cells."""
    rng = np.random.default_rng(seed)
    theta = np.sort(rng.normal(size=policies))[::-1]
    b, a = rng.normal(size=tasks), np.exp(rng.normal(0.0, 0.3, size=tasks))
    trials = np.where(rng.random((policies, tasks)) < coverage, episodes, 0).astype(float)
    successes = rng.binomial(trials.astype(int), special.expit(a * (theta[:, None] - b))).astype(float)
    names = tuple(f"p{i:02d}" for i in range(policies))
    return theta, Counts(names, tuple(f"t{j}" for j in range(tasks)), successes, trials)


def test_irt_recovers_a_known_ordering_on_a_sparse_matrix_better_than_averaging():
    theta, counts = _sparse()
    assert 0.5 < counts.coverage < 0.7
    fitted = fit_irt(counts.successes, counts.trials)[:len(theta)]
    irt_rho = stats.spearmanr(fitted, theta).statistic
    average_rho = stats.spearmanr(average_scores(counts), theta).statistic
    assert irt_rho >= 0.95 and irt_rho > average_rho + 0.1
    board = model_leaderboard("irt", counts, n_resamples=100)
    assert board.rows[0].policy == "p00" and board.rows[-1].policy == "p11"  # the best and the worst, exactly
    truth_rank = {f"p{i:02d}": i + 1 for i in range(len(theta))}
    inside = sum(r.rank_low <= truth_rank[r.policy] <= r.rank_high for r in board.rows)
    assert inside >= 10  # the true rank lies in (nearly) every 95% rank interval
    assert all(r.rank_low <= r.rank <= r.rank_high for r in board.rows)
    assert board == model_leaderboard("irt", counts, n_resamples=100)  # seeded


def test_irt_gradient_is_the_objective_derivative():
    _, counts = _sparse(seed=2, policies=5, tasks=4)
    from assay.metrics import irt

    x = np.random.default_rng(0).normal(size=5 + 8)
    captured = {}

    def spy(fun, x0, jac, method):
        captured["fun"] = fun
        return optimize.OptimizeResult(x=x0)

    original = irt.optimize.minimize
    irt.optimize.minimize = spy
    try:
        fit_irt(counts.successes, counts.trials)
    finally:
        irt.optimize.minimize = original
    fun = captured["fun"]
    numeric = optimize.approx_fprime(x, lambda v: fun(v)[0], 1e-6)
    assert np.allclose(fun(x)[1], numeric, rtol=1e-4, atol=1e-4)


def test_bradley_terry_uses_paired_wins_and_recovers_the_order():
    theta, counts = _sparse(seed=1)
    wins = expected_wins(counts.successes, counts.trials)
    strengths = fit_bt(wins)
    assert stats.spearmanr(strengths, theta).statistic >= 0.85  # from counts alone: below the 2PL fit, above 0.69
    # paired wins by hand: on one task's seed rows, i beats j where i succeeded and j failed (both scored)
    table = np.array([[1.0, 0.0, np.nan], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    assert paired_wins([table]).tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]


def test_missing_cells_and_a_policy_with_none_are_tolerated():
    table = {("a", "t1@1"): "SSSSSSSS", ("a", "t2@1"): "SSSSSSFF", ("b", "t1@1"): "SSSSFFFF",
             ("c", "t2@1"): "FFFFFFFF", ("d", "t1@1"): "EEEE"}
    grid = outcome_grid(records(table))
    counts = counts_from_grid(grid)
    assert counts.trials.tolist() == [[8, 8], [8, 0], [0, 8], [0, 0]]
    for model in ("irt", "bt"):
        board = model_leaderboard(model, counts, [t.values for t in grid.tasks], n_resamples=100)
        rows = {r.policy: r for r in board.rows}
        assert rows["d"].rank is None and rows["d"].score is None and board.rows[-1].policy == "d"
        assert rows["a"].rank == 1 and rows["c"].rank == 3 and rows["a"].tasks_scored == 2
        assert rows["b"].average == 0.5 and rows["b"].average_rank == 2
    with pytest.raises(AssayError, match="ranking model 'elo' is not valid; valid: irt, bt"):
        model_leaderboard("elo", counts)


def test_ties_share_a_rank_and_one_task_ranks_by_rate():
    table = {("a", "t@1"): "SSSSFFFF", ("b", "t@1"): "SSSSFFFF", ("c", "t@1"): "SSSSSSSF"}
    grid = outcome_grid(records(table))
    board = model_leaderboard("irt", counts_from_grid(grid), [t.values for t in grid.tasks], n_resamples=100)
    rows = {r.policy: r for r in board.rows}
    assert rows["c"].rank == 1 and rows["a"].rank == rows["b"].rank == 2


def test_simulation_irt_beats_averaging_at_fifty_to_seventy_percent_coverage():
    for coverage in (0.5, 0.7):
        result = simulate_sparse_ranking(policies=30, tasks=6, coverage=coverage, episodes=20, replicates=4, seed=1)
        assert result.irt > result.average + 0.05 and result.irt >= 0.85
    informative = simulate_sparse_ranking(policies=30, tasks=6, coverage=0.6, missing="informative",
                                          replicates=4, seed=1)
    assert informative.irt - informative.average > 0.15  # averaging is misled when weak policies ran easy tasks


def test_leaderboard_model_cli_on_a_campaign_and_a_sparse_csv(tmp_path):
    table = {("a", "t1@1"): "SSSSSSSF", ("a", "t2@1"): "SSSSSFFF", ("b", "t1@1"): "SSSSFFFF",
             ("b", "t2@1"): "SSFFFFFF", ("c", "t1@1"): "SFFFFFFF"}
    store = fake_store(tmp_path / "s", "c", records(table))
    doc = json.loads(runner.invoke(app, ["leaderboard", "--store", str(store), "--model", "irt", "--resamples",
                                         "100", "--json"]).stdout)
    assert [r["policy"] for r in doc["leaderboard"]["rows"]] == ["a", "b", "c"]
    assert doc["leaderboard"]["model"] == "irt" and doc["leaderboard"]["coverage"] == pytest.approx(5 / 6)
    assert doc["signoff"] and "paired" in doc["leaderboard"]["resampling"]
    shown = runner.invoke(app, ["leaderboard", "--store", str(store), "--model", "bt", "--resamples", "100"])
    assert shown.exit_code == 0 and "Bradley–Terry" in shown.stdout and "plain average" in shown.stdout
    csv = tmp_path / "sparse.csv"
    csv.write_text("task,policy,successes,trials\nt1,a,9,10\nt2,a,6,10\nt1,b,5,10\nt3,b,2,10\nt3,c,1,10\n")
    sparse = json.loads(runner.invoke(app, ["leaderboard", "--csv", str(csv), "--model", "irt", "--resamples", "100",
                                            "--json"]).stdout)
    assert sparse["source"] == "results sparse.csv" and sparse["leaderboard"]["coverage"] == pytest.approx(5 / 9)
    assert "Binomial" in sparse["leaderboard"]["resampling"] and sparse["signoff"] == []
    no_model = runner.invoke(app, ["leaderboard", "--csv", str(csv)])
    assert no_model.exit_code == 2 and "give --model irt or --model bt" in no_model.stderr
    bad = runner.invoke(app, ["leaderboard", "--store", str(store), "--model", "elo"])
    assert bad.exit_code == 2 and "valid: irt, bt" in bad.stderr
    gate = runner.invoke(app, ["leaderboard", "--csv", str(csv), "--model", "irt", "--resamples", "100",
                               "--require-signoff"])
    assert gate.exit_code == 1
    plain = json.loads(runner.invoke(app, ["leaderboard", "--store", str(store), "--json"]).stdout)
    assert plain["leaderboard"]["n_resamples"] == 2000  # the plain leaderboard keeps its default


def test_the_model_leaderboard_json_says_its_scope_and_how_complete_the_campaign_is(tmp_path):
    """Issue 36 for --model: the model tolerates a missing cell and ranks anyway, and its --json says so in the
    fields every scoring document carries (its table title already did)."""
    table = {("a", "t1@1"): "SSSSSSSF", ("a", "t2@1"): "SSSSSFFF", ("b", "t1@1"): "SSSSFFFF",
             ("b", "t2@1"): "SSFFFFFF", ("c", "t1@1"): "SFFFFFFF"}
    spec = {"campaign": {"name": "c", "episodes": 8}, "variants": [{"name": "nominal", "key": "k"}],
            "cells": [{"policy": p, "task": t, "variant": "nominal", "planned": 8}
                      for p in "abc" for t in ("t1@1", "t2@1")]}
    store = fake_store(tmp_path / "s", "c", records(table), spec)
    doc = json.loads(runner.invoke(app, ["leaderboard", "--store", str(store), "--model", "irt", "--resamples",
                                         "100", "--json"]).stdout)
    assert doc["campaign"] == "c" and doc["scope"]["label"] == "nominal only"
    assert {k: doc["completeness"][k] for k in ("planned", "recorded", "complete")} == \
        {"planned": 48, "recorded": 40, "complete": False}
    assert doc["completeness"]["missing_cells"] == ["c × t2@1 × nominal"]
    assert {r["policy"]: (r["recorded"], r["planned"], r["complete"]) for r in doc["leaderboard"]["rows"]} == \
        {"a": (16, 16, True), "b": (16, 16, True), "c": (8, 16, False)}
    text = runner.invoke(app, ["leaderboard", "--store", str(store), "--model", "irt", "--resamples", "100"]).stdout
    assert "incomplete: 40 of 48 planned episodes recorded; 1 cell(s) have none" in " ".join(text.split())
