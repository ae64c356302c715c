"""Sim + real prediction-powered intervals: the estimate, the interval, pairing by seed, coverage and the CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import AssayError
from assay.metrics import ResultsCsvError, success_interval
from assay.metrics.ppi import PairedCounts, estimate_real, paired_counts, two_phase_interval
from assay.metrics.ppi_evidence import joint_table, simulate_ppi
from assay.metrics.trials_csv import Trial, read_trials_csv
from assay.store import Store
from tests.record_store import fake_store
from tests.stats_fixtures import records

runner = CliRunner()


def test_two_phase_estimate_by_hand_and_the_classical_interval_beside_it():
    # sim succeeds on 300 of 500 seeds; 15 real trials on sim-success seeds (14 real successes), 15 on sim-failure (1)
    e = estimate_real(PairedCounts(500, 300, (14, 15), (1, 15)), "t", "p")
    assert e.estimate == pytest.approx(0.6 * 14 / 15 + 0.4 * 1 / 15)
    assert e.classical_estimate == 0.5
    clopper = success_interval(15, 30, method="exact")
    assert (e.classical_low, e.classical_high) == (clopper.low, clopper.high)
    assert e.ci_low < e.estimate < e.ci_high
    # sim predicts real well here: the interval is narrower than the real-only one, worth more than 30 real trials
    assert e.ci_high - e.ci_low < e.classical_high - e.classical_low
    width_ratio = (e.classical_high - e.classical_low) / (e.ci_high - e.ci_low)
    assert e.effective_real_trials == pytest.approx(30 * width_ratio ** 2) and e.trials_saved > 10
    assert e == estimate_real(PairedCounts(500, 300, (14, 15), (1, 15)), "t", "p")  # seeded draws
    assert 0.0 <= e.clt_lambda <= 1.0 and e.to_dict()["counts"]["sim_rate"] == 0.6


def test_the_interval_is_the_exact_interval_when_sim_always_agrees_on_one_stratum():
    # sim succeeds everywhere: θ = a, and the interval is Clopper–Pearson of the real trials (up to the draws)
    counts = PairedCounts(1000, 1000, (7, 10), (0, 0))
    low, high = two_phase_interval(counts)
    exact = success_interval(7, 10, method="exact")
    assert low == pytest.approx(exact.low, abs=0.01) and high == pytest.approx(exact.high, abs=0.01)


def test_an_unobserved_stratum_is_unknown_not_assumed():
    # 10 real trials, all on seeds where sim succeeded (90% of sim); nothing is known of the other 10%
    e = estimate_real(PairedCounts(500, 450, (10, 10), (0, 0)))
    assert e.estimate == pytest.approx(1.0) and e.ci_high == 1.0
    assert e.ci_low <= 0.9 * success_interval(10, 10, method="exact").low + 1e-9  # b may be 0 there
    assert any("no real trial on a seed where sim failed (10.0%" in n for n in e.notes)


def test_edges_n_one_rate_zero_rate_one():
    one = estimate_real(PairedCounts(50, 25, (1, 1), (0, 0)))
    assert 0.0 <= one.ci_low <= one.estimate <= one.ci_high <= 1.0
    zero = estimate_real(PairedCounts(200, 0, (0, 0), (0, 20)))
    assert zero.estimate == 0.0 and zero.ci_low == 0.0 and zero.ci_high > 0.0
    full = estimate_real(PairedCounts(200, 200, (20, 20), (0, 0)))
    assert full.estimate == 1.0 and full.ci_high == 1.0 and full.ci_low < 1.0


def test_uninformative_sim_costs_width_and_says_so():
    # real succeeds half the time whatever sim did: splitting 40 trials into two strata only adds width
    e = estimate_real(PairedCounts(400, 200, (10, 20), (10, 20)))
    assert e.estimate == pytest.approx(0.5) and e.trials_saved < 0
    assert e.ci_high - e.ci_low > e.classical_high - e.classical_low


def test_real_trials_on_every_sim_seed_say_sim_adds_nothing():
    # the README tour's case: the reality proxy ran all 8 seeds of each cell, so each sim episode has a real trial
    every = estimate_real(PairedCounts(8, 5, (3, 5), (1, 3)))
    assert every.estimate == pytest.approx(4 / 8) == every.classical_estimate  # the strata add up to the real rate
    assert every.ci_high - every.ci_low > every.classical_high - every.classical_low and every.trials_saved < 0
    assert any("8 real trials for 8 sim episodes: no sim episode is left without a real trial" in n
               for n in every.notes)
    few = estimate_real(PairedCounts(500, 300, (14, 15), (1, 15)))
    assert not any("no sim episode is left" in n for n in few.notes)


def test_bad_counts_and_levels_are_one_line_errors():
    with pytest.raises(AssayError, match="no real trial"):
        estimate_real(PairedCounts(10, 5, (0, 0), (0, 0)))
    with pytest.raises(AssayError, match="sim counts 11 of 10"):
        estimate_real(PairedCounts(10, 11, (0, 1), (0, 0)))
    with pytest.raises(AssayError, match="real counts on seeds of sim failure: 3 of 2"):
        estimate_real(PairedCounts(10, 5, (0, 1), (3, 2)))
    with pytest.raises(AssayError, match="confidence 1.0"):
        estimate_real(PairedCounts(10, 5, (0, 1), (0, 0)), confidence=1.0)


def _trials(rows: str, prefix: str = "") -> list[Trial]:
    """'task policy seed 1/0' lines as trials."""
    out = []
    for line in rows.strip().splitlines():
        task, policy, seed, success = line.split()
        out.append(Trial(task, policy, int(seed), success == "1", f"{prefix}row"))
    return out


def test_real_trials_pair_with_the_sim_episode_of_their_seed():
    sim = _trials("\n".join(f"t@1 a {s} {int(s % 3 != 0)}" for s in range(12)))  # sim fails on seeds 0, 3, 6, 9
    real = _trials("t a 0 0\nt a 3 1\nt a 1 1\nt a 2 1\nt a 4 0")  # a task without @version names t@1
    (key, counts), = paired_counts(sim, real).items()
    assert key == ("t@1", "a")
    assert (counts.sim_episodes, counts.sim_successes) == (12, 8)
    assert counts.on_sim_failure == (1, 2) and counts.on_sim_success == (2, 3)
    with pytest.raises(AssayError, match="seed 99 have no scored sim episode"):
        paired_counts(sim, _trials("t a 99 1"))
    with pytest.raises(AssayError, match="no sim episodes of policy 'b' on task 't'"):
        paired_counts(sim, _trials("t b 0 1"))
    with pytest.raises(AssayError, match="two sim episodes of a on t@1 seed 0"):
        paired_counts(sim + sim[:1], real)


def test_trials_csv_reading_and_its_errors(tmp_path):
    path = tmp_path / "real.csv"
    path.write_text("task,policy,seed,success,note\nt@1,a,3,yes,x\nt@1,a,4,0,\n")
    assert [(t.seed, t.success) for t in read_trials_csv(path)] == [(3, True), (4, False)]
    for body, message in [("task,policy,seed\n", "missing column success"),
                          ("task,policy,seed,success\nt,a,x,1\n", "row 2: seed 'x' is not a whole number"),
                          ("task,policy,seed,success\nt,a,1,maybe\n", "row 2: success 'maybe' is not valid"),
                          ("task,policy,seed,success\nt,a,-1,1\n", "seed -1 is negative"),
                          ("task,policy,seed,success\n", "no data rows")]:
        path.write_text(body)
        with pytest.raises(ResultsCsvError, match=message):
            read_trials_csv(path)


def test_joint_table_has_the_margins_and_the_correlation():
    on_success, on_failure = joint_table(0.6, 0.5, 0.5)
    assert 0.6 * on_success + 0.4 * on_failure == pytest.approx(0.5)
    phi = (0.6 * on_success - 0.6 * 0.5) / (0.6 * 0.4 * 0.5 * 0.5) ** 0.5
    assert phi == pytest.approx(0.5)
    assert joint_table(0.5, 0.5, 0.0) == pytest.approx((0.5, 0.5))


@pytest.mark.parametrize(("rates", "bias", "rho", "n", "big_n"), [
    ((0.5,), 0.1, 0.9, 20, 200),  # a good simulator, a little optimistic
    ((0.85,), -0.1, 0.0, 10, 200),  # a simulator that says nothing, n = 10
    ((0.2, 0.8), 0.1, 0.6, 15, 100),  # two policies, correlated
])
def test_coverage_by_simulation_fast_grid(rates, bias, rho, n, big_n):
    """The fast tier of docs/STATISTICS.md's grid: 200 seeded campaigns a point, intervals from 2000 draws."""
    result = simulate_ppi(rates, bias, rho, n, big_n, campaigns=200, seed=3, draws=2000)
    assert result.ppi_coverage >= 0.95
    assert result.clt_coverage < 0.9  # the normal PPI++ interval does not hold at these n: why it is not reported


def test_joint_intervals_hold_together():
    result = simulate_ppi((0.3, 0.5, 0.7), 0.05, 0.7, 15, 100, campaigns=150, seed=5, draws=2000, joint=True)
    assert result.ppi_all_covered >= 0.95 and result.joint


def _csv(path, header: str, rows: list[str]):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_estimate_real_cli_from_a_campaign_and_from_csvs(tmp_path):
    outcomes = "".join("F" if s % 4 == 0 else "S" for s in range(40))  # sim: 30 of 40
    store = fake_store(tmp_path / "s", "sim", records({("a", "t@1"): outcomes}))
    real = _csv(tmp_path / "real.csv", "task,policy,seed,success",
                [f"t,a,{s},{0 if s % 4 == 0 or s == 6 else 1}" for s in range(0, 40, 2)])
    doc = json.loads(runner.invoke(app, ["estimate-real", "--real", str(real), "--campaign", "sim", "--store",
                                         str(store), "--json"]).stdout)
    (cell,) = doc["cells"]
    assert cell["counts"]["sim_episodes"] == 40 and cell["counts"]["real_trials"] == 20
    assert cell["counts"]["on_sim_failure"] == {"real_successes": 0, "trials": 10}
    assert cell["counts"]["on_sim_success"] == {"real_successes": 9, "trials": 10}
    assert cell["ci_low"] <= cell["estimate"] <= cell["ci_high"] and doc["level_per_cell"] == 0.95
    sim = _csv(tmp_path / "sim.csv", "task,policy,seed,success",
               [f"t@1,a,{s},{0 if s % 4 == 0 else 1}" for s in range(40)])
    from_csv = json.loads(runner.invoke(app, ["estimate-real", "--real", str(real), "--sim", str(sim),
                                              "--json"]).stdout)
    assert from_csv["cells"] == doc["cells"]
    table = runner.invoke(app, ["estimate-real", "--real", str(real), "--sim", str(sim)])
    assert table.exit_code == 0 and "real trials worth" in table.stdout and "Clopper" in table.stdout
    joint = json.loads(runner.invoke(app, ["estimate-real", "--real", str(real), "--sim", str(sim), "--joint",
                                           "--json"]).stdout)
    assert joint["level_per_cell"] == pytest.approx(0.95)  # one cell: Bonferroni changes nothing
    both = runner.invoke(app, ["estimate-real", "--real", str(real)])
    assert both.exit_code == 2 and "exactly one sim side" in both.stderr


def test_estimate_real_cli_with_counts_only_gives_the_classical_interval_and_says_why(tmp_path):
    real = _csv(tmp_path / "real.csv", "task,policy,successes,trials", ["t,a,7,10"])
    doc = json.loads(runner.invoke(app, ["estimate-real", "--real", str(real), "--json"]).stdout)
    (cell,) = doc["cells"]
    exact = success_interval(7, 10, method="exact")
    assert cell["estimate"] is None and "no pairing" in cell["reason"]
    assert (cell["classical_low"], cell["classical_high"]) == (exact.low, exact.high)


def test_estimate_real_cli_needs_one_variant_when_seeds_repeat(tmp_path):
    both = records({("a", "t@1"): "SSFF"}) + records({("a", "t@1"): "SFFF"}, variant="noisy")
    store = fake_store(tmp_path / "s", "sim", both)
    real = _csv(tmp_path / "real.csv", "task,policy,seed,success", ["t,a,0,1"])
    bad = runner.invoke(app, ["estimate-real", "--real", str(real), "--campaign", "sim", "--store", str(store)])
    assert bad.exit_code == 2 and "give --campaign sim:VARIANT" in bad.stderr
    good = runner.invoke(app, ["estimate-real", "--real", str(real), "--campaign", "sim:noisy", "--store", str(store),
                               "--json"])
    assert json.loads(good.stdout)["cells"][0]["counts"]["sim_successes"] == 1


def test_episodes_ls_writes_the_trials_csv_estimate_real_reads(tmp_path):
    """The README tour's real trials: a stand-in campaign's episodes written as task,policy,seed,success (no tour
    line wrote real_trials.csv before). Every scored episode of one variant, errors left out; --limit does not cut
    it; --outcome (a biased file) and several variants (seeds repeat) are refused in one line."""
    sim = records({("a", "t@1"): "SSSSFF", ("b", "t@1"): "SFFFFF"})
    proxy = records({("a", "t@1"): "SSSFFE", ("b", "t@1"): "SFFFFF"}, variant="gain")
    store = fake_store(tmp_path / "s", "sim", sim)
    with Store(store) as opened:
        opened.catalog.save_campaign("proxy", "hash-proxy", {"campaign": {"name": "proxy"}})
        opened.catalog.add_many([r.__class__(**{**r.__dict__, "campaign": "proxy"}) for r in proxy])
        opened.catalog.link("proxy", [(r.key, r.policy_name) for r in proxy])
    out = tmp_path / "real_trials.csv"
    written = runner.invoke(app, ["episodes", "ls", "--store", str(store), "--campaign", "proxy", "--limit", "1",
                                  "--trials-csv", str(out)])
    assert written.exit_code == 0, written.output
    assert "11 trials written to" in written.stderr and "1 error episodes left out" in written.stderr
    assert out.read_text().splitlines()[:3] == ["task,policy,seed,success", "t@1,a,0,1", "t@1,a,1,1"]
    assert [(t.policy, t.seed, t.success) for t in read_trials_csv(out)] == (
        [("a", s, s < 3) for s in range(5)] + [("b", s, s == 0) for s in range(6)])
    doc = json.loads(runner.invoke(app, ["estimate-real", "--real", str(out), "--campaign", "sim", "--store",
                                         str(store), "--json"]).stdout)
    counts = {c["policy"]: c["counts"] for c in doc["cells"]}
    assert counts["a"]["on_sim_success"] == {"real_successes": 3, "trials": 4}  # seeds 0-3: sim S, proxy SSSF
    assert counts["a"]["on_sim_failure"] == {"real_successes": 0, "trials": 1}  # seed 4 (seed 5 was an error)
    assert counts["b"]["on_sim_success"] == {"real_successes": 1, "trials": 1}
    for extra, message in ((["--campaign", "proxy", "--outcome", "success"], "would keep only those"),
                           ([], "seeds repeat across variants: pick one with --variant"),
                           (["--campaign", "proxy", "--variant", "nope"], "no episode matches")):
        refused = runner.invoke(app, ["episodes", "ls", "--store", str(store), "--trials-csv", str(tmp_path / "x.csv"),
                                      *extra])
        assert refused.exit_code == 2 and message in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()
