"""A backend added through the registry (entry point group ``assay.backends``) by a package outside Assay, with no
edit to Assay: ``tests/plugins/toy_backend`` is that package, found on ``PYTHONPATH`` by its dist-info."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import assay.sim.backends as backend_registry
from assay.errors import SpecError
from assay.sim.backends import Backend, backend, backends

PLUGIN = Path(__file__).parent / "plugins" / "toy_backend"
CAMPAIGN = """
name: toy
seed: 0
episodes: 4
tasks: [toy/point-reach@1]
policies: [random, {name: still, entrypoint: 'assay_toy_backend:Still'}]
"""


def _assay(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGIN), str(Path(__file__).parents[1])])}
    return subprocess.run([sys.executable, "-m", "assay", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_a_plugin_backend_lists_its_tasks_runs_a_campaign_and_is_scored(tmp_path):
    listed = _assay("tasks", "--backend", "toy", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [t["id"] for t in json.loads(listed.stdout)["tasks"]] == ["toy/point-reach@1"]
    (tmp_path / "c.yaml").write_text(CAMPAIGN)
    ran = _assay("run", "c.yaml", "--store", "s", "-x", "local", "-w", "2", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    shown = json.loads(_assay("results", "--store", "s", "--json", cwd=tmp_path).stdout)
    rows = {row["policy"]: row for row in shown["leaderboard"]["rows"]}
    assert set(rows) == {"random", "still"} and rows["still"]["recorded"] == 4
    assert rows["still"]["score"] == 0.0  # a point that never moves reaches no goal drawn in [-1, 1] (none within 0.05)


def test_bad_plugins_are_one_line_errors(monkeypatch):
    def entry(name: str, value: str) -> importlib.metadata.EntryPoint:
        return importlib.metadata.EntryPoint(name, value, backend_registry.ENTRY_POINT_GROUP)

    monkeypatch.syspath_prepend(str(PLUGIN))
    cases = [
        (entry("metaworld", "assay_toy_backend:BACKEND"), "names its backend 'toy'; the entry point's name must be"),
        (entry("toy", "assay_toy_backend:point_task"), "gave a TaskSpec, not an assay.sim.Backend"),
        (entry("toy", "no_such_module:X"), "failed to load: ModuleNotFoundError: No module named 'no_such_module'"),
    ]
    for found, message in cases:
        monkeypatch.setattr(backend_registry.importlib.metadata, "entry_points", lambda group, found=found: [found])
        backends.cache_clear()
        with pytest.raises(SpecError, match=message):
            backends()
    clash = Backend("metaworld", lambda task: None)
    monkeypatch.setattr(backend_registry.importlib.metadata, "entry_points", lambda group: [entry("metaworld", "x:y")])
    monkeypatch.setattr(backend_registry, "_plugin", lambda e: clash)
    backends.cache_clear()
    with pytest.raises(SpecError, match="reuses the name of backend 'metaworld'; choose another"):
        backends()
    monkeypatch.undo()
    backends.cache_clear()
    with pytest.raises(SpecError, match=r"^unknown backend 'metaworl'; did you mean metaworld\? valid: gymnasium, "):
        backend("metaworl")


def test_the_plugin_environment_passes_assays_conformance_checks(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    from assay_toy_backend import PointEnv, point_task

    from assay.testing import check_sim_env

    check_sim_env(PointEnv(point_task()), seeds=(0, 1, 2), steps=10)  # seeded, deterministic, fresh arrays
