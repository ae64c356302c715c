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
written to ``campaigns/NAME/adaptive.json``. While it runs (or after a kill), the campaign's resolved
document is the full plan's, saved once before round 1 (``run_campaign``): a round's sub-plan never
replaces it, so planned counts and progress are against the horizon until the final state records the
episodes used.

With ``adaptive.endpoint: progress`` an outcome is the episode's progress score
(:func:`progress_score`) instead of its 0/1 success; only Meta-World tasks report
one (``info.goal_progress``), so other backends are refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from assay.errors import SpecError
from assay.run.plan import CampaignPlan, CampaignSummary
from assay.spec import EpisodeJob
from assay.store import Outcome, Store, read_episode, step_matrix, write_blob

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


PROGRESS_COLUMN = "info.goal_progress"
PROGRESS_BACKENDS = ("metaworld",)


def progress_score(store: Store, job: EpisodeJob, found: tuple[str, str | None, str | None]) -> float:
    """An episode's progress in [0, 1]: 1 on success; otherwise its last finite ``info.goal_progress``
    (1 − object-to-goal distance / that distance at reset) clipped to [0, 1] — it is below 0 when the
    object ended farther from the goal than it started, and exactly 1 only at the goal; NaN for an error."""
    outcome, data_path, sha = found
    if outcome == Outcome.ERROR.value:
        return math.nan
    if outcome == Outcome.SUCCESS.value:
        return 1.0
    if data_path is None:
        raise SpecError(f"episode {job.key[:12]} of {job.task.id} has no step data to read its progress from")
    table = read_episode(store.data_root, data_path, sha, key=job.key)
    values = step_matrix(table, PROGRESS_COLUMN, np.float64) if PROGRESS_COLUMN in table.column_names else np.array([])
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        raise SpecError(f"task {job.task.id} reports no progress ({PROGRESS_COLUMN} is missing or NaN: no object "
                        "to bring to a goal); valid adaptive endpoint for it: success")
    return float(min(1.0, max(0.0, float(finite[-1]))))


def _check_endpoint(campaign: CampaignPlan) -> bool:
    """Whether the campaign reads progress scores; SpecError if a task cannot report them."""
    assert campaign.spec.adaptive is not None
    if campaign.spec.adaptive.endpoint.value != "progress":
        return False
    other = sorted({j.task.id for j in campaign.jobs if j.task.backend not in PROGRESS_BACKENDS})
    if other:
        raise SpecError(f"adaptive endpoint 'progress' needs a progress score, which {', '.join(other)} does "
                        f"not report (backends with one: {', '.join(PROGRESS_BACKENDS)}); "
                        "valid endpoints: success, progress")
    return True


def run_rounds(
    campaign: CampaignPlan,
    store: Store,
    run_jobs: Callable[[CampaignPlan], CampaignSummary],
    judge: Judge,
) -> tuple[CampaignSummary, Judgement]:
    """Run the adaptive campaign round by round with ``run_jobs`` (the fixed-n runner for a sub-plan, which
    must not save the sub-plan as the campaign's document: the caller saved the full plan's)."""
    assert campaign.spec.adaptive is not None
    batch = campaign.spec.adaptive.batch
    progress = _check_endpoint(campaign)
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
        found = store.integrity(job.key for job in round_jobs)
        for cell in active:
            start = len(outcomes[cell])
            for job in by_cell[cell][start:start + batch]:
                if job.key not in found:
                    outcomes[cell].append(float("nan"))
                elif progress:
                    outcomes[cell].append(progress_score(store, job, found[job.key]))
                else:
                    outcomes[cell].append(_value(found[job.key][0]))
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
    a.elsewhere += b.elsewhere
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
