"""A LeRobot LIBERO policy evaluated as shipped: ``make test-interop``.

In lerobot's own environment (``.venv-interop``, no LIBERO there), ``tests/interop/make_libero_policy.py``
builds ACT with lerobot's factory from lerobot's LIBERO environment config (``observation.images.image``,
``.image2`` at 256 px, the 8-d ``observation.state``, 7-d actions; untrained weights) and saves it;
``assay serve-policy lerobot`` serves that directory from the same environment; and a campaign here (where
LIBERO is installed) with ``preset: lerobot`` evaluates it on a LIBERO task. No glue: the campaign names
the cameras as LeRobot does, and the lerobot side loads the directory as LeRobot saved it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store

pytestmark = [pytest.mark.interop, pytest.mark.libero, pytest.mark.sim, pytest.mark.slow]

INTEROP_PYTHON = os.environ.get("ASSAY_INTEROP_PYTHON")
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
ROOT = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.skipif(not INTEROP_PYTHON, reason="needs the lerobot environment: make test-interop")
def test_a_lerobot_libero_policy_is_served_and_evaluated_with_lerobots_camera_names(tmp_path):
    built = subprocess.run([INTEROP_PYTHON, str(ROOT / "tests" / "interop" / "make_libero_policy.py"),
                            str(tmp_path / "act")], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    policy = json.loads(built.stdout)
    assert policy["lerobot"] == "0.4.4" and policy["policy"] == "ACTPolicy"
    assert policy["inputs"] == {"observation.images.image": [3, 256, 256], "observation.images.image2": [3, 256, 256],
                                "observation.state": [8]} and policy["outputs"] == {"action": [7]}
    # lerobot's own LIBERO env names its cameras so: agentview -> image, eye-in-hand -> image2
    assert policy["env_features_map"] == {"pixels/agentview_image": "observation.images.image",
                                          "pixels/robot0_eye_in_hand_image": "observation.images.image2"}
    port = _free_port()
    server = subprocess.Popen(
        [INTEROP_PYTHON, "-m", "assay.cli.app", "serve-policy", "lerobot", "--task", SOUP,
         "--params", json.dumps({"path": str(tmp_path / "act")}), "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200:
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the lerobot policy server did not come up"
                time.sleep(0.5)
        data = {"name": "lerobot-libero", "seed": 0, "episodes": 1, "horizon": 12, "envs_per_worker": 1,
                "replan_every": 5, "preset": "lerobot", "tasks": [SOUP],
                "policies": [{"name": "act-libero", "remote": f"ws://127.0.0.1:{port}"}]}
        plan = prepare_campaign(campaign_from_data(data))
        [task] = plan.tasks
        assert [(c.name, c.width) for c in task.cameras] == [("image", 256), ("image2", 256)]
        with Store(tmp_path / "eval", create=True) as store:
            run_campaign(plan, store, InlineExecutor(store.root))
            [record] = store.catalog.episodes(campaign="lerobot-libero")
            assert record.outcome is Outcome.TIMEOUT and record.steps == 12, (record.outcome, record.reason)
            served = record.policy_info["server"]["assay"]
            assert served["policy"] == "lerobot" and served["version"].startswith("lerobot-")
            table = store.steps(record)
            actions = np.asarray(table.column("action").to_pylist())
            assert actions.shape == (12, 7) and np.isfinite(actions).all()
            assert {"observation.images.image", "observation.images.image2"} <= set(table.column_names)
            assert {"info.goal_progress", "info.subgoal"} <= set(table.column_names)  # LIBERO's events, recorded
    finally:
        server.terminate()
        server.wait(10)
        server.stderr.close()
