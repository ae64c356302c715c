"""Scores that stay honest: returns with intervals and a return comparison on tasks without a
success signal; errors excluded from the denominator are marked, and the pessimistic view exists."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from assay.cli.app import app
from assay.metrics import compare_returns, rate_table, return_interval
from assay.metrics.comparisons import Verdict
from tests.stats_fixtures import records


def test_return_interval_is_the_student_t_interval():
    interval = return_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / np.sqrt(3)  # t(0.975, 2) * s / sqrt(n), s = 1
    assert interval.low == pytest.approx(2 - half) and interval.high == pytest.approx(2 + half)
    assert return_interval([5.0]) is None  # n = 1: no interval
    assert return_interval([4.0, 4.0]).low == 4.0 == return_interval([4.0, 4.0]).high


def _with_returns(rows, returns):
    return [dataclasses.replace(r, total_return=value) for r, value in zip(rows, returns, strict=True)]


def test_returns_are_compared_paired_on_a_task_without_success():
    a = _with_returns(records({("a", "gymnasium/Pendulum-v1@1"): "TTTTTT"}), [-900, -910, -920, -905, -930, -915])
    b = _with_returns(records({("b", "gymnasium/Pendulum-v1@1"): "TTTTTE"}), [-1060, -1070, -1050, -1065, -1080, 0])
    [row] = compare_returns(a + b, "a", ["b"], ["gymnasium/Pendulum-v1@1"])
    x, y = np.array([-900, -910, -920, -905, -930]), np.array([-1060, -1070, -1050, -1065, -1080])
    assert row.pairs == 5  # the error episode drops its pair
    assert row.difference == pytest.approx(float(np.mean(x - y)))
    assert row.p_value == pytest.approx(float(stats.ttest_rel(x, y).pvalue))
    assert row.verdict is Verdict.BETTER and row.ci_low > 0
    [same] = compare_returns(a + _with_returns(b, [-900, -910, -920, -905, -930, 0]), "a", ["b"],
                             ["gymnasium/Pendulum-v1@1"])
    assert (same.difference, same.p_value, same.verdict) == (0.0, 1.0, Verdict.NO_DIFFERENCE)


def test_errors_as_failures_is_the_pessimistic_view():
    rows = records({("p", "t"): "SSSSSEEEEE"})
    [default] = rate_table(rows)
    [pessimistic] = rate_table(rows, errors_as_failures=True)
    assert (default.rate, default.scored, default.errors) == (1.0, 5, 5)
    assert (pessimistic.rate, pessimistic.scored, pessimistic.failures, pessimistic.errors) == (0.5, 10, 5, 5)


def test_the_table_marks_a_rate_with_errors_left_out():
    from rich.console import Console

    from assay.cli import render

    rows = rate_table(records({("p", "t"): "SSSSSEEEEE"}))
    console = Console(width=200, record=True)
    console.print(render.rate_table(rows, "c"))
    text = console.export_text()
    assert "1.00*" in text and "* 5 error episode(s) excluded from the success denominators" in text
    console = Console(width=200, record=True)
    console.print(render.rate_table(rate_table(records({("p", "t"): "SSSSSEEEEE"}), errors_as_failures=True), "c",
                                    errors_as_failures=True))
    assert "0.50" in console.export_text() and "*" not in console.export_text().replace("errors counted", "")


CAMPAIGN = """
name: pendulum
seed: 1
episodes: 4
horizon: 30
envs_per_worker: 4
tasks: [gymnasium/Pendulum-v1]
policies: [random, {name: still, entrypoint: "tests.helpers:ConstantPolicy", params: {value: 0.0}}]
"""


def test_a_task_without_success_is_scored_and_compared_on_return(tmp_path):
    path = tmp_path / "pendulum.yaml"
    path.write_text(CAMPAIGN)
    store = str(tmp_path / "store")
    runner = CliRunner()
    ran = runner.invoke(app, ["run", str(path), "--store", store, "--executor", "inline"])
    assert ran.exit_code == 0, ran.output
    results = runner.invoke(app, ["results", "--store", store])
    assert results.exit_code == 0 and "n/a" in results.output and "return [95%]" in results.output
    compared = runner.invoke(app, ["compare", "random", "still", "--store", store, "--json"])
    assert compared.exit_code == 0, compared.output
    document = json.loads(compared.stdout)
    assert document["comparisons"] == []  # no success rate compared where there is no success signal
    [row] = document["returns"]
    assert row["task"] == "gymnasium/Pendulum-v1@1" and row["pairs"] == 4
    assert row["difference"] == pytest.approx(row["a_mean"] - row["b_mean"])
    table = runner.invoke(app, ["compare", "random", "still", "--store", store])
    assert "mean return (no success signal: gymnasium/Pendulum-v1@1)" in table.output


def test_small_outputs_say_what_happened_in_words(tmp_path):
    from assay.cli.failures_commands import boundary_line, ponr_line
    from tests.test_integrity import _run

    found = {"key": "a" * 24, "t": None, "steps": 40, "handoffs": 1, "plot": "p.png", "demos": []}
    assert "no point of no return: the reference cannot recover even from step 0 of 40" in ponr_line(found, False)
    assert "t=None" not in ponr_line(found, False)
    assert ponr_line({**found, "t": 12}, False).endswith("no recovery demos written (add --demos)")
    assert "point of no return t=12 of 40 steps" in ponr_line({**found, "t": 12}, True)
    assert boundary_line("action.noise", None, 0.5, 1.0) == (
        "no boundary found: success stays at or above 0.5 up to action.noise = 1 (raise --hard to search further)")
    assert boundary_line("action.noise", 0.25, 0.5, 1.0) == "boundary: action.noise = 0.25 (success < 0.5)"

    root = tmp_path / "store"
    _run(root)
    runner = CliRunner()
    listed = runner.invoke(app, ["episodes", "ls", "--store", str(root), "--limit", "3"])
    assert listed.exit_code == 0 and "showing 3 of 4 episodes (--limit 3)" in listed.output
    document = json.loads(runner.invoke(app, ["episodes", "ls", "--store", str(root), "--limit", "3", "--json"]).stdout)
    assert (document["total"], document["shown"], len(document["episodes"])) == (4, 3, 3)
    policies = json.loads(runner.invoke(app, ["policies", "--json"]).stdout)
    bc = next(p for p in policies["policies"] if p["name"] == "bc")
    assert bc["params"]["path"]["default"] == "(required)"
    help_text = " ".join(runner.invoke(app, ["export", "lerobot", "--help"]).output.replace("│", " ").split())
    assert "Only successful episodes unless the query says otherwise" in help_text
