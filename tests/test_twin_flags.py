"""A named layer whose calibration closes none of the success gap beyond noise is flagged, not counted as a clean
hit, and never the attributed layer: in the library, in the blind protocol's result and in ``twin attribute``."""

from __future__ import annotations

import pytest

from assay.twin.attribution import Attribution, ConfigScore, LayerShare


def golden_attribution(nominal_gap: float, calibrated_gap: float,
                       closures: dict[str, tuple[float, tuple[float, float]]],
                       gap_p: float | None = 0.001) -> Attribution:
    """An attribution of one policy (``expert``) with the given gaps and per-layer closures (point, interval); a
    layer is named by the success counts when its interval's lower bound is above 0, as ``attribute`` names it.
    ``gap_p``: the nominal gap's significance (a significant gap unless told otherwise)."""
    from assay.twin.attribution import with_flags

    labels = ("nominal", "+control", "+dynamics", "+rendering", "calibrated", "-control", "-dynamics", "-rendering")
    gaps = {label: nominal_gap if label.startswith("+") or label == "nominal" else calibrated_gap for label in labels}
    configs = tuple(ConfigScore(label, label, {"expert": 1.0 - gaps[label]}, gaps[label], None, "k < 3", 0.0,
                                (gaps[label], gaps[label])) for label in labels)
    layers = tuple(LayerShare(layer, True, c, c, None, closure=c, closure_interval=interval, named=interval[0] > 0)
                   for layer, (c, interval) in closures.items())
    named = tuple(x.layer for x in layers if x.named)
    result = Attribution("metaworld/push@1", "c", ("expert",), {"expert": 0.0}, configs, layers,
                         nominal_gap - calibrated_gap, None, named, nominal_gap_p=gap_p)
    return with_flags(result, {"success": named})


def test_a_named_layer_whose_calibration_closes_none_of_the_success_gap_is_flagged():
    from assay.twin.attribution import unclosed

    # pick-place gain 0.6 + damping 5 at 240 replays: the states named both layers, the success gap stayed
    wrong_fit = golden_attribution(0.5, 0.5, {"control": (0.0, (-0.1, 0.1)), "dynamics": (-0.05, (-0.15, 0.05)),
                                              "rendering": (0.0, (0.0, 0.0))})
    flagged = unclosed(wrong_fit, {"success": (), "state": ("control", "dynamics")})
    assert sorted(flagged) == ["control", "dynamics"]
    assert flagged["control"] == ("named by the states but its calibration closes none of the success gap beyond "
                                  "noise (nominal 0.500 -> calibrated 0.500; its closure +0.000 [-0.100, +0.100], "
                                  "lower bound <= 0; the nominal gap is significant, p = 0.001): the fit may be wrong")
    # a layer that closes part of the gap beyond noise is a clean hit; with no nominal gap there is nothing to close
    right_fit = golden_attribution(0.5, 0.1, {"control": (0.25, (0.15, 0.35)), "dynamics": (0.15, (0.05, 0.25)),
                                              "rendering": (0.0, (0.0, 0.0))})
    assert unclosed(right_fit, {"success": ("control", "dynamics"), "state": ("control", "dynamics")}) == {}
    assert unclosed(golden_attribution(0.0, 0.0, {"control": (0.0, (0.0, 0.0))}), {"state": ("control",)}) == {}


def test_the_flag_reads_the_closure_interval_not_only_its_point():
    from assay.twin.attribution import unclosed

    # a positive point closure whose interval reaches below 0 closes nothing beyond noise: flagged (it was not,
    # when only the point estimate was read)
    noisy = golden_attribution(0.5, 0.4, {"control": (0.05, (-0.05, 0.15)), "dynamics": (0.0, (0.0, 0.0)),
                                          "rendering": (0.0, (0.0, 0.0))})
    flags = unclosed(noisy, {"state": ("control",)})
    assert list(flags) == ["control"] and "its closure +0.050 [-0.050, +0.150], lower bound <= 0" in flags["control"]
    # a lower bound of exactly 0 is not beyond noise either
    edge = golden_attribution(0.5, 0.4, {"control": (0.1, (0.0, 0.2))})
    assert list(unclosed(edge, {"state": ("control",)})) == ["control"]


def test_a_flagged_layer_is_never_the_attributed_one():
    from assay.twin.attribution import with_flags

    # control closes the success gap beyond noise; dynamics is named by the states alone and closes none of it
    result = golden_attribution(0.5, 0.2, {"control": (0.3, (0.1, 0.5)), "dynamics": (0.02, (-0.1, 0.12)),
                                           "rendering": (0.0, (0.0, 0.0))})
    assert result.named == ("control",) and result.attributed == "control" and result.flagged == {}
    both = with_flags(result, {"success": ("control",), "state": ("control", "dynamics")})
    assert list(both.flagged) == ["dynamics"] and both.attributed == "control"
    assert both.to_dict()["flagged"] == both.flagged
    # a success-named layer whose point closure is <= 0 (a percentile interval that excludes its own point) is
    # flagged too, and the attribution then names the next clean layer, or none
    odd = golden_attribution(0.5, 0.3, {"control": (-0.01, (0.02, 0.3)), "dynamics": (0.1, (0.05, 0.2)),
                                        "rendering": (0.0, (0.0, 0.0))})
    assert odd.named == ("control", "dynamics") and list(odd.flagged) == ["control"] and odd.attributed == "dynamics"
    alone = golden_attribution(0.5, 0.3, {"control": (-0.01, (0.02, 0.3))})
    assert list(alone.flagged) == ["control"] and alone.attributed is None


def test_blind_result_counts_flagged_layers_out_of_the_clean_hits():
    from assay.twin.blind import BlindResult

    result = BlindResult({}, ("control", "dynamics"), {}, {}, {}, None, {}, ("control", "dynamics"), "control",
                         named_by={"state": ("control", "dynamics")}, flagged={"dynamics": "closes nothing"})
    assert result.clean == ("control",) and result.to_dict()["clean"] == ["control"]


def test_an_unclosed_flag_needs_a_significant_nominal_gap():
    """The issue's case: an exact latency fit, named by the states, with a nominal gap of 1 in 10 (nominal 9/10,
    real 10/10: Fisher p = 1). The calibration cannot be seen to close a gap within noise, so nothing is flagged
    and the layer stays a clean hit; the same closure against a significant gap is flagged."""
    from assay.metrics.results_csv import RateEntry
    from assay.twin.attribution import nominal_gap_p, unclosed

    sim = {"expert": RateEntry("t", "expert", 0.9, 9, 10)}
    real = {"expert": RateEntry("t", "expert", 1.0, 10, 10)}
    assert nominal_gap_p(sim, real) == 1.0
    one_in_ten = golden_attribution(0.1, 0.1, {"control": (0.0, (-0.1, 0.1))}, gap_p=nominal_gap_p(sim, real))
    assert unclosed(one_in_ten, {"state": ("control",)}) == {} and one_in_ten.flagged == {}
    unknown = golden_attribution(0.1, 0.1, {"control": (0.0, (-0.1, 0.1))}, gap_p=None)  # a rates-only real CSV
    assert unclosed(unknown, {"state": ("control",)}) == {}
    # 2 of 20 in sim against 18 of 20 real, two policies (Holm: twice the smaller p), is significant
    far = {"a": RateEntry("t", "a", 0.1, 2, 20), "b": RateEntry("t", "b", 0.5, 10, 20)}
    truth = {"a": RateEntry("t", "a", 0.9, 18, 20), "b": RateEntry("t", "b", 0.5, 10, 20)}
    from scipy import stats

    expected = 2 * stats.fisher_exact([[2, 18], [18, 2]]).pvalue
    assert nominal_gap_p(far, truth) == pytest.approx(expected) and expected < 1e-5
    significant = golden_attribution(0.4, 0.4, {"control": (0.0, (-0.1, 0.1))}, gap_p=expected)
    assert list(unclosed(significant, {"state": ("control",)})) == ["control"]
    assert nominal_gap_p(far, {"a": RateEntry("t", "a", 0.9), "b": RateEntry("t", "b", 0.5)}) is None  # no counts
