"""Null recipe pairs: how often does a comparison "ship" a difference between two identical training recipes?

Design (stated before running): one recipe (Meta-World reach, 5 expert demos, a BC trained ``--epochs``,
``--eval-episodes`` evaluation seeds, 20 by default); ``--pairs`` null pairs, each the recipe against itself with
disjoint training seeds (R each: pair k uses seeds 2kR..2kR+R-1 against 2kR+R..2kR+2R-1), on the same demos and
the same evaluation episodes. Two
decisions per pair at alpha 0.05: the checkpoint-only comparison (the first checkpoint of each side, exact McNemar
over the paired evaluation episodes: what comparing one checkpoint per recipe does) and the recipe comparison
(Welch's t test over the R checkpoint success rates of each side: ``assay compare --recipes``). Every pair is
null, so each "ship" is a false one; the endpoint is each decision's false-ship rate with its mid-p 95% interval
(type-I at most alpha is the recipe test's promise). Also printed: the recipe's harness and retrain variance.

    MUJOCO_GL=osmesa python benchmarks/recipe_noise.py --pairs 20 --seeds 4 --epochs 30 --store runs/recipe-noise
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from assay.learning.noise import Recipe, compare_recipes
from assay.metrics import success_interval
from assay.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=4, help="training seeds (checkpoints) per side")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--eval-episodes", type=int, default=20, help="evaluation seeds per checkpoint")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--store", default="runs/recipe-noise")
    args = parser.parse_args()
    base = Recipe(name="null-a", tasks=("metaworld/reach@1",), demos=5, epochs=args.epochs,
                  eval_episodes=args.eval_episodes, horizon=100)
    other = replace(base, name="null-b")
    only = recipe = 0
    retrain, harness = [], []
    started = time.process_time()
    with Store(Path(args.store)) as store:
        for k in range(args.pairs):
            first = 2 * k * args.seeds
            seeds_a = list(range(first, first + args.seeds))
            seeds_b = list(range(first + args.seeds, first + 2 * args.seeds))
            found = compare_recipes(store, base, other, seeds_a, seeds_b, store.root / "recipes", args.alpha)
            only += found.checkpoint_only_p < args.alpha
            recipe += found.p < args.alpha
            for side in (found.a, found.b):
                harness.append(side.harness_variance)
                if side.retrain_variance is not None:
                    retrain.append(side.retrain_variance)
            print(f"pair {k}: A {[c.successes for c in found.a.checkpoints]} B "
                  f"{[c.successes for c in found.b.checkpoints]} (of {args.eval_episodes}): Welch p {found.p:.3f}, "
                  f"one checkpoint each {found.checkpoint_only_difference:+.2f} p {found.checkpoint_only_p:.3f}",
                  flush=True)
    for label, count in (("checkpoint-only (exact McNemar, one checkpoint each)", only),
                         (f"recipe (Welch t over {args.seeds} checkpoints each)", recipe)):
        interval = success_interval(count, args.pairs)
        print(f"{label}: false ships {count}/{args.pairs} = {count / args.pairs:.2f} "
              f"[{interval.low:.2f}, {interval.high:.2f}] (alpha {args.alpha})")
    print(f"variance of one checkpoint's success rate: harness {sum(harness) / len(harness):.4f} (mean), retrain "
          f"{sum(retrain) / len(retrain):.4f} (mean of the sides' estimates); {time.process_time() - started:.0f} "
          "CPU s in this process")


if __name__ == "__main__":
    main()
