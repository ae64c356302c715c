"""The lerobot adapter's feature mapping, checked without lerobot installed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from assay.errors import ContractError, SpecError
from assay.policies import make_policy, resolve_policy
from assay.policies.contract import check_contract
from assay.policies.lerobot_map import assay_actions, lerobot_batch, map_features, read_config
from assay.policies.lerobot_policy import LeRobotPolicy
from assay.sim import default_registry
from assay.spec import CameraSpec, policy_from_shorthand


def _task(*cameras: CameraSpec):
    return default_registry().get("metaworld/reach@1").model_copy(update={"cameras": cameras})


FRONT = CameraSpec(name="front", width=64, height=48)
CONFIG = {
    "type": "act",
    "n_action_steps": 10,
    "chunk_size": 20,
    "input_features": {
        "observation.state": {"type": "STATE", "shape": [39]},
        "observation.images.front": {"type": "VISUAL", "shape": [3, 48, 64]},
    },
    "output_features": {"action": {"type": "ACTION", "shape": [4]}},
}


def test_features_map_to_the_task_and_back():
    features = map_features(CONFIG, _task(FRONT))
    assert features.state_dim == 39 and features.action_dim == 4 and features.chunk_size == 10
    assert features.images == (("observation.images.front", "front", (3, 48, 64)),)
    frames = np.zeros((2, 48, 64, 3), np.uint8)
    frames[1, 5, 7] = (255, 0, 51)
    batch = lerobot_batch(features, {"state": np.ones((2, 39)), "image.front": frames, "instruction": ["a", "b"]})
    assert sorted(batch) == ["observation.images.front", "observation.state"]
    assert batch["observation.state"].dtype == np.float32 and batch["observation.state"].shape == (2, 39)
    image = batch["observation.images.front"]
    assert image.shape == (2, 3, 48, 64) and image.dtype == np.float32
    assert image[1, :, 5, 7].tolist() == pytest.approx([1.0, 0.0, 0.2]) and image[0].max() == 0.0  # CHW in [0, 1]
    chunk = assay_actions(features, np.zeros((2, 10, 4), np.float32), 2)
    assert chunk.shape == (2, 10, 4) and chunk.dtype == np.float64  # the runner replans through the chunk


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {
                "input_features": {
                    **CONFIG["input_features"],
                    "observation.images.wrist": {"type": "VISUAL", "shape": [3, 48, 64]},
                }
            },
            r"lerobot input 'observation.images.wrist' needs camera 'wrist'; "
            r"Assay task metaworld/reach@1 renders \['front'\]",
        ),
        (
            {"input_features": {"observation.images.front": {"type": "VISUAL", "shape": [3, 96, 96]}}},
            r"lerobot input 'observation.images.front' has shape \[3, 96, 96\]; "
            r"Assay camera 'front' renders \[3, 48, 64\]",
        ),
        (
            {"input_features": {"observation.state": {"type": "STATE", "shape": [14]}}},
            r"lerobot input 'observation.state' has shape \[14\]; "
            r"Assay task metaworld/reach@1 gives state of shape \[39\]",
        ),
        (
            {"output_features": {"action": {"type": "ACTION", "shape": [7]}}},
            r"lerobot output 'action' has shape \[7\]; Assay task metaworld/reach@1 takes actions of shape \[4\]",
        ),
        (
            {"input_features": {"observation.environment_state": {"type": "ENV", "shape": [3]}}},
            r"lerobot input 'observation.environment_state' has no Assay counterpart",
        ),
    ],
)
def test_a_mismatch_is_one_line_naming_both_sides(change, message):
    with pytest.raises(ContractError, match=message) as caught:
        map_features({**CONFIG, **change}, _task(FRONT))
    assert "\n" not in str(caught.value)


def test_runtime_shape_and_action_mismatches():
    features = map_features(CONFIG, _task(FRONT))
    with pytest.raises(ContractError, match=r"expects 48x64 frames; Assay camera 'front' gave \[64, 64, 3\]"):
        lerobot_batch(features, {"state": np.ones((1, 39)), "image.front": np.zeros((1, 64, 64, 3), np.uint8)})
    with pytest.raises(
        ContractError, match=r"returned actions of shape \[1, 10, 6\]; Assay expects \[1, 4\] or \[1, H, 4\]"
    ):
        assay_actions(features, np.zeros((1, 10, 6)), 1)


def test_policy_directory_contract_and_version_without_lerobot(tmp_path):
    folder = tmp_path / "act_policy"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(b"weights")
    spec = policy_from_shorthand(f"lerobot:{folder}/")
    assert spec.builtin == "lerobot" and spec.name == "lerobot-act_policy"
    version = resolve_policy(spec).version
    assert version.startswith("lerobot-")
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert resolve_policy(spec).version != version  # the version follows the files' contents
    contract = LeRobotPolicy.contract({"path": str(folder)})
    assert contract.chunk_length == 10 and contract.action.dim == 4 and "image.front" in contract.images
    assert check_contract(contract, _task(FRONT)).errors == ()
    assert any(
        "image 'image.front'" in e for e in check_contract(contract, _task()).errors
    )  # no camera: caught at plan
    try:
        import lerobot  # noqa: F401
    except ImportError:
        with pytest.raises(SpecError, match="lerobot is not installed here"):
            make_policy(spec)
    with pytest.raises(SpecError, match="no config.json"):
        read_config(tmp_path)
