"""LIBERO throughput: frames/s, steps/s per piece, Assay beside the upstream loop, episodes/hour.

    PYTHONPATH=src .venv/bin/python benchmarks/libero_throughput.py --compare-upstream [--rounds 3] [--horizon 280]
    PYTHONPATH=src .venv/bin/python benchmarks/libero_throughput.py --video-costs [--horizon 60]
    PYTHONPATH=src .venv/bin/python benchmarks/libero_throughput.py [--frames 20] [--episodes 4] [--workers 2]

Every part runs LIBERO-Object task 0 (alphabet soup, 280 policy steps after 10 settle steps) at 224 px.
llvmpipe is pinned to one thread (``LP_NUM_THREADS=1`` unless set), so a figure "per core" is one
process on one core; CPU seconds (``time.process_time``, every thread of the process) are printed
beside wall seconds, since on a shared machine the wall clock also counts other processes' time.

``--compare-upstream``: in one process and alternating rounds, (a) the upstream-style loop, as
openpi's ``examples/libero/main.py`` runs LIBERO: ``OffScreenRenderEnv`` rendering both cameras every
step, a hard reset (the scene rebuilt) per episode, the settle steps, a replan every 5 steps, the
agentview frames written as a 10 fps video; and (b) Assay's worker (``assay.run.Worker``: rollout,
recording, Parquet, an MP4 per camera) on the same task, horizon and cameras, with the default LIBERO
video (4 frames/s). Both ask the same instantly answering chunked policy (the fake openpi LIBERO
server's ``infer``: chunks of 10 from the state, in process) for a chunk every 5 steps, and it reads
both cameras. Then the cost of each piece (physics, each camera, the policy, recording) and full
LIBERO-Object episodes/hour per core; the last figure line is ``assay/upstream = X`` (upstream's
wall seconds per episode over Assay's, the median of the rounds' ratios).

``--video-costs``: Assay's episode time under each ``video_fps`` (every step, 10, 4, 2, 1), for a
policy that reads both cameras at each replan and for one that reads none (the scripted expert's
case), plus ``cameras: []``.

Default (no mode): frames/s of each camera at 128 and 224 px, physics steps/s without cameras, then
``assay run`` against the fake openpi LIBERO server over websockets with ``--workers`` workers
(start-up and scene builds included), as before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from assay.sim import default_registry, make_env
from assay.spec import CameraSpec

ROOT = Path(__file__).resolve().parents[1]
SOUP = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
SIZE = 224
REPLAN = 5
SETTLE = 10
FULL_OBJECT_STEPS = 280  # LIBERO-Object's horizon (openpi's max_steps), after the settle steps
DUMMY = [0.0] * 6 + [-1.0]


def infer(element: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The fake openpi LIBERO server's answer to one request (tests/openpi_libero_server.py), in process."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.openpi_libero_server import infer as server_infer

    return server_infer(dict(element))


class InstantChunkPolicy:
    """openpi's LIBERO request, answered at once: per row, the fake server's ``infer`` on the state, the
    prompt and both cameras (chunks of 10). No ``reads_frames`` hook: like a VLA, it reads its frames."""

    def reset(self, context: Any) -> None:
        """Nothing to forget."""

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One (10, 7) chunk per row."""
        chunks = []
        for row in range(len(observations["state"])):
            element = {"observation/state": observations["state"][row], "prompt": observations["instruction"][row]}
            for key, camera in (("observation/image", "agentview"), ("observation/wrist_image", "wrist")):
                if f"image.{camera}" in observations:
                    element[key] = observations[f"image.{camera}"][row]
            chunks.append(infer(element)["actions"])
        return np.stack(chunks).astype(np.float64)


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


# ---------------------------------------------------------------------------------------------- upstream


class Upstream:
    """openpi's ``examples/libero/main.py`` loop on ``OffScreenRenderEnv`` (224 px rendered directly: openpi
    renders 256 and resizes to 224 with padding, which would only add to its cost)."""

    def __init__(self, task_index: int = 0, suite: str = "libero_object") -> None:
        from assay.sim.libero_env import _quiet

        with _quiet():
            from libero.libero import benchmark
            from libero.libero.envs import OffScreenRenderEnv

            self.suite = benchmark.get_benchmark(suite)(task_order_index=0)
            task = self.suite.get_task(task_index)
            self.prompt = task.language
            self.states = self.suite.get_task_init_states(task_index)
            # openpi's env_args: the BDDL file and the camera size; hard_reset keeps its default (True)
            self.env = OffScreenRenderEnv(bddl_file_name=self.suite.get_task_bddl_file_path(task_index),
                                          camera_heights=SIZE, camera_widths=SIZE)
        self.env.seed(0)

    def episode(self, index: int, horizon: int, video_dir: Path) -> tuple[float, float, int]:
        """One episode as openpi runs it; (wall s, CPU s, steps incl. settle)."""
        from assay.sim.libero_env import quat_to_axis_angle
        from assay.store.video import encode_video

        start = _clock()
        self.env.reset()  # a hard reset: the scene is rebuilt
        plan: deque[np.ndarray] = deque()
        obs = self.env.set_init_state(self.states[index % len(self.states)])
        frames, steps = [], 0
        while steps < horizon + SETTLE:
            if steps < SETTLE:
                obs, _, _, _ = self.env.step(DUMMY)
                steps += 1
                continue
            image = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])
            wrist = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1])
            frames.append(image)
            if not plan:
                state = np.concatenate([obs["robot0_eef_pos"], quat_to_axis_angle(obs["robot0_eef_quat"]),
                                        obs["robot0_gripper_qpos"]])
                element = {"observation/image": image, "observation/wrist_image": wrist,
                           "observation/state": state, "prompt": str(self.prompt)}
                plan.extend(infer(element)["actions"][:REPLAN])
            obs, _, done, _ = self.env.step(plan.popleft().tolist())
            steps += 1
            if done:
                break
        (video_dir / f"upstream_{index}.mp4").write_bytes(encode_video(frames, 10))  # openpi: imageio, fps=10
        wall, cpu = _since(start)
        return wall, cpu, steps

    def close(self) -> None:
        self.env.close()


# ---------------------------------------------------------------------------------------------- Assay


def _jobs(horizon: int, count: int, **settings: Any) -> list[Any]:
    from assay.run import prepare_campaign
    from assay.spec import campaign_from_data

    data = {"name": "bench", "episodes": count, "horizon": horizon, "replan_every": REPLAN, "tasks": [SOUP],
            "envs_per_worker": 1, "policies": [{"name": "instant", "entrypoint": "assay.testing.fakes:ConstantPolicy"}],
            **settings}
    return list(prepare_campaign(campaign_from_data(data)).jobs)


class Assay:
    """Assay's worker with its LIBERO environment built once (as a campaign's worker keeps it)."""

    def __init__(self, store: Path, policy: Callable[[], Any] = InstantChunkPolicy) -> None:
        from assay.run import Worker

        self.worker = Worker(store, policy_factory=lambda spec: policy())

    def episode(self, job: Any) -> tuple[float, float, int]:
        """One episode through the worker (rollout, recording, Parquet and MP4 writes)."""
        start = _clock()
        (record,) = self.worker.run_batch([job])
        wall, cpu = _since(start)
        return wall, cpu, record.steps + SETTLE

    def close(self) -> None:
        self.worker.close()


# ---------------------------------------------------------------------------------------------- pieces


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Wall and CPU milliseconds per call."""
    fn()  # warm-up
    start = _clock()
    for _ in range(repeats):
        fn()
    wall, cpu = _since(start)
    return wall / repeats * 1000, cpu / repeats * 1000


def pieces(repeats: int) -> dict[str, tuple[float, float]]:
    """Milliseconds (wall, CPU) of each piece of an Assay LIBERO step, on one environment."""
    from assay.run.recorder import EpisodeRecorder
    from assay.run.worker import Worker
    from assay.store import Outcome

    task = default_registry().get(SOUP)
    task = task.model_copy(update={"cameras": tuple(CameraSpec(name=c, width=SIZE, height=SIZE)
                                                    for c in ("agentview", "wrist"))})
    env = make_env(task)
    try:
        observation = env.reset(0)
        scene = env._scene  # the renderers and MuJoCo data of the nominal scene
        data, renderer = scene.inner.sim.data._data, scene.renderers[False]  # robosuite's drawing (the default)
        action = np.array([0.0] * 6 + [-1.0])

        def physics() -> None:
            env.skip_next_frames()
            env.step(action)

        out = {"physics (OSC_POSE + 25 MuJoCo substeps, no frame)": _timed(physics, repeats)}
        for name, camera in (("agentview", "agentview"), ("wrist", "robot0_eye_in_hand")):
            out[f"{name} frame at {SIZE} px"] = _timed(
                lambda c=camera: renderer.render_camera(data, c, SIZE, SIZE), repeats)
        policy = InstantChunkPolicy()
        batch = {k: np.stack([v]) for k, v in observation.items()} | {"instruction": [task.instruction]}
        out["policy request (instant, reads both cameras)"] = _timed(lambda: policy.act(batch), repeats)
        (job,) = _jobs(FULL_OBJECT_STEPS, 1)
        recorder = EpisodeRecorder(job)
        transition = env.step(action)
        for step in range(FULL_OBJECT_STEPS):
            recorder.add(observation, action, transition, 0.0, step // REPLAN, step % REPLAN)
        recorder.finish(Outcome.TIMEOUT)
        with tempfile.TemporaryDirectory() as tmp:
            saver = Worker(tmp)
            wall, cpu = _timed(lambda: saver.save([recorder]), max(1, repeats // 10))
        out[f"recording per step (a {FULL_OBJECT_STEPS}-step episode's Parquet and two 4 fps MP4s)"] = (
            wall / FULL_OBJECT_STEPS, cpu / FULL_OBJECT_STEPS)
    finally:
        env.close()
    return out


def print_pieces(costs: dict[str, tuple[float, float]]) -> float:
    """Print the pieces; return the modelled CPU seconds of a full LIBERO-Object episode in Assay."""
    print(f"{'piece':<82} {'ms wall':>8} {'ms CPU':>8} {'per s (CPU)':>11}")
    for name, (wall, cpu) in costs.items():
        print(f"{name:<82} {wall:8.1f} {cpu:8.1f} {1000 / cpu if cpu else float('inf'):11.1f}")
    values = list(costs.values())
    physics, agent, wrist, policy, record = (v[1] for v in values)
    steps = FULL_OBJECT_STEPS + SETTLE
    replans = FULL_OBJECT_STEPS // REPLAN
    modelled = (steps * physics + (replans + 1) * (agent + wrist) + replans * policy
                + FULL_OBJECT_STEPS * record) / 1000
    print(f"modelled full LIBERO-Object episode in Assay ({steps} steps, {replans + 1} renders of both cameras, "
          f"{replans} requests, recording): {modelled:.1f} CPU s -> {3600 / modelled:.0f} episodes/hour per core "
          "(reset not included)")
    return modelled


# ---------------------------------------------------------------------------------------------- modes


def serve_side(side: str, horizon: int) -> None:
    """A child process of ``--compare-upstream``: build one side's loop once (Assay's for ``horizon``, which is
    part of its task, and drawn once: its GL context and shaders), say so, then run one episode per line of
    stdin (``INDEX HORIZON``), answering each with a JSON line (wall s, CPU s, steps)."""
    with tempfile.TemporaryDirectory() as tmp:
        start = _clock()
        if side == "upstream":
            upstream = Upstream()

            def run(index: int, horizon: int) -> tuple[float, float, int]:
                return upstream.episode(index, horizon, Path(tmp))

            close: Callable[[], None] = upstream.close
        else:
            assay = Assay(Path(tmp) / "store")
            (env,) = assay.worker._environments(_jobs(horizon, 1)[0], 1)  # built once, as a campaign's worker does
            env.reset(49)  # draws both cameras once: the GL context and its shaders, made once per worker

            def run(index: int, horizon: int) -> tuple[float, float, int]:
                return assay.episode(_jobs(horizon, index + 1)[index])

            close = assay.close
        print(json.dumps({"build_s": _since(start)[0]}), flush=True)
        try:
            for line in sys.stdin:
                index, horizon = (int(x) for x in line.split())
                wall, cpu, steps = run(index, horizon)
                print(json.dumps({"wall": wall, "cpu": cpu, "steps": steps}), flush=True)
        finally:
            close()


def _answer(child: subprocess.Popen[str]) -> dict[str, Any]:
    """The child's next JSON line (robosuite and LIBERO print other lines)."""
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("{"):
            return dict(json.loads(line))
    raise RuntimeError(f"the {child.args} child ended without answering")


def compare_upstream(rounds: int, horizon: int, repeats: int) -> None:
    """Alternating rounds of the upstream loop and Assay, each in its own child process (a robosuite render
    context torn down by a hard reset would otherwise free the GL objects of whichever context is current,
    Assay's included), each side warmed once (GL context, shader compilation; upstream: a short episode);
    then the pieces (a third child) and ``assay/upstream = X`` last."""
    print(f"LIBERO-Object task 0, {horizon} policy steps + {SETTLE} settle, both cameras at {SIZE} px, replans every "
          f"{REPLAN} steps, LP_NUM_THREADS={os.environ['LP_NUM_THREADS']}, {rounds} alternating rounds")
    children = {side: subprocess.Popen([sys.executable, __file__, "--child", side, "--horizon", str(horizon)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for side in ("upstream", "assay")}
    results: dict[str, list[dict[str, Any]]] = {"upstream": [], "assay": []}

    def ask(side: str, index: int, steps: int) -> dict[str, Any]:
        child = children[side]
        assert child.stdin is not None
        child.stdin.write(f"{index} {steps}\n")
        child.stdin.flush()
        return _answer(child)

    try:
        builds = {side: _answer(child)["build_s"] for side, child in children.items()}
        print(f"scene build: upstream {builds['upstream']:.1f} s wall, Assay {builds['assay']:.1f} s wall and one "
              "drawing (once each, not counted); one untimed 5-step upstream episode first")
        ask("upstream", 49, 5)
        for index in range(rounds):
            for side in children:
                results[side].append(ask(side, index, horizon))
            up, me = results["upstream"][-1], results["assay"][-1]
            print(f"round {index + 1}: upstream {up['wall']:6.1f} s wall {up['cpu']:6.1f} s CPU ({up['steps']} steps)"
                  f" | Assay {me['wall']:6.1f} s wall {me['cpu']:6.1f} s CPU ({me['steps']} steps) | ratio "
                  f"{up['wall'] / me['wall']:.2f} wall, {up['cpu'] / me['cpu']:.2f} CPU", flush=True)
    finally:
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
    done = subprocess.run([sys.executable, __file__, "--child", "pieces", "--repeats", str(repeats)],
                          capture_output=True, text=True, check=True)
    costs = {name: tuple(v) for name, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    modelled = print_pieces(costs)
    scale = (FULL_OBJECT_STEPS + SETTLE) / (horizon + SETTLE)
    assay_cpu = statistics.median(r["cpu"] for r in results["assay"])
    upstream_cpu = statistics.median(r["cpu"] for r in results["upstream"])
    note = "" if horizon == FULL_OBJECT_STEPS else f" (scaled by steps from {horizon + SETTLE}-step episodes)"
    print(f"measured full LIBERO-Object episodes/hour per core{note}: Assay {3600 / (assay_cpu * scale):.0f}, "
          f"upstream {3600 / (upstream_cpu * scale):.0f} (CPU seconds, median of rounds; modelled Assay: "
          f"{3600 / modelled:.0f})")
    pairs = list(zip(results["upstream"], results["assay"], strict=True))
    print(f"assay/upstream (CPU seconds per episode, median of rounds) = "
          f"{statistics.median(u['cpu'] / a['cpu'] for u, a in pairs):.2f}")
    print(f"assay/upstream = {statistics.median(u['wall'] / a['wall'] for u, a in pairs):.2f}")


def video_costs(horizon: int) -> None:
    """Assay's seconds per episode under each video rate, for a camera policy and for a policy reading no frame."""
    from assay.policies import ExpertPolicy

    print(f"LIBERO-Object task 0, {horizon} policy steps + {SETTLE} settle, both cameras at {SIZE} px, replans every "
          f"{REPLAN} steps (the expert: every step, reading no frame); one episode each, after one untimed warm-up")
    rows: list[tuple[str, str, float, float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        policies = (("camera policy (instant)", InstantChunkPolicy), ("expert (reads no frame)", ExpertPolicy))
        for label, policy in policies:
            assay = Assay(Path(tmp) / label.split()[0], policy)
            try:
                assay.episode(_jobs(horizon, 1, name="warm")[0])
                for fps in (20.0, 10.0, 4.0, 2.0, 1.0):
                    (job,) = _jobs(horizon, 1, name=f"v{fps:g}", video_fps=fps)
                    wall, cpu, steps = assay.episode(job)
                    video = f"video_fps {fps:g}" + (" (every step)" if fps == 20 else "")
                    rows.append((label, video, wall, cpu, steps))
            finally:
                assay.close()
            if policy is ExpertPolicy:
                blind = Assay(Path(tmp) / "blind", policy)
                try:
                    blind.episode(_jobs(horizon, 1, name="warm-blind", cameras=[])[0])
                    wall, cpu, steps = blind.episode(_jobs(horizon, 1, name="blind", cameras=[])[0])
                    rows.append((label, "cameras: [] (no camera, no video)", wall, cpu, steps))
                finally:
                    blind.close()
    print(f"{'policy':<26} {'video':<36} {'s wall':>7} {'s CPU':>7} {'ms CPU/step':>11}")
    for label, video, wall, cpu, steps in rows:
        print(f"{label:<26} {video:<36} {wall:7.1f} {cpu:7.1f} {cpu / steps * 1000:11.1f}")


def per_frame(frames: int) -> None:
    """Frames/s of each camera at 128 and 224 px, and physics steps/s without cameras."""
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


def campaign(episodes: int, workers: int, horizon: int, video_fps: float | None = None) -> float:
    """``assay run`` against the fake openpi LIBERO server; returns episodes/hour of wall time."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.chaos_support import _env, free_port, kill_group

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.openpi_libero_server", "--port", str(port)], cwd=ROOT,
                              env=_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "c.json"
            data: dict[str, Any] = {"name": "libero-bench", "episodes": episodes, "envs_per_worker": 1,
                                    "replan_every": REPLAN, "tasks": [SOUP], "horizon": horizon,
                                    "policies": [{"name": "fake-pi0", "remote": f"ws://127.0.0.1:{port}",
                                                  "version": "fake-pi0-libero-1"}]}  # no server identity
            if video_fps is not None:
                data["video_fps"] = video_fps
            spec.write_text(json.dumps(data))
            assay = str(Path(sys.executable).with_name("assay"))
            start = time.perf_counter()
            subprocess.run([assay, "run", str(spec), "--store", str(Path(tmp) / "s"), "--workers", str(workers),
                            "--json"], check=True, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - start
        steps = episodes * (horizon + SETTLE)
        print(f"campaign: {episodes} episodes x {horizon + SETTLE} steps ({SETTLE} settle), 2 cameras at {SIZE} px, "
              f"{workers} workers: {wall:.0f} s wall incl. start-up and env builds, {steps / wall:.2f} env steps/s, "
              f"{episodes / wall * 3600:.0f} episodes/hour at this horizon, "
              f"{steps / wall / (FULL_OBJECT_STEPS + SETTLE) * 3600:.0f} full LIBERO-Object episodes/hour at this "
              "step rate", flush=True)
        return episodes / wall * 3600
    finally:
        server.terminate()
        server.wait()
        kill_group(server)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compare-upstream", action="store_true", help="upstream loop vs Assay, alternating rounds")
    parser.add_argument("--video-costs", action="store_true", help="episode time under each video_fps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=30, help="calls per piece timing")
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=FULL_OBJECT_STEPS, help="policy steps (LIBERO-Object: 280)")
    parser.add_argument("--skip-frames", action="store_true")
    parser.add_argument("--child", choices=("upstream", "assay", "pieces"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("LP_NUM_THREADS", "1")  # read when the first GL context is made: one llvmpipe thread
    if args.child == "pieces":
        print(json.dumps(pieces(args.repeats)))
    elif args.child:
        serve_side(args.child, args.horizon)
    elif args.compare_upstream:
        compare_upstream(args.rounds, args.horizon, args.repeats)
    elif args.video_costs:
        video_costs(args.horizon)
    else:
        if not args.skip_frames:
            per_frame(args.frames)
        campaign(args.episodes, args.workers, args.horizon)


if __name__ == "__main__":
    main()
