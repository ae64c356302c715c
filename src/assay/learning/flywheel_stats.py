"""The flywheel experiment's analysis: arms' success, the primary endpoint, the gain ratio.

Input: per replicate, per arm, the outcome on each held-out evaluation seed (paired: every
arm runs the same seeds of that replicate). Stated before the run (docs/RESULTS.md):

* **primary endpoint**: the pooled paired difference in success, targeted − random, over every
  (replicate, evaluation seed) pair; McNemar's exact test on the pooled discordant pairs (each
  replicate draws its own evaluation seeds, so no scene is counted twice), a percentile
  bootstrap CI that resamples whole replicates (the unit that varies the data), and a one-sample
  t test on the replicate differences as the second, replicate-level test;
* **gain ratio**: (targeted − base) / (random − base) on the pooled rates, with the same
  replicate bootstrap (a resample where random gained nothing has no ratio and is counted apart);
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


def _percentile(samples: list[float], confidence: float) -> list[float] | None:
    if not samples:
        return None
    tail = (1 - confidence) / 2 * 100
    return [float(np.percentile(samples, tail)), float(np.percentile(samples, 100 - tail))]


def analyse(replicates: Sequence[Outcomes], n_resamples: int = 10000, confidence: float = 0.95,
            seed: int = 0) -> dict[str, Any]:
    """The whole analysis as JSON-ready data (deterministic for ``seed``)."""
    if not replicates:
        return {}
    arms = [a for a in ARMS if a in replicates[0]]
    rates = {a: _rate(sum(sum(r[a].values()) for r in replicates), sum(len(r[a]) for r in replicates)) for a in arms}
    primary = paired(replicates, "targeted", "random")
    differences = primary["per_replicate"]
    if len(differences) >= 2 and float(np.std(differences)) > 0:
        ttest_p: float | None = float(stats.ttest_1samp(differences, 0.0).pvalue)
    else:
        ttest_p = None
    rng = np.random.default_rng(derive_seed("flywheel-bootstrap", seed))
    n = len(replicates)
    diffs, ratios, undefined = [], [], 0
    everything = list(range(n))
    for _ in range(n_resamples):
        chosen = [int(i) for i in rng.integers(0, n, n)]
        diffs.append(_pooled_rate(replicates, "targeted", chosen) - _pooled_rate(replicates, "random", chosen))
        ratio = _ratio(replicates, chosen)
        if ratio is None:
            undefined += 1
        else:
            ratios.append(ratio)
    primary.update({"bootstrap_ci": _percentile(diffs, confidence), "replicate_ttest_p": ttest_p,
                    "replicates": n, "confidence": confidence, "n_resamples": n_resamples})
    gain = {"ratio": _ratio(replicates, everything), "bootstrap_ci": _percentile(ratios, confidence),
            "undefined_resamples": undefined}
    secondary = {a: paired(replicates, a, "random") for a in arms if a != "random"}
    return {"rates": rates, "primary": primary, "gain_ratio": gain, "against_random": secondary}


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
