"""What a served simulator costs per step: one campaign in process and on `assay serve-sim`, and where it goes.

    PYTHONPATH=src python benchmarks/served_cost.py [--episodes 40] [--rounds 2] [--libero-episodes 2]

Meta-World: expert episodes of pick-place (``envs_per_worker: 2``, or ``--envs-per-worker``) on 2 local worker
processes, in process and against a served simulator with 2 server processes (started here,
``python -m assay.served metaworld``).
LIBERO: expert episodes of one LIBERO-Object task with the 128 px agentview camera rendered at every step
(``video_fps: 20``), inline, in process and served. Each loop alternates in process / served for ``--rounds``
rounds and keeps each side's best round (the machine is shared; its load is printed). Where the time goes: the
recorder's own per-episode ``sim_s`` (the time in ``env.step``) per step on each side, the CPU time of every
process per step (the campaign's, and the server's processes from /proc), and the wire alone (a
request the server refuses at once, so no environment is stepped) timed from this process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBERO_TASK = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket"


def _server(backend: str, clients: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "assay.served", backend, "--port", "0", "--clients",
                                str(clients)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split(" on ", 1)[1].split(" ", 1)[0]


def _cpu_here() -> float:
    """CPU seconds of this process and its waited-for children (the campaign's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _cpu_of_children(pid: int) -> float:
    """CPU seconds the live children of ``pid`` (a server's processes) have used, from /proc."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _campaign(data: dict, executor: str, workers: int,
              server: int | None = None) -> tuple[int, float, float, float, float]:
    """Steps, seconds, the recorder's seconds inside env.step, CPU seconds (the campaign's processes and, with
    ``server`` (its pid), the server's), and of those the server's, of one run of the campaign ``data``."""
    from assay.run import make_executor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    spec = campaign_from_data(data)
    with tempfile.TemporaryDirectory(prefix="assay-served-") as root, Store(root) as store:
        cpu, served_cpu = _cpu_here(), _cpu_of_children(server) if server else 0.0
        started = time.perf_counter()
        run_campaign(prepare_campaign(spec), store, make_executor(executor, root, workers))
        elapsed = time.perf_counter() - started
        served_cpu = _cpu_of_children(server) - served_cpu if server else 0.0
        cpu = _cpu_here() - cpu + served_cpu
        rows = store.catalog.episodes(campaign=spec.name)
    return sum(r.steps for r in rows), elapsed, sum(r.timings.get("sim_s", 0.0) for r in rows), cpu, served_cpu


def _wire_us(url: str, backend: str, task_id: str, n: int = 500) -> float:
    """Microseconds of a round trip that steps nothing (a session the connection never opened: E_SESSION)."""
    from assay.errors import SimulatorRefused
    from assay.served.client import close_links, link

    served = link(url, backend)
    times = []
    for _ in range(n):
        started = time.perf_counter()
        with contextlib.suppress(SimulatorRefused):
            served.request({"op": "close", "session": -1})
        times.append(time.perf_counter() - started)
    close_links()
    return statistics.median(times) * 1e6


def tight_loop(url: str, task_id: str, steps: int = 400, rounds: int = 5) -> tuple[float, float]:
    """Median µs per ``step`` of one environment in this process and on the server (the expert's actions of one
    seeded episode, replayed; resets not timed), alternating rounds."""
    import numpy as np

    from assay.served import ServedEnv, close_links
    from assay.sim import default_registry, make_env

    task = default_registry().get(task_id)
    local, served = make_env(task), ServedEnv(task, url)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.0, 1.0, (steps, task.action.dim))
    times: dict[str, list[float]] = {"in process": [], "served": []}
    for index in range(rounds):
        for side, env in (("in process", local), ("served", served)):
            env.reset(index)
            started = time.perf_counter()
            for action in actions:
                env.step(action)
            times[side].append((time.perf_counter() - started) / steps * 1e6)
    local.close()
    served.close()
    close_links()
    return statistics.median(times["in process"]), statistics.median(times["served"])


def compare(label: str, data: dict, backend: str, executor: str, workers: int, clients: int, rounds: int) -> None:
    process, url = _server(backend, clients)
    best: dict[str, tuple[float, int, float, float, float, float]] = {}
    try:
        for _ in range(rounds):
            for side, simulators in (("in process", None), ("served", {backend: url})):
                spec = {**data, "simulators": simulators} if simulators else data
                steps, seconds, sim, cpu, served_cpu = _campaign(spec, executor, workers,
                                                                 process.pid if simulators else None)
                rate = steps / seconds
                print(f"  {label}, {side}: {steps} steps in {seconds:.1f} s ({rate:.0f} steps/s, {cpu:.1f} CPU s, "
                      f"{served_cpu:.1f} of them the server's), load {os.getloadavg()[0]:.1f}", flush=True)
                if rate > best.get(side, (0.0,))[0]:
                    best[side] = (rate, steps, seconds, sim / steps * 1e6, cpu / steps * 1e6,
                                  served_cpu / steps * 1e6)
        wire = _wire_us(url, backend, data["tasks"][0])
        alone = tight_loop(url, data["tasks"][0]) if backend == "metaworld" else None
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the server's own process group: it and its server processes
        process.wait()
    local, served = best["in process"], best["served"]
    print(f"\n{label} (best of {rounds})\n")
    print("| side | steps | seconds | steps/s | in env.step, µs/step | CPU, µs/step (every process) | of it, the "
          "campaign's | of it, the server's |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for side, (rate, steps, seconds, sim_us, cpu_us, served_us) in best.items():
        print(f"| {side} | {steps} | {seconds:.1f} | {rate:.1f} | {sim_us:.0f} | {cpu_us:.0f} | "
              f"{cpu_us - served_us:.0f} | {served_us:.0f} |")
    slower = 100 * (1 - served[0] / local[0])
    print(f"\nserved / in process: {served[0] / local[0]:.3f} (served {slower:+.1f}% slower); "
          f"time in env.step: {served[3] - local[3]:+.0f} µs/step served; the wire alone (a round trip that steps "
          f"nothing): {wire:.0f} µs", flush=True)
    if alone is not None:
        print(f"one environment stepped in a tight loop (no policy, no recorder): {alone[0]:.0f} µs/step in process, "
              f"{alone[1]:.0f} µs/step served ({alone[1] - alone[0]:+.0f} µs)", flush=True)
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--libero-episodes", type=int, default=2, help="0 leaves LIBERO out")
    parser.add_argument("--envs-per-worker", type=int, default=2, help="Meta-World's (a campaign's default is 4)")
    args = parser.parse_args()
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    metaworld = {"name": "served-cost-mw", "seed": 0, "episodes": args.episodes,
                 "envs_per_worker": args.envs_per_worker, "tasks": ["metaworld/pick-place@1"], "policies": ["expert"]}
    compare(f"Meta-World pick-place, expert, 2 local workers, {args.envs_per_worker} environments each", metaworld,
            "metaworld", "local", 2, 2, args.rounds)
    if args.libero_episodes:
        libero = {"name": "served-cost-libero", "episodes": args.libero_episodes, "envs_per_worker": 1,
                  "horizon": 60, "video_fps": 20, "tasks": [LIBERO_TASK], "policies": ["expert"],
                  "cameras": [{"name": "agentview", "width": 128, "height": 128}]}
        compare("LIBERO-Object soup, expert, 128 px agentview every step, inline", libero, "libero", "inline", 1, 1,
                args.rounds)


if __name__ == "__main__":
    main()
