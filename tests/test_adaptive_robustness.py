"""The robustness goal of adaptive campaigns: retention intervals, batches to the widest, a golden allocation."""

from __future__ import annotations

import math

import pytest

from assay.errors import SpecError
from assay.metrics.adaptive import Design, decide
from assay.metrics.adaptive_robustness import ALL_RETAINED, RETENTION_CAP, retention_cs, retention_fixed_n
from assay.metrics.sequential import NARROW, rate_cs
from assay.spec.loading import campaign_from_data

N = "nominal"
SOURCE = {("p", "t", N): [1.0] * 96, ("p", "t", "aa"): [1.0] * 96,
          ("p", "t", "bb"): [float(i % 2) for i in range(96)], ("p", "t", "cc"): [float(i % 4 == 0) for i in range(96)]}
DESIGN = Design("robustness", ("p",), 0.05, 0.8, 0.1, 96, 8, 0.35, "lattice")


def _rounds(source, design):
    """run_rounds' loop without a simulator: each round appends the next batch of every active cell."""
    outcomes = {cell: [] for cell in source}
    allocation = []
    while True:
        state = decide(design, outcomes)
        active = sorted(state.active)
        if not active:
            return allocation, state, outcomes
        allocation.append([cell[2] for cell in active])
        for cell in active:
            outcomes[cell] += source[cell][len(outcomes[cell]):len(outcomes[cell]) + design.batch]


def test_retention_interval_is_the_ratio_of_the_two_confidence_sequences_at_half_alpha():
    point, low, high = retention_cs([1.0] * 16, [1.0, 0.0] * 8, 0.05)
    c0, cv = rate_cs(16, 16, 0.025), rate_cs(8, 16, 0.025)
    assert point == 0.5 and low == pytest.approx(cv.low / c0.high) and high == pytest.approx(cv.high / c0.low)
    assert retention_cs([0.0] * 8, [1.0] * 8, 0.05)[2] == RETENTION_CAP  # nominal may be 0: unbounded, capped
    assert math.isnan(retention_cs([0.0] * 8, [1.0] * 8, 0.05)[0])


def test_the_next_batches_go_to_the_widest_open_retention_intervals_golden():
    allocation, state, outcomes = _rounds(SOURCE, DESIGN)
    # round 1: nothing run, every interval is [0, cap]: a tie, broken in key order (2 of 3 open variants);
    # then aa (8 of 8 retained) has the narrowest interval and waits, bb and cc run; aa becomes narrow enough
    # as the nominal cell (its denominator) grows, cc narrows at 24 episodes, bb at 40
    assert allocation == [["aa", "bb", N], ["bb", "cc", N], ["bb", "cc", N], ["bb", "cc", N], ["bb", N]]
    assert [(c.variant, c.episodes, c.reason) for c in state.cells] == [
        (N, 40, ALL_RETAINED), ("aa", 8, NARROW), ("bb", 40, NARROW), ("cc", 24, NARROW)]
    assert state.episodes_used == 112 and state.deferred == ()
    # independently: in every round, the variants that ran are the ⌈open/2⌉ widest by retention_cs
    replay = {cell: [] for cell in SOURCE}
    for ran in allocation:
        width = {}
        for key in ("aa", "bb", "cc"):
            _, low, high = retention_cs(replay[("p", "t", N)], replay[("p", "t", key)], 0.05)
            if (high - low) / 2 > 0.35 + 1e-12:
                width[key] = high - low
        widest = sorted(width, key=lambda k: (-width[k], k))[:math.ceil(len(width) / 2)]
        assert sorted(widest) == [k for k in ran if k != N]
        for cell in SOURCE:
            if cell[2] in ran:
                replay[cell] += SOURCE[cell][len(replay[cell]):len(replay[cell]) + 8]
    assert replay == outcomes


def test_the_allocation_depends_only_on_completed_batches():
    allocation, state, outcomes = _rounds(SOURCE, DESIGN)
    assert _rounds(SOURCE, DESIGN)[0] == allocation
    first = decide(DESIGN, {cell: v[:8] for cell, v in outcomes.items()})
    assert sorted(first.active) == [("p", "t", "bb"), ("p", "t", "cc"), ("p", "t", N)]
    assert first.deferred == (("p", "t", "aa"),)  # open, but the narrowest of the three: it waits
    mid = decide(DESIGN, {("p", "t", N): [1.0] * 8, ("p", "t", "aa"): [], ("p", "t", "bb"): [],
                          ("p", "t", "cc"): []})
    assert mid.deferred == (("p", "t", "cc"),)  # three open at [0, cap]: aa, bb run, cc waits
    assert "deferred" in mid.to_dict() and "deferred" not in state.to_dict()


def test_the_robustness_goal_needs_width_and_a_nominal_and_another_variant():
    base = {"name": "x", "tasks": ["metaworld/reach@1"], "policies": ["expert"]}
    with pytest.raises(SpecError, match="'robustness' needs 'width'"):
        campaign_from_data({**base, "variants": ["nominal", {"object.mass": 2.0}],
                            "adaptive": {"goal": "robustness"}}, "c.yaml")
    with pytest.raises(SpecError, match="nominal variant"):
        campaign_from_data({**base, "adaptive": {"goal": "robustness", "width": 0.2}}, "c.yaml")
    spec = campaign_from_data({**base, "variants": ["nominal", {"object.mass": 2.0}],
                               "adaptive": {"goal": "robustness", "width": 0.2}}, "c.yaml")
    assert spec.adaptive is not None and spec.adaptive.goal.value == "robustness"


ROBUST = {
    "name": "robust", "seed": 5, "tasks": ["metaworld/reach@1"], "horizon": 60, "envs_per_worker": 4,
    "policies": ["expert"],
    "variants": ["nominal", {"sweep": {"control.latency": [4], "action.noise": [0.6]}}],
    "adaptive": {"goal": "robustness", "width": 0.45, "max_episodes": 16, "batch": 4},
}


@pytest.mark.sim
@pytest.mark.slow
def test_a_real_robustness_campaign_runs_the_widest_variant_and_says_why_each_cell_stopped(tmp_path):
    from assay.metrics.adaptive import judge_for
    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.run.adaptive import load_state
    from assay.store import Store

    spec = campaign_from_data(ROBUST, "c.yaml")
    with Store(tmp_path, create=True) as store:
        run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path), judge=judge_for(spec))
        state = load_state(store, spec.name)
        ran = store.catalog.episodes(campaign="robust")
    assert state is not None and len(state["questions"]) == 2
    assert all(q["kind"] == "retention" and q["reason"] in (NARROW, "budget reached") for q in state["questions"])
    assert state["episodes_used"] == len(ran) and all(c["reason"] for c in state["cells"])
    by_key = {c["variant"]: c["episodes"] for c in state["cells"]}
    assert by_key[N] >= max(by_key.values()) and all(v % 4 == 0 for v in by_key.values())


def test_retention_fixed_n_golden() -> None:
    # n = ceil(z^2 [pv(1-pv) + R^2 p0(1-p0)] / (p0^2 w^2)), z^2 = 1.959964^2 = 3.841459 at alpha 0.05
    assert retention_fixed_n(0.05, 0.2) == 193  # 3.841459 * 2 / 0.04 = 192.07
    assert retention_fixed_n(0.05, 0.1) == 769  # 3.841459 * 2 / 0.01 = 768.29
    assert retention_fixed_n(0.05, 0.2, 0.9, 0.9) == 22  # 3.841459 * (0.18 / 0.81) / 0.04 = 21.34
    # a small nominal rate needs many episodes: R = 0.5, (0.0475 + 0.0225) / 0.01 = 7 -> 672.26
    assert retention_fixed_n(0.05, 0.2, 0.1, 0.05) == 673
    assert retention_fixed_n(0.05, 0.2, 0.01, 0.01) > 10 * retention_fixed_n(0.05, 0.2)
    assert retention_fixed_n(0.05, 5.0) == 1  # a very wide interval: 0.31 rounds up to 1
    assert retention_fixed_n(0.05, 0.2, 1.0, 1.0) == 1  # no variance at rates 1: still at least 1
    with pytest.raises(ValueError, match="planning rates"):
        retention_fixed_n(0.05, 0.2, 0.0, 0.5)
    with pytest.raises(ValueError, match="width"):
        retention_fixed_n(0.05, 0.0)


def test_the_robustness_yardstick_is_the_ratio_interval_size_per_cell() -> None:
    _, state, _ = _rounds(SOURCE, DESIGN)
    # width 0.35: 3.841459 * 2 / 0.1225 = 62.72 -> 63 per cell, four cells
    assert {c.fixed_n for c in state.cells} == {63}
    assert state.episodes_fixed == 4 * 63 == 4 * retention_fixed_n(0.05, 0.35)
