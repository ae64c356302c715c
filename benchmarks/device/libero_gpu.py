"""LIBERO on a GPU host: EGL vs OSMesa frames/s, then episodes/hour for 1, 4, 8 and 16 workers (the curve).

    python3 benchmarks/device/libero_gpu.py [--workers 1,4,8,16] [--episodes-per-worker 3] [--horizon 280]

Prepared for a 16-core host with one NVIDIA GPU (the device machine: ``benchmarks/device/libero_gpu.sh``
unpacks what ``stage.py`` packed, then runs this); it takes about 3-5 minutes there (under 8 by design).
It also runs on a CPU machine (``--dry-run``: Mesa's EGL, one worker, short episodes), which is how it
was checked before any GPU was lent.

1. The GL backend Assay chose by itself (``MUJOCO_GL`` unset: EGL where an NVIDIA EGL device exists) and
   the renderer strings of its first context.
2. Frames/s of LIBERO-Object task 0's two cameras at 224 px, drawn as robosuite draws them (shadows and
   reflections), under ``MUJOCO_GL=egl`` and ``MUJOCO_GL=osmesa`` (one llvmpipe thread, and all of them),
   each in a fresh process; OSMesa is reported missing where its library is not there.
3. For each worker count: ``assay run``'s campaign path (``prepare_campaign``, ``run_campaign``,
   ``LocalExecutor``) on LIBERO-Object task 0, full episodes (280 policy steps + 10 settle), both cameras
   at 224 px, the default 4 frames/s video, replans every 5 steps, against the fake openpi LIBERO server
   (``tests/openpi_libero_server.py``: chunks of 10 at once; the websocket round trips are real), each worker
   running ``--episodes-per-worker`` episodes. Printed: wall seconds from the campaign's start (worker
   start-up and scene builds included) and episodes/hour over that, and the steady rate once every worker
   has finished its first episode ((N - n) episodes over the time from the n-th to the last).

The last line compares the 16-worker steady rate with the target, 7,000 LIBERO episodes/hour on one host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"
TARGET = 7000


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(changes)
    return env


def child_frames(frames: int) -> None:
    """In a fresh process: the backend MUJOCO_GL names, both cameras' ms/frame; one JSON line."""
    from assay.sim import default_registry, make_env, renderer_info

    task = default_registry().get(SOUP)
    env = make_env(task.model_copy(update={"cameras": ()}))
    try:
        env.reset(0)
        scene = env._scene  # the renderers and MuJoCo data of the nominal scene
        data, renderer = scene.inner.sim.data._data, scene.renderers[False]  # robosuite's drawing
        out: dict[str, object] = {}
        for name, camera in (("agentview", "agentview"), ("wrist", "robot0_eye_in_hand")):
            renderer.render_camera(data, camera, 224, 224)  # warm-up (and the context)
            start = time.perf_counter()
            for _ in range(frames):
                renderer.render_camera(data, camera, 224, 224)
            out[name] = (time.perf_counter() - start) / frames * 1000
        info = renderer_info()
        out["renderer"] = info.to_dict() if info else None
    finally:
        env.close()
    print(json.dumps(out))


def frames_per_second(frames: int, osmesa_frames: int) -> None:
    """Part 2: each backend in its own process."""
    print("\nframes of LIBERO-Object task 0 at 224 px, robosuite's drawing (shadows, reflections): ms/frame, frames/s")
    print(f"{'backend':<28} {'agentview':>16} {'wrist':>16}  renderer")
    for label, changes, count in (("egl", {"MUJOCO_GL": "egl"}, frames),
                                  ("osmesa, 1 llvmpipe thread", {"MUJOCO_GL": "osmesa", "LP_NUM_THREADS": "1"},
                                   osmesa_frames),
                                  ("osmesa, all llvmpipe threads", {"MUJOCO_GL": "osmesa"}, osmesa_frames)):
        done = subprocess.run([sys.executable, __file__, "--child-frames", str(count)], env=_env(**changes),
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{label:<28} not available here: {last[:150]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        info = row["renderer"] or {}
        print(f"{label:<28} {row['agentview']:7.1f} ({1000 / row['agentview']:6.0f}/s) "
              f"{row['wrist']:7.1f} ({1000 / row['wrist']:6.0f}/s)  {info.get('vendor')}: {info.get('renderer')}",
              flush=True)


def campaign_rate(workers: int, episodes: int, horizon: int, url: str, store: Path) -> dict[str, float]:
    """Part 3 for one worker count: wall and steady episodes/hour of a campaign run by ``workers`` workers."""
    from assay.run import LocalExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    spec = campaign_from_data({"name": f"w{workers}", "episodes": episodes, "horizon": horizon, "replan_every": 5,
                               "tasks": [SOUP], "envs_per_worker": 1,
                               "policies": [{"name": "fake-pi0", "remote": url, "version": "fake-pi0-libero-1"}]})
    arrivals: list[float] = []
    start = time.perf_counter()
    with Store(store) as opened:
        run_campaign(prepare_campaign(spec), opened, LocalExecutor(store, workers=workers),
                     on_record=lambda record: arrivals.append(time.perf_counter() - start))
        records = opened.catalog.episodes(campaign=spec.name)
    wall = time.perf_counter() - start
    arrivals.sort()
    steady = (len(arrivals) - workers) / (arrivals[-1] - arrivals[workers - 1]) * 3600 \
        if len(arrivals) > workers and arrivals[-1] > arrivals[workers - 1] else float("nan")
    errors = sum(r.outcome.value == "error" for r in records)
    renderers = sorted({(r.provenance.get("renderer") or {}).get("renderer", "none") for r in records})
    return {"episodes": len(records), "errors": errors, "wall_s": wall, "per_hour": len(records) / wall * 3600,
            "steady_per_hour": steady, "renderers": renderers}


def curve(counts: list[int], per_worker: int, horizon: int) -> float:
    """Part 3: the fake server once, then each worker count; returns the steady rate at the largest count."""
    sys.path.insert(0, str(ROOT))
    from tests.chaos_support import free_port, kill_group

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.openpi_libero_server", "--port", str(port)], cwd=ROOT,
                              env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"\nLIBERO-Object task 0, {horizon} policy steps + 10 settle, both cameras at 224 px, 4 frames/s video, "
          f"replans every 5 steps, fake openpi server; {per_worker} episodes per worker")
    print(f"{'workers':>7} {'episodes':>8} {'wall s':>7} {'episodes/h (all)':>17} {'episodes/h (steady)':>20} "
          f"{'per worker':>10}  renderer")
    last = float("nan")
    try:
        time.sleep(3)
        for workers in counts:
            with tempfile.TemporaryDirectory() as tmp:
                row = campaign_rate(workers, workers * per_worker, horizon, f"ws://127.0.0.1:{port}", Path(tmp) / "s")
            last = row["steady_per_hour"]
            print(f"{workers:7d} {row['episodes']:8.0f} {row['wall_s']:7.1f} {row['per_hour']:17.0f} "
                  f"{last:20.0f} {last / workers:10.0f}  {', '.join(row['renderers'])}"
                  + (f"  ({row['errors']:.0f} errors)" if row["errors"] else ""), flush=True)
    finally:
        server.terminate()
        server.wait()
        kill_group(server)
    return last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,4,8,16")
    parser.add_argument("--episodes-per-worker", type=int, default=3)
    parser.add_argument("--horizon", type=int, default=280)
    parser.add_argument("--frames", type=int, default=200, help="EGL frames per camera")
    parser.add_argument("--osmesa-frames", type=int, default=10)
    parser.add_argument("--dry-run", action="store_true", help="a CPU check: 1 worker, 20-step episodes, few frames")
    parser.add_argument("--child-frames", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_frames is not None:
        child_frames(args.child_frames)
        return
    if args.dry_run:
        args.workers, args.episodes_per_worker, args.horizon, args.frames, args.osmesa_frames = "1", 2, 20, 5, 3
    started = time.perf_counter()
    chosen = subprocess.run([sys.executable, "-c", "import os, assay.sim; print(os.environ['MUJOCO_GL'])"],
                            env=_env(), capture_output=True, text=True, check=True).stdout.strip()
    print(f"MUJOCO_GL chosen by Assay on this host (unset before): {chosen}; CPUs: {os.cpu_count()}")
    frames_per_second(args.frames, args.osmesa_frames)
    counts = [int(n) for n in args.workers.split(",")]
    steady = curve(counts, args.episodes_per_worker, args.horizon)
    verdict = "met" if steady >= TARGET else "not met"
    print(f"\n{counts[-1]} workers: {steady:.0f} LIBERO episodes/hour steady (target >= {TARGET:,}: {verdict}); "
          f"this script ran {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
