"""What `fast: true` costs in fidelity and saves in time, on one LIBERO scene per suite (CPU, OSMesa).

    .venv/bin/python benchmarks/libero_frames.py [--size 224] [--frames 10]

For each scene, after the reset and openpi's settle steps of initial state 0, both cameras are drawn
the default way (robosuite's: shadows and reflections, equal to `OffScreenRenderEnv`'s frames, see
tests/test_libero_frames.py) and the fast way (neither); it prints the share of pixels whose largest
channel differs by more than 10/255, the largest difference, and ms per frame of each (a ratio within
one run; the machine may be shared).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from assay.sim import default_registry, make_env

SCENES = (
    "libero/spatial/pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate@2",
    "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2",
    "libero/goal/put_the_bowl_on_the_plate@2",
    "libero/10/LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket@2",
    "libero/90/KITCHEN_SCENE1_put_the_black_bowl_on_the_plate@2",
)


def timed(renderer, data, camera: str, size: int, frames: int) -> tuple[np.ndarray, float]:
    """The frame, and milliseconds per frame over ``frames`` draws after a warm-up."""
    rgb, _ = renderer.render_camera(data, camera, size, size)
    start = time.perf_counter()
    for _ in range(frames):
        renderer.render_camera(data, camera, size, size)
    return rgb, (time.perf_counter() - start) / frames * 1000


def main(size: int, frames: int) -> None:
    registry = default_registry()
    print(f"scene     camera              >10/255  largest  exact ms  fast ms   ({size} px)")
    for ref in SCENES:
        env = make_env(registry.get(ref).model_copy(update={"cameras": ()}))
        try:
            env.reset(0)
            scene = env._scene
            data = scene.inner.sim.data._data
            for camera in ("agentview", "robot0_eye_in_hand"):
                exact, exact_ms = timed(scene.renderers[False], data, camera, size, frames)
                fast, fast_ms = timed(scene.renderers[True], data, camera, size, frames)
                difference = np.abs(exact.astype(np.int16) - fast.astype(np.int16)).max(axis=2)
                print(f"{ref.split('/')[1]:9s} {camera:18s} {(difference > 10).mean():8.3%} {difference.max():8d} "
                      f"{exact_ms:9.1f} {fast_ms:8.1f}")
        finally:
            env.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--frames", type=int, default=10)
    args = parser.parse_args()
    main(args.size, args.frames)
