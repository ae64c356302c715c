"""What the resume-time integrity check costs, for docs/RELIABILITY.md.

    python benchmarks/verify_cost.py [-n 1000] [--steps 500]

Writes N real episode files (Meta-World-sized rows: 39-d state, 4-d action) with
their catalog rows, then times ``Store.damaged`` (hash every file against its
recorded sha256, check it against its row and recompute its summary from its steps)
next to ``Catalog.existing_keys`` (what a resume did before) in the same run, on a
warm page cache and after corrupting one file.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np

from assay.store import EpisodeRecord, Outcome, Store, build_table, write_episode
from assay.store.validation import Summary, seal


def _record(i: int, path: str, sha: str, summary: Summary, trajectory: str) -> EpisodeRecord:
    return EpisodeRecord(key=f"{i:024x}", campaign="c", task_id="metaworld/pick-place@1", task_hash="h" * 16,
                         variant_key="v", variant_name="nominal", variant={}, policy_name="p", policy_version="1",
                         policy_spec={"builtin": "expert"}, seed=i, episode_index=i, instruction="pick and place",
                         outcome=Outcome(summary.outcome), reason="", steps=summary.steps,
                         total_return=summary.total_return, success_step=summary.success_step,
                         trajectory_hash=trajectory, initial_conditions={}, timings={}, data_path=path,
                         data_sha256=sha)


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    n, rng = args.steps, np.random.default_rng(0)
    columns = {"step": np.arange(n, dtype=np.int32), "t": np.arange(n) / 80.0,
               "observation.state": rng.normal(size=(n, 39)), "action": rng.normal(size=(n, 4)),
               "reward": rng.normal(size=n), "success": np.zeros(n, bool), "terminated": np.zeros(n, bool),
               "truncated": np.zeros(n, bool), "policy_latency_ms": rng.random(n)}
    # a sealed timeout whose row repeats what its steps say (store verify recomputes the summary from them)
    summary = Summary("timeout", n, float(np.sum(columns["reward"])), None)
    digest = hashlib.sha256()
    for name in ("observation.state", "action", "reward"):
        digest.update(np.ascontiguousarray(columns[name], dtype=np.float64).tobytes())
    digest.update(summary.outcome.encode())
    with tempfile.TemporaryDirectory() as root, Store(root) as store:
        records = []
        for i in range(args.n):
            table = build_table(columns, {"episode_key": f"{i:024x}", **seal(summary)})
            path, sha = write_episode(root, f"{i:024x}", table)
            records.append(_record(i, path, sha, summary, digest.hexdigest()[:32]))
        store.catalog.add_many(records)
        keys = [r.key for r in records]
        total = sum((Path(root) / r.data_path).stat().st_size for r in records)
        lookup = _best(lambda: store.catalog.existing_keys(keys))
        verify = _best(lambda: store.damaged(keys))
        victim = Path(root) / records[7].data_path
        data = bytearray(victim.read_bytes())
        data[100] ^= 1
        victim.write_bytes(bytes(data))
        found = store.damaged(keys)
        assert list(found) == [records[7].key], found
    print(f"{args.n} episode files of {args.steps} steps, {total / 2**20:.1f} MiB in all")
    print(f"catalog key lookup (resume before):  {lookup * 1000:8.1f} ms")
    print(f"check every file (hash, row, summary): {verify * 1000:6.1f} ms  "
          f"({verify / args.n * 1e6:.0f} us per file, {total / 2**20 / verify:.0f} MiB/s)")
    print(f"one flipped bit in one file found:   {len(found)} damaged of {args.n}")


if __name__ == "__main__":
    main()
