"""Where Ray's difference from the local executor goes: the same campaign on 2 local workers and on 2 Ray actors,
in turn, each taken apart into start-up, steady stepping and the time its episodes' own steps took.

    python benchmarks/ray_gap.py [--episodes 160] [--rounds 4] [--task pick-place@1]

Ray is started first, and its idle workers waited for (a cluster is up before a campaign); it stays up for every
run, so both executors run beside its daemons. Each run prints:

- ``idle``: Ray's idle worker processes (``ray::IDLE``) before the run; an actor takes over one without a process
  start, and that process exits with the actor (Ray 2.60 here started no idle worker again after a campaign);
- ``ready``: seconds from the start of the campaign to the first worker's READY (started, imported, data root checked);
- ``first`` / ``end``: to the first episode's record, and to the last;
- ``steady``: steps per second between the records of the 10th and 90th percentile (start-up and the tail left out);
- ``sim``, ``policy``, ``reset``: the episodes' own recorded wall-clock time per step (``EpisodeRecord.timings``,
  which includes time the process waited for a core), which shows whether an actor's stepping is slower than a
  worker process's.

The per-round Ray / local ratio is of steps per second up to the last record (pool shutdown and the store's close
left out, which ``eval_throughput.py`` times).

Only the order within a round alternates; every figure is wall-clock on a shared machine, so compare runs of one
invocation only.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from eval_throughput import _count, _idle_ray_workers, _settle_ray


def run(executor_name: str, task: str, episodes: int) -> dict[str, Any]:
    from assay.run import make_executor, prepare_campaign, run_campaign
    from assay.run.driver import Happened
    from assay.run.executors import _ProcessPool
    from assay.run.ray_executor import _ActorPool
    from assay.spec import campaign_from_data
    from assay.store import Store

    spec = campaign_from_data({"name": "bench", "seed": 0, "episodes": episodes, "envs_per_worker": 2,
                               "tasks": [task], "policies": ["expert"]})
    ready: list[float] = []
    records: list[tuple[float, Any]] = []
    idle = _idle_ray_workers()
    started = time.perf_counter()
    pools = (_ActorPool, _ProcessPool)
    waits = [pool.wait for pool in pools]

    def timed_wait(original: Any) -> Any:
        def wait(self: Any, busy: Any, timeout: Any) -> Any:
            events = original(self, busy, timeout)
            ready.extend(time.perf_counter() - started for event in events if event.what is Happened.READY)
            return events
        return wait

    for pool, original in zip(pools, waits, strict=True):
        setattr(pool, "wait", timed_wait(original))  # noqa: B010 - patched for this run only, put back below
    try:
        with tempfile.TemporaryDirectory(prefix="assay-ray-gap-") as root, Store(root) as store:
            run_campaign(prepare_campaign(spec), store, make_executor(executor_name, root, 2),
                         on_record=lambda record: records.append((time.perf_counter() - started, record)))
    finally:
        for pool, original in zip(pools, waits, strict=True):
            setattr(pool, "wait", original)  # noqa: B010
    end = records[-1][0]
    steps = sum(record.steps for _, record in records)
    low, high = len(records) // 10, 9 * len(records) // 10
    middle = sum(record.steps for _, record in records[low + 1: high + 1])
    per_step = {part: 1e6 * sum(record.timings.get(f"{part}_s", 0.0) for _, record in records) / steps
                for part in ("sim", "policy", "reset")}
    return {"idle": idle, "ready": min(ready), "first": records[0][0], "end": end,
            "steady": middle / (records[high][0] - records[low][0]), "rate": steps / end, **per_step}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--task", default="pick-place@1", help="a Meta-World task of Assay's registry")
    args = parser.parse_args()
    if args.episodes < 20:
        parser.error(f"--episodes must be at least 20 (the steady rate spans the 10th to the 90th percentile record), "
                     f"got {args.episodes}")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    _settle_ray(2)
    rows: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
    try:
        for round_ in range(args.rounds):
            for name in ("local", "ray") if round_ % 2 == 0 else ("ray", "local"):
                row = run(name, "metaworld/" + args.task, args.episodes)
                rows[name].append(row)
                print(f"round {round_ + 1} {name:5s} idle {_count(row['idle'])} ready {row['ready']:.2f} s first "
                      f"{row['first']:.2f} s end {row['end']:.2f} s steady {row['steady']:.0f} steps/s; per step "
                      f"sim {row['sim']:.0f} us, policy {row['policy']:.0f} us, reset {row['reset']:.0f} us",
                      flush=True)
    finally:
        ray.shutdown()
    print("\nmedians (Ray / local):")
    for field in ("ready", "first", "end", "steady", "sim", "policy", "reset"):
        local, remote = (statistics.median(r[field] for r in rows[name]) for name in ("local", "ray"))
        print(f"  {field:7s} local {local:8.2f}  Ray {remote:8.2f}  ratio {remote / local:.3f}")
    ratios = [remote["rate"] / local["rate"] for local, remote in zip(rows["local"], rows["ray"], strict=True)]
    print(f"  Ray / local steps per second, per round: {', '.join(f'{x:.2f}' for x in ratios)} "
          f"(median {statistics.median(ratios):.2f})")


if __name__ == "__main__":
    main()
