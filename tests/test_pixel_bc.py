"""Pixel behaviour cloning: same bytes for a seed, no privileged state, beats random on reach, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from assay.cli.app import app  # noqa: E402
from assay.errors import SpecError  # noqa: E402
from assay.learning import leakage_report, load_demos  # noqa: E402
from assay.learning.pixel_bc import PixelTrainConfig, demo_frames, train_pixel_bc  # noqa: E402
from assay.learning.runs import DEMO_SEED, EVAL_SEED, run_grid, score  # noqa: E402
from assay.policies import make_policy, resolve_policy  # noqa: E402
from assay.policies.pixel_bc import PROPRIO, PixelBCPolicy  # noqa: E402
from assay.run import InlineExecutor  # noqa: E402
from assay.spec import CameraSpec, PolicySpec, policy_from_shorthand  # noqa: E402
from assay.store import Outcome, Store  # noqa: E402

TASK = "metaworld/reach@1"
HORIZON = 100  # the expert reaches in ~45 steps; the pixel policy is slower
CAMERAS = (CameraSpec(name="front", width=64, height=64),)
TINY = PixelTrainConfig(seed=3, epochs=2, channels=(8, 8), hidden=(32,), augment="shift")


@pytest.fixture(scope="module")
def camera_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("pixel-store")
    with Store(root) as store:
        run_grid(
            store,
            "cam-demos",
            [TASK],
            [PolicySpec(name="expert", builtin="expert")],
            20,
            DEMO_SEED,
            HORIZON,
            cameras=CAMERAS,
        )
        yield store


@pytest.fixture(scope="module")
def tiny_checkpoint(camera_store, tmp_path_factory):
    demos = load_demos(camera_store, "campaign=cam-demos")[:2]
    return train_pixel_bc(camera_store, demos, TINY, tmp_path_factory.mktemp("pix") / "tiny.pt")


@pytest.mark.sim
def test_pixel_training_gives_the_same_bytes_for_a_seed(camera_store, tiny_checkpoint, tmp_path):
    demos = load_demos(camera_store, "campaign=cam-demos")[:2]
    again = train_pixel_bc(camera_store, demos, TINY, tmp_path / "again.pt")
    assert Path(again.path).read_bytes() == Path(tiny_checkpoint.path).read_bytes()
    assert again.version == tiny_checkpoint.version and again.frames == sum(len(d.actions) for d in demos)
    other = train_pixel_bc(camera_store, demos, PixelTrainConfig(**{**TINY.__dict__, "seed": 4}), tmp_path / "other.pt")
    assert other.version != again.version
    data = torch.load(again.path, weights_only=True)
    assert data["train"]["augment"] == "shift" and data["train"]["shift_pad"] == 4  # the option is recorded
    assert [p["key"] for p in data["provenance"]] == [d.key for d in demos]
    assert torch.get_num_threads() >= 1 and not torch.are_deterministic_algorithms_enabled()  # settings restored


@pytest.mark.sim
def test_pixel_policy_never_receives_privileged_state(camera_store, tiny_checkpoint):
    demo = load_demos(camera_store, "campaign=cam-demos")[0]
    frames = demo_frames(camera_store, demo, "front")
    policy = PixelBCPolicy(path=tiny_checkpoint.path)
    assert PROPRIO == (0, 1, 2, 3, 18, 19, 20, 21)  # hand xyz + gripper, this step and the previous one
    observation = {"state": demo.observations, "image.front": frames}
    images, proprio = policy.network_inputs(observation)
    assert images.shape == (len(frames), 64, 64, 3) and images.dtype == np.uint8
    assert proprio.shape == (len(frames), 8) and np.array_equal(
        proprio, demo.observations[:, PROPRIO].astype(np.float32)
    )
    # object and goal positions (and everything else outside proprioception) cannot change the action
    scrambled = demo.observations.copy()
    private = [i for i in range(scrambled.shape[1]) if i not in PROPRIO]
    scrambled[:, private] = np.random.default_rng(0).uniform(-5, 5, size=(len(scrambled), len(private)))
    assert np.array_equal(policy.act({"state": scrambled, "image.front": frames}), policy.act(observation))
    # ... while the image does
    assert not np.array_equal(
        policy.act({"state": demo.observations, "image.front": frames[::-1].copy()}), policy.act(observation)
    )
    # rows are independent of their batch-mates
    whole = policy.act(observation)
    assert np.array_equal(
        np.concatenate(
            [policy.act({"state": demo.observations[i : i + 1], "image.front": frames[i : i + 1]}) for i in range(5)]
        ),
        whole[:5],
    )


@pytest.mark.sim
def test_pixel_policy_passes_the_conformance_kit(camera_store, tiny_checkpoint):
    from assay.sim import default_registry
    from assay.testing import check_policy

    task = default_registry().get(TASK).model_copy(update={"cameras": CAMERAS, "horizon": HORIZON})
    check_policy(PixelBCPolicy(path=tiny_checkpoint.path), task, bounded=True)


@pytest.mark.sim
def test_pixel_policy_loading_and_contract(camera_store, tiny_checkpoint, tmp_path):
    spec = policy_from_shorthand(f"pixel-bc:{tiny_checkpoint.path}")
    assert spec.builtin == "pixel-bc" and spec.name == "pixel-bc-tiny"
    assert resolve_policy(spec).version == tiny_checkpoint.version
    with pytest.raises(SpecError, match="run it as pixel-bc:"):
        make_policy(policy_from_shorthand(f"bc:{tiny_checkpoint.path}"))
    # a campaign without the camera fails before episode 1, naming what is missing
    from assay.run import prepare_campaign
    from assay.spec import CampaignSpec

    with pytest.raises(Exception, match="pixel-bc needs camera images"):
        prepare_campaign(CampaignSpec(name="x", episodes=1, tasks=(TASK,), policies=(spec,)))
    with pytest.raises(SpecError, match=r"image 'image.front': policy requires it, task renders \['image.side'\]"):
        prepare_campaign(
            CampaignSpec(
                name="x",
                episodes=1,
                tasks=(TASK,),
                policies=(spec,),
                cameras=(CameraSpec(name="side", width=64, height=64),),
            )
        )


@pytest.mark.sim
@pytest.mark.slow
def test_pixel_bc_beats_random_on_reach(camera_store, tmp_path):
    demos = load_demos(camera_store, "campaign=cam-demos")
    result = train_pixel_bc(camera_store, demos, PixelTrainConfig(seed=0, epochs=30), tmp_path / "reach.pt")
    policies = [
        PolicySpec(name="pixel", builtin="pixel-bc", params={"path": str(Path(result.path).resolve())}),
        PolicySpec(name="random", builtin="random"),
    ]
    _, records = run_grid(camera_store, "pixel-vs-random", [TASK], policies, 10, EVAL_SEED, HORIZON, cameras=CAMERAS)
    pixel, rnd = score(records, "pixel"), score(records, "random")
    assert pixel.trials == rnd.trials == 10  # measured when written: pixel 5/10, random 0/10
    assert pixel.successes >= 3 and pixel.successes > rnd.successes + 2, (pixel, rnd)
    assert leakage_report(records) == {str(Path(result.path).resolve()): []}  # held-out seeds


@pytest.mark.sim
def test_train_bc_cli_image_obs(camera_store, tmp_path):
    out = tmp_path / "cli.pt"
    result = CliRunner().invoke(
        app,
        [
            "train-bc",
            "--data",
            "campaign=cam-demos",
            "--store",
            str(camera_store.root),
            "--out",
            str(out),
            "--obs",
            "image+proprio",
            "--epochs",
            "1",
            "--hidden",
            "16",
            "--augment",
            "shift",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["demos"] == len(load_demos(camera_store, "campaign=cam-demos")) and summary["tasks"] == [TASK]
    assert out.is_file() and summary["version"] == resolve_policy(policy_from_shorthand(f"pixel-bc:{out}")).version
    bad = CliRunner().invoke(
        app,
        [
            "train-bc",
            "--data",
            "campaign=cam-demos",
            "--store",
            str(camera_store.root),
            "--out",
            str(out),
            "--obs",
            "image+proprio",
            "--augment",
            "crop",
        ],
    )
    assert bad.exit_code == 2 and "augmentation 'crop' is not one of none, shift" in bad.output
    bad = CliRunner().invoke(
        app,
        [
            "train-bc",
            "--data",
            "campaign=cam-demos",
            "--store",
            str(camera_store.root),
            "--out",
            str(out),
            "--obs",
            "pixels",
        ],
    )
    assert bad.exit_code == 2 and "--obs 'pixels' is not one of state, state+environment, image+proprio" in bad.output


@pytest.mark.sim
def test_an_instruction_conditioned_pixel_checkpoint_reads_the_words(camera_store, tmp_path):
    pytest.importorskip("sentence_transformers")
    from assay.policies import PolicyContext
    from assay.policies.language import EMBED_DIM, embed_each
    from assay.sim import default_registry

    demos = load_demos(camera_store, "campaign=cam-demos")[:2]
    config = PixelTrainConfig(**{**TINY.__dict__, "conditioning": "instruction"})
    result = train_pixel_bc(camera_store, demos, config, tmp_path / "words.pt")
    again = train_pixel_bc(camera_store, demos, config, tmp_path / "again.pt")
    assert Path(result.path).read_bytes() == Path(again.path).read_bytes()
    data = torch.load(result.path, weights_only=True)
    assert data["config"]["conditioning"] == "instruction" and data["config"]["encoder"] == "all-MiniLM-L6-v2"
    assert data["train"]["conditioning"] == "instruction"
    assert data["state_dict"]["head.0.weight"].shape[1] == 2 * 8 + len(PROPRIO) + EMBED_DIM
    policy = PixelBCPolicy(path=result.path)
    demo = demos[0]
    frames = demo_frames(camera_store, demo, "front")[:3]
    task = default_registry().get(TASK).model_copy(update={"cameras": CAMERAS})
    words = (demo.instruction, "press the button from the top", demo.instruction)
    policy.reset(PolicyContext(task, (1, 2, 3), words))
    batch = {"state": demo.observations[:3], "image.front": frames, "env_ids": np.array([0, 1, 2])}
    actions = policy.act(batch)
    assert not np.array_equal(actions[1], policy.act({**batch, "env_ids": np.array([0, 0, 0])})[1]), \
        "another instruction moves the action"
    # each row reads its own slot's words, exactly what the network computes from that embedding
    direct = policy.predict(frames, demo.observations[:3][:, list(PROPRIO)], embed_each(words))
    assert np.array_equal(actions, direct)
    from assay.testing import check_policy

    check_policy(PixelBCPolicy(path=result.path), task.model_copy(update={"horizon": HORIZON}), bounded=True)


@pytest.mark.sim
def test_a_pixel_checkpoint_served_by_serve_policy_gets_its_images_and_matches_in_process(tiny_checkpoint, tmp_path):
    """serve-policy publishes the checkpoint's image.front (64 px) and resets it for a task with that camera;
    the client sends exactly that key, so remote episodes equal the in-process ones bit for bit."""
    from assay.cli.serve_commands import policy_server
    from assay.policies.remote import PolicyServerConfig, ServerThread
    from tests.test_faults import run_and_collect

    params = {"path": str(Path(tiny_checkpoint.path).resolve())}
    server = policy_server("pixel-bc", TASK, params, PolicyServerConfig(port=0, max_wait_ms=1))
    assert [c.name for c in server.task.cameras] == ["front"]
    assert server.metadata["contract"]["images"] == {"image.front": {"height": 64, "width": 64, "channels": 3,
                                                                      "layout": "HWC"}}

    def campaign(policy: dict) -> dict:
        return {"name": "served-pixels", "seed": 2, "episodes": 2, "horizon": 12, "envs_per_worker": 2,
                "tasks": [TASK], "policies": [{"name": "pix", **policy}],
                "cameras": [{"name": "front", "width": 64, "height": 64}]}

    _, local, _ = run_and_collect(tmp_path / "local", InlineExecutor(tmp_path / "local"),
                                  campaign({"builtin": "pixel-bc", "params": params}))
    with ServerThread(server):
        _, remote, _ = run_and_collect(tmp_path / "remote", InlineExecutor(tmp_path / "remote"),
                                       campaign({"remote": server.url}))
    assert sorted((v[0], v[2], v[3]) for v in remote.values()) == sorted((v[0], v[2], v[3]) for v in local.values())
    assert all(v[0] is not Outcome.ERROR for v in remote.values())


def test_proprioception_is_each_backends_robot_state_and_one_backend_only():
    from assay.errors import SpecError
    from assay.policies.pixel_bc import proprio_of

    assert proprio_of({"metaworld/reach@1", "metaworld/push@1"}) == PROPRIO
    assert proprio_of(["libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"]) == tuple(range(8))
    for mixed in ({"metaworld/reach@1", "libero/goal/put_the_bowl_on_the_plate@2"}, {"gymnasium/Pendulum-v1@1"}):
        with pytest.raises(SpecError, match="valid: libero, metaworld$"):
            proprio_of(mixed)
