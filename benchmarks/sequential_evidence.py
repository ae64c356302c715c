"""Simulated operating characteristics of the sequential comparison, for docs/STATISTICS.md.

    python benchmarks/sequential_evidence.py [--campaigns 2000] [--delta 0.1] [--max-pairs 600] [--batch 8]

For every (p_A, p_B) with p_A ≥ p_B on a grid, draws ``--campaigns`` seeded paired
campaigns (outcomes independent on a seed: the worst case for pairing), applies the
stopping rule of ``assay.metrics.sequential.compare_stop`` with both tests (mixture
e-process, exact lattice test) and prints one markdown row per point: realised
rejection rate (type-I error on the diagonal, power off it), futility stops, mean
pairs used and the saving against the fixed-n McNemar design of the same α, power, δ.
No simulator is involved; the numbers are deterministic for the seed.
"""

from __future__ import annotations

import argparse

from assay.metrics.sequential_evidence import evidence_grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=2000)
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--max-pairs", type=int, default=600)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--rates", default="0.1,0.3,0.5,0.6,0.7,0.9")
    args = parser.parse_args()
    rates = tuple(float(r) for r in args.rates.split(","))
    print(f"alpha {args.alpha}, power {args.power}, delta {args.delta}, batch {args.batch}, "
          f"max pairs {args.max_pairs}, {args.campaigns} campaigns per point\n")
    print("| p_A | p_B | test | rejected | futility stop | mean pairs | fixed-n | saved |")
    print("|---|---|---|---|---|---|---|---|")
    for row in evidence_grid(rates, campaigns=args.campaigns, alpha=args.alpha, power=args.power,
                             delta=args.delta, batch=args.batch, max_pairs=args.max_pairs):
        print(f"| {row.p_a} | {row.p_b} | {row.method} | {row.rejected:.3f} | {row.futile:.3f} | "
              f"{row.mean_pairs:.1f} | {row.fixed_n} | {row.saved:+.0%} |", flush=True)


if __name__ == "__main__":
    main()
