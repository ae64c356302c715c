"""The dashboard under load while a campaign writes, and its API under fuzzed input (issue 11)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assay.server import ServerConfig, create_app
from tests.report_support import report_store  # noqa: F401  (session fixture)

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "dashboard_load.py"


def _load_module():
    spec = importlib.util.spec_from_file_location("dashboard_load", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.sim
@pytest.mark.slow
def test_concurrent_readers_while_a_campaign_writes_see_no_error():
    result = _load_module().run(clients=10, seconds=5, writer_episodes=10)
    assert result["errors"] == 0, result["first_errors"]
    assert result["requests"] >= 20


@pytest.fixture(scope="module")
def client(report_store: Path) -> Iterator[TestClient]:  # noqa: F811
    app = create_app(ServerConfig(store_root=report_store, token="t0ken", campaigns_dir=report_store.parent))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as test_client:
        yield test_client


SEGMENT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@pytest.mark.sim
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["campaign", "leaderboard", "episodes", "episode", "file", "failures"]),
       segment=SEGMENT, limit=st.one_of(st.none(), st.integers(-10**6, 10**6), st.text(max_size=8)))
def test_fuzzed_paths_and_parameters_never_crash_the_api(client: TestClient, kind: str, segment: str, limit) -> None:
    name = quote(segment, safe="")
    path = {"campaign": f"/api/campaigns/{name}", "leaderboard": f"/api/campaigns/{name}/leaderboard",
            "episodes": f"/api/campaigns/{name}/episodes", "episode": f"/api/episodes/{name}",
            "file": f"/api/files/{name}", "failures": f"/api/campaigns/{name}/failures"}[kind]
    params = {} if limit is None else {"limit": str(limit), "confidence": str(limit)}
    response = client.get(path, params=params)
    assert response.status_code < 500, (path, params, response.text[:200])


@pytest.mark.sim
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.none(), st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=30), st.integers(),
                                                                                    st.none()), max_size=4)))
def test_fuzzed_writes_are_refused_or_rejected_cleanly(client: TestClient, body) -> None:
    unauthorised = client.post("/api/runs", json=body)
    assert unauthorised.status_code == 401
    authorised = client.post("/api/runs", json=body, headers={"Authorization": "Bearer t0ken"})
    assert authorised.status_code < 500 and authorised.status_code != 201, authorised.text[:200]
