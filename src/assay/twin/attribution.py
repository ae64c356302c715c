"""Gap attribution: which layer of the twin closes how much of the sim-to-real gap.

Inputs are only what a real lab has: the real per-policy success counts (a
results CSV), the nominal twin and a calibrated twin (fitted control and dynamics,
measured rendering). From them the configurations

* ``nominal``; ``+layer`` (nominal with one calibrated layer swapped in), for each layer;
* ``calibrated``; ``-layer`` (calibrated with one layer left out, i.e. nominal), for each layer

are run on the same paired seeds, and each is scored against the real rates:
the gap (mean over policies of |sim − real|), Pearson r and MMRV. A layer's
*closure* is the average of what swapping it in closes (gap(nominal) −
gap(+layer)) and what leaving it out reopens (gap(−layer) − gap(calibrated)); its
share is the closure divided by the total gap closed, gap(nominal) − gap(calibrated).
The part of the nominal gap the calibrated twin leaves is ``unexplained`` =
gap(calibrated) / gap(nominal).

Every figure has a bootstrap interval: the sim episodes are resampled by seed
(jointly across configurations, keeping the pairing) and the real counts by their
own trials (independent episodes), ``resamples`` times. A layer is **named** when
the lower bound of its closure is above 0 — its calibration closes the gap beyond
the noise of both samples. :func:`unclosed` **flags** a layer named (by these counts or by
the recorded trajectories) whose calibration does not close the success gap beyond that
noise (its closure, or the lower bound of its closure's interval, ≤ 0, while nominal's
success differs from real): not a clean hit. The **attributed** layer is the named,
unflagged one with the largest closure; "none" means no layer's closure clears the noise
(or every named one is flagged); :func:`with_flags` recomputes it once the trajectories'
evidence is in, so ``twin attribute`` and the blind protocol agree. ``episodes_needed``
is ``assay budget`` for the nominal gap (sim vs real, unpaired): fewer episodes per
cell leave a gap of that size undetectable at power 0.8.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import stats

from assay.errors import AssayError, TwinError
from assay.metrics.budget import episode_budget
from assay.metrics.correlation import correlation
from assay.metrics.results_csv import RateEntry
from assay.run import Executor
from assay.serialize import DictMixin
from assay.spec import derive_seed
from assay.store import Outcome, Store
from assay.twin.config import Layer, Twin
from assay.twin.running import TwinSettings, content_campaign, run_twins

LEVEL = 0.95


@dataclass(frozen=True)
class ConfigScore:
    """One configuration's scores against reality: its rates, mean absolute gap, Pearson and MMRV."""

    label: str  # nominal, +control, -dynamics, calibrated, ...
    version: str
    rates: dict[str, float]  # policy -> sim success rate
    gap: float  # mean |sim - real| over policies
    pearson: float | None
    pearson_reason: str | None
    mmrv: float
    gap_interval: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class LayerShare:
    """One layer's share of the sim-to-real gap: what swapping it in closes and leaving it out reopens."""

    layer: str
    changed: bool  # whether the calibrated twin differs from nominal in this layer
    closed_by_swap_in: float
    reopened_by_leave_out: float
    share: float | None  # fraction of the total gap this layer accounts for
    closure: float = 0.0  # (closed_by_swap_in + reopened_by_leave_out) / 2
    closure_interval: tuple[float, float] = (0.0, 0.0)
    share_interval: tuple[float, float] | None = None
    named: bool = False  # closure's lower bound above 0: closes the gap beyond noise


@dataclass(frozen=True)
class Attribution(DictMixin):
    """A gap attribution: every configuration's scores, each layer's share, and the gap the calibrated twin closes."""

    task: str
    campaign: str  # the sim campaign the configurations ran in (named by their content)
    policies: tuple[str, ...]
    real: dict[str, float]
    configs: tuple[ConfigScore, ...]
    layers: tuple[LayerShare, ...]
    total_gap_closed: float
    attributed: str | None  # the named, unflagged layer with the largest closure; None when there is none
    named: tuple[str, ...] = ()  # every layer whose closure is beyond noise
    unexplained: float | None = None  # gap(calibrated) / gap(nominal)
    unexplained_interval: tuple[float, float] | None = None
    resamples: int = 0
    episodes_needed: int | None = None  # per policy and configuration, to detect the nominal gap (assay budget)
    budget_command: str | None = None
    flagged: dict[str, str] = field(default_factory=dict)  # named layers that close no success gap beyond noise
    nominal_gap_p: float | None = None  # Holm-adjusted smallest Fisher exact p of nominal sim vs real per policy;
    # None when the real side has no counts (the gap's significance is unknown)


def configurations(nominal: Twin, calibrated: Twin) -> list[tuple[str, Twin]]:
    """The labelled twins attribution runs (see the module docstring)."""
    out = [("nominal", nominal)]
    out += [(f"+{layer.value}", nominal.with_layer(layer, calibrated.layer(layer), f"plus-{layer.value}"))
            for layer in Layer]
    out.append(("calibrated", calibrated))
    out += [(f"-{layer.value}", calibrated.with_layer(layer, nominal.layer(layer), f"minus-{layer.value}"))
            for layer in Layer]
    return out


def _real_cells(real: Sequence[RateEntry], task: str, policies: Sequence[str]) -> dict[str, RateEntry]:
    name = task.split("@")[0]
    cells = {e.policy: e for e in real if e.task == task or e.task.split("@")[0] == name}
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


def _outcomes(store: Store, campaign: str, versions: Sequence[str], policy: str) -> np.ndarray:
    """(versions, seeds) success as 1.0/0.0, NaN where an episode errored or is missing; columns paired by seed."""
    records = [r for r in store.catalog.episodes(campaign=campaign, policy=policy) if r.variant_key in versions]
    seeds = sorted({r.seed for r in records})
    column = {seed: i for i, seed in enumerate(seeds)}
    unique = list(dict.fromkeys(versions))
    row = {version: i for i, version in enumerate(unique)}
    out = np.full((len(unique), len(seeds)), np.nan)
    for r in records:
        if r.outcome is not Outcome.ERROR:
            out[row[r.variant_key], column[r.seed]] = float(r.outcome is Outcome.SUCCESS)
    return out[[row[v] for v in versions]]  # configurations with the same values share their episodes


def _figures(sim: np.ndarray, real: np.ndarray, labels: Sequence[str]) -> dict[str, np.ndarray]:
    """Gaps, closures, shares, unexplained fraction from (labels, policies, B) sim and (policies, B) real rates."""
    gaps = np.mean(np.abs(sim - real[None]), axis=1)  # (labels, B)
    gap = {label: gaps[i] for i, label in enumerate(labels)}
    total = gap["nominal"] - gap["calibrated"]
    out = {f"gap:{label}": g for label, g in gap.items()}
    out["total"] = total
    with np.errstate(divide="ignore", invalid="ignore"):
        for layer in Layer:
            closure = ((gap["nominal"] - gap[f"+{layer.value}"]) + (gap[f"-{layer.value}"] - gap["calibrated"])) / 2
            out[f"closure:{layer.value}"] = closure
            out[f"share:{layer.value}"] = np.where(total > 0, closure / np.where(total > 0, total, 1.0), np.nan)
        out["unexplained"] = np.where(gap["nominal"] > 0, gap["calibrated"] / np.where(gap["nominal"] > 0,
                                                                                      gap["nominal"], 1.0), np.nan)
    return out


def _interval(values: np.ndarray) -> tuple[float, float] | None:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def _budget(gap: float, real: dict[str, float]) -> tuple[int | None, str | None]:
    if gap <= 0:
        return None, None
    baseline = round(float(np.mean(list(real.values()))), 2)
    delta = round(min(gap, max(baseline, 1 - baseline)), 2)  # a gap the rates can have from this baseline
    try:
        n = episode_budget(delta, baseline=baseline).episodes_per_cell
    except AssayError:
        return None, None
    return n, f"assay budget --delta {delta} --baseline {baseline}"


def nominal_gap_p(sim: Mapping[str, RateEntry], real: Mapping[str, RateEntry]) -> float | None:
    """Whether nominal's success differs from real beyond noise: per policy, Fisher's exact test of the nominal twin's
    counts against the real counts, two-sided; the smallest p Holm-adjusted over the policies (k · min p, at most 1).
    None when a side has no counts (a rates-only real CSV)."""
    values = []
    for policy, entry in real.items():
        other = sim.get(policy)
        if other is None or entry.trials is None or other.trials is None or entry.successes is None \
                or other.successes is None:
            return None
        table = [[other.successes, other.trials - other.successes], [entry.successes, entry.trials - entry.successes]]
        values.append(float(stats.fisher_exact(table).pvalue))
    return min(1.0, len(values) * min(values)) if values else None


def unclosed(result: Attribution, named_by: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The named layers (by any evidence) whose calibrated layer closes none of the success gap beyond noise,
    and why.

    Such a layer is not a clean hit: the trajectories (or counts) say the layer differs, yet swapping its
    calibration in, and leaving it out, moves the success counts no closer to real beyond the noise of both
    samples (its closure, or the lower bound of its closure's interval, ≤ 0) while nominal's success differs
    from real. A wrong fit of the right layer looks like that (pick-place, gain 0.6 + damping 5, fitted with
    a spurious friction at 9x the tolerance: both layers named, 0 % of the success gap closed). Nothing is
    flagged unless the nominal success gap is **significant** (``nominal_gap_p`` below 1 − LEVEL: Fisher's exact
    test per policy, Holm-adjusted): a gap within noise (an exact latency fit with nominal 9 of 10 against real
    10 of 10, p = 1) leaves nothing a calibration could be seen to close, and neither does an unknown one.
    """
    nominal = next(c.gap for c in result.configs if c.label == "nominal")
    calibrated = next(c.gap for c in result.configs if c.label == "calibrated")
    layers = {x.layer: x for x in result.layers}
    out: dict[str, str] = {}
    if result.nominal_gap_p is None or result.nominal_gap_p >= 1 - LEVEL:
        return out
    for layer in dict.fromkeys(name for names in named_by.values() for name in names):
        share = layers[layer]
        low, high = share.closure_interval
        if nominal > 0 and min(share.closure, low) <= 0:
            who = ", ".join(sorted(k if k == "success" else f"{k}s" for k, v in named_by.items() if layer in v))
            out[layer] = (f"named by the {who} but its calibration closes none of the success gap beyond noise "
                          f"(nominal {nominal:.3f} -> calibrated {calibrated:.3f}; its closure {share.closure:+.3f} "
                          f"[{low:+.3f}, {high:+.3f}], lower bound <= 0; the nominal gap is significant, "
                          f"p = {result.nominal_gap_p:.3g}): the fit may be wrong")
    return out


def _attributed(layers: Sequence[LayerShare], flags: Mapping[str, str]) -> str | None:
    """The named, unflagged layer with the largest closure (None when there is none)."""
    clean = [x for x in layers if x.named and x.layer not in flags]
    return max(clean, key=lambda x: x.closure).layer if clean else None


def with_flags(result: Attribution, named_by: Mapping[str, Sequence[str]]) -> Attribution:
    """``result`` with the layers named by any evidence (``named_by``: success / state / trace -> layers) that
    :func:`unclosed` flags in ``flagged``, and ``attributed`` among the unflagged named layers only."""
    flags = unclosed(result, named_by)
    return replace(result, flagged=flags, attributed=_attributed(result.layers, flags))


def attribute(nominal: Twin, calibrated: Twin, real: Sequence[RateEntry], settings: TwinSettings,
              store: Store, campaign: str = "twin-attribution", executor: Executor | None = None,
              resamples: int = 1000) -> Attribution:
    """Run the attribution configurations in ``store`` and score them against ``real`` counts.

    They run in the campaign ``<campaign>-<hash of the configurations and settings>``, so several
    calibrations coexist in one store and rerunning one resumes it."""
    if nominal.task != calibrated.task:
        raise TwinError(f"nominal twin is of {nominal.task} but calibrated twin of {calibrated.task}")
    if resamples < 100:
        raise TwinError(f"resamples {resamples} is too few for a {LEVEL:.0%} interval; valid: 100 or more")
    labelled = configurations(nominal, calibrated)
    labels = [label for label, _ in labelled]
    campaign = content_campaign(campaign, [t for _, t in labelled], settings)
    results = run_twins(campaign, [t for _, t in labelled], settings, store, executor)
    policies = tuple(sorted(p.name for p in settings.policies))
    cells = _real_cells(real, nominal.task, policies)
    real_rates = {p: cells[p].rate for p in policies}
    scores = [_score(label, twin.version, {e.policy: e.rate for e in results[twin.version]}, real_rates)
              for label, twin in labelled]
    # Bootstrap: sim episodes resampled by seed (paired across configurations), real counts by their trials.
    rng = np.random.default_rng(derive_seed("twin-attribution-bootstrap", campaign))
    versions = [twin.version for _, twin in labelled]
    sim = np.empty((len(labels), len(policies), resamples))
    real_draws = np.empty((len(policies), resamples))
    for j, policy in enumerate(policies):
        outcomes = _outcomes(store, campaign, versions, policy)
        picks = rng.integers(0, outcomes.shape[1], (resamples, outcomes.shape[1]))
        with warnings.catch_warnings():  # a resample of only errored episodes has no rate: NaN, left out
            warnings.simplefilter("ignore", RuntimeWarning)
            sim[:, j, :] = np.nanmean(outcomes[:, picks], axis=2)
        cell = cells[policy]
        trials = cell.trials or 0
        real_draws[j] = (rng.binomial(trials, cell.rate, resamples) / trials) if trials else cell.rate
    point = _figures(np.array([[[s.rates[p]] for p in policies] for s in scores]),
                     np.array([[real_rates[p]] for p in policies]), labels)
    boot = _figures(sim, real_draws, labels)
    scores = [ConfigScore(**{**asdict(s), "gap_interval": _interval(boot[f"gap:{s.label}"]) or (s.gap, s.gap)})
              for s in scores]
    by_label = {s.label: s for s in scores}
    total = float(point["total"][0])
    layers = []
    for layer in Layer:
        swap = by_label["nominal"].gap - by_label[f"+{layer.value}"].gap
        leave = by_label[f"-{layer.value}"].gap - by_label["calibrated"].gap
        closure_interval = _interval(boot[f"closure:{layer.value}"]) or (0.0, 0.0)
        changed = nominal.layer(layer) != calibrated.layer(layer)
        layers.append(LayerShare(
            layer.value, changed, swap, leave, (swap + leave) / 2 / total if total > 0 else None,
            closure=(swap + leave) / 2, closure_interval=closure_interval,
            share_interval=_interval(boot[f"share:{layer.value}"]) if total > 0 else None,
            named=changed and closure_interval[0] > 0))
    named = tuple(x.layer for x in layers if x.named)
    unexplained = float(point["unexplained"][0]) if by_label["nominal"].gap > 0 else None
    needed, command = _budget(by_label["nominal"].gap, real_rates)
    nominal_counts = {e.policy: e for e in results[nominal.version]}
    result = Attribution(nominal.task, campaign, policies, real_rates, tuple(scores), tuple(layers), total, None,
                         named, unexplained, _interval(boot["unexplained"]) if unexplained is not None else None,
                         resamples, needed, command, nominal_gap_p=nominal_gap_p(nominal_counts, cells))
    return with_flags(result, {"success": named})
