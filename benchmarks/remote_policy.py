"""Remote policies: in-process vs remote, unbatched vs dynamically batched, lockstep vs decoupled, loopback RTT.

    .venv/bin/python benchmarks/remote_policy.py [--steps 50] [--envs 1,8,32] [--json out.json]

Every figure is env steps per second of real Meta-World rollouts (metaworld/reach,
horizon cut to ``--steps``) driven by the built-in ``mlp`` policy with its default
size; the servers are ``assay serve-policy`` subprocesses on 127.0.0.1. Torch uses
one thread on each side, so the simulator and the server each have a core. Every
``mlp`` here runs with ``batch_invariant: false``: its forwards are not padded to 8
rows, so the unbatched baseline (one row per forward) does no padded work
(``--padded`` measures the deterministic default instead).
Ratios are what to read: they are measured in one run, on one machine.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

import numpy as np

from assay.policies import MLPPolicy
from assay.policies.remote import RemotePolicy, packb, unpackb
from assay.run import rollout
from assay.sim import default_registry, make_env
from assay.spec import PolicySpec, ResolvedPolicy, Variant, episode_key, episode_seed
from assay.spec.campaign import EpisodeJob, Pipeline

TASK = "metaworld/reach@1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(*options: str, params: str = '{"threads": 1, "batch_invariant": false}'):
    port = free_port()
    cmd = [sys.executable, "-m", "assay.cli.app", "serve-policy", "mlp", "--port", str(port), "--task", TASK,
           "--params", params, *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit(f"server failed: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
                time.sleep(0.1)
        yield f"ws://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def jobs(task, n: int, pipeline: Pipeline) -> list[EpisodeJob]:
    policy = ResolvedPolicy(PolicySpec(name="mlp", builtin="mlp"), "1")
    out = []
    for i in range(n):
        seed = episode_seed(0, task, i)
        out.append(EpisodeJob("bench", task, Variant(), policy, i, seed, episode_key(task, Variant(), policy, seed),
                              task.instruction, pipeline=pipeline))
    return out


def steps_per_s(envs, policy, task, n: int, pipeline: Pipeline = Pipeline.LOCKSTEP) -> float:
    rollout(envs[:n], policy, jobs(task, n, pipeline)[:n])  # warm-up (connections, torch)
    t0 = time.perf_counter()
    recorders = rollout(envs[:n], policy, jobs(task, n, pipeline))
    elapsed = time.perf_counter() - t0
    errors = [r.reason for r in recorders if r.reason]
    if errors:
        raise SystemExit(f"benchmark episodes failed: {errors[0]}")
    return sum(r.steps for r in recorders) / elapsed


class DeviceTimePolicy:
    """A stand-in for a policy on an accelerator elsewhere: each batch takes ``ms`` of device time, no host CPU.

    On this 2-core machine a CPU-bound server competes with the simulator for the same cores, which hides
    what decoupling buys when the policy runs on its own hardware; this isolates it.
    """

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def reset(self, context) -> None:
        pass

    def act(self, observations):
        time.sleep(self.ms / 1000.0)
        return np.zeros((len(observations["state"]), 4), dtype=np.float32)


def serving_rows_per_s(url: str, rows: int, repeats: int = 10) -> float:
    """Policy serving alone (no simulator): ``rows`` concurrent requests per round, rows answered per second."""
    policy = RemotePolicy(url, timeout_s=120)
    obs = {"state": np.random.default_rng(0).normal(size=(rows, 39)), "instruction": ["reach"] * rows,
           "env_ids": np.arange(rows)}
    policy.act(obs)
    t0 = time.perf_counter()
    for _ in range(repeats):
        policy.act(obs)
    elapsed = time.perf_counter() - t0
    policy.close()
    return rows * repeats / elapsed


def rtt_ms(url: str, observation: dict, repeats: int = 200) -> tuple[float, float]:
    """Median round trip and median server-side infer time (ms) for one observation."""
    from websockets.sync.client import connect

    rtts, infers = [], []
    with connect(url, max_size=None, compression=None) as ws:
        ws.recv()
        frame = packb(observation)
        for i in range(repeats + 10):
            t0 = time.perf_counter()
            ws.send(frame)
            reply = unpackb(ws.recv())
            if i >= 10:
                rtts.append((time.perf_counter() - t0) * 1000)
                infers.append(reply["server_timing"]["infer_ms"])
    return statistics.median(rtts), statistics.median(infers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--envs", default="1,8,32")
    parser.add_argument("--json", default=None)
    parser.add_argument("--device-ms", type=float, default=15.0, help="device time per batch of the stand-in")
    parser.add_argument("--padded", action="store_true", help="serve the mlp padded to 8 rows (its default)")
    args = parser.parse_args()
    padding = {"batch_invariant": bool(args.padded)}
    sizes = [int(n) for n in args.envs.split(",")]
    task = default_registry().get(TASK).model_copy(update={"horizon": args.steps})
    t0 = time.perf_counter()
    envs = [make_env(task) for _ in range(max(sizes))]
    print(f"built {len(envs)} Meta-World envs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    results: dict[str, dict[int, float]] = {}
    serving: dict[str, dict[int, float]] = {}
    local = MLPPolicy(threads=1, **padding)
    results["in-process"] = {n: steps_per_s(envs, local, task, n) for n in sizes}
    params = json.dumps({"threads": 1, **padding})
    with server("--max-batch", "1", params=params) as url:
        remote = RemotePolicy(url, timeout_s=120)
        results["remote, unbatched (max-batch 1)"] = {n: steps_per_s(envs, remote, task, n) for n in sizes}
        remote.close()
        serving["unbatched (max-batch 1)"] = {n: serving_rows_per_s(url, n) for n in sizes}
    with server("--max-batch", "32", "--max-wait-ms", "2", params=params) as url:
        remote = RemotePolicy(url, timeout_s=120)
        results["remote, dynamic batching (max-batch 32)"] = {n: steps_per_s(envs, remote, task, n) for n in sizes}
        results["remote, dynamic batching + decoupled"] = {
            n: steps_per_s(envs, remote, task, n, Pipeline.DECOUPLED) for n in sizes}
        remote.close()
        serving["dynamic batching (max-batch 32)"] = {n: serving_rows_per_s(url, n) for n in sizes}
    from assay.policies.remote import PolicyServer, PolicyServerConfig, ServerThread

    device = PolicyServer(DeviceTimePolicy(args.device_ms), task,
                          PolicyServerConfig(port=0, max_batch=32, max_wait_ms=1))
    with ServerThread(device) as running:
        remote = RemotePolicy(running.url, timeout_s=120)
        offcpu = {mode: {n: steps_per_s(envs, remote, task, n, mode) for n in sizes}
                  for mode in (Pipeline.LOCKSTEP, Pipeline.DECOUPLED)}
        remote.close()
    with server("--max-batch", "1", params='{"hidden": [8], "threads": 1}') as url:
        small = {"observation/state": np.zeros(39, np.float32), "prompt": "reach"}
        image = dict(small, **{"observation/image": np.zeros((320, 320, 3), np.uint8)})  # 307,200 bytes
        rtt = {"small (39 floats)": rtt_ms(url, small), f"{len(packb(image)) // 1024} KB (320x320x3 image)":
               rtt_ms(url, image, repeats=100)}

    print(f"\nenv steps/s, Meta-World {TASK}, mlp (default, ~8.5 M parameters), {args.steps} steps/episode\n")
    print("| configuration | " + " | ".join(f"{n} env{'s' if n > 1 else ''}" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[n]:.0f}" for n in sizes) + " |")
    unb, bat = results["remote, unbatched (max-batch 1)"], results["remote, dynamic batching (max-batch 32)"]
    dec, loc = results["remote, dynamic batching + decoupled"], results["in-process"]
    print("\n| ratio | " + " | ".join(str(n) for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    print("| batched / unbatched | " + " | ".join(f"{bat[n] / unb[n]:.2f}x" for n in sizes) + " |")
    print("| decoupled / lockstep (batched) | " + " | ".join(f"{dec[n] / bat[n]:.2f}x" for n in sizes) + " |")
    print("| remote batched / in-process | " + " | ".join(f"{bat[n] / loc[n]:.2f}x" for n in sizes) + " |")
    print("\npolicy serving alone (N concurrent requests per round, no simulator), rows/s\n")
    print("| server | " + " | ".join(str(n) for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name, row in serving.items():
        print(f"| {name} | " + " | ".join(f"{row[n]:.0f}" for n in sizes) + " |")
    su, sb = serving["unbatched (max-batch 1)"], serving["dynamic batching (max-batch 32)"]
    print("| batched / unbatched | " + " | ".join(f"{sb[n] / su[n]:.2f}x" for n in sizes) + " |")
    print(f"\nremote policy on its own hardware (stand-in: {args.device_ms:g} ms device time per batch), env steps/s\n")
    print("| pipeline | " + " | ".join(str(n) for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for mode, row in offcpu.items():
        print(f"| {mode.value} | " + " | ".join(f"{row[n]:.0f}" for n in sizes) + " |")
    lo, de = offcpu[Pipeline.LOCKSTEP], offcpu[Pipeline.DECOUPLED]
    print("| decoupled / lockstep | " + " | ".join(f"{de[n] / lo[n]:.2f}x" for n in sizes) + " |")
    print("\n| loopback round trip | median RTT ms | of which server inference ms |\n|---|---:|---:|")
    for name, (total, infer) in rtt.items():
        print(f"| {name} | {total:.2f} | {infer:.2f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"steps_per_s": results, "serving_rows_per_s": serving, "rtt_ms": rtt,
                       "device_stand_in": {m.value: row for m, row in offcpu.items()}}, handle, indent=2)


if __name__ == "__main__":
    main()
