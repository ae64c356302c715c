"""What each component costs per episode, for docs/SCALING.md.

    python benchmarks/component_costs.py [--postgres postgresql+psycopg://USER@HOST:PORT/DB]

Measures: one catalog row insert (driver side; SQLite, and PostgreSQL when a URL
is given), one episode's Parquet write (150 steps, 39-d state), an empty Ray
actor call round trip, and a Ray call carrying one batch of records back.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from assay.store import Catalog, EpisodeRecord, Outcome, build_table, write_episode


def _record(i: int) -> EpisodeRecord:
    return EpisodeRecord(key=f"{i:024x}", campaign="c", task_id="metaworld/pick-place@1", task_hash="h" * 16,
                         variant_key="v", variant_name="nominal", variant={}, policy_name="p", policy_version="1",
                         policy_spec={"builtin": "expert"}, seed=i, episode_index=i % 1000, instruction="pick and place",
                         outcome=Outcome.SUCCESS, reason="", steps=150, total_return=1.0, success_step=149,
                         trajectory_hash="t" * 32, initial_conditions={"rand_vec": [0.1] * 6}, timings={"sim_s": 0.1})


def _per_call(fn: Callable[[int], object], n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default=None)
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as root:
        catalog = Catalog(f"sqlite:///{root}/catalog.sqlite")
        rows.append(("catalog row insert, SQLite (driver)", _per_call(lambda i: catalog.add(_record(i)), args.n)))
        rows.append(("catalog row insert, SQLite, add_many of 50 (per row)",
                     _per_call(lambda i: catalog.add_many([_record(10**6 + 50 * i + j) for j in range(50)]), 20) / 50))
        catalog.close()
        if args.postgres:
            pg = Catalog(args.postgres)
            offset = int(time.time() * 1000) << 20
            rows.append(("catalog row insert, PostgreSQL on loopback",
                         _per_call(lambda i: pg.add(dataclasses.replace(_record(offset + i))), args.n)))
            rows.append(("catalog row insert, PostgreSQL, add_many of 50 (per row)",
                         _per_call(lambda i: pg.add_many([_record(offset + 10**6 + 50 * i + j) for j in range(50)]), 20) / 50))
            pg.close()
        n, rng = 150, np.random.default_rng(0)
        columns = {"step": np.arange(n, dtype=np.int32), "t": np.arange(n) / 80.0,
                   "observation.state": rng.normal(size=(n, 39)), "action": rng.normal(size=(n, 4)),
                   "reward": rng.normal(size=n), "success": np.zeros(n, bool), "terminated": np.zeros(n, bool),
                   "truncated": np.zeros(n, bool), "policy_latency_ms": rng.random(n)}
        table = build_table(columns, {"episode_key": "k"})
        rows.append(("episode Parquet write, 150 steps (worker)",
                     _per_call(lambda i: write_episode(root, f"{i:024x}", table), args.n // 3)))
        size = (Path(root) / "episodes").rglob("*.parquet").__next__().stat().st_size
        rows.append(("episode Parquet file size, 150 steps (KiB, not ms)", size / 1024))
        rows.append(("episode Parquet write via fsspec file://",
                     _per_call(lambda i: write_episode(f"file://{root}/fs", f"{i:024x}", table), args.n // 3)))

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    @ray.remote
    class Echo:
        def ping(self, x=None):
            return x

        def echo_batch(self):
            return [_record(i) for i in range(4)]

    echo = Echo.remote()
    ray.get(echo.ping.remote())
    rows.append(("Ray actor call, empty round trip", _per_call(lambda i: ray.get(echo.ping.remote()), args.n)))
    rows.append(("Ray actor call returning 4 episode records",
                 _per_call(lambda i: ray.get(echo.echo_batch.remote()), args.n)))
    ray.shutdown()
    print("| component | ms per call |\n|---|---:|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} |")


if __name__ == "__main__":
    main()
