"""Coverage over every rate and every n ≤ 50 (docs/STATISTICS.md, "Coverage certified over every rate").

Part ``rates``: each binomial interval's exact infimum over p ∈ (0, 1) and its mean over p, per n, from the
breakpoints (``metrics.coverage_certificate``; seconds). Part ``retention``: MOVER-R when nominal always succeeds
(certified the same way), and at p₀ < 1 a search over a grid of (p₀, p_v) for each dependence of the paired
outcomes, conditional on retention being defined, for MOVER-R and the exact (Bonferroni Clopper–Pearson)
construction. The grid search is a search, not a certificate: it bounds the infimum from above.

Run: ``PYTHONPATH=src python benchmarks/coverage_certificate.py --part rates`` and
``... --part retention --step 0.01 --nominal-from 0.05 --method mover`` (tens of minutes on one core at n ≤ 50).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from assay.metrics.coverage_certificate import MAX_N, certify_full_nominal_retention, certify_rate
from assay.metrics.intervals_coverage import DEPENDENCE, retention_coverage_grid
from assay.metrics.rates import INTERVAL_METHODS


def rates() -> None:
    print("| method | min over every p and n ≤ 50 (n, p) | n with a min < 0.93 | mean over p: lowest n, "
          "average over n |")
    print("|---|---|---|---|")
    for method in INTERVAL_METHODS:
        certificates = [certify_rate(method, n) for n in range(1, MAX_N + 1)]
        worst = min(certificates, key=lambda c: c.minimum)
        below = sum(c.minimum < 0.93 for c in certificates)
        means = [c.mean for c in certificates]
        print(f"| {method} | {worst.minimum:.4f} ({worst.n}, {min(worst.at, 1 - worst.at):.3f}) | {below} of 50 | "
              f"{min(means):.4f}, {np.mean(means):.4f} |")
    print()
    print("mid-p per n (infimum over p):")
    print(", ".join(f"{n}: {certify_rate('midp', n).minimum:.3f}" for n in range(1, MAX_N + 1)))


def retention(step: float, nominal_from: float, method: str, n_from: int = 1, n_to: int = MAX_N) -> None:
    full = [certify_full_nominal_retention(n) for n in range(1, MAX_N + 1)]
    worst = min(full, key=lambda c: c.minimum)
    print(f"MOVER-R at p0 = 1, certified over every p_v: min {worst.minimum:.4f} (n {worst.n}, p_v {worst.at:.3f}); "
          f"n below 0.93: {[c.n for c in full if c.minimum < 0.93]}; "
          f"mean over p_v from {min(c.mean for c in full):.4f}")
    nominal = np.round(np.arange(nominal_from, 1.0 + 1e-9, step), 6)
    variant = np.round(np.arange(0.0, 1.0 + 1e-9, step), 6)
    print(f"{method}: grid p0 {nominal[0]}..1, p_v 0..1 by {step}, every dependence, conditional on defined")
    print("| n | min (p0, p_v, dependence) | mean | points < 0.93 |")
    print("|---|---|---|---|")
    started, overall = time.time(), []
    for n in range(n_from, n_to + 1):
        found = []
        for dependence in DEPENDENCE:
            grid = retention_coverage_grid(n, nominal, variant, dependence, method=method)
            valid = np.isfinite(grid)
            i, j = np.unravel_index(np.argmin(np.where(valid, grid, np.inf)), grid.shape)
            found.append((float(grid[i, j]), float(nominal[i]), float(variant[j]), dependence, grid[valid]))
        low = min(found, key=lambda f: f[0])
        values = np.concatenate([f[4] for f in found])
        overall.append((low[0], n, low[1], low[2], low[3], float(values.mean())))
        print(f"| {n} | {low[0]:.4f} ({low[1]}, {low[2]}, {low[3]}) | {values.mean():.4f} | "
              f"{int((values < 0.93).sum())} of {values.size} | ({time.time() - started:.0f} s)", flush=True)
    worst_n = min(overall)
    print(f"overall min {worst_n[0]:.4f} at n {worst_n[1]}, p0 {worst_n[2]}, p_v {worst_n[3]}, {worst_n[4]}; "
          f"mean of the per-n means {np.mean([o[5] for o in overall]):.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("rates", "retention"), default="rates")
    parser.add_argument("--step", type=float, default=0.01)
    parser.add_argument("--nominal-from", type=float, default=0.05)
    parser.add_argument("--method", choices=("mover", "exact"), default="mover")
    parser.add_argument("--n-from", type=int, default=1)
    parser.add_argument("--n-to", type=int, default=MAX_N)
    args = parser.parse_args()
    if args.part == "rates":
        rates()
    else:
        retention(args.step, args.nominal_from, args.method, args.n_from, args.n_to)


if __name__ == "__main__":
    main()
