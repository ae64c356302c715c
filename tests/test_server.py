"""The dashboard's JSON API: reads, the token on writes, file confinement, live progress, start and cancel."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from assay.failures import FailureTable, add_sets, load_set
from assay.failures.ponr import load_ponrs
from assay.metrics import leaderboard, outcome_grid
from assay.server import ServerConfig, create_app, is_loopback
from assay.store import Store
from tests.report_support import REGRESSION_SET, report_store  # noqa: F401  (session fixture)

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def client(report_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:  # noqa: F811
    campaigns = tmp_path_factory.mktemp("campaigns")
    (campaigns / "bad.yaml").write_text("name: bad\nepisodes: 0\ntasks: [metaworld/reach@1]\npolicies: [expert]\n")
    (campaigns / "notes.txt").write_text("not a campaign")
    (tmp_path_factory.getbasetemp() / "outside.yaml").write_text("name: o\nepisodes: 1\ntasks: [x/y]\npolicies: [expert]\n")
    app = create_app(ServerConfig(report_store, TOKEN, campaigns, poll_s=0.05))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


@pytest.mark.sim
def test_campaigns_progress_and_openapi(client: TestClient) -> None:
    rows = {r["name"]: r for r in client.get("/api/campaigns").json()}
    [rerun_name] = [n for n in rows if n != "tiny"]  # a regression rerun is a campaign too, named by set and policy
    assert re.fullmatch(r"regress-tiny-fails-v1-expert-[0-9a-f]{8}", rerun_name), rerun_name
    row, rerun = rows["tiny"], rows[rerun_name]
    assert (row["name"], row["episodes"], row["jobs"], row["progress"], row["running"]) == ("tiny", 8, 8, 1.0, False)
    assert rerun["episodes"] == rerun["jobs"] >= 1 and rerun["progress"] == 1.0
    assert row["variants"] == ["nominal", "action.noise=0.5"]
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/campaigns", "/api/campaigns/{name}/events", "/api/campaigns/{name}/leaderboard",
                 "/api/episodes/{key}", "/api/runs", "/api/runs/{run_id}/cancel", "/api/files/{relpath}"):
        assert path in paths
    assert client.get("/docs").status_code == 200
    assert client.get("/api/campaigns/nope").status_code == 404


@pytest.mark.sim
def test_leaderboard_matches_the_metrics(client: TestClient, report_store: Path) -> None:  # noqa: F811
    board = client.get("/api/campaigns/tiny/leaderboard", params={"resamples": 500, "seed": 3}).json()
    with Store(report_store, create=False) as store:
        expected = leaderboard(outcome_grid(store.catalog.episodes(campaign="tiny"), variant="nominal"),
                               n_resamples=500, seed=3)
    assert [(r["policy"], r["score"], r["rank_low"], r["rank_high"]) for r in board["rows"]] == \
        [(r.policy, r.score, r.rank_low, r.rank_high) for r in expected.rows]
    assert board["signoff"][0]["validated"] is False
    assert client.get("/api/campaigns/tiny/leaderboard", params={"confidence": 2}).status_code == 422


@pytest.mark.sim
def test_episodes_failures_and_the_episode_view(client: TestClient, report_store: Path) -> None:  # noqa: F811
    episodes = client.get("/api/campaigns/tiny/episodes").json()
    assert len(episodes) == 8
    random_only = client.get("/api/campaigns/tiny/episodes", params={"policy": "random"}).json()
    assert {e["policy"] for e in random_only} == {"random"} and len(random_only) == 4
    failures = client.get("/api/campaigns/tiny/failures").json()
    assert len(failures["episodes"]) == sum(e["outcome"] != "success" for e in episodes)
    success = next(e for e in episodes if e["outcome"] == "success")
    detail = client.get(f"/api/episodes/{success['key'][:10]}").json()
    series = detail["series"]
    assert len(series["t"]) == len(series["action"]) == detail["episode"]["steps"]
    assert len(series["action"][0]) == 4 and len(series["state"][0]) == 39
    kinds = [e["kind"] for e in detail["events"]]
    assert kinds[0] == "start" and "success" in kinds and kinds[-1] == "end"
    assert [e["step"] for e in detail["events"] if e["kind"] == "success"] == [detail["episode"]["success_step"]]
    [video] = detail["videos"]
    assert video["camera"] == "front"
    body = client.get(f"/api/files/{video['path']}")
    assert body.status_code == 200 and body.headers["content-type"] == "video/mp4"
    assert body.content == (report_store / video["path"]).read_bytes()
    assert client.get("/api/episodes/ffffffffffff").status_code == 404


@pytest.mark.sim
def test_failures_carry_what_mining_stored(client: TestClient, report_store: Path) -> None:  # noqa: F811
    [ponr] = load_ponrs(report_store).values()
    with Store(report_store, create=False) as store:
        stored = FailureTable(store).get()
    failures = {e["key"]: e["failure"] for e in client.get("/api/campaigns/tiny/failures").json()["episodes"]}
    assert {k: f["category"] for k, f in failures.items()} == {k: c.category.value for k, c in stored.items()
                                                              if k in failures}
    assert all(f["attribution"]["capability"] for f in failures.values())
    shown = failures[ponr.key]["ponr"]
    assert {k: shown[k] for k in ("t", "steps", "handoffs", "lost", "budget", "verified")} == \
        {"t": ponr.t, "steps": ponr.steps, "handoffs": ponr.handoffs, "lost": ponr.lost, "budget": ponr.budget,
         "verified": True}
    assert shown["summary"] == ponr.describe()
    assert sum(f["ponr"] is not None for f in failures.values()) == 1
    detail = client.get(f"/api/episodes/{ponr.key}").json()
    assert detail["failure"] == failures[ponr.key]
    marked = [e["step"] for e in detail["events"] if e["kind"] == "ponr"]
    assert marked == ([] if ponr.point is None else [ponr.point])  # a never-lost episode has no such step
    success = next(e for e in client.get("/api/campaigns/tiny/episodes").json() if e["outcome"] == "success")
    assert client.get(f"/api/episodes/{success['key']}").json()["failure"] is None


@pytest.mark.sim
def test_file_serving_is_confined_to_the_store(client: TestClient, report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    link = report_store / "videos" / "escape.mp4"
    link.symlink_to(secret)
    try:
        for path in ("../catalog.sqlite", "catalog.sqlite", "videos/../catalog.sqlite", "%2e%2e/%2e%2e/etc/passwd",
                     "..%2f..%2f..%2fetc%2fpasswd", "videos/..%2f..%2f..%2f..%2fetc%2fpasswd", "/etc/passwd",
                     "%2Fetc%2Fpasswd", "videos/escape.mp4", "videos", str(secret)):
            response = client.get("/api/files/" + path)
            assert response.status_code == 404, path
            assert "outside" not in response.text and "root:" not in response.text
    finally:
        link.unlink()


@pytest.mark.sim
def test_writes_need_the_token(client: TestClient) -> None:
    assert client.post("/api/runs", json={"path": "x.yaml"}).status_code == 401
    wrong = client.post("/api/runs", json={"path": "x.yaml"}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    assert client.post("/api/runs/abc/cancel").status_code == 401
    for path, message in [("../outside.yaml", "outside the campaign directory"), ("notes.txt", "no campaign file"),
                          ("missing.yaml", "no campaign file"), ("bad.yaml", "bad.yaml:2: episodes")]:
        response = client.post("/api/runs", json={"path": path}, headers=AUTH)
        assert response.status_code == 400 and message in response.json()["detail"], (path, response.text)
    assert client.post("/api/runs/abc/cancel", headers=AUTH).status_code == 404
    assert client.get("/api/runs").json() == []


@pytest.mark.sim
def test_progress_stream_ends_when_the_campaign_is_complete(client: TestClient) -> None:
    text = client.get("/api/campaigns/tiny/events").text
    events = [block for block in text.strip().split("\n\n")]
    assert events[0].startswith("event: progress") and events[-1].startswith("event: done")
    assert json.loads(events[-1].split("data: ", 1)[1])["episodes"] == 8


@pytest.mark.sim
def test_regression_sets_match_their_files(client: TestClient, report_store: Path) -> None:  # noqa: F811
    directory = report_store / "regression" / REGRESSION_SET
    frozen = json.loads(max(directory.glob("v*.json"), key=lambda p: int(p.stem[1:])).read_text())
    recorded = [json.loads(p.read_text()) for p in sorted((directory / "runs").glob("*.json"))]
    assert recorded  # the fixture reran the set once
    [row] = client.get("/api/regression").json()
    assert (row["name"], row["version"], row["split"], row["source"], row["cases"]) == \
        (REGRESSION_SET, frozen["version"], frozen["split"], frozen["source"], len(frozen["cases"]))
    assert [(r["run"], r["policy"], r["passed"], r["cases"], r["diff"]) for r in row["runs"]] == \
        [(r["run"], r["policy"], sum(r["passed"].values()), len(r["passed"]), r["diff"]) for r in recorded]
    assert row["latest"] == row["runs"][-1]
    assert client.get("/api/regression", params={"campaign": frozen["source"]}).json() == [row]
    unknown = client.get("/api/regression", params={"campaign": "nope"})
    assert unknown.status_code == 404
    assert re.fullmatch(r"no campaign 'nope'; known: regress-tiny-fails-v1-expert-[0-9a-f]{8}, tiny",
                        unknown.json()["detail"])

    detail = client.get(f"/api/regression/{REGRESSION_SET}").json()
    assert detail["set"] == row
    assert [c["id"] for c in detail["cases"]] == [c["id"] for c in frozen["cases"]]
    last = recorded[-1]
    for case, stored in zip(detail["cases"], frozen["cases"], strict=True):
        assert (case["seed"], case["source_key"], case["instruction"]) == \
            (stored["seed"], stored["source_key"], stored["instruction"])
        assert case["task"] == f"{stored['task']['name']}@{stored['task']['version']}"
        assert case["label"] == f"{stored['task']['name']} | {case['variant']} | seed {stored['seed']}"
        assert case["latest"] == {"run": last["run"], "policy": last["policy"], "passed": last["passed"][case["id"]],
                                  "key": last["keys"][case["id"]]}
        assert case["runs"][-1] == case["latest"] and len(case["runs"]) == len(recorded)
        # the rerun's episode is in the store: the case's seed and variant, the run's policy and outcome
        episode = client.get(f"/api/episodes/{case['latest']['key']}").json()["episode"]
        assert (episode["seed"], episode["variant_name"], episode["policy_name"]) == \
            (stored["seed"], case["variant"], last["policy"])
        assert (episode["outcome"] == "success") is case["latest"]["passed"]
    assert sum(c["latest"]["passed"] for c in detail["cases"]) == row["latest"]["passed"]

    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/api/regression", "/api/regression/{name}"):
        assert paths[path]["get"]["tags"] == ["regression"]


@pytest.mark.sim
def test_regression_names_are_checked(client: TestClient) -> None:
    for name, detail in [("nope", f"no regression set 'nope'; known: {REGRESSION_SET}"),
                         (f"{REGRESSION_SET}.heldout", f"no regression set '{REGRESSION_SET}.heldout'; known: "),
                         ("%2e%2e", "regression set name '..' is not valid"),
                         (f"{REGRESSION_SET}%0A", "is not valid"), (f"{REGRESSION_SET}%00", "is not valid"),
                         ("a%20b", "is not valid"), ("x" * 65, "is not valid")]:
        response = client.get(f"/api/regression/{name}")
        assert response.status_code == 404 and detail in response.json()["detail"], (name, response.text)
    for path in ("..%2F..%2Fcatalog.sqlite", "..%2Fregression%2Ftiny-fails", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "..",
                 f"{REGRESSION_SET}%2F..%2F..%2Fcatalog.sqlite", f"{REGRESSION_SET}%2Fv1.json", "%2Fetc%2Fpasswd"):
        response = client.get("/api/regression/" + path)
        assert response.status_code == 404 and "cases" not in response.text and "root:" not in response.text, path


@pytest.mark.sim
def test_a_heldout_set_is_served_by_its_suffixed_name(report_store: Path, tmp_path: Path) -> None:  # noqa: F811
    cases = list(load_set(report_store, REGRESSION_SET).cases)
    root = tmp_path / "store"
    Store(root).close()
    mined, held = add_sets(root, "split", "tiny", cases, holdout=0.999)  # nearly every case goes to the held-out half
    assert held is not None and held.name == "split.heldout"
    with TestClient(create_app(ServerConfig(root, TOKEN, tmp_path)), base_url="http://127.0.0.1") as client:
        rows = {r["name"]: r for r in client.get("/api/regression").json()}
        assert {n: (r["split"], r["cases"], r["latest"]) for n, r in rows.items()} == \
            {"split": ("mined", len(mined.cases), None), "split.heldout": ("heldout", len(held.cases), None)}
        detail = client.get("/api/regression/split.heldout").json()
        assert [c["id"] for c in detail["cases"]] == [c.id for c in held.cases]
        assert all(c["runs"] == [] and c["latest"] is None for c in detail["cases"])
        assert client.get("/api/regression/split.mined").json()["detail"].endswith("known: split, split.heldout")


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("example.org")


# -- a real server: live progress while a campaign it started runs, then cancel ----------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **AUTH})
    return json.loads(urllib.request.urlopen(request, timeout=30).read())


@pytest.mark.sim
@pytest.mark.slow
def test_start_stream_progress_and_cancel_a_campaign(tmp_path: Path) -> None:
    store_root = tmp_path / "store"  # no store yet: the dashboard creates it, and its first campaign starts there
    (tmp_path / "live.yaml").write_text(
        "name: live\nseed: 0\nepisodes: 60\nenvs_per_worker: 1\ntasks: [metaworld/reach@1]\npolicies: [random]\n")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "assay.cli.app", "serve", "--store", str(store_root), "--port", str(port), "--token",
         TOKEN, "--campaigns", str(tmp_path), "--executor", "inline"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert _request(url + "/api/campaigns") == []
                break
            except urllib.error.URLError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        run = _request(url + "/api/runs", "POST", {"path": "live.yaml"})
        assert run["state"] == "running" and run["campaign"] == "live"
        deadline = time.monotonic() + 60
        while not _request(url + "/api/campaigns"):  # the run saves its resolved campaign first
            assert time.monotonic() < deadline
            time.sleep(0.2)
        seen = []
        with urllib.request.urlopen(url + "/api/campaigns/live/events", timeout=120) as stream:
            for raw in stream:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["episodes"] >= 1:
                        break
        # 60 episodes of about a second each: the stream shows the first long before the last (6 could all end
        # between two events on an idle machine)
        assert seen[0]["jobs"] == 60 and seen[-1]["running"] is True and 1 <= seen[-1]["episodes"] < 60
        cancelled = _request(url + f"/api/runs/{run['id']}/cancel", "POST")
        assert cancelled["state"] == "cancelled" and cancelled["returncode"] is not None
        [row] = _request(url + "/api/campaigns")
        assert row["running"] is False and 1 <= row["episodes"] < 60  # finished episodes stay; rerun resumes
    finally:
        server.terminate()
        output = server.communicate(timeout=20)[0]
    assert f"write token: {TOKEN}" in output and f"created an empty store at {store_root}" in output


def test_non_loopback_bind_warns(tmp_path: Path) -> None:
    Store(tmp_path / "s").close()
    process = subprocess.Popen(
        [sys.executable, "-m", "assay.cli.app", "serve", "--store", str(tmp_path / "s"), "--host", "0.0.0.0",
         "--port", str(_free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "ASSAY_TOKEN": ""})
    try:
        warning = process.stderr.readline()
        token_line = [process.stdout.readline(), process.stdout.readline()][1]
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert warning.startswith("warning: binding 0.0.0.0") and "writes still need the token" in warning
    assert token_line.startswith("write token: ") and len(token_line.split(": ")[1].strip()) >= 24
