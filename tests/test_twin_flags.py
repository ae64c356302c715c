"""A named layer whose calibration closes none of the success gap is flagged, not counted as a clean hit."""

from __future__ import annotations


def _attribution(nominal_gap: float, calibrated_gap: float, closures: dict[str, float]):
    from assay.twin.attribution import Attribution, ConfigScore, LayerShare

    configs = tuple(ConfigScore(label, label, {}, gap, None, None, 0.0)
                    for label, gap in (("nominal", nominal_gap), ("calibrated", calibrated_gap)))
    layers = tuple(LayerShare(layer, True, c, c, None, closure=c, closure_interval=(c - 0.1, c + 0.1), named=c > 0.1)
                   for layer, c in closures.items())
    return Attribution("t@1", "c", ("expert",), {}, configs, layers, nominal_gap - calibrated_gap, None)


def test_a_named_layer_whose_calibration_closes_none_of_the_success_gap_is_flagged():
    from assay.twin.attribution import unclosed

    # pick-place gain 0.6 + damping 5 at 240 replays: the states named both layers, the success gap stayed
    wrong_fit = _attribution(0.5, 0.5, {"control": 0.0, "dynamics": -0.05, "rendering": 0.0})
    flagged = unclosed(wrong_fit, {"success": (), "state": ("control", "dynamics")})
    assert sorted(flagged) == ["control", "dynamics"]
    assert flagged["control"] == ("named by the states but its calibration closes none of the success gap "
                                  "(nominal 0.500 -> calibrated 0.500; its closure +0.000 [-0.100, +0.100]): "
                                  "the fit may be wrong")
    # a layer that closes part of the gap is a clean hit; with no nominal gap there is nothing to close
    right_fit = _attribution(0.5, 0.1, {"control": 0.25, "dynamics": 0.15, "rendering": 0.0})
    assert unclosed(right_fit, {"success": ("control", "dynamics"), "state": ("control", "dynamics")}) == {}
    assert unclosed(_attribution(0.0, 0.0, {"control": 0.0}), {"state": ("control",)}) == {}


def test_blind_result_counts_flagged_layers_out_of_the_clean_hits():
    from assay.twin.blind import BlindResult

    result = BlindResult({}, ("control", "dynamics"), {}, {}, {}, None, {}, ("control", "dynamics"), "control",
                         named_by={"state": ("control", "dynamics")}, flagged={"dynamics": "closes nothing"})
    assert result.clean == ("control",) and result.to_dict()["clean"] == ["control"]
