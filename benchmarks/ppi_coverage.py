"""Coverage of the sim + real intervals of `assay estimate-real` by simulation, for docs/STATISTICS.md.

    python benchmarks/ppi_coverage.py [--campaigns 1000] [--sim-episodes 500] [--draws 20000]

On a grid of real success rates, sim biases, sim/real correlations ρ (0: a simulator that says nothing
about real) and numbers of real trials n, with k = 1, 3 and 8 policies per campaign, it draws
``--campaigns`` seeded campaigns (``assay.metrics.ppi_evidence.simulate_ppi``) and prints one markdown row
per point: the realised coverage of the prediction-powered interval (the lowest over the k policies), of
the classical real-only Clopper–Pearson interval and of the PPI++ normal interval, the share of campaigns
where all k PPI intervals covered (with --joint rows: Bonferroni at 1 − α/k each), mean widths and the
real trials the sim episodes were worth. No simulator is involved; deterministic for the seed.
"""

from __future__ import annotations

import argparse

from assay.metrics.ppi_evidence import simulate_ppi

SINGLE = [(rate,) for rate in (0.1, 0.5, 0.9)]
SEVERAL = [(0.2, 0.5, 0.8), tuple(round(0.1 + 0.8 * i / 7, 3) for i in range(8))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--sim-episodes", type=int, default=500)
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--part", choices=("all", "single", "several"), default="all",
                        help="only the k = 1 points, or only the k = 3 and 8 points")
    args = parser.parse_args()
    print(f"N = {args.sim_episodes} sim episodes per policy, {args.campaigns} campaigns per point, "
          f"intervals from {args.draws} draws, 95%\n")
    print("| k | real rates | sim bias | ρ | n | joint | PPI coverage | all k covered | classical coverage | "
          "PPI++ normal coverage | PPI width | classical width | real trials worth |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    points = [(rates, bias, rho, n, False) for rates in SINGLE for bias in (0.0, 0.1) for rho in (0.0, 0.5, 0.9)
              for n in (10, 30)] if args.part != "several" else []
    points += [(rates, 0.1, rho, n, joint) for rates in SEVERAL for rho in (0.0, 0.9) for n in (10, 30)
               for joint in (False, True)] if args.part != "single" else []
    for rates, bias, rho, n, joint in points:
        r = simulate_ppi(rates, bias, rho, n, args.sim_episodes, args.campaigns, args.seed, joint=joint,
                         draws=args.draws)
        shown = rates[0] if len(rates) == 1 else f"{rates[0]}–{rates[-1]}"
        print(f"| {len(rates)} | {shown} | {bias:+.1f} | {rho} | {n} | {'yes' if joint else 'no'} | "
              f"{r.ppi_coverage:.3f} | {r.ppi_all_covered:.3f} | {r.classical_coverage:.3f} | {r.clt_coverage:.3f} | "
              f"{r.ppi_width:.3f} | {r.classical_width:.3f} | {r.effective_real_trials:.1f} |", flush=True)


if __name__ == "__main__":
    main()
