"""The flywheel experiment's analysis: arms' success, the declared primary endpoint, the gain ratio.

Input: per replicate, per arm, the outcome on each held-out evaluation seed (paired: every
arm runs the same seeds of that replicate). The comparison is targeted − random; its tests:

* McNemar's exact test on the pooled discordant (replicate, evaluation seed) pairs (each replicate
  draws its own evaluation seeds, so no scene is counted twice), a percentile bootstrap CI that
  resamples whole replicates (the unit that varies the data), and a two-sided one-sample t test on
  the replicate differences. The design declares which one is **primary** (``primary: {test, unit}``);
  ``primary.declared`` and ``primary.p`` say which and its p value, the other is reported as secondary;
* **gain ratio**: (targeted − base) / (random − base) on the pooled rates, with the same replicate
  bootstrap. A resample where random gained nothing counts as +∞ when targeted gained and −∞ when it
  did not; a side of the interval is unbounded (None) when more than its tail (2.5%) lies there;
* **secondary**: each arm against random (McNemar exact, pooled), every arm's success inside
  and outside the slice, and per variant every arm's success and its paired difference against random.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from assay.learning.flywheel_design import ARMS
from assay.metrics import mcnemar_exact, success_interval
from assay.spec import derive_seed

Outcomes = Mapping[str, Mapping[Any, bool]]  # arm -> evaluation scene (variant|seed, or a seed) -> success


def _rate(successes: int, trials: int) -> dict[str, Any]:
    interval = success_interval(successes, trials)
    return {"successes": successes, "trials": trials, "rate": successes / trials if trials else None,
            "low": interval.low if interval else None, "high": interval.high if interval else None}


def paired(replicates: Sequence[Outcomes], arm: str, against: str) -> dict[str, Any]:
    """Pooled paired comparison ``arm`` − ``against`` over every replicate's shared seeds."""
    only_arm = only_against = pairs = 0
    per_replicate = []
    for outcomes in replicates:
        seeds = sorted(set(outcomes[arm]) & set(outcomes[against]))
        a = sum(outcomes[arm][s] and not outcomes[against][s] for s in seeds)
        b = sum(outcomes[against][s] and not outcomes[arm][s] for s in seeds)
        only_arm, only_against, pairs = only_arm + a, only_against + b, pairs + len(seeds)
        per_replicate.append((a - b) / len(seeds) if seeds else 0.0)
    return {"arm": arm, "against": against, "pairs": pairs, "arm_only": only_arm, "against_only": only_against,
            "difference": (only_arm - only_against) / pairs if pairs else None,
            "mcnemar_p": mcnemar_exact(only_arm, only_against), "per_replicate": per_replicate}


def _pooled_rate(replicates: Sequence[Outcomes], arm: str, chosen: Sequence[int]) -> float:
    wins = sum(sum(replicates[i][arm].values()) for i in chosen)
    trials = sum(len(replicates[i][arm]) for i in chosen)
    return wins / trials if trials else 0.0


def _ratio(replicates: Sequence[Outcomes], chosen: Sequence[int]) -> float | None:
    base = _pooled_rate(replicates, "base", chosen)
    gain = _pooled_rate(replicates, "random", chosen) - base
    return None if gain <= 0 else (_pooled_rate(replicates, "targeted", chosen) - base) / gain


def _extended_ratio(replicates: Sequence[Outcomes], chosen: Sequence[int]) -> float:
    """The gain ratio on the extended line: +inf when random gained nothing and targeted did, -inf when
    neither gained (so a resample without a random gain widens the interval instead of leaving it)."""
    ratio = _ratio(replicates, chosen)
    if ratio is not None:
        return ratio
    base = _pooled_rate(replicates, "base", chosen)
    return float("inf") if _pooled_rate(replicates, "targeted", chosen) > base else float("-inf")


def _percentile(samples: list[float], confidence: float) -> list[float] | None:
    if not samples:
        return None
    tail = (1 - confidence) / 2 * 100
    return [float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail))]


def extended_interval(samples: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Percentile interval of samples that may hold +-inf: a side is unbounded (``unbounded_below`` /
    ``unbounded_above``, its limit None) when more than its tail ((1 - confidence) / 2 of the samples) is
    infinite there; otherwise the percentile of all the samples (the nearest finite order statistic where
    the interpolation would touch an infinite one). No finite sample (``finite`` 0): both limits None, neither
    unbounded."""
    values = np.sort(np.asarray(samples, dtype=np.float64))
    tail = (1 - confidence) / 2
    below, above = int(np.isneginf(values).sum()), int(np.isposinf(values).sum())
    finite = int(np.isfinite(values).sum())
    out: dict[str, Any] = {"low": None, "high": None, "below_inf": below, "above_inf": above, "finite": finite,
                           "unbounded_below": False, "unbounded_above": False}
    if not finite:
        return out
    for side, count, q in (("low", below, tail), ("high", above, 1 - tail)):
        if count > tail * len(values):
            out[f"unbounded_{'below' if side == 'low' else 'above'}"] = True
            continue
        position = q * (len(values) - 1)  # numpy's linear percentile, by hand: no arithmetic on an infinity
        lower, upper = values[int(np.floor(position))], values[int(np.ceil(position))]
        if np.isfinite(lower) and np.isfinite(upper):
            out[side] = float(lower + (upper - lower) * (position - np.floor(position)))
        else:
            out[side] = next((float(v) for v in (lower, upper) if np.isfinite(v)), None)
    return out


def analyse(replicates: Sequence[Outcomes], n_resamples: int = 10000, confidence: float = 0.95,
            seed: int = 0, primary: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole analysis as JSON-ready data (deterministic for ``seed``); ``primary`` is the design's declared
    endpoint (``{"test": "ttest" | "mcnemar", "unit": ..., "alpha": ...}``; None: the McNemar test)."""
    if not replicates:
        return {}
    arms = [a for a in ARMS if a in replicates[0]]
    rates = {a: _rate(sum(sum(r[a].values()) for r in replicates), sum(len(r[a]) for r in replicates)) for a in arms}
    comparison = paired(replicates, "targeted", "random")
    differences = comparison["per_replicate"]
    if len(differences) >= 2 and float(np.std(differences)) > 0:
        ttest_p: float | None = float(stats.ttest_1samp(differences, 0.0).pvalue)
    else:
        ttest_p = None
    rng = np.random.default_rng(derive_seed("flywheel-bootstrap", seed))
    n = len(replicates)
    diffs, ratios = [], []
    everything = list(range(n))
    for _ in range(n_resamples):
        chosen = [int(i) for i in rng.integers(0, n, n)]
        diffs.append(_pooled_rate(replicates, "targeted", chosen) - _pooled_rate(replicates, "random", chosen))
        ratios.append(_extended_ratio(replicates, chosen))
    declared = dict(primary) if primary is not None else {"test": "mcnemar", "unit": "scene", "alpha": 0.05}
    comparison.update({"bootstrap_ci": _percentile(diffs, confidence), "replicate_ttest_p": ttest_p,
                       "mean_replicate_difference": float(np.mean(differences)), "replicates": n,
                       "confidence": confidence, "n_resamples": n_resamples, "declared": declared,
                       "p": ttest_p if declared["test"] == "ttest" else comparison["mcnemar_p"]})
    interval = extended_interval(ratios, confidence)
    gain = {"ratio": _ratio(replicates, everything),
            "bootstrap_ci": [interval["low"], interval["high"]] if interval["finite"] else None,
            "unbounded_below": interval["unbounded_below"], "unbounded_above": interval["unbounded_above"],
            "undefined_resamples": interval["below_inf"] + interval["above_inf"],
            "random_gained_nothing": {"targeted_gained": interval["above_inf"],
                                      "targeted_gained_nothing": interval["below_inf"]}}
    secondary = {a: paired(replicates, a, "random") for a in arms if a != "random"}
    return {"rates": rates, "primary": comparison, "gain_ratio": gain, "against_random": secondary}


def by_region(replicates: Sequence[Outcomes], inside: Sequence[Mapping[Any, bool]]) -> dict[str, Any]:
    """Every arm's pooled success on the evaluation seeds inside the slice and outside it
    (``inside[i][seed]``: whether replicate i's seed lies in the slice)."""
    out: dict[str, Any] = {}
    for label, want in (("slice", True), ("uncovered", False)):
        out[label] = {}
        for arm in replicates[0] if replicates else ():
            wins = trials = 0
            for outcomes, where in zip(replicates, inside, strict=True):
                seeds = [s for s in outcomes[arm] if where[s] is want]
                wins += sum(outcomes[arm][s] for s in seeds)
                trials += len(seeds)
            out[label][arm] = _rate(wins, trials)
    return out


def by_variant(replicates: Sequence[Outcomes], variant_of: Sequence[Mapping[Any, str]]) -> dict[str, Any]:
    """Per variant (``variant_of[i][scene]``: the variant of replicate i's scene): every arm's pooled
    success and, for every arm but random, its pooled paired comparison against random on that variant."""
    names = sorted({name for where in variant_of for name in where.values()})
    out: dict[str, Any] = {}
    for name in names:
        subset = [{arm: {s: v for s, v in o.items() if where.get(s) == name} for arm, o in outcomes.items()}
                  for outcomes, where in zip(replicates, variant_of, strict=True)]
        arms = [a for a in ARMS if subset and a in subset[0]]
        rates = {a: _rate(sum(sum(r[a].values()) for r in subset), sum(len(r[a]) for r in subset)) for a in arms}
        versus = {a: paired(subset, a, "random") for a in arms if a != "random" and "random" in arms}
        out[name] = {"rates": rates, "against_random": versus}
    return out


def ttest_power(replicates: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample t test over ``replicates`` differences of mean ``effect`` and standard
    deviation ``sd`` (noncentral t)."""
    if replicates < 2 or sd <= 0:
        return float("nan")
    df = replicates - 1
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    shift = effect / sd * replicates**0.5
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def ttest_replicates(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, most: int = 10000) -> int:
    """The fewest replicates whose t test (:func:`ttest_power`) reaches ``power``; ValueError past ``most``."""
    for n in range(2, most + 1):
        if ttest_power(n, effect, sd, alpha) >= power:
            return n
    raise ValueError(f"no replicate count up to {most} detects {effect} at sd {sd} with power {power}")
