"""What the per-layer trace costs an episode: traced against untraced, in one process, interleaved.

    python benchmarks/trace_overhead.py [--episodes 8] [--envs 4] [--rounds 15] [--task pick-place]
                                        [--policy expert] [--horizon N] [--camera]

The same Meta-World episodes of ``--policy`` (the expert's end at success, ~50 steps on pick-place; ``random``
runs every step of the horizon) (``--episodes`` seeds, ``--envs`` environments per batch), rolled out and
written (step files, Parquet, atomic renames: ``Worker.roll`` then ``Worker.save``, what a worker does for
each batch) by three workers whose environments are built before any timing: untraced (``tracing=False``),
traced with the default fields, and traced with every opt-in group (``physics.forces``, ``controller.effort``).
Each round runs the three in a rotating order, so drift and a neighbour's load fall on all of them; the
ratios are per round (traced / untraced, wall and CPU time of this process) and the table gives their
medians and interquartile ranges (on a shared machine a single round's ratio is noise). ``--camera`` adds a
64x64 camera recorded every step (the trace then also reads each frame's mean).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from assay.run import Worker, prepare_campaign
from assay.spec import batch_jobs, campaign_from_data

HEAVY = ("controller.effort", "physics.forces")


def _batches(args: argparse.Namespace, trace: tuple[str, ...]) -> list[tuple]:
    data = {"name": "overhead", "episodes": args.episodes, "tasks": [f"metaworld/{args.task}"],
            "policies": [args.policy], "envs_per_worker": args.envs}
    if args.horizon:
        data["horizon"] = args.horizon
    if args.camera:
        data["cameras"] = [{"name": "front", "width": 64, "height": 64}]
    jobs = [dataclasses.replace(job, trace=trace) for job in prepare_campaign(campaign_from_data(data)).jobs]
    return batch_jobs(jobs, args.envs)


def _run(worker: Worker, batches: list[tuple]) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    steps = 0
    for batch in batches:
        records = worker.save(worker.roll(batch))
        steps += sum(r.steps for r in records)
    return time.perf_counter() - wall, time.process_time() - cpu, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--task", default="pick-place")
    parser.add_argument("--policy", default="expert")
    parser.add_argument("--horizon", type=int, default=None)
    parser.add_argument("--camera", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs = {"untraced": (Worker(Path(tmp) / "a", tracing=False), _batches(args, ())),
                   "default fields": (Worker(Path(tmp) / "b"), _batches(args, ())),
                   "every opt-in group": (Worker(Path(tmp) / "c"), _batches(args, HEAVY))}
        for worker, batches in configs.values():  # build environments and policies, warm caches: untimed
            _run(worker, batches[:1])
        times: dict[str, list[tuple[float, float, int]]] = {name: [] for name in configs}
        names = list(configs)
        for round_ in range(args.rounds):
            for name in names[round_ % 3:] + names[: round_ % 3]:
                times[name].append(_run(*configs[name]))
        for worker, _ in configs.values():
            worker.close()
    steps = times["untraced"][0][2]
    print(f"{args.episodes} {args.policy} episodes of metaworld/{args.task} ({steps} steps), {args.envs} environments "
          f"per batch, {args.rounds} rounds{', a 64x64 camera every step' if args.camera else ''}")
    print(f"{'':<20} {'ms/episode':>11} {'µs/step':>8} {'ratio wall (IQR)':>24} {'ratio CPU (IQR)':>24}")
    for name in names:
        wall = statistics.median(t[0] for t in times[name])
        cells = []
        for part in (0, 1):
            ratios = [t[part] / u[part] for t, u in zip(times[name], times["untraced"], strict=True)]
            low, _, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
            cells.append(f"{statistics.median(ratios):.3f} ({low:.3f}-{high:.3f})")
        print(f"{name:<20} {wall / args.episodes * 1000:>11.1f} {wall / steps * 1e6:>8.1f} {cells[0]:>24} "
              f"{cells[1]:>24}")

if __name__ == "__main__":
    main()
