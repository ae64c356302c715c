"""Where a LIBERO worker's memory goes, and what one worker holds over a campaign on one suite.

    PYTHONPATH=src .venv/bin/python benchmarks/libero_memory.py [--tasks 10] [--suite object] [--horizon 20]

Part 1 (``--breakdown``) builds one LIBERO-Object environment step by step in a fresh process and
prints the resident set (VmRSS) after each: the imports, robosuite's environment (its MuJoCo model;
MuJoCo's compiler's copy of the scene is freed once built and its asset cache is off, as in a LIBERO
worker), the first 224 px frame (a GL context holding every mesh and texture).

Part 2 runs, in a fresh process, one ``assay.run.Worker`` over the first ``--tasks`` tasks of a
suite, one episode each (both cameras at 224 px, the default 4 frames/s video, an instantly answering
chunked policy that reads both cameras, replans every 5 steps), as a campaign's worker runs them one
task after another, and prints VmRSS after each task and the peak (VmHWM) at the end.
Run it against another source tree with ``--src DIR`` (e.g. the previous commit's ``src``) to compare.

``--pro`` (instead of part 2): one worker over a LIBERO-PRO campaign on LIBERO-Object task 0, the nominal
scene then ``--pro-factors`` (each a scene of its own: swap, object, task by default), one episode each
(``--horizon`` steps, both cameras at 224 px), printing VmRSS after each variant and the peak; with
``--scenes-kept N`` (``sim.libero_env.SCENES_KEPT``; 99: every scene kept, as before the bound).
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

ROOT = Path(__file__).resolve().parents[1]


def _status(field: str) -> float:
    """A /proc/self/status field in MB (VmRSS: resident now, VmHWM: the peak)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def breakdown() -> None:
    """Part 1, in this (fresh) process."""
    rows = [("python + numpy", _status("VmRSS"))]
    from assay.sim import default_registry, make_env
    from assay.sim.libero_env import _quiet
    from assay.sim.mujoco_memory import disable_asset_cache
    from assay.spec import CameraSpec

    disable_asset_cache()  # as a LIBERO worker has it (imported first below, robosuite would import MuJoCo)
    with _quiet():
        from libero.libero.envs.env_wrapper import ControlEnv  # robosuite, LIBERO and their imports
    assert ControlEnv is not None
    rows.append(("imports (assay.sim, libero, robosuite, mujoco)", _status("VmRSS")))
    task = default_registry().get("libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket")
    env = make_env(task.model_copy(update={"cameras": (CameraSpec(name="agentview", width=224, height=224),)}))
    scene = env._scene  # the benchmark looks inside
    model = scene.inner.sim.model._model
    rows.append((f"environment built ({model.nbuffer / 2**20:.0f} MB model: {model.nmeshvert:,} mesh vertices, "
                 f"{model.ntexdata / 2**20:.0f} MB of textures)", _status("VmRSS")))
    env.reset(0)
    rows.append(("after the first 224 px frame (one GL context)", _status("VmRSS")))
    env.close()
    previous = 0.0
    for label, mb in rows:
        print(f"{label:<96} {mb:7.0f} MB  (+{mb - previous:.0f})")
        previous = mb
    print(f"peak (VmHWM) {_status('VmHWM'):.0f} MB")


def worker_run(suite: str, tasks: int, horizon: int) -> None:
    """Part 2, in this (fresh) process: print one JSON line per task, then the peak."""
    sys.path.insert(0, str(ROOT))
    from assay.run import Worker, prepare_campaign
    from assay.sim import default_registry
    from assay.spec import campaign_from_data
    from benchmarks.libero_throughput import InstantChunkPolicy

    names = sorted(t.id for t in default_registry().list(backend="libero") if t.name.startswith(f"libero/{suite}/"))
    spec = campaign_from_data({"name": "mem", "episodes": 1, "horizon": horizon, "replan_every": 5,
                               "tasks": names[:tasks], "envs_per_worker": 1,
                               "policies": [{"name": "instant", "entrypoint": "assay.testing.fakes:ImageChunkPolicy"}]})
    plan = prepare_campaign(spec)
    print(json.dumps({"start_mb": _status("VmRSS")}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        worker = Worker(tmp, policy_factory=lambda spec: InstantChunkPolicy())
        for job in plan.jobs:
            t0 = time.perf_counter()
            (record,) = worker.run_batch([job])
            print(json.dumps({"task": job.task.name.rsplit("/", 1)[-1], "steps": record.steps,
                              "seconds": round(time.perf_counter() - t0, 1), "rss_mb": round(_status("VmRSS")),
                              "built": len(worker._envs)}), flush=True)
        worker.close()
    print(json.dumps({"peak_mb": round(_status("VmHWM"))}), flush=True)


def pro_run(factors: list[str], horizon: int, scenes_kept: int | None) -> None:
    """``--pro``, in this (fresh) process: print one JSON line per variant, then the peak."""
    sys.path.insert(0, str(ROOT))
    import assay.sim.libero_env as libero_env
    from assay.run import Worker, prepare_campaign
    from assay.spec import campaign_from_data
    from benchmarks.libero_throughput import InstantChunkPolicy

    if scenes_kept is not None:
        libero_env.SCENES_KEPT = scenes_kept
    soup = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    spec = campaign_from_data({"name": "mem-pro", "episodes": 1, "horizon": horizon, "replan_every": 5,
                               "tasks": [soup], "envs_per_worker": 1,
                               "variants": ["nominal", {"sweep": {f"libero.{f}": ["pro"] for f in factors}}],
                               "policies": [{"name": "instant", "entrypoint": "assay.testing.fakes:ImageChunkPolicy"}]})
    plan = prepare_campaign(spec)
    print(json.dumps({"scenes_kept": libero_env.SCENES_KEPT, "start_mb": _status("VmRSS")}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        worker = Worker(tmp, policy_factory=lambda spec: InstantChunkPolicy())
        for job in plan.jobs:
            t0 = time.perf_counter()
            (record,) = worker.run_batch([job])
            (env,) = next(iter(worker._envs.values()))
            while not hasattr(env, "_scenes") and hasattr(env, "env"):  # a wrapper's inner environment
                env = env.env
            print(json.dumps({"variant": job.variant.name, "outcome": record.outcome.value, "steps": record.steps,
                              "seconds": round(time.perf_counter() - t0, 1), "rss_mb": round(_status("VmRSS")),
                              "scenes_kept": len(getattr(env, "_scenes", ()))}),
                  flush=True)
        worker.close()
    print(json.dumps({"peak_mb": round(_status("VmHWM"))}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="object")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--horizon", type=int, default=20)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the Assay source tree to measure")
    parser.add_argument("--breakdown", action="store_true", help="part 1 only")
    parser.add_argument("--pro", action="store_true", help="a LIBERO-PRO campaign on one task instead of part 2")
    parser.add_argument("--pro-factors", default="swap,object,task", help="LIBERO-PRO factors, one variant each")
    parser.add_argument("--scenes-kept", type=int, help="override sim.libero_env.SCENES_KEPT (99: keep every scene)")
    parser.add_argument("--child", choices=("breakdown", "worker", "pro"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "pro":
        pro_run(args.pro_factors.split(","), args.horizon, args.scenes_kept)
        return
    if args.child == "breakdown":
        breakdown()
        return
    if args.child == "worker":
        worker_run(args.suite, args.tasks, args.horizon)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.src, str(ROOT)])}
    base = [sys.executable, __file__, "--suite", args.suite, "--tasks", str(args.tasks), "--horizon", str(args.horizon)]
    print(f"source: {args.src}")
    if args.pro:
        kept = [] if args.scenes_kept is None else ["--scenes-kept", str(args.scenes_kept)]
        print(f"one worker over a LIBERO-PRO campaign on LIBERO-Object task 0: nominal, then {args.pro_factors} "
              f"(one episode each, {args.horizon} steps + 10 settle, both cameras at 224 px):")
        subprocess.run([*base, "--pro-factors", args.pro_factors, *kept, "--child", "pro"], env=env, check=True)
        return
    subprocess.run([*base, "--child", "breakdown"], env=env, check=True)
    if args.breakdown:
        return
    print(f"\none worker over the first {args.tasks} tasks of LIBERO-{args.suite}, one episode each "
          f"({args.horizon} steps + 10 settle, both cameras at 224 px, replans every 5 steps):")
    subprocess.run([*base, "--child", "worker"], env=env, check=True)


if __name__ == "__main__":
    main()
