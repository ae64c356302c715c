"""Exact coverage of the retention and suite-score intervals on grids with the edges (docs/STATISTICS.md).

Retention: n ∈ 6 … 30 pairs × nominal rate × variant rate × dependence on a seed
(``metrics.intervals_coverage.DEPENDENCE``); suite score: two tasks on a fine grid of rates and
three and four tasks at the edges, equal and unequal episodes. Every outcome is weighted by its
probability (no simulation). Run: ``PYTHONPATH=src python benchmarks/aggregate_coverage.py``
(several minutes on one core).
"""

from __future__ import annotations

import itertools

import numpy as np

from assay.metrics.intervals_coverage import DEPENDENCE, retention_coverage, suite_coverage

RETENTION_N = (6, 10, 15, 20, 24, 30)
NOMINAL = (1.0, 0.99, 0.95, 0.9, 0.8, 0.7, 0.5, 0.3, 0.1, 0.05)
VARIANT = (1.0, 0.99, 0.95, 0.9, 0.8, 0.7, 0.5, 0.3, 0.1, 0.05, 0.01)
SUITE_N = (6, 8, 10, 16, 20, 30)
SUITE_P = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 1.0)
SUITE_EDGES = ((0.01, 0.02, 0.05), (0.95, 0.98, 0.99), (1.0, 1.0, 0.9), (0.99, 0.99, 0.99), (0.01, 0.01, 0.01),
               (0.0, 0.0, 0.05), (0.1, 0.5, 0.9), (0.5, 0.5, 0.5), (0.02, 0.02, 0.02, 0.02),
               (0.98, 0.98, 0.95, 0.9), (0.2, 0.3, 0.01, 0.99))


def _summary(label: str, cells: dict[tuple[object, ...], float]) -> str:
    values = np.array(list(cells.values()))
    worst = min(cells, key=cells.__getitem__)
    return (f"| {label} | {values.size} | {values.mean():.3f} | {cells[worst]:.3f} ({', '.join(map(str, worst))}) | "
            f"{int((values < 0.93).sum())} |")


def main() -> None:
    retention = {(n, p0, pv, d): retention_coverage(n, p0, pv, d) for n in RETENTION_N for p0 in NOMINAL
                 for pv in VARIANT for d in DEPENDENCE}
    print("| retention, n pairs | cells | mean | min (n, p_0, p_v, dependence) | cells < 0.93 |")
    print("|---|---|---|---|---|")
    for n in RETENTION_N:
        print(_summary(str(n), {k: v for k, v in retention.items() if k[0] == n}))
    print(_summary("all", retention))
    print()
    print("| nominal always succeeds (p_0 = 1), n \\ p_v | " + " | ".join(map(str, VARIANT)) + " |")
    print("|---" * (len(VARIANT) + 1) + "|")
    for n in RETENTION_N:
        print(f"| {n} | " + " | ".join(f"{retention[(n, 1.0, pv, 'nested')]:.3f}" for pv in VARIANT) + " |")
    print()
    two = {(n, a, b): suite_coverage((a, b), (n, n)) for n in SUITE_N
           for a, b in itertools.combinations_with_replacement(SUITE_P, 2)}
    edges = {(n, rates): suite_coverage(rates, (n,) * len(rates)) for rates in SUITE_EDGES for n in SUITE_N
             if len(rates) < 4 or n <= 16}
    unequal = {(n, rates): suite_coverage(rates, tuple(n + 3 * i for i in range(len(rates))))
               for rates in SUITE_EDGES if len(rates) < 4 for n in (6, 10, 20)}
    print("| suite score | cells | mean | min (cell) | cells < 0.93 |")
    print("|---|---|---|---|---|")
    print(_summary("two tasks, equal n, fine grid", two))
    print(_summary("three and four tasks at the edges, equal n", edges))
    print(_summary("three tasks at the edges, n, n + 3, n + 6", unequal))


if __name__ == "__main__":
    main()
