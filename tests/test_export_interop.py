"""The real lerobot (0.4.4, its own environment) reads our LeRobotDataset v3.0 export and trains and runs
its ACT policy on it: ``make test-interop``.

Checks, against the store: every frame's observation.state and action (exact, float32), its task string,
episode boundaries (dataset_from/to_index, episode_index and frame_index per frame), timestamps, and the
decoded camera frames (H.264, so within a small mean error).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store
from assay.store.export_lerobot import read_lerobot

pytestmark = [pytest.mark.interop, pytest.mark.sim]

INTEROP_PYTHON = os.environ.get("ASSAY_INTEROP_PYTHON")

CAMPAIGN = """
name: demos
seed: 5
episodes: 2
horizon: 25
tasks: [metaworld/reach@1, metaworld/drawer-open@1]
policies: [expert]
cameras: [{name: front, width: 32, height: 32}]
"""


needs_lerobot = pytest.mark.skipif(not INTEROP_PYTHON, reason="needs the lerobot environment: make test-interop")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(store, LeRobotDataset export) of a small camera campaign."""
    tmp_path = tmp_path_factory.mktemp("interop")
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    runner = CliRunner()
    assert runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(tmp_path / "s")]).exit_code == 0
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", "lerobot", "--data", "campaign=demos,outcome=any", "--out", str(out),
                                 "--store", str(tmp_path / "s"), "--no-gate"])
    assert result.exit_code == 0, result.output
    return tmp_path / "s", out


def _interop(script: str, *args: str) -> dict:
    path = Path(__file__).parent / "interop" / script
    done = subprocess.run([INTEROP_PYTHON, str(path), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@needs_lerobot
def test_real_lerobot_reads_the_export(exported):
    store_root, out = exported
    seen = _interop("read_with_lerobot.py", str(out))
    info, episodes = read_lerobot(out)
    assert seen["num_episodes"] == len(episodes) == 4 and seen["fps"] == info["fps"]
    assert seen["camera_keys"] == ["observation.images.front"]
    assert seen["num_frames"] == len(seen["frames"]) == sum(len(e.states) for e in episodes)
    with Store(store_root, create=False) as store:
        records = {r.key: r for r in store.catalog.episodes(campaign="demos")}
        start = 0
        for episode in episodes:
            stop = start + len(episode.states)
            assert seen["episode_ranges"][episode.index] == [start, stop]
            rows = seen["frames"][start:stop]
            assert [r["episode_index"] for r in rows] == [episode.index] * len(rows)
            assert [r["frame_index"] for r in rows] == list(range(len(rows)))
            table = store.steps(records[episode.assay_key])
            states = np.asarray(table.column("observation.state").combine_chunks().flatten()).reshape(len(table), -1)
            actions = np.asarray(table.column("action").combine_chunks().flatten()).reshape(len(table), -1)
            assert np.array_equal(np.asarray([r["state"] for r in rows], np.float32), states.astype(np.float32))
            assert np.array_equal(np.asarray([r["action"] for r in rows], np.float32), actions.astype(np.float32))
            assert {r["task"] for r in rows} == {records[episode.assay_key].instruction}
            assert np.allclose([r["timestamp"] for r in rows], np.arange(len(rows)) / info["fps"], atol=1e-4)
            decoded = np.asarray([r["images"]["observation.images.front"] for r in rows], np.int64)
            assert decoded.shape == (len(rows), 32, 32, 3)
            assert np.abs(decoded - episode.frames["observation.images.front"].astype(np.int64)).mean() < 4
            start = stop


@needs_lerobot
def test_real_lerobot_trains_and_runs_an_act_policy_on_the_export(exported):
    """lerobot's own factory builds ACT from the export's features and stats; a training step and inference run."""
    _, out = exported
    seen = _interop("run_lerobot_policy.py", str(out))
    assert seen["lerobot"] == "0.4.4" and seen["policy"] == "ACTPolicy"
    assert seen["image_features"] == ["observation.images.front"]
    assert np.isfinite(seen["loss"]) and seen["loss"] > 0 and seen["parameters_with_gradients"] > 10
    first, second = np.asarray(seen["actions"])
    assert first.shape == (seen["action_dim"],) == (4,) and np.isfinite(first).all()
    assert np.array_equal(first, second)  # same torch seed, same action: the policy is deterministic at inference


@needs_lerobot
def test_round_trip_store_to_lerobot_training_to_assay_evaluation(exported, tmp_path):
    """The whole loop: camera episodes in the store -> `assay export lerobot` -> lerobot trains ACT on them
    (its own training step, in its own environment) -> `assay serve-policy lerobot` serves the saved
    directory from that environment -> an Assay campaign evaluates it closed loop, chunks and all."""
    import socket
    import time
    import urllib.request

    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Outcome

    _, out = exported
    policy_dir = tmp_path / "act"
    trained = _interop("train_act.py", str(out), str(policy_dir), "150")
    assert trained["steps"] == 150 and trained["last_loss"] < trained["first_loss"], trained
    assert {"config.json", "model.safetensors"} <= set(trained["files"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = str(Path(__file__).parents[1] / "src")
    server = subprocess.Popen(
        [INTEROP_PYTHON, "-m", "assay.cli.app", "serve-policy", "lerobot", "--task", "metaworld/reach@1",
         "--params", json.dumps({"path": str(policy_dir)}), "--port", str(port)],
        env={**os.environ, "PYTHONPATH": source, "HF_HUB_OFFLINE": "1"},
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
        data = {"name": "act-eval", "seed": 11, "episodes": 2, "horizon": 24, "envs_per_worker": 2,
                "replan_every": 4, "tasks": ["metaworld/reach@1"],
                "cameras": [{"name": "front", "width": 32, "height": 32}],
                "policies": [{"name": "act", "remote": f"ws://127.0.0.1:{port}"}]}
        with Store(tmp_path / "eval", create=True) as store:
            run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(store.root))
            records = store.catalog.episodes(campaign="act-eval")
            assert len(records) == 2 and all(r.outcome is not Outcome.ERROR for r in records), \
                [(r.outcome, r.reason) for r in records]
            served = records[0].policy_info["server"]["assay"]
            assert served["policy"] == "lerobot" and served["version"].startswith("lerobot-")
            for record in records:
                actions = np.asarray(store.steps(record).column("action").to_pylist())
                assert actions.shape == (record.steps, 4) and np.isfinite(actions).all()
                assert len({tuple(a) for a in actions}) > 1, "the policy's chunks move the arm"
            print(f"ACT: {trained['steps']} steps, loss {trained['first_loss']:.3f} -> {trained['last_loss']:.3f}; "
                  f"evaluated: {[(r.outcome.value, r.steps) for r in records]}")
    finally:
        server.terminate()
        server.wait(10)
        server.stderr.close()
