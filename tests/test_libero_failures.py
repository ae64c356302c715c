"""LIBERO failure mining on golden episodes: the scripted expert with one injected fault each, known answers.

Three tasks (LIBERO-Object's soup into the basket, LIBERO-Spatial's bowl onto the plate, LIBERO-10's two
objects into the basket); each fault of ``tests.failure_policies.LiberoFaultyExpert`` (gripper disabled, its
command's sign inverted, an early release, a release short of the target, a hover, a freeze, the hand driven into
the table, another object picked, and the plain expert cut short) has the category it must get, and the events behind it
are checked: what the fault does (a drop is one ``dropped`` step, the slam a ``collision``, the other
object ``wrong_object``) and what it does not (the expert's success has no drop, collision or wrong
object and ends at ``goal_progress`` 1). One campaign runs a fault end to end: the store, ``assay failures
mine``, attribution, priorities and the point of no return.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from assay.failures.attribution import attribute
from assay.failures.categories import Categorized, Category, family_of, signals
from assay.policies.protocol import PolicyContext
from assay.sim import default_registry, make_env
from assay.store import Outcome
from tests.failure_policies import LiberoFaultyExpert

pytestmark = [pytest.mark.libero, pytest.mark.sim, pytest.mark.slow]

REGISTRY = default_registry()
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
BOWL = "libero/spatial/pick_up_the_black_bowl_next_to_the_plate_and_place_it_on_the_plate@2"
BOTH = "libero/10/LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket@2"
# task -> (fault, steps, the object `wrong` picks instead, the category it must get, the capability)
GOLDEN = {
    SOUP: [("none", 160, None, None, None),
           ("no_grip", 160, None, Category.GRASP_FAILURE, "contact"),
           # the gripper's sign flipped: the closed hand presses on the can (both fingertips touch it), then
           # opens where it should close: held by nothing, so a grasp failure and not a lift failure
           ("inverted_gripper", 160, None, Category.GRASP_FAILURE, "contact"),
           ("drop", 160, None, Category.DROP, "contact"),
           ("short", 160, None, Category.PLACEMENT_MISS, "control"),
           ("hover", 90, None, Category.APPROACH_FAILURE, "control"),
           ("freeze", 60, None, Category.STAGNATION, "control"),
           ("slam", 120, None, Category.COLLISION, "contact"),
           ("wrong", 140, "cream_cheese_1", Category.WRONG_OBJECT, "language_grounding"),
           ("none", 90, None, Category.TIMEOUT_PROGRESSING, "control")],
    BOWL: [("no_grip", 140, None, Category.GRASP_FAILURE, "contact"),
           ("inverted_gripper", 140, None, Category.GRASP_FAILURE, "contact"),
           ("drop", 120, None, Category.DROP, "contact"),
           ("short", 140, None, Category.PLACEMENT_MISS, "control"),
           ("wrong", 120, "akita_black_bowl_2", Category.WRONG_OBJECT, "language_grounding")],
    BOTH: [("none", 205, None, Category.TIMEOUT_PROGRESSING, "control"),
           ("drop", 200, None, Category.DROP, "contact"),
           ("wrong", 140, "butter_1", Category.WRONG_OBJECT, "language_grounding")],
}


def _episode(env, task, fault: str, steps: int, distractor: str | None) -> tuple[Outcome, dict[str, np.ndarray]]:
    """One episode of the faulty expert, as the step columns the recorder writes (info.* and the state)."""
    inner = env.simulator

    def position() -> np.ndarray:
        return np.asarray(inner.sim.data.body_xpos[inner.obj_body_id[distractor]], dtype=np.float64)

    policy = LiberoFaultyExpert(fault, position)
    observation = env.reset(0)
    policy.reset(PolicyContext(task, (0,), (task.instruction,)))
    rows, states, success = [], [], False
    for _ in range(steps):
        batch = {"state": observation["state"][None], "privileged.goal": observation["privileged.goal"][None],
                 "env_ids": np.array([0]), "instruction": [task.instruction]}
        transition = env.step(policy.act(batch)[0])
        observation, success = transition.observation, transition.success
        rows.append(transition.info)
        states.append(observation["state"])
        if success:
            break
    columns = {f"info.{name}": np.array([row[name] for row in rows]) for name in rows[0]}
    columns["observation.state"] = np.array(states)
    return (Outcome.SUCCESS if success else Outcome.TIMEOUT), columns


class _Record:
    """What attribution reads of an episode record."""

    def __init__(self, task_id: str, outcome: Outcome) -> None:
        self.key, self.task_id, self.outcome, self.reason = "k", task_id, outcome, ""
        self.variant: dict = {"perturbations": []}
        self.variant_key, self.variant_name = "nominal", "nominal"
        self.policy_name, self.instruction, self.seed = "faulty", "", 0


# make test runs the LIBERO-Object soup's faults; the spatial and LIBERO-10 ones are `extended` (make test-extended),
# and benchmarks/libero_fault_confusion.py measures every fault over ten initial states of three tasks
@pytest.mark.parametrize("ref", [pytest.param(ref, id=name, marks=() if name == "object" else pytest.mark.extended)
                                 for ref, name in zip(GOLDEN, ["object", "spatial", "10"], strict=True)])
def test_each_injected_fault_gets_its_category_and_its_events(ref):
    task = REGISTRY.get(ref).model_copy(update={"cameras": ()})
    env = make_env(task)
    try:
        assert family_of(task.id) == "libero-pick-place"
        for fault, steps, distractor, expected, capability in GOLDEN[ref]:
            outcome, columns = _episode(env, task, fault, steps, distractor)
            found, evidence = signals(family_of(task.id), outcome, "", columns)
            events = {name[5:]: values for name, values in columns.items() if name.startswith("info.")}
            label = f"{ref.split('/')[1]} {fault} ({steps} steps)"
            if expected is None:  # the expert itself: success, nothing went wrong on the way
                assert outcome is Outcome.SUCCESS and found == (), label
                assert events["goal_progress"][-1] == 1.0 and events["lifted"].any() and events["grasped"].any()
                assert not (events["dropped"].any() or events["collision"].any() or events["wrong_object"].any())
                assert not events["unstable"].any()
                continue
            assert outcome is Outcome.TIMEOUT and found and found[0] is expected, (label, found, evidence)
            assert np.isfinite(events["goal_progress"]).all() and (events["goal_progress"] >= 0).all()
            assert (events["goal_progress"] <= 1).all() and not events["unstable"].any()
            if expected is Category.DROP:
                assert events["dropped"].sum() == 1 and events["lifted"].any(), label
            if expected is Category.COLLISION:
                assert events["collision_force"].max() > 80.0 and not events["grasped"].any(), label
            if expected is Category.WRONG_OBJECT:
                assert events["wrong_object"].any() and not events["contact"].any(), label
            if expected is Category.GRASP_FAILURE and fault == "inverted_gripper":
                # the closed hand comes down on it: touched, and never held while the hand rose (on the bowl the
                # closed fingertips can wedge its rim for a few steps on the way down: held_rise_m stays 0)
                assert events["contact"].any() and evidence["held_rise_m"] < 0.01, (label, evidence)
            elif expected is Category.GRASP_FAILURE:
                assert events["ee_obj_dist"].min() < 0.05 and not events["grasped"].any(), label
            if expected in (Category.APPROACH_FAILURE, Category.STAGNATION):
                assert events["ee_obj_dist"].min() > 0.05 and not events["contact"].any(), label
            if expected is Category.PLACEMENT_MISS:
                assert not events["dropped"].any() and events["lifted"].any(), label
                assert not events["grasped"][-1] and events["goal_progress"][-1] < 1.0, label
            if expected is Category.TIMEOUT_PROGRESSING:
                assert events["grasped"][-1] == 1.0 and events["goal_progress"][-1] > events["goal_progress"][-21]
                if ref == BOTH:  # the first object is in the basket: the second one was on its way
                    assert events["subgoal"][0] == 0 and events["subgoal"][-1] == 1 and evidence["subgoal"] == 1
                    assert events["goal_progress"][-1] > 0.5
            [attribution] = attribute([_Record(task.id, outcome)],
                                      {"k": Categorized(found[0], found, "libero-pick-place", evidence)})
            assert attribution.capability == capability, (label, attribution)
    finally:
        env.close()


def test_a_faulty_campaign_is_mined_attributed_prioritised_and_searched_for_its_point_of_no_return(tmp_path):
    """The whole path on LIBERO: a campaign of the expert that lets go early -> the store -> `assay failures
    mine` (drop, contact) -> `assay priorities` -> the point of no return (the expert picks the soup up
    again from every state: the policy ran out of time, it did not ruin the episode)."""
    from assay.cli.app import app
    from assay.failures import Replayer, find_ponr, step_arrays
    from assay.spec import Variant
    from assay.store import Store

    runner = CliRunner()
    campaign = tmp_path / "c.json"
    campaign.write_text(json.dumps({
        "name": "faulty", "episodes": 1, "horizon": 120, "envs_per_worker": 1, "tasks": [SOUP],
        "policies": [{"name": "dropper", "entrypoint": "tests.failure_policies:LiberoFaultyExpert",
                      "params": {"fault": "drop"}}]}))
    store = tmp_path / "s"
    result = runner.invoke(app, ["run", str(campaign), "--store", str(store), "--executor", "inline"])
    assert result.exit_code == 0, result.output
    mined = runner.invoke(app, ["failures", "mine", "--store", str(store), "--json"])
    assert mined.exit_code == 0, mined.output
    document = json.loads(mined.stdout)
    assert document["categories"] == {"drop_during_transport": 1} and document["not_categorized"] == []
    assert [(row["capability"], row["confidence"]) for row in document["attribution"]] == [("contact", "category")]
    ranked = runner.invoke(app, ["priorities", "--store", str(store), "--json"])
    assert ranked.exit_code == 0, ranked.output
    rows = json.loads(ranked.stdout)
    assert rows and rows[0]["policy"] == "dropper" and "drop_during_transport" in json.dumps(rows[0])
    with Store(store) as opened:
        [record] = opened.catalog.episodes(campaign="faulty")
        table = opened.steps(record)
        arrays = step_arrays(table)
        assert {f"info.{name}" for name in ("dropped", "goal_progress", "wrong_object", "subgoal")} <= set(arrays)
        actions = np.asarray(table.column("action").to_pylist())
    replayer = Replayer(REGISTRY.get(SOUP).model_copy(update={"horizon": 120}), Variant())
    try:
        found = find_ponr(replayer, record.key, record.seed, actions, record.instruction,
                          states=arrays["observation.state"], budget=120, probes=2)
    finally:
        replayer.close()
    assert found.verified and found.t is not None and found.lost is False, found
