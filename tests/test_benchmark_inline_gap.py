"""``benchmarks/inline_gap.py`` compares loops that must run the same episodes: its bare loop, driven by hand on
Assay's Sawyer environment, has to run the episodes Assay's rollout runs for the campaign's jobs (the same seeds and
initial states, the same number of steps, the same states along the way, bit for bit), or its per-step figures
compare different work. Checked here on the real simulator and the real runner, episode by episode. Two things make
it so, and each alone left the states apart (~1e-9 after the first step, growing to ~1e-4 within 30): the loop hands
Meta-World the expert's actions as float64, as Assay's runner does (Meta-World scales a float32 action in float32),
and it makes the forward pass after each reset that Assay's reset makes (it sets MuJoCo's solver warm start).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metaworld")

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _inline_gap():
    sys.path.insert(0, str(BENCHMARKS))  # inline_gap imports eval_throughput beside it
    try:
        spec = importlib.util.spec_from_file_location("inline_gap_under_test", BENCHMARKS / "inline_gap.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _bare_episode(gap, env, policy, seed: int) -> tuple[int, list[np.ndarray]]:
    """The bare loop's steps for one seed, with the states it passed through (a copy of each, the reset's first)."""
    states: list[np.ndarray] = []
    step, reset = env.step, env.reset

    def stepping(action):
        result = step(action)
        states.append(np.array(result[0]))
        return result

    def resetting(*args, **kwargs):
        result = reset(*args, **kwargs)
        states.append(np.array(result[0]))
        return result

    env.step, env.reset = stepping, resetting
    try:
        return gap.bare_steps(env, policy, [seed]), states
    finally:
        del env.step, env.reset


def test_the_bare_loop_runs_the_episodes_assays_rollout_runs():
    from assay.run.worker import Worker
    from assay.sim.metaworld_env import sawyer_env
    from assay.spec.campaign import batch_jobs

    gap = _inline_gap()
    jobs = gap._jobs("reach-v3", 4)
    assert len({job.seed for job in jobs}) == 4
    worker = Worker("unused-root", tracing=False)
    recorders = [recorder for batch in batch_jobs(jobs, 2) for recorder in worker.roll(batch)]
    env, policy = sawyer_env("reach-v3"), gap._expert("reach-v3")
    try:
        for job, recorder in zip(jobs, recorders, strict=True):
            steps, states = _bare_episode(gap, env, policy, job.seed)
            assert recorder.job.seed == job.seed and recorder.outcome is not None
            assert steps == recorder.steps > 0
            np.testing.assert_array_equal(states[0], recorder.states[0])  # the same initial state, bit for bit
            # then the same states (the last step's is the final observation, which the recorder does not keep)
            np.testing.assert_array_equal(np.asarray(states[:-1]), np.asarray(recorder.states))
            assert bool(recorder.successes[-1]) == (recorder.outcome.value == "success")
    finally:
        env.close()
        worker.close()
