"""Security review as tests (issue 11, G9-G13): loopback binds, keys and tokens, no code from data, pinned deps."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from assay.cli.report_commands import serve as serve_dashboard
from assay.cli.serve_commands import serve_policy
from assay.policies.remote import PolicyServerConfig, packb, unpackb
from tests.remote_support import serving, state_task

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "assay"


def _default(command, name: str):
    return inspect.signature(command).parameters[name].default


@pytest.mark.parametrize("command", [serve_policy, serve_dashboard])
def test_every_server_command_binds_loopback_by_default(command):
    assert _default(command, "host") == "127.0.0.1"


def test_policy_server_config_binds_loopback_by_default():
    assert PolicyServerConfig().host == "127.0.0.1"


class Zeros:
    def reset(self, context) -> None:
        pass

    def act(self, observations):
        return np.zeros((len(observations["state"]), 4))


def test_policy_server_requires_the_api_key_when_one_is_set():
    with serving(Zeros(), state_task(), api_key="s3cret") as server:
        url = f"ws://127.0.0.1:{server.port}"
        for headers in (None, {"Authorization": "Api-Key wrong"}, {"Authorization": "Bearer s3cret"}):
            with pytest.raises(InvalidStatus) as refused:
                connect(url, additional_headers=headers)
            assert refused.value.response.status_code == 401
        with connect(url, additional_headers={"Authorization": "Api-Key s3cret"}) as ws:
            ws.recv()
            ws.send(packb({"observation/state": np.zeros(39), "prompt": "do it"}))
            assert unpackb(ws.recv())["actions"].shape[-1] == 4


def test_dashboard_state_changing_routes_all_require_the_token(tmp_path):
    from fastapi.routing import APIRoute
    from fastapi.testclient import TestClient

    from assay.server import ServerConfig as DashboardConfig
    from assay.server import create_app
    from assay.server.routes import ROUTERS
    from assay.store import Store

    Store(tmp_path / "store").close()
    app = create_app(DashboardConfig(tmp_path / "store", "tok", tmp_path))
    # every route of every router the app includes (FastAPI may keep an included router whole in app.routes)
    writes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute) and r.methods - {"GET", "HEAD"}]
    schema = {(path, method.upper()) for path, ops in app.openapi()["paths"].items() for method in ops}
    assert {(r.path, m) for r in writes for m in r.methods} <= schema  # and the app serves each of them
    assert writes, "the dashboard has state-changing routes; each must be listed here"
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for route in writes:
            path = route.path.replace("{run_id}", "nope")
            for method in route.methods - {"GET", "HEAD"}:
                for headers, refused in (({}, 401), ({"Authorization": "Bearer wrong"}, 403)):
                    response = client.request(method, path, headers=headers, json={"path": "x.yaml"})
                    assert response.status_code == refused, (method, path, response.status_code)


# -- no code or objects from data -------------------------------------------------------------------
FORBIDDEN = [
    (re.compile(r"\bpickle\.loads?\("), "pickle.load"),
    (re.compile(r"\b(cloudpickle|dill|marshal|shelve)\b"), "pickle-like deserializer"),
    (re.compile(r"(?<![\w.])eval\("), "eval("),
    (re.compile(r"(?<![\w.])exec\("), "exec("),
    (re.compile(r"yaml\.load\((?!.*SafeLoader)"), "yaml.load without SafeLoader"),
    (re.compile(r"yaml\.(unsafe_load|full_load)\("), "unsafe yaml"),
    (re.compile(r"\ballow_pickle\s*=\s*True"), "numpy allow_pickle"),
    (re.compile(r"\btorch\.load\((?!.*weights_only\s*=\s*True)"), "torch.load without weights_only=True"),
]
DYNAMIC_IMPORT = re.compile(r"\b(importlib\.import_module|__import__)\(")
# The one dynamic import: a policy named by the user as module:attr (policies/loader.py).
# policies/loader.py imports the module:attr a campaign names; run/worker.py imports only the fixed names of
# its LOAD_BEFORE_RENDERING constant (triton), never a name that comes from data; sim/gymnasium_env.py imports
# the plugin module a gymnasium/<module>:<EnvId> task names, as gymnasium.make itself does for that syntax
# (the same trust as a module:attr policy: the campaign's author chose the code). The two lazy loaders,
# __init__.py (public names) and cli/lazy.py (commands), import only assay modules named by their own constant
# tables (checked below), never a name that comes from data.
ALLOWED_DYNAMIC = {"policies/loader.py", "run/worker.py", "sim/gymnasium_env.py", "lazy.py", "cli/lazy.py"}


def _sources() -> list[tuple[str, int, str]]:
    lines = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            lines.append((rel, number, code))
    return lines


def test_no_pickle_eval_exec_or_unsafe_yaml_in_the_package():
    found = [f"{rel}:{n}: {label}: {code.strip()}" for rel, n, code in _sources()
             for pattern, label in FORBIDDEN if pattern.search(code)]
    assert found == []


def test_the_only_dynamic_import_is_the_explicit_policy_entrypoint():
    found = {rel for rel, _, code in _sources() if DYNAMIC_IMPORT.search(code)}
    assert found == ALLOWED_DYNAMIC
    from assay.run.worker import LOAD_BEFORE_RENDERING

    assert LOAD_BEFORE_RENDERING == ("triton",)  # a constant: widening it is a reviewed change
    import assay
    import assay.failures
    import assay.run
    from assay.cli.app import COMMANDS

    for package in (assay, assay.run, assay.failures):  # the names loaded on first use come from Assay's own modules
        assert all(module.startswith(f"{package.__name__}.") or package is assay and module.startswith("assay.")
                   for module in package._LAZY)
    assert all(re.fullmatch(r"[a-z_]+", module) for command in COMMANDS.values() for module in command.modules)
    loader = (SRC / "policies" / "loader.py").read_text()
    assert "rpartition(\":\")" in loader or "split(\":\"" in loader, "entrypoints are module:attr, nothing else"


def test_the_scanner_catches_what_it_forbids():
    """The patterns above are live: each flags a line written to break the rule."""
    bad = ["pickle.loads(blob)", "eval(text)", "exec(code)", "yaml.load(stream)", "np.load(p, allow_pickle=True)",
           "torch.load(path)"]
    assert all(any(p.search(line) for p, _ in FORBIDDEN) for line in bad)
    fine = ["yaml.load(stream, Loader=yaml.SafeLoader)", "self.model.eval()", "torch.load(p, weights_only=True)",
            'torch.load(Path(p), map_location="cpu", weights_only=True)']
    assert not any(p.search(line) for line in fine for p, _ in FORBIDDEN)


# -- pinned dependencies --------------------------------------------------------------------------
def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for group in project["optional-dependencies"].values():
        texts += group
    return [Requirement(t) for t in texts]


def test_every_dependency_has_an_upper_bound():
    unbounded = [str(r) for r in _requirements()
                 if not any(s.operator in ("<", "<=", "==", "~=", "===") for s in r.specifier)]
    assert unbounded == []


def test_every_dependency_has_a_lower_bound_or_exact_pin():
    loose = [str(r) for r in _requirements()
             if not any(s.operator in (">=", ">", "==", "~=", "===") for s in r.specifier)]
    assert loose == []


def test_dashboard_starts_only_campaign_files_inside_its_directory(tmp_path):
    from fastapi.testclient import TestClient

    from assay.server import ServerConfig as DashboardConfig
    from assay.server import create_app
    from assay.store import Store

    campaigns, outside = tmp_path / "campaigns", tmp_path / "outside"
    campaigns.mkdir(), outside.mkdir()
    (outside / "evil.yaml").write_text("name: evil\nepisodes: 1\ntasks: [gymnasium/Pendulum-v1]\npolicies: [random]\n")
    (campaigns / "link.yaml").symlink_to(outside / "evil.yaml")  # a symlink out is still outside
    Store(tmp_path / "store").close()
    app = create_app(DashboardConfig(tmp_path / "store", "tok", campaigns))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for path in ("../outside/evil.yaml", str(outside / "evil.yaml"), "link.yaml", "/etc/passwd", "a/../../x.yaml"):
            response = client.post("/api/runs", json={"path": path}, headers={"Authorization": "Bearer tok"})
            assert response.status_code == 400, (path, response.status_code)
            assert "outside the campaign directory" in response.text or "no campaign file" in response.text
        assert client.get("/api/runs").json() == []
