"""Exact coverage of the binomial intervals Assay offers (docs/STATISTICS.md, coverage table).

Coverage at (p, n) = Σ_k Binomial(k; n, p) · 1[p ∈ interval(k, n)], computed from the pmf (no
simulation). Prints the mid-p table on the documented grid and a summary per method, on that grid
and on a fine one (p = 0.01 … 0.99 by 0.01, ten values of n). Run:
``PYTHONPATH=src python benchmarks/interval_coverage.py`` (about a minute on one core).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from assay.metrics import INTERVAL_METHODS, success_interval

GRID_P = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
GRID_N = (5, 10, 20, 50, 100, 200)
FINE_P = tuple(np.round(np.arange(0.01, 1.0, 0.01), 2))
FINE_N = (5, 10, 15, 20, 30, 50, 75, 100, 150, 200)


def coverage(method: str, ps: tuple[float, ...], ns: tuple[int, ...]) -> dict[tuple[float, int], float]:
    table = {}
    for n in ns:
        ends = np.array([(i.low, i.high) for i in (success_interval(k, n, 0.95, method) for k in range(n + 1))])
        for p in ps:
            inside = (ends[:, 0] <= p) & (p <= ends[:, 1])
            table[(p, n)] = float(binom.pmf(np.arange(n + 1), n, p)[inside].sum())
    return table


def main() -> None:
    midp = coverage("midp", GRID_P, GRID_N)
    print("| n \\ p | " + " | ".join(str(p) for p in GRID_P) + " |")
    print("|---" * (len(GRID_P) + 1) + "|")
    for n in GRID_N:
        print(f"| {n} | " + " | ".join(f"{midp[(p, n)]:.3f}" for p in GRID_P) + " |")
    print()
    columns = ("grid mean", "grid min (cell)", "grid cells < 0.93", "fine mean", "fine min (cell)", "fine cells < 0.93")
    print("| method | " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|")
    for method in INTERVAL_METHODS:
        row = []
        for ps, ns in ((GRID_P, GRID_N), (FINE_P, FINE_N)):
            table = coverage(method, ps, ns)
            worst = min(table, key=table.__getitem__)
            values = np.array(list(table.values()))
            row += [f"{values.mean():.3f}", f"{table[worst]:.3f} (p {worst[0]}, n {worst[1]})",
                    f"{int((values < 0.93).sum())} of {values.size}"]
        print(f"| {method} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
