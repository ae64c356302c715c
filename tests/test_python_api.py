"""The documented Python API (docs/PYTHON_API.md): examples/python_api.py runs, results come back as a table,
and a script without the ``__main__`` guard gets a clear error instead of 'a worker process failed to start'."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import assay
from assay.store import Outcome

pytestmark = pytest.mark.sim

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}


def run_example(store: Path, executor: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "python_api.py"), "--store", str(store),
                           "--executor", executor, "--workers", "2", "--episodes", "2"],
                          capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_python_api_example_runs_and_its_table_matches_the_catalog(tmp_path):
    out = run_example(tmp_path / "local", "local")
    assert out.startswith("4 episodes run, 0 already in the store")
    with assay.Store(tmp_path / "local", create=False) as store:
        records = store.catalog.episodes(campaign="python-api")
        episodes = assay.results_table(store, campaign="python-api")
        rates = assay.results_table(store, "python-api", by=("policy",))
    assert episodes.num_rows == 4 and sorted(episodes.column("key").to_pylist()) == sorted(r.key for r in records)
    by_key = {r.key: r for r in records}
    for row in episodes.to_pylist():
        record = by_key[row["key"]]
        assert (row["outcome"], row["steps"], row["success"]) == (record.outcome.value, record.steps,
                                                                  record.outcome is Outcome.SUCCESS)
    expert = next(row for row in rates.to_pylist() if row["policy"] == "expert")
    assert (expert["successes"], expert["scored"], expert["rate"]) == (2, 2, 1.0)
    assert f"expert   metaworld/reach@1: 2/2 [{expert['ci_low']:.2f}, 1.00]" in out
    # Any executor, the same results.
    run_example(tmp_path / "inline", "inline")
    with assay.Store(tmp_path / "inline", create=False) as store:
        inline = assay.results_table(store, campaign="python-api")
    assert inline.drop_columns(["reason"]).equals(episodes.drop_columns(["reason"]))


def test_results_table_from_records_and_a_clear_error_for_an_unknown_campaign(tmp_path):
    pytest.importorskip("pandas")
    with assay.Store(tmp_path) as store:
        assert assay.results_table(store).num_rows == 0
        assert assay.results_table([], by=("policy", "task")).column_names[:3] == ["policy", "task", "episodes"]
        with pytest.raises(assay.AssayError, match="no campaign 'nope'"):
            assay.results_table(store, campaign="nope")
    frame = assay.results_table([]).to_pandas()
    assert list(frame.columns) == list(assay.metrics.EPISODE_COLUMNS)


@pytest.mark.slow
def test_a_script_without_the_main_guard_gets_a_clear_error(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\nimport assay\n"
        "plan = assay.prepare_campaign(assay.campaign_from_data({'name': 'g', 'episodes': 1, 'horizon': 5,\n"
        "    'tasks': ['metaworld/reach@1'], 'policies': ['expert']}))\n"
        "with assay.Store(sys.argv[1]) as store:\n"
        "    assay.run_campaign(plan, store, assay.LocalExecutor(sys.argv[1], workers=1))\n")
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "s")], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("assay.errors.AssayError: the worker processes could not start")
    assert 'if __name__ == "__main__":' in last and "failed to start" not in done.stderr
