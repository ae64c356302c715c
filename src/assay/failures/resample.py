"""Targeted resampling: the neighbourhood of a failure, to estimate the local failure rate.

A failure under a variant is one draw; the question is whether it sits in a region
where the policy fails often. ``neighbourhood`` proposes variants near the failed
one: every numeric factor moves uniformly within ±``radius`` of its valid range
(clipped to it), choice factors stay. :func:`nearest_seeds` gives the
neighbourhood over initial conditions: of a pool of fresh seeds, those whose
initial conditions (each reset's ``rand_vec``: object and goal positions) lie
nearest the failure's. ``assay failures resample`` runs every variant on those
seeds, so the local rate covers both the factor region and the initial
conditions around the failure; a nominal failure has no factor to move, so its
neighbourhood is ``samples x seeds`` nearby initial conditions instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.sim import get_factor, make_env, perturbed
from assay.sim.factors import Kind
from assay.spec import TaskSpec, Variant, derive_seed

POOL_PER_SEED = 10  # candidate seeds drawn per seed kept


def nearest_seeds(task: TaskSpec, variant: Variant, target: Sequence[float], count: int, seed: int,
                  exclude: int | None = None) -> list[tuple[int, float]]:
    """``count`` (seed, distance) pairs whose initial conditions lie nearest ``target``, from a pool of
    ``POOL_PER_SEED x count`` fresh seeds (deterministic for ``seed``), nearest first."""
    if not target:
        raise AssayError("the episode recorded no initial conditions to resample around")
    env = perturbed(make_env(task.model_copy(update={"cameras": []})), variant)
    goal = np.asarray(target, dtype=np.float64)
    found: list[tuple[float, int]] = []
    try:
        for i in range(POOL_PER_SEED * count):
            candidate = derive_seed("resample-initial", seed, i)
            if candidate == exclude:
                continue
            env.reset(candidate)
            values = np.asarray(env.initial_conditions().get("rand_vec", []), dtype=np.float64)
            if values.shape != goal.shape:
                continue
            found.append((float(np.linalg.norm(values - goal)), candidate))
    finally:
        env.close()
    return [(s, round(d, 6)) for d, s in sorted(found)[:count]]


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
