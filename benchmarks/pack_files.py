"""Files and bytes of step data per episode, one file per episode vs ``storage: {pack: batch}`` (issue 39).

Runs one small Meta-World campaign (no cameras: videos are one MP4 per camera per episode either way) into
two stores, unpacked and packed, for each ``envs_per_worker`` asked (a pack holds one batch: up to that
many episodes), counts the step files and their bytes, checks that both stores hold the same keys and
results, and extrapolates to 1 M episodes. Prints one JSON document.

    PYTHONPATH=src python benchmarks/pack_files.py --episodes 32 --horizon 150 --batch 4 --batch 16
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Store

MILLION = 1_000_000


def _run(root: Path, data: dict[str, Any]) -> list[tuple[Any, ...]]:
    with Store(root) as store:
        run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root))
        return sorted((r.key, r.outcome.value, r.steps, r.total_return, r.trajectory_hash)
                      for r in store.catalog.episodes(campaign=data["name"]))


def _step_files(root: Path) -> tuple[int, int]:
    files = [p for folder in ("episodes", "packs") for p in (root / folder).rglob("*.parquet")]
    return len(files), sum(p.stat().st_size for p in files)


def measure(episodes: int, horizon: int, batch: int, task: str) -> dict[str, Any]:
    """One campaign unpacked and packed at ``envs_per_worker=batch``: files, bytes, per episode and per 1 M."""
    data = {"name": "packs", "seed": 0, "episodes": episodes, "envs_per_worker": batch, "horizon": horizon,
            "cameras": [], "tasks": [task], "policies": ["expert", "random"]}
    found: dict[str, Any] = {"envs_per_worker": batch}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("per_episode", {}), ("packed", {"storage": {"pack": "batch"}})):
            root = Path(tmp) / name
            results[name] = _run(root, {**data, **extra})
            files, size = _step_files(root)
            count = len(results[name])
            found[name] = {"episodes": count, "files": files, "bytes": size,
                           "files_per_episode": round(files / count, 4), "bytes_per_episode": round(size / count, 1),
                           "files_per_1M": round(files / count * MILLION),
                           "GB_per_1M": round(size / count * MILLION / 1e9, 2)}
    found["same_keys_and_results"] = results["per_episode"] == results["packed"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32, help="per policy (two policies: expert, random)")
    parser.add_argument("--horizon", type=int, default=150)
    parser.add_argument("--batch", type=int, action="append", help="envs_per_worker (repeatable; default 4)")
    parser.add_argument("--task", default="metaworld/reach@1")
    args = parser.parse_args()
    runs = [measure(args.episodes, args.horizon, batch, args.task) for batch in args.batch or [4]]
    print(json.dumps({"task": args.task, "horizon": args.horizon, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
