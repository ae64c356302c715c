"""The online safety filter counts every intervention; the quality gate says why it drops a trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures.boundary import bisect_boundary, boundary_interval
from assay.failures.recovery import recovery_columns
from assay.failures.safety import quality_gate
from assay.sim import Transition, default_registry, make_env
from assay.sim.safety import SafetyFilter
from assay.store import build_table


@pytest.mark.sim
def test_safety_filter_counts_interventions():
    box = (np.array([-0.5, 0.3, 0.05]), np.array([0.5, 1.0, 0.3]))
    env = SafetyFilter(make_env(default_registry().get("metaworld/reach")), workspace=box)
    try:
        env.reset(1)
        infos = [env.step(a).info for a in (np.array([np.nan, 0, 0, 0]), np.array([3.0, 0, 0, 0]), np.zeros(4))]
        for _ in range(60):  # push the hand up until the workspace bound stops it
            infos.append(env.step(np.array([0.0, 0.0, 1.0, 0.0])).info)
    finally:
        env.close()
    assert [i["safety.nan"] for i in infos[:3]] == [1.0, 0.0, 0.0]
    assert [i["safety.limit"] for i in infos[:3]] == [0.0, 1.0, 0.0]
    assert env.counts["nan"] == 1 and env.counts["limit"] == 1 and env.counts["workspace"] > 0
    assert env.counts["workspace"] == sum(i["safety.workspace"] for i in infos)


@pytest.mark.sim
def test_the_workspace_check_fires_on_meta_world_with_its_own_hand_box():
    """On b6a562f the generic Sawyer box lay outside every task's mocap box: the hand never got there."""
    env = SafetyFilter(make_env(default_registry().get("metaworld/reach")))
    try:
        assert env.high[2] == pytest.approx(0.5 - 0.005)  # reach's own mocap ceiling, less the margin
        state = env.reset(1)["state"]
        infos, heights = [], [state[2]]
        for _ in range(80):
            transition = env.step(np.array([0.0, 0.0, 1.0, 0.0]))
            infos.append(transition.info)
            heights.append(transition.observation["state"][2])
    finally:
        env.close()
    assert env.counts["workspace"] > 0 and infos[0]["safety.workspace"] == 0.0
    first = next(i for i, info in enumerate(infos) if info["safety.workspace"])
    assert heights[first] > 0.45 and max(heights) <= 0.5  # stopped near the ceiling, never past it


def _table(actions: np.ndarray, unstable: bool = False, drop: str | None = None):
    n = len(actions)
    transitions = [Transition({}, 0.0, False, False, False, {"unstable": float(unstable and i == 3)}) for i in range(n)]
    columns = recovery_columns([np.zeros(39)] * n, list(actions), transitions, 80.0)
    table = build_table(columns, {})
    return table.drop_columns([drop]) if drop else table


def test_quality_gate_drops_with_reasons():
    smooth = np.tile(np.linspace(0, 1, 20)[:, None], (1, 4))
    jittery = np.tile(np.array([[1.0], [-1.0]]), (10, 4))
    result = quality_gate({"ok": _table(smooth), "jitter": _table(jittery), "unstable": _table(smooth, unstable=True),
                           "missing": _table(smooth, drop="reward")}, jitter_threshold=0.5)
    assert result.kept == ("ok",)
    assert set(result.dropped) == {"jitter", "unstable", "missing"}
    assert result.dropped["missing"] == "missing field(s): reward" and result.dropped["jitter"].startswith("jitter")


def test_boundary_bisection_brackets_the_drop():
    # success falls from 8/8 to 0/8 at level 2.0 of some factor
    level, probes = bisect_boundary(lambda x: (8 if x < 2.0 else 0, 8), safe=1.0, hard=4.0, threshold=0.5, iterations=6)
    assert level is not None and 2.0 <= level < 2.0 + 3.0 / 2**6 + 1e-9
    assert len(probes) == 8 and probes[0].rate == 1.0 and probes[1].rate == 0.0
    found = boundary_interval(probes, 1.0, 4.0, 0.5)
    assert found.bracket is not None and found.bracket[1] == level and found.bracket[0] < 2.0 <= found.bracket[1]
    assert found.interval == found.bracket and found.undecided == ()  # 8/8 and 0/8 are sure on both sides
    # 5/8 near the boundary is not sure of being above 0.5: the interval widens to the sure levels
    noisy, noisy_probes = bisect_boundary(lambda x: (8 if x < 2.0 else 5 if x < 2.5 else 0, 8), 1.0, 4.0, 0.5, 4)
    wide = boundary_interval(noisy_probes, 1.0, 4.0, 0.5)
    assert wide.undecided and wide.interval[0] < wide.bracket[0] and wide.interval[1] == wide.bracket[1]
