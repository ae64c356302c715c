"""Simulators as services (issue 52): whole campaigns identical in process and served, a served simulator killed
mid-campaign, the handshake's refusals, and the parity command on a planted difference. Every server is a real
``python -m assay.served`` process on loopback."""

from __future__ import annotations

import threading

import pytest

from assay.errors import SimulatorRefused, SpecError
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.served import ServedEnv, check_simulators, close_links
from assay.served.client import _Link, link
from assay.served.parity import sim_parity
from assay.sim import default_registry
from assay.sim.metaworld_env import metaworld_task
from assay.spec import campaign_from_data
from assay.store import Store
from assay.store.video import video_relpath
from tests.served_support import ROBOSUITE_PYTHON, served

PLANTED = "gymnasium/tests.served_plant:AssayTest/Planted-v0"


def _campaign(name: str, simulators: dict[str, str] | None = None, **more: object):
    data = {"name": name, "seed": 5, "episodes": 3, "tasks": ["metaworld/pick-place"], "horizon": 40,
            "envs_per_worker": 2, "variants": [{}, {"friction": 0.5, "action.noise": 0.1, "control.latency": 1}],
            "policies": [{"name": "expert", "builtin": "expert"}, {"name": "random", "builtin": "random"}], **more}
    if simulators:
        data["simulators"] = simulators
    return campaign_from_data(data)


def _run(root, spec, executor=None, **options):
    """The campaign's summary and its rows: key -> (trajectory hash, outcome, initial conditions), and row count."""
    with Store(root) as store:
        summary = run_campaign(prepare_campaign(spec), store, executor or InlineExecutor(root), **options)
        rows = store.catalog.episodes(campaign=spec.name)
    hashes = {r.key: (r.trajectory_hash, r.outcome.value, str(r.initial_conditions)) for r in rows}
    return hashes, summary, len(rows)


@pytest.mark.sim
def test_a_metaworld_campaign_is_bit_identical_in_process_and_served_on_two_workers(tmp_path):
    reference, _, _ = _run(tmp_path / "in-process", _campaign("mw"))
    with served("metaworld", clients=2) as server:
        spec = _campaign("mw", {"metaworld": server.url})
        hashes, summary, _ = _run(tmp_path / "served", spec, LocalExecutor(tmp_path / "served", workers=2))
    assert summary.ran == 12 and summary.outcomes["error"] == 0
    assert hashes == reference


@pytest.mark.sim
def test_a_served_simulator_killed_mid_campaign_loses_and_duplicates_nothing(tmp_path):
    reference, _, _ = _run(tmp_path / "in-process", _campaign("mw"))
    killed = threading.Event()
    with served("metaworld", clients=2) as server:
        spec = _campaign("mw", {"metaworld": server.url}, envs_per_worker=1)
        replacement = []

        def kill_after_two(record):  # mid-campaign: the third episode's simulator dies under it
            if not killed.is_set() and len(records) == 2:
                killed.set()
                server.kill()
            records.append(record)

        records: list = []
        _, first, _ = _run(tmp_path / "served", spec, on_record=kill_after_two)
        replacement.append(served("metaworld", port=server.port, clients=2))
    assert killed.is_set() and first.outcomes["error"] >= 1  # the episodes it took end as errors, counted apart
    with replacement[0] as again:
        hashes, second, rows = _run(tmp_path / "served", _campaign("mw", {"metaworld": again.url},
                                                                         envs_per_worker=1), retry_errors=True)
    assert second.retried == first.outcomes["error"] and second.outcomes["error"] == 0
    assert rows == len(hashes) == 12  # 0 lost, 0 duplicated
    assert hashes == reference


def test_a_simulator_that_is_gone_is_refused_in_one_line_naming_the_fix():
    task = metaworld_task("reach-v3")
    with served("metaworld") as server:
        url = server.url
    with pytest.raises(SimulatorRefused, match=r"cannot be reached .*assay serve-sim metaworld") as refused:
        check_simulators({"metaworld": url}, [task])
    assert "\n" not in str(refused.value)


def test_a_busy_simulator_and_a_task_it_does_not_have_are_refused_in_one_line():
    task = metaworld_task("reach-v3")
    with served("metaworld", clients=1) as server:
        check_simulators({"metaworld": server.url}, [task])  # fits, and gives its slot back
        link(server.url, "metaworld")  # a worker holding the only slot
        try:
            with pytest.raises(SimulatorRefused, match=r"E_BUSY: all 1 client slots .*--clients"):
                _Link(server.url, "metaworld")
        finally:
            close_links()
        with pytest.raises(SimulatorRefused, match=r"E_TASK: .* has no task metaworld/reach@2; `assay tasks"):
            check_simulators({"metaworld": server.url}, [metaworld_task("reach-v3", version=2)])
        with pytest.raises(SimulatorRefused, match=r"E_VERSION: .* serves metaworld, not gymnasium"):
            ServedEnv(default_registry().get(PLANTED), server.url)
    close_links()


def test_a_policy_server_is_not_taken_for_a_simulator():
    from tests.remote_support import serving, state_task

    class Still:
        def reset(self, context):
            pass

        def act(self, observations):
            import numpy as np

            return np.zeros((len(observations["state"]), 4))

    with serving(Still(), state_task()) as policy_server, \
            pytest.raises(SimulatorRefused, match=r"is a policy server .*not a assay-sim/2 simulator server"):
        check_simulators({"metaworld": f"ws://127.0.0.1:{policy_server.port}"}, [metaworld_task("reach-v3")])


def test_a_policy_pointed_at_a_simulator_server_is_refused_naming_the_fix():
    with served("metaworld") as server:
        spec = campaign_from_data({"name": "x", "episodes": 1, "tasks": ["metaworld/reach"],
                                   "policies": [{"name": "p", "remote": server.url}]})
        with pytest.raises(SpecError, match=r"is a simulator server \(`assay serve-sim metaworld`\), not a policy "
                                            r"server: point `remote:` at `assay serve-policy`"):
            prepare_campaign(spec)


def test_a_simulator_of_other_package_versions_is_refused_naming_them():
    if not ROBOSUITE_PYTHON.exists():
        pytest.fail("robosuite 1.5's environment is missing: `make env-robosuite` (make install-test builds it)")
    # robosuite 1.5's own environment has no Meta-World: a metaworld server started there is of other versions
    with served("metaworld", python=str(ROBOSUITE_PYTHON)) as server, \
            pytest.raises(SimulatorRefused, match=r"E_VERSION: .* runs metaworld absent \(the campaign's: 3\.[^)]*\)"):
        check_simulators({"metaworld": server.url}, [metaworld_task("reach-v3")])


def test_a_campaign_names_served_simulators_only_as_websocket_urls_for_its_own_backends():
    with pytest.raises(SpecError, match=r"is not a websocket URL; write ws://HOST:PORT"):
        _campaign("bad", {"metaworld": "http://127.0.0.1:1"})
    spec = _campaign("other", {"libero": "ws://127.0.0.1:1"})
    with pytest.raises(SpecError, match=r"names libero, but no task of the campaign is a libero task"):
        prepare_campaign(spec)
    assert spec.content_hash() == _campaign("other").content_hash()  # an execution setting
    with pytest.raises(SpecError, match=r"safety: true reads the simulator's own object"):
        prepare_campaign(_campaign("safe", {"metaworld": "ws://127.0.0.1:1"}, safety=True))
    robosuite = campaign_from_data({"name": "rs", "episodes": 1, "tasks": ["robosuite/lift"],
                                    "policies": [{"name": "expert", "builtin": "expert"}]})
    with pytest.raises(SpecError, match=r"runs only on a served simulator.*assay env create robosuite"):
        prepare_campaign(robosuite)


def test_sim_parity_finds_a_planted_difference_at_its_step_and_none_without_it():
    task = default_registry().get(PLANTED)
    with served("gymnasium") as honest:
        clean = sim_parity([task], honest.url, episodes=2, steps=20, seed=3)
    assert clean.difference is None and clean.episodes == 2 and clean.steps == 40
    with served("gymnasium", env={"ASSAY_PLANTED_STEP": "7"}) as planted:
        found = sim_parity([task], planted.url, episodes=2, steps=20, seed=3)
    assert found.difference is not None and found.episodes == 1
    assert (found.difference.seed, found.difference.step, found.difference.what) == (3, 7, "observation state[1]")
    assert found.difference.line().startswith(f"first difference: {task.id} seed 3 step 7: observation state[1]:")


@pytest.mark.libero
def test_a_libero_campaign_with_a_camera_is_bit_identical_in_process_and_served(tmp_path):
    # video_fps 10: every other step's frames are skipped on the server (skip_frames), the rest drawn and recorded
    data = {"name": "lib", "episodes": 2, "horizon": 12, "envs_per_worker": 2, "video_fps": 10,
            "tasks": ["libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"],
            "cameras": [{"name": "agentview", "width": 64, "height": 64, "fast": True}],
            "policies": [{"name": "expert", "builtin": "expert"}]}
    reference, _, _ = _run(tmp_path / "in-process", campaign_from_data(data))
    with served("libero", clients=1) as server:
        spec = campaign_from_data({**data, "simulators": {"libero": server.url}})
        hashes, summary, _ = _run(tmp_path / "served", spec)
    assert summary.outcomes["error"] == 0 and hashes == reference
    with Store(tmp_path / "in-process") as a, Store(tmp_path / "served") as b:
        for row in a.catalog.episodes(campaign="lib"):  # beyond the hashes: the environment_state and the frames
            ours, theirs = a.steps(row), b.steps(b.catalog.episode(row.key))
            for column in ("observation.environment_state", "observation.state"):
                assert ours.column(column).to_pylist() == theirs.column(column).to_pylist()
            video = video_relpath(row.key, "agentview")
            assert (tmp_path / "in-process" / video).read_bytes() == (tmp_path / "served" / video).read_bytes()


def test_the_robosuite_lock_pins_what_the_handshake_expects_each_with_a_hash():
    from assay.served import backend_of, lock_path

    lock = lock_path("robosuite")
    assert lock is not None
    lines = [line for line in lock.read_text().splitlines() if line and not line.startswith("#")]
    pinned = {line.split("==")[0]: line.split("==")[1].split()[0] for line in lines}
    assert all("--hash=sha256:" in line for line in lines)
    pins = backend_of("robosuite").pins
    assert pins and {name: pinned[name] for name in pins} == pins


@pytest.mark.sim
def test_a_served_environment_passes_the_backend_conformance_kit_cameras_and_frames_on_demand_included():
    from assay.sim import SupportsFramesOnDemand
    from assay.spec import CameraSpec
    from assay.testing import check_sim_env

    task = default_registry().get("metaworld/push@1").model_copy(
        update={"cameras": (CameraSpec(name="front", width=32, height=32, depth=True),)})
    with served("metaworld", clients=1) as server:
        env = ServedEnv(task, server.url)
        try:
            check_sim_env(env, seeds=(0, 1), steps=3, episode_steps=10)
            assert isinstance(env, SupportsFramesOnDemand)
            env.reset(0)
            env.skip_next_frames()
            skipped, drawn = env.step([0.0] * 4).observation, env.step([0.0] * 4).observation
            assert "image.front" not in skipped and "calib.front" in skipped and "image.front" in drawn
        finally:
            env.close()
            close_links()


@pytest.mark.sim
def test_a_served_episode_is_traced_on_the_campaigns_side_and_exports(tmp_path):
    """A served simulator has no ``layer_trace`` hook: its episodes record the policy, action, physics-timing,
    render and recorder fields (the heavy groups asked for add nothing), and read, export and diff as any other."""
    from typer.testing import CliRunner

    from assay.cli.app import app
    from assay.store.trace import Layer, read_trace
    from assay.store.trace_export import Exported, otlp, perfetto

    camera = {"name": "front", "width": 24, "height": 24}
    with served("metaworld", clients=1) as server:
        spec = _campaign("traced", {"metaworld": server.url}, episodes=1, horizon=10, cameras=[camera],
                         video_fps=20, trace=["physics.forces", "controller.effort"],
                         policies=[{"name": "expert", "builtin": "expert"}], variants=[{}, {"action.noise": 0.1}])
        _, summary, rows = _run(tmp_path, spec)
    assert rows == 2 and summary.outcomes["error"] == 0
    with Store(tmp_path) as store:
        episodes = [Exported(r, read_trace(store, r)) for r in store.catalog.episodes(campaign="traced")]
    for episode in episodes:
        assert episode.trace.of(Layer.ACTION) and episode.trace.of(Layer.POLICY) and episode.trace.of(Layer.RECORDER)
        assert not episode.trace.of(Layer.CONTROLLER)  # the backend's own part stays on the server, untraced
    assert perfetto(episodes)["traceEvents"] and otlp(episodes)["resourceSpans"]
    result = CliRunner().invoke(app, ["trace", "diff", "traced:expert:nominal", "traced:expert:action.noise=0.1",
                                      "--store", str(tmp_path)])
    assert result.exit_code == 0 and "first diverges in action" in result.output, result.output


@pytest.mark.sim
def test_a_lockstep_batch_steps_in_one_round_trip_and_each_environment_as_it_would_alone():
    """``step_together`` on three served sessions of one connection: one request per lockstep step, every
    observation, reward and info bit-identical to in-process environments stepped one by one under the same
    campaign-side factors (latency, action and observation noise); one session's fault or refusal is its own."""
    import numpy as np

    from assay.errors import SimulatorLostError
    from assay.sim import make_env, perturbed, resolve_variant
    from assay.sim.together import step_together

    task = default_registry().get("metaworld/pick-place@1")
    variant = resolve_variant({"action.noise": 0.05, "observation.noise": 0.01, "control.latency": 1}, task)
    actions = np.random.default_rng(3).uniform(-1.0, 1.0, (12, 3, task.action.dim))
    with served("metaworld", clients=1) as server:
        remote = [perturbed(ServedEnv(task, server.url), variant) for _ in range(3)]
        local = [perturbed(make_env(task), variant) for _ in range(3)]
        try:
            for seed, (mine, theirs) in enumerate(zip(remote, local, strict=True)):
                assert np.array_equal(mine.reset(seed)["state"], theirs.reset(seed)["state"])
            wire = remote[0].env._link
            requests = []
            request = wire.request
            wire.request = lambda message: requests.append(message["op"]) or request(message)
            for step in actions:
                together = step_together(remote, list(step))
                alone = [env.step(action) for env, action in zip(local, step, strict=True)]
                for a, b in zip(together, alone, strict=True):
                    assert np.array_equal(a.observation["state"], b.observation["state"])
                    assert (a.reward, a.terminated, a.truncated, a.success) == (
                        b.reward, b.terminated, b.truncated, b.success)
                    assert list(a.info.items()) == list(b.info.items())  # values and their order
            assert requests == ["steps"] * len(actions)  # one round trip per lockstep step, not one per environment

            wire.request({"op": "close", "session": remote[2].env._session})  # the server forgets the third
            bad = np.zeros(task.action.dim + 3)  # a shape the backend cannot take: its fault, that step's alone
            inner = [env.env for env in remote]  # past the latency queue: the bad action reaches the server now
            first, second, third = step_together(inner, [actions[0, 0], bad, actions[0, 2]])
            assert first.observation["state"].shape == (39,)
            assert isinstance(second, SimulatorLostError) and "raised" in str(second)
            assert isinstance(third, SimulatorRefused) and str(third).startswith("E_SESSION")
            assert not wire.dead

            # a malformed batch (actions that are not an array) refuses the whole request and ends the connection,
            # as a malformed `step` does; the server's one slot is free again, so the next reset connects anew
            malformed = {"op": "steps", "sessions": [inner[0]._session, inner[1]._session],
                         "skip_frames": [False, False], "actions": "not an array"}
            with pytest.raises(SimulatorRefused, match="^E_PROTOCOL"):
                wire.request(malformed)
            assert wire.dead
            assert inner[0].reset(7)["state"].shape == (39,) and inner[0]._link is not wire
        finally:
            for env in remote + local:
                env.close()
            close_links()
