"""LeRobotDataset v3.0 export: the layout round-trips through our reader to the stored episodes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store, read_video, video_relpath
from assay.store.export_lerobot import read_lerobot

runner = CliRunner()

CAMPAIGN = """
name: demos
seed: 3
episodes: 2
horizon: 30
tasks: [metaworld/reach@1, metaworld/drawer-open@1]
policies: [expert, random]
cameras: [{name: front, width: 32, height: 32}]
"""


@pytest.mark.sim
def test_export_round_trips_frames_actions_tasks_and_boundaries(tmp_path):
    store_dir = tmp_path / "store"
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    assert runner.invoke(app, ["run", str(tmp_path / "c.yaml"), "--store", str(store_dir)]).exit_code == 0
    gated = runner.invoke(app, ["export", "lerobot", "--data", "campaign=demos,outcome=any", "--out",
                                str(tmp_path / "gated"), "--store", str(store_dir), "--json"])
    assert gated.exit_code == 0, gated.output
    gated_summary = json.loads(gated.stdout)  # the quality gate drops random's jittery episodes, saying why
    assert gated_summary["episodes"] == 8 - len(gated_summary["dropped"]) and gated_summary["dropped"]
    assert all(why.startswith("jitter") for why in gated_summary["dropped"].values())
    out = tmp_path / "lerobot"
    result = runner.invoke(app, ["export", "lerobot", "--data", "campaign=demos,outcome=any", "--out", str(out),
                                 "--store", str(store_dir), "--no-gate", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["episodes"] == 8 and summary["tasks"] == 2 and summary["cameras"] == ["front"]
    info, episodes = read_lerobot(out)
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 8 and info["fps"] == summary["fps"]
    assert sorted(p.name for p in (out / "meta").iterdir()) == ["episodes", "info.json", "stats.json", "tasks.parquet"]
    assert (out / "videos" / "observation.images.front" / "chunk-000" / "file-000.mp4").is_file()
    with Store(store_dir, create=False) as store:
        records = {r.key: r for r in store.catalog.episodes(campaign="demos")}
        assert sorted(e.assay_key for e in episodes) == sorted(records)
        total = 0
        for episode in episodes:
            record = records[episode.assay_key]
            table = store.steps(record)
            states = np.asarray(table.column("observation.state").combine_chunks().flatten()).reshape(len(table), -1)
            actions = np.asarray(table.column("action").combine_chunks().flatten()).reshape(len(table), -1)
            assert np.array_equal(episode.states, states.astype(np.float32))
            assert np.array_equal(episode.actions, actions.astype(np.float32))
            assert episode.task == record.instruction
            assert np.allclose(episode.timestamps, np.arange(len(table)) / info["fps"])
            exported = episode.frames["observation.images.front"]
            assert exported.shape == (len(table), 32, 32, 3)
            stored = read_video(store.data_root, video_relpath(record.key, "front"))[:len(table)]
            assert np.abs(exported.astype(int) - stored.astype(int)).mean() < 8  # the same frames, re-encoded (lossy)
            total += len(table)
    assert info["total_frames"] == total
    stats = json.loads((out / "meta" / "stats.json").read_text())
    assert stats["action"]["count"] == [total] and len(stats["observation.state"]["mean"]) == 39
    again = runner.invoke(app, ["export", "lerobot", "--data", "campaign=demos", "--out", str(out), "--store", str(store_dir)])
    assert again.exit_code == 2 and "already exists" in again.stderr
    assert not list(tmp_path.glob("lerobot.tmp-*"))
