"""The torch MLP policy: deterministic weights, batch-independent rows, weights files, contract, install hint."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from assay.errors import UnsupportedError
from assay.policies import ContractError, ContractWarning, MLPPolicy, check_contract, resolve_policy
from assay.policies.contract import PolicyContract
from assay.spec import PolicySpec
from tests.remote_support import SMALL_MLP, state_task


@pytest.mark.parametrize("params", [SMALL_MLP, {}], ids=["small", "default-size"])
def test_weights_are_deterministic_from_the_seed_and_rows_are_independent(params):
    states = np.random.default_rng(1).normal(size=(16, 39))
    a, b, c = MLPPolicy(**params), MLPPolicy(**params), MLPPolicy(**params, seed=1)
    batched = a.act({"state": states})
    assert batched.shape == (16, 4) and batched.dtype == np.float32 and np.all(np.abs(batched) <= 1)
    np.testing.assert_array_equal(batched, b.act({"state": states}))
    assert not np.allclose(batched, c.act({"state": states}))
    one_by_one = np.concatenate([a.act({"state": states[i : i + 1]}) for i in range(16)])
    np.testing.assert_array_equal(one_by_one, batched)  # bit for bit: batching never changes a result
    for size in (3, 5, 13):
        np.testing.assert_array_equal(a.act({"state": states[:size]}), batched[:size])


def test_chunk_output_shape():
    policy = MLPPolicy(**SMALL_MLP, chunk=5)
    assert policy.act({"state": np.zeros((3, 39))}).shape == (3, 5, 4)
    with pytest.raises(ValueError, match=r"state of shape \(B, 39\)"):
        policy.act({"state": np.zeros((3, 7))})


def test_trained_weights_load_from_a_file_and_version_the_policy(tmp_path):
    import torch

    trained = MLPPolicy(**SMALL_MLP, seed=7)
    path = tmp_path / "weights.pt"
    torch.save(trained.model.state_dict(), path)
    loaded = MLPPolicy(**SMALL_MLP, seed=0, weights=str(path))
    states = np.random.default_rng(2).normal(size=(4, 39))
    np.testing.assert_array_equal(loaded.act({"state": states}), trained.act({"state": states}))
    spec = PolicySpec(name="m", builtin="mlp", params={**SMALL_MLP, "weights": str(path)})
    first = resolve_policy(spec).version
    torch.save(MLPPolicy(**SMALL_MLP, seed=8).model.state_dict(), path)
    assert resolve_policy(spec).version != first and first.startswith("builtin-1-w")


def test_contract_declares_observations_and_the_handshake_diffs_it():
    contract = MLPPolicy.contract(SMALL_MLP)
    assert contract.observations["observation/state"].shape == (39,)
    assert check_contract(contract, state_task()).errors == ()
    report = check_contract(MLPPolicy.contract({**SMALL_MLP, "state_dim": 12}), state_task())
    assert report.errors == ("observation 'observation/state': policy expects shape (12,), task gives (39,)",)
    with pytest.raises(ContractError, match="does not fit task fake/state@1"):
        report.raise_or_warn("mlp", state_task())


def test_garbage_mismatches_are_errors_and_range_mismatches_warnings():
    contract = PolicyContract.model_validate({
        "observations": {"observation/state": {"shape": [39]}, "observation/image": {"shape": [224, 224, 3],
                                                                                    "dtype": "uint8"}},
        "action": {"dim": 4, "mode": "absolute", "gripper": "positive_opens", "low": -2.0, "high": 1.0},
        "control_hz": 15.0,
    })
    report = check_contract(contract, state_task())
    assert report.errors == (
        "observation 'observation/image': policy requires it, task gives only ['observation/state']",
        "action mode: policy absolute, task delta",
        "gripper polarity: policy positive_opens, task positive_closes",
    )
    assert report.warnings == ("action low: policy -2.0, task -1.0 (actions below are clipped)",
                               "control rate: policy 15 Hz, task 10 Hz")
    ranges_only = contract.model_copy(update={"observations": {"observation/state": contract.observations[
        "observation/state"]}, "action": contract.action.model_copy(update={"mode": None, "gripper": None})})
    with pytest.warns(ContractWarning) as caught:
        check_contract(ranges_only, state_task()).raise_or_warn("p", state_task())  # no error: it runs
    assert [str(w.message).split(": ", 1)[1] for w in caught] == list(report.warnings)


def test_missing_torch_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UnsupportedError, match=r"pip install torch==2\.13\.0"):
        MLPPolicy(**SMALL_MLP)


def test_prepare_campaign_refuses_a_local_mlp_that_does_not_fit():
    from assay.run import prepare_campaign
    from assay.spec import CampaignSpec

    spec = CampaignSpec(name="c", episodes=1, tasks=("metaworld/reach@1",),
                        policies=(PolicySpec(name="m", builtin="mlp", params={**SMALL_MLP, "action_dim": 6}),))
    with pytest.raises(ContractError, match=r"policy 'm' does not fit task metaworld/reach@1: action dim: policy 6, task 4"):
        prepare_campaign(spec)
    ok = spec.model_copy(update={"policies": (PolicySpec(name="m", builtin="mlp", params=SMALL_MLP),)})
    assert len(prepare_campaign(ok).jobs) == 1
