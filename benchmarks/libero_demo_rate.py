"""Scripted-expert demonstrations per core-hour on LIBERO: with no camera, and with the 64 px agent view recorded
at every step (what pixel BC trains on), through Assay's own loop (an inline campaign in a fresh store).

    MUJOCO_GL=osmesa python benchmarks/libero_demo_rate.py --episodes 10

CPU seconds of this process (the inline executor runs every episode here), not wall time, so a loaded machine
gives the same figure; the scene build is counted once per campaign, as a campaign pays it. Prints one line
per setting and the ratio of the two in this run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from assay.learning.runs import run_grid
from assay.spec import CameraSpec, PolicySpec
from assay.store import Outcome, Store

TASK = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--task", default=TASK)
    args = parser.parse_args()
    rates = {}
    settings = {"cameras: []": ((), None),
                "agentview 64 px every step": ((CameraSpec(name="agentview", width=64, height=64),), 20.0)}
    for label, (cameras, fps) in settings.items():
        with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "store") as store:
            started, wall = time.process_time(), time.perf_counter()
            _, records = run_grid(store, "demos", [args.task], [PolicySpec(name="expert", builtin="expert")],
                                  args.episodes, 0, None, 1, cameras=cameras, video_fps=fps)
            cpu, wall = time.process_time() - started, time.perf_counter() - wall
        solved = sum(r.outcome is Outcome.SUCCESS for r in records)
        steps = sum(r.steps for r in records)
        rates[label] = 3600 * len(records) / cpu
        print(f"{label}: {len(records)} demos ({solved} succeeded, {steps} steps) in {cpu:.1f} CPU s "
              f"({wall:.1f} s wall): {rates[label]:.0f} demos per core-hour, {1000 * cpu / steps:.1f} CPU ms a step",
              flush=True)
    first, second = rates.values()
    print(f"ratio (no camera / camera every step): {first / second:.2f}")


if __name__ == "__main__":
    main()
