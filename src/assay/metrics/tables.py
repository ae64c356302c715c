"""Results as an Arrow table, for notebooks and scripts: ``results_table(store, campaign)``.

One row per episode by default; with ``by`` (any of policy, task, variant, campaign), one row per group with
its success rate and mid-p interval (the numbers ``assay results`` prints). ``.to_pandas()`` gives a
DataFrame (needs pandas, not an Assay dependency).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from assay.errors import AssayError, unknown_name
from assay.metrics.rates import rate_table
from assay.store import EpisodeRecord, Outcome, Store

EPISODE_COLUMNS = ("key", "campaign", "policy", "task", "variant", "seed", "episode_index", "outcome", "success",
                   "steps", "total_return", "success_step", "reason")
_RATE_TYPES = {"episodes": pa.int64(), "scored": pa.int64(), "successes": pa.int64(), "failures": pa.int64(),
               "timeouts": pa.int64(), "errors": pa.int64(), "rate": pa.float64(), "ci_low": pa.float64(),
               "ci_high": pa.float64(), "mean_return": pa.float64(), "mean_steps": pa.float64()}


def _records(source: Store | Iterable[EpisodeRecord], campaign: str | None) -> list[EpisodeRecord]:
    if isinstance(source, Store):
        if campaign is not None and campaign not in {c.name for c in source.catalog.campaigns()}:
            known = (c.name for c in source.catalog.campaigns())
            raise AssayError(unknown_name("campaign", campaign, known, source.root))
        return source.catalog.episodes(campaign=campaign)
    return [r for r in source if campaign is None or r.campaign == campaign]


def results_table(source: Store | Iterable[EpisodeRecord], campaign: str | None = None,
                  by: Sequence[str] | None = None, confidence: float = 0.95) -> pa.Table:
    """Episodes of ``campaign`` (every campaign when None) from a store or records, as a ``pyarrow.Table``.

    ``by=None``: one row per episode (``EPISODE_COLUMNS``; ``success`` is the outcome ``success``).
    ``by=("policy", "task")``: one row per group: ``episodes, scored, successes, failures, timeouts, errors,
    rate, ci_low, ci_high, mean_return, mean_steps`` (errors are left out of ``scored``; ``rate`` is null
    when nothing was scored).
    """
    records = sorted(_records(source, campaign), key=lambda r: (r.campaign, r.policy_name, r.task_id, r.variant_name,
                                                                r.episode_index))
    if by is not None:
        rows = rate_table(records, by=tuple(by), confidence=confidence)
        columns = {name: pa.array([row.group[name] for row in rows], pa.string()) for name in by}
        for name, kind in _RATE_TYPES.items():
            columns[name] = pa.array([getattr(row, name) for row in rows], kind)
        return pa.table(columns)
    return pa.table({
        "key": pa.array([r.key for r in records], pa.string()),
        "campaign": pa.array([r.campaign for r in records], pa.string()),
        "policy": pa.array([r.policy_name for r in records], pa.string()),
        "task": pa.array([r.task_id for r in records], pa.string()),
        "variant": pa.array([r.variant_name for r in records], pa.string()),
        "seed": pa.array([r.seed for r in records], pa.uint64()),
        "episode_index": pa.array([r.episode_index for r in records], pa.int64()),
        "outcome": pa.array([r.outcome.value for r in records], pa.string()),
        "success": pa.array([r.outcome is Outcome.SUCCESS for r in records], pa.bool_()),
        "steps": pa.array([r.steps for r in records], pa.int64()),
        "total_return": pa.array([r.total_return for r in records], pa.float64()),
        "success_step": pa.array([r.success_step for r in records], pa.int64()),
        "reason": pa.array([r.reason for r in records], pa.string()),
    })
