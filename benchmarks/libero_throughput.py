"""LIBERO on CPU: frames/s at 128 and 224 px, physics steps/s, and episodes/hour of a campaign whose
remote policy answers instantly (the harness's own ceiling).

    .venv/bin/python benchmarks/libero_throughput.py [--frames 20] [--episodes 4] [--workers 2] [--horizon 280]

Part 1 renders LIBERO-Object task 0's two cameras (OSMesa) and steps its physics without cameras.
Part 2 starts the fake openpi LIBERO server (tests/openpi_libero_server.py: action chunks of 10,
no model) and runs `assay run` on it with both cameras at 224 px (280 policy steps after 10 settle
steps by default; the fake policy never succeeds), and reports steps/s and episodes/hour of wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from assay.sim import default_registry, make_env

ROOT = Path(__file__).resolve().parents[1]
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"


def per_frame(frames: int) -> None:
    task = default_registry().get(SOUP).model_copy(update={"cameras": ()})
    env = make_env(task)
    env.reset(0)
    scene = env._scene  # the renderers and MuJoCo data of the nominal scene
    print("camera               px  drawing   ms/frame  frames/s")
    for size in (128, 224):
        for camera in ("agentview", "robot0_eye_in_hand"):
            for fast, renderer in scene.renderers.items():  # robosuite's drawing, and `fast: true`
                renderer.render_camera(scene.inner.sim.data._data, camera, size, size)  # warm-up
                start = time.perf_counter()
                for _ in range(frames):
                    renderer.render_camera(scene.inner.sim.data._data, camera, size, size)
                ms = (time.perf_counter() - start) / frames * 1000
                print(f"{camera:18s} {size:4d}  {'fast' if fast else 'exact':7s} {ms:9.1f} {1000 / ms:9.1f}")
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    steps = 100
    for _ in range(steps):
        env.step(rng.uniform(-1, 1, 7))
    print(f"physics (no camera): {steps / (time.perf_counter() - start):.1f} steps/s")
    env.close()


def campaign(episodes: int, workers: int, horizon: int) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.chaos_support import _env, free_port, kill_group

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.openpi_libero_server", "--port", str(port)], cwd=ROOT,
                              env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "c.json"
            spec.write_text(json.dumps({"name": "libero-bench", "episodes": episodes, "envs_per_worker": 1,
                                        "replan_every": 5, "tasks": [SOUP], "horizon": horizon,
                                        "policies": [{"name": "fake-pi0", "remote": f"ws://127.0.0.1:{port}",
                                                      "version": "fake-pi0-libero-1"}]}))  # no server identity
            assay = str(Path(sys.executable).with_name("assay"))
            start = time.perf_counter()
            subprocess.run([assay, "run", str(spec), "--store", str(Path(tmp) / "s"), "--workers", str(workers),
                            "--json"], check=True, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - start
        steps = episodes * (horizon + 10)
        print(f"campaign: {episodes} episodes x {horizon + 10} steps (10 settle), 2 cameras at 224 px, "
              f"{workers} workers: "
              f"{wall:.0f} s wall incl. start-up and env builds, {steps / wall:.2f} env steps/s, "
              f"{episodes / wall * 3600:.0f} episodes/hour at this horizon, "
              f"{steps / wall / 290 * 3600:.0f} full LIBERO-Object episodes (290 steps)/hour at this step rate")
    finally:
        server.terminate()
        server.wait()
        kill_group(server)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=280, help="policy steps per episode (LIBERO-Object: 280)")
    parser.add_argument("--skip-frames", action="store_true")
    args = parser.parse_args()
    if not args.skip_frames:
        per_frame(args.frames)
    campaign(args.episodes, args.workers, args.horizon)
