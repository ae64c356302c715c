"""Adaptive campaigns: run in rounds of paired seeds, stop each cell when its question is answered.

The plan holds every job up to the horizon (``adaptive.max_episodes`` seeds per
cell, the same seeds for every policy). Round r runs episode indices
[r·batch, (r+1)·batch) of every still-active cell through the ordinary runner
(resume, repair and linking as for any campaign) and waits for all of them; then
the ``judge`` (``assay.metrics.adaptive.judge_for``; metrics sit above run, so the
caller passes it in) decides on the outcomes of the completed rounds, read back
from the catalog in seed order. Nothing depends on which worker finished first, so
1 or N workers and every executor stop at the same points; a killed campaign,
rerun, finds its finished episodes in the catalog, completes the interrupted round
and reaches the same decisions. The final state (why each cell stopped, the
sequential p-values and intervals, episodes used and the fixed-n yardstick) is
written to ``campaigns/NAME/adaptive.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from assay.spec import EpisodeJob
from assay.store import Outcome, Store, write_blob

if TYPE_CHECKING:
    from assay.run.campaign import CampaignPlan, CampaignSummary

ADAPTIVE_FILE = "adaptive.json"
Cell = tuple[str, str, str]  # (policy, task id, variant key)


class Judgement(Protocol):
    """What a judge returns after a round: the cells to run next, episodes used, and its JSON."""

    @property
    def active(self) -> tuple[Cell, ...]:
        """The cells that still run in the next round."""
        ...

    @property
    def episodes_used(self) -> int:
        """Episodes run so far over all cells."""
        ...

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        ...


Judge = Callable[[Mapping[Cell, Sequence[float]]], Judgement]


def _value(outcome: str) -> float:
    if outcome == Outcome.SUCCESS.value:
        return 1.0
    return float("nan") if outcome == Outcome.ERROR.value else 0.0


def run_rounds(
    campaign: CampaignPlan,
    store: Store,
    run_jobs: Callable[[CampaignPlan], CampaignSummary],
    judge: Judge,
) -> tuple[CampaignSummary, Judgement]:
    """Run the adaptive campaign round by round with ``run_jobs`` (the fixed-n runner for a sub-plan)."""
    assert campaign.spec.adaptive is not None
    batch = campaign.spec.adaptive.batch
    by_cell: dict[Cell, list[EpisodeJob]] = {}
    for job in campaign.jobs:
        by_cell.setdefault((job.policy.name, job.task.id, job.variant.key), []).append(job)
    for jobs in by_cell.values():
        jobs.sort(key=lambda j: j.episode_index)
    outcomes: dict[Cell, list[float]] = {cell: [] for cell in by_cell}
    total: CampaignSummary | None = None
    while True:
        state = judge(outcomes)
        active = sorted(state.active)
        if not active:
            break
        round_jobs = [job for cell in active for job in by_cell[cell][len(outcomes[cell]):len(outcomes[cell]) + batch]]
        summary = run_jobs(dataclasses.replace(campaign, jobs=tuple(round_jobs)))
        total = summary if total is None else _add(total, summary)
        found = store.catalog.integrity(job.key for job in round_jobs)
        for cell in active:
            start = len(outcomes[cell])
            for job in by_cell[cell][start:start + batch]:
                outcomes[cell].append(_value(found[job.key][0]) if job.key in found else float("nan"))
    if total is None:  # nothing to run (cannot happen with a positive horizon, kept for safety)
        total = run_jobs(dataclasses.replace(campaign, jobs=()))
    total.total = state.episodes_used
    save_state(store, campaign, state)
    return total, state


def _add(a: CampaignSummary, b: CampaignSummary) -> CampaignSummary:
    a.skipped += b.skipped
    a.ran += b.ran
    a.repaired += b.repaired
    a.retried += b.retried
    for k, v in b.outcomes.items():
        a.outcomes[k] = a.outcomes.get(k, 0) + v
    return a


def save_state(store: Store, campaign: CampaignPlan, state: Judgement) -> None:
    """Write the final adaptive state to ``campaigns/NAME/adaptive.json`` and the resolved campaign."""
    spec = campaign.spec
    resolved = {**campaign.resolved(), "jobs": state.episodes_used}
    store.save_resolved_campaign(spec.name, spec.content_hash(), resolved)
    doc: dict[str, Any] = {"campaign": spec.name, **state.to_dict()}
    write_blob(store.root, f"campaigns/{spec.name}/{ADAPTIVE_FILE}",
               json.dumps(doc, indent=2, sort_keys=True).encode())


def load_state(store: Store | Path, name: str) -> dict[str, Any] | None:
    """The saved adaptive state of campaign ``name`` (a Store or its root), or None for a fixed-n campaign."""
    path = (store.campaign_dir(name) if isinstance(store, Store) else Path(store) / "campaigns" / name) / ADAPTIVE_FILE
    return json.loads(path.read_text()) if path.exists() else None
