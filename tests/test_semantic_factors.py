"""The semantic axis: every factor rewrites the instruction as declared, the same way for a seed."""

from __future__ import annotations

import json

import pytest

from assay.errors import SpecError, UnsupportedError
from assay.sim import FACTORS, default_registry, instruct, resolve_variant
from assay.sim.semantic import SEMANTIC_SET, conflict_marks, lexicon
from assay.spec import campaign_from_data, content_hash
from assay.spec.metaworld_catalog import METAWORLD_TASKS

NOMINAL = "pick up the puck and place it at the goal"

# (factor, value) -> the instruction of metaworld/pick-place@1 at episode seed 7 (word lists semantic-v1)
GOLDEN = {
    ("instruction.paraphrase", "terse"): "pick up puck and place at goal",
    ("instruction.synonym", "verbs"): "take up the puck and drop it at the goal",
    ("instruction.synonym", "nouns"): "pick up the disk and place it at the mark",
    ("instruction.synonym", "both"): "take up the token and set it at the destination",
    ("instruction.distractor", 1): f"{NOMINAL}, and never mind the cup on the left",
    ("instruction.distractor", 3): f"{NOMINAL}, and do not touch the yellow box, while paying no attention to the "
                                   "green ball, and ignore the red block",
    ("instruction.form", "declarative"): f"the robot should {NOMINAL}",
    ("instruction.form", "question"): f"can you {NOMINAL}?",
    ("instruction.form", "wish"): f"i would like you to {NOMINAL}",
    ("instruction.form", "object-first"): "the puck: pick up it and place it at the goal",
    ("instruction.typo_rate", 0.05): "pkck up the puck and place t at the gol",
    ("instruction.typo_rate", 0.3): "pkck up the uck and plcae t at hee aol",
    ("instruction.length", "terse"): "pick puck place goal",
    ("instruction.length", "verbose"): f"here is the task, and it matters: {NOMINAL}, then stop once it is done",
    ("instruction.referring", "colour"): "pick up the red object and place it at the goal",
    ("instruction.referring", "spatial"): "pick up the object nearest the window and place it at the goal",
    ("instruction.referring", "function"): "pick up the thing you can pick up and place it at the goal",
    ("instruction.template", "unseen"): f"{NOMINAL}, please.",
    ("instruction.conflict", "same-family"): "pick up the puck and place it on the shelf",
    ("instruction.conflict", "other-family"): "sweep the puck off the table",
    ("instruction.object", "same-category"): "pick up the mug and place it at the goal",
    ("instruction.object", "other-category"): "pick up the faucet and place it at the goal",
    ("instruction.object", "wrong-colour"): "pick up the green puck and place it at the goal",
    ("instruction.withheld", "empty"): "",
    ("instruction.withheld", "other-task"): "slide the plate into the cabinet",
}


@pytest.fixture(scope="module")
def pick_place():
    return default_registry().get("metaworld/pick-place@1")


def _say(task, request, seed=7):
    return instruct(task, resolve_variant(request, task), seed)


def test_the_catalogue_declares_at_least_eight_semantic_factors():
    semantic = [f for f in FACTORS.values() if f.axis.value == "semantic"]
    assert len(semantic) >= 8
    for factor in semantic:
        assert factor.description and factor.valid and factor.validate(factor.default) == factor.default
    # every factor has golden examples (LIBERO-PRO's are tested on LIBERO, tests/test_libero.py)
    assert {name for name, _ in GOLDEN} == {f.name for f in semantic if f.backends != {"libero"}}


@pytest.mark.parametrize(("factor", "value"), list(GOLDEN))
def test_golden_rewrites(pick_place, factor, value):
    assert _say(pick_place, {factor: value}) == GOLDEN[(factor, value)]
    assert _say(pick_place, {factor: value}) == _say(pick_place, {factor: value})  # same seed, same words


def test_defaults_leave_the_instruction_alone_and_seeds_vary_the_draw(pick_place):
    defaults = {f.name: f.default for f in FACTORS.values() if f.axis.value == "semantic" and "metaworld" in f.backends}
    assert _say(pick_place, defaults) == NOMINAL == _say(pick_place, {})
    assert _say(pick_place, {"instruction.typo_rate": 0.0}) == NOMINAL
    draws = {_say(pick_place, {"instruction.template": "unseen"}, seed) for seed in range(40)}
    assert len(draws) == len(lexicon()["unseen_templates"])  # every unseen template is reachable
    assert len({_say(pick_place, {"instruction.typo_rate": 0.2}, seed) for seed in range(10)}) == 10


def test_object_level_factors_ground_in_the_scene(pick_place):
    blue = {"object.color": [0.0, 0.0, 0.9]}
    said = _say(pick_place, {"instruction.referring": "colour", **blue})
    assert said == "pick up the blue object and place it at the goal"
    for seed in range(20):  # a wrong colour is never the rendered one
        assert "blue" not in _say(pick_place, {"instruction.object": "wrong-colour", **blue}, seed)
        same = _say(pick_place, {"instruction.object": "same-category"}, seed).split()[3]
        assert same != "puck" and same in lexicon()["objects"]["graspable"]
        other = _say(pick_place, {"instruction.object": "other-category"}, seed).split()[3]
        assert other not in lexicon()["objects"]["graspable"] + lexicon()["objects"]["place"]
    reach = default_registry().get("metaworld/reach@1")  # no object in "reach the goal position"
    assert _say(reach, {"instruction.object": "same-category"}) == reach.instruction


def test_conflicting_instruction_names_another_task_and_is_marked(pick_place):
    for seed in range(20):
        for style, same in (("same-family", True), ("other-family", False)):
            variant = resolve_variant({"instruction.conflict": style}, pick_place)
            marks = conflict_marks(pick_place, variant, seed)
            other = marks["conflict_with"].removeprefix("metaworld/") + "-v3"
            assert other != pick_place.env_name and marks["scored_against"] == "scene" and marks["scoring"] == "marked"
            assert instruct(pick_place, variant, seed) == METAWORLD_TASKS[other][0]
            assert (METAWORLD_TASKS[other][2] == "pick-place") == same
    assert conflict_marks(pick_place, resolve_variant({}, pick_place), 0) == {}


def test_a_task_that_asks_to_be_scored_against_the_instructed_task_is_refused(pick_place):
    instructed = pick_place.model_copy(update={"conflict_scoring": "instructed"})
    with pytest.raises(UnsupportedError, match="cannot score the instructed one"):
        resolve_variant({"instruction.conflict": "other-family"}, instructed)
    resolve_variant({"instruction.conflict": "nominal"}, instructed)  # nominal words conflict with nothing
    record = pick_place.model_dump(mode="json")
    for field in ("conflict_scoring", "initial_states", "settle_steps", "video_fps"):
        del record[field]
    assert pick_place.content_hash() == content_hash(record)  # the default leaves every task hash as it was
    assert instructed.content_hash() != pick_place.content_hash()


def test_bad_values_name_the_valid_set(pick_place):
    for request, message in [({"instruction.typo_rate": 0.9}, r"valid: \[0, 0.5\] per letter"),
                             ({"instruction.distractor": 4}, r"valid: \[0, 3\] clauses"),
                             ({"instruction.form": "shouted"}, "valid: one of imperative, declarative"),
                             ({"instruction.synonym": True}, "valid: one of nominal, verbs, nouns, both")]:
        with pytest.raises(SpecError, match=message):
            resolve_variant(request, pick_place)
    gym = default_registry().get("gymnasium/Pendulum-v1")
    with pytest.raises(UnsupportedError, match="applies to: metaworld"):
        resolve_variant({"instruction.conflict": "same-family"}, gym)
    assert instruct(gym, resolve_variant({"instruction.referring": "colour"}, gym), 0) == gym.instruction


def test_word_lists_are_versioned_package_data():
    assert lexicon()["version"] == SEMANTIC_SET == "semantic-v1"
    for noun in (n for members in lexicon()["objects"].values() for n in members):
        assert " " not in noun


def test_sweep_and_grid_expand_every_semantic_factor_with_per_seed_instructions(pick_place):
    from assay.run import prepare_campaign

    semantic = [f for f in FACTORS.values() if f.axis.value == "semantic" and "metaworld" in f.backends]
    levels = {f.name: (list(f.choices[1:]) if f.choices else [f.high]) for f in semantic}
    data = {"name": "semantic-plan", "episodes": 2, "tasks": ["metaworld/pick-place@1"], "policies": ["expert"],
            "variants": ["nominal", *({"sweep": {name: values}} for name, values in levels.items()),
                         {"grid": {"instruction.typo_rate": [0.1, 0.2], "instruction.form": ["question", "wish"]}}]}
    planned = prepare_campaign(campaign_from_data(data, "<test>"))
    assert len(planned.variants) == 1 + sum(len(v) for v in levels.values()) + 4
    for job in planned.jobs:
        assert job.instruction == instruct(job.task, job.variant, job.seed)
    typo = [j for j in planned.jobs if j.variant.name == 'instruction.typo_rate=0.5']
    assert len({j.instruction for j in typo}) == 2 and len({j.key for j in typo}) == 2
    assert json.dumps([j.instruction for j in planned.jobs])  # plain strings


@pytest.mark.sim
@pytest.mark.slow
def test_a_campaign_over_every_semantic_factor_runs_and_the_expert_retains_exactly_one(tmp_path):
    """One level of every semantic factor, the expert (blind to words) and the router (reads them), paired seeds."""
    pytest.importorskip("sentence_transformers")
    from assay.metrics import retention_table, robustness_profile
    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.store import Outcome, Store

    levels = {"instruction.paraphrase": "indirect", "instruction.synonym": "both", "instruction.distractor": 2,
              "instruction.form": "question", "instruction.typo_rate": 0.3, "instruction.length": "rambling",
              "instruction.referring": "spatial", "instruction.template": "unseen",
              "instruction.conflict": "other-family", "instruction.object": "other-category",
              "instruction.withheld": "empty"}
    assert set(levels) == {f.name for f in FACTORS.values() if f.axis.value == "semantic" and "metaworld" in f.backends}
    data = {"name": "semantic-all", "seed": 3, "episodes": 2, "horizon": 80, "envs_per_worker": 2,
            "tasks": ["metaworld/push@1"], "policies": ["expert", "router"],
            "variants": ["nominal", *({name: value} for name, value in levels.items())]}
    with Store(tmp_path / "store") as store:
        run_campaign(prepare_campaign(campaign_from_data(data, "<test>")), store, InlineExecutor(store.root))
        records = store.catalog.episodes(campaign="semantic-all")
    assert len(records) == 2 * 12 * 2 and not [r for r in records if r.outcome is Outcome.ERROR]
    rows = retention_table(records)
    expert = [r for r in rows if r.policy == "expert"]
    assert len(expert) == 11 and all(r.retention == 1.0 and r.nominal_successes == 2 for r in expert)
    assert {r.axis for r in expert} == {"semantic", "semantic:conflict"}
    marked = [r for r in records if r.variant_name.startswith("instruction.conflict")]
    assert all(r.provenance["instruction"]["scored_against"] == "scene" for r in marked)
    assert all(r.instruction != "push the puck to the goal" for r in marked)
    router = {r.variant: r for r in rows if r.policy == "router"}
    conflict = router['instruction.conflict="other-family"']
    assert conflict.axis == "semantic:conflict" and conflict.pairs == 2
    obeyed = [r for r in marked if r.policy_name == "router"]
    assert all(r.policy_info["chosen_skill"] != "push-v3" for r in obeyed)  # it did what the words said
    profile = {(p.policy, p.axis): p for p in robustness_profile(rows)}
    assert profile[("expert", "semantic")].retention == 1.0 and profile[("expert", "semantic")].variants == 10


def test_assay_factors_lists_the_semantic_axis_in_json():
    from typer.testing import CliRunner

    from assay.cli.app import app

    result = CliRunner().invoke(app, ["factors", "--axis", "semantic", "--json"])
    assert result.exit_code == 0
    listed = {f["name"]: f for f in json.loads(result.stdout)["factors"]}
    assert set(listed) == {f.name for f in FACTORS.values() if f.axis.value == "semantic"}
    typo = listed["instruction.typo_rate"]
    assert typo["valid"] == "[0, 0.5] per letter" and typo["default"] == 0.0
    assert listed["instruction.conflict"]["backends"] == ["metaworld"]
    assert all(f["axis"] == "semantic" and f["description"] for f in listed.values())
