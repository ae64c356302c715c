"""The inline executor with its writer thread against writing on the stepping thread, in one run.

    python benchmarks/inline_pipeline.py [--episodes 120] [--task pick-place] [--rounds 3]

Runs the same campaign of expert episodes (2 environments per batch) through
``InlineExecutor(pipelined=True)`` (a batch's files are written on a writer thread while
the next batch rolls out) and ``InlineExecutor(pipelined=False)``, alternating, and
prints the best round of each in steps/s and episodes/s with their ratio. Set-up
(``gym.make``) and the catalog writes are inside the timing. The machine may be shared:
only the ratio within one run means anything.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Store


def run_once(task: str, episodes: int, seed: int, pipelined: bool) -> tuple[float, float]:
    """(steps/s, episodes/s) of one campaign."""
    spec = campaign_from_data({"name": "bench", "seed": seed, "episodes": episodes, "envs_per_worker": 2,
                               "tasks": [f"metaworld/{task}@1"], "policies": ["expert"]})
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as root, Store(root) as store:
        start = time.perf_counter()
        run_campaign(prepare_campaign(spec), store, InlineExecutor(root, pipelined=pipelined))
        elapsed = time.perf_counter() - start
        steps = sum(r.steps for r in store.catalog.episodes(campaign="bench"))
    return steps / elapsed, episodes / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=120)
    parser.add_argument("--task", default="pick-place")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run_once(args.task, 4, 0, True)  # imports and caches, untimed
    best = {True: (0.0, 0.0), False: (0.0, 0.0)}
    for _ in range(args.rounds):
        for pipelined in (False, True):
            best[pipelined] = max(best[pipelined], run_once(args.task, args.episodes, 1, pipelined))
    print("| inline executor | steps/s | episodes/s |\n|---|---:|---:|")
    for pipelined, label in ((False, "files written on the stepping thread"), (True, "writer thread (default)")):
        print(f"| {label} | {best[pipelined][0]:.0f} | {best[pipelined][1]:.2f} |")
    print(f"\nwriter thread / stepping thread: {best[True][0] / best[False][0]:.3f}")


if __name__ == "__main__":
    main()
