"""A flywheel design that cannot be re-aimed: the primary recorded at the start, refused scene McNemar across
replicates, and a power plan in the primary's unit with the gain ratio's ceiling (no simulator, no training)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from scipy import stats

from assay.errors import AssayError
from assay.learning import flywheel_run
from assay.learning.flywheel_design import FlywheelDesign, scene_primary_refusal
from assay.learning.flywheel_run import DECLARATION, declare, plan_line, power_plan, primary_change, run_design
from assay.learning.flywheel_stats import ttest_power
from assay.metrics.budget import mcnemar_power
from assay.report.flywheel import endpoint_lines, power_lines
from assay.store import Store

TTEST = {"test": "ttest", "unit": "replicate"}
MCNEMAR = {"test": "mcnemar", "unit": "scene"}


def _design(**overrides: Any) -> FlywheelDesign:
    data: dict[str, Any] = {"name": "d", "task": "metaworld/push@1", "slice": {"component": 3, "threshold": 0.0},
                            "primary": TTEST, "replicates": 5, "eval": 72, "power_baseline": 0.7, "delta": 0.1}
    return FlywheelDesign.model_validate({**data, **overrides})


def test_the_primary_is_part_of_the_design_hash_but_not_of_the_data_tag():
    first, edited = _design(), _design(primary=MCNEMAR)
    assert first.tag() == edited.tag()  # the same data and checkpoints: editing the primary retrains nothing
    assert first.design_hash() != edited.design_hash()
    assert _design(primary={**TTEST, "alpha": 0.01}).design_hash() != first.design_hash()


def test_scene_mcnemar_is_refused_as_primary_when_replicates_train_on_their_own_data(tmp_path):
    refusal = scene_primary_refusal(_design(primary=MCNEMAR))
    assert refusal is not None and "5 replicates each train on their own data" in refusal
    assert scene_primary_refusal(_design(primary=MCNEMAR, replicates=1)) is None  # one training: scenes are units
    assert scene_primary_refusal(_design()) is None
    with Store(tmp_path / "s", create=True) as store, pytest.raises(AssayError, match="is refused"):
        run_design(store, _design(primary=MCNEMAR))
    assert not list((tmp_path / "s").rglob(DECLARATION))  # refused before anything was recorded


def test_the_declaration_is_written_once_and_an_edit_is_named(tmp_path):
    first = declare(tmp_path, _design())
    again = declare(tmp_path, _design(primary=MCNEMAR))  # a later start finds the first record
    assert again == first and first["primary"] == {**TTEST, "alpha": 0.05}
    assert first["design_hash"] == _design().design_hash()
    assert primary_change(first, _design()) is None
    changed = primary_change(first, _design(primary=MCNEMAR))
    assert changed is not None and changed["recorded"]["test"] == "ttest" and changed["now"]["test"] == "mcnemar"


def _replicate(r: int, targeted_extra: int) -> dict[str, Any]:
    """One replicate's outcomes on 72 scenes: base 20, random 50 and targeted 50 + ``targeted_extra`` successes
    (targeted's extra scenes are random's failures: all discordant pairs go targeted's way)."""
    scenes = range(72)
    outcomes = {"base": {s: s < 20 for s in scenes}, "random": {s: s < 50 for s in scenes},
                "targeted": {s: s < 50 + targeted_extra for s in scenes}}
    return {"replicate": r, "outcomes": outcomes, "agreement": {"precision": 1.0, "recall": 1.0},
            "inside": {s: s < 36 for s in scenes}, "variant_of": {s: "nominal" for s in scenes},
            "contaminated": {"base": 0}, "scene_overlap": 0}


def test_an_edited_primary_after_the_run_is_named_and_the_recorded_one_is_analysed(tmp_path, monkeypatch):
    """The issue's case: a run declared the replicate t test; the file is edited to scene McNemar afterwards and
    the run resumed. Before, the edit re-printed as "declared" with McNemar's far smaller p; now the analysis says
    "primary changed after the run" and the p is the recorded t test's."""
    extras = {0: 1, 1: 4, 2: 0, 3: 3, 4: 2}
    monkeypatch.setattr(flywheel_run, "run_replicate",
                        lambda store, design, r, *args: _replicate(r, extras[r]))
    with Store(tmp_path / "s", create=True) as store:
        declared = run_design(store, _design(bootstrap=200))
        edited = run_design(store, _design(primary=MCNEMAR, bootstrap=200))
    first, second = declared["analysis"]["primary"], edited["analysis"]["primary"]
    assert first["changed_after_run"] is None and first["p"] == first["replicate_ttest_p"]
    # differences 1, 4, 0, 3, 2 of 72: t = 2 / (sqrt(2.5) / sqrt(5)) = 2.83 on 4 df; McNemar 10 against 0
    assert first["replicate_ttest_p"] == pytest.approx(float(stats.ttest_1samp([1, 4, 0, 3, 2], 0.0).pvalue))
    assert first["replicate_ttest_p"] == pytest.approx(0.0474, abs=1e-4) and first["mcnemar_p"] == 2 / 1024
    assert second["p"] == first["p"] and second["declared"]["test"] == "ttest"  # the recorded primary stands
    assert second["changed_after_run"]["now"]["test"] == "mcnemar"
    lines = endpoint_lines(edited["analysis"])
    assert lines[0].startswith("primary changed after the run: recorded ttest over replicates at ")
    assert "the design file now says mcnemar over scenes; the recorded primary, targeted − random: two-sided t test"\
        in lines[0] and "(declared)" not in " ".join(lines)
    saved = json.loads(flywheel_run.result_path(Store(tmp_path / "s"), "d").read_text())
    assert saved["analysis"]["primary"]["changed_after_run"]["recorded"]["test"] == "ttest"


def test_the_power_plan_is_in_the_primary_unit_and_states_the_gain_ratio_ceiling():
    """The confirmation design's numbers: random 0.7, base 0 puts the ceiling at 1/0.7 = 1.43, below a 1.5 goal;
    with a base of 0.3 the ceiling is 1.75 and the goal's difference is 0.5 × 0.4 = 0.2."""
    unreachable = power_plan(_design(replicates=28, power_sd=0.12, goal_ratio=1.5, power_base=0.0))
    assert unreachable["unit"] == "replicate" and unreachable["primary_plan"]["replicates"] == 28
    assert unreachable["primary_plan"]["power"] == pytest.approx(ttest_power(28, 0.1, 0.12))
    assert unreachable["gain_ratio"]["ceiling"] == pytest.approx(1 / 0.7) and not unreachable["gain_ratio"]["reachable"]
    design = _design(replicates=28, power_sd=0.12, goal_ratio=1.5, power_base=0.0)
    assert "the largest gain ratio this design can reach is 1.43" in plan_line(design, unreachable)
    assert "the goal 1.5 is out of reach" in plan_line(design, unreachable)
    reachable = power_plan(_design(replicates=28, power_sd=0.12, goal_ratio=1.5, power_base=0.3))
    ratio = reachable["gain_ratio"]
    assert ratio["ceiling"] == pytest.approx(1.75) and ratio["effect"] == pytest.approx(0.2)
    assert ratio["power"] == pytest.approx(ttest_power(28, 0.2, 0.12))
    no_sd = power_plan(_design())  # a t test without a pilot's sd cannot be planned in replicates
    assert no_sd["primary_plan"]["power"] is None and "power_sd" in no_sd["primary_plan"]["missing"]
    one = power_plan(_design(primary=MCNEMAR, replicates=1, goal_ratio=1.2, power_base=0.2))
    assert one["unit"] == "scene" and one["primary_plan"]["power"] == pytest.approx(mcnemar_power(72, 0.8 * 0.3,
                                                                                                  0.7 * 0.2))
    assert one["gain_ratio"]["power"] == pytest.approx(mcnemar_power(72, 0.8 * 0.3, 0.7 * 0.2))  # (1.2-1)(0.7-0.2)
    lines = power_lines({"power": reachable, "design": {"delta": 0.1}})
    assert lines[0].startswith("power plan (primary unit: replicates): t test power")
    assert lines[1].startswith("secondary power plan: ") and "pooled scenes" in lines[1]
    assert lines[2].startswith("gain ratio goal 1.5: the largest ratio this design can reach is 1.75")
    with pytest.raises(ValueError, match="power_base 0.8 must be below power_baseline 0.7"):
        _design(power_base=0.8)
