"""The online safety filter counts every intervention; the quality gate says why it drops a trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from assay.failures.boundary import bisect_boundary
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
