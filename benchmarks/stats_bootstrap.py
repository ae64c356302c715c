"""Bootstrap cost of the statistics, as ratios measured in one run.

    .venv/bin/python benchmarks/stats_bootstrap.py

1. Kendall τ-b over 2000 resamples: the vectorized form used by ``correlate``
   against one ``scipy.stats.kendalltau`` call per resample (same numbers).
2. A leaderboard (2000 paired resamples) on a large synthetic campaign:
   50 tasks × 100 seeds × 10 policies, wall time.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.stats import kendalltau

from assay.metrics.correlation import _kendall_rows
from assay.metrics.outcomes import OutcomeGrid, TaskOutcomes
from assay.metrics.ranking import leaderboard


def main() -> None:
    rng = np.random.default_rng(0)
    r = rng.binomial(20, 0.5, size=(2000, 8)) / 20
    s = rng.binomial(20, 0.5, size=(2000, 8)) / 20
    start = time.perf_counter()
    fast = _kendall_rows(r, s)
    vectorized = time.perf_counter() - start
    start = time.perf_counter()
    slow = np.array([kendalltau(a, b).statistic for a, b in zip(r, s, strict=True)])
    looped = time.perf_counter() - start
    assert np.allclose(fast, slow, equal_nan=True)
    print(f"kendall tau-b, 2000 resamples x 8 policies: vectorized {vectorized * 1e3:.1f} ms, "
          f"scipy loop {looped * 1e3:.1f} ms, ratio {looped / vectorized:.0f}x")

    policies = tuple(f"p{i}" for i in range(10))
    tasks = []
    for t in range(50):
        values = (rng.random((100, 10)) < np.linspace(0.2, 0.8, 10)).astype(float)
        values.setflags(write=False)
        tasks.append(TaskOutcomes(f"task{t}@1", tuple(("nominal", i) for i in range(100)), policies, values,
                                  (0,) * 10))
    grid = OutcomeGrid(tuple(tasks), policies)
    start = time.perf_counter()
    leaderboard(grid)
    print(f"leaderboard, 50 tasks x 100 seeds x 10 policies, 2000 resamples: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
