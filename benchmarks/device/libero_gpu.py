"""LIBERO on a GPU host: EGL's pixels against OSMesa's, EGL vs OSMesa frames/s, then episodes/hour for 1, 4, 8 and
16 workers (the curve), inside a time budget.

    python3 benchmarks/device/libero_gpu.py [--workers 1,4,8,16] [--episodes-per-worker 3] [--horizon 280]
                                            [--budget-s 450] [--json PATH] [--osmesa-only] [--dry-run]

Prepared for a 16-core host with one NVIDIA GPU (the device machine: ``benchmarks/device/libero_gpu.sh run``
unpacks what ``stage.py`` packed and runs this, in one call). It also runs on a CPU machine (``--dry-run``:
Mesa's EGL, one worker, short episodes), which is how it was checked before any GPU was lent.

1. The GL backend Assay chose by itself (``MUJOCO_GL`` unset: EGL where an NVIDIA EGL device exists).
2. Pixels: LIBERO-Object task 0's two cameras at 224 px, drawn as robosuite draws them (shadows and
   reflections) under ``MUJOCO_GL=egl`` from the state ``stage.py`` saved beside its OSMesa frames
   (``reference/pixels.npz``, drawn on the staging machine), against those frames: LIBERO's fidelity bound is
   at most 0.1% of pixels differing by more than 10/255.
3. Frames/s of the same cameras under ``MUJOCO_GL=egl`` and ``MUJOCO_GL=osmesa`` (one llvmpipe thread, and all
   of them), each in a fresh process; OSMesa is reported missing where its library is not there (the device
   image has none: ``libero_gpu.sh osmesa`` carries it in a second call, ``--osmesa-only``).
4. For each worker count: ``assay run``'s campaign path (``prepare_campaign``, ``run_campaign``,
   ``LocalExecutor``) on LIBERO-Object task 0, full episodes (280 policy steps + 10 settle), both cameras at
   224 px, the default 4 frames/s video, replans every 5 steps, against the fake openpi LIBERO server
   (``tests/openpi_libero_server.py``: chunks of 10 at once; the websocket round trips are real), each worker
   running ``--episodes-per-worker`` episodes. Printed: wall seconds from the campaign's start (worker start-up
   and scene builds included), episodes/hour over that, and the steady rate once every worker has finished
   its first episode ((N - n) episodes over the time from the n-th to the last).

Time guard: every part gets what is left of ``--budget-s`` (children are killed at it), and a worker count
whose estimated time (the last count's wall time, scaled) does not fit is skipped and said so; the results so
far are rewritten to ``--json`` after each part, so a run cut short still returns them. The last line compares
the largest count's steady rate with the target, 7,000 LIBERO episodes/hour on one host.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"
TARGET = 7000
FIDELITY = (10, 0.001)  # LIBERO's bound: at most 0.1% of pixels differ by more than 10/255
CAMERAS = (("agentview", "agentview"), ("wrist", "robot0_eye_in_hand"))
SIZE = 224
REFERENCE = ROOT / ".device" / "unpacked" / "reference" / "pixels.npz"  # where libero_gpu.sh unpacks it
FULL_RUN = {"workers": "1,4,8,16", "episodes_per_worker": 3, "horizon": 280, "frames": 200, "osmesa_frames": 10}
FIRST_COUNT_S = 30.0  # the least a first worker count is started with (scene builds and the first episodes)
DRY_RUN = {"workers": "1", "episodes_per_worker": 2, "horizon": 20, "frames": 5, "osmesa_frames": 3}


class Budget:
    """The seconds left of the run's budget."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


class Results:
    """What has been measured so far, rewritten to a JSON file after each part."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self.data: dict[str, Any] = {}

    def add(self, key: str, value: Any) -> None:
        self.data[key] = value
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=2, default=str))


def _env(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT / "src"), str(ROOT)) if p)
    env.update(changes)
    return env


def _child(args: list[str], changes: dict[str, str], budget: Budget, cap: float) -> dict[str, Any]:
    """Run this script as a child (``args``) under ``changes``; its last stdout line as JSON, or why not."""
    limit = max(1.0, min(cap, budget.left() - 5))
    try:
        done = subprocess.run([sys.executable, __file__, *args], env=_env(**changes), capture_output=True, text=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {limit:.0f} s (the time budget)"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _osmesa_from(folder: str | None) -> None:
    """In a child: load OSMesa from ``folder`` (the optional second call's unpacked Debian packages) when set. PyOpenGL
    finds OSMesa by ``ctypes.util.find_library``, which looks only where ldconfig does; the libraries OSMesa needs are
    found through LD_LIBRARY_PATH, which the parent set for this child alone."""
    if not folder:
        return
    import ctypes.util

    library = str(next(Path(folder).glob("libOSMesa.so.*")))
    look_up = ctypes.util.find_library
    ctypes.util.find_library = lambda name: library if name == "OSMesa" else look_up(name)


def _nominal_scene() -> tuple[Any, Any, Any, Any]:
    """LIBERO-Object task 0 reset to its initial state 0: (environment, its scene, MuJoCo model, MuJoCo data)."""
    from assay.sim import default_registry, make_env

    task = default_registry().get(SOUP)
    env = make_env(task.model_copy(update={"cameras": ()}))
    env.reset(0)
    scene = env._scene  # the renderers and MuJoCo data of the nominal scene
    return env, scene, scene.inner.sim.model._model, scene.inner.sim.data._data


def child_frames(frames: int) -> None:
    """In a fresh process: the backend MUJOCO_GL names, both cameras' ms/frame; one JSON line."""
    _osmesa_from(os.environ.get("ASSAY_OSMESA_LIB"))
    from assay.sim import renderer_info

    env, scene, _, data = _nominal_scene()
    try:
        renderer = scene.renderers[False]  # robosuite's drawing
        out: dict[str, object] = {}
        for name, camera in CAMERAS:
            renderer.render_camera(data, camera, SIZE, SIZE)  # warm-up (and the context)
            start = time.perf_counter()
            for _ in range(frames):
                renderer.render_camera(data, camera, SIZE, SIZE)
            out[name] = (time.perf_counter() - start) / frames * 1000
        info = renderer_info()
        out["renderer"] = info.to_dict() if info else None
        out["gl_libraries"] = _gl_libraries()
    finally:
        env.close()
    print(json.dumps(out))


def _gl_libraries() -> list[str]:
    """The GL drivers this process has mapped (which OSMesa, which vendor's EGL), from /proc/self/maps."""
    try:
        maps = Path("/proc/self/maps").read_text().split()
    except OSError:
        return []
    wanted = ("libOSMesa", "libEGL_nvidia", "libEGL_mesa", "libnvidia-eglcore", "libLLVM")
    return sorted({word for word in maps if word.startswith("/") and any(w in word for w in wanted)})


STATE_FIELDS = (("model", "body_pos"), ("model", "body_quat"), ("data", "qpos"), ("data", "mocap_pos"),
                ("data", "mocap_quat"))


def child_pixels(path: Path, write: bool) -> None:
    """In a fresh process: both cameras drawn from one saved state (after ``mj_forward``). ``write``: save the
    state and the frames to ``path`` (stage.py, under OSMesa); else draw that state and compare with them."""
    import mujoco
    import numpy as np

    from assay.sim import renderer_info

    env, scene, model, data = _nominal_scene()
    try:
        saved = None if write else np.load(path)
        for owner, field in STATE_FIELDS:
            target = getattr(model if owner == "model" else data, field)
            if saved is not None:
                target[...] = saved[field]
        mujoco.mj_forward(model, data)
        frames = {name: scene.renderers[False].render_camera(data, camera, SIZE, SIZE)[0] for name, camera in CAMERAS}
        state = {field: getattr(model if owner == "model" else data, field).copy() for owner, field in STATE_FIELDS}
        info = renderer_info()
        drawn = info.to_dict() if info else {}
    finally:
        env.close()
    if saved is None:
        np.savez_compressed(path, **state, **{f"frame.{n}": f for n, f in frames.items()},
                            renderer=np.array(json.dumps(drawn)))
        print(json.dumps({"written": str(path), "renderer": drawn}))
        return
    threshold, _ = FIDELITY
    out: dict[str, Any] = {"renderer": drawn, "reference_renderer": json.loads(str(saved["renderer"]))}
    for name, frame in frames.items():
        difference = np.abs(frame.astype(int) - saved[f"frame.{name}"].astype(int)).max(axis=-1)
        out[name] = {"share_over": float((difference > threshold).mean()), "max": int(difference.max()),
                     "std": float(frame.std())}
    print(json.dumps(out))


def pixels(budget: Budget, results: Results, reference: Path) -> None:
    """Part 2: EGL's frames against the staged OSMesa frames."""
    threshold, share = FIDELITY
    print(f"\npixels: EGL against OSMesa (LIBERO-Object task 0, state 0, both cameras at {SIZE} px; bound: at most "
          f"{share:.1%} of pixels differ by more than {threshold}/255)")
    if not reference.is_file():
        print(f"  no reference frames at {reference} (stage.py writes them)")
        results.add("pixels", {"error": "no reference"})
        return
    row = _child(["--child-pixels", str(reference)], {"MUJOCO_GL": "egl"}, budget, 180)
    results.add("pixels", row)
    if "error" in row:
        print(f"  EGL could not draw them: {row['error']}")
        return
    print(f"  EGL: {row['renderer'].get('vendor')}: {row['renderer'].get('renderer')}; reference: "
          f"{row['reference_renderer'].get('renderer')}")
    for name, _ in CAMERAS:
        cell = row[name]
        verdict = "within" if cell["share_over"] <= share and cell["std"] > 5 else "OUTSIDE"
        print(f"  {name:<10} {cell['share_over']:.4%} of pixels differ by more than {threshold}/255 (largest "
              f"difference {cell['max']}/255): {verdict} the bound", flush=True)


def frames_per_second(budget: Budget, results: Results, frames: int, osmesa_frames: int, osmesa_only: bool,
                      osmesa_lib: str | None) -> None:
    """Part 3: each backend in its own process (OSMesa from ``osmesa_lib`` where given)."""
    print(f"\nframes of LIBERO-Object task 0 at {SIZE} px, robosuite's drawing (shadows, reflections): ms/frame, "
          "frames/s")
    print(f"{'backend':<28} {'agentview':>16} {'wrist':>16}  renderer")
    osmesa = {"MUJOCO_GL": "osmesa"}
    if osmesa_lib:
        osmesa |= {"ASSAY_OSMESA_LIB": osmesa_lib,
                   "LD_LIBRARY_PATH": os.pathsep.join(p for p in (osmesa_lib, os.environ.get("LD_LIBRARY_PATH")) if p)}
    backends = [("osmesa, 1 llvmpipe thread", {**osmesa, "LP_NUM_THREADS": "1"}, osmesa_frames),
                ("osmesa, all llvmpipe threads", osmesa, osmesa_frames)]
    if not osmesa_only:
        backends.insert(0, ("egl", {"MUJOCO_GL": "egl"}, frames))
    rows = {}
    for label, changes, count in backends:
        row = rows[label] = _child(["--child-frames", str(count)], changes, budget, 240)
        results.add("frames", rows)
        if "error" in row:
            print(f"{label:<28} not available here: {row['error'][:150]}")
            continue
        info = row["renderer"] or {}
        print(f"{label:<28} {row['agentview']:7.1f} ({1000 / row['agentview']:6.0f}/s) "
              f"{row['wrist']:7.1f} ({1000 / row['wrist']:6.0f}/s)  {info.get('vendor')}: {info.get('renderer')}"
              f" [{', '.join(Path(p).name for p in row.get('gl_libraries', []))}]", flush=True)


def campaign_rate(workers: int, episodes: int, horizon: int, url: str, store: Path) -> dict[str, Any]:
    """Part 4 for one worker count: wall and steady episodes/hour of a campaign run by ``workers`` workers."""
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
    return {"workers": workers, "episodes": len(records), "errors": errors, "wall_s": wall,
            "per_hour": len(records) / wall * 3600, "steady_per_hour": steady, "renderers": renderers}


def _estimate(last: dict[str, Any] | None, workers: int) -> float:
    """Seconds a worker count is expected to take: the last count's wall time, scaled by the cores it would
    share beyond this host's, with a third more for start-up and the server (``FIRST_COUNT_S`` for the first)."""
    if last is None:
        return FIRST_COUNT_S
    cores = os.cpu_count() or 1
    crowding = max(1.0, workers / cores) / max(1.0, last["workers"] / cores)
    return last["wall_s"] * crowding * 1.35 + 10


def curve(budget: Budget, results: Results, counts: list[int], per_worker: int, horizon: int) -> float:
    """Part 4: the fake server once, then each worker count that fits the budget; the largest count's steady rate."""
    sys.path.insert(0, str(ROOT))
    from tests.chaos_support import free_port, kill_group

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.openpi_libero_server", "--port", str(port)], cwd=ROOT,
                              env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"\nLIBERO-Object task 0, {horizon} policy steps + 10 settle, both cameras at {SIZE} px, 4 frames/s video, "
          f"replans every 5 steps, fake openpi server; {per_worker} episodes per worker")
    print(f"{'workers':>7} {'episodes':>8} {'wall s':>7} {'episodes/h (all)':>17} {'episodes/h (steady)':>20} "
          f"{'per worker':>10}  renderer")
    rows: list[dict[str, Any]] = []
    last, steady = None, float("nan")
    try:
        time.sleep(3)
        for workers in counts:
            needed = _estimate(last, workers)
            if needed > budget.left():
                print(f"{workers:7d} skipped: ~{needed:.0f} s expected, {budget.left():.0f} s left of the budget")
                rows.append({"workers": workers, "skipped": f"~{needed:.0f} s expected, {budget.left():.0f} s left"})
                results.add("curve", rows)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                row = campaign_rate(workers, workers * per_worker, horizon, f"ws://127.0.0.1:{port}", Path(tmp) / "s")
            rows.append(row)
            results.add("curve", rows)
            last, steady = row, row["steady_per_hour"] if not row["errors"] else float("nan")  # errors: no rate
            print(f"{workers:7d} {row['episodes']:8.0f} {row['wall_s']:7.1f} {row['per_hour']:17.0f} "
                  f"{steady:20.0f} {steady / workers:10.0f}  {', '.join(row['renderers'])}"
                  + (f"  ({row['errors']:.0f} errors)" if row["errors"] else ""), flush=True)
    finally:
        server.terminate()
        server.wait()
        kill_group(server)
    return steady if last is not None else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", help="worker counts (default 1,4,8,16; --dry-run: 1)")
    parser.add_argument("--episodes-per-worker", type=int, help="default 3 (--dry-run: 2)")
    parser.add_argument("--horizon", type=int, help="policy steps (default 280, a full episode; --dry-run: 20)")
    parser.add_argument("--frames", type=int, help="EGL frames per camera (default 200; --dry-run: 5)")
    parser.add_argument("--osmesa-frames", type=int, help="OSMesa frames per camera (default 10; --dry-run: 3)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="seconds for everything this script does")
    parser.add_argument("--json", help="rewrite the results so far to this file after each part")
    parser.add_argument("--reference", default=str(REFERENCE), help="the staged OSMesa frames (stage.py)")
    parser.add_argument("--osmesa-only", action="store_true", help="OSMesa's frames/s only (the optional 2nd call)")
    parser.add_argument("--osmesa-lib", help="a folder holding libOSMesa.so.* and the libraries it needs")
    parser.add_argument("--dry-run", action="store_true", help="a CPU check: 1 worker, 20-step episodes, few frames")
    parser.add_argument("--child-frames", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-pixels", help=argparse.SUPPRESS)
    parser.add_argument("--write", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_frames is not None:
        child_frames(args.child_frames)
        return
    if args.child_pixels is not None:
        child_pixels(Path(args.child_pixels), args.write)
        return
    defaults = DRY_RUN if args.dry_run else FULL_RUN
    for name, value in defaults.items():  # what is not given
        if getattr(args, name) is None:
            setattr(args, name, value)
    started, budget, results = time.perf_counter(), Budget(args.budget_s), Results(args.json)
    chosen = subprocess.run([sys.executable, "-c", "import os, assay.sim; print(os.environ.get('MUJOCO_GL'))"],
                            env=_env(), capture_output=True, text=True, check=True).stdout.strip()
    print(f"MUJOCO_GL chosen by Assay on this host (unset before): {chosen}; CPUs: {os.cpu_count()}; "
          f"budget {args.budget_s:.0f} s")
    results.add("chosen_backend", chosen)
    if args.osmesa_only:
        frames_per_second(budget, results, args.frames, args.osmesa_frames, True, args.osmesa_lib)
        print(f"\nthis script ran {time.perf_counter() - started:.0f} s")
        return
    pixels(budget, results, Path(args.reference))
    frames_per_second(budget, results, args.frames, args.osmesa_frames, False, args.osmesa_lib)
    counts = [int(n) for n in args.workers.split(",")]
    steady = curve(budget, results, counts, args.episodes_per_worker, args.horizon)
    largest = max((r["workers"] for r in results.data.get("curve", []) if "wall_s" in r), default=0)
    verdict = "met" if steady >= TARGET else "not met" if steady == steady else "not measured"
    results.add("summary", {"largest_workers_run": largest, "steady_per_hour": steady, "target": TARGET,
                            "seconds": time.perf_counter() - started})
    print(f"\n{largest} workers: {steady:.0f} LIBERO episodes/hour steady (target >= {TARGET:,}: {verdict}); "
          f"this script ran {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
