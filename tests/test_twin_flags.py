"""A named layer whose calibration closes none of the success gap beyond noise is flagged, not counted as a clean
hit, and never the attributed layer: in the library, in the blind protocol's result and in ``twin attribute``."""

from __future__ import annotations

from assay.twin.attribution import Attribution, ConfigScore, LayerShare


def golden_attribution(nominal_gap: float, calibrated_gap: float,
                       closures: dict[str, tuple[float, tuple[float, float]]]) -> Attribution:
    """An attribution of one policy (``expert``) with the given gaps and per-layer closures (point, interval); a
    layer is named by the success counts when its interval's lower bound is above 0, as ``attribute`` names it."""
    from assay.twin.attribution import with_flags

    labels = ("nominal", "+control", "+dynamics", "+rendering", "calibrated", "-control", "-dynamics", "-rendering")
    gaps = {label: nominal_gap if label.startswith("+") or label == "nominal" else calibrated_gap for label in labels}
    configs = tuple(ConfigScore(label, label, {"expert": 1.0 - gaps[label]}, gaps[label], None, "k < 3", 0.0,
                                (gaps[label], gaps[label])) for label in labels)
    layers = tuple(LayerShare(layer, True, c, c, None, closure=c, closure_interval=interval, named=interval[0] > 0)
                   for layer, (c, interval) in closures.items())
    named = tuple(x.layer for x in layers if x.named)
    result = Attribution("metaworld/push@1", "c", ("expert",), {"expert": 0.0}, configs, layers,
                         nominal_gap - calibrated_gap, None, named)
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
                                  "lower bound <= 0): the fit may be wrong")
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
