"""``--workers auto`` against a sweep of manual settings: the wall time of one whole campaign, one run.

    MUJOCO_GL=osmesa python benchmarks/autosize_sweep.py --suite metaworld [--episodes 40] [--workers 1,2,3]
        [--envs 1,2,4,8] [--rounds 1]
    MUJOCO_GL=osmesa python benchmarks/autosize_sweep.py --suite libero --episodes 6 --workers 1,2 --envs 1,2,4

The same campaign (``metaworld``: the scripted expert on pick-place and reach, ``--episodes`` per task, horizon
300; ``libero``: the scripted expert on two LIBERO-Object tasks with ``cameras: []``, the state-only case) runs
into a fresh store under every manual (workers, envs_per_worker) of the sweep through the local executor, and
once with ``--workers auto`` and ``envs_per_worker: auto`` (probe included), each timed as a user waits for it:
wall seconds from ``run_campaign`` to its return, process starts and environment builds included. Settings run
round-robin ``--rounds`` times; each keeps its best round. Prints the table, the load average at the start and
the end, and ``auto / best manual`` as a ratio of episodes per second (issue 57's target: ≥ 0.90). Every run
records the same episodes (the script checks the trajectory hashes agree across settings).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

METAWORLD = ["metaworld/pick-place@1", "metaworld/reach@1"]
LIBERO = ["libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2",
          "libero/object/pick_up_the_cream_cheese_and_place_it_in_the_basket@2"]


def _spec(suite: str, episodes: int, envs: int | str) -> Any:
    from assay.spec import campaign_from_data

    data: dict[str, Any] = {"name": "sweep", "seed": 0, "episodes": episodes, "envs_per_worker": envs,
                            "policies": ["expert"]}
    if suite == "metaworld":
        data |= {"tasks": METAWORLD, "horizon": 300}
    else:
        data |= {"tasks": LIBERO, "cameras": []}
    return campaign_from_data(data)


def run_once(suite: str, episodes: int, workers: int | None, envs: int | str) -> tuple[float, dict[str, str], Any]:
    """(wall seconds, key -> trajectory hash, the sizing or None) of one campaign into a fresh store."""
    from assay.run import LocalExecutor, prepare_campaign, run_campaign
    from assay.store import Store

    with tempfile.TemporaryDirectory(prefix="assay-sweep-") as root, Store(root) as store:
        started = time.perf_counter()
        plan = prepare_campaign(_spec(suite, episodes, envs))
        summary = run_campaign(plan, store, LocalExecutor(root, workers or 1), auto_workers=workers is None)
        elapsed = time.perf_counter() - started
        hashes = {r.key: r.trajectory_hash for r in store.catalog.episodes(campaign="sweep")}
    return elapsed, hashes, summary.sizing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("metaworld", "libero"), default="metaworld")
    parser.add_argument("--episodes", type=int, default=40, help="per task")
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument("--envs", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    settings: list[tuple[int | None, int | str]] = [
        (w, e) for w in map(int, args.workers.split(",")) for e in map(int, args.envs.split(","))]
    settings.append((None, "auto"))
    print(f"load at start {os.getloadavg()}, {os.cpu_count()} cpus", flush=True)
    best: dict[tuple[int | None, int | str], float] = {}
    reference: dict[str, str] | None = None
    sizing = None
    for _ in range(args.rounds):
        for workers, envs in settings:
            seconds, hashes, sized = run_once(args.suite, args.episodes, workers, envs)
            reference = reference or hashes
            if hashes != reference:
                raise SystemExit(f"workers={workers} envs={envs} recorded other episodes than the first setting")
            best[workers, envs] = min(best.get((workers, envs), float("inf")), seconds)
            sizing = sized if workers is None else sizing
            print(f"workers={workers or 'auto'} envs={envs}: {seconds:.1f} s", flush=True)
    episodes = len(reference or {})
    manual = {k: v for k, v in best.items() if k[0] is not None}
    top = min(manual, key=lambda k: manual[k])
    print(f"\n{episodes} episodes ({args.suite}), best of {args.rounds} round(s); load at end {os.getloadavg()}\n")
    print("| workers | envs_per_worker | wall s | episodes/s |\n|---:|---:|---:|---:|")
    for (workers, envs), seconds in best.items():
        mark = " (best manual)" if (workers, envs) == top else ""
        print(f"| {workers or 'auto'} | {envs}{mark} | {seconds:.1f} | {episodes / seconds:.2f} |")
    if sizing is not None:
        print(f"\n{sizing['line']}")
    print(f"\nauto / best manual = {manual[top] / best[None, 'auto']:.2f} (episodes per second)")


if __name__ == "__main__":
    main()
