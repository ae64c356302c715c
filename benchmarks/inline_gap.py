"""Where Assay's inline loop loses to a bare Meta-World loop: the same expert episodes, layer by layer, one run.

    python benchmarks/inline_gap.py [--episodes 80] [--task pick-place-v3] [--rounds 3]

1. bare:            ``gym.make('Meta-World/MT1')``, the scripted expert, nothing recorded
2. env:             Assay's environment (``make_env``: direct Sawyer build, event tracker), the same
                    expert on ``obs['state']``, nothing recorded: the simulator layer alone
3. env, no events:  as 2 with the event tracker answering nothing: what per-step events cost
4. inline:          a whole Assay campaign in this process (rollout, recording, Parquet on the writer
                    thread, catalog), as ``benchmarks/eval_throughput.py`` runs it

Every loop ends an episode at the first success or at the 500-step horizon and counts steps/s
(set-up inside the timing); loops run round-robin and each keeps its best round. The machine may be
shared: only ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from eval_throughput import HORIZON, _expert, assay, bare


def assay_env(env_name: str, seeds: list[int], events: bool) -> int:
    from assay.sim.registry import default_registry, make_env

    env = make_env(default_registry().get("metaworld/" + env_name.removesuffix("-v3") + "@1"))
    inner = env
    while not hasattr(inner, "_events"):  # PerturbedEnv around MetaWorldEnv
        inner = inner.env
    if not events:
        inner._events.step = lambda action, state: {}
    policy = _expert(env_name)
    steps = 0
    for seed in seeds:
        observation = env.reset(seed)
        for _ in range(HORIZON):
            transition = env.step(np.asarray(policy.get_action(observation["state"]), dtype=np.float32))
            observation = transition.observation
            steps += 1
            if transition.success or transition.terminated or transition.truncated:
                break
    env.close()
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=80)
    parser.add_argument("--task", default="pick-place-v3")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    seeds = list(range(1000, 1000 + args.episodes))  # eval_throughput's seeds; Assay draws its own per episode
    loops: list[tuple[str, Callable[[], int]]] = [
        ("bare Meta-World loop", lambda: bare(args.task, seeds)),
        ("Assay environment, no runner", lambda: assay_env(args.task, seeds, True)),
        ("Assay environment, no runner, no events", lambda: assay_env(args.task, seeds, False)),
        ("Assay inline campaign", lambda: assay(args.task, args.episodes, "inline", 1, 0)),
    ]
    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.rounds):
        for name, loop in loops:
            start = time.perf_counter()
            steps = loop()
            rate = steps / (time.perf_counter() - start)
            best[name] = max(best.get(name, (0.0, 0)), (rate, steps))
    base = best[loops[0][0]][0]
    print(f"{args.episodes} episodes of {args.task}, best of {args.rounds} rounds\n")
    print("| loop | steps | steps/s | × bare |\n|---|---:|---:|---:|")
    for name, _ in loops:
        rate, steps = best[name]
        print(f"| {name} | {steps} | {rate:.0f} | {rate / base:.3f} |")


if __name__ == "__main__":
    main()
