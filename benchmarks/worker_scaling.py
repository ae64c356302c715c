"""Local executor scaling: one campaign of expert episodes on 1, 2, ... worker processes, one run.

    python benchmarks/worker_scaling.py [--episodes 1000] [--task pick-place-v3] [--workers 1,2] [--rounds 2]

The campaign of ``benchmarks/eval_throughput.py`` (``envs_per_worker: 2``, the expert, end at the first
success or 500 steps) through ``LocalExecutor`` with each worker count, round-robin; each count keeps its
best round. Process spawn, imports and environment builds are inside the timing, paid once per worker.
Prints steps/s and the ratio to the first worker count. On a machine with more cores pass e.g.
``--workers 1,2,4,8,16`` for the curve.
"""

from __future__ import annotations

import argparse
import time

from eval_throughput import assay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--task", default="pick-place-v3")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    best: dict[int, tuple[float, float, int]] = {}
    for _ in range(args.rounds):
        for workers in counts:
            start = time.perf_counter()
            steps = assay(args.task, args.episodes, "local", workers, 0)
            elapsed = time.perf_counter() - start
            best[workers] = max(best.get(workers, (0.0, 0.0, 0)), (steps / elapsed, elapsed, steps))
            print(f"round: {workers} workers, {steps} steps in {elapsed:.1f} s", flush=True)
    base = best[counts[0]][0]
    print(f"\n{args.episodes} episodes of {args.task}, best of {args.rounds} rounds\n")
    print(f"| workers | steps | seconds | steps/s | × {counts[0]} |\n|---:|---:|---:|---:|---:|")
    for workers in counts:
        rate, elapsed, steps = best[workers]
        print(f"| {workers} | {steps} | {elapsed:.1f} | {rate:.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
