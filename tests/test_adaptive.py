"""Adaptive campaigns: decisions from completed batches, allocation, determinism, resume, fixed-n unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from assay.errors import SpecError
from assay.metrics.adaptive import RANKED, YARDSTICKS, Design, decide, interval_fixed_n, judge_for
from assay.metrics.adaptive_power import equal_power_view
from assay.metrics.sequential import BUDGET, DECIDED, NARROW, NO_DIFFERENCE
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.run.adaptive import load_state
from assay.spec.loading import campaign_from_data
from assay.store import Store

N = "nominal"


def _design(goal: str, policies=("a", "b"), **kw) -> Design:
    base = dict(alpha=0.05, power=0.8, delta=0.2, max_episodes=64, batch=8, width=None, method="lattice")
    base.update(kw)
    return Design(goal, tuple(policies), **base)  # type: ignore[arg-type]


def test_compare_stops_at_the_first_look_that_decides_and_only_completed_batches_count():
    a, b = [1.0] * 24, [0.0] * 24
    state = decide(_design("compare"), {("a", "t", N): a[:16], ("b", "t", N): b[:16]})
    (q,) = state.questions
    assert q.reason == DECIDED and q.episodes == 16 and q.p_value <= 0.05  # 8:0 is not enough, 16:0 is
    assert state.active == () and state.episodes_used == 32
    # a half batch after the last look changes nothing: the same question, same stop
    partial = decide(_design("compare"), {("a", "t", N): a[:20], ("b", "t", N): b[:20]})
    assert partial.questions == state.questions
    # after one batch nothing is decided yet: both cells stay active
    early = decide(_design("compare"), {("a", "t", N): a[:8], ("b", "t", N): b[:8]})
    assert early.questions[0].reason is None and sorted(early.active) == [("a", "t", N), ("b", "t", N)]


def test_compare_errors_leave_the_pairing_and_budget_and_futility_reasons():
    rng = np.random.default_rng(0)
    a = list((rng.random(64) < 0.5).astype(float))
    b = list((rng.random(64) < 0.5).astype(float))
    a[3] = float("nan")  # an error episode is not a failure: its pair is left out
    state = decide(_design("compare", delta=0.05), {("a", "t", N): a, ("b", "t", N): b})
    assert state.questions[0].reason == BUDGET and state.questions[0].episodes == 64
    same = [1.0] * 64
    futile = decide(_design("compare", delta=0.3, max_episodes=64), {("a", "t", N): same, ("b", "t", N): same})
    assert futile.questions[0].reason == NO_DIFFERENCE
    assert [c.reason for c in futile.cells] == [NO_DIFFERENCE, NO_DIFFERENCE]


def test_rank_sends_the_next_batches_only_to_policies_whose_order_is_open():
    top, mid1, mid2 = [1.0] * 32, [0.0] * 32, [0.0] * 32
    mid1 = [float(i % 4 == 0) for i in range(32)]
    mid2 = [float(i % 4 == 2) for i in range(32)]  # the same rate as mid1, never on the same seed
    outcomes = {("top", "t", N): top[:24], ("m1", "t", N): mid1[:24], ("m2", "t", N): mid2[:24]}
    state = decide(_design("rank", ("top", "m1", "m2")), outcomes)
    by = {q.policies: q for q in state.questions}
    assert by[("top", "m1")].reason == DECIDED and by[("top", "m2")].reason == DECIDED
    assert by[("m1", "m2")].reason is None
    assert sorted(state.active) == [("m1", "t", N), ("m2", "t", N)]  # top is resolved against both: it stops
    top_cell = next(c for c in state.cells if c.policy == "top")
    assert top_cell.reason == RANKED
    # the Bonferroni level: 3 pairs at alpha / 3, the yardstick uses it too
    from assay.metrics.sequential import fixed_n_pairs
    assert top_cell.fixed_n == fixed_n_pairs(0.05 / 3, 0.8, 0.2)


def test_interval_goal_stops_each_cell_when_its_interval_is_narrow_enough():
    design = _design("interval", ("a", "b"), width=0.15, max_episodes=200)
    state = decide(design, {("a", "t", N): [1.0] * 200, ("b", "t", N): [float(i % 2) for i in range(200)]})
    a, b = state.questions
    assert a.reason == NARROW and a.episodes < b.episodes  # an extreme rate narrows sooner
    assert (a.high - a.low) / 2 <= 0.15
    assert b.reason in (NARROW, BUDGET)
    assert interval_fixed_n(0.05, 0.1) == 97  # 1.96² · ¼ / 0.01, rounded up


def test_spec_errors_are_one_line():
    base = {"name": "x", "tasks": ["metaworld/reach@1"], "policies": ["expert", "random"]}
    with pytest.raises(SpecError, match="needs 'width'"):
        campaign_from_data({**base, "adaptive": {"goal": "interval"}}, "c.yaml")
    with pytest.raises(SpecError, match="not in the campaign"):
        campaign_from_data({**base, "adaptive": {"goal": "compare", "policies": ["expert", "zero"]}}, "c.yaml")
    with pytest.raises(SpecError, match="exactly 2 policies"):
        campaign_from_data({**base, "policies": ["expert", "random", "zero"], "adaptive": {"goal": "compare"}},
                           "c.yaml")
    with pytest.raises(SpecError, match="differ"):
        campaign_from_data({**base, "episodes": 5, "adaptive": {"goal": "compare", "max_episodes": 8}}, "c.yaml")


def test_a_fixed_n_campaign_hashes_and_dumps_exactly_as_before():
    spec = campaign_from_data({"name": "fixed", "seed": 5, "episodes": 3, "tasks": ["metaworld/reach@1"],
                               "policies": ["expert", "random"], "horizon": 40}, "c.yaml")
    assert spec.content_hash() == "89254420f3171ba2"  # computed on main before adaptive campaigns existed
    # The one change since: unset cameras are left out of the dump (``[]`` now means "no camera", issue 38);
    # everything else dumps byte for byte as before.
    assert "cameras" not in spec.dump()
    dumped = json.dumps({**spec.dump(), "cameras": []}, sort_keys=True).encode()
    assert hashlib.sha256(dumped).hexdigest() == "8e4a9bf0de59eabebf9694a4eba577175c17149b093595522a8ed17987a036fe"
    assert "adaptive" not in spec.dump()


# ---------------------------------------------------------------- real runs (Meta-World reach, short horizon)

ADAPTIVE = {
    "name": "adapt", "seed": 11, "tasks": ["metaworld/reach@1"], "horizon": 60, "envs_per_worker": 4,
    "policies": ["expert", {"name": "shaky", "builtin": "degraded-expert", "params": {"action_noise": 1.5}}],
    "adaptive": {"goal": "compare", "delta": 0.3, "max_episodes": 16, "batch": 4},
}


class _Killed(Exception):
    pass


class _KillAfter:
    """Executor wrapper that dies after ``n`` records, mid-round (like a kill -9 of the driver)."""

    def __init__(self, inner, n: int) -> None:
        self.inner, self.n = inner, n

    def run(self, batches):
        for record in self.inner.run(batches):
            yield record
            self.n -= 1
            if self.n == 0:
                raise _Killed


def _run(root: Path, executor, data=ADAPTIVE):
    spec = campaign_from_data(data, "c.yaml")
    with Store(root, create=True) as store:
        run_campaign(prepare_campaign(spec), store, executor, judge=judge_for(spec))
        keys = store.catalog.existing_keys(j.key for j in prepare_campaign(spec).jobs)
        return load_state(store, spec.name), sorted(keys)


@pytest.mark.sim
def test_adaptive_run_resumes_after_a_kill_mid_batch_to_the_same_result(tmp_path):
    clean, clean_keys = _run(tmp_path / "clean", InlineExecutor(tmp_path / "clean"))
    assert clean["questions"][0]["reason"] in (DECIDED, NO_DIFFERENCE, BUDGET)
    assert clean["episodes_used"] == len(clean_keys) and clean["episodes_used"] % 4 == 0
    root = tmp_path / "killed"
    with pytest.raises(_Killed):
        _run(root, _KillAfter(InlineExecutor(root), 6))  # round 1 has 8 jobs: dies in the middle of round 2's batch
    resumed, keys = _run(root, InlineExecutor(root))
    assert resumed == clean and keys == clean_keys
    _assert_adaptive_is_reported(tmp_path / "clean", clean)


def _assert_adaptive_is_reported(root: Path, state: dict) -> None:
    """results, compare and leaderboard (--json and tables) and the HTML report carry the sequential
    answer of an adaptive campaign and say that fixed-n p-values are not valid after optional stopping."""
    from typer.testing import CliRunner

    from assay.cli.app import app

    runner = CliRunner()
    base = ["--store", str(root), "--campaign", "adapt"]
    for command in (["results"], ["compare", "expert", "shaky"], ["leaderboard"]):
        shown = runner.invoke(app, [*command, *base, "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["adaptive"] == state, command
        view = json.loads(shown.stdout)["adaptive_equal_power"]
        assert view == equal_power_view(state)
        table = runner.invoke(app, [*command, *base], env={"COLUMNS": "240"})
        assert table.exit_code == 0, table.output
        assert "invalid after optional stopping" in table.output
        # savings are read at equal power first; the requested power's yardstick beside it
        assert (f"episodes used {state['episodes_used']} against {view['fixed_equal_power']} for the exact fixed-n "
                "McNemar design of the power this cap") in " ".join(table.output.split())
        assert f"{view['fixed_requested']} episodes): {view['saved_requested']:.0%}" in " ".join(table.output.split())
        assert f"({YARDSTICKS[state['design']['goal']]}" in table.output
    out = root / "report.html"
    made = runner.invoke(app, ["report", "adapt", "--store", str(root), "-o", str(out)])
    assert made.exit_code == 0, made.output
    html = out.read_text()
    assert "Adaptive stopping" in html and "not valid after optional stopping" in html
    assert f"({YARDSTICKS[state['design']['goal']]}" in html and "saved at equal power and α" in html
    question = state["questions"][0]
    assert question["reason"] in html


@pytest.mark.sim
@pytest.mark.slow
def test_adaptive_stopping_is_the_same_on_one_and_two_workers_and_inline(tmp_path):
    inline = _run(tmp_path / "inline", InlineExecutor(tmp_path / "inline"))
    one = _run(tmp_path / "one", LocalExecutor(tmp_path / "one", 1))
    two = _run(tmp_path / "two", LocalExecutor(tmp_path / "two", 2))
    assert inline == one == two


def test_run_campaign_needs_a_judge_for_an_adaptive_campaign(tmp_path):
    spec = campaign_from_data(ADAPTIVE, "c.yaml")
    with Store(tmp_path, create=True) as store, pytest.raises(SpecError, match="judge"):
        run_campaign(prepare_campaign(spec), store, InlineExecutor(tmp_path))
