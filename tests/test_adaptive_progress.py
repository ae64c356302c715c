"""Adaptive campaigns on the continuous progress endpoint: the betting rule, its simulated error rates,
the spec switch, a real Meta-World run, and the success endpoint unchanged byte for byte."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from assay.errors import SpecError
from assay.metrics.adaptive import Design, decide, judge_for
from assay.metrics.sequential import BUDGET, DECIDED, NARROW, NO_DIFFERENCE, mean_cs_path, mean_p_path
from assay.metrics.sequential_scores import draw_scores, scores_compare_stop, simulate_scores
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.run.adaptive import load_state
from assay.spec.loading import campaign_from_data
from assay.store import Store

N = "nominal"


def _design(goal: str, policies=("a", "b"), endpoint: str = "progress", **kw) -> Design:
    base = dict(alpha=0.05, power=0.8, delta=0.2, max_episodes=64, batch=8, width=None, method="lattice")
    base.update(kw)
    return Design(goal, tuple(policies), **base, endpoint=endpoint)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mean", "concentration"), [(0.5, 2.0), (0.3, 2.0), (0.5, 0.5), (0.8, 8.0)])
def test_type_one_error_of_the_score_rule_is_at_most_alpha(mean, concentration):
    sim = simulate_scores(mean, mean, campaigns=1000, seed=7, alpha=0.05, delta=0.1, max_pairs=200,
                          concentration=concentration)
    assert sim.rejected <= 0.05
    assert sim.futile + sim.budget + sim.rejected == pytest.approx(1.0)


def test_a_large_difference_stops_early_and_in_the_right_direction():
    sim = simulate_scores(0.8, 0.4, campaigns=1000, seed=3, alpha=0.05, delta=0.1, max_pairs=200)
    assert sim.rejected == 1.0 and sim.wrong_sign == 0.0
    assert sim.mean_pairs < 40 and sim.fixed_n == 391 and sim.saved > 0.9  # 26 pairs on average (seed 3)
    # a difference below delta with low-variance scores stops for futility, far before the budget
    close = simulate_scores(0.5, 0.5, campaigns=200, seed=4, delta=0.1, max_pairs=200, concentration=20.0)
    assert close.futile == 1.0 and close.mean_pairs < 120


def test_a_decision_is_the_p_value_crossing_alpha_and_the_interval_leaving_zero():
    a, b = draw_scores(0.6, 0.45, 40, 96, seed=11)
    looks = list(range(8, 97, 8))
    for row in range(40):
        one = scores_compare_stop(a[row], b[row], delta=0.1, max_pairs=96, looks=looks)
        d = (a[row] - b[row] + 1) / 2
        p = mean_p_path(d, 0.5, 0.05, looks=looks)[0]
        low, high = mean_cs_path(d, 0.05, looks=looks)
        assert one is not None
        k = looks.index(one.pairs)
        if one.reason == DECIDED:  # p ≤ α when 0 has left the interval (reported one grid step wider: it touches 0)
            assert p[k] <= 0.05 and (2 * low[0, k] - 1 >= -1e-9 or 2 * high[0, k] - 1 <= 1e-9)
            assert (p[:k] > 0.05).all()
        else:
            assert one.reason in (NO_DIFFERENCE, BUDGET) and p[k] > 0.05


def test_progress_decisions_on_golden_scores():
    good, bad = [0.9] * 64, [0.1] * 64
    state = decide(_design("compare"), {("a", "t", N): good[:8], ("b", "t", N): bad[:8]})
    (q,) = state.questions
    assert q.reason is None  # 8 pairs at a difference of 0.8 are not yet enough
    state = decide(_design("compare"), {("a", "t", N): good[:16], ("b", "t", N): bad[:16]})
    (q,) = state.questions
    assert q.reason == DECIDED and q.episodes == 16 and q.p_value <= 0.05 and q.low > 0
    assert (q.a_only, q.b_only) == (16, 0) and q.estimate == pytest.approx(0.8)
    same = [0.4, 0.6] * 32
    futile = decide(_design("compare", delta=0.3), {("a", "t", N): same, ("b", "t", N): same})
    assert futile.questions[0].reason == NO_DIFFERENCE and futile.questions[0].a_only == 0
    # binary scores on the success endpoint still use the discordant-pair test: 8:0 is not enough there either
    interval = decide(_design("interval", width=0.15, max_episodes=200), {("a", "t", N): [0.5] * 200})
    assert interval.questions[0].reason == NARROW and (interval.questions[0].high - interval.questions[0].low) <= 0.3
    assert decide(_design("compare"), {("a", "t", N): good[:16], ("b", "t", N): bad[:16]}).to_dict()[
        "design"]["endpoint"] == "progress"  # type: ignore[index]


@pytest.mark.sim
def test_the_success_endpoint_writes_and_hashes_exactly_as_before():
    """Hashes computed on main before the progress endpoint existed (same outcomes, same designs)."""
    from tests.test_adaptive import ADAPTIVE

    spec = campaign_from_data(ADAPTIVE, "c.yaml")
    assert spec.content_hash() == "8ea2f92a894cc66b"
    assert "cameras" not in spec.dump()  # unset cameras are left out since [] means "no camera" (issue 38)
    assert hashlib.sha256(json.dumps({**spec.dump(), "cameras": []}, sort_keys=True).encode()).hexdigest() == (
        "0c399e3250e6c747ba5fab2518cd00c56cd3d1054fcc8c0fd118a626493ec082")
    rng = np.random.default_rng(3)
    out = {(p, "t", N): list((rng.random(48) < r).astype(float)) for p, r in (("a", .9), ("b", .5), ("c", .45))}
    expected = {"compare": "ac598704e9dd3affe1dfc8627c22ec62409dbd7a13778a148b3a1a8576fd21f7",
                "rank": "76e602fd688188fdcf1ce2dca317eeba3a0cf5c12285d526a6f408add175ef96",
                "interval": "6d4b58ca4b9aa95cb14e16093912053525ced83ffd6dbec85e0691df0a757753"}
    for goal, digest in expected.items():
        pol = ("a", "b") if goal == "compare" else ("a", "b", "c")
        d = Design(goal, pol, 0.05, 0.8, 0.2, 48, 8, 0.15 if goal == "interval" else None, "lattice")
        state = decide(d, {k: v for k, v in out.items() if k[0] in pol})
        assert hashlib.sha256(json.dumps(state.to_dict(), indent=2, sort_keys=True).encode()).hexdigest() == digest


def test_a_bad_endpoint_is_one_line_naming_the_valid_ones():
    base = {"name": "x", "tasks": ["metaworld/push@1"], "policies": ["expert", "random"]}
    with pytest.raises(SpecError, match="endpoint") as err:
        campaign_from_data({**base, "adaptive": {"goal": "compare", "endpoint": "reward"}}, "c.yaml")
    assert "'success'" in str(err.value) and "'progress'" in str(err.value) and "\n" not in str(err.value)
    spec = campaign_from_data({**base, "adaptive": {"goal": "compare", "endpoint": "progress"}}, "c.yaml")
    assert spec.dump()["adaptive"]["endpoint"] == "progress"


def test_progress_is_refused_before_running_on_a_task_without_a_progress_score(tmp_path):
    spec = campaign_from_data({"name": "g", "tasks": ["gymnasium/Pendulum-v1"],
                               "policies": ["random", {"name": "r2", "builtin": "random", "version": "r2"}],
                               "adaptive": {"goal": "compare", "endpoint": "progress", "max_episodes": 8,
                                            "batch": 4}}, "c.yaml")
    with Store(tmp_path, create=True) as store, pytest.raises(SpecError, match="valid endpoints: success, progress"):
        run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path), judge=judge_for(spec))
    assert store.catalog.existing_keys(j.key for j in prepare_campaign(spec).jobs) == set()


PROGRESS = {
    "name": "prog", "seed": 3, "tasks": ["metaworld/push@1"], "horizon": 80, "envs_per_worker": 4,
    "policies": ["expert", "random"],
    "adaptive": {"goal": "compare", "endpoint": "progress", "delta": 0.3, "max_episodes": 16, "batch": 4},
}


@pytest.mark.sim
@pytest.mark.slow
def test_a_real_meta_world_progress_campaign_says_why_each_cell_stopped(tmp_path):
    spec = campaign_from_data(PROGRESS, "c.yaml")
    with Store(tmp_path, create=True) as store:
        run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path), judge=judge_for(spec))
        state = load_state(store, spec.name)
        ran = store.catalog.episodes(campaign="prog")
    assert state is not None and state["design"]["endpoint"] == "progress"
    (q,) = state["questions"]
    assert q["reason"] in (DECIDED, NO_DIFFERENCE, BUDGET) and q["episodes"] % 4 == 0
    assert [c["reason"] for c in state["cells"]] == [q["reason"]] * 2
    assert state["episodes_used"] == len(ran) == 2 * q["episodes"]
    assert -1.0 <= q["low"] <= q["estimate"] <= q["high"] <= 1.0


def test_the_report_names_the_test_that_judged_a_progress_campaign():
    from types import SimpleNamespace

    from assay.report.html import _adaptive

    design = {"goal": "compare", "method": "lattice", "alpha": 0.05, "power": 0.8, "delta": 0.2, "batch": 8,
              "max_episodes": 48}
    question = {"task": "metaworld/push@1", "policies": ["a", "b"], "kind": "compare", "episodes": 16,
                "reason": "decided", "estimate": 0.3, "low": 0.1, "high": 0.5, "p_value": 0.003}
    state = {"design": design, "questions": [question], "episodes_used": 32, "episodes_fixed": 192, "saved": 0.83}
    success = _adaptive(SimpleNamespace(adaptive=state))  # type: ignore[arg-type]
    progress = _adaptive(SimpleNamespace(adaptive={**state, "design": {**design, "endpoint": "progress"}}))  # type: ignore[arg-type]
    assert "lattice test" in success and "betting" not in success
    assert "progress score, betting confidence sequence" in progress and "lattice" not in progress
