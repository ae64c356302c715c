"""Partial cells are not ranked as if complete (issue 50): a leaderboard over cells of unequal completeness ranks on
the seeds every ranked policy shares and says how many, and without --allow-partial refuses in one line.

Golden case: policy ``a`` ran all 16 seeds of a task and succeeded on the last 4 only (0.25); policy ``b`` ran the
last 4 seeds (4 of 16) and failed one (0.75). Ranked each on its own seeds, ``b`` is first; on the 4 seeds both ran,
``a`` (4 of 4) beats ``b`` (3 of 4).
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from assay.cli.app import app
from tests.record_store import fake_store
from tests.stats_fixtures import records

runner = CliRunner()


def _plan(policies: str, tasks: tuple[str, ...], planned: int) -> dict:
    return {"campaign": {"name": "c", "episodes": planned},
            "policies": [{"name": p} for p in policies], "tasks": [{"id": t} for t in tasks],
            "variants": [{"name": "nominal", "key": "nominal"}],
            "cells": [{"policy": p, "task": t, "variant": "nominal", "planned": planned}
                      for p in policies for t in tasks]}


def _store(tmp_path, b_codes: str = "SSSF", b_offset: int = 12) -> str:
    episodes = records({("a", "t@1"): "F" * 12 + "SSSS"}) + records({("b", "t@1"): b_codes}, seed_offset=b_offset)
    return str(fake_store(tmp_path / "s", "c", episodes, _plan("ab", ("t@1",), 16)))


def test_a_leaderboard_over_cells_of_unequal_completeness_is_refused_in_one_line(tmp_path):
    store = _store(tmp_path)
    result = runner.invoke(app, ["leaderboard", "--store", store, "--resamples", "200"])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "unequal completeness" in errors[0] and "4 of the 16 seed rows" in errors[0]
    assert "--allow-partial" in errors[0]


def test_with_allow_partial_it_ranks_on_the_shared_seeds_and_says_how_many(tmp_path):
    store = _store(tmp_path)
    result = runner.invoke(app, ["leaderboard", "--store", store, "--resamples", "200", "--allow-partial", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["shared_rows"] == {"ranked_on": 4, "recorded": 16, "policies": ["a", "b"]}
    rows = {r["policy"]: r for r in document["leaderboard"]["rows"]}
    assert (rows["a"]["score"], rows["b"]["score"]) == (1.0, 0.75)
    assert (rows["a"]["rank"], rows["b"]["rank"]) == (1, 2)
    plain = runner.invoke(app, ["leaderboard", "--store", store, "--resamples", "200", "--allow-partial"])
    assert plain.exit_code == 0, plain.output
    assert ("ranked on the 4 seed rows every ranked policy ran (of 16 recorded; a ran 16, b ran 4)"
            in " ".join(plain.output.split()))


def test_cells_of_equal_completeness_rank_as_before(tmp_path):
    """Both policies on the same 4 of 16 seeds: paired, so ranked without --allow-partial (and marked incomplete)."""
    episodes = records({("a", "t@1"): "SSFF", ("b", "t@1"): "SFFF"})
    store = str(fake_store(tmp_path / "s", "c", episodes, _plan("ab", ("t@1",), 16)))
    result = runner.invoke(app, ["leaderboard", "--store", store, "--resamples", "200", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["shared_rows"] == {"ranked_on": 4, "recorded": 4, "policies": ["a", "b"]}
    assert [r["policy"] for r in document["leaderboard"]["rows"]] == ["a", "b"]
    assert document["completeness"]["complete"] is False
