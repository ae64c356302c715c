"""Calibration records in the store and the sign-off gate."""

from __future__ import annotations

import json

import pytest

from assay.errors import StoreError
from assay.metrics import (
    INSUFFICIENT,
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


def _record(task, pearson=0.95, mmrv=0.01, policies=4, variants=("nominal",), low=0.5, p=1 / 24,
            fisher=(0.2, 0.99), high=1.0):
    """A record with the evidence of 4 policies in perfect order (permutation p 1/24) unless told otherwise."""
    return CalibrationRecord(task, pearson, mmrv, policies, "2024-01-01T00:00:00+00:00", "test", variants,
                             tuple("abcdefgh"[:policies]), low, high, *fisher, p, "exact")


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
        assert not gate[task].validated
        assert gate[task].label == (INSUFFICIENT if task == "few@1" else NOT_VALIDATED)
    assert "Pearson r 0.500 < 0.8" in gate["weak@1"].reason
    assert "MMRV 0.200 > 0.05" in gate["loose@1"].reason
    assert "2 policies < 4" in gate["few@1"].reason and gate["few@1"].label == INSUFFICIENT
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
    save_calibration(tmp_path, [_record("t@1", policies=4)])  # a, b, c, d
    (gate,) = campaign_signoff([_episode("t@1", "nominal", "nominal", p, 0) for p in ("a", "b", "new")], tmp_path)
    assert not gate.validated and "policies new were not in its calibration (a, b, c, d)" in gate.reason


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
    pearson = report.tasks[0].stats["pearson"]
    assert records == [CalibrationRecord("t@1", pytest.approx(0.24 / (0.32 * 0.56 / 3) ** 0.5), 0.0, 3, "2024-05-01",
                                         "unit", ("nominal",), ("a", "b", "c"), pearson.ci_low, pearson.ci_high,
                                         None, None, pytest.approx(1 / 6), "exact")]
    save_calibration(tmp_path, records)
    save_calibration(tmp_path, [_record("u@1")], thresholds=Thresholds(min_pearson=0.9))
    loaded = load_calibration(tmp_path)
    assert set(loaded) == {("t@1", ("nominal",)), ("u@1", ("nominal",))}
    assert loaded[("t@1", ("nominal",))].source == "unit"
    assert load_thresholds(tmp_path) == Thresholds(min_pearson=0.9)
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]  # no temporary left behind
    (tmp_path / "calibration.json").write_text(json.dumps({"thresholds": {"min_r": 1}}))
    with pytest.raises(StoreError, match="unknown threshold min_r; valid: min_pearson, max_mmrv, min_policies, "
                                         "min_pearson_low, max_permutation_p"):
        load_thresholds(tmp_path)
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.raises(StoreError, match="fix or remove the file"):
        load_calibration(tmp_path)
    assert load_calibration(tmp_path / "elsewhere") == {}


def test_olcl_ranking_carries_its_gate(tmp_path):
    from assay.cli.learning_commands import olcl_signoff

    (gate,) = olcl_signoff("metaworld/reach", ("bc-2x5", "bc-4x30"), tmp_path)
    assert gate.task == "metaworld/reach@1" and not gate.validated and "no calibration record" in gate.reason
    save_calibration(tmp_path, [CalibrationRecord("metaworld/reach@1", 0.9, 0.0, 4, "d", "s", ("nominal",),
                                                  ("bc-2x5", "bc-4x30", "expert", "random"), 0.4, 0.99, 0.1, 0.99,
                                                  1 / 24, "exact")])
    assert olcl_signoff("metaworld/reach", ("bc-2x5", "bc-4x30"), tmp_path)[0].validated


def test_thin_evidence_is_insufficient_never_green(tmp_path):
    """The issue's case: 3 policies whose resampled r is always 1 ([1.000, 1.000]), an undefined Fisher-z interval
    and a permutation p that cannot go below 1/6. Each lack alone is "insufficient evidence" (not validated), even
    with every threshold on r and MMRV relaxed; the same figures over 6 policies are validated."""
    real = [RateEntry("t@1", p, r, s, 20) for p, r, s in zip("abc", [0.95, 0.6, 0.0], [19, 12, 0], strict=True)]
    sim = [RateEntry("t@1", p, r, s, 20) for p, r, s in zip("abc", [1.0, 0.5, 0.0], [20, 10, 0], strict=True)]
    report = correlate(real, sim, n_resamples=300)
    (record,) = records_from_report(report, "thin")
    assert record.fisher_low is None and record.permutation_p == pytest.approx(1 / 6)
    relaxed = Thresholds(min_pearson=-1, max_mmrv=1, min_policies=1, min_pearson_low=-1)
    (gate,) = signoff([_cell("t@1")], {record.key: record}, relaxed)
    assert not gate.validated and gate.insufficient and gate.label == INSUFFICIENT == "insufficient evidence"
    assert gate.reason == "permutation p 0.167 > 0.05"
    assert gate.to_dict()["status"] == "insufficient evidence" and gate.to_dict()["insufficient_evidence"] is True
    (default,) = signoff([_cell("t@1")], {record.key: record}, Thresholds())
    assert default.insufficient and default.reason == "calibrated on 3 policies < 4"
    lax_p = Thresholds(min_pearson=-1, max_mmrv=1, min_policies=1, min_pearson_low=-1, max_permutation_p=1)
    (no_fisher,) = signoff([_cell("t@1")], {record.key: record}, lax_p)
    assert no_fisher.insufficient and no_fisher.reason == "Fisher-z interval of r undefined is not an interval"
    # degenerate intervals: a point Fisher interval (r = 1) and a point bootstrap interval
    point = _record("p@1", fisher=(1.0, 1.0))
    flat = _record("f@1", low=1.0, high=1.0)
    old = CalibrationRecord("o@1", 0.95, 0.01, 4, "d", "s", ("nominal",), tuple("abcd"), 0.5)  # no evidence kept
    calibration = {r.key: r for r in (point, flat, old)}
    gates = {g.task: g for g in signoff([_cell(t) for t in ("p@1", "f@1", "o@1")], calibration, Thresholds())}
    assert gates["p@1"].insufficient and "[1.000, 1.000] is not an interval" in gates["p@1"].reason
    assert gates["f@1"].insufficient and "bootstrap interval [1.000, 1.000] is not an interval" in gates["f@1"].reason
    assert gates["o@1"].insufficient and "recorded by an older assay" in gates["o@1"].reason


def test_sufficient_evidence_is_validated_and_weak_figures_are_not(tmp_path):
    """Six policies in perfect order: exact permutation p 1/720, Fisher and bootstrap intervals with width, r 0.99:
    validated. The same evidence with a low r is "not validated", not "insufficient evidence"."""
    rates = [0.95, 0.8, 0.65, 0.5, 0.3, 0.1]
    real = [RateEntry("t@1", p, r, round(r * 40), 40) for p, r in zip("abcdef", rates, strict=True)]
    sim = [RateEntry("t@1", p, r, round(r * 40), 40) for p, r in zip("abcdef", [0.9, 0.85, 0.6, 0.45, 0.3, 0.15],
                                                                      strict=True)]
    report = correlate(real, sim, n_resamples=300)
    (record,) = records_from_report(report, "full")
    assert record.permutation_p == pytest.approx(1 / 720) and record.permutation_mode == "exact"
    assert record.fisher_low is not None and record.fisher_high is not None and record.fisher_low < record.fisher_high
    (gate,) = signoff([_cell("t@1", policies=tuple("abcdef"))], {record.key: record}, Thresholds(max_mmrv=0.1))
    assert gate.validated and not gate.insufficient and "permutation p 0.00139" in gate.reason
    (strict,) = signoff([_cell("t@1", policies=tuple("abcdef"))], {record.key: record}, Thresholds(min_pearson=0.999))
    assert not strict.validated and not strict.insufficient and strict.label == NOT_VALIDATED


def _store_with_calibration(tmp_path, policies, real, sim):
    """A fake store of one task (``sim`` successes of 10 per policy) calibrated by ``correlate --record``."""
    from typer.testing import CliRunner

    from assay.cli.app import app
    from tests.record_store import fake_store
    from tests.stats_fixtures import records

    table = {(p, "t@1"): "S" * s + "F" * (10 - s) for p, s in zip(policies, sim, strict=True)}
    store = fake_store(tmp_path / "s", "c", records(table))
    csv = tmp_path / "real.csv"
    csv.write_text("task,policy,successes,trials\n" + "".join(f"t@1,{p},{s},10\n"
                                                             for p, s in zip(policies, real, strict=True)))
    result = CliRunner().invoke(app, ["correlate", "--real", str(csv), "--campaign", "c", "--store", str(store),
                                      "--record", "--resamples", "300"])
    assert result.exit_code == 0, result.output
    return store, result.stdout


def test_thin_evidence_reads_insufficient_in_the_cli_report_and_dashboard(tmp_path):
    """Three policies (the issue's case) are "insufficient evidence" everywhere the gate is shown, and fail
    --require-signoff; correlate says so as it records."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from assay.cli.app import app
    from assay.server import ServerConfig, create_app

    store, said = _store_with_calibration(tmp_path, ("a", "b", "c"), (9, 5, 0), (10, 6, 1))
    assert "sign-off evidence on t@1: insufficient evidence: calibrated on 3 policies < 4" in " ".join(said.split())
    runner = CliRunner()
    board = runner.invoke(app, ["leaderboard", "--store", str(store), "--require-signoff"])
    assert board.exit_code == 1 and "insufficient evidence" in board.stdout and "validated for sign-off" not in \
        board.stdout.replace("not validated for sign-off", "")
    relaxed = json.loads(runner.invoke(app, ["leaderboard", "--store", str(store), "--min-policies", "3",
                                             "--min-pearson", "-1", "--max-mmrv", "1", "--min-pearson-low", "-1",
                                             "--json"]).stdout)
    assert relaxed["signoff"][0]["status"] == "insufficient evidence"
    assert relaxed["signoff"][0]["reason"].startswith("permutation p 0.167 > 0.05")
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", "c", "--store", str(store), "-o", str(out)]).exit_code == 0
    assert "<span class='warn'>insufficient evidence</span>" in out.read_text()
    with TestClient(create_app(ServerConfig(store, "token", tmp_path, poll_s=0.05)),
                    base_url="http://127.0.0.1") as client:
        (gate,) = client.get("/api/campaigns/c/leaderboard", params={"resamples": 100}).json()["signoff"]
    assert (gate["validated"], gate["status"], gate["insufficient_evidence"]) == (False, "insufficient evidence", True)


def test_sufficient_evidence_reads_validated_in_the_cli(tmp_path):
    policies = ("a", "b", "c", "d", "e", "f")
    store, said = _store_with_calibration(tmp_path, policies, (10, 8, 6, 5, 3, 0), (10, 9, 6, 4, 3, 1))
    assert "sign-off evidence on t@1: sufficient" in " ".join(said.split())
    from typer.testing import CliRunner

    from assay.cli.app import app

    board = CliRunner().invoke(app, ["leaderboard", "--store", str(store), "--require-signoff", "--json"])
    assert board.exit_code == 0, board.output
    (gate,) = json.loads(board.stdout)["signoff"]
    assert gate["status"] == "validated for sign-off" and "permutation p 0.00139" in gate["reason"]
