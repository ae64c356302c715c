"""Readers find step files and videos through the store's data root (issue 36): with ``--data`` (a
directory or an fsspec URL) the report, the dashboard and ``store verify`` used to look under the store
directory and show none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from assay.cli.app import app
from assay.report import gather
from assay.server import ServerConfig, create_app
from assay.store import Store
from tests.report_support import report_store  # noqa: F401  (session fixture)


@pytest.fixture(params=["directory", "file-url"])
def split_store(request, report_store: Path, tmp_path: Path) -> tuple[Path, Path]:  # noqa: F811
    """The report store with its step files and videos moved to a data root of their own."""
    root, data = tmp_path / "store", tmp_path / "data"
    shutil.copytree(report_store, root)
    data.mkdir()
    for folder in ("episodes", "videos"):
        (root / folder).rename(data / folder)
    url = str(data) if request.param == "directory" else f"file://{data}"
    with Store(root, create=False) as store:
        store.catalog.set_meta("data_url", url)
    return root, data


@pytest.mark.sim
def test_the_dashboard_serves_videos_and_steps_from_the_data_root(split_store, tmp_path: Path) -> None:
    root, data = split_store
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    with TestClient(create_app(ServerConfig(root, "t", campaigns)), base_url="http://127.0.0.1") as client:
        episodes = client.get("/api/campaigns/tiny/episodes").json()
        detail = client.get(f"/api/episodes/{episodes[0]['key']}").json()
        [video] = detail["videos"]
        assert video == {"camera": "front", "path": f"videos/{episodes[0]['key'][:2]}/{episodes[0]['key']}.front.mp4"}
        assert len(detail["series"]["t"]) == detail["episode"]["steps"]
        served = client.get(f"/api/files/{video['path']}")
        assert served.status_code == 200 and served.headers["content-type"] == "video/mp4"
        assert served.content == (data / video["path"]).read_bytes()
        step_file = detail["episode"]["data_path"]
        assert client.get(f"/api/files/{step_file}").content == (data / step_file).read_bytes()
        assert client.get("/api/files/videos/../store.json").status_code == 404
        failures = client.get("/api/campaigns/tiny/failures").json()["episodes"]
        assert failures and all(len(f["videos"]) == 1 for f in failures)


@pytest.mark.sim
def test_the_report_and_store_verify_read_the_data_root(split_store, tmp_path: Path) -> None:
    root, data = split_store
    with Store(root, create=False) as store:
        report = gather(store, "tiny", n_resamples=200)
    assert report.gallery and all(len(item.videos) == 1 for item in report.gallery)
    out = tmp_path / "tiny.html"
    result = CliRunner().invoke(app, ["report", "tiny", "--store", str(root), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert html.count("data:video/mp4;base64,") == len(report.gallery)  # every gallery video, embedded
    linked = CliRunner().invoke(app, ["report", "tiny", "--store", str(root), "-o", str(out), "--link-video"])
    assert linked.exit_code == 0, linked.output
    assert "src='data/videos/" in out.read_text()  # the report sits beside the data root
    verify = CliRunner().invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verify.exit_code == 0, verify.output
    document = json.loads(verify.stdout)
    assert (document["ok"], document["failed"]) == (8, 0)


@pytest.mark.sim
def test_a_sweep_on_a_store_with_a_data_root_writes_its_step_files_there(tmp_path: Path) -> None:
    """`assay sweep` handed its executor the store directory, so on a store made with `--data` its step files
    landed under the store while the catalog pointed to the data root: `store verify` then found them missing
    (and every resume would re-run them)."""
    root, data = tmp_path / "store", tmp_path / "data"
    with Store(root, data_url=str(data)):
        pass
    runner = CliRunner()
    swept = runner.invoke(app, ["sweep", "--factor", "action.noise", "--values", "0.5", "--task", "metaworld/reach@1",
                                "--episodes", "1", "--executor", "inline", "--store", str(root), "--json"])
    assert swept.exit_code == 0, swept.output
    assert sorted(p.relative_to(data).parts[0] for p in data.rglob("*.parquet")) == ["episodes", "episodes"]
    assert not (root / "episodes").exists()
    verify = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verify.exit_code == 0, verify.output
    assert (json.loads(verify.stdout)["ok"], json.loads(verify.stdout)["failed"]) == (2, 0)
