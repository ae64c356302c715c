"""Rates and intervals against hand-computed values."""

from __future__ import annotations

import math

import pytest

from assay.errors import AssayError
from assay.metrics import rate_table, success_interval
from assay.store import EpisodeRecord, Outcome


def _wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k, n", [(0, 10), (7, 10), (10, 10), (1, 20), (50, 100)])
def test_wilson_matches_the_formula(k, n):
    interval = success_interval(k, n, method="wilson")
    low, high = _wilson(k, n)
    assert interval.low == pytest.approx(max(low, 0.0), abs=1e-9)
    assert interval.high == pytest.approx(min(high, 1.0), abs=1e-9)


def test_no_trials_has_no_interval():
    assert success_interval(0, 0) is None


def _record(policy, outcome, i):
    return EpisodeRecord(key=f"{policy}{i}", campaign="c", task_id="t@1", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name=policy, policy_version="1", policy_spec={},
                         seed=i, episode_index=i, instruction="", outcome=outcome, reason="", steps=10 * (i + 1),
                         total_return=1.0, success_step=None, trajectory_hash="")


def test_errors_are_excluded_from_the_denominator_and_reported_beside_it():
    outcomes = [Outcome.SUCCESS, Outcome.SUCCESS, Outcome.TIMEOUT, Outcome.ERROR, Outcome.FAILURE]
    rows = rate_table([_record("a", o, i) for i, o in enumerate(outcomes)], by=("policy",))
    (row,) = rows
    assert (row.episodes, row.scored, row.successes, row.errors, row.timeouts, row.failures) == (5, 4, 2, 1, 1, 1)
    assert row.rate == 0.5
    assert row.mean_steps == pytest.approx((10 + 20 + 30 + 50) / 4)
    with pytest.raises(AssayError, match="valid: policy, task, variant, campaign"):
        rate_table([], by=("colour",))
