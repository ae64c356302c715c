"""Exact coverage of a policy's pass^k interval (the mean over its tasks), for docs/STATISTICS.md.

    python benchmarks/passk_coverage.py [--draws 4000]

Two tasks at equal n ∈ {6, 10, 20} with every pair of rates from 0.5, 0.7, 0.9, 0.95, 0.99, 1, and three
tasks at the edges at n ∈ {6, 8}, for k = 2, 3, 5: every combination of per-task counts weighted by its
probability (``assay.metrics.passk.policy_coverage``). Prints one markdown row per (k, tasks): cells, mean,
lowest (with its cell) and cells under 0.93. Deterministic (seeded draws).
"""

from __future__ import annotations

import argparse
import itertools

from assay.metrics.passk import policy_coverage

EDGES = (0.5, 0.7, 0.9, 0.95, 0.99, 1.0)
THREE = ((0.95, 0.98, 0.99), (0.5, 0.5, 0.5), (1.0, 0.9, 0.8), (0.9, 0.9, 0.9), (0.99, 0.99, 0.99), (0.7, 0.8, 0.9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=4000)
    args = parser.parse_args()
    print("| k | tasks | cells | mean | min (cell) | cells < 0.93 |")
    print("|---|---|---|---|---|---|")
    for k in (2, 3, 5):
        for tasks, cells in ((2, [(n, pair) for n in (6, 10, 20) for pair in
                                  itertools.combinations_with_replacement(EDGES, 2) if n >= k]),
                             (3, [(n, rates) for n in (6, 8) for rates in THREE if n >= k])):
            found = [(policy_coverage(rates, [n] * len(rates), k, draws=args.draws), n, rates) for n, rates in cells]
            low = min(found)
            mean = sum(c for c, _, _ in found) / len(found)
            print(f"| {k} | {tasks} | {len(found)} | {mean:.3f} | {low[0]:.3f} (n {low[1]}, "
                  f"{', '.join(map(str, low[2]))}) | {sum(c < 0.93 for c, _, _ in found)} |", flush=True)


if __name__ == "__main__":
    main()
