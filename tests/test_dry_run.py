"""``assay run --dry-run``: resolve, build each policy once, check contracts, count episodes; run nothing."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store

runner = CliRunner()
CAMPAIGN = """
name: dry
seed: 1
episodes: 3
horizon: 20
tasks: [metaworld/reach@1, metaworld/push@1]
policies: [expert, random]
variants: [nominal, {action.noise: 0.1}]
"""


@pytest.mark.sim
def test_a_dry_run_counts_what_a_run_would_do_and_runs_nothing(tmp_path):
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    store = tmp_path / "s"
    first = runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(store), "--dry-run", "--json"])
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == {"campaign": "dry", "tasks": 2, "variants": 2, "policies": ["expert", "random"],
                                        "cells": 8, "episodes": 24, "stored": None, "to_run": 24, "store": str(store),
                                        "ran": 0}
    assert not store.exists()  # no store is created
    part = tmp_path / "part.yaml"  # the same episodes of one policy, run for real under another campaign name
    part.write_text(CAMPAIGN.replace("name: dry", "name: part").replace("[expert, random]", "[expert]"))
    assert runner.invoke(app, ["run", str(part), "--store", str(store), "-x", "inline"]).exit_code == 0
    again = json.loads(runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(store), "--dry-run",
                                           "--json"]).stdout)
    assert (again["stored"], again["to_run"]) == (12, 12)  # the expert's 12 are keyed alike: a run would skip them
    with Store(store, create=False) as opened:
        assert [c.name for c in opened.catalog.campaigns()] == ["part"]  # the dry run recorded no campaign
    text = runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(store), "--dry-run"]).stdout
    assert " ".join(text.split()).startswith("dry run: campaign dry: 2 tasks x 2 variants x 2 policies (8 cells), 24 "
                                             "episodes planned; 12 already in the store")


def test_a_policy_that_cannot_be_built_fails_the_dry_run_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken_policy.py").write_text(textwrap.dedent("""
        class Broken:
            def __init__(self):
                raise FileNotFoundError("weights.pt")
            def reset(self, **_): ...
            def act(self, obs): ...
    """))
    broken = "[{name: b, entrypoint: 'broken_policy:Broken'}]"
    (tmp_path / "c.yaml").write_text(CAMPAIGN.replace("[expert, random]", broken))
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "c.yaml", "--store", str(tmp_path / "s"), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "policy 'b' could not be built: FileNotFoundError: weights.pt" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not (tmp_path / "s").exists()


def test_one_policy_under_two_names_is_refused_in_one_line(tmp_path):
    """Two names for one policy (same source, params, version) would record the same episodes twice; it used to end
    in the catalog's "UNIQUE constraint failed" after the first batch."""
    (tmp_path / "c.yaml").write_text(CAMPAIGN.replace("[expert, random]", "[expert, {name: again, builtin: expert}]"))
    result = runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(tmp_path / "s"), "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "policies 'expert' and 'again' are the same policy (same source, params and version)" in \
        " ".join(result.output.split())
