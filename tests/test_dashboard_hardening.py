"""Dashboard attacks from the red-team pass (issue 25): links out of the store, DNS rebinding,
credentials shown by the API, and bad parameters that gave 500 instead of 4xx."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from assay.server import ServerConfig, create_app
from assay.server.app import allowed_hosts
from assay.server.runs import RunManager
from assay.store import Store, redact_url

TOKEN = "t0ken"


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    Store(tmp_path / "store").close()
    return tmp_path / "store"


def _client(root: Path, campaigns: Path, **config) -> TestClient:
    return TestClient(create_app(ServerConfig(root, TOKEN, campaigns, **config)), base_url="http://127.0.0.1")


def test_a_served_folder_that_is_a_link_serves_nothing_outside(store_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.mp4").write_bytes(b"outside the store")
    (store_root / "videos").symlink_to(elsewhere, target_is_directory=True)
    (store_root / "episodes").mkdir(exist_ok=True)
    (store_root / "episodes" / "inside.parquet").write_bytes(b"inside")
    with _client(store_root, tmp_path) as client:
        assert client.get("/api/files/videos/secret.mp4").status_code == 404
        assert client.get("/api/files/episodes/inside.parquet").content == b"inside"


def test_a_link_inside_a_served_folder_to_outside_is_refused(store_root, tmp_path):
    (tmp_path / "secret.txt").write_text("outside")
    (store_root / "episodes").mkdir(exist_ok=True)
    (store_root / "episodes" / "x.parquet").symlink_to(tmp_path / "secret.txt")
    with _client(store_root, tmp_path) as client:
        assert client.get("/api/files/episodes/x.parquet").status_code == 404


@pytest.mark.parametrize("host, status", [("127.0.0.1", 200), ("localhost", 200), ("[::1]", 200),
                                          ("evil.example", 400), ("127.0.0.1.evil.example", 400)])
def test_on_loopback_only_loopback_host_headers_are_answered(store_root, tmp_path, host, status):
    with _client(store_root, tmp_path) as client:
        assert client.get("/api/campaigns", headers={"Host": host}).status_code == status


def test_bound_to_every_interface_any_host_is_answered():
    assert allowed_hosts("0.0.0.0") == ["*"]
    assert "evil.example" not in allowed_hosts("127.0.0.1")


@pytest.mark.parametrize("url, shown", [
    ("postgresql+psycopg://assay:hunter2@db.internal:5432/assay", "postgresql+psycopg://assay:***@db.internal:5432/assay"),
    ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db"),
    ("sqlite:////tmp/x/catalog.sqlite", "sqlite:////tmp/x/catalog.sqlite"),
    ("not a url://a:b@c", "not a url://a:***@c"),
])
def test_catalog_urls_are_shown_without_their_password(url, shown):
    assert redact_url(url) == shown


def test_api_runs_never_shows_the_catalog_password(store_root, tmp_path):
    campaigns = tmp_path / "campaigns"
    campaigns.mkdir()
    (campaigns / "c.yaml").write_text("name: c\nepisodes: 1\ntasks: [metaworld/reach@1]\npolicies: [random]\n")
    manager = RunManager(store_root, campaigns, "postgresql+psycopg://assay:hunter2@127.0.0.1:1/none", "inline", 1)
    run = manager.start("c.yaml")
    try:
        shown = run.to_dict()["command"]
        assert "hunter2" not in " ".join(shown) and "postgresql+psycopg://assay:***@127.0.0.1:1/none" in shown
        assert "hunter2" in " ".join(run.command)  # the subprocess itself still gets the real URL
    finally:
        manager.shutdown()


def test_bad_parameters_are_4xx_not_500(store_root, tmp_path):
    with _client(store_root, tmp_path) as client:
        store = client.app.state.store
        store.catalog.save_campaign("c", "h", {"campaign": {"name": "c"}})
        assert client.get("/api/campaigns/c/leaderboard", params={"seed": -1}).status_code == 422
        response = client.post("/api/runs", json={"path": "a\x00b.yaml"}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 400 and "NUL" in response.json()["detail"]
        assert client.get("/api/files/episodes/a%00b").status_code == 404
