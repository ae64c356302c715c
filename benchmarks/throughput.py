"""Throughput of the closed loop: a bare Meta-World loop against Assay, in one run.

    .venv/bin/python benchmarks/throughput.py [--episodes 24] [--tasks reach,drawer-open,button-press,door-open]

Runs the same episodes (same tasks, seeds, scripted expert) through
(a) a bare hand-written loop over one reused Meta-World environment per task,
(b) Assay inline with full recording (Parquet + catalog),
(c) Assay local with 1 and 2 worker processes,
and prints steps/s and the ratios. Every variant pays for building its own
environments and, for Assay, for process start-up, recording and the catalog:
wall time from start to the last episode stored. ``envs_per_worker`` is 1 so each
variant builds the same number of environments per worker.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext
from assay.run import InlineExecutor, LocalExecutor, prepare_campaign, run_campaign
from assay.sim import make_env
from assay.spec import campaign_from_data
from assay.store import Store


def bare_loop(planned) -> int:
    """What one would write by hand: one env per task, expert actions, stop on success or horizon."""
    steps = 0
    envs = {}
    expert = ExpertPolicy()
    for job in planned.jobs:
        env = envs.get(job.task.id) or envs.setdefault(job.task.id, make_env(job.task))
        observation = env.reset(job.seed)
        expert.reset(PolicyContext(job.task, (job.seed,), (job.task.instruction,)))
        for _ in range(job.task.horizon):
            action = expert.act({"state": observation["state"][None], "env_ids": np.zeros(1, int), "instruction": [""]})[0]
            transition = env.step(action)
            observation = transition.observation
            steps += 1
            if transition.success:
                break
    return steps


def assay_run(planned, executor_factory) -> int:
    with tempfile.TemporaryDirectory() as root, Store(root) as store:
        run_campaign(planned, store, executor_factory(Path(root)))
        return sum(r.steps for r in store.catalog.episodes(campaign=planned.spec.name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--tasks", default="reach,drawer-open,button-press,door-open")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; variants interleave, the median counts")
    args = parser.parse_args()
    spec = campaign_from_data({
        "name": "throughput", "seed": 0, "episodes": args.episodes, "envs_per_worker": 1,
        "tasks": [f"metaworld/{t}@1" for t in args.tasks.split(",")], "policies": ["expert"],
    })
    planned = prepare_campaign(spec)
    variants = {
        "bare loop": lambda: bare_loop(planned),
        "assay inline": lambda: assay_run(planned, InlineExecutor),
        "assay local, 1 worker": lambda: assay_run(planned, lambda root: LocalExecutor(root, 1)),
        "assay local, 2 workers": lambda: assay_run(planned, lambda root: LocalExecutor(root, 2)),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    print(f"{len(planned.jobs)} episodes, expert policy, tasks {args.tasks}, {args.repeats} interleaved rounds")
    for _ in range(args.repeats):  # interleaved, so a burst of load on a shared machine hits every variant
        for name, run in variants.items():
            start = time.perf_counter()
            steps = run()
            samples[name].append(steps / (time.perf_counter() - start))
    rates = {name: float(np.median(values)) for name, values in samples.items()}
    for name, rate in rates.items():
        spread = ", ".join(f"{v:.0f}" for v in samples[name])
        print(f"{name:<24} {rate:8.0f} steps/s (median of {spread})")
    print(f"inline / bare             {rates['assay inline'] / rates['bare loop']:.3f}  (target >= 0.95)")
    print(f"2 workers / 1 worker      {rates['assay local, 2 workers'] / rates['assay local, 1 worker']:.3f}  (target >= 1.9)")


if __name__ == "__main__":
    main()
