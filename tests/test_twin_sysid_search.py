"""The sysid search on known answers (no simulator): a replay whose residuals are a known function of the twin's
values. Screening, coordinate refinement from the best single-factor fits, and the two ways a search can end
short of the tolerance: stalled at a local optimum (more replays will not help) or out of replays while falling."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from assay.twin import Twin, nominal_twin
from assay.twin.sysid import DEFAULT_PARAMETERS, DEFAULT_TOLERANCE, check_parameters, fit

TASK = "metaworld/pick-place@1"
ALL = check_parameters(DEFAULT_PARAMETERS)


class KnownReplay:
    """Residuals (metres, over 50 'steps') given by ``error(values)``: the twin's factor values (defaults filled)."""

    def __init__(self, error: Callable[[dict[str, float]], np.ndarray]) -> None:
        from assay.sim import FACTORS

        self.error, self.evaluations, self.trajectories, self.announce = error, 0, [None, None], None
        self.defaults = {name: FACTORS[name].default for name in DEFAULT_PARAMETERS}

    def residuals(self, twin: Twin) -> tuple[np.ndarray, np.ndarray]:
        self.evaluations += 1
        error = np.tile(self.error({**self.defaults, **twin.values()}), 50)
        return error, np.linspace(0.0, 0.1, error.size)

    def discrepancy(self, twin: Twin) -> tuple[float, float | None]:
        error, _ = self.residuals(twin)
        return float(np.sqrt(np.mean(error ** 2))), None


def _friction(truth: float) -> Callable[[dict[str, float]], np.ndarray]:
    # a friction change moves the object only: 0.004 m per log unit (the 0.0046 m before the fit)
    return lambda v: np.array([0.004 * (math.log(v["friction"]) - math.log(truth)), 0.0])


def test_one_factor_among_all_seven_is_found_exactly():
    """The issue's reality: friction 0.12, every control and dynamics factor fitted. 0.12 lies between two points of
    the coarse grid (0.10 and 0.153, where the old search stayed); screening refines it to 0.1200 and stops."""
    result = fit(KnownReplay(_friction(0.12)), nominal_twin(TASK), ALL)
    assert result.status == "converged" and result.converged and result.residual_after <= DEFAULT_TOLERANCE
    assert result.fitted["friction"] == pytest.approx(0.12, rel=2e-3)
    assert {k: v for k, v in result.fitted.items() if k != "friction"} == {k: v for k, v in result.start.items()
                                                                           if k != "friction"}
    assert result.found == ("friction",) and result.screening["friction"]["rms"] <= DEFAULT_TOLERANCE
    assert result.warnings == () or all("stalled" not in w and "raise" not in w for w in result.warnings)
    low, high = result.intervals["friction"]
    assert low < 0.12 < high


def test_two_factors_that_trade_off_are_refined_together_to_the_truth():
    """Gain 0.6 + damping 5 with correlated effects: neither alone explains the data; screening finds both and the
    refinement from the best single-factor fit reaches the truth within the tolerance."""
    def error(v: dict[str, float]) -> np.ndarray:
        g, d = math.log(v["control.gain"]) - math.log(0.6), v["joint.damping"] - 5.0
        return np.array([0.02 * g + 0.001 * d, 0.01 * g - 0.002 * d, 0.015 * g + 0.0005 * d])

    result = fit(KnownReplay(error), nominal_twin(TASK), ALL)
    assert result.status == "converged", result.warnings
    assert result.fitted["control.gain"] == pytest.approx(0.6, rel=0.02)
    assert result.fitted["joint.damping"] == pytest.approx(5.0, abs=0.15)
    assert set(result.found) == {"control.gain", "joint.damping"}
    assert result.fitted["friction"] == 1.0 and result.fitted["control.latency"] == 0


def test_a_null_reality_moves_nothing():
    replay = KnownReplay(lambda v: np.array([0.0, 0.0]))
    result = fit(replay, nominal_twin(TASK), ALL)
    assert result.status == "converged" and result.fitted == result.start and result.residual_after == 0.0
    assert result.optima == () and result.found == ()


def test_an_integer_factor_is_screened_by_its_profile():
    result = fit(KnownReplay(lambda v: np.array([0.003 * (v["control.latency"] - 3), 0.0])), nominal_twin(TASK),
                 ALL)
    assert result.status == "converged" and result.fitted["control.latency"] == 3 and result.found == (
        "control.latency",)


def test_a_local_optimum_is_reported_as_stalled_with_its_competitors_never_as_a_budget_problem():
    """Friction's residual has a narrow global basin at 0.3 (0 m) that no coarse grid point reaches and a wide local
    one at 2.0 (0.002 m, 4x the tolerance): the search ends there, says it stalled at a local optimum, lists the
    optima it reached with their residuals, and does not ask for more replays."""
    def error(v: dict[str, float]) -> np.ndarray:
        x = math.log(v["friction"])
        value = min(0.002 + 0.001 * abs(x - math.log(2.0)), 0.5 * abs(x - math.log(0.3)))
        return np.array([value, value])

    result = fit(KnownReplay(error), nominal_twin(TASK), ALL, max_evaluations=800)
    assert result.status == "stalled" and not result.converged
    assert result.fitted["friction"] == pytest.approx(2.0, rel=0.01) and result.evaluations < 800
    (warning,) = [w for w in result.warnings if w.startswith("stalled at a local optimum")]
    assert "competing optima: {friction 2}: 0.002 m" in warning and "More replays will not lower it" in warning
    assert "raise" not in warning and "max-evaluations" not in warning
    assert result.optima and result.optima[0]["rms"] == pytest.approx(0.002, rel=1e-3)


def test_a_search_out_of_replays_while_falling_asks_for_more():
    def error(v: dict[str, float]) -> np.ndarray:
        g, d = math.log(v["control.gain"]) - math.log(0.6), v["joint.damping"] - 5.0
        return np.array([0.02 * g + 0.001 * d, 0.01 * g - 0.002 * d])

    result = fit(KnownReplay(error), nominal_twin(TASK), ALL, max_evaluations=60)
    assert result.status == "budget" and not result.converged
    assert any("spent its maximum of 60 replays while the residual was still falling" in w and "--max-evaluations" in w
               for w in result.warnings)
