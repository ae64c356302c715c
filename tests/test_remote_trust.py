"""Remote policies as reproducible as in-process ones: images on the wire (against a plain openpi-style
server built on the real openpi-client), one state dtype from the first request, the server's
identity, task and contract in the episode key, and the server's batch size in the step data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from assay.errors import SpecError
from assay.policies import ContractError, MLPPolicy, PolicyContext, check_contract
from assay.policies.contract import ActionContract, ActionMode, ArraySpec, GripperPolarity, ImageSpec, PolicyContract
from assay.policies.loader import remote_version
from assay.policies.remote import PolicyServerConfig, RemotePolicy
from assay.run import InlineExecutor, prepare_campaign, rollout, run_campaign
from assay.sim import Transition, default_registry
from assay.spec import CameraSpec, PolicySpec, campaign_from_data
from assay.store import Outcome, Store
from tests.helpers import FunctionEnv
from tests.openpi_support import openpi_server
from tests.remote_support import SMALL_MLP, jobs_for, serving, state_task

CAMERAS = (CameraSpec(name="front", width=64, height=48), CameraSpec(name="top", width=32, height=32))
IMAGE_CONTRACT = {"contract": PolicyContract(
    observations={"observation/state": ArraySpec(shape=(39,), dtype="float32")},
    images={"observation/image": ImageSpec(height=224, width=224)},
    action=ActionContract(dim=4)).model_dump(mode="json")}


def _frames(rows: int, height: int, width: int, offset: int) -> np.ndarray:
    return ((np.arange(rows * height * width * 3).reshape(rows, height, width, 3) + offset) % 251).astype(np.uint8)


def _camera_batch(rows: int = 2) -> dict[str, Any]:
    return {"state": np.zeros((rows, 39)), "instruction": ["reach"] * rows, "env_ids": np.arange(rows),
            "image.front": _frames(rows, 48, 64, 0), "image.top": _frames(rows, 32, 32, 7)}


def _act_once(url: str, batch: Mapping[str, Any], **params: Any) -> np.ndarray:
    task = state_task().model_copy(update={"cameras": CAMERAS})
    policy = RemotePolicy(url, timeout_s=5, **params)
    policy.reset(PolicyContext(task, (1, 2), ("reach", "reach")))
    try:
        return policy.act(batch)
    finally:
        policy.close()


def test_each_camera_reaches_a_plain_openpi_server_under_its_wire_key_as_uint8():
    batch = _camera_batch()
    with openpi_server(keys=("observation/image", "observation/wrist_image")) as (url, seen):
        actions = _act_once(url, batch)
    assert actions.shape == (2, 2, 4)
    by_prompt = sorted(seen, key=lambda r: int(r["observation/image"][0, 0, 0]))
    assert [r["observation/image"].dtype for r in seen] == [np.uint8, np.uint8]
    np.testing.assert_array_equal(by_prompt[0]["observation/image"], batch["image.front"][0])
    np.testing.assert_array_equal(by_prompt[0]["observation/wrist_image"], batch["image.top"][0])


def test_a_campaign_maps_cameras_to_wire_keys_itself():
    batch = _camera_batch(1)
    with openpi_server(keys=("observation/image",)) as (url, seen):
        _act_once(url, batch, images={"observation/image": "top"})
    np.testing.assert_array_equal(seen[0]["observation/image"], batch["image.top"][0])
    assert "observation/wrist_image" not in seen[0]


def test_images_are_resized_with_padding_to_the_size_the_contract_declares():
    image_tools = pytest.importorskip("openpi_client.image_tools")
    batch = _camera_batch(1)
    with openpi_server(metadata=IMAGE_CONTRACT) as (url, seen):
        _act_once(url, batch)
    sent = seen[0]["observation/image"]
    assert sent.shape == (224, 224, 3) and sent.dtype == np.uint8
    np.testing.assert_array_equal(sent, image_tools.resize_with_pad(batch["image.front"][0], 224, 224))
    assert seen[0]["observation/wrist_image"].shape == (32, 32, 3)  # not declared: sent as rendered


def test_image_size_resizes_as_openpis_libero_client_for_a_server_without_a_contract():
    """openpi's examples/libero/main.py renders 256 px and sends resize_with_pad(img, 224, 224): with
    ``image_size`` a plain openpi server gets exactly those pixels (a square frame and a wide one, padded)."""
    image_tools = pytest.importorskip("openpi_client.image_tools")
    batch = {**_camera_batch(1), "image.top": _frames(1, 256, 256, 3)}
    with openpi_server(keys=("observation/image", "observation/wrist_image")) as (url, seen):
        _act_once(url, batch, image_size=(224, 224))
    np.testing.assert_array_equal(seen[0]["observation/image"],
                                  image_tools.resize_with_pad(batch["image.front"][0], 224, 224))
    np.testing.assert_array_equal(seen[0]["observation/wrist_image"],
                                  image_tools.resize_with_pad(batch["image.top"][0], 224, 224))
    with openpi_server(metadata=IMAGE_CONTRACT) as (url, seen):  # a contract's declared size comes first
        _act_once(url, batch, image_size=(96, 96))
    assert seen[0]["observation/image"].shape == (224, 224, 3)
    assert seen[0]["observation/wrist_image"].shape == (96, 96, 3)


@pytest.mark.parametrize("size", [(0, 224), (224, -1)])
def test_a_bad_image_size_is_refused(size):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"must be two positive integers \[height, width\]"):
        RemotePolicy("ws://127.0.0.1:1", image_size=size)


def test_the_handshake_sees_the_cameras():
    contract = PolicyContract.model_validate(IMAGE_CONTRACT["contract"])
    with_cameras = state_task().model_copy(update={"cameras": CAMERAS})
    assert check_contract(contract, with_cameras).errors == ()
    errors = check_contract(contract, state_task()).errors
    assert errors == ("image 'observation/image': policy requires it, task renders no images (add the camera to the "
                      "campaign)",)
    with pytest.raises(SpecError, match="images: camera side is not rendered by the campaign; cameras: front, top"):
        check_contract(contract, with_cameras, {"observation/image": "side"})


def test_every_request_has_the_contracts_state_dtype_from_the_first_one():
    metadata = {"contract": PolicyContract(observations={"observation/state": ArraySpec(shape=(39,), dtype="float64")},
                                           action=ActionContract(dim=4)).model_dump(mode="json")}
    with openpi_server(metadata=metadata, keys=()) as (url, seen):
        policy = RemotePolicy(url, timeout_s=5)
        policy.reset(PolicyContext(state_task(), (1, 2), ("x", "x")))
        for _ in range(2):
            policy.act({"state": np.full((2, 39), 0.1), "instruction": ["x", "x"], "env_ids": np.arange(2)})
        policy.close()
    assert [r["observation/state"].dtype for r in seen] == [np.float64] * 4
    assert seen[0]["observation/state"][0] == 0.1  # not rounded through float32


def test_a_server_without_identity_needs_a_version_and_its_declarations_are_in_the_version():
    plain = PolicySpec(name="vla", remote="ws://127.0.0.1:9")
    with pytest.raises(SpecError, match="declares no identity .* set `version:` on the policy"):
        remote_version(plain, {})
    pinned = PolicySpec(name="vla", remote="ws://127.0.0.1:9", version="pi0-step-3000")
    assert remote_version(pinned, {}) == "pi0-step-3000"
    assert remote_version(pinned, IMAGE_CONTRACT) != remote_version(pinned, {})
    served = {"assay": {"policy": "expert", "source": "expert", "params": {}, "version": "builtin-1",
                        "task": "metaworld/reach@1"}}
    other_task = {"assay": {**served["assay"], "task": "metaworld/pick-place@1"}}
    assert remote_version(plain, served).startswith("remote-")
    assert remote_version(plain, served) != remote_version(plain, other_task)
    assert remote_version(plain, served) != remote_version(plain, {**served, **IMAGE_CONTRACT})


def test_the_server_batch_size_and_timings_are_recorded_per_step():
    task = state_task(horizon=3)
    envs = [FunctionEnv(task, lambda s, t, a: Transition({"state": np.zeros(39)}, 0.0, False, False, False, {}))
            for _ in range(3)]
    for env in envs:
        env.reset = lambda seed: {"state": np.zeros(39)}  # type: ignore[method-assign]
    with serving(MLPPolicy(**SMALL_MLP), task, max_batch=8, max_wait_ms=50) as server:
        policy = RemotePolicy(server.url, timeout_s=5)
        recorders = rollout(envs, policy, jobs_for(task, [1, 2, 3]))
        policy.close()
    sizes = [trace["server_batch_size"] for recorder in recorders for trace in recorder.traces]
    assert len(sizes) == 9 and all(1 <= size <= 3 for size in sizes)
    assert max(sizes) > 1  # three concurrent rows within 50 ms: batched together
    # the server's own timing of each request, next to the client's round trip (the trace's policy layer)
    for trace in (t for recorder in recorders for t in recorder.traces):
        assert {"server_queue_ms", "server_infer_ms", "client_round_trip_ms"} <= set(trace)
        assert trace["client_round_trip_ms"] >= trace["server_infer_ms"] >= 0.0


def test_contract_mode_and_gripper_are_checked_on_meta_world():
    task = default_registry().get("metaworld/reach@1")
    absolute = PolicyContract(observations={"observation/state": ArraySpec(shape=(39,))},
                              action=ActionContract(dim=4, mode=ActionMode.ABSOLUTE,
                                                    gripper=GripperPolarity.POSITIVE_OPENS))
    assert check_contract(absolute, task).errors == ("action mode: policy absolute, task delta",
                                                     "gripper polarity: policy positive_opens, task positive_closes")


def _data(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "episodes": 2, "horizon": 6, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "served", "remote": url, **extra}]}


@pytest.mark.sim
def test_a_server_bound_to_another_task_is_refused_in_one_line():
    reach = default_registry().get("metaworld/reach@1")
    with serving(MLPPolicy(**SMALL_MLP), reach) as server:
        data = {**_data("mismatch", server.url), "tasks": ["metaworld/pick-place@1"]}
        with pytest.raises(ContractError) as error:
            prepare_campaign(campaign_from_data(data))
    assert str(error.value) == (f"policy 'served': the server at {server.url} serves task metaworld/reach@1, the "
                                "campaign runs metaworld/pick-place@1; restart it with `assay serve-policy ... --task "
                                "metaworld/pick-place@1`")


@pytest.mark.sim
def test_serve_policy_publishes_the_classs_own_contract():
    from assay.cli.serve_commands import policy_server

    server = policy_server("tests.helpers:SevenDimPolicy", "metaworld/reach@1", {}, PolicyServerConfig(port=0))
    assert server.metadata["contract"]["action"]["dim"] == 7
    assert server.metadata["assay"]["task"] == "metaworld/reach@1"


@pytest.mark.sim
def test_a_vla_style_campaign_sends_camera_images_and_records_the_server(tmp_path):
    data = {**_data("vla", "", version="pi0-test"), "episodes": 1, "horizon": 3,
            "cameras": [{"name": "front", "width": 32, "height": 32}, {"name": "top", "width": 32, "height": 32}]}
    with openpi_server(metadata={"checkpoint": "pi0-test"}, keys=("observation/image", "observation/wrist_image")) \
            as (url, seen):
        data["policies"][0]["remote"] = url
        with Store(tmp_path / "store", create=True) as store:
            run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(store.root))
            [record] = store.catalog.episodes(campaign="vla")
    assert record.outcome is Outcome.TIMEOUT, record.reason
    assert len(seen) == 2 and all(r["observation/image"].shape == (32, 32, 3) for r in seen)
    assert record.policy_info["server"] == {"checkpoint": "pi0-test"}


@pytest.mark.slow
@pytest.mark.sim
def test_a_remote_campaign_is_bit_identical_on_any_executor_worker_count_and_pipeline(tmp_path):
    """The served expert (a contract from the task: float64 state) gives the same episodes, down to the
    step data, inline, on 1 and 2 local workers, and decoupled on 2 workers."""
    from assay.policies import ExpertPolicy
    from assay.run import LocalExecutor
    from tests.test_faults import run_and_collect

    reach = default_registry().get("metaworld/reach@1")
    with serving(ExpertPolicy(), reach, max_batch=8, max_wait_ms=2) as server:
        base = {**_data("remote-det", server.url), "episodes": 4, "horizon": 20, "seed": 3}
        runs = {}
        for label, make, extra in [("inline", InlineExecutor, {}),
                                   ("local-1", lambda root: LocalExecutor(root, 1), {}),
                                   ("local-2", lambda root: LocalExecutor(root, 2), {}),
                                   ("decoupled-2", lambda root: LocalExecutor(root, 2), {"pipeline": "decoupled"})]:
            data = {**base, **extra, "name": f"remote-det-{extra.get('pipeline', 'lockstep')}"}
            _, runs[label], _ = run_and_collect(tmp_path / label, make(tmp_path / label), data)
    assert runs["inline"] == runs["local-1"] == runs["local-2"] == runs["decoupled-2"]
    assert len({v[3] for v in runs["inline"].values()}) == 4
    assert all(v[0] is not Outcome.ERROR for v in runs["inline"].values())


def test_a_user_policys_version_changes_when_a_module_it_imports_changes(tmp_path, monkeypatch):
    import importlib
    import sys

    from assay.policies import resolve_policy

    package = tmp_path / "trustpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "gains.py").write_text("GAIN = 1.0\n")
    (package / "policy.py").write_text("from trustpkg.gains import GAIN\n\nclass Policy:\n    gain = GAIN\n")
    (tmp_path / "solo_consts.py").write_text("GAIN = 1.0\n")
    (tmp_path / "solo_policy.py").write_text("from solo_consts import GAIN\n\nclass Policy:\n    gain = GAIN\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        versions = {}
        for entry in ("trustpkg.policy:Policy", "solo_policy:Policy"):
            versions[entry] = resolve_policy(PolicySpec(name="p", entrypoint=entry)).version
            assert versions[entry] == resolve_policy(PolicySpec(name="p", entrypoint=entry)).version  # stable
        (package / "gains.py").write_text("GAIN = 2.0\n")
        (tmp_path / "solo_consts.py").write_text("GAIN = 2.0\n")
        for entry, before in versions.items():
            assert resolve_policy(PolicySpec(name="p", entrypoint=entry)).version != before, entry
        pinned = PolicySpec(name="p", entrypoint="trustpkg.policy:Policy", version="v7")
        assert resolve_policy(pinned).version == "v7"
        # what else the process imported never changes a version (a campaign's other policies, say)
        solo = resolve_policy(PolicySpec(name="p", entrypoint="solo_policy:Policy")).version
        (tmp_path / "solo_unrelated.py").write_text("X = 1\n")
        importlib.import_module("solo_unrelated")
        assert resolve_policy(PolicySpec(name="p", entrypoint="solo_policy:Policy")).version == solo
    finally:
        for name in [n for n in sys.modules if n.startswith(("trustpkg", "solo_"))]:
            del sys.modules[name]
