"""Ranking stability under asset swaps: does the leaderboard survive K variants of the twin's assets?

The base twin's leaderboard is the reference; each swap replaces or adds rendering
values (textures/colours, lighting, camera placement) on top of the base twin,
runs the same policies on the same paired seeds, and is compared with
:func:`assay.metrics.stability.stability` (Kendall τ-b and MMRV, with Pearson and
Spearman beside them). A swap may only touch the rendering layer: an asset swap
that changed dynamics would be a different robot cell, not a different rendering of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from assay.errors import TwinError
from assay.metrics.stability import stability
from assay.run import Executor
from assay.serialize import DictMixin
from assay.store import Store
from assay.twin.config import Layer, Twin, layer_of
from assay.twin.running import TwinSettings, content_campaign, run_twins


@dataclass(frozen=True)
class SwapResult:
    """One asset swap's twin: its values, each policy's success rate under it, and its ranking agreement with the base.
    """

    name: str
    version: str
    values: dict[str, Any]
    rates: dict[str, float]
    kendall: float | None
    kendall_reason: str | None
    mmrv: float | None


@dataclass(frozen=True)
class StabilityReport(DictMixin):
    """Whether the twin's policy ranking survives asset swaps: the base rates, every swap, and the worst agreement."""

    task: str
    base_version: str
    base_rates: dict[str, float]
    swaps: tuple[SwapResult, ...]
    min_kendall: float | None
    max_mmrv: float | None


def swap_twins(base: Twin, swaps: Sequence[dict[str, Any]]) -> list[Twin]:
    """The base twin with each swap's rendering values applied on top."""
    out = []
    for index, values in enumerate(swaps):
        for factor in values:
            if layer_of(factor) is not Layer.RENDERING:
                raise TwinError(f"asset swap {index + 1}: {factor} is a {layer_of(factor).value} factor; "
                                "an asset swap may change rendering factors only (light.*, camera.*, *.color)")
        rendering = {**base.rendering, **values}
        out.append(base.with_layer(Layer.RENDERING, rendering, f"swap-{index + 1}"))
    return out


def asset_stability(base: Twin, swaps: Sequence[dict[str, Any]], settings: TwinSettings, store: Store,
                    campaign: str = "twin-stability", executor: Executor | None = None,
                    n_resamples: int = 500) -> StabilityReport:
    """Run the base twin and each swap, and compare every swap's policy ranking with the base's (Kendall, MMRV)."""
    if not swaps:
        raise TwinError("ranking stability needs at least one asset swap")
    twins = swap_twins(base, swaps)
    campaign = content_campaign(campaign, [base, *twins], settings)  # several base twins coexist in one store
    results = run_twins(campaign, [base, *twins], settings, store, executor)
    reference = results[base.version]
    out = []
    for twin, values in zip(twins, swaps, strict=True):
        other = results[twin.version]
        report = stability(reference, other, ("base", twin.name), n_resamples=n_resamples)
        kendall = report.suite["kendall"]
        out.append(SwapResult(twin.name, twin.version, dict(values), {e.policy: e.rate for e in other},
                              kendall["value"], kendall["reason"], report.suite["mmrv"]["value"]))
    taus = [s.kendall for s in out if s.kendall is not None]
    mmrvs = [s.mmrv for s in out if s.mmrv is not None]
    return StabilityReport(base.task, base.version, {e.policy: e.rate for e in reference}, tuple(out),
                           min(taus) if taus else None, max(mmrvs) if mmrvs else None)
