"""Gap attribution: which layer of the twin closes how much of the sim-to-real gap.

Inputs are only what a real lab has: the real per-policy success counts (a
results CSV), the nominal twin and a calibrated twin (fitted control and dynamics,
measured rendering). From them the configurations

* ``nominal``; ``+layer`` (nominal with one calibrated layer swapped in), for each layer;
* ``calibrated``; ``-layer`` (calibrated with one layer left out, i.e. nominal), for each layer

are run on the same paired seeds, and each is scored against the real rates:
the gap (mean over policies of |sim − real|), Pearson r and MMRV. A layer's share
of the gap is the average of what swapping it in closes (gap(nominal) −
gap(+layer)) and what leaving it out reopens (gap(−layer) − gap(calibrated)),
divided by the total gap gap(nominal) − gap(calibrated); the attributed layer is
the one with the largest share. Nothing here can see how "reality" was made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from assay.metrics.correlation import correlation
from assay.metrics.results_csv import RateEntry
from assay.run import Executor
from assay.store import Store
from assay.twin.config import Layer, Twin, TwinError
from assay.twin.running import TwinSettings, content_campaign, run_twins


@dataclass(frozen=True)
class ConfigScore:
    label: str  # nominal, +control, -dynamics, calibrated, ...
    version: str
    rates: dict[str, float]  # policy -> sim success rate
    gap: float  # mean |sim - real| over policies
    pearson: float | None
    pearson_reason: str | None
    mmrv: float


@dataclass(frozen=True)
class LayerShare:
    layer: str
    changed: bool  # whether the calibrated twin differs from nominal in this layer
    closed_by_swap_in: float
    reopened_by_leave_out: float
    share: float | None  # fraction of the total gap this layer accounts for


@dataclass(frozen=True)
class Attribution:
    task: str
    campaign: str  # the sim campaign the configurations ran in (named by their content)
    policies: tuple[str, ...]
    real: dict[str, float]
    configs: tuple[ConfigScore, ...]
    layers: tuple[LayerShare, ...]
    total_gap_closed: float
    attributed: str | None  # the layer with the largest share; None when calibration closes no gap

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def configurations(nominal: Twin, calibrated: Twin) -> list[tuple[str, Twin]]:
    """The labelled twins attribution runs (see the module docstring)."""
    out = [("nominal", nominal)]
    out += [(f"+{layer.value}", nominal.with_layer(layer, calibrated.layer(layer), f"plus-{layer.value}"))
            for layer in Layer]
    out.append(("calibrated", calibrated))
    out += [(f"-{layer.value}", calibrated.with_layer(layer, nominal.layer(layer), f"minus-{layer.value}"))
            for layer in Layer]
    return out


def _real_rates(real: Sequence[RateEntry], task: str, policies: Sequence[str]) -> dict[str, float]:
    name = task.split("@")[0]
    cells = {e.policy: e.rate for e in real if e.task == task or e.task.split("@")[0] == name}
    missing = [p for p in policies if p not in cells]
    if missing:
        raise TwinError(f"real results have no row for task {task} and policy {', '.join(missing)}; "
                        f"they have {', '.join(sorted(cells)) or 'no rows for this task'}")
    return {p: cells[p] for p in policies}


def _score(label: str, version: str, rates: dict[str, float], real: dict[str, float]) -> ConfigScore:
    policies = sorted(real)
    r = [real[p] for p in policies]
    s = [rates[p] for p in policies]
    pearson, reason = correlation("pearson", r, s)
    mmrv, _ = correlation("mmrv", r, s)
    return ConfigScore(label, version, rates, float(np.mean(np.abs(np.subtract(s, r)))), pearson, reason,
                       float(mmrv or 0.0))


def attribute(nominal: Twin, calibrated: Twin, real: Sequence[RateEntry], settings: TwinSettings,
              store: Store, campaign: str = "twin-attribution", executor: Executor | None = None) -> Attribution:
    """Run the attribution configurations in ``store`` and score them against ``real`` counts.

    They run in the campaign ``<campaign>-<hash of the configurations and settings>``, so several
    calibrations coexist in one store and rerunning one resumes it."""
    if nominal.task != calibrated.task:
        raise TwinError(f"nominal twin is of {nominal.task} but calibrated twin of {calibrated.task}")
    labelled = configurations(nominal, calibrated)
    campaign = content_campaign(campaign, [t for _, t in labelled], settings)
    results = run_twins(campaign, [t for _, t in labelled], settings, store, executor)
    policies = tuple(sorted(p.name for p in settings.policies))
    real_rates = _real_rates(real, nominal.task, policies)
    scores = []
    for label, twin in labelled:
        rates = {e.policy: e.rate for e in results[twin.version]}
        scores.append(_score(label, twin.version, rates, real_rates))
    by_label = {s.label: s for s in scores}
    total = by_label["nominal"].gap - by_label["calibrated"].gap
    layers = []
    for layer in Layer:
        swap = by_label["nominal"].gap - by_label[f"+{layer.value}"].gap
        leave = by_label[f"-{layer.value}"].gap - by_label["calibrated"].gap
        share = (swap + leave) / 2 / total if total > 0 else None
        layers.append(LayerShare(layer.value, nominal.layer(layer) != calibrated.layer(layer), swap, leave, share))
    ranked = [x for x in layers if x.share is not None and x.share > 0]
    attributed = max(ranked, key=lambda x: x.share).layer if ranked else None
    return Attribution(nominal.task, campaign, policies, real_rates, tuple(scores), tuple(layers), total, attributed)
