"""Evaluation throughput: the same episodes through nine timed loops in six groups, one run, ratios.

    python benchmarks/eval_throughput.py [--episodes 160] [--task pick-place-v3]

1. bare:        a plain Meta-World loop (one env, scripted expert, nothing recorded)
2. inline:      Assay, in this process (recording, Parquet, catalog)
3. local-1/2:   Assay's local executor with 1 and 2 worker processes
4. async-vec-2: a LeRobot-style eval loop: gymnasium ``AsyncVectorEnv`` of 2
                Meta-World envs, one batched policy call per step, run until every
                env is done, in batches of 2 episodes
5. ray-2:       Assay's Ray executor with 2 actors (Ray and its idle workers started beforehand,
                as a cluster is up before a campaign; actor start-up is counted), and local-2
                again beside it
6. like for like: loops 1 and 4 again on a Meta-World environment given Assay's exact array
                ``touching_object`` and one-call hand reset (``assay.sim.metaworld_contacts``,
                ``assay.sim.metaworld_reset``): Assay's environments step
                faster than stock Meta-World, and these two rows separate that from the runner's cost

Every loop ends an episode at the first success or at the 500-step horizon and
counts only the steps of running episodes (steps/s); each loop runs ``--repeat``
times, round-robin (every other round in reverse order), and its best round counts (the machine
is shared); set-up (process spawn, ``gym.make``) is inside the timing, as a user waits for it, and this
process's imports are done before the first loop (an untimed 2-episode inline campaign and bare episode).
Two phases: loops 1-4 and 6 with no Ray cluster up, then Ray started and loop 5 in turn with
local-2, so Ray / local compares two loops run beside Ray's daemons and no other ratio does.
Writes a Markdown table under its own heading into docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

DOCS = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
HEADING = "## Evaluation throughput against the field's loops (benchmarks/eval_throughput.py)"
HORIZON = 500
FAST_BARE = "bare loop, Assay's touching_object and hand reset (1 process)"
FAST_VEC = "AsyncVectorEnv, 2 workers, Assay's touching_object and hand reset"
RAY = "Assay on Ray, 2 actors"
LOCAL_BESIDE_RAY = "Assay local, 2 workers, beside Ray"


def _expert(env_name: str):
    from metaworld.policies import ENV_POLICY_MAP

    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
    return ENV_POLICY_MAP[env_name]()


def _fast_contacts(env):
    """``env`` (a gymnasium-wrapped MT1 environment) with Assay's exact array ``touching_object`` and hand reset."""
    from assay.sim import metaworld_contacts, metaworld_reset

    metaworld_contacts.install(env.unwrapped)  # gymnasium's innermost: the Sawyer environment
    metaworld_reset.install(env.unwrapped)
    return env


def bare(env_name: str, seeds: list[int], fast: bool = False) -> int:
    import gymnasium as gym
    import metaworld  # noqa: F401

    env = gym.make("Meta-World/MT1", env_name=env_name, seed=0, disable_env_checker=True)
    if fast:
        _fast_contacts(env)
    policy = _expert(env_name)
    steps = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        for _ in range(HORIZON):
            obs, _, terminated, truncated, info = env.step(policy.get_action(obs))
            steps += 1
            if info["success"] or terminated or truncated:
                break
    env.close()
    return steps


class _MakeMT1:
    """A picklable environment factory for the vector env's worker processes."""

    def __init__(self, env_name: str, seed: int, fast: bool) -> None:
        self.env_name, self.seed, self.fast = env_name, seed, fast

    def __call__(self) -> object:
        import gymnasium as gym
        import metaworld  # noqa: F401

        env = gym.make("Meta-World/MT1", env_name=self.env_name, seed=self.seed, disable_env_checker=True)
        return _fast_contacts(env) if self.fast else env


def async_vector(env_name: str, seeds: list[int], workers: int = 2, fast: bool = False) -> int:
    """The way LeRobot evaluates: a vector env, a batched policy call per step, until all are done."""
    import gymnasium as gym

    envs = gym.vector.AsyncVectorEnv([_MakeMT1(env_name, i, fast) for i in range(workers)], context="spawn")
    policy = _expert(env_name)
    steps = 0
    try:
        for start in range(0, len(seeds), workers):
            batch = seeds[start : start + workers]
            batch += batch[-1:] * (workers - len(batch))
            obs, _ = envs.reset(seed=batch)
            done = np.zeros(workers, dtype=bool)
            for _ in range(HORIZON):
                action = np.stack([policy.get_action(o) for o in obs])  # the batched policy call
                obs, _, terminated, truncated, info = envs.step(action)
                steps += int((~done).sum())
                done |= terminated | truncated | (np.asarray(info["success"]) > 0)
                if done.all():
                    break
    finally:
        envs.close()
    return steps


def assay(env_name: str, episodes: int, executor_name: str, workers: int, seed: int) -> int:
    from assay.run import make_executor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    task = "metaworld/" + env_name.removesuffix("-v3") + "@1"
    spec = campaign_from_data({"name": "bench", "seed": seed, "episodes": episodes, "envs_per_worker": 2,
                               "tasks": [task], "policies": ["expert"]})
    with tempfile.TemporaryDirectory(prefix="assay-bench-") as root, Store(root) as store:
        executor = make_executor(executor_name, root, workers)
        run_campaign(prepare_campaign(spec), store, executor)
        return sum(r.steps for r in store.catalog.episodes(campaign="bench"))


def _by_round(rates: dict[str, list[float]], top: str, bottom: str, label: str) -> str:
    """``label``'s ratio in each round, and their median."""
    ratios = [a / b for a, b in zip(rates[top], rates[bottom], strict=True)]
    return f"{label} {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})"


def _idle_ray_workers(root: int | None = None) -> int | None:
    """How many idle worker processes (``ray::IDLE``) the Ray this process started has up (its raylet is this process's
    descendant, and so are they; another Ray on the machine is not counted): an actor takes one over without a process
    start. ``root``: count below that process instead of this one. None where ``/proc`` cannot be read."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    parents: dict[int, int] = {}
    idle: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state
            if (entry / "cmdline").read_bytes().startswith(b"ray::IDLE"):
                idle.append(int(entry.name))
        except (OSError, ValueError):
            continue
    me = os.getpid() if root is None else root

    def mine(pid: int) -> bool:
        seen: set[int] = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return sum(mine(pid) for pid in idle)


def _settle_ray(workers: int, limit_s: float = 15.0) -> None:
    """Wait (at most ``limit_s``) until Ray has started its ``workers`` idle worker processes, so that their start-up
    does not land in the first loop beside Ray (no wait where they cannot be counted)."""
    deadline = time.monotonic() + limit_s
    while True:
        idle = _idle_ray_workers()
        if idle is None:
            return
        if idle >= workers or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # and let them finish importing


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _ray_best_note(rates: dict[str, list[float]], idle: list[int | None]) -> str:
    """Which round gave Ray's best, and the best to best over the rounds whose actors found no idle Ray worker."""
    ray_rates, local_rates = rates[RAY], rates[LOCAL_BESIDE_RAY]
    best = max(range(len(ray_rates)), key=ray_rates.__getitem__)
    note = f"Ray's best round had {_count(idle[best])} idle Ray workers before it"
    cold = [i for i, n in enumerate(idle) if n == 0]
    if cold and any(n for n in idle):  # some rounds found idle workers and some none
        note += (f"; over the rounds with none, best to best "
                 f"{max(ray_rates[i] for i in cold) / max(local_rates[i] for i in cold):.2f}")
    return note


def _time(fn: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    steps = fn()
    return steps, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--task", default="pick-place-v3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2,
                        help="rounds over each phase's loops; the best round of each loop counts")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    args = parser.parse_args()
    seeds = list(range(1000, 1000 + args.episodes))

    # imported once before any timing (every loop of this process shares them); ``from`` imports, as ``import
    # assay.run`` would bind ``assay``, the loop below, and load nothing: Assay's packages load their names lazily
    import gymnasium  # noqa: F401
    import metaworld.policies  # noqa: F401
    import ray

    from assay.run import ray_executor  # noqa: F401 - imported by the first Ray loop otherwise

    assay(args.task, 2, "inline", 1, args.seed)  # untimed: the rest of what Assay's loops load (Parquet, SQLite)
    bare(args.task, seeds[:1], fast=True)  # untimed: Meta-World's experts and Assay's simulator module

    loops: list[tuple[str, Callable[[], int]]] = [
        # in this order so that each like-for-like pair runs side by side (the machine drifts within a round)
        ("bare Meta-World loop (1 process)", lambda: bare(args.task, seeds)),
        (FAST_BARE, lambda: bare(args.task, seeds, fast=True)),
        ("Assay inline", lambda: assay(args.task, args.episodes, "inline", 1, args.seed)),
        ("Assay local, 1 worker", lambda: assay(args.task, args.episodes, "local", 1, args.seed)),
        ("Assay local, 2 workers", lambda: assay(args.task, args.episodes, "local", 2, args.seed)),
        (FAST_VEC, lambda: async_vector(args.task, seeds, 2, fast=True)),
        ("LeRobot-style AsyncVectorEnv, 2 workers", lambda: async_vector(args.task, seeds, 2)),
    ]
    ray_loops: list[tuple[str, Callable[[], int]]] = [
        (LOCAL_BESIDE_RAY, lambda: assay(args.task, args.episodes, "local", 2, args.seed)),
        (RAY, lambda: assay(args.task, args.episodes, "ray", 2, args.seed)),
    ]
    results: dict[str, tuple[int, float, float]] = {}
    rates: dict[str, list[float]] = {}  # each round's steps/s, for the round-by-round ratios
    idle_workers: list[int | None] = []  # Ray's idle worker processes before each Ray loop
    load_before = os.getloadavg()

    def run_rounds(chosen: list[tuple[str, Callable[[], int]]], phase: str) -> None:
        # round-robin, every other round in reverse order, so the machine's drift hits both sides of a ratio alike
        for round_ in range(args.repeat):
            for name, fn in (chosen if round_ % 2 == 0 else chosen[::-1]):
                idle = ""
                if name == RAY:
                    idle_workers.append(_idle_ray_workers())
                    idle = f" ({_count(idle_workers[-1])} idle Ray workers)"
                steps, seconds = _time(fn)
                print(f"{phase} round {round_ + 1} {name:46s} {steps:7d} steps {seconds:7.2f} s "
                      f"{steps / seconds:8.0f} steps/s{idle}", flush=True)
                rates.setdefault(name, []).append(steps / seconds)
                if name not in results or seconds < results[name][1]:
                    results[name] = (steps, seconds, steps / seconds)

    run_rounds(loops, "phase 1 (no Ray running)")
    # Ray is started beforehand (a cluster is up before a campaign), and only for this phase: its daemons' CPU
    # would otherwise weigh on the loops above, which use the second core too (Assay's writer threads)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    _settle_ray(2)
    try:
        run_rounds(ray_loops, "phase 2 (Ray up)")
    finally:
        ray.shutdown()
    load = f"load average {load_before[0]:.1f} before the first loop, {os.getloadavg()[0]:.1f} after the last"

    base = results["bare Meta-World loop (1 process)"][2]
    vec = results["LeRobot-style AsyncVectorEnv, 2 workers"][2]
    inline = results["Assay inline"][2]
    local2 = results["Assay local, 2 workers"][2]
    local2_ray, ray2 = results[LOCAL_BESIDE_RAY][2], results[RAY][2]
    fast_bare, fast_vec = results[FAST_BARE][2], results[FAST_VEC][2]
    command = f"python benchmarks/eval_throughput.py --episodes {args.episodes} --task {args.task} --repeat {args.repeat}"
    lines = [
        HEADING, "",
        f"`{command}` — {args.episodes} expert episodes of `{args.task}` per loop (end at first success or "
        f"{HORIZON} steps), {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        "2 CPU cores (best of the rounds); set-up (spawn, `gym.make`, actors) inside the "
        f"timing, Ray start-up outside; {load}; {_when()}.",
        "", "| loop | steps | seconds | steps/s | × bare |", "|---|---:|---:|---:|---:|",
    ]
    for name, (steps, seconds, rate) in results.items():
        lines.append(f"| {name} | {steps} | {seconds:.2f} | {rate:.0f} | {rate / base:.2f} |")
    lines += ["", f"Against the loops as users write them (stock Meta-World): inline / bare = **{inline / base:.2f}** "
              f"(target ≥ 0.95); local 2 workers / AsyncVectorEnv = **{local2 / vec:.2f}** (target ≥ 1.5); "
              f"Ray 2 actors / local 2 workers (both with Ray up) = **{ray2 / local2_ray:.2f}** (issue 17's target ≥ 0.85, "
              f"issue 57's ≥ 1.0; {_ray_best_note(rates, idle_workers)}). Like for like (Assay's "
              f"exact array `touching_object` and one-call hand reset in the hand-written loops): inline / bare = **{inline / fast_bare:.2f}**, "
              f"local 2 workers / AsyncVectorEnv = **{local2 / fast_vec:.2f}**.", "",
              "Round by round (each round's own loops, every other round in reverse order; these pairs run back to "
              f"back): {_by_round(rates, 'Assay inline', FAST_BARE, 'inline / bare like for like')}; "
              f"{_by_round(rates, 'Assay local, 2 workers', FAST_VEC, 'local 2 / AsyncVectorEnv like for like')}; "
              f"{_by_round(rates, RAY, LOCAL_BESIDE_RAY, 'Ray / local')}, with "
              f"{', '.join(_count(n) for n in idle_workers)} of Ray's idle worker processes up "
              "before each Ray loop. Phase 1 runs with no Ray cluster up; phase 2 starts Ray, waits for its idle "
              "workers, and runs local 2 workers and Ray 2 actors in turn, so both sides of Ray / local run beside "
              f"Ray's daemons (Ray {ray.__version__}). An actor takes over an idle worker process, which exits with "
              "the actor; a Ray loop that finds none waits for its actors' processes to start.", ""]
    section = "\n".join(lines)
    print("\n" + section)
    if not args.no_write:
        _write_section(section)


def _when() -> str:
    """When and on what source this ran: the UTC time and the commit (``+`` when the tree has changes)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "benchmarks"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown commit", ""
    return f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `{commit}`{'+' if dirty else ''}"


def _write_section(section: str) -> None:
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    text = DOCS.read_text() if DOCS.exists() else "# Performance\n\nFigures with the command that produced them.\n"
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    DOCS.write_text(text)
    print(f"wrote {DOCS}", file=sys.stderr)


if __name__ == "__main__":
    main()
