"""Workers build policies, and import what must precede Mesa's LLVM, before any environment.

A CUDA build of torch ships triton; importing triton 3.8 after an OSMesa camera environment
exists kills the process with SIGSEGV (seen with torch 2.14.1's triton), so a lerobot policy
that ran inline died in every ``local`` worker.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from assay.policies import make_policy
from assay.run import LocalExecutor, prepare_campaign, run_campaign
from assay.run import worker as worker_module
from assay.spec import campaign_from_data
from assay.store import Outcome, Store

pytestmark = pytest.mark.sim

CAMERA_CAMPAIGN = {"name": "triton", "seed": 5, "episodes": 2, "envs_per_worker": 2,
                   "tasks": ["metaworld/reach@1"], "cameras": [{"name": "front", "width": 32, "height": 32}],
                   "policies": [{"name": "triton-expert", "entrypoint": "tests.triton_policies:TritonExpert"}]}


def _jobs(policy: dict):
    data = {"name": "order", "seed": 1, "episodes": 2, "envs_per_worker": 2, "tasks": ["metaworld/reach@1"],
            "policies": [policy]}
    return prepare_campaign(campaign_from_data(data)).jobs


def test_the_policy_is_built_before_the_environments(tmp_path, monkeypatch):
    events: list[str] = []
    real_make_env = worker_module.make_env

    def make_env(task):
        events.append("environment")
        return real_make_env(task)

    def factory(spec):
        events.append("policy")
        return make_policy(spec)

    monkeypatch.setattr(worker_module, "make_env", make_env)
    worker = worker_module.Worker(tmp_path, policy_factory=factory)
    try:
        records = worker.run_batch(_jobs({"name": "expert", "builtin": "expert"}))
    finally:
        worker.close()
    assert [r.outcome for r in records] == [Outcome.SUCCESS, Outcome.SUCCESS]
    assert events == ["policy", "environment", "environment"]


def test_what_must_precede_the_renderer_is_imported_before_the_first_environment(tmp_path, monkeypatch):
    probe = "tests.render_order_probe"
    monkeypatch.delitem(sys.modules, probe, raising=False)
    monkeypatch.setattr(worker_module, "LOAD_BEFORE_RENDERING", (probe, "no_such_module_for_assay"))
    imported_when_built: list[bool] = []
    real_make_env = worker_module.make_env

    def make_env(task):
        imported_when_built.append(probe in sys.modules)
        return real_make_env(task)

    monkeypatch.setattr(worker_module, "make_env", make_env)
    worker = worker_module.Worker(tmp_path)
    try:
        worker.run_batch(_jobs({"name": "expert", "builtin": "expert"}))
    finally:
        worker.close()
    assert imported_when_built == [True, True]  # and a module that is not installed is skipped, not an error
    assert worker_module.load_before_rendering() == []  # already imported: nothing to do


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed (a CUDA torch ships it)")
def test_a_policy_that_imports_triton_runs_beside_a_camera_environment(tmp_path):
    # local only: a fresh worker process. An inline run inside this pytest process would import triton after
    # earlier tests' camera environments loaded Mesa's LLVM, the very crash the worker's order prevents.
    made = LocalExecutor(tmp_path, workers=1)
    with Store(tmp_path) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMERA_CAMPAIGN)), store, made)
        records = store.catalog.episodes(campaign="triton")
    assert summary.ran == 2
    assert [r.outcome for r in records] == [Outcome.SUCCESS, Outcome.SUCCESS], [r.reason for r in records]
