"""Retention on paired seeds against a hand-built example, and the profile per axis."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multinomial

from assay.errors import AssayError
from assay.metrics import retention_table, robustness_profile
from assay.metrics.intervals import retention_interval
from assay.metrics.intervals_coverage import paired_tables, retention_coverage
from assay.store import EpisodeRecord, Outcome


def _record(policy, variant, seed, outcome, task="t@1"):
    perturbations = [] if variant == "nominal" else [{"axis": variant.split(":")[0], "factor": variant.split(":")[1], "value": 1}]
    return EpisodeRecord(key=f"{policy}{variant}{task}{seed}", campaign="c", task_id=task, task_hash="h",
                         variant_key=variant, variant_name=variant, variant={"perturbations": perturbations},
                         policy_name=policy, policy_version="1", policy_spec={}, seed=seed, episode_index=seed,
                         instruction="", outcome=outcome, reason="", steps=1, total_return=0.0, success_step=None,
                         trajectory_hash="")


S, F, E = Outcome.SUCCESS, Outcome.FAILURE, Outcome.ERROR


def test_retention_is_computed_on_paired_seeds_only():
    records = [_record("p", "nominal", s, o) for s, o in enumerate([S, S, S, S, F, S])]
    # seed 5's variant episode is an error: that pair is dropped on both sides.
    records += [_record("p", "visual:light", s, o) for s, o in enumerate([S, F, F, S, S, E])]
    records += [_record("p", "visual:light", 9, S)]  # no nominal partner: not a pair
    (row,) = retention_table(records)
    assert row.pairs == 5
    assert (row.nominal_successes, row.variant_successes) == (4, 3)
    assert row.retention == pytest.approx(3 / 4)
    assert (row.only_nominal, row.only_variant) == (2, 1)
    assert row.p_value == pytest.approx(1.0)  # McNemar exact, 2 vs 1 discordant: two-sided p = 1
    assert row.ci_low <= row.retention <= row.ci_high


def test_retention_is_undefined_when_nominal_never_succeeds_and_profiles_pool_an_axis():
    records = [_record("p", "nominal", s, F) for s in range(3)] + [_record("p", "visual:light", s, S) for s in range(3)]
    (row,) = retention_table(records)
    assert row.retention is None and row.ci_low is None
    records = [_record("q", "nominal", s, S) for s in range(4)]
    records += [_record("q", "visual:light", s, o) for s, o in enumerate([S, S, F, F])]
    records += [_record("q", "visual:camera", s, o) for s, o in enumerate([S, S, S, F])]
    records += [_record("q", "semantic:instruction", s, o) for s, o in enumerate([F, F, F, F])]
    profile = {p.axis: p for p in robustness_profile(retention_table(records))}
    assert profile["visual"].retention == pytest.approx(5 / 8)
    assert profile["visual"].worst_variant == "visual:light" and profile["visual"].worst_retention == 0.5
    assert profile["semantic"].retention == 0.0


def test_retention_needs_nominal():
    with pytest.raises(AssayError, match="add 'nominal' to the variants"):
        retention_table([_record("p", "visual:light", 0, S)])


def test_retention_without_discordant_pairs_is_not_a_point():
    # 4/6 at nominal and 4/6 under the variant on the same seeds: retention 1, but six pairs
    # cannot say it is exactly 1 (a bootstrap of pairs said [1.00, 1.00]).
    outcomes = [S, S, S, S, F, F]
    records = [_record("p", "nominal", s, o) for s, o in enumerate(outcomes)]
    records += [_record("p", "visual:light", s, o) for s, o in enumerate(outcomes)]
    (row,) = retention_table(records)
    assert row.retention == 1.0 and (row.only_nominal, row.only_variant) == (0, 0)
    assert row.ci_low < 0.8 and row.ci_high > 1.2
    # Eight of eight on both sides: still an interval, holding the observed 1.
    records = [_record("p", v, s, S) for v in ("nominal", "visual:light") for s in range(8)]
    (row,) = retention_table(records)
    assert row.ci_low < 0.9 and row.ci_high >= 1.0


def test_retention_interval_coverage_computed_exactly():
    # Every paired table of n pairs weighted by its multinomial probability; coverage given that
    # retention is defined (nominal succeeded at least once).
    for cells in ((0.6, 0.1, 0.1, 0.2), (0.5, 0.3, 0.05, 0.15), (0.3, 0.3, 0.1, 0.3)):
        n = 10
        tables = paired_tables(n)
        truth = (cells[0] + cells[2]) / (cells[0] + cells[1])
        pmf = multinomial.pmf(tables, n, cells)
        intervals = [retention_interval(*t) for t in tables.tolist()]
        defined = np.array([i is not None for i in intervals])
        inside = np.array([i is not None and i.low <= truth <= i.high for i in intervals])
        assert pmf[inside].sum() / pmf[defined].sum() >= 0.93


@pytest.mark.parametrize("n", [6, 10, 20, 24, 30])
@pytest.mark.parametrize(("p_nominal", "p_variant", "dependence"), [
    (1.0, 0.9, "nested"),  # nominal always succeeds, the variant fails 10%: the Jeffreys draws covered 0.876 at n 20
    (1.0, 0.99, "nested"), (1.0, 0.1, "nested"), (0.99, 0.95, "positive"), (0.95, 0.99, "independent"),
    (0.9, 0.3, "nested"), (0.5, 0.45, "nested"), (0.3, 0.6, "independent"), (0.1, 0.05, "independent"),
    (0.05, 0.5, "positive"), (0.7, 0.3, "negative"),
])
def test_retention_interval_covers_at_the_edges_exactly(n, p_nominal, p_variant, dependence):
    assert retention_coverage(n, p_nominal, p_variant, dependence) >= 0.93


def test_retention_interval_golden_edges():
    # 20 of 20 on both sides: the lower end is the variant's own mid-p lower end (nominal has no variance),
    # ½ p^20 = 0.025, so a true retention of 0.9 is inside (it was [0.900, 1.109] and missed it).
    interval = retention_interval(20, 0, 0, 0)
    assert interval.low == pytest.approx(0.05 ** (1 / 20), abs=1e-9) and interval.high > 1.0
    # the point estimate is always inside, and an interval is never a point
    for table in paired_tables(8).tolist():
        got = retention_interval(*table)
        if got is None:
            assert table[0] + table[1] == 0
            continue
        point = (table[0] + table[2]) / (table[0] + table[1])
        assert got.low <= point <= got.high and got.high > got.low
