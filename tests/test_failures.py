"""Failure categories on constructed episodes, attribution on paired seeds, regression diffs."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures import Category, add_sets, attribute, coverage, diff_runs
from assay.failures.categories import Categorized, signals
from assay.failures.regression import RegressionError, is_set_name
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
    ("pick-place", Outcome.TIMEOUT, "", _episode(contact=_steps(30), grasped=_steps(30)), Category.PLACEMENT_MISS),
    ("pick-place", Outcome.TIMEOUT, "",
     {**_episode(contact=_steps(30), grasped=_steps(30)), "observation.state": _stalled_state()}, Category.STAGNATION),
    ("push", Outcome.TIMEOUT, "", _episode(contact=_steps(30, 70)), Category.PLACEMENT_MISS),
    ("push", Outcome.TIMEOUT, "", _episode(), Category.APPROACH_FAILURE),
    ("reach", Outcome.TIMEOUT, "", {**_episode(), "observation.state": _stalled_state()}, Category.STAGNATION),
]


@pytest.mark.parametrize("family, outcome, reason, steps, expected", CASES,
                         ids=[f"{c[0]}-{c[4].value}" for c in CASES])
def test_each_category_fires_and_only_that_one(family, outcome, reason, steps, expected):
    found, evidence = signals(family, outcome, reason, steps)
    assert found == (expected,), evidence


def test_every_category_is_exercised():
    assert {c[4] for c in CASES} == set(Category)


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
        "vis2": ("unattributed", "none"),
        "vis3": ("unattributed", "none"),
    }
    rows = coverage(attribute(records, categories))
    assert sum(r["failures"] for r in rows) == 7
    assert {"capability": "unattributed", "confidence": "none", "failures": 2, "share": 2 / 7} in rows


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
