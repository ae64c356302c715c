"""Where Assay's inline loop loses to a bare Meta-World loop: the same episodes, part by part, in one run.

    python benchmarks/inline_gap.py [--episodes 80] [--task pick-place-v3] [--rounds 5] [--processes 1] [--side-by-side]

Every loop runs the campaign's own jobs (the same seeds, so the same episodes, steps and outcomes) on a
simulator built once before the timing, so each row is a steady per-step cost and the rows differ by one
part each:

1. bare:                Assay's Sawyer environment (``metaworld_env.sawyer_env``: the direct build, the exact
                        array grasp test and one-call hand reset) driven by hand, reset as Assay resets it,
                        with the forward pass after each reset that Assay's variant wrapper makes, the scripted
                        expert's actions as float64 (as Assay's runner passes them); nothing recorded. Its
                        episodes are Assay's, state for state (``tests/test_benchmark_inline_gap.py``)
2. rollout, bare:       Assay's runner and recorder (``Worker.roll``: batches of ``envs_per_worker`` 2 in
                        lockstep, the batched policy call, the action checks, the variant wrapper, the step
                        recorder), with no per-layer trace and the event tracker answering a constant
3. rollout, events:     2 with the per-step events
4. rollout, traced:     3 with the per-layer trace: what a campaign steps
5. campaign:            a whole inline campaign (``eval_throughput.assay``: store, plan, leases, the writer thread's
                        Parquet files, the catalog), set-up included, on a fresh store each round

Loops run round-robin (every other round in reverse) and the median round counts. The campaign also reports the
CPU its writer thread spent per episode (``Worker.save``) and its stepping thread's CPU per step.
``--side-by-side`` adds the 2-core machine's own check: the bare loop in two processes at once against one alone
(each process's CPU per step), which is what any second busy thread (the writer, Ray's daemons) costs the
stepping one here. The machine may be shared: only ratios within one run mean anything.

``--processes K`` runs the whole measurement in K fresh processes, one after another, and gives each one's table
and the median over them of each row's cost over bare, with its range. One process is one draw of the memory
layout (where the allocator and the loader put MuJoCo's arrays, Python's objects and the code), and a layout moves
a loop's per-step cost by tens of microseconds that no number of rounds within the process averages away (see
docs/PERFORMANCE.md, "Where the inline gap is, part by part").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
from eval_throughput import HORIZON, _expert, assay

JSON_MARK = "inline-gap-rows: "  # a child's result line (``--json``), told apart from anything else on its stdout


def _jobs(task: str, episodes: int) -> list:
    from assay.run import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({"name": "bench", "seed": 0, "episodes": episodes, "envs_per_worker": 2,
                               "tasks": ["metaworld/" + task.removesuffix("-v3") + "@1"], "policies": ["expert"]})
    return list(prepare_campaign(spec).jobs)


def bare_steps(env, policy, seeds: list[int]) -> int:
    """The bare loop on a built Sawyer environment, each episode reset as ``MetaWorldEnv.reset`` resets it (with
    the forward pass after the reset that sets MuJoCo's solver warm start, as Assay's nominal variant does)."""
    import mujoco

    from assay.sim.metaworld_env import seeded_reset

    steps = 0
    for seed in seeds:
        observation = seeded_reset(env, seed)
        mujoco.mj_forward(env.model, env.data)
        for _ in range(HORIZON):
            # float64, as Assay's runner hands every action on: Meta-World scales a float32 action in float32,
            # and the episodes would drift apart from Assay's within tens of steps
            action = np.asarray(policy.get_action(observation), dtype=np.float64)
            observation, _, terminated, truncated, info = env.step(action)
            steps += 1
            if info["success"] or terminated or truncated:
                break
    return steps


def _side_by_side_worker(task: str, seeds: list[int], start, queue) -> None:
    from assay.sim.metaworld_env import sawyer_env

    env, policy = sawyer_env(task), _expert(task)
    bare_steps(env, policy, seeds[:4])
    start.wait()
    cpu = time.process_time()
    steps = bare_steps(env, policy, seeds)
    queue.put((time.process_time() - cpu) / steps)


SIDE_BY_SIDE_LIMIT_S = 600.0  # a child that never reaches the barrier or never answers ends the check, not the run


def side_by_side(task: str, seeds: list[int], processes: int) -> float:
    """The median CPU seconds a step of the bare loop in each of ``processes`` processes started together (a
    process that finishes first leaves the others the tail alone, which understates the contention a little)."""
    context = multiprocessing.get_context("spawn")
    start, queue = context.Barrier(processes, timeout=SIDE_BY_SIDE_LIMIT_S), context.Queue()
    workers = [context.Process(target=_side_by_side_worker, args=(task, seeds, start, queue))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        per_step = [queue.get(timeout=SIDE_BY_SIDE_LIMIT_S) for _ in workers]
    except Exception as exc:  # queue.Empty: a child failed or hung (its traceback is on stderr)
        raise SystemExit(f"side-by-side check: a child process gave no figure within {SIDE_BY_SIDE_LIMIT_S:.0f} s "
                         f"(exit codes {[worker.exitcode for worker in workers]})") from exc
    finally:
        for worker in workers:
            worker.join(timeout=10.0)
            if worker.is_alive():
                worker.kill()
    return statistics.median(per_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=80)
    parser.add_argument("--task", default="pick-place-v3")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--side-by-side", action="store_true", help="also the bare loop in 2 processes against 1")
    parser.add_argument("--processes", type=int, default=1, help="fresh processes to run it in (layouts drawn)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # a child's rows, for the parent
    args = parser.parse_args()
    if args.processes > 1:
        over_processes(args)
    else:
        one_process(args)
    if args.side_by_side and not args.json:
        one, two = (side_by_side(args.task, [job.seed for job in _jobs(args.task, args.episodes)], n) for n in (1, 2))
        print(f"\nbare loop, CPU a step: {one * 1e6:.0f} µs alone, {two * 1e6:.0f} µs in each of two processes at "
              f"once ({two / one:.3f}×)")


def one_process(args: argparse.Namespace) -> None:
    """The loops in this process, round-robin: the table (or, for ``--json``, a child's row costs)."""
    from assay.run.worker import Worker
    from assay.sim import events
    from assay.sim.metaworld_env import sawyer_env
    from assay.spec.campaign import batch_jobs

    jobs = _jobs(args.task, args.episodes)
    batches = batch_jobs(jobs, 2)
    seeds = [job.seed for job in jobs]
    env, policy = sawyer_env(args.task), _expert(args.task)
    traced = Worker("unused-root")  # roll writes nothing: the root is never touched
    untraced = Worker("unused-root", tracing=False)
    untraced._envs, untraced._policies = traced._envs, traced._policies  # the same built environments
    tracked = events.EventTracker.step
    constant = {name: 0.0 for name in events.EVENT_NAMES}

    def roll(worker: Worker, with_events: bool) -> int:
        if not with_events:
            events.EventTracker.step = lambda self, action, state: dict(constant)  # type: ignore[method-assign]
        try:
            return sum(recorder.steps for batch in batches for recorder in worker.roll(batch))
        finally:
            events.EventTracker.step = tracked  # type: ignore[method-assign]

    saved = {"cpu": 0.0}
    campaign_cpu: list[tuple[float, float]] = []
    save = Worker.save

    def timed_save(self, recorders):  # the writer thread's CPU for each batch's files and records
        cpu = time.thread_time()
        try:
            return save(self, recorders)
        finally:
            saved["cpu"] += time.thread_time() - cpu

    def campaign() -> int:
        saved["cpu"] = 0.0
        cpu = time.thread_time()
        steps = assay(args.task, args.episodes, "inline", 1, 0)
        campaign_cpu.append(((time.thread_time() - cpu) / steps, saved["cpu"] / args.episodes))
        return steps

    loops: list[tuple[str, Callable[[], int]]] = [
        ("bare (Assay's Sawyer environment by hand)", lambda: bare_steps(env, policy, seeds)),
        ("rollout, no events, no trace", lambda: roll(untraced, False)),
        ("rollout, events", lambda: roll(untraced, True)),
        ("rollout, events and trace (a campaign's stepping)", lambda: roll(traced, True)),
        ("inline campaign (set-up, writer thread, catalog)", campaign),
    ]
    per_step: dict[str, list[float]] = {name: [] for name, _ in loops}
    counted: dict[str, int] = {}
    Worker.save = timed_save  # type: ignore[method-assign]
    try:
        for _, loop in loops:  # warm: imports, the first builds
            loop()
        campaign_cpu.clear()
        for round_ in range(args.rounds):
            for name, loop in loops if round_ % 2 == 0 else loops[::-1]:
                start = time.perf_counter()
                counted[name] = loop()
                per_step[name].append((time.perf_counter() - start) / counted[name])
    finally:
        Worker.save = save  # type: ignore[method-assign]
        traced.close()  # the environments both workers stepped (one dict, shared)
        env.close()
    base = statistics.median(per_step[loops[0][0]])
    if args.json:
        print(JSON_MARK + json.dumps({name: statistics.median(per_step[name]) for name, _ in loops}))
        return
    print(f"{args.episodes} episodes of {args.task}, median of {args.rounds} rounds\n")
    print("| loop | steps | µs a step | × bare (steps/s) | µs a step over bare |\n|---|---:|---:|---:|---:|")
    for name, _ in loops:
        median = statistics.median(per_step[name])
        print(f"| {name} | {counted[name]} | {median * 1e6:.0f} | {base / median:.3f} | {(median - base) * 1e6:.0f} |")
    stepping = statistics.median(cpu for cpu, _ in campaign_cpu)
    writer = statistics.median(saved_cpu for _, saved_cpu in campaign_cpu)
    print(f"\ncampaign: the stepping thread's CPU {stepping * 1e6:.0f} µs a step; the writer thread's CPU "
          f"{writer * 1e3:.2f} ms an episode (median of {len(campaign_cpu)} rounds)")


def over_processes(args: argparse.Namespace) -> None:
    """The measurement in ``args.processes`` fresh processes: each one's row costs, then each row's median over them."""
    command = [sys.executable, __file__, "--episodes", str(args.episodes), "--task", args.task, "--rounds",
               str(args.rounds), "--json"]
    runs = []
    for index in range(args.processes):
        child = subprocess.run(command, capture_output=True, text=True)
        rows = [line.removeprefix(JSON_MARK) for line in child.stdout.splitlines() if line.startswith(JSON_MARK)]
        if child.returncode != 0 or len(rows) != 1:
            sys.stderr.write(child.stderr)
            raise SystemExit(f"process {index + 1} failed (exit {child.returncode}); its stderr is above")
        runs.append(json.loads(rows[0]))
        print(f"process {index + 1}: " + ", ".join(f"{name.split(' (')[0]} {cost * 1e6:.0f}"
                                                   for name, cost in runs[-1].items()) + " µs a step", flush=True)
    names = list(runs[0])
    print(f"\n{args.episodes} episodes of {args.task}, {args.rounds} rounds in each of {args.processes} processes\n")
    print("| loop | µs a step, median over processes | µs a step over bare: median (range) | × bare (steps/s): median "
          "(range) |\n|---|---:|---:|---:|")
    for name in names:
        over = [run[name] - run[names[0]] for run in runs]
        ratio = [run[names[0]] / run[name] for run in runs]
        print(f"| {name} | {statistics.median(run[name] for run in runs) * 1e6:.0f} | "
              f"{statistics.median(over) * 1e6:.0f} ({min(over) * 1e6:.0f} to {max(over) * 1e6:.0f}) | "
              f"{statistics.median(ratio):.3f} ({min(ratio):.3f} to {max(ratio):.3f}) |")


if __name__ == "__main__":
    main()
