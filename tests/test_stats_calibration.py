"""Calibration records in the store and the sign-off gate."""

from __future__ import annotations

import json

import pytest

from assay.errors import StoreError
from assay.metrics import (
    NOT_VALIDATED,
    CalibrationRecord,
    GateCell,
    RateEntry,
    Thresholds,
    campaign_signoff,
    correlate,
    load_calibration,
    load_thresholds,
    records_from_report,
    save_calibration,
    signoff,
)
from assay.store import EpisodeRecord, Outcome


def _record(task, pearson=0.95, mmrv=0.01, policies=4, variants=("nominal",), low=0.5):
    return CalibrationRecord(task, pearson, mmrv, policies, "2024-01-01T00:00:00+00:00", "test", variants,
                             tuple("abcd"[:policies]), low)


def _cell(task, variants=("nominal",), policies=("a", "b", "c")):
    return GateCell(task, variants, policies)


def test_gate_marks_missing_and_weak_calibrations():
    calibration = {r.key: r for r in [_record("good@1"), _record("weak@1", pearson=0.5),
                                      _record("loose@1", mmrv=0.2), _record("few@1", policies=2),
                                      _record("flat@1", pearson=None), _record("wide@1", low=-0.3)]}
    tasks = ["good@1", "weak@1", "loose@1", "few@1", "flat@1", "wide@1", "none@1", "good@2"]
    gate = {s.task: s for s in signoff([_cell(t, policies=("a", "b")) for t in tasks], calibration, Thresholds())}
    assert gate["good@1"].validated and gate["good@1"].label == "validated for sign-off"
    for task in tasks[1:]:
        assert not gate[task].validated and gate[task].label == NOT_VALIDATED
    assert "Pearson r 0.500 < 0.8" in gate["weak@1"].reason
    assert "MMRV 0.200 > 0.05" in gate["loose@1"].reason
    assert "2 policies < 3" in gate["few@1"].reason
    assert "undefined" in gate["flat@1"].reason
    assert "lower end of r's 95% interval -0.300 < 0.0" in gate["wide@1"].reason
    assert "no calibration record" in gate["good@2"].reason  # a new twin version needs its own calibration
    relaxed = signoff([_cell("weak@1", policies=("a",))], calibration, Thresholds(min_pearson=0.4))
    assert relaxed[0].validated


def _episode(task, variant_key, variant_name, policy, seed):
    return EpisodeRecord(key=f"{task}{variant_key}{policy}{seed}", campaign="c", task_id=task, task_hash="h",
                         variant_key=variant_key, variant_name=variant_name, variant={}, policy_name=policy,
                         policy_version="1", policy_spec={}, seed=seed, episode_index=seed, instruction="",
                         outcome=Outcome.SUCCESS, reason="", steps=1, total_return=0.0, success_step=None,
                         trajectory_hash="")


def test_a_perturbed_campaign_is_not_validated_by_a_nominal_calibration(tmp_path):
    save_calibration(tmp_path, [_record("t@1")])  # nominal, policies a-d, r 0.95
    nominal = [_episode("t@1", "nominal", "nominal", p, s) for p in "abc" for s in range(2)]
    perturbed = [_episode("t@1", "v-1a2b", "gain-0.3", p, s) for p in "abc" for s in range(2)]
    assert [g.validated for g in campaign_signoff(nominal, tmp_path)] == [True]
    (mixed,) = campaign_signoff(nominal + perturbed, tmp_path)
    assert not mixed.validated and mixed.variants == ("nominal", "gain-0.3")
    assert "no calibration record for variant nominal, gain-0.3 (calibrated: nominal)" in mixed.reason
    (alone,) = campaign_signoff(perturbed, tmp_path)
    assert not alone.validated and "variant gain-0.3" in alone.reason
    # Per variant (asset swaps): the nominal leaderboard passes, the swap's does not.
    assert [g.validated for g in campaign_signoff(nominal + perturbed, tmp_path, per_variant=True)] == [True, False]
    # A calibration of the perturbed campaign itself validates it.
    save_calibration(tmp_path, [_record("t@1", variants=("v-1a2b",))])
    assert campaign_signoff(perturbed, tmp_path)[0].validated
    assert campaign_signoff(nominal, tmp_path)[0].validated  # both records coexist


def test_a_policy_outside_the_calibrated_set_is_not_validated(tmp_path):
    save_calibration(tmp_path, [_record("t@1", policies=3)])  # a, b, c
    (gate,) = campaign_signoff([_episode("t@1", "nominal", "nominal", p, 0) for p in ("a", "b", "new")], tmp_path)
    assert not gate.validated and "policies new were not in its calibration (a, b, c)" in gate.reason


def test_legacy_records_are_read_as_nominal_and_validate_nothing(tmp_path):
    legacy = {"schema_version": 1, "tasks": {"t@1": {"task": "t@1", "pearson": 0.99, "mmrv": 0.0, "policies": 4,
                                                     "date": "2024", "source": "old"}}}
    (tmp_path / "calibration.json").write_text(json.dumps(legacy))
    (record,) = load_calibration(tmp_path).values()
    assert record.variants == ("nominal",) and record.policy_names == ()
    (gate,) = campaign_signoff([_episode("t@1", "nominal", "nominal", "a", 0)], tmp_path)
    assert not gate.validated and "does not list the policies" in gate.reason
    save_calibration(tmp_path, [_record("u@1")])
    assert {r.task for r in load_calibration(tmp_path).values()} == {"t@1", "u@1"}  # kept, rewritten


def test_records_are_merged_atomically_and_thresholds_read_from_the_store(tmp_path):
    real = [RateEntry("t@1", p, r) for p, r in zip("abc", [0.9, 0.5, 0.1], strict=True)]
    sim = [RateEntry("t@1", p, r) for p, r in zip("abc", [0.8, 0.6, 0.2], strict=True)]
    report = correlate(real, sim, n_resamples=200)
    records = records_from_report(report, "unit", date="2024-05-01")
    low = report.tasks[0].stats["pearson"].ci_low
    assert records == [CalibrationRecord("t@1", pytest.approx(0.24 / (0.32 * 0.56 / 3) ** 0.5), 0.0, 3, "2024-05-01",
                                         "unit", ("nominal",), ("a", "b", "c"), low)]
    save_calibration(tmp_path, records)
    save_calibration(tmp_path, [_record("u@1")], thresholds=Thresholds(min_pearson=0.9))
    loaded = load_calibration(tmp_path)
    assert set(loaded) == {("t@1", ("nominal",)), ("u@1", ("nominal",))}
    assert loaded[("t@1", ("nominal",))].source == "unit"
    assert load_thresholds(tmp_path) == Thresholds(min_pearson=0.9)
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temporary left behind
    (tmp_path / "calibration.json").write_text(json.dumps({"thresholds": {"min_r": 1}}))
    with pytest.raises(StoreError, match="unknown threshold min_r; valid: min_pearson, max_mmrv, min_policies, "
                                         "min_pearson_low"):
        load_thresholds(tmp_path)
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.raises(StoreError, match="fix or remove the file"):
        load_calibration(tmp_path)
    assert load_calibration(tmp_path / "elsewhere") == {}


def test_olcl_ranking_carries_its_gate(tmp_path):
    from assay.cli.learning_commands import olcl_signoff

    (gate,) = olcl_signoff("metaworld/reach", ("bc-2x5", "bc-4x30"), tmp_path)
    assert gate.task == "metaworld/reach@1" and not gate.validated and "no calibration record" in gate.reason
    save_calibration(tmp_path, [CalibrationRecord("metaworld/reach@1", 0.9, 0.0, 3, "d", "s", ("nominal",),
                                                  ("bc-2x5", "bc-4x30", "expert"), 0.4)])
    assert olcl_signoff("metaworld/reach", ("bc-2x5", "bc-4x30"), tmp_path)[0].validated
