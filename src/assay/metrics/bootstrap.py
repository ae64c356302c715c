"""Seeded resampling helpers shared by every bootstrap in Assay.

Every bootstrap takes ``seed`` (default 0) and builds one ``numpy`` Generator from
it, consumed in a fixed order (sorted tasks, sorted policies), so the same input
gives the same interval on any machine. Intervals are percentile intervals.

``scipy.stats.bootstrap`` resamples one set of observations (or several
independently); Assay needs episodes resampled *within* each task and, for paired
data, whole rows of a task's seed × policy table at once, so the index draws are
done here with ``numpy`` and the statistics stay vectorized.
"""

from __future__ import annotations

import numpy as np

from assay.errors import AssayError
from assay.metrics.rates import Interval

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
# Resampled tensors are (chunk, rows, columns); chunking bounds memory for big campaigns.
CHUNK = 250


def generator(seed: int) -> np.random.Generator:
    """A fresh NumPy generator seeded with ``seed``: every resampling draws from its own stream, never the global one.
    """
    return np.random.default_rng(seed)


def check_settings(confidence: float, n_resamples: int) -> None:
    """Refuse a confidence level outside (0, 1) or fewer than 100 resamples, with a one-line AssayError."""
    if not 0.0 < confidence < 1.0:
        raise AssayError(f"confidence {confidence} is not valid; give a level strictly between 0 and 1 (e.g. 0.95)")
    if n_resamples < 100:
        raise AssayError(f"n_resamples {n_resamples} is too small for a percentile interval; give at least 100")


def percentile_interval(samples: np.ndarray, confidence: float) -> Interval | None:
    """The central ``confidence`` percentile interval of the finite samples; None if there are none."""
    finite = np.asarray(samples, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return Interval(float(low), float(high))


def chunks(n_resamples: int) -> list[int]:
    """The resample counts drawn per chunk (``CHUNK`` each, the rest last), which bounds the memory of one draw."""
    sizes = [CHUNK] * (n_resamples // CHUNK)
    if n_resamples % CHUNK:
        sizes.append(n_resamples % CHUNK)
    return sizes


def resampled_rates(rng: np.random.Generator, values: np.ndarray, size: int) -> np.ndarray:
    """Rates per column after resampling whole rows of ``values`` (rows, columns) ``size`` times.

    ``values`` holds 1.0 / 0.0 / NaN (NaN: no scored episode for that row and column,
    e.g. an ``error`` outcome). A resample that draws only NaN rows for a column
    keeps that column's observed rate, so one unlucky draw cannot drop a policy.
    Returns ``(size, columns)``.
    """
    rows = values.shape[0]
    observed = observed_rates(values)
    idx = rng.integers(0, rows, size=(size, rows))
    drawn = values[idx]  # (size, rows, columns)
    valid = ~np.isnan(drawn)
    sums = np.where(valid, drawn, 0.0).sum(axis=1)
    counts = valid.sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), observed[None, :])


def observed_rates(values: np.ndarray) -> np.ndarray:
    """Per-column success rate over the non-NaN rows; NaN for a column with none."""
    valid = ~np.isnan(values)
    counts = valid.sum(axis=0)
    sums = np.where(valid, values, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def pattern_rates(patterns: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """:func:`observed_rates` of the table whose distinct rows are ``patterns``, each ``weights`` times."""
    valid = ~np.isnan(patterns)
    counts = weights @ valid
    sums = weights @ np.where(valid, patterns, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def resampled_pattern_rates(rng: np.random.Generator, patterns: np.ndarray, weights: np.ndarray,
                            size: int) -> np.ndarray:
    """:func:`resampled_rates` of the same table held as counted patterns: drawing the table's rows with
    replacement is drawing how many times each pattern is drawn, one multinomial draw per resample (the same
    distribution, in memory of the patterns rather than the rows). Returns ``(size, columns)``."""
    rows = int(weights.sum())
    observed = pattern_rates(patterns, weights)
    drawn = rng.multinomial(rows, weights / rows, size=size).astype(np.float64)  # (size, patterns)
    valid = ~np.isnan(patterns)
    sums = drawn @ np.where(valid, patterns, 0.0)
    counts = drawn @ valid.astype(np.float64)
    return np.where(counts > 0, sums / np.maximum(counts, 1), observed[None, :])
