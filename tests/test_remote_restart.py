"""A policy server restarted in the middle of a campaign (issue 25).

The client waits out a restart of a few seconds; episodes whose requests were in
flight when the server went down are recorded as errors, and ``--retry-errors``
then re-runs them. The store must end up equal to an undisturbed run, episode by
episode: same outcomes, steps and trajectory hashes (the state must travel with
one dtype whatever connection carries it).
"""

from __future__ import annotations

import threading
import time

import pytest

from assay.policies import ExpertPolicy
from assay.policies.remote import PolicyServer, PolicyServerConfig, ServerThread
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.sim import default_registry
from assay.spec import campaign_from_data
from assay.store import Outcome, Store


class _Tripwire(ExpertPolicy):
    """The expert, which sets ``fired`` at its first call once ``armed`` and then holds that request for
    ``HOLD_S``: the server goes down with it in flight, whatever the machine's speed (no race)."""

    armed = threading.Event()
    fired = threading.Event()
    HOLD_S = 1.5

    def act(self, observations):
        if self.armed.is_set() and not self.fired.is_set():
            self.fired.set()
            time.sleep(self.HOLD_S)  # in the server's inference thread: its event loop goes on and shuts down
        return super().act(observations)


def _server(port: int) -> ServerThread:
    task = default_registry().get("metaworld/reach@1")
    identity = {"policy": "expert", "version": "1"}
    server = PolicyServer(_Tripwire(), task, PolicyServerConfig(port=port, max_wait_ms=1), identity)
    return ServerThread(server)


def _campaign(port: int) -> dict:
    return {"name": "restart", "seed": 4, "episodes": 6, "envs_per_worker": 2, "horizon": 150,
            "tasks": ["metaworld/reach@1"],
            "policies": [{"name": "served", "remote": f"ws://127.0.0.1:{port}", "version": "expert-1",
                          "params": {"timeout_s": 10}}]}


def _results(store: Store) -> dict[str, tuple[str, int, str]]:
    return {r.key: (r.outcome.value, r.steps, r.trajectory_hash) for r in store.catalog.episodes(campaign="restart")}


@pytest.mark.slow
def test_a_restarted_server_and_retry_errors_give_the_undisturbed_results(tmp_path):
    first = _server(0)
    server = first.__enter__()
    port = server.port
    data = _campaign(port)
    try:
        with Store(tmp_path / "undisturbed") as store:
            run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(store.data_root))
            reference = _results(store)
        assert len(reference) == 6 and all(outcome != "error" for outcome, _, _ in reference.values())
    finally:
        first.__exit__(None, None, None)

    current = [_server(port)]
    current[0].__enter__()
    restarted = threading.Event()

    def restart() -> None:
        assert _Tripwire.fired.wait(60)  # the next batch is under way
        current[0].__exit__(None, None, None)  # down with requests in flight ...
        time.sleep(3.0)  # ... for 3 s, then up again on the same port
        current.append(_server(port))
        current[-1].__enter__()
        restarted.set()

    seen: list[str] = []

    def on_record(record) -> None:
        seen.append(record.key)
        if len(seen) == 2:
            _Tripwire.armed.set()
            threading.Thread(target=restart).start()

    try:
        with Store(tmp_path / "disturbed") as store:
            plan = prepare_campaign(campaign_from_data(data))
            run_campaign(plan, store, InlineExecutor(store.data_root), on_record=on_record)
            assert restarted.wait(30)
            errors = [r for r in store.catalog.episodes(campaign="restart") if r.outcome is Outcome.ERROR]
            assert errors, "the restart broke no episode: the test would prove nothing"
            assert all("policy server" in r.reason for r in errors), [r.reason for r in errors]
            summary = run_campaign(plan, store, InlineExecutor(store.data_root), retry_errors=True)
            assert summary.retried == len(errors) and summary.outcomes["error"] == 0
            assert _results(store) == reference
    finally:
        current[-1].__exit__(None, None, None)
