"""Targeted resampling: the neighbourhood of a failure, to estimate the local failure rate.

A failure under a variant is one draw; the question is whether it sits in a region
where the policy fails often. ``neighbourhood`` proposes variants near the failed
one: every numeric factor moves uniformly within ±``radius`` of its valid range
(clipped to it), choice factors stay; the campaign that runs them (``assay failures
resample``) pairs each with fresh seeds, so the local rate covers both the factor
region and the initial conditions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.sim import get_factor
from assay.sim.factors import Kind
from assay.spec import derive_seed


def variant_request(variant: dict[str, Any]) -> dict[str, Any]:
    """The ``{factor: value}`` request that reproduces a recorded variant."""
    return {p["factor"]: p["value"] for p in variant.get("perturbations", [])}


def neighbourhood(request: dict[str, Any], radius: float, samples: int, seed: int) -> list[dict[str, Any]]:
    """``samples`` requests near ``request`` (deterministic for ``seed``); nominal has no factor to move."""
    if not 0 < radius <= 1:
        raise AssayError(f"--radius {radius} is not valid; valid: (0, 1], a fraction of each factor's range")
    rng = np.random.default_rng(derive_seed("resample", seed))
    neighbours: list[dict[str, Any]] = []
    for _ in range(samples):
        moved: dict[str, Any] = {}
        for name, value in request.items():
            factor = get_factor(name)
            span = radius * (factor.high - factor.low)
            if factor.kind is Kind.CHOICE:
                moved[name] = value
            elif factor.kind is Kind.RGB:
                moved[name] = [float(np.clip(v + rng.uniform(-span, span), factor.low, factor.high)) for v in value]
            else:
                shifted = float(np.clip(value + rng.uniform(-span, span), factor.low, factor.high))
                moved[name] = int(round(shifted)) if factor.kind is Kind.INT else round(shifted, 6)
        neighbours.append(moved)
    return neighbours
