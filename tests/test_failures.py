"""Failure categories on constructed episodes, attribution on paired seeds, regression diffs."""

from __future__ import annotations

import numpy as np
import pytest

from assay.errors import RegressionError
from assay.failures import Category, add_sets, attribute, bisect_ponr, coverage, diff_runs
from assay.failures.categories import Categorized, signals
from assay.failures.regression import is_set_name
from assay.store import EpisodeRecord, Outcome

N = 100


def _episode(**events: np.ndarray | float) -> dict[str, np.ndarray]:
    """A 100-step episode whose hand keeps moving and touches nothing, unless ``events`` say otherwise."""
    state = np.zeros((N, 39))
    state[:, 0] = np.linspace(0.0, 0.3, N)  # hand moves along x
    columns = {"observation.state": state}
    for name in ("contact", "grasped", "dropped", "collision", "unstable"):
        columns[f"info.{name}"] = np.zeros(N)
    columns["info.goal_progress"] = np.linspace(0.0, 0.2, N)
    columns["info.ee_obj_dist"] = np.full(N, 0.2)
    for name, value in events.items():
        columns[name if name.startswith(("info.", "observation")) else f"info.{name}"] = np.broadcast_to(value, (N,)).copy() \
            if np.ndim(value) == 0 else np.asarray(value)
    return columns


def _steps(start: int, stop: int | None = None) -> np.ndarray:
    out = np.zeros(N)
    out[start:stop] = 1.0
    return out


def _stalled_state() -> np.ndarray:
    state = np.zeros((N, 39))
    state[:50, 0] = np.linspace(0.0, 0.3, 50)
    state[50:, 0] = 0.3
    return state


def _no_object() -> dict[str, float]:
    return {name: np.nan for name in ("contact", "grasped", "dropped", "goal_progress", "ee_obj_dist", "lifted")}


CASES = [
    ("pick-place", Outcome.ERROR, "step 3: invalid action: contains NaN or infinity", _episode(), Category.POLICY_ERROR),
    ("pick-place", Outcome.TIMEOUT, "", _episode(unstable=_steps(60, 61)), Category.INSTABILITY),
    ("push", Outcome.ERROR, "step 7: simulator raised MujocoException: bad", _episode(), Category.INSTABILITY),
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(20), grasped=_steps(20), collision=_steps(30, 32)),
     Category.COLLISION),
    ("pick-place", Outcome.TIMEOUT, "", _episode(), Category.APPROACH_FAILURE),
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(30, 40)), Category.GRASP_FAILURE),
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(30, 60), grasped=_steps(30, 60), dropped=_steps(60, 61)),
     Category.DROP),
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(30), grasped=_steps(30), lifted=_steps(40)),
     Category.PLACEMENT_MISS),
    # Held but never lifted: not a placement miss (the object never left the table).
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(30), grasped=_steps(30), lifted=0.0), Category.LIFT_FAILURE),
    ("pick-place", Outcome.TIMEOUT, "",
     {**_episode(contact=_steps(30), grasped=_steps(30)), "observation.state": _stalled_state()}, Category.STAGNATION),
    ("push", Outcome.TIMEOUT, "", _episode(contact=_steps(30, 70)), Category.SHORT_OF_GOAL),
    ("push", Outcome.TIMEOUT, "", _episode(contact=_steps(30, 70), object_moved=0.002), Category.CONTACT_FAILURE),
    # Articulated tasks: no free object, so the object events are NaN; the joint's displacement is the evidence.
    ("open-close", Outcome.TIMEOUT, "", _episode(**_no_object(), object_moved=np.linspace(0, 0.06, N)),
     Category.SHORT_OF_GOAL),
    ("open-close", Outcome.TIMEOUT, "", _episode(**_no_object(), object_moved=0.0), Category.APPROACH_FAILURE),
    ("open-close", Outcome.TIMEOUT, "", _episode(**_no_object()), Category.UNKNOWN),
    ("push", Outcome.TIMEOUT, "", _episode(), Category.APPROACH_FAILURE),
    ("reach", Outcome.TIMEOUT, "", {**_episode(), "observation.state": _stalled_state()}, Category.STAGNATION),
    # LIBERO (events of assay.sim.libero_events; the goal progress of a still object stays flat)
    ("libero-pick-place", Outcome.TIMEOUT, "", _episode(wrong_object=_steps(30, 50), goal_progress=0.0),
     Category.WRONG_OBJECT),
    ("libero-pick-place", Outcome.TIMEOUT, "",
     _episode(contact=_steps(20), grasped=_steps(20), lifted=_steps(30), goal_progress=np.linspace(0.0, 0.6, N)),
     Category.TIMEOUT_PROGRESSING),
    ("libero-pick-place", Outcome.TIMEOUT, "", _episode(ee_obj_dist=np.linspace(0.3, 0.0, N), goal_progress=0.0),
     Category.GRASP_FAILURE),  # reached (0 m) with the fingers open: never touched, still not an approach failure
]
LIBERO = [
    (_episode(goal_progress=0.0), Category.APPROACH_FAILURE),
    (_episode(contact=_steps(20, 60), grasped=_steps(20, 60), lifted=_steps(30, 60), dropped=_steps(60, 61),
              goal_progress=0.1), Category.DROP),
    (_episode(contact=_steps(20, 60), grasped=_steps(20, 60), lifted=_steps(30), goal_progress=0.5),
     Category.PLACEMENT_MISS),
    # the second subgoal (its object never touched) is judged, not the first one's grasp and lift
    (_episode(subgoal=(np.arange(N) >= 50).astype(float), contact=_steps(10, 40), grasped=_steps(10, 40),
              lifted=_steps(20, 40), goal_progress=0.5), Category.APPROACH_FAILURE),
    # still carrying, but the progress flat: not progressing (the wrong-object contact came after its own grasp)
    (_episode(contact=_steps(20), grasped=_steps(20), lifted=_steps(30), wrong_object=_steps(40, 45),
              goal_progress=0.3), Category.PLACEMENT_MISS),
]


@pytest.mark.parametrize("family, outcome, reason, steps, expected", CASES,
                         ids=[f"{c[0]}-{c[4].value}" for c in CASES])
def test_each_category_fires_and_only_that_one(family, outcome, reason, steps, expected):
    found, evidence = signals(family, outcome, reason, steps)
    assert found == (expected,), evidence


def test_every_category_is_exercised():
    assert {c[4] for c in CASES} == set(Category)


@pytest.mark.parametrize("steps, expected", LIBERO, ids=[f"{i}-{c[1].value}" for i, c in enumerate(LIBERO)])
def test_libero_phases_read_the_last_subgoal_and_the_reach(steps, expected):
    found, evidence = signals("libero-pick-place", Outcome.TIMEOUT, "", steps)
    assert found == (expected,), evidence


def test_a_drawer_that_moved_is_not_an_approach_failure():
    """On b6a562f NaN object events were summed to 0 ("never touched"): a drawer pulled 4-10 cm was an
    approach failure. The joint displacement says it was reached and moved."""
    found, evidence = signals("open-close", Outcome.TIMEOUT, "",
                              _episode(**_no_object(), object_moved=np.linspace(0.0, 0.08, N)))
    assert found == (Category.SHORT_OF_GOAL,) and evidence["object_moved"] == pytest.approx(0.08)
    assert evidence["contact_steps"] is None  # missing, not zero


def test_success_and_missing_events_get_no_category():
    assert signals("pick-place", Outcome.SUCCESS, "", _episode()) == ((), {})
    found, evidence = signals("pick-place", Outcome.TIMEOUT, "", {"observation.state": np.zeros((5, 39))})
    assert found == () and "contact" in evidence["missing_events"]


def _record(key: str, variant: dict, outcome: Outcome, seed: int = 1, task: str = "metaworld/pick-place") -> EpisodeRecord:
    perturbations = variant.get("perturbations", [])
    name = "nominal" if not perturbations else ",".join(f"{p['factor']}={p['value']}" for p in perturbations)
    return EpisodeRecord(key=key, campaign="c", task_id=task, task_hash="h", variant_key="nominal" if not perturbations else key,
                         variant_name=name, variant=variant, policy_name="p", policy_version="1", policy_spec={}, seed=seed,
                         episode_index=0, instruction="", outcome=outcome, reason="", steps=10, total_return=0.0,
                         success_step=None, trajectory_hash="")


def _variant(axis: str, factor: str, value: object) -> dict:
    return {"perturbations": [{"axis": axis, "factor": factor, "value": value}]}


def test_attribution_on_paired_seeds():
    records = [
        _record("nom1", {}, Outcome.SUCCESS, seed=1),
        _record("vis1", _variant("visual", "light.intensity", 0.2), Outcome.TIMEOUT, seed=1),
        _record("sem1", _variant("semantic", "instruction.paraphrase", "typos"), Outcome.TIMEOUT, seed=1),
        _record("beh1", _variant("behavioral", "friction", 0.2), Outcome.TIMEOUT, seed=1),
        _record("beh1b", _variant("behavioral", "object.mass", 5.0), Outcome.TIMEOUT, seed=1),
        _record("nom2", {}, Outcome.TIMEOUT, seed=2),  # no successful twin: category evidence only
        _record("vis2", _variant("visual", "light.intensity", 0.2), Outcome.TIMEOUT, seed=2),  # twin failed too
        _record("vis3", _variant("visual", "light.intensity", 0.2), Outcome.TIMEOUT, seed=3),  # no twin, no category
    ]
    categories = {
        "beh1": Categorized(Category.DROP, (Category.DROP,), "pick-place"),
        "beh1b": Categorized(Category.PLACEMENT_MISS, (Category.PLACEMENT_MISS,), "pick-place"),
        "nom2": Categorized(Category.GRASP_FAILURE, (Category.GRASP_FAILURE,), "pick-place"),
    }
    got = {a.key: (a.capability, a.confidence) for a in attribute(records, categories)}
    assert got == {
        "vis1": ("perception", "paired"),
        "sem1": ("language_grounding", "paired"),
        "beh1": ("contact", "paired"),
        "beh1b": ("control", "paired"),
        "nom2": ("contact", "category"),
        "vis2": ("unknown", "none"),
        "vis3": ("unknown", "none"),
    }
    rows = coverage(attribute(records, categories))
    assert sum(r["failures"] for r in rows) == 7
    assert {"policy": "p", "capability": "unknown", "confidence": "none", "failures": 2, "share": 2 / 7} in rows


def test_a_perception_failure_without_a_nominal_twin_is_attributed_from_the_policys_trace():
    """A campaign with only the dark variant has no twin: on b6a562f these became ``control (category)``.
    The policy's own trace says it never saw the goal."""
    blind = Categorized(Category.SHORT_OF_GOAL, (Category.SHORT_OF_GOAL,), "push",
                        {"trace": {"detected.goal": 0.0, "detected.object": 0.0}})
    misrouted = Categorized(Category.APPROACH_FAILURE, (Category.APPROACH_FAILURE,), "push",
                            {"trace": {"skill": "door-open-v3", "skill_matches_task": 0.0, "similarity": 0.3}})
    off = Categorized(Category.SHORT_OF_GOAL, (Category.SHORT_OF_GOAL,), "push", {"trace": {"detected.goal": 1.0,
                                                                                           "error_m.goal": 0.12}})
    seeing = Categorized(Category.SHORT_OF_GOAL, (Category.SHORT_OF_GOAL,), "push", {"trace": {"detected.goal": 1.0,
                                                                                              "error_m.goal": 0.004}})
    records = [_record("dark", _variant("visual", "light.intensity", 0.1), Outcome.TIMEOUT, task="metaworld/push"),
               _record("para", _variant("semantic", "instruction.paraphrase", "indirect"), Outcome.TIMEOUT, seed=2,
                       task="metaworld/push"),
               _record("plain", {}, Outcome.TIMEOUT, seed=3, task="metaworld/push"),
               _record("cam", _variant("visual", "camera.shift", 0.1), Outcome.TIMEOUT, seed=4, task="metaworld/push"),
               _record("ok", _variant("visual", "light.intensity", 0.1), Outcome.TIMEOUT, seed=5, task="metaworld/push")]
    categories = {"dark": blind, "para": misrouted, "plain": misrouted, "cam": off, "ok": seeing}
    got = {a.key: (a.capability, a.confidence) for a in attribute(records, categories)}
    assert got == {"dark": ("perception", "trace"), "para": ("language_grounding", "trace"),
                   "plain": ("planning", "trace"), "cam": ("perception", "trace"), "ok": ("control", "category")}


def test_attribution_shares_are_per_policy():
    records = [_record("a1", {}, Outcome.TIMEOUT), _record("a2", {}, Outcome.TIMEOUT, seed=2)]
    records.append(EpisodeRecord(**{**records[0].to_dict(), "key": "b1", "policy_name": "q", "outcome": Outcome.TIMEOUT}))
    categories = {k: Categorized(Category.DROP, (Category.DROP,), "pick-place") for k in ("a1", "a2")}
    categories["b1"] = Categorized(Category.APPROACH_FAILURE, (Category.APPROACH_FAILURE,), "pick-place")
    rows = coverage(attribute(records, categories))
    assert rows == [{"policy": "p", "capability": "contact", "confidence": "category", "failures": 2, "share": 1.0},
                    {"policy": "q", "capability": "control", "confidence": "category", "failures": 1, "share": 1.0}]


def test_regression_diff_against_previous_run():
    first = diff_runs(None, {"a": True, "b": False, "c": False}, "mined")
    assert (first.fixed, first.still_failing, first.newly_failing) == (("a",), ("b", "c"), ())
    second = diff_runs({"a": True, "b": False, "c": False}, {"a": False, "b": True, "c": False}, "run 1")
    assert second.counts() == {"fixed": 1, "still_failing": 1, "newly_failing": 1, "still_passing": 0}
    assert second.newly_failing == ("a",) and second.fixed == ("b",)


@pytest.mark.parametrize("name", ["ok", "a-b_c", "x" * 64, "ok.heldout"])
def test_set_names_that_are_valid(name):
    assert is_set_name(name)


@pytest.mark.parametrize("name", ["", "bad\n", "a/b", "..", "x" * 65, "-lead", "a.b", "ok.heldout.heldout"])
def test_set_names_that_are_not(name, tmp_path):
    assert not is_set_name(name)
    with pytest.raises(RegressionError, match="is not valid"):
        add_sets(tmp_path, name, "c", [], 0.0)
    assert not (tmp_path / "regression").exists()


def test_bracket_search_survives_non_monotone_recoverability():
    """``...1110111111101...``: bisection (which assumes true-then-false) can land on the wrong side of the
    dip; the bracket search finds the last recoverable step and says the pattern was not monotone."""
    from assay.failures.ponr import bracket_search, scan_search

    pattern = "1" * 10 + "0" * 10 + "1" * 5 + "0" * 5  # recoverable at t where pattern[t] == "1"
    steps = len(pattern) - 1

    def recoverable(t: int) -> bool:
        return pattern[t] == "1"

    truth = scan_search(recoverable, steps)
    found = bracket_search(recoverable, steps, stride=5)
    assert truth.t == found.t == pattern.rindex("1") and found.interval == (found.t, found.t + 1)
    assert truth.non_monotone and found.non_monotone  # the probes at 10 and 15 saw the dip
    bisected, _ = bisect_ponr(recoverable, steps)
    assert bisected != truth.t  # what the old search answered


def test_bracket_search_edge_cases():
    from assay.failures.ponr import bracket_search

    never = bracket_search(lambda t: False, 30, stride=4)
    assert never.t is None and never.interval is None
    always = bracket_search(lambda t: True, 30, stride=4)
    assert always.t == 30 and always.interval == (30, 30) and not always.non_monotone
    one = bracket_search(lambda t: t == 0, 1, stride=1)
    assert one.t == 0 and one.interval == (0, 1)


def _init_record(key: str, policy: str, x: float, outcome: Outcome) -> EpisodeRecord:
    return EpisodeRecord(key=key, campaign="c", task_id="metaworld/push@1", task_hash="h", variant_key="nominal",
                         variant_name="nominal", variant={}, policy_name=policy, policy_version="1", policy_spec={},
                         seed=int(x * 1000), episode_index=0, instruction="", outcome=outcome, reason="", steps=10,
                         total_return=0.0, success_step=None, trajectory_hash="",
                         initial_conditions={"rand_vec": [x, 0.6, 0.02, 0.1, 0.8, 0.02]})


def test_priorities_are_per_policy_over_initial_condition_regions():
    """The policy fails where the object starts left (x < 0): the advice names that region, per policy,
    and a policy whose failures the expert cannot save is not sent to collect expert demos there first."""
    from assay.failures.ponr import PointOfNoReturn
    from assay.failures.priorities import priorities

    xs = [-0.2, -0.15, -0.1, -0.05, 0.05, 0.1, 0.15, 0.2]
    records = [_init_record(f"a{i}", "a", x, Outcome.TIMEOUT if x < 0 else Outcome.SUCCESS) for i, x in enumerate(xs)]
    records += [_init_record(f"r{i}", "random", x, Outcome.TIMEOUT) for i, x in enumerate(xs)]
    cat = Categorized(Category.SHORT_OF_GOAL, (Category.SHORT_OF_GOAL,), "push")
    categories = {r.key: cat for r in records if r.outcome is not Outcome.SUCCESS}
    ponrs = {"a0": PointOfNoReturn("a0", 5, 10, 3, "bracket", 150, True, verified=True),
             "a1": PointOfNoReturn("a1", None, 10, 3, "bracket", 150, None, verified=True),
             "r0": PointOfNoReturn("r0", 10, 10, 3, "bracket", 150, False, verified=True)}
    rows = priorities(records, categories, ponrs)
    by_policy = {p: [r for r in rows if r.policy == p] for p in ("a", "random")}
    [a] = by_policy["a"]
    assert a.region == "nominal, object x < 0.000" and (a.episodes, a.failures) == (4, 4)
    assert a.mass == 0.5 and a.recoverability == 0.5 and a.score == 0.25 and a.demos == 12
    assert a.advice.startswith("collect 12 demos of metaworld/push@1 in nominal, object x < 0.000 (a fails 4/4")
    assert "the expert recovers 1/2 searched" in a.advice
    [r] = by_policy["random"]  # fails everywhere: no region inside the cell
    assert r.region == "nominal (all initial conditions)" and r.failures == 8 and r.score == 1.0
    assert [row.policy for row in rows] == ["a", "random"]  # grouped per policy, never one mixed ranking


def test_a_priority_says_why_a_failure_has_no_category():
    """Only a failure whose events were read and matched no rule is 'uncategorized': one whose backend records no
    events says so, and one nobody mined says that."""
    from assay.failures.priorities import category_label, priorities

    records = [_init_record(f"a{i}", "a", x, Outcome.TIMEOUT) for i, x in enumerate([-0.2, -0.1, 0.1, 0.2])]
    categories = {"a0": Categorized(Category.SHORT_OF_GOAL, (Category.SHORT_OF_GOAL,), "push"),
                  "a1": Categorized(None, (), "unknown", {"missing_events": ["contact"]}),
                  "a2": Categorized(None, (), "push")}
    [row] = priorities(records, categories, {})
    assert row.categories == {"short_of_goal": 1, "no events": 1, "uncategorized": 1, "not mined": 1}
    assert category_label(None) == "not mined"
