"""The equivalence test's error rates: its size at the margin (simulated), and its verdicts on identical
environments (run).

1. **Size of the TOST at the margin.** Paired Bernoulli outcomes with a true difference B − A of exactly
   ±margin (the edge of "not equivalent"), for several n, base rates and discordance; the share of simulated
   campaigns declared equivalent is the test's type-I error there, which must stay at or below alpha.
2. **Identical environments, repeated seeds.** The same campaign run twice under the same environment (same
   interpreter, packages and renderer) through ``assay.protocols.equivalence`` for several campaign seeds; a
   "different" verdict (McNemar p < alpha) is a type-I error of the difference test; how often TOST declares
   them equivalent at the margin is its power there.

    python benchmarks/equivalence_type1.py --simulate              # part 1 only (seconds)
    python benchmarks/equivalence_type1.py --runs 5 --out /tmp/eq  # part 2 too (Meta-World, minutes)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from assay.metrics.paired import null_distribution, one_sided_p, score


@cache
def _equivalent(table: tuple[int, int, int, int], margin: float, alpha: float) -> bool:
    """What ``assay.metrics.paired.equivalence`` decides for this paired table (its two one-sided tests)."""
    both, a_only, b_only, neither = table
    n = both + a_only + b_only + neither
    return max(one_sided_p(n, a_only, b_only, margin), one_sided_p(n, b_only, a_only, margin)) <= alpha


def simulated_size(n: int, rate_a: float, a_only: float, margin: float, alpha: float, runs: int,
                   seed: int) -> float:
    """Share of ``runs`` paired samples of ``n`` declared equivalent when B − A = +margin exactly."""
    b_only = a_only + margin
    both = rate_a - a_only
    cells = np.array([both, a_only, b_only, 1.0 - both - a_only - b_only])
    if (cells < -1e-9).any():
        raise ValueError(f"no such paired distribution: {cells}")
    cells = np.clip(cells, 0.0, None) / np.clip(cells, 0.0, None).sum()
    draws = np.random.default_rng(seed).multinomial(n, cells, size=runs)
    return float(np.mean([_equivalent(tuple(int(x) for x in row), margin, alpha) for row in draws]))


def simulate(margin: float, alpha: float, runs: int) -> list[dict[str, float]]:
    rows = []
    for n in (50, 100, 200, 400, 800):
        for rate_a in (0.5, 0.8, 0.9):
            for a_only in (0.0, 0.02, 0.05):
                if rate_a + margin + a_only > 1.0 + 1e-9:
                    continue
                size = simulated_size(n, rate_a, a_only, margin, alpha, runs, seed=n * 1000 + int(rate_a * 100))
                rows.append({"n": n, "rate_a": rate_a, "a_only": a_only, "size": size,
                             "exact": exact_size(n, margin, alpha, a_only)})
    return rows


def exact_size(n: int, margin: float, alpha: float, a_only: float) -> float:
    """The probability that the test declares equivalence when B − A = +margin exactly and A alone succeeds on a
    share ``a_only`` of the pairs: every paired table of n pairs, its decision, its trinomial probability."""
    b, c = (x.ravel().astype(float) for x in np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij"))
    keep = b + c <= n
    b, c = b[keep], c[keep]
    ordered, tails = null_distribution(n, margin)

    def p_of(against: np.ndarray, towards: np.ndarray) -> np.ndarray:
        z = score(against, towards, n, margin)
        index = np.searchsorted(ordered, z + 1e-12 * np.maximum(1.0, np.abs(z)), side="right") - 1
        return np.where(index >= 0, tails[np.maximum(index, 0)], 0.0)

    reject = np.maximum(p_of(b, c), p_of(c, b)) <= alpha
    rest = n - b - c
    from scipy import special

    log = (special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1) - special.gammaln(rest + 1)
           + special.xlogy(b, a_only) + special.xlogy(c, a_only + margin)
           + special.xlogy(rest, max(1.0 - 2.0 * a_only - margin, 0.0)))
    return float(np.exp(log)[reject].sum())


CAMPAIGN = {"name": "eq-identical", "episodes": 20, "tasks": ["metaworld/reach", "metaworld/button-press-topdown"],
            "horizon": 120, "cameras": [],
            "policies": [{"name": "shaky", "builtin": "degraded-expert", "params": {"action_noise": 1.0}}]}


def identical_runs(runs: int, out: Path, margin: float, alpha: float) -> list[dict[str, object]]:
    from assay.protocols.equivalence import Environment, run_equivalence

    same = Environment("A", sys.executable, {"MUJOCO_GL": "osmesa"})
    rows = []
    for seed in range(runs):
        path = out / f"campaign-{seed}.json"
        path.write_text(json.dumps({**CAMPAIGN, "name": f"eq-identical-{seed}", "seed": seed}))
        result = run_equivalence([str(path)], same, Environment("B", same.python, same.variables), out / str(seed),
                                 margin, alpha, workers=1, executor="inline", frames=False)
        d = result.test.difference
        rows.append({"seed": seed, "pairs": d.pairs, "rate_a": d.rate_a, "rate_b": d.rate_b,
                     "discordant": d.a_only + d.b_only, "mcnemar_p": d.p_value, "different": d.p_value < alpha,
                     "equivalent": result.test.equivalent, "interval": [d.low, d.high],
                     "identical_trajectories": result.trajectories.identical})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--margin", type=float, default=0.1)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--sims", type=int, default=4000)
    parser.add_argument("--simulate", action="store_true", help="part 1 only")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = simulate(args.margin, args.alpha, args.sims)
    worst = max(rows, key=lambda r: r["size"])
    for row in rows:
        print(f"n={row['n']:4d} rate_A={row['rate_a']:.2f} A-only={row['a_only']:.2f}: "
              f"simulated size {row['size']:.4f}, exact {row['exact']:.4f}")
    exact = max(rows, key=lambda r: r["exact"])
    print(f"largest size at the margin ±{args.margin}: simulated {worst['size']:.4f} ({args.sims} campaigns per "
          f"setting), exact {exact['exact']:.4f} (n={exact['n']}, A-only {exact['a_only']}); alpha {args.alpha}")
    if args.simulate:
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="eq-type1-"))
    found = identical_runs(args.runs, out, args.margin, args.alpha)
    different = sum(bool(r["different"]) for r in found)
    equivalent = sum(bool(r["equivalent"]) for r in found)
    print(f"identical environments, {len(found)} seeds: 'different' {different}/{len(found)} (type-I error of the "
          f"difference test), equivalent within ±{args.margin} {equivalent}/{len(found)}")


if __name__ == "__main__":
    main()
