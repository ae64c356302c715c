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
    candidates,
    draw_demos,
    equal_budget,
    load_design,
    mine,
    probe_failures,
    region_agreement,
    select_base,
    trim_frames,
)
from assay.learning.flywheel_stats import (
    analyse,
    by_region,
    by_variant,
    extended_interval,
    paired,
    ttest_power,
    ttest_replicates,
)
from assay.spec import content_hash
from assay.store import EpisodeRecord, Outcome

SLICE = InitRegion(3, 0.0, True)  # goal x < 0: what the base saw
PRIMARY = "primary: {test: ttest, unit: replicate}\n"


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
    base = select_base(pool, Where(SLICE), 8)
    used = {r.key for r in base}
    after = max(r.episode_index for r in base)
    targeted = draw_demos(pool, base, 4, 3, target)
    assert len(targeted) == 4 and all(region.contains(r.initial_conditions["rand_vec"]) for r in targeted)
    assert not used & {r.key for r in targeted} and all(r.outcome is Outcome.SUCCESS for r in targeted)
    assert all(r.episode_index > after for r in targeted)  # the same candidates as random
    oracle = draw_demos(pool, base, 6, 3, Where(SLICE), outside=True)
    assert len(oracle) == 6 and all(r.initial_conditions["rand_vec"][3] >= 0 for r in oracle)
    random = draw_demos(pool, base, 6, 3)
    assert len(random) == 6 and all(r.episode_index > after and r.outcome is Outcome.SUCCESS for r in random)
    assert random == draw_demos(pool, base, 6, 3) != draw_demos(pool, base, 6, 4)
    # one permutation for every arm: a region's draw is the random order filtered to the region
    order = draw_demos(pool, base, len(pool), 3)
    assert targeted == [r for r in order if target.contains(r)][:4]
    assert draw_demos(pool, base, 6, 3, Where()) == random  # a target that is everywhere draws random's demos
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
    # the primary pair: random's 50 + 70 + 40 (targeted's first 3: 179); the secondary arms: the oracle's 138
    assert account["episodes"] == 3 and account["frames"] == 160
    assert account["secondary"] == {"arms": ["oracle", "ponr", "recovery"], "episodes": 3, "frames": 138, "empty": []}
    assert account["available"]["targeted"] == {"episodes": 4, "frames": 259}
    assert account["available"]["ponr"] == {"episodes": 4, "frames": 175}
    assert list(trimmed) == list(arms)
    assert [d.key for d in trimmed["ponr"]] == ["p1", "p2", "p3"]
    for name, demos in trimmed.items():
        frames = 160 if name in ("random", "targeted") else 138
        assert len(demos) == 3 and sum(len(d.actions) for d in demos) == frames, name
        assert all(len(d.observations) == len(d.actions) >= 1 for d in demos)
    assert [d.key for d in trimmed["targeted"]] == ["d", "e", "f"]  # the first ones, in order
    assert trimmed["oracle"] == arms["oracle"] and trimmed["random"] == arms["random"]  # at the budget: untouched
    # each demo keeps its share, first and last step included, rows still paired
    cut = trimmed["recovery"][0]
    assert len(cut.actions) == 46 and cut.observations[0, 0] == 0 and cut.observations[-1, 0] == 199
    assert np.array_equal(cut.actions[:, 0], cut.observations[:, 0] / 100)
    # an empty primary arm cuts the pair (and so the capped secondary arms) to nothing: every arm is the base
    nothing, none_left = equal_budget({**arms, "random": []})
    assert (none_left["episodes"], none_left["frames"]) == (0, 0) and all(d == [] for d in nothing.values())
    assert "the primary pair (targeted and random) to 0" in (budget_shortfall(none_left, 3) or "")


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
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\nextra_demos: 0\n"
                    + PRIMARY)
    with pytest.raises(AssayError, match=r"design.yaml:4: extra_demos: .*greater than or equal to 1"):
        load_design(path)
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 9, threshold: 0.0}\n" + PRIMARY)
    with pytest.raises(AssayError, match=r"design.yaml:3: slice.component"):
        load_design(path)
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\ncolour: red\n" + PRIMARY)
    with pytest.raises(AssayError, match=r"colour: unknown field"):
        load_design(path)
    with pytest.raises(AssayError, match="cannot read design file"):
        load_design(tmp_path / "missing.yaml")
    path.write_text("name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\neval: 12\n" + PRIMARY)
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
    targeted = draw_demos(pool, base, 5, 0, target)
    assert len(targeted) == 5 and {r.variant_name for r in targeted} == {GAIN}
    assert {r.variant_name for r in draw_demos(pool, base, 5, 0, training, outside=True)} == {GAIN}  # oracle
    random = draw_demos(pool, base, 28, 0)  # every success after the base's last episode, both variants
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
    head = "name: d\ntask: metaworld/push@1\n" + PRIMARY
    path.write_text(head + "variants: [{}, {control.gain: 0.5}]\nslice: {variants: [{}]}\n")
    design = load_design(path)
    assert design.slice.region() is None and design.slice.variants == ({},)
    nominal_only = FlywheelDesign(name="d", task="metaworld/push@1", slice={"component": 3, "threshold": 0.0},
                                  primary={"test": "ttest", "unit": "replicate"})
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
    in_order = [r for r in pool if r.key not in used][:40]  # the withdrawn draw: the next successes in pool order
    assert sum(r.initial_conditions["rand_vec"][3] >= 0 for r in in_order) >= 30  # the old draw: 32 of 40 uncovered
    random = draw_demos(pool, base, 200, 5)
    uncovered = sum(r.initial_conditions["rand_vec"][3] >= 0 for r in random)
    assert 80 <= uncovered <= 120  # binomial(200, 0.5): mean 100, sd 7.1
    assert not used & {r.key for r in random} and len({r.key for r in random}) == 200
    everything = draw_demos(pool, [], len(pool), 1)  # no base: every success of the pool, each once
    assert sorted(r.key for r in everything) == sorted(r.key for r in pool if r.outcome is Outcome.SUCCESS)
    assert draw_demos(pool[:50], base, 5, 1) == []  # nothing after the base's last episode


def test_targeted_draw_on_a_slice_unrelated_region_is_as_uniform_as_random():
    # a blind check on the targeted rule: a mined region that has nothing to do with the slice (the object's x,
    # where the slice is on the goal's x) must not hand the targeted arm uncovered demos. The withdrawn rule
    # ("the first unused successes in pool order") drew 160 of 160 from the uncovered half in the first run's
    # replicates; a uniform draw from the candidates inside the region gives their share, here about 0.5.
    rng = np.random.default_rng(17)
    pool = [record(i, float(g), obj_x=float(o)) for i, (g, o) in enumerate(rng.uniform(-0.1, 0.1, (400, 2)))]
    base = select_base(pool, Where(SLICE), 60)
    unrelated = Where(InitRegion(0, 0.0, False))  # object x >= 0: independent of the slice (goal x < 0)
    inside = [r for r in candidates(pool, base) if unrelated.contains(r)]
    expected = sum(r.initial_conditions["rand_vec"][3] >= 0 for r in inside) / len(inside)
    assert 0.4 < expected < 0.6
    used = {r.key for r in base}
    old = [r for r in pool if r.key not in used and unrelated.contains(r)][:40]  # the withdrawn targeted rule
    assert sum(r.initial_conditions["rand_vec"][3] >= 0 for r in old) / len(old) > 0.75  # 33 of 40
    draws = [r for seed in range(40) for r in draw_demos(pool, base, 4, 1000 + seed, unrelated)]  # 40 replicates
    assert len(draws) == 160 and all(unrelated.contains(r) and r.key not in used for r in draws)
    share = sum(r.initial_conditions["rand_vec"][3] >= 0 for r in draws) / len(draws)
    # 160 draws of 4 without replacement per replicate: sd about sqrt(0.25 / 160) = 0.04; 3 sd either side
    assert abs(share - expected) < 0.12, (share, expected)
    # the oracle draws the same way inside the uncovered part: uniform over it, not its earliest episodes
    oracle = [r for seed in range(40) for r in draw_demos(pool, base, 4, 1000 + seed, Where(SLICE), outside=True)]
    positions = sorted(r.initial_conditions["rand_vec"][3] for r in oracle)
    assert all(x >= 0 for x in positions) and 0.03 < float(np.median(positions)) < 0.07


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
    for name, design in designs.items():  # every design declares its primary endpoint (it is required)
        assert design.primary.test in ("ttest", "mcnemar"), name
    first, confirm = designs["push-goal-slice"], designs["push-goal-slice-confirm"]
    changed = {k for k, v in confirm.model_dump().items() if first.model_dump()[k] != v}
    assert changed == {"name", "replicates", "first_replicate", "primary"}  # the data are fixed the same way
    assert first.tag() == confirm.tag()
    assert (first.primary.test, confirm.primary.test) == ("mcnemar", "ttest")  # as each was declared
    # its replicates draw seed streams the first run never used
    assert confirm.first_replicate >= first.first_replicate + first.replicates


def test_a_short_arm_is_named_with_its_count_and_the_cut_every_arm_takes():
    arms = {"random": [demo("r1", 5), demo("r2", 5)], "targeted": [demo(f"t{i}", 5) for i in range(4)],
            "oracle": [demo(f"o{i}", 5) for i in range(4)], "recovery": [demo("c1", 5)]}
    _, account = equal_budget(arms)
    assert account["episodes"] == 2 and account["secondary"]["episodes"] == 1
    assert budget_shortfall(account, 4) == ("warning: arm(s) found fewer than the 4 extra demos asked (random 2, "
                                            "recovery 1); the primary pair (targeted and random) to 2 and the "
                                            "secondary arms (oracle, recovery) to 1 episodes (enlarge 'pool' or "
                                            "'probe')")
    assert budget_shortfall(account, 1) is None  # exactly the count asked is enough (the edge)
    assert budget_shortfall(account, 2) == ("warning: arm(s) found fewer than the 2 extra demos asked (recovery 1); "
                                            "the primary pair (targeted and random) to 2 and the secondary arms "
                                            "(oracle, recovery) to 1 episodes (enlarge 'pool' or 'probe')")
    _, even = equal_budget({"random": [demo("r", 5)] * 3, "targeted": [demo("t", 5)] * 3})
    assert budget_shortfall(even, 3) is None


def test_the_primary_endpoint_is_declared_with_its_test_and_unit(tmp_path):
    path = tmp_path / "design.yaml"
    head = "name: d\ntask: metaworld/push@1\nslice: {component: 3, threshold: 0.0}\n"
    path.write_text(head)
    with pytest.raises(AssayError, match=r"design.yaml:1: .*declare the primary endpoint before the run: primary: "
                                         r"\{test: ttest, unit: replicate\}"):
        load_design(path)
    path.write_text(head + "primary: {test: ttest, unit: scene}\n")
    with pytest.raises(AssayError, match=r"design.yaml:4: primary: .*test ttest with unit scene: valid are"):
        load_design(path)
    path.write_text(head + "primary: {test: wilcoxon, unit: replicate}\n")
    with pytest.raises(AssayError, match=r"design.yaml:4: primary.test: .*'ttest' or 'mcnemar'"):
        load_design(path)
    path.write_text(head + "primary: {test: mcnemar, unit: scene, alpha: 0.01}\n")
    design = load_design(path)
    assert design.primary.alpha == 0.01 and "McNemar" in design.primary.label
    path.write_text(head + "primary: {test: ttest, unit: replicate}\n")
    assert load_design(path).tag() == design.tag()  # the endpoint is analysis: it never changes the data


def test_the_primary_pair_budget_does_not_depend_on_a_short_secondary_arm():
    # golden: targeted and random find their 4 demos; the recovery arm finds 1 relabel. The withdrawn rule cut
    # every arm to 1 episode (a 1-demo vs 1-demo primary test); now the pair keeps 4 and only the secondary
    # arms are cut to 1, at most the pair's frames
    arms = {"random": [demo(f"r{i}", 50 + i) for i in range(4)], "targeted": [demo(f"t{i}", 60) for i in range(4)],
            "recovery": [demo("c1", 200)], "oracle": [demo(f"o{i}", 40) for i in range(4)]}
    trimmed, account = equal_budget(arms)
    assert (account["episodes"], account["frames"]) == (4, 206)  # random's 50 + 51 + 52 + 53 (targeted's 240)
    assert account["secondary"] == {"arms": ["oracle", "recovery"], "episodes": 1, "frames": 40, "empty": []}
    assert [len(trimmed[a]) for a in arms] == [4, 4, 1, 1]
    assert [sum(len(d.actions) for d in trimmed[a]) for a in arms] == [206, 206, 40, 40]
    alone, pair = equal_budget({"random": arms["random"], "targeted": arms["targeted"]})
    shape = {a: [(d.key, len(d.actions)) for d in trimmed[a]] for a in alone}
    assert shape == {a: [(d.key, len(d.actions)) for d in got] for a, got in alone.items()}  # as if alone
    assert (pair["episodes"], pair["frames"], pair["secondary"]) == (4, 206, None)
    # a secondary arm with more data than the pair is capped at the pair's budget (never more than random)
    rich, capped = equal_budget({"random": [demo("r", 30)], "targeted": [demo("t", 90), demo("u", 90)],
                                 "oracle": [demo("o1", 80), demo("o2", 80)]})
    assert (capped["episodes"], capped["frames"]) == (1, 30) and capped["secondary"]["frames"] == 30
    assert [len(d.actions) for d in rich["oracle"]] == [30]
    # a secondary arm that found nothing (a probe with no failure to relabel) keeps no extra data and cuts
    # nobody: the primary pair and the other secondary arms keep their budgets
    none, left = equal_budget({**arms, "recovery": []})
    assert (left["episodes"], left["frames"]) == (4, 206)
    assert left["secondary"] == {"arms": ["oracle", "recovery"], "episodes": 4, "frames": 160, "empty": ["recovery"]}
    assert [len(none[a]) for a in arms] == [4, 4, 0, 4]
    assert "left recovery with no extra data" in (budget_shortfall(left, 4) or "")
    # an empty arm of the primary pair (a mined region with no candidate) cuts the pair to 0: both arms are the
    # base, so the replicate's difference is 0 (towards no effect), and the secondary arms are capped at 0 too
    zero, account0 = equal_budget({**arms, "targeted": []})
    assert (account0["episodes"], account0["frames"]) == (0, 0)
    assert [len(zero[a]) for a in arms] == [0, 0, 0, 0]


def gain_replicates(n: int, random_gains: int) -> list[dict[str, dict[int, bool]]]:
    """``n`` replicates of 4 scenes: base solves 1, targeted 3 everywhere; random solves 2 in the first
    ``random_gains`` replicates and 1 (no gain) in the rest."""
    return [outcomes([1, 0, 0, 0], [1, 1, 0, 0] if i < random_gains else [1, 0, 0, 0], [1, 1, 1, 0])
            for i in range(n)]


def test_gain_ratio_interval_is_unbounded_when_random_gains_nothing_in_more_than_its_tail():
    # golden: a resample has no random gain iff it draws none of the k replicates where random gained, with
    # probability ((n - k) / n) ** n. n = 10, k = 3: 0.7 ** 10 = 2.82% > 2.5%: the upper side is unbounded
    # (targeted gained in every resample: +inf). k = 4: 0.6 ** 10 = 0.60%: bounded
    from assay.report.flywheel import gain_ratio_text

    resamples = 20000
    for k, chance, unbounded in ((3, 0.7**10, True), (4, 0.6**10, False)):
        gain = analyse(gain_replicates(10, k), n_resamples=resamples)["gain_ratio"]
        sd = (chance * (1 - chance) / resamples) ** 0.5
        assert abs(gain["undefined_resamples"] / resamples - chance) < 4 * sd, k
        assert gain["random_gained_nothing"] == {"targeted_gained": gain["undefined_resamples"],
                                                 "targeted_gained_nothing": 0}
        assert gain["ratio"] == pytest.approx(20 / k)  # pooled: targeted +2 per replicate, random +1 in k of 10
        assert gain["unbounded_above"] is unbounded and gain["unbounded_below"] is False
        low, high = gain["bootstrap_ci"]
        assert low is not None and 2 < low < gain["ratio"]
        assert (high is None) is unbounded and (unbounded or high > gain["ratio"])
        text = gain_ratio_text(gain)
        assert text.startswith(f"gain ratio (targeted − base) / (random − base) = {20 / k:.2f}, bootstrap 95% CI "
                               f"[{low:.2f}, ")
        assert (", ∞) (" in text) is unbounded and f"+∞ in {gain['undefined_resamples']} where targeted gained" in text
    # the first run's published interval: 307 of 10,000 resamples without a random gain, all with a targeted
    # gain, are 3.07% of them: its upper side is unbounded, [0.74, inf), not [0.73, 21.0]
    finite = list(np.linspace(0.5, 21.0, 10000 - 307))
    got = extended_interval(finite + [float("inf")] * 307)
    assert got["unbounded_above"] and got["high"] is None and got["low"] == pytest.approx(
        float(np.percentile(finite + [1e9] * 307, 2.5)))
    edge = extended_interval([1.0] * 975 + [float("inf")] * 25)  # exactly 2.5%: bounded (more than, not as many)
    assert not edge["unbounded_above"] and edge["high"] == 1.0
    neither = extended_interval([float("-inf")] * 30 + list(np.linspace(1, 2, 970)))  # neither arm gained: below
    assert neither["unbounded_below"] and neither["low"] is None and neither["high"] is not None
    assert extended_interval([float("-inf")] * 5) == {"low": None, "high": None, "below_inf": 5, "above_inf": 0,
                                                      "finite": 0, "unbounded_below": False, "unbounded_above": False}
    # both sides unbounded (the rare-gap pilot: 5968 +inf, 345 -inf of 10,000): (-inf, inf), not "no interval"
    both = [float("-inf")] * 345 + [1.0] * 3687 + [float("inf")] * 5968
    wide = extended_interval(both)
    assert wide["unbounded_below"] and wide["unbounded_above"] and wide["finite"] == 3687
    document = analyse([outcomes([1, 0], [1, 0], [1, 1]), outcomes([1, 0], [1, 0], [0, 0]),
                        outcomes([0, 0], [1, 0], [1, 0])], n_resamples=400)["gain_ratio"]
    assert document["unbounded_below"] and document["unbounded_above"]
    assert document["bootstrap_ci"] == [None, None] and "CI (−∞, ∞)" in gain_ratio_text(document)


def test_the_declared_primary_is_the_one_reported_as_primary():
    replicates = [outcomes([0, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0]),
                  outcomes([0, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 1]),
                  outcomes([0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0])]
    by_t = analyse(replicates, n_resamples=200, primary={"test": "ttest", "unit": "replicate", "alpha": 0.05})
    by_m = analyse(replicates, n_resamples=200, primary={"test": "mcnemar", "unit": "scene", "alpha": 0.05})
    assert by_t["primary"]["per_replicate"] == [0.25, 0.5, 0.0]
    assert by_t["primary"]["p"] == by_t["primary"]["replicate_ttest_p"] != by_m["primary"]["p"]
    assert by_m["primary"]["p"] == by_m["primary"]["mcnemar_p"] == pytest.approx(0.25)
    assert by_t["primary"]["mean_replicate_difference"] == pytest.approx(0.25)
    from assay.report.flywheel import endpoint_lines

    lines = endpoint_lines(by_t)
    assert lines[0].startswith("primary endpoint (declared), targeted − random: two-sided t test over the "
                               "replicate differences: mean +0.250 per scene, p = 0.225; p not below alpha 0.05")
    assert lines[1].startswith("secondary: McNemar exact") and lines[2].startswith("secondary: replicate-bootstrap")
    assert endpoint_lines(by_m)[0].startswith("primary endpoint (declared), targeted − random: McNemar exact")


def test_replicate_power_by_the_noncentral_t():
    # the confirmation's plan (docs/RESULTS.md): +0.067 at sd 0.12 over 28 replicates, power 0.81
    assert ttest_power(28, 0.067, 0.12) == pytest.approx(0.81, abs=0.01)
    assert ttest_replicates(0.067, 0.12) == 28
    assert ttest_power(1, 0.1, 0.1) != ttest_power(1, 0.1, 0.1)  # one replicate: no test (nan)
    assert ttest_power(20, 0.0, 0.1) == pytest.approx(0.05)  # no effect: the test's size


def test_a_frame_trimmed_demo_reads_the_frames_of_the_steps_it_kept(tmp_path):
    # pixel designs: trim_frames keeps evenly spaced steps, and pixel training must read those steps' frames,
    # not the first ones; a relabel reads its source episode's frames
    from assay.learning.pixel_bc import demo_frames
    from assay.store import Store
    from assay.store.video import write_video

    cut = trim_frames([demo("ep", 10), demo("ep2", 5)], 6)
    assert [list(d.step_indices()) for d in cut] == [[0, 3, 6, 9], [0, 4]]  # shares 4 and 2, first and last kept
    assert [list(d.observations[:, 0]) for d in cut] == [[0, 3, 6, 9], [0, 4]]  # the rows are those steps
    twice = trim_frames(cut[:1], 2)[0]
    assert list(twice.step_indices()) == [0, 9]  # a second cut composes with the first
    with Store(tmp_path / "store") as store:
        frames = [np.full((16, 16, 3), 20 * i, dtype=np.uint8) for i in range(10)]
        write_video(store.data_root, "ep", "front", frames, 20.0)
        got = demo_frames(store, cut[0], "front")
        assert got.shape == (4, 16, 16, 3)
        assert [round(float(f.mean()) / 20) for f in got] == [0, 3, 6, 9]
        relabel = Demo("relabel:ep", "metaworld/push@1", "h", "nominal", 0, "relabel", cut[0].observations,
                       cut[0].actions, steps=cut[0].steps)
        assert np.array_equal(demo_frames(store, relabel, "front"), got)
        with pytest.raises(Exception, match="recovery demo without camera frames"):
            demo_frames(store, Demo("r.parquet", "t", "h", "nominal", 0, "recovery", cut[0].observations,
                                    cut[0].actions), "front")


def test_summary_lines_read_a_result_written_before_declared_endpoints():
    # a store may hold a schema-2 result (no declared primary, one budget, no in_target, dropped resamples): the
    # report and CLI still print it, saying that no primary was declared in it
    from assay.report.flywheel import composition_rows, summary_lines

    analysis = analyse([outcomes([0, 0, 1, 0], [1, 0, 1, 0], [1, 1, 1, 0])] * 2, n_resamples=100)
    for key in ("declared", "p", "mean_replicate_difference"):
        del analysis["primary"][key]
    analysis["gain_ratio"] = {"ratio": 2.0, "bootstrap_ci": [0.73, 21.0], "undefined_resamples": 307}
    replicate = {"replicate": 1, "mining": {"target": "init[3] >= 0.05", "why": "w", "region": None},
                 "budget": {"episodes": 4, "frames": 237, "available": {}},
                 "composition": {"random": {"variants": {"nominal": 4}, "outside_slice": 0, "unresolved": 0}}}
    document = {"analysis": analysis, "design": {"delta": 0.1}, "replicates": [replicate],
                "power": {"episodes_per_cell": 359, "power": 0.8, "baseline": 0.7, "formula": "f",
                          "planned_pairs": 360},
                "mining": {"precision": 1.0, "recall": 0.5}, "leakage": {"contaminated": 0, "scene_overlap": 0}}
    lines = summary_lines(document)
    assert lines[0].startswith("targeted − random (no primary declared in this result): McNemar exact")
    assert lines[1] == ("secondary: gain ratio (targeted − base) / (random − base) = 2.00, bootstrap 95% CI "
                        "[0.73, 21.00] (307 resamples without a random gain left out)")
    assert "budget 4 episodes, 237 frames per extra arm; extra demos outside the slice: random 0/4" in lines[-1]
    assert composition_rows(document) == [["random", "primary pair", "4 ep, 237 frames", "0/4", "–", "nominal 4"]]
