"""State-only LIBERO episodes per core-hour beside the physics + controller floor, in one process, one run.

    MUJOCO_GL=osmesa python benchmarks/libero_state_rate.py [--episodes 10] [--floor-steps 300]

LIBERO-Object's soup task with ``cameras: []`` (issue 57's state case), CPU seconds of this process
(``time.process_time``), so other jobs on the machine change the figures little:

1. **floor**: robosuite's own ``step`` of the scene Assay builds (OSC_POSE and 25 MuJoCo substeps a policy step,
   robosuite's observables), with the scripted expert's first actions replayed: what robosuite's loop pays a step
   (``sim.libero_forward``, ``sim.libero_observables`` and ``sim.libero_control`` removed for it);
2. **robosuite's step as Assay runs it**: the same, with the substeps' repeated position and velocity stages
   skipped (``sim.libero_forward``), the observables' clocks advanced once a substep (``sim.libero_observables``)
   and the arm's control without its per-substep lookups (``sim.libero_control``; every state bit-identical),
   and beside it the same without ``sim.libero_control`` (each arm timed twice, alternating, its better kept);
3. **backend**: Assay's LIBERO ``step`` (2 plus its per-step events and the observation it returns);
4. **campaign**: the scripted expert's episodes, initial states 0..N-1, through a ``Worker`` (rollout, the recorder,
   the Parquet step file), the scene built once as a campaign's worker builds it (counted);
5. **full episodes, counted**: the random policy's episodes (a state policy that never succeeds, so each runs its
   280 policy steps after the reset's 10 settle steps) through the same worker;
6. **full expert-like episodes, estimated**: the expert's resets timed apart, then a reset plus 280 of the expert's
   campaign steps with its resets taken out (its planner and grasps cost more a step than random actions).

A "full" LIBERO-Object episode is 290 steps (280 policy steps and 10 settle steps, openpi's loop): lines 1-4 give
their episodes per core-hour at that length (the campaign's step cost carries its resets, spread over the expert's
shorter episodes, so it overstates a full episode's), line 5 counts them, line 6 estimates them for the expert; the
campaign is also given at the expert's own lengths. Issue 57's target: ≥ 1,000 full episodes per core-hour.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

TASK = "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2"
FULL = 290


def _jobs(episodes: int, policy: str = "expert") -> list:
    from assay.run import prepare_campaign
    from assay.spec import campaign_from_data

    spec = campaign_from_data({"name": "state-rate", "seed": 0, "episodes": episodes, "tasks": [TASK],
                               "policies": [policy], "cameras": [], "envs_per_worker": 1})
    return list(prepare_campaign(spec).jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--floor-steps", type=int, default=300)
    parser.add_argument("--full-episodes", type=int, default=3, help="random-policy episodes run to the horizon")
    args = parser.parse_args()
    from assay.run import Worker
    from assay.sim import libero_control, libero_forward, libero_observables

    jobs = _jobs(args.episodes)
    print(f"load at start {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="assay-state-rate-") as root:
        worker = Worker(root)
        (first,) = worker.roll(jobs[:1])  # builds the policy and the scene, as a campaign's first batch does
        build_s = first.executor["setup_ms"] / 1000  # wall seconds of the builds (this roll also ran an episode)
        actions = np.asarray(first.actions)
        rollout_cpu, steps = 0.0, 0
        records = []
        for job in jobs:
            started = time.process_time()
            records += worker.run_batch([job])
            rollout_cpu += time.process_time() - started
        steps = sum(r.steps for r in records)
        full_jobs = _jobs(args.full_episodes, "random")
        started = time.process_time()
        full = [record for job in full_jobs for record in worker.run_batch([job])]
        full_cpu = time.process_time() - started
        env = worker._environments(jobs[0], 1)[0]  # the scene the worker keeps
        started = time.process_time()
        for job in jobs:  # the expert's resets again (initial state and settle steps), timed apart
            env.reset(job.seed)
        reset_cpu = (time.process_time() - started) / len(jobs)
        env.reset(jobs[0].seed)
        started = time.process_time()
        for i in range(args.floor_steps):
            env.step(actions[i % len(actions)])
        backend_ms = (time.process_time() - started) / args.floor_steps * 1000
        robosuite, inner = env.simulator, env._scene.inner
        timed: dict[str, list[float]] = {"floor": [], "fast": [], "no control": []}
        for name in [*timed, *timed]:  # each arm twice, alternating: each keeps its better round
            if name != "fast":
                libero_control.uninstall(inner)
            if name == "floor":
                libero_forward.uninstall(inner)
                libero_observables.uninstall(inner)
            env.reset(jobs[0].seed)
            started = time.process_time()
            for i in range(args.floor_steps):
                robosuite.step(actions[i % len(actions)])
            timed[name].append((time.process_time() - started) / args.floor_steps * 1000)
            libero_forward.install(inner)
            libero_observables.install(inner)
            libero_control.install(inner)
        floor_ms, fast_ms, no_control_ms = (min(timed[name]) for name in ("floor", "fast", "no control"))
        worker.close()
    per_step_ms = rollout_cpu / steps * 1000
    episodes = len(records)
    own_rate = episodes / ((rollout_cpu + build_s) / 3600)
    print(f"\nsoup task, cameras: [], {episodes} expert episodes ({steps} steps, "
          f"{sum(r.outcome.value == 'success' for r in records)} succeeded); load at end {os.getloadavg()}\n")
    print("| loop | CPU ms a step | full (290-step) episodes per core-hour |\n|---|---:|---:|")
    for name, ms in (("floor: robosuite's step", floor_ms),
                     ("robosuite's step with sim.libero_forward and sim.libero_observables", no_control_ms),
                     ("robosuite's step as Assay runs it (and sim.libero_control)", fast_ms),
                     ("Assay's LIBERO backend step", backend_ms),
                     ("Assay campaign (worker, recorder, Parquet)", per_step_ms)):
        print(f"| {name} | {ms:.2f} | {3_600_000 / (ms * FULL):.0f} |")
    full_steps = sum(r.steps for r in full)
    print(f"| full episodes, counted: the random policy, {len(full)} episodes of {full_steps / len(full):.0f} policy "
          f"steps | {full_cpu / len(full) / FULL * 1000:.2f} | **{len(full) / (full_cpu / 3600):.0f}** |")
    expert_step = (rollout_cpu - reset_cpu * episodes) / steps
    expert_full = reset_cpu + (FULL - 10) * expert_step
    print(f"| full expert-like episodes, estimated: a reset ({reset_cpu * 1000:.0f} ms, timed apart) and 280 of the "
          f"expert's campaign steps ({expert_step * 1000:.2f} ms each, its resets taken out) | "
          f"{expert_full / FULL * 1000:.2f} | {3600 / expert_full:.0f} |")
    print(f"\nscene and policy build (once per worker): {build_s:.2f} s wall")
    print(f"campaign at the expert's own lengths, the build counted once: {own_rate:.0f} episodes per core-hour")
    print(f"campaign / floor per step: {per_step_ms / floor_ms:.2f}")


if __name__ == "__main__":
    main()
