"""Our client against a minimal protocol-conformant server written here with websockets and msgpack only,
the server-gone and timeout paths, and a remote policy in a real campaign."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

import msgpack
import numpy as np
import pytest
from websockets.asyncio.server import serve

from assay.policies import ContractError, MLPPolicy, make_policy
from assay.policies.remote import RemotePolicy
from assay.run import InlineExecutor, prepare_campaign, rollout, run_campaign
from assay.sim import Transition, default_registry
from assay.spec import CampaignSpec, PolicySpec, policy_from_shorthand
from assay.store import Outcome, Store
from tests.helpers import FunctionEnv
from tests.remote_support import SMALL_MLP, jobs_for, serving, state_task


def _nd(array: np.ndarray) -> dict:
    """openpi's array map, written out by hand to pin the format."""
    return {b"__ndarray__": True, b"data": array.tobytes(), b"dtype": array.dtype.str, b"shape": list(array.shape)}


@contextlib.contextmanager
def minimal_server(reply):
    """A conformant server: metadata frame on connect, one reply per request; ``reply(request) -> bytes | None``."""
    seen: list = []
    ready, port = threading.Event(), []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def handler(ws):
        await ws.send(msgpack.packb({"note": "minimal"}, use_bin_type=True))
        async for frame in ws:
            request = msgpack.unpackb(frame, raw=False)
            seen.append(request)
            answer = reply(request)
            if answer is not None:
                await ws.send(answer)

    async def main():
        async with serve(handler, "127.0.0.1", 0) as server:
            port.append(server.sockets[0].getsockname()[1])
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield f"ws://127.0.0.1:{port[0]}", seen
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


def _chunk_reply(request):
    value = np.frombuffer(request["observation/state"][b"data"], dtype=np.float32)[0]
    chunk = np.array([[value + 1], [value + 2], [value + 3]], dtype=np.float64)  # (H=3, A=1)
    return msgpack.packb({"actions": _nd(chunk)}, use_bin_type=True)


def _transition(reward=0.0):
    return Transition({"state": np.zeros(1)}, reward, False, False, False, {})


def test_client_request_format_and_chunks_from_a_minimal_server():
    task = state_task(state_dim=1, action_dim=1, horizon=6)
    with minimal_server(_chunk_reply) as (url, seen):
        policy = RemotePolicy(url, timeout_s=5)
        actions = policy.act({"state": np.array([[10.0], [20.0]]), "instruction": ["a", "b"], "env_ids": np.arange(2)})
        policy.close()
    assert actions.shape == (2, 3, 1) and actions[:, :, 0].tolist() == [[11, 12, 13], [21, 22, 23]]
    request = seen[0]
    assert set(request) == {"observation/state", "prompt"}
    assert request["observation/state"][b"dtype"] == "<f4" and request["observation/state"][b"shape"] == [1]
    assert request["prompt"] in ("a", "b")
    del task


def test_server_gone_gives_error_episodes_with_the_reason():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed
    task = state_task(state_dim=1, action_dim=1)
    envs = [FunctionEnv(task, lambda s, t, a: _transition()) for _ in range(3)]
    policy = RemotePolicy(f"ws://127.0.0.1:{port}", connect_attempts=2, backoff_s=0.01, timeout_s=2)
    recorders = rollout(envs, policy, jobs_for(task, [1, 2, 3]))
    policy.close()
    assert [r.outcome for r in recorders] == [Outcome.ERROR] * 3
    assert all("unreachable after 2 attempts" in r.reason for r in recorders)


def test_request_timeout_gives_error_episodes():
    task = state_task(state_dim=1, action_dim=1)
    with minimal_server(lambda request: None) as (url, _):  # never answers
        policy = RemotePolicy(url, timeout_s=0.3)
        recorders = rollout([FunctionEnv(task, lambda s, t, a: _transition())], policy, jobs_for(task, [1]))
        policy.close()
    assert recorders[0].outcome is Outcome.ERROR and "no reply within 0.3 s" in recorders[0].reason


@pytest.mark.parametrize("actions, reason", [
    (np.array([[np.nan]]), "NaN"),
    (np.array([[1, 2]], dtype=np.int64), "dtype int64"),
    (np.zeros((1, 2)), "shape (1, 2)"),
])
def test_bad_remote_actions_become_error_episodes(actions, reason):
    task = state_task(state_dim=1, action_dim=1)
    with minimal_server(lambda r: msgpack.packb({"actions": _nd(actions)}, use_bin_type=True)) as (url, _):
        policy = RemotePolicy(url, timeout_s=5)
        recorders = rollout([FunctionEnv(task, lambda s, t, a: _transition())], policy, jobs_for(task, [1]))
        policy.close()
    assert recorders[0].outcome is Outcome.ERROR and reason in recorders[0].reason


def test_shorthand_and_spec_validation():
    spec = policy_from_shorthand("remote:ws://127.0.0.1:8000")
    assert spec.remote == "ws://127.0.0.1:8000" and spec.name == "remote-127.0.0.1-8000"
    assert spec.source == "remote:ws://127.0.0.1:8000"
    with pytest.raises(ValueError, match="ws://host:port"):
        PolicySpec(name="r", remote="http://x:1")
    with pytest.raises(ValueError, match="exactly one"):
        PolicySpec(name="r", remote="ws://x:1", builtin="mlp")


def _campaign(name, policy, **extra):
    return CampaignSpec(name=name, episodes=2, tasks=("metaworld/reach@1",), policies=(policy,), envs_per_worker=2,
                        **extra)


@pytest.mark.sim
def test_remote_mlp_campaign_matches_in_process_exactly(tmp_path):
    """Same keys' trajectories: the served MLP and the in-process MLP give identical episodes."""
    task = default_registry().get("metaworld/reach@1")
    local = PolicySpec(name="mlp", builtin="mlp", params=SMALL_MLP)
    with serving(make_policy(local), task, max_batch=8, max_wait_ms=2) as server:
        remote = policy_from_shorthand(f"remote:{server.url}")
        with Store(tmp_path / "store", create=True) as store:
            executor = InlineExecutor(store.root)
            run_campaign(prepare_campaign(_campaign("remote", remote)), store, executor)
            run_campaign(prepare_campaign(_campaign("local", local)), store, executor)
            by_campaign = {c: store.catalog.episodes(campaign=c) for c in ("remote", "local")}
    hashes = {c: sorted((r.seed, r.trajectory_hash, r.steps) for r in rows) for c, rows in by_campaign.items()}
    assert hashes["remote"] == hashes["local"]
    assert all(r.outcome is not Outcome.ERROR for r in by_campaign["remote"])


@pytest.mark.sim
def test_contract_mismatch_with_a_server_is_a_hard_error_before_episode_one():
    task = default_registry().get("metaworld/reach@1")
    wrong = MLPPolicy(**{**SMALL_MLP, "state_dim": 40, "action_dim": 3})
    with serving(wrong, task) as server, pytest.raises(ContractError) as error:
        prepare_campaign(_campaign("bad", policy_from_shorthand(f"remote:{server.url}")))
    message = str(error.value)
    assert "observation 'observation/state': policy expects shape (40,), task gives (39,)" in message
    assert "action dim: policy 3, task 4" in message


def test_client_sends_the_api_key_from_the_environment(monkeypatch):
    task = state_task()
    with serving(MLPPolicy(**SMALL_MLP), task, api_key="s3cret") as server:
        obs = {"state": np.zeros((2, 39)), "instruction": ["x", "y"], "env_ids": np.arange(2)}
        monkeypatch.setenv("ASSAY_API_KEY", "s3cret")
        policy = RemotePolicy(server.url, timeout_s=5)
        assert policy.act(obs).shape == (2, 1, 4)
        policy.close()
        monkeypatch.setenv("ASSAY_API_KEY", "wrong")
        envs = [FunctionEnv(state_task(), lambda s, t, a: _transition())]
        refused = RemotePolicy(server.url, timeout_s=5)
        recorders = rollout(envs, refused, jobs_for(task, [1]))
        refused.close()
    assert recorders[0].outcome is Outcome.ERROR
    assert "refused the API key (HTTP 401); set the key in $ASSAY_API_KEY" in recorders[0].reason


def test_a_503s_retry_after_is_honoured_and_plain_backoff_keeps_its_jitter():
    from websockets.datastructures import Headers
    from websockets.exceptions import InvalidStatus
    from websockets.http11 import Response

    from assay.policies.remote.connecting import MAX_RETRY_AFTER_S, RemoteParams, _retry_after, backoff_s

    def refused(status: int, retry_after: str | None) -> InvalidStatus:
        headers = Headers({"Retry-After": retry_after} if retry_after is not None else {})
        return InvalidStatus(Response(status, "", headers, b""))

    params = RemoteParams()
    assert [_retry_after(refused(503, value)) for value in ("10", "2.5", "soon", None)] == [10.0, 2.5, None, None]
    assert _retry_after(refused(500, "10")) is None and _retry_after(OSError("refused")) is None
    plain = [backoff_s(params, attempt) for attempt in range(1, 8) for _ in range(50)]
    assert min(plain) >= 0.075 and max(plain) <= 2.5 and sum(plain) / len(plain) == pytest.approx(1.0, rel=0.1)
    told = [backoff_s(params, 1, 10.0) for _ in range(200)]
    assert min(told) >= 10.0 and max(told) <= 12.5, "never before the server's Retry-After, spread up to 25 % later"
    assert max(backoff_s(params, 1, 3600.0) for _ in range(50)) <= MAX_RETRY_AFTER_S * 1.25
    # the default budget: 7 waits of plain backoff (5-9 s) would end before a 10 s eviction threshold; honouring
    # a Retry-After of 10 s, the first wait alone outlasts it
    assert sum(min(0.1 * 2 ** k, 2.0) for k in range(7)) * 1.25 < 10.0 <= min(told)
