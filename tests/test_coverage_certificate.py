"""Coverage certified over every rate (not a grid) and every n ≤ 50, against what docs/STATISTICS.md states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from assay.errors import AssayError
from assay.metrics.coverage_certificate import (
    DOCUMENTED,
    MAX_N,
    binomial_ends,
    certify_ends,
    certify_full_nominal_retention,
    certify_rate,
    coverage_note,
)
from assay.metrics.intervals_coverage import retention_coverage
from assay.metrics.passk import pass_k
from assay.metrics.rates import INTERVAL_METHODS


def _coverage(low: np.ndarray, high: np.ndarray, p: np.ndarray) -> np.ndarray:
    n = low.size - 1
    pmf = stats.binom.pmf(np.arange(n + 1)[None, :], n, p[:, None])
    return (pmf * ((low[None, :] <= p[:, None]) & (p[:, None] <= high[None, :]))).sum(axis=1)


@pytest.mark.parametrize("method", INTERVAL_METHODS)
def test_every_method_holds_what_the_docs_state_over_every_rate_and_n(method):
    """The infimum over every p and n ≤ 50, rounded down, is exactly the documented one: a method that drops below
    it fails, and so does a documented figure that is no longer the truth."""
    certificates = [certify_rate(method, n) for n in range(1, MAX_N + 1)]
    worst = min(certificates, key=lambda c: c.minimum)
    assert math.floor(worst.minimum * 1000) / 1000 == DOCUMENTED[method], worst
    assert all(0.9 < c.mean < 1.0 for c in certificates)


def test_the_issue_dip_of_mid_p_between_grid_points():
    """Mid-p at n = 6 (an n the documented grid of n ∈ {5, 10, 15, ...} left out): 0.912 at p ≈ 0.409 and 0.591
    (symmetric), below the 0.920 documented before; a dense scan never goes below the certificate and comes within
    1e-6 of it next to the breakpoint."""
    certificate = certify_rate("midp", 6)
    assert certificate.minimum == pytest.approx(0.91212, abs=1e-5)
    assert min(certificate.at, 1 - certificate.at) == pytest.approx(0.40910, abs=1e-4)
    low, high = (np.array(e) for e in binomial_ends(6, "midp"))
    scan = _coverage(low, high, np.linspace(1e-6, 1 - 1e-6, 200_001))
    assert scan.min() >= certificate.minimum - 1e-12
    near = _coverage(low, high, np.array([certificate.at - 1e-9, certificate.at + 1e-9]))
    assert near.min() == pytest.approx(certificate.minimum, abs=1e-6)
    grid = _coverage(low, high, np.round(np.arange(0.01, 1.0, 0.01), 2))
    assert grid.min() > certificate.minimum  # a grid point is never below the infimum, and rarely at it


def test_clopper_pearson_never_falls_below_its_level_and_the_mean_is_the_integral():
    assert all(certify_rate("exact", n).minimum >= 0.95 for n in range(1, MAX_N + 1))
    for method, n in (("midp", 6), ("wilson", 13), ("exact", 1)):
        low, high = (np.array(e) for e in binomial_ends(n, method))
        edges = np.unique(np.concatenate([low, high, [0.0, 1.0]]))
        def at(p, low=low, high=high):
            return float(_coverage(low, high, np.array([p]))[0])

        numeric = sum(integrate.quad(at, a, b)[0] for a, b in zip(edges[:-1], edges[1:], strict=True))
        assert certify_rate(method, n).mean == pytest.approx(numeric, abs=1e-7)


def test_n_one_by_hand_and_refusals():
    # mid-p for 0 of 1 is [0, 0.95], for 1 of 1 [0.05, 1]: p in (0.05, 0.95) is covered by both counts, so the
    # infimum is at the ends: just above 0.95 only k = 1 covers (probability p) -> 0.95
    certificate = certify_rate("midp", 1)
    assert certificate.minimum == pytest.approx(0.95, abs=1e-9)
    with pytest.raises(AssayError, match="non-decreasing"):
        certify_ends(np.array([0.0, 0.5, 0.4]), np.array([0.6, 0.9, 1.0]))
    with pytest.raises(AssayError, match="low ≤ high"):
        certify_ends(np.array([0.0]), np.array([1.0]))
    with pytest.raises(AssayError, match="not valid"):
        certify_rate("wald", 5)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10])
def test_pass_k_per_cell_is_the_rate_interval_to_the_power_k_so_it_inherits_the_certificate(k):
    """[L^k, U^k] covers p^k exactly when [L, U] covers p: checked on every count of every n ≤ 50, so the per-cell
    pass^k coverage at every p is the rate interval's, infimum included (0 successes and n = 1 among them)."""
    for n in range(1, MAX_N + 1):
        low, high = binomial_ends(n, "midp")
        for c in range(n + 1):
            cell = pass_k(c, n, k)
            assert (cell.ci_low, cell.ci_high) == pytest.approx((low[c] ** k, high[c] ** k), abs=1e-15)


def test_retention_with_nominal_always_succeeding_is_certified_over_every_variant_rate():
    """p0 = 1: retention is the variant's rate and its MOVER-R ends a binomial interval in the variant count. The
    issue's 0.919 (n 12, pv 0.23) is one point of a dip whose infimum is 0.9156 at n 13."""
    certificates = [certify_full_nominal_retention(n) for n in range(1, MAX_N + 1)]
    worst = min(certificates, key=lambda c: c.minimum)
    assert math.floor(worst.minimum * 1000) / 1000 == DOCUMENTED["retention-full-nominal"], worst
    assert retention_coverage(12, 1.0, 0.23) == pytest.approx(0.919, abs=5e-4)
    assert retention_coverage(12, 1.0, 0.23) >= certificates[11].minimum - 1e-12


def test_a_table_that_shows_a_dipping_n_says_so_and_names_the_exact_construction():
    note = coverage_note("midp", [6, 20, 200])
    assert note is not None and "0.912 of the time at n = 6" in note and "--interval exact" in note
    assert coverage_note("exact", [6, 20]) is None
    assert coverage_note("midp", [1, 2, 3]) is None  # mid-p holds 0.93 at n ≤ 5
    assert coverage_note("midp", [200, 500]) is None  # beyond the certified n: not claimed either way
    assert coverage_note("midp", [6], confidence=0.9) is None


def test_results_report_and_dashboard_say_where_mid_p_dips_and_exact_does_not(tmp_path):
    """Six episodes a cell (the twin protocol's): `assay results` names the dip and --interval exact prints
    Clopper–Pearson without it, pass^k cells included; the report and the dashboard API carry the same line."""
    import json

    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from assay.cli.app import app
    from assay.server import ServerConfig, create_app
    from tests.record_store import fake_store
    from tests.stats_fixtures import records

    store = fake_store(tmp_path / "s", "c", records({("a", "t@1"): "SSSSFF", ("b", "t@1"): "SFFFFF"}))
    runner = CliRunner()
    shown = runner.invoke(app, ["results", "--store", str(store)])
    assert shown.exit_code == 0 and "0.912 of the time at n = 6" in " ".join(shown.stdout.split())
    doc = json.loads(runner.invoke(app, ["results", "--store", str(store), "--json"]).stdout)
    assert doc["interval"]["method"] == "midp" and "n = 6" in doc["interval"]["coverage_note"]
    exact = runner.invoke(app, ["results", "--store", str(store), "--interval", "exact", "--pass-k", "2", "--json"])
    cells = json.loads(exact.stdout)
    assert cells["interval"] == {"method": "exact", "label": "Clopper-Pearson 95%", "coverage_note": None}
    (a,) = [r for r in cells["results"] if r["group"]["policy"] == "a"]
    assert (a["ci_low"], a["ci_high"]) == pytest.approx((stats.beta.ppf(0.025, 4, 3), stats.beta.ppf(0.975, 5, 2)))
    (cell,) = [c for c in cells["pass_k"]["cells"] if c["group"]["policy"] == "a"]
    assert cell["ci_high"] == pytest.approx(a["ci_high"] ** 2) and cells["pass_k"]["method"] == "exact"
    text = runner.invoke(app, ["results", "--store", str(store), "--interval", "exact"]).stdout
    assert "Clopper-Pearson 95%" in text and "covers only" not in text
    assert runner.invoke(app, ["results", "--store", str(store), "--interval", "wald"]).exit_code == 2
    out = tmp_path / "r.html"
    assert runner.invoke(app, ["report", "c", "--store", str(store), "-o", str(out)]).exit_code == 0
    assert "id='coverage-note'>coverage: the midp 95% interval covers only 0.912" in out.read_text()
    with TestClient(create_app(ServerConfig(store, "token", tmp_path, poll_s=0.05)),
                    base_url="http://127.0.0.1") as client:
        assert "n = 6" in client.get("/api/campaigns/c").json()["coverage_note"]
        assert 'id="coverage-note"' in client.get("/static/app.js").text


def test_mover_r_dips_where_the_search_found_it_and_the_exact_construction_holds_there():
    """Known answers of the retention grid search (docs/STATISTICS.md): MOVER-R covers 0.831 at 4 pairs (nominal
    0.05, variant 0.48, negative dependence) and 0.892 at 6 (0.7, 0.31), conditional on retention being defined;
    the Bonferroni Clopper–Pearson construction covers ≥ 0.95 at each."""
    from assay.metrics.coverage_certificate import MOVER_SEARCHED

    for n, p0, pv in ((4, 0.05, 0.48), (6, 0.7, 0.31)):
        mover = retention_coverage(n, p0, pv, "negative")
        assert mover == pytest.approx(MOVER_SEARCHED[n - 1], abs=5e-5) and mover < 0.93
        assert retention_coverage(n, p0, pv, "negative", method="exact") >= 0.95
    assert len(MOVER_SEARCHED) == 38 and min(MOVER_SEARCHED[4:]) == pytest.approx(0.8809, abs=1e-4)


def test_the_exact_retention_construction_covers_at_every_rate_on_a_grid_counting_undefined_as_no_claim():
    """Its guarantee is the union bound (each Clopper–Pearson interval at 1 − α/2); checked on a 0.05 grid at
    n ≤ 6 over every dependence: P(covered or undefined) ≥ 0.95 everywhere, and it holds the point."""
    from assay.metrics.intervals import exact_retention_interval, retention_interval
    from assay.metrics.intervals_coverage import DEPENDENCE, retention_coverage_grid

    grid = np.round(np.arange(0.05, 1.0001, 0.05), 4)
    for n in range(1, 7):
        for dependence in DEPENDENCE:
            covered = retention_coverage_grid(n, grid, np.concatenate([[0.0], grid]), dependence, method="exact",
                                              conditional=False)
            assert covered.min() >= 0.95, (n, dependence, covered.min())
    interval = retention_interval(10, 2, 0, 8, method="exact")  # 12/20 nominal, 10/20 variant
    assert interval is not None and interval.low < 10 / 12 < interval.high
    assert interval == exact_retention_interval(12, 10, 20)
    assert retention_interval(0, 0, 3, 3, method="exact") is None  # nominal never succeeded
    with pytest.raises(AssayError, match="not valid"):
        retention_interval(1, 1, 1, 1, method="wald")


def test_a_retention_table_with_few_pairs_says_mover_r_dips_and_exact_does_not():
    from assay.metrics.coverage_certificate import retention_note

    note = retention_note("mover", [4, 30])
    assert note is not None and "0.831 of the time at 4 pairs" in note and "--interval exact" in note
    assert retention_note("exact", [4, 30]) is None
    assert retention_note("mover", [45]) is None  # beyond the searched n: no claim either way


def test_results_profile_names_mover_r_s_dip_and_interval_exact_switches_retention(tmp_path):
    import json

    from typer.testing import CliRunner

    from assay.cli.app import app
    from tests.record_store import fake_store
    from tests.stats_fixtures import records

    rows = records({("a", "t@1"): "SSSSFF"}) + records({("a", "t@1"): "SSFFFF"}, variant="dim")
    store = fake_store(tmp_path / "s", "c", rows)
    runner = CliRunner()
    shown = runner.invoke(app, ["results", "--store", str(store), "--variant", "all", "--profile"],
                          env={"COLUMNS": "240"})
    assert shown.exit_code == 0, shown.output
    assert "MOVER-R's 95% interval covers as little as 0.892 of the time at 6 pairs" in " ".join(shown.stdout.split())
    document = json.loads(runner.invoke(app, ["results", "--store", str(store), "--variant", "all", "--profile",
                                              "--interval", "exact", "--json"]).stdout)
    assert document["retention_interval"] == {"method": "exact", "coverage_note": None}
    (row,) = document["retention"]
    from assay.metrics.intervals import exact_retention_interval

    exact = exact_retention_interval(4, 2, 6)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((exact.low, exact.high))
    text = runner.invoke(app, ["results", "--store", str(store), "--variant", "all", "--profile", "--interval",
                               "exact"], env={"COLUMNS": "240"}).stdout
    assert "exact: Bonferroni Clopper–Pearson" in text and "covers as little as" not in text
