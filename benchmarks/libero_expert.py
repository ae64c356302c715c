"""Success of the scripted LIBERO expert per task (the same reset/act/step loop as a campaign).

    python benchmarks/libero_expert.py object 0,1,2,3,4,5,6,7,8,9 0,1,2,3,4

Arguments: suite (spatial, object, goal, 10, 90), task indices in the suite's order, initial-state
indices. Prints one line per task: successes / episodes and wall time. State only (no cameras).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from assay.policies.builtin import ExpertPolicy
from assay.policies.protocol import PolicyContext
from assay.sim import default_registry, make_env
from assay.spec.libero_catalog import SUITES, libero_catalog


def main(suite: str, tasks: list[int], seeds: list[int]) -> None:
    registry = default_registry()
    order = [entry["task"] for entry in libero_catalog()[SUITES[suite].benchmark]]
    for index in tasks:
        task = registry.get(f"libero/{suite}/{order[index]}").model_copy(update={"cameras": ()})
        reason = ExpertPolicy.supports(task)
        if reason:
            print(f"{suite} {index} {order[index]}: {reason}")
            continue
        env, policy, wins, started = make_env(task), ExpertPolicy(), 0, time.perf_counter()
        for seed in seeds:
            policy.reset(PolicyContext(task, (seed,), (task.instruction,)))
            observation = env.reset(seed)
            for _ in range(task.horizon):
                batch = {"state": observation["state"][None], "privileged.goal": observation["privileged.goal"][None],
                         "env_ids": np.array([0]), "instruction": [task.instruction]}
                transition = env.step(policy.act(batch)[0])
                observation = transition.observation
                if transition.success:
                    wins += 1
                    break
        print(f"{suite} {index} {order[index]} {wins}/{len(seeds)} {time.perf_counter() - started:.0f}s", flush=True)
        env.close()


if __name__ == "__main__":
    main(sys.argv[1], [int(x) for x in sys.argv[2].split(",")], [int(x) for x in sys.argv[3].split(",")])
