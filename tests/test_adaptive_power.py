"""The power an adaptive comparison reaches under its cap, against a brute-force simulation of the stopping rule
campaigns actually apply, and the equal-power fixed-n yardstick savings are read against."""

from __future__ import annotations

import math

import numpy as np
import pytest

from assay.metrics.adaptive_power import cap_for_power, design_power, equal_power_view, exact_power
from assay.metrics.budget import mcnemar_power
from assay.metrics.comparisons import mcnemar_exact
from assay.metrics.sequential import DECIDED, compare_stop
from assay.metrics.sequential_evidence import draw_pairs, look_points

CAMPAIGNS = 300


def _brute_force(level: float, delta: float, cap: int, method: str, futility: bool, seed: int) -> tuple[float, float]:
    """(share decided, mean pairs) over campaigns run one by one through compare_stop, the function campaigns use."""
    a, b = draw_pairs(0.5, 0.5 - delta, CAMPAIGNS, cap, seed)
    looks = look_points(8, cap).tolist()
    decided, pairs = 0, 0
    for x, y in zip(a, b, strict=True):
        result = compare_stop(x, y, alpha=level, delta=delta, max_pairs=cap, method=method, futility=futility,
                              looks=looks, final=True)
        assert result is not None
        decided += result.reason == DECIDED
        pairs += result.pairs
    return decided / CAMPAIGNS, pairs / CAMPAIGNS


@pytest.mark.parametrize(("delta", "cap", "method"), [(0.3, 24, "lattice"), (0.2, 48, "lattice"),
                                                      (0.3, 48, "mixture"), (0.2, 40, "mixture")])
def test_exact_power_and_pairs_agree_with_brute_force_simulation(delta, cap, method):
    power, pairs = exact_power(0.05, delta, cap, 8, method)
    se = math.sqrt(power * (1 - power) / CAMPAIGNS)
    seen, seen_pairs = _brute_force(0.05, delta, cap, method, futility=False, seed=cap)
    assert abs(seen - power) <= 3.5 * se + 1e-9
    assert abs(seen_pairs - pairs) <= 0.05 * cap
    # the whole rule, futility stop included, never beats the rejection region alone beyond the noise
    full, full_pairs = _brute_force(0.05, delta, cap, method, futility=True, seed=cap)
    assert full <= power + 3.5 * se and full_pairs <= pairs + 0.05 * cap


def test_exact_power_is_exact_on_a_tiny_design_by_enumeration():
    # cap 8, one look at 8 pairs: every one of the 3^8 paths (A only, B only, concordant) enumerated by hand
    from itertools import product

    from assay.metrics.sequential import lattice_boundary

    boundary = lattice_boundary(0.2, 0.5, 8)
    p = {"a": 0.5 * 0.9, "b": 0.1 * 0.5, "c": 1 - 0.5 * 0.9 - 0.1 * 0.5}  # rates 0.5 vs 0.1
    total = 0.0
    for path in product("abc", repeat=8):
        s, f = path.count("a"), path.count("b")
        if boundary.rejects(s, f):
            total += math.prod(p[x] for x in path)
    assert exact_power(0.2, 0.5, 8, 8, "lattice", 0.5, 0.1)[0] == pytest.approx(total, abs=1e-12)


def test_the_equal_power_yardstick_is_the_exact_mcnemar_design_of_the_power_reached():
    for delta, cap in ((0.2, 48), (0.3, 24), (0.1, 200)):
        reached = design_power(0.05, delta, cap, 8, "lattice", 0.8)
        n = reached.fixed_n_equal_power
        psi = 0.5  # rates 0.5 and 0.5 − δ, independent: the planning point of both designs
        assert mcnemar_power(n, (psi + delta) / 2, (psi - delta) / 2) >= reached.reached
        assert mcnemar_power(n - 1, (psi + delta) / 2, (psi - delta) / 2) < reached.reached
        # brute force: the fixed-n design of that many pairs, run through the p-value compare computes
        a, b = draw_pairs(0.5, 0.5 - delta, CAMPAIGNS, n, seed=7)
        rejected = np.mean([mcnemar_exact(int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1))))
                            < 0.05 for x, y in zip(a, b, strict=True)])
        assert abs(rejected - reached.reached) <= 3.5 * math.sqrt(reached.reached * (1 - reached.reached) / CAMPAIGNS)


def test_the_demos_cap_reaches_a_third_of_its_power_and_its_saving_is_read_at_that_power():
    # examples/adaptive_demo_compare.yaml: cap 200 pairs, "power 0.8" at delta 0.1, lattice test, batch 8
    reached = design_power(0.05, 0.1, 200, 8, "lattice", 0.8)
    assert reached.reached == pytest.approx(0.3302, abs=1e-4) and not reached.reachable
    assert (reached.fixed_n_requested, reached.fixed_n_equal_power) == (408, 134)
    design = {"goal": "compare", "alpha": 0.05, "power": 0.8, "delta": 0.1, "max_episodes": 200, "batch": 8,
              "method": "lattice"}
    cells = [{"task": t, "variant": "nominal", "policy": p} for t in ("d", "p", "r") for p in ("expert", "shaky")]
    view = equal_power_view({"design": design, "cells": cells, "episodes_used": 448})
    assert view is not None and view["fixed_equal_power"] == 6 * 134
    assert view["saved_equal_power"] == pytest.approx(1 - 448 / 804)  # 44%, not the 81% read at power 0.8
    assert "cannot reach the requested power 0.8" in view["warning"]
    # rank: three policies, every pair at alpha / 3
    ranked = equal_power_view({"design": {**design, "goal": "rank"}, "episodes_used": 648,
                               "cells": [{"task": t, "variant": "nominal", "policy": p} for t in ("d", "p", "r")
                                         for p in ("expert", "shaky", "random")]})
    third = design_power(0.05 / 3, 0.1, 200, 8, "lattice", 0.8)
    assert ranked is not None and ranked["fixed_equal_power"] == 9 * third.fixed_n_equal_power
    assert equal_power_view({"design": {**design, "goal": "interval"}, "cells": cells, "episodes_used": 1}) is None


def test_a_cap_that_reaches_its_power_is_found_and_no_warning_is_given():
    cap = cap_for_power(0.05, 0.3, 8, "lattice", 0.8)
    assert cap is not None and cap % 8 == 0
    assert design_power(0.05, 0.3, cap, 8, "lattice", 0.8).reachable
    assert not design_power(0.05, 0.3, cap - 8, 8, "lattice", 0.8).reachable


def test_run_warns_before_spending_episodes_when_the_cap_cannot_reach_the_power():
    from assay.cli.adaptive_render import power_warning
    from assay.spec.loading import campaign_from_data

    data = {"name": "weak", "seed": 0, "tasks": ["metaworld/reach@1"], "policies": ["expert", "random"],
            "adaptive": {"goal": "compare", "delta": 0.3, "max_episodes": 16, "batch": 8}}
    warning = power_warning(campaign_from_data(data, "weak.yaml"))
    cap = cap_for_power(0.05, 0.3, 8, "lattice", 0.8)
    assert warning is not None and "cannot reach the requested power 0.8 at delta 0.3" in warning
    assert f"max_episodes {cap} reaches it" in warning
    enough = {**data, "adaptive": {**data["adaptive"], "max_episodes": cap}}
    assert power_warning(campaign_from_data(enough, "ok.yaml")) is None


def test_one_exact_yardstick_in_the_text_and_the_report_with_the_expected_pairs():
    """The requested power's line reads the exact McNemar design (408 pairs a cell at delta 0.1, power 0.8), as the
    equal-power line does, not the approximate 391 that adaptive.json keeps as episodes_fixed; both outputs print
    the expected pairs at delta and at no difference."""
    from assay.cli.adaptive_render import saved_lines
    from assay.report.html import _adaptive_saved

    design = {"goal": "compare", "alpha": 0.05, "power": 0.8, "delta": 0.1, "max_episodes": 200, "batch": 8,
              "method": "lattice"}
    cells = [{"task": t, "variant": "nominal", "policy": p} for t in ("d", "p", "r") for p in ("expert", "shaky")]
    state = {"design": design, "cells": cells, "episodes_used": 448, "episodes_fixed": 6 * 391,
             "saved": 1 - 448 / (6 * 391)}
    view = equal_power_view(state)
    assert view is not None and (view["fixed_requested"], view["fixed_equal_power"]) == (6 * 408, 6 * 134)
    assert view["saved_requested"] == pytest.approx(1 - 448 / 2448)
    lines = saved_lines(state)
    assert lines[:3] == [
        "episodes used 448 against 804 for the exact fixed-n McNemar design of the power this cap of 200 pairs reaches "
        "at delta 0.1 (0.330 (exact) at alpha 0.05): 44% saved at equal power and alpha",
        "against the exact fixed-n McNemar design of the requested power 0.8 (paired McNemar at (α, power, δ), 2448 "
        "episodes): 82%, a power this design does not reach",
        "expected pairs per comparison at alpha 0.05: 180.7 at delta 0.1, 198.8 at no difference (upper bounds: the "
        "futility stop is left out); fixed-n 134 at the power reached, 408 at the power requested"]
    assert "2346" not in " ".join(lines) and lines[3].startswith("[yellow]warning:[/] the cap of 200 pairs")
    report = str(_adaptive_saved(state))
    assert ("Against the exact fixed-n McNemar design of the requested power 0.8 (paired McNemar at (α, power, δ), "
            "2448 episodes): 82%, a power this design does not reach.") in report
    assert ("<p>Expected pairs per comparison at α 0.05: 180.7 at δ 0.1, 198.8 at no difference (upper bounds: the "
            "futility stop is left out); fixed-n 134 at the power reached, 408 at the power requested.</p>") in report
    assert "<b>804</b>" in report and "2346" not in report


def test_a_cap_whose_power_is_at_most_alpha_saves_nothing_comparable():
    """Cap 8 at delta 0.1 reaches power 0.007 < alpha: its equal-power yardstick is 0 pairs, so the savings read
    "not comparable", never "0% saved", in the text and the report."""
    from assay.cli.adaptive_render import saved_lines
    from assay.report.html import _adaptive_saved

    assert design_power(0.05, 0.1, 8, 8, "lattice", 0.8).fixed_n_equal_power == 0
    design = {"goal": "compare", "alpha": 0.05, "power": 0.8, "delta": 0.1, "max_episodes": 8, "batch": 8,
              "method": "lattice"}
    state = {"design": design, "cells": [{"task": "d", "variant": "nominal", "policy": p} for p in ("a", "b")],
             "episodes_used": 16, "episodes_fixed": 2 * 391, "saved": 1 - 16 / 782}
    view = equal_power_view(state)
    assert view is not None and not view["comparable"] and view["saved_equal_power"] is None
    first = saved_lines(state)[0]
    assert first.endswith("not comparable: the cap's power is ≤ α") and "saved" not in first.split(":")[-1]
    report = str(_adaptive_saved(state))
    assert "not comparable: the cap&#39;s power is ≤ α" in report or "not comparable: the cap's power is ≤ α" in report
    assert "0% saved at equal power" not in report
    reaching = equal_power_view({**state, "design": {**design, "max_episodes": 200}})
    assert reaching is not None and reaching["comparable"] and reaching["saved_equal_power"] is not None
