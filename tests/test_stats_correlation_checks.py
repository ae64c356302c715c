"""The correlation report's own weakness: k, Fisher z, drop-one leverage, permutation p and its floor, MMRV switch."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from assay.errors import AssayError
from assay.metrics import RateEntry, correlate
from assay.metrics.correlation import MmrvConvention, correlation, mmrv, task_checks
from assay.metrics.correlation_checks import fisher_interval, permutation_p


def _checks(real, sim):
    policies = [f"p{i}" for i in range(len(real))]
    return task_checks(policies, real, sim, correlation("pearson", real, sim)[0])


def test_three_policies_can_never_be_significant_the_floor_is_one_sixth():
    c = _checks([0.1, 0.5, 0.9], [0.2, 0.4, 0.8])
    assert c.k == 3
    assert c.permutation_p == pytest.approx(1 / 6) and c.permutation_floor == pytest.approx(1 / 6)
    assert c.permutation_mode == "exact"
    assert c.fisher_low is None and c.fisher_reason == "undefined: Fisher z needs at least 4 policies, got 3"
    # every 2-policy subset is perfectly correlated: leverage [1, 1], while r itself is below 1
    lev = c.leverage["pearson"]
    assert (lev.low, lev.high, lev.undefined_subsets) == (pytest.approx(1.0), pytest.approx(1.0), 0)
    # reversed sim order: every other assignment correlates better, p = 1
    assert permutation_p([0.1, 0.5, 0.9], [0.8, 0.4, 0.2])[0] == pytest.approx(1.0)


def test_four_policies_by_hand():
    real, sim = [0.1, 0.4, 0.6, 0.9], [0.2, 0.3, 0.7, 0.6]
    r = float(np.corrcoef(real, sim)[0, 1])
    c = _checks(real, sim)
    # Fisher z by hand: tanh(atanh(r) ± 1.959964 / sqrt(1))
    z = math.atanh(r)
    assert c.fisher_low == pytest.approx(math.tanh(z - 1.959964), abs=1e-6)
    assert c.fisher_high == pytest.approx(math.tanh(z + 1.959964), abs=1e-6)
    assert (round(c.fisher_low, 4), round(c.fisher_high, 4)) == (-0.6444, 0.9964)
    # permutations: 3 of the 24 assignments reach r (identity, and two that order the sim even better)
    count = sum(np.corrcoef(real, [sim[i] for i in perm])[0, 1] >= r - 1e-12
                for perm in itertools.permutations(range(4)))
    assert count == 3 and c.permutation_p == pytest.approx(3 / 24) and c.permutation_floor == pytest.approx(1 / 24)
    drops = [float(np.corrcoef(np.delete(real, i), np.delete(sim, i))[0, 1]) for i in range(4)]
    assert c.leverage["pearson"].low == pytest.approx(min(drops))
    assert c.leverage["pearson"].high == pytest.approx(max(drops))
    assert c.most_influential == "p0"


def test_one_outlier_policy_carries_the_correlation():
    real, sim = [0.1, 0.2, 0.3, 0.4, 0.9], [0.15, 0.1, 0.25, 0.2, 0.95]
    c = _checks(real, sim)
    assert c.most_influential == "p4"
    assert c.leverage["pearson"].low == pytest.approx(0.6)  # without the outlier r drops from 0.97 to 0.6
    assert c.permutation_p == pytest.approx(5 / 120)


def test_edges_of_the_checks():
    assert fisher_interval(1.0, 5) == (1.0, 1.0, None)
    assert fisher_interval(None, 5)[2] == "undefined: Pearson r is undefined"
    p, floor, mode = permutation_p([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    assert p is None and floor is None and mode.startswith("undefined")
    c = _checks([0.1, 0.9], [0.2, 0.8])  # two policies: no drop-one subsets
    assert c.leverage["pearson"].low is None and c.permutation_p == pytest.approx(0.5)
    # ten policies: sampled, seeded, never below 1 / (1 + permutations)
    real = list(np.linspace(0.05, 0.95, 10))
    p1, floor10, mode10 = permutation_p(real, real, seed=3, permutations=2000)
    assert mode10 == "sampled" and p1 == pytest.approx(1 / 2001) and floor10 == pytest.approx(1 / math.factorial(10))
    again = permutation_p(real, real[::-1], seed=3, permutations=2000)
    assert permutation_p(real, real[::-1], seed=3, permutations=2000) == again


def test_mmrv_convention_switch_by_hand():
    real, sim = [0.9, 0.1, 0.5], [0.5, 0.5, 0.2]
    assert mmrv(real, sim) == pytest.approx(0.4)  # SIMPLER's published form, the default
    assert mmrv(real, sim, MmrvConvention(ties=">")) == pytest.approx((0.8 + 0.4 + 0.4) / 3)
    # sim-gap weighting: i=1 violates with j=0 (gap 0) and j=2 (gap 0.3); i=2 with j=1 (0.3)
    assert mmrv(real, sim, MmrvConvention(weight="sim")) == pytest.approx((0 + 0.3 + 0.3) / 3)
    with pytest.raises(AssayError, match="valid: <, >"):
        MmrvConvention(ties="<=")
    with pytest.raises(AssayError, match="valid: real, sim"):
        MmrvConvention(weight="both")


def test_report_carries_checks_and_the_default_figures_do_not_move():
    def entries(rates):
        return [RateEntry("t@1", p, r, int(r * 20), 20, i + 2) for i, (p, r) in enumerate(rates.items())]
    real = entries({"a": 0.9, "b": 0.5, "c": 0.1, "d": 0.3})
    sim = entries({"a": 0.85, "b": 0.6, "c": 0.05, "d": 0.2})
    default = correlate(real, sim, n_resamples=200)
    explicit = correlate(real, sim, n_resamples=200, convention=MmrvConvention("real", "<"))
    assert default.tasks[0].stats == explicit.tasks[0].stats
    other = correlate(real, sim, n_resamples=200, convention=MmrvConvention("sim", ">"))
    assert other.tasks[0].stats["pearson"] == default.tasks[0].stats["pearson"]
    doc = default.to_dict()
    checks = doc["tasks"][0]["checks"]
    assert checks["k"] == 4 and checks["permutation_floor"] == pytest.approx(1 / 24)
    assert doc["mmrv_convention"] == {"weight": "real", "ties": "<"}


def test_correlate_command_prints_the_checks_and_takes_the_convention(tmp_path):
    from typer.testing import CliRunner

    from assay.cli.app import app

    real, sim = tmp_path / "real.csv", tmp_path / "sim.csv"
    real.write_text("task,policy,successes,trials\nt,a,18,20\nt,b,10,20\nt,c,2,20\n")
    sim.write_text("task,policy,successes,trials\nt,a,10,20\nt,b,10,20\nt,c,4,20\n")
    runner = CliRunner()
    base = ["correlate", "--real", str(real), "--sim", str(sim), "--resamples", "200"]
    out = runner.invoke(app, base)
    assert out.exit_code == 0, out.output
    assert "floor 1/k!" in out.output and "0.167" in out.output and "Fisher z needs at least 4" in out.output
    default = json.loads(runner.invoke(app, [*base, "--json"]).stdout)
    flipped = json.loads(runner.invoke(app, [*base, "--json", "--mmrv-ties", ">"]).stdout)
    # sim ties a and b: '<' charges b (gap 0.4 to a), '>' charges a (gap 0.4 to b): same here by symmetry,
    # but c (sim 0.2, real 0.1) keeps its place, so only the tie moves
    assert default["tasks"][0]["stats"]["mmrv"]["value"] == pytest.approx(0.4 / 3)
    assert flipped["tasks"][0]["stats"]["mmrv"]["value"] == pytest.approx(0.4 / 3)
    assert flipped["mmrv_convention"]["ties"] == ">"
    bad = runner.invoke(app, [*base, "--mmrv-weight", "both"])
    assert bad.exit_code == 2 and "valid: real, sim" in bad.output
