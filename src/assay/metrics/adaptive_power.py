"""The power an adaptive comparison reaches under its cap, and the fixed-n design of *that* power.

An adaptive ``compare`` or ``rank`` design names a power, but its horizon (``max_episodes``,
the cap) decides what it reaches: a cap of 200 pairs at δ = 0.1 reaches 0.33, not the 0.8
asked for. Episodes saved only mean something against a fixed-n design of the same α and
the same power, so this module gives, per design, at the planning point of ``assay budget
--paired`` (rates 0.5 and 0.5 − δ, outcomes independent on a seed: discordance ½, the worst
case that the lattice test and the fixed-n yardstick also assume):

* ``reached``: the power at δ under the cap, **exact** for the success endpoint: dynamic
  programming over (pairs won by A, pairs won by B) after every pair, the rejection region
  of the design's test (lattice or mixture; both depend on those counts alone) absorbed at
  every look. The futility stop ("no difference ≥ δ", from the betting confidence sequence,
  which depends on the whole path) is left out of this computation; it can only lower
  power, and at δ it almost never fires (by seeded simulation of the whole rule,
  ``simulate_compare``: on 0.0–0.5 % of campaigns at caps 200–600; the tests check the DP
  against a brute-force loop over :func:`~assay.metrics.sequential.compare_stop`). The
  progress endpoint's betting test depends on the path, so there it is simulated
  (``CAMPAIGNS`` seeded campaigns on 0/1 scores, with its standard error);
* ``mean_pairs_at_delta`` / ``mean_pairs_at_null``: the expected pairs per comparison at δ and
  at no difference (rates 0.5 and 0.5), by the same computation; without the futility stop
  they are upper bounds (futility only stops earlier);
* the **equal-power yardstick**: pairs of the exact McNemar design (``episode_budget(...,
  paired=True, test="exact")``) at α per comparison and the *reached* power, beside the one at
  the requested power.

``rank`` runs every pair at α / pairs; the power is per pair. The ``interval`` and
``robustness`` goals test nothing and have no power.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from assay.metrics.budget import episode_budget
from assay.metrics.sequential import lattice_boundary, mixture_log_e
from assay.metrics.sequential_evidence import draw_pairs, look_points
from assay.metrics.sequential_scores import _rule as score_rule

CAMPAIGNS = 2000  # simulated campaigns per figure: standard error ≤ 0.011 on a power
SEED = 0
TESTING_GOALS = ("compare", "rank")
PLANNING_RATE = 0.5


@dataclass(frozen=True)
class DesignPower:
    """What an adaptive comparison design reaches under its cap, and its fixed-n yardsticks (pairs per cell)."""

    level: float  # α per comparison (α / pairs for rank)
    delta: float
    cap: int  # max pairs (the horizon)
    requested: float  # the design's power
    reached: float  # at δ: exact (success endpoint, futility stop left out) or simulated (progress)
    reached_se: float  # 0 when exact
    mean_pairs_at_delta: float
    mean_pairs_at_null: float  # rates 0.5 and 0.5
    fixed_n_requested: int  # exact McNemar pairs at the requested power
    fixed_n_equal_power: int  # exact McNemar pairs at the reached power: the fair yardstick
    campaigns: int  # simulated campaigns (0: exact)
    seed: int
    endpoint: str = "success"

    @property
    def reachable(self) -> bool:
        """Whether the cap reaches the requested power (within two standard errors of the simulation)."""
        return self.reached + 2 * self.reached_se >= self.requested

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {**asdict(self), "reachable": self.reachable}


def _planning(delta: float) -> tuple[float, float]:
    return PLANNING_RATE, PLANNING_RATE - delta


def exact_power(level: float, delta: float, cap: int, batch: int, method: str,
                p_a: float | None = None, p_b: float | None = None) -> tuple[float, float]:
    """(power, expected pairs) of the rejection rule alone (no futility stop) at rates (p_a, p_b), exactly.

    Outcomes independent on a seed; default rates: the planning point (0.5, 0.5 − δ). See the module docstring.
    """
    if p_a is None or p_b is None:
        p_a, p_b = _planning(delta)
    a_only, b_only = p_a * (1 - p_b), p_b * (1 - p_a)
    looks = look_points(batch, cap).tolist()
    s, f = np.meshgrid(np.arange(cap + 1), np.arange(cap + 1), indexing="ij")
    if method == "lattice":
        boundary = lattice_boundary(level, delta, cap)
        region = np.abs(s - f) >= boundary.intercept + boundary.slope * (s + f) - 1e-12
    else:
        region = mixture_log_e(s, f) >= math.log(1.0 / level)
    alive = np.zeros((cap + 1, cap + 1))
    alive[0, 0] = 1.0
    power = pairs = 0.0
    done = 0
    for look in looks:
        for n in range(done + 1, look + 1):  # only the triangle s + f ≤ n can hold mass
            step = alive[:n + 1, :n + 1] * (1.0 - a_only - b_only)
            step[1:, :] += alive[:n, :n + 1] * a_only
            step[:, 1:] += alive[:n + 1, :n] * b_only
            alive[:n + 1, :n + 1] = step
        done = look
        stopped = float(alive[region].sum())
        power += stopped
        pairs += stopped * look
        alive[region] = 0.0
    return power, pairs + float(alive.sum()) * cap


def _simulated(level: float, delta: float, cap: int, batch: int, p_a: float, p_b: float, campaigns: int,
               seed: int) -> tuple[float, float]:
    """(share rejected, mean pairs) of the progress endpoint's betting rule on 0/1 scores, seeded."""
    a, b = draw_pairs(p_a, p_b, campaigns, cap, seed)
    looks = look_points(batch, cap)
    reject, futile, *_ = score_rule(a, b, level, delta, looks, True)
    stop = reject | futile
    stop[:, -1] = True
    idx = np.argmax(stop, axis=1)
    rows = np.arange(campaigns)
    return float(reject[rows, idx].mean()), float(looks[idx].mean())


@lru_cache(maxsize=64)
def design_power(level: float, delta: float, cap: int, batch: int, method: str, requested: float,
                 endpoint: str = "success", campaigns: int = CAMPAIGNS, seed: int = SEED) -> DesignPower:
    """The power one comparison of the design reaches, and its fixed-n yardsticks (see the module docstring)."""
    p_a, p_b = _planning(delta)
    if endpoint == "progress":
        reached, at_delta = _simulated(level, delta, cap, batch, p_a, p_b, campaigns, seed)
        _, at_null = _simulated(level, delta, cap, batch, PLANNING_RATE, PLANNING_RATE, campaigns, seed + 1)
        se = math.sqrt(max(reached * (1 - reached), 1e-12) / campaigns)
    else:
        reached, at_delta = exact_power(level, delta, cap, batch, method, p_a, p_b)
        _, at_null = exact_power(level, delta, cap, batch, method, PLANNING_RATE, PLANNING_RATE)
        se, campaigns, seed = 0.0, 0, 0
    yard = episode_budget(delta, requested, paired=True, alpha=level).episodes_per_cell
    # a power at or below α is the test's size, reached with no information: the yardstick is 0 pairs
    equal = episode_budget(delta, min(reached, 0.9999), paired=True, alpha=level).episodes_per_cell \
        if reached > level else 0
    return DesignPower(level, delta, cap, requested, reached, se, at_delta, at_null, yard, equal, campaigns, seed,
                       endpoint)


def cap_for_power(level: float, delta: float, batch: int, method: str, requested: float,
                  endpoint: str = "success") -> int | None:
    """The smallest cap, in whole batches, whose power reaches ``requested`` (doubling, then bisection: power
    grows with the cap up to the small steps of a discrete test); None beyond 20 000 pairs."""
    def reaches(batches: int) -> bool:
        return design_power(level, delta, batches * batch, batch, method, requested, endpoint).reachable

    high = 1
    while not reaches(high):
        if high * batch > 20_000:
            return None
        high *= 2
    low = high // 2  # 0 when one batch already reaches it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return high * batch


def _levels(state: dict[str, Any]) -> dict[tuple[str, str], float]:
    """α per comparison of each (task, variant) group: α / pairs of the policies it has."""
    alpha = float(state["design"]["alpha"])
    policies: dict[tuple[str, str], set[str]] = {}
    for cell in state.get("cells", ()):
        policies.setdefault((cell["task"], cell["variant"]), set()).add(cell["policy"])
    return {group: alpha / max(1, len(names) * (len(names) - 1) // 2) for group, names in policies.items()}


def equal_power_view(state: dict[str, Any]) -> dict[str, Any] | None:
    """The equal-power reading of a saved adaptive state (``adaptive.json``); None for goals that test nothing.

    ``fixed_equal_power`` is the episodes of the exact fixed-n designs of the power each group's
    comparisons reach under the cap (every cell of the group at that many pairs), and
    ``saved_equal_power`` = 1 − used / that, None (``comparable`` False) when a group's cap reaches a power of at
    most α (its yardstick is 0 pairs: the test's size, reached with no information); ``fixed_requested`` and
    ``saved_requested`` the same for the exact fixed-n design of the *requested* power (the one yardstick both
    readings use: exact McNemar, not the approximate ``episodes_fixed`` that ``adaptive.json`` keeps);
    ``powers`` one :class:`DesignPower` per level (with the expected pairs at δ and at no difference).
    """
    design = state["design"]
    if design["goal"] not in TESTING_GOALS:
        return None
    endpoint = design.get("endpoint", "success")
    powers: dict[float, DesignPower] = {}
    fixed = requested = 0
    for (task, variant), level in sorted(_levels(state).items()):
        if level not in powers:
            powers[level] = design_power(level, float(design["delta"]), int(design["max_episodes"]),
                                         int(design["batch"]), str(design["method"]), float(design["power"]),
                                         endpoint)
        cells = sum(1 for c in state.get("cells", ()) if c["task"] == task and c["variant"] == variant)
        fixed += cells * powers[level].fixed_n_equal_power
        requested += cells * powers[level].fixed_n_requested
    used = int(state["episodes_used"])
    reachable = all(p.reachable for p in powers.values())
    warning = None if reachable else (
        f"the cap of {design['max_episodes']} pairs cannot reach the requested power {design['power']} at delta "
        f"{design['delta']}: it reaches " + ", ".join(f"{p.reached:.2f} (alpha {p.level:.3g})" for p in powers.values())
        + "; savings are read against the fixed-n design of the power reached")
    # a level whose power is at most α has a yardstick of 0 pairs: nothing to save against, not "0% saved"
    comparable = all(p.reached > p.level for p in powers.values())
    return {"fixed_equal_power": fixed, "comparable": comparable,
            "saved_equal_power": 1.0 - used / fixed if comparable and fixed else None,
            "fixed_requested": requested, "saved_requested": 1.0 - used / requested if requested else 0.0,
            "reachable": reachable, "warning": warning, "powers": [p.to_dict() for p in powers.values()]}


__all__ = ["CAMPAIGNS", "DesignPower", "cap_for_power", "design_power", "equal_power_view", "exact_power"]
