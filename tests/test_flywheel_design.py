"""The flywheel design's data selection and analysis on synthetic records (no simulator, no training).

Costs well under a second: every function here is pure over records, demos and outcome tables.
"""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import AssayError
from assay.failures.priorities import InitRegion, failure_region, split_initial_conditions
from assay.learning.data import Demo
from assay.learning.flywheel_design import (
    FlywheelDesign,
    Where,
    agreement,
    budget_shortfall,
    equal_budget,
    load_design,
    mine,
    probe_failures,
    region_agreement,
    select_base,
    select_demos,
    select_random,
    trim_frames,
)
from assay.learning.flywheel_stats import analyse, by_region, by_variant, paired
from assay.spec import content_hash
from assay.store import EpisodeRecord, Outcome

SLICE = InitRegion(3, 0.0, True)  # goal x < 0: what the base saw


def record(i: int, goal_x: float, outcome: Outcome = Outcome.SUCCESS, campaign: str = "pool",
           obj_x: float | None = None, variant: str = "nominal") -> EpisodeRecord:
    rng = np.random.default_rng(i)
    obj = float(rng.uniform(-0.1, 0.1)) if obj_x is None else obj_x
    nominal = variant == "nominal"
    return EpisodeRecord(key=f"{campaign}{i}" + ("" if nominal else f"-{variant}"), campaign=campaign,
                         task_id="metaworld/push@1", task_hash="h",
                         variant_key="nominal" if nominal else f"key-{variant}", variant_name=variant, variant={},
                         policy_name="p", policy_version="1", policy_spec={}, seed=1000 + i, episode_index=i,
                         instruction="push", outcome=outcome, reason="",
                         steps=50, total_return=0.0, success_step=None, trajectory_hash="t",
                         initial_conditions={"rand_vec": [obj, 0.65, 0.02, goal_x, 0.85, 0.01]})


def pool_records(n: int = 40) -> list[EpisodeRecord]:
    xs = np.linspace(-0.1, 0.1, n)
    order = np.random.default_rng(0).permutation(n)  # pool order unrelated to position
    out = [record(i, float(xs[j])) for i, j in enumerate(order)]
    out[5] = record(5, out[5].initial_conditions["rand_vec"][3], Outcome.TIMEOUT)  # the expert failed once
    return out


def demo(key: str, frames: int, goal_x: float = 0.0) -> Demo:
    steps = np.arange(frames, dtype=np.float64)[:, None]
    return Demo(key, "metaworld/push@1", "h", "nominal", 0, "episode", np.hstack([steps, steps * 0 + goal_x]),
                np.hstack([steps, -steps]) / 100)


def test_base_takes_the_first_successes_inside_the_slice_only():
    pool = pool_records()
    base = select_base(pool, Where(SLICE), 8)
    assert len(base) == 8 and all(r.initial_conditions["rand_vec"][3] < 0 for r in base)
    assert [r.episode_index for r in base] == sorted(r.episode_index for r in base)
    expected = [r for r in sorted(pool, key=lambda r: r.episode_index)
                if r.outcome is Outcome.SUCCESS and r.initial_conditions["rand_vec"][3] < 0][:8]
    assert base == expected and all(r.key != "pool5" for r in base)


def test_targeted_arm_picks_the_failing_region_from_failure_records_alone():
    # probe: the base fails where goal x >= 0.03 (plus one stray failure inside the slice and one success
    # outside); the object position is noise the mining must not choose
    xs = np.linspace(-0.1, 0.1, 40)
    probe = [record(i, float(x), Outcome.TIMEOUT if x >= 0.03 else Outcome.SUCCESS, "probe") for i, x in enumerate(xs)]
    probe[3] = record(3, float(xs[3]), Outcome.FAILURE, "probe")
    probe[-1] = record(39, float(xs[-1]), Outcome.SUCCESS, "probe")
    target, account = mine(probe)
    region = target.region
    assert target.variants is None and account["chosen_variants"] is None  # one variant: no variant targeting
    assert region is not None and region.component == 3 and not region.below
    assert 0.02 < region.threshold < 0.04
    assert account["probe_failures"] == sum(r.outcome is not Outcome.SUCCESS for r in probe) == 14
    assert account["inside"]["failures"] == 13 and account["outside"] == {"episodes": 26, "failures": 1}
    assert account["variants"] == {"nominal": {"failures": 14, "episodes": 40, "rate": 14 / 40}}
    pool = pool_records()
    used = {r.key for r in select_base(pool, Where(SLICE), 8)}
    targeted = select_demos(pool, used, target, 6)
    assert len(targeted) == 6 and all(region.contains(r.initial_conditions["rand_vec"]) for r in targeted)
    assert not used & {r.key for r in targeted} and all(r.outcome is Outcome.SUCCESS for r in targeted)
    oracle = select_demos(pool, used, Where(SLICE), 6, outside=True)
    assert all(r.initial_conditions["rand_vec"][3] >= 0 for r in oracle)
    base = select_base(pool, Where(SLICE), 8)
    random = select_random(pool, base, 6, seed=3)
    after = max(r.episode_index for r in base)
    assert len(random) == 6 and all(r.episode_index > after and r.outcome is Outcome.SUCCESS for r in random)
    assert random == select_random(pool, base, 6, seed=3) != select_random(pool, base, 6, seed=4)
    assert [r.key for r in probe_failures(probe)][:2] == ["probe3", "probe26"]


def test_mining_without_separable_failures_targets_everywhere():
    probe = [record(i, x, Outcome.SUCCESS, "probe") for i, x in enumerate(np.linspace(-0.1, 0.1, 10))]
    target, account = mine(probe)
    assert target == Where() and account["region"] is None and "anywhere" in account["why"]
    failing = [record(i, x, Outcome.TIMEOUT, "probe") for i, x in enumerate(np.linspace(-0.1, 0.1, 10))]
    assert mine(failing)[0] == Where()


def test_gini_region_is_not_fooled_by_two_failures_at_an_extreme():
    # 12 failures at goal x in [0.0, 0.05) and two at the far right; the largest gap in failure rate picks the
    # extreme pair, the impurity criterion the bulk of the failures
    xs = np.linspace(-0.1, 0.1, 41)
    probe = [record(i, float(x), Outcome.TIMEOUT if 0.0 <= x < 0.05 or x > 0.094 else Outcome.SUCCESS, "probe",
                    obj_x=0.0) for i, x in enumerate(xs)]
    label, _ = split_initial_conditions(probe)
    region = failure_region(probe)
    assert region is not None and region.component == 3 and not region.below and -0.01 < region.threshold < 0.01
    assert label != region.label


def test_region_agreement_precision_and_recall():
    truth = InitRegion(3, 0.0, False)  # uncovered: goal x >= 0
    mined = InitRegion(3, 0.05, False)
    scenes = [[0, 0, 0, x, 0, 0] for x in (-0.08, -0.02, 0.01, 0.03, 0.06, 0.09)]
    got = region_agreement(mined, truth, scenes)
    assert got == {"scenes": 6, "uncovered": 4, "mined": 2, "both": 2, "precision": 1.0, "recall": 0.5}
    everywhere = region_agreement(None, truth, scenes)
    assert everywhere["precision"] == pytest.approx(4 / 6) and everywhere["recall"] == 1.0


def test_budgets_are_equal_in_episodes_and_frames():
    arms = {"random": [demo("a", 50), demo("b", 70), demo("c", 40)],
            "targeted": [demo("d", 60), demo("e", 64), demo("f", 55), demo("g", 80)],  # one more episode
            "recovery": [demo("r1", 200), demo("r2", 200), demo("r3", 200)],  # relabels: whole failing episodes
            "ponr": [demo("p1", 40), demo("p2", 60), demo("p3", 45), demo("p4", 30)],  # partial recoveries
            "oracle": [demo("o1", 45), demo("o2", 46), demo("o3", 47)]}
    trimmed, account = equal_budget(arms)
    assert account["episodes"] == 3 and account["frames"] == 138  # the oracle's 45 + 46 + 47 (ponr's first 3: 145)
    assert account["available"]["targeted"] == {"episodes": 4, "frames": 259}
    assert account["available"]["ponr"] == {"episodes": 4, "frames": 175}
    assert set(trimmed) == {"random", "targeted", "recovery", "ponr", "oracle"}
    assert [d.key for d in trimmed["ponr"]] == ["p1", "p2", "p3"]
    for name, demos in trimmed.items():
        assert len(demos) == 3 and sum(len(d.actions) for d in demos) == 138, name
        assert all(len(d.observations) == len(d.actions) >= 1 for d in demos)
    assert [d.key for d in trimmed["targeted"]] == ["d", "e", "f"]  # the first ones, in order
    assert trimmed["oracle"] == arms["oracle"]  # already at the budget: untouched
    # each demo keeps its share, first and last step included, rows still paired
    cut = trimmed["recovery"][0]
    assert len(cut.actions) == 46 and cut.observations[0, 0] == 0 and cut.observations[-1, 0] == 199
    assert np.array_equal(cut.actions[:, 0], cut.observations[:, 0] / 100)
    with pytest.raises(AssayError, match="oracle found no data"):
        equal_budget({**arms, "oracle": []})


def test_trim_frames_hits_the_budget_exactly():
    demos = [demo("a", 7), demo("b", 1), demo("c", 13)]
    for frames in (3, 4, 10, 20, 21):
        cut = trim_frames(demos, frames)
        assert sum(len(d.actions) for d in cut) == frames and all(len(d.actions) >= 1 for d in cut)
    with pytest.raises(AssayError, match="cannot trim"):
        trim_frames(demos, 2)


def outcomes(base: list[int], random: list[int], targeted: list[int]) -> dict[str, dict[int, bool]]:
    return {arm: {seed: bool(v) for seed, v in enumerate(values)}
            for arm, values in (("base", base), ("random", random), ("targeted", targeted))}


def test_analysis_golden_case():
    replicates = [outcomes([0, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0]),  # targeted-only 1
                  outcomes([0, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 1])]  # targeted-only 2
    result = analyse(replicates, n_resamples=500)
    primary = result["primary"]
    assert (primary["pairs"], primary["arm_only"], primary["against_only"]) == (8, 3, 0)
    assert primary["difference"] == pytest.approx(3 / 8) and primary["mcnemar_p"] == pytest.approx(0.25)
    assert primary["per_replicate"] == [0.25, 0.5]
    # bootstrap over two replicates: every resample's difference is 0.25, 0.375 or 0.5
    low, high = primary["bootstrap_ci"]
    assert low == pytest.approx(0.25) and high == pytest.approx(0.5)
    assert result["rates"]["targeted"]["successes"] == 7 and result["rates"]["base"]["successes"] == 2
    # pooled: base 2/8, random 4/8, targeted 7/8 -> (7 - 2) / (4 - 2)
    assert result["gain_ratio"]["ratio"] == pytest.approx(2.5) and result["gain_ratio"]["undefined_resamples"] == 0
    assert result == analyse(replicates, n_resamples=500)  # deterministic
    assert result["against_random"]["base"]["difference"] == pytest.approx(-2 / 8)


def test_analysis_edge_cases():
    same = [outcomes([0, 1], [0, 1], [0, 1])] * 3  # nothing differs: no ratio, a degenerate CI, no t test
    result = analyse(same, n_resamples=200)
    assert result["primary"]["difference"] == 0 and result["primary"]["mcnemar_p"] == 1.0
    assert result["primary"]["bootstrap_ci"] == [0.0, 0.0] and result["primary"]["replicate_ttest_p"] is None
    assert result["gain_ratio"]["ratio"] is None and result["gain_ratio"]["bootstrap_ci"] is None
    assert result["gain_ratio"]["undefined_resamples"] == 200
    one = analyse([outcomes([0], [0], [1])], n_resamples=100)  # n = 1 replicate, one pair
    assert one["primary"]["pairs"] == 1 and one["primary"]["replicate_ttest_p"] is None
    assert paired([outcomes([0], [1], [0])], "targeted", "random")["difference"] == -1.0
    regions = by_region([outcomes([0, 1], [1, 1], [1, 0])], [{0: True, 1: False}])
    assert regions["slice"]["random"]["successes"] == 1 and regions["uncovered"]["targeted"]["trials"] == 1


def test_design_file_errors_name_the_line_and_field(tmp_path):
    path = tmp_path / "design.yaml"
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\nextra_demos: 0\n")
    with pytest.raises(AssayError, match=r"design.yaml:4: extra_demos: .*greater than or equal to 1"):
        load_design(path)
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 9, threshold: 0.0}\n")
    with pytest.raises(AssayError, match=r"design.yaml:3: slice.component"):
        load_design(path)
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\ncolour: red\n")
    with pytest.raises(AssayError, match=r"colour: unknown field"):
        load_design(path)
    with pytest.raises(AssayError, match="cannot read design file"):
        load_design(tmp_path / "missing.yaml")
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\neval: 12\n")
    design = load_design(path)
    assert design.eval_episodes == 12 and design.slice.region() == SLICE
    assert design.tag() == load_design(path).tag()


GAIN = "control.gain=0.5"


def variant_probe(failing: dict[str, int], per_variant: int = 8) -> list[EpisodeRecord]:
    """``per_variant`` probe episodes in each variant, the first ``failing[name]`` of them timing out."""
    xs = np.linspace(-0.1, 0.1, per_variant)
    return [record(i, float(x), Outcome.TIMEOUT if i < failing[name] else Outcome.SUCCESS, "probe", variant=name)
            for name in failing for i, x in enumerate(xs)]


def variant_pool(n: int = 20) -> list[EpisodeRecord]:
    xs = np.linspace(-0.1, 0.1, n)
    return [record(i, float(x), variant=name) for name in ("nominal", GAIN) for i, x in enumerate(xs)]


def test_targeted_arm_picks_the_failing_variant_from_failure_records_alone():
    # golden: the gain variant fails 8/8, nominal 1/8; nothing tells mine() which variant the base saw
    target, account = mine(variant_probe({"nominal": 1, GAIN: 8}))
    assert target.variants == frozenset({f"key-{GAIN}"}) and target.names == (GAIN,)
    assert account["chosen_variants"] == [GAIN]
    assert account["variants"] == {GAIN: {"failures": 8, "episodes": 8, "rate": 1.0},
                                   "nominal": {"failures": 1, "episodes": 8, "rate": 0.125}}
    assert target.region is None and account["region"] is None  # inside the variant everything fails: no split
    assert f"{GAIN} 8/8 failing" in account["why"] and "nominal 1/8" in account["why"]
    assert target.label == f"variant {GAIN}"
    pool = variant_pool()
    training = Where(None, frozenset({"nominal"}), ("nominal",))  # the base saw nominal only
    base = select_base(pool, training, 6)
    assert len(base) == 6 and {r.variant_name for r in base} == {"nominal"}
    used = {r.key for r in base}
    targeted = select_demos(pool, used, target, 5)
    assert len(targeted) == 5 and {r.variant_name for r in targeted} == {GAIN}
    assert {r.variant_name for r in select_demos(pool, used, training, 5, outside=True)} == {GAIN}  # oracle
    random = select_random(pool, base, 28, seed=0)  # every success after the base's last episode, both variants
    assert sorted((r.episode_index, r.variant_name) for r in random) == [
        (i, name) for i in range(6, 20) for name in sorted(("nominal", GAIN))]
    # precision and recall of the mined variant against the variant the base never saw: both 1
    scenes = variant_pool(4)
    got = agreement([target.contains(r) for r in scenes], [not training.contains(r) for r in scenes])
    assert (got["precision"], got["recall"], got["both"]) == (1.0, 1.0, 4)


def test_variant_mining_ties_and_no_failures_target_every_variant():
    target, account = mine(variant_probe({"nominal": 4, GAIN: 4}))
    assert target.variants is None and account["chosen_variants"] is None
    assert "every variant fails at the same rate (control.gain=0.5 4/8, nominal 4/8)" in account["why"]
    # the region is then mined over both variants: the first 4 of each (goal x < 0) fail
    assert target.region is not None and target.region.component == 3 and target.region.below
    none, _ = mine(variant_probe({"nominal": 0, GAIN: 0}))
    assert none == Where()
    # three variants, two tie at the top: both are chosen
    three, why = mine(variant_probe({"nominal": 1, GAIN: 6, "control.gain=2.0": 6}))
    assert three.names == ("control.gain=0.5", "control.gain=2.0") and why["chosen_variants"] == list(three.names)


def test_variant_mining_then_splits_inside_the_chosen_variant():
    # the gain variant fails only at goal x >= 0; nominal never: variant first, then the region within it
    probe = [record(i, float(x), Outcome.TIMEOUT if x >= 0 else Outcome.SUCCESS, "probe", variant=GAIN)
             for i, x in enumerate(np.linspace(-0.1, 0.1, 10))]
    probe += [record(i, float(x), Outcome.SUCCESS, "probe") for i, x in enumerate(np.linspace(-0.1, 0.1, 10))]
    target, account = mine(probe)
    assert target.names == (GAIN,) and target.region is not None and not target.region.below
    assert account["inside"] == {"episodes": 5, "failures": 5} and account["outside"] == {"episodes": 5, "failures": 0}
    assert target.contains(record(0, 0.05, variant=GAIN)) and not target.contains(record(0, 0.05))
    assert not target.contains(record(0, -0.05, variant=GAIN))


def test_by_variant_golden_case():
    replicates = [{"base": {"n|1": True, "g|1": False, "g|2": False},
                   "random": {"n|1": True, "g|1": False, "g|2": True},
                   "targeted": {"n|1": True, "g|1": True, "g|2": True}}]
    where = [{"n|1": "nominal", "g|1": GAIN, "g|2": GAIN}]
    got = by_variant(replicates, where)
    assert got["nominal"]["rates"]["base"]["successes"] == 1 and got[GAIN]["rates"]["base"]["trials"] == 2
    assert got[GAIN]["rates"]["targeted"]["successes"] == 2
    versus = got[GAIN]["against_random"]["targeted"]
    assert versus["arm_only"] == 1 and versus["pairs"] == 2
    assert got["nominal"]["against_random"]["targeted"]["difference"] == 0


def test_design_variants_and_variant_slices(tmp_path):
    path = tmp_path / "design.yaml"
    head = "name: d\ntask: metaworld/push@1\n"
    path.write_text(head + "variants: [{}, {control.gain: 0.5}]\nslice: {variants: [{}]}\n")
    design = load_design(path)
    assert design.slice.region() is None and design.slice.variants == ({},)
    nominal_only = FlywheelDesign(name="d", task="metaworld/push@1", slice={"component": 3, "threshold": 0.0})
    # a nominal-only, region-only design keeps the tag it had before variants existed (its runs are reused)
    assert nominal_only.tag() == content_hash({"task": "metaworld/push@1", "slice": {"component": 3, "threshold": 0.0,
                                               "below": True}, "horizon": None, "base": 20, "extra": 6, "pool": 100,
                                               "probe": 40, "epochs": 100, "hidden": [256, 256]}, length=8)
    assert design.tag() != nominal_only.tag()
    path.write_text(head + "variants: [{}, {control.gain: 0.5}]\nslice: {variants: [{control.gain: 2.0}]}\n")
    with pytest.raises(AssayError, match=r"slice.variants: \{\"control.gain\":2.0\} is not one of the design's"):
        load_design(path)
    path.write_text(head + "slice: {below: true}\n")
    with pytest.raises(AssayError, match="a slice is a region"):
        load_design(path)
    path.write_text(head + "slice: {component: 3}\n")
    with pytest.raises(AssayError, match="component and threshold together"):
        load_design(path)
    path.write_text(head + "variants: [{}, {}]\nslice: {component: 3, threshold: 0.0}\n")
    with pytest.raises(AssayError, match="listed twice"):
        load_design(path)


def test_random_arm_is_not_drawn_toward_the_part_the_base_skipped():
    # the base takes the first successes inside the slice (goal x < 0), so the pool's leftover early episodes
    # are all outside it: "the next successes in pool order" made the random arm the oracle (every one of its
    # demos uncovered). A random draw must see the slice and the rest as the evaluation does: blind check on a
    # pool whose positions are uniform on [-0.1, 0.1], half of them uncovered.
    xs = np.random.default_rng(11).uniform(-0.1, 0.1, 600)
    pool = [record(i, float(x)) for i, x in enumerate(xs)]
    base = select_base(pool, Where(SLICE), 40)
    used = {r.key for r in base}
    in_order = select_demos(pool, used, None, 40)
    assert sum(r.initial_conditions["rand_vec"][3] >= 0 for r in in_order) >= 30  # the old draw: 32 of 40 uncovered
    random = select_random(pool, base, 200, seed=5)
    uncovered = sum(r.initial_conditions["rand_vec"][3] >= 0 for r in random)
    assert 80 <= uncovered <= 120  # binomial(200, 0.5): mean 100, sd 7.1
    assert not used & {r.key for r in random} and len({r.key for r in random}) == 200
    everything = select_random(pool, [], len(pool), seed=1)  # no base: every success of the pool, each once
    assert sorted(r.key for r in everything) == sorted(r.key for r in pool if r.outcome is Outcome.SUCCESS)
    assert select_random(pool[:50], base, 5, seed=1) == []  # nothing after the base's last episode


def test_replicate_line_says_how_many_extra_demos_lie_outside_the_slice():
    from assay.report.flywheel import _composition_text

    composition = {"random": {"variants": {"nominal": 3, GAIN: 1}, "outside_slice": 1, "unresolved": 0},
                   "targeted": {"variants": {GAIN: 4}, "outside_slice": 4, "unresolved": 0},
                   "ponr": {"variants": {GAIN: 2}, "outside_slice": 0, "unresolved": 2}}  # PoNR demos: not resolvable
    assert _composition_text(composition) == "; extra demos outside the slice: random 1/4, targeted 4/4"
    assert _composition_text(None) == "" == _composition_text({"ponr": composition["ponr"]})


def test_every_example_design_loads_and_the_confirmatory_run_only_adds_replicates():
    from pathlib import Path

    designs = {p.stem: load_design(p) for p in sorted(Path("examples/flywheel").glob("*.yaml"))}
    assert {"push-goal-slice", "push-goal-slice-confirm", "push-gain-variant-slice"} <= set(designs)
    first, confirm = designs["push-goal-slice"], designs["push-goal-slice-confirm"]
    changed = {k for k, v in confirm.model_dump().items() if first.model_dump()[k] != v}
    assert changed == {"name", "replicates", "first_replicate"}
    # its replicates draw seed streams the first run never used
    assert confirm.first_replicate >= first.first_replicate + first.replicates


def test_a_short_arm_is_named_with_its_count_and_the_cut_every_arm_takes():
    arms = {"random": [demo("r1", 5), demo("r2", 5)], "targeted": [demo(f"t{i}", 5) for i in range(4)],
            "oracle": [demo(f"o{i}", 5) for i in range(4)], "recovery": [demo("c1", 5)]}
    _, account = equal_budget(arms)
    assert account["episodes"] == 1
    assert budget_shortfall(account, 4) == ("warning: arm(s) found fewer than the 4 extra demos asked (random 2, "
                                            "recovery 1); every arm is cut to 1 (enlarge 'pool' or 'probe')")
    assert budget_shortfall(account, 1) is None  # exactly the count asked is enough (the edge)
    assert budget_shortfall(account, 2) == ("warning: arm(s) found fewer than the 2 extra demos asked (recovery 1); "
                                            "every arm is cut to 1 (enlarge 'pool' or 'probe')")
    _, even = equal_budget({"random": [demo("r", 5)] * 3, "targeted": [demo("t", 5)] * 3})
    assert budget_shortfall(even, 3) is None
