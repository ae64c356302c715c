"""Meta-World's ``touching_object`` against Assay's array version, per call, on real expert episodes.

    python benchmarks/metaworld_contacts.py [--task pick-place] [--episodes 3]

At every step of ``--episodes`` expert episodes both are called for the task's main object and timed
(the order alternates step by step); the answers must agree at every call. Prints µs per call and how
often the gripper was touching.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from assay.policies import PolicyContext
from assay.policies.builtin import ExpertPolicy
from assay.sim import default_registry, make_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="pick-place")
    parser.add_argument("--episodes", type=int, default=3)
    args = parser.parse_args()
    task = default_registry().get(f"metaworld/{args.task}@1")
    env = make_env(task)
    sawyer = env.simulator
    theirs = type(sawyer).touching_object
    expert = ExpertPolicy()
    spent = {"Meta-World's touching_object": 0.0, "Assay's array version": 0.0}
    calls = touching = contacts = 0
    for seed in range(args.episodes):
        observation = env.reset(seed)
        expert.reset(PolicyContext(task, (seed,), (task.instruction,)))
        for step in range(task.horizon):
            action = expert.act({"state": observation["state"][None], "env_ids": np.array([0]), "instruction": [""]})[0]
            transition = env.step(action)
            observation = transition.observation
            geom = sawyer._get_id_main_object()
            order = [("Meta-World's touching_object", lambda g=geom: theirs(sawyer, g)),
                     ("Assay's array version", lambda g=geom: sawyer.touching_object(g))]
            answers = []
            for name, call in order if step % 2 else order[::-1]:
                start = time.perf_counter()
                answers.append(call())
                spent[name] += time.perf_counter() - start
            assert answers[0] == answers[1], f"seed {seed} step {step}: {answers}"
            calls += 1
            touching += bool(answers[0])
            contacts += sawyer.data.ncon
            if transition.success:
                break
    print(f"{args.task}: {calls} calls over {args.episodes} expert episodes, {contacts / calls:.1f} contacts a step, "
          f"touching at {touching} steps; the answers agreed at every call")
    for name, seconds in spent.items():
        print(f"{name:<32} {seconds / calls * 1e6:7.1f} µs per call")
    env.close()


if __name__ == "__main__":
    main()
