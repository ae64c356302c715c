"""`assay validity`: the language-shortcut probe tells a policy that reads its words (the router: loses success
without them) from one that does not (the privileged expert: keeps it, so the benchmark does not test its
language); pose resampling applies to fixed initial states only; `instruction.withheld` itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.sim import default_registry, instruct
from assay.sim.factors import resolve_variant

CAMPAIGN = """
name: val
seed: 0
episodes: 4
horizon: 150
tasks: [metaworld/reach@1, metaworld/button-press-topdown@1]
policies: [router, expert]
"""


def test_withheld_instructions_are_empty_or_another_tasks_of_the_same_suite():
    registry = default_registry()
    soup = registry.get("libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2")
    object_suite = {t.instruction for t in registry.list() if t.id.startswith("libero/object/")}
    reach = registry.get("metaworld/reach@1")
    for task in (soup, reach):
        assert instruct(task, resolve_variant({"instruction.withheld": "empty"}, task), 0) == ""
        others = {instruct(task, resolve_variant({"instruction.withheld": "other-task"}, task), s) for s in range(20)}
        assert task.instruction not in others and len(others) > 1
        assert instruct(task, resolve_variant({"instruction.withheld": "other-task"}, task), 3) == \
            instruct(task, resolve_variant({"instruction.withheld": "other-task"}, task), 3)  # drawn from the seed
    assert {instruct(soup, resolve_variant({"instruction.withheld": "other-task"}, soup), s)
            for s in range(20)} <= object_suite  # another task of LIBERO-Object, never of another suite


@pytest.mark.sim
@pytest.mark.slow
def test_the_language_probe_tells_a_reader_from_a_policy_that_ignores_its_words(tmp_path):
    spec = tmp_path / "val.yaml"
    spec.write_text(CAMPAIGN)
    runner = CliRunner()
    store = str(tmp_path / "store")
    assert runner.invoke(app, ["run", str(spec), "--store", store]).exit_code == 0
    result = runner.invoke(app, ["validity", "val", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    probes = {(p["policy"], p["probe"]): p for p in data["probes"]}
    assert set(probes) == {(p, probe) for p in ("router", "expert")
                           for probe in ("no instruction", "another task's instruction")}
    for probe in ("no instruction", "another task's instruction"):
        router, expert = probes[("router", probe)], probes[("expert", probe)]
        assert router["paired"] and router["nominal"][1] == router["probed"][1] == 8  # the same 8 scenes
        assert router["retention"][2] < 1.0 and "it reads its words" in router["verdict"], router
        assert expert["probed"] == expert["nominal"] == [8, 8]
        assert "does not depend on its instruction" in expert["verdict"] or "inconclusive" in expert["verdict"]
    assert "no fixed set to resample" in data["skipped"]["router"]
    again = runner.invoke(app, ["validity", "val", "--store", store, "--json"])  # resumes: nothing runs again
    assert json.loads(again.stdout)["probes"] == data["probes"]
    missing = runner.invoke(app, ["validity", "nope", "--store", store])
    assert missing.exit_code == 2 and "no campaign 'nope'" in missing.output
    wrong = runner.invoke(app, ["validity", "val", "--store", store, "--policies", "ghost"])
    assert wrong.exit_code == 2 and "has no policy ghost; its policies: router, expert" in wrong.output
