"""Calibration records in the store and the sign-off gate."""

from __future__ import annotations

import json

import pytest

from assay.errors import StoreError
from assay.metrics import (
    NOT_VALIDATED,
    CalibrationRecord,
    RateEntry,
    Thresholds,
    correlate,
    load_calibration,
    load_thresholds,
    records_from_report,
    save_calibration,
    signoff,
)


def _record(task, pearson=0.95, mmrv=0.01, policies=4):
    return CalibrationRecord(task, pearson, mmrv, policies, "2024-01-01T00:00:00+00:00", "test")


def test_gate_marks_missing_and_weak_calibrations():
    calibration = {r.task: r for r in [_record("good@1"), _record("weak@1", pearson=0.5),
                                       _record("loose@1", mmrv=0.2), _record("few@1", policies=2),
                                       _record("flat@1", pearson=None)]}
    tasks = ["good@1", "weak@1", "loose@1", "few@1", "flat@1", "none@1", "good@2"]
    gate = {s.task: s for s in signoff(tasks, calibration, Thresholds())}
    assert gate["good@1"].validated and gate["good@1"].label == "validated for sign-off"
    for task in tasks[1:]:
        assert not gate[task].validated and gate[task].label == NOT_VALIDATED
    assert "Pearson r 0.500 < 0.8" in gate["weak@1"].reason
    assert "MMRV 0.200 > 0.05" in gate["loose@1"].reason
    assert "2 policies < 3" in gate["few@1"].reason
    assert "undefined" in gate["flat@1"].reason
    assert "no calibration record" in gate["good@2"].reason  # a new twin version needs its own calibration
    relaxed = signoff(["weak@1"], calibration, Thresholds(min_pearson=0.4))
    assert relaxed[0].validated


def test_records_are_merged_atomically_and_thresholds_read_from_the_store(tmp_path):
    real = [RateEntry("t@1", p, r) for p, r in zip("abc", [0.9, 0.5, 0.1], strict=True)]
    sim = [RateEntry("t@1", p, r) for p, r in zip("abc", [0.8, 0.6, 0.2], strict=True)]
    records = records_from_report(correlate(real, sim, n_resamples=200), "unit", date="2024-05-01")
    assert records == [CalibrationRecord("t@1", pytest.approx(0.24 / (0.32 * 0.56 / 3) ** 0.5), 0.0, 3, "2024-05-01", "unit")]
    save_calibration(tmp_path, records)
    save_calibration(tmp_path, [_record("u@1")], thresholds=Thresholds(min_pearson=0.9))
    loaded = load_calibration(tmp_path)
    assert set(loaded) == {"t@1", "u@1"} and loaded["t@1"].source == "unit"
    assert load_thresholds(tmp_path) == Thresholds(min_pearson=0.9)
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temporary left behind
    (tmp_path / "calibration.json").write_text(json.dumps({"thresholds": {"min_r": 1}}))
    with pytest.raises(StoreError, match="unknown threshold min_r; valid: min_pearson, max_mmrv, min_policies"):
        load_thresholds(tmp_path)
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.raises(StoreError, match="fix or remove the file"):
        load_calibration(tmp_path)
    assert load_calibration(tmp_path / "elsewhere") == {}
