"""Render on demand: a chunk-5 camera policy, rendering every step vs only the frames somebody reads.

    python benchmarks/render_on_demand.py [--episodes 12] [--horizon 100] [--size 128] [--chunk 5] [--rounds 2]

The same episodes (``assay.testing.fakes:ImageChunkPolicy``: a policy that reads the ``front``
camera at every request and answers chunks of ``--chunk`` actions, on Meta-World push, fixed
seeds, ``--envs`` environments per batch) run through Assay's worker (rollout, recording, MP4
and Parquet writes; no catalog) in four configurations, interleaved round by round, best round
counted (the machine is shared):

1. every step, full-rate video: the behaviour before render on demand;
2. every step, ``video_fps`` = control rate / chunk (rendering forced on every step);
3. on demand, the same ``video_fps``: frames at replans and at the video's frames only;
4. on demand, full-rate video (the video reads every frame, so every step renders anyway).

Prints steps/s, episodes per hour (one worker, ``--horizon``-step episodes), renders per step, and
whether every configuration gave the same trajectories.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from assay.run import Worker, prepare_campaign
from assay.sim.render import CameraRenderer
from assay.spec import batch_jobs, campaign_from_data


def _campaign(episodes: int, horizon: int, size: int, chunk: int, envs: int, video_fps: float | None):
    data = {"name": "render-on-demand", "seed": 0, "episodes": episodes, "horizon": horizon,
            "envs_per_worker": envs, "tasks": ["metaworld/push@1"],
            "cameras": [{"name": "front", "width": size, "height": size}],
            "policies": [{"name": "pixels", "entrypoint": "assay.testing.fakes:ImageChunkPolicy",
                          "params": {"horizon": chunk}}]}
    if video_fps is not None:
        data["video_fps"] = video_fps
    return prepare_campaign(campaign_from_data(data))


class _Renders:
    """Counts CameraRenderer.render calls (the real renderer draws every frame counted)."""

    count = 0

    def __enter__(self) -> _Renders:
        self._draw = CameraRenderer.render
        counter = self

        def counted(renderer, *args, **kwargs):
            counter.count += 1
            return counter._draw(renderer, *args, **kwargs)

        CameraRenderer.render = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        CameraRenderer.render = self._draw  # type: ignore[method-assign]


def run(campaign, on_demand: bool, envs: int) -> tuple[float, int, int, list[str]]:
    """Seconds of stepping and recording, steps, renders and trajectory hashes of every batch but the
    first (which builds the environments, their GL contexts and the policy before the clock starts)."""
    with tempfile.TemporaryDirectory() as root:
        worker = Worker(root, render_on_demand=on_demand)
        batches = batch_jobs(list(campaign.jobs), envs)
        worker.run_batch(batches[0])  # builds the environments, their GL contexts and the policy; not timed
        with _Renders() as renders:
            start = time.perf_counter()
            records = [record for batch in batches[1:] for record in worker.run_batch(batch)]
            seconds = time.perf_counter() - start
        worker.close()
    steps = sum(r.steps for r in records)
    return seconds, steps, renders.count, [r.trajectory_hash for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12, help="the first --envs of them warm up, untimed")
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    fps = 80.0 / args.chunk  # Meta-World steps at 80 Hz
    full = _campaign(args.episodes, args.horizon, args.size, args.chunk, args.envs, None)
    sparse = _campaign(args.episodes, args.horizon, args.size, args.chunk, args.envs, fps)
    configs = {
        "every step, full-rate video": (full, False),
        f"every step, video {fps:g} fps": (sparse, False),
        f"on demand, video {fps:g} fps": (sparse, True),
        "on demand, full-rate video": (full, True),
    }
    best: dict[str, tuple[float, int, int, list[str]]] = {}
    for _ in range(args.rounds):
        for label, (campaign, on_demand) in configs.items():
            result = run(campaign, on_demand, args.envs)
            if label not in best or result[0] < best[label][0]:
                best[label] = result
    same = len({tuple(result[3]) for result in best.values()}) == 1
    old = best["every step, full-rate video"]
    print(f"{args.episodes} episodes x {args.horizon} steps, {args.size} px front camera, chunks of {args.chunk}, "
          f"{args.envs} envs per batch, best of {args.rounds} rounds")
    print(f"{'configuration':<32} {'seconds':>8} {'steps/s':>8} {'episodes/h':>11} {'renders/step':>13} {'x row 1':>8}")
    for label, (seconds, steps, renders, trajectories) in best.items():
        per_hour = len(trajectories) / seconds * 3600
        print(f"{label:<32} {seconds:8.2f} {steps / seconds:8.1f} {per_hour:11.0f} {renders / steps:13.2f} "
              f"{old[0] / seconds:8.2f}")
    every, lazy = best[f"every step, video {fps:g} fps"], best[f"on demand, video {fps:g} fps"]
    print(f"render on demand / every step (video {fps:g} fps, chunks of {args.chunk}): {every[0] / lazy[0]:.2f}x")
    print(f"same trajectories in every configuration: {same}")


if __name__ == "__main__":
    main()
