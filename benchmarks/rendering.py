"""Rendering cost per frame at 64/128/224 px (RGB, RGB-D) and the overhead of recording one camera.

    .venv/bin/python benchmarks/rendering.py [--frames 60] [--episodes 4]

Part 1 renders the `front` view of a Meta-World scene repeatedly (OSMesa on CPU, shadows and
reflections off) and reports ms/frame and frames/s per resolution. Part 2 runs the same episodes
(expert on push, fixed seeds) inline through Assay with no camera and with one 128 px camera
(rendered every step, recorded to MP4), in interleaved rounds, and reports the steps/s ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.sim import default_registry, make_env
from assay.sim.render import VIEWS, CameraRenderer
from assay.spec import campaign_from_data
from assay.store import Store


def per_frame(frames: int) -> None:
    env = make_env(default_registry().get("metaworld/push@1"))
    env.reset(0)
    renderer = CameraRenderer(env.simulator.model)
    print("resolution  RGB ms/frame  RGB frames/s  RGB-D ms/frame")
    for size in (64, 128, 224):
        for depth in (False, True):
            renderer.render(env.simulator.data, VIEWS["front"], size, size, depth)  # warm-up (GL context)
        timings = {}
        for depth in (False, True):
            start = time.perf_counter()
            for _ in range(frames):
                renderer.render(env.simulator.data, VIEWS["front"], size, size, depth)
            timings[depth] = (time.perf_counter() - start) / frames * 1000
        print(f"{size:>4} px     {timings[False]:10.2f}  {1000 / timings[False]:12.1f}  {timings[True]:14.2f}")
    renderer.close()
    env.close()


def recording_overhead(episodes: int, rounds: int) -> None:
    base = {"seed": 0, "episodes": episodes, "envs_per_worker": 1, "tasks": ["metaworld/push@1"], "policies": ["expert"]}
    variants = {
        "no camera": campaign_from_data({**base, "name": "plain"}),
        "one 128 px camera": campaign_from_data({**base, "name": "camera",
                                                 "cameras": [{"name": "front", "width": 128, "height": 128}]}),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, spec in variants.items():
            planned = prepare_campaign(spec)
            with tempfile.TemporaryDirectory() as root, Store(root) as store:
                start = time.perf_counter()
                run_campaign(planned, store, InlineExecutor(Path(root)))
                steps = sum(r.steps for r in store.catalog.episodes(campaign=spec.name))
                samples[name].append(steps / (time.perf_counter() - start))
    rates = {name: float(np.median(values)) for name, values in samples.items()}
    for name, rate in rates.items():
        print(f"{name:<20} {rate:8.0f} steps/s (median of {', '.join(f'{v:.0f}' for v in samples[name])})")
    print(f"camera / no camera   {rates['one 128 px camera'] / rates['no camera']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    per_frame(args.frames)
    recording_overhead(args.episodes, args.rounds)


if __name__ == "__main__":
    main()
