"""The report's evidence beyond the campaign's own rates, each read from what another command stored.

* real-to-sim: ``metrics.correlate`` of real results (``--real CSV``, or those ``assay correlate
  --record`` kept in ``STORE/calibration.json``) against this campaign's rates in its variant scope
  (nominal by default, ``metrics.scope``);
* open-loop vs closed-loop: what ``assay openloop --campaign NAME`` saved;
* regression sets mined from this campaign (``assay regress add/run``), with every rerun;
* checkpoint comparison: every policy against a baseline on paired seeds (``metrics.compare``);
* per failure: its category (``assay failures mine``), attribution and point of no return
  (``assay failures ponr``).

Each piece is ``None``/empty when its command never ran; the HTML then says which command adds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.failures import Attribution, PointOfNoReturn, SetStatus, attribute, statuses
from assay.failures.ponr import load_ponrs
from assay.failures.priorities import Priority, priorities
from assay.failures.table import FailureTable
from assay.metrics import (
    Comparison,
    CorrelationReport,
    OutcomeGrid,
    RateEntry,
    compare,
    correlate,
    entries_of,
    load_openloop,
    load_real_results,
    posterior_comparison,
)
from assay.metrics.correlation import match_task
from assay.store import EpisodeRecord, Outcome, Store
from assay.store.aggregates import CellTotals, nominal_successes


@dataclass(frozen=True)
class FailureFacts:
    """What failure mining knows about one unsuccessful episode."""

    category: str | None
    attribution: Attribution | None
    ponr: PointOfNoReturn | None
    trace: dict[str, Any] | None = None  # the policy's own account over the episode (trace.* summaries)


def real_to_sim(
    totals: Sequence[CellTotals], real: Sequence[RateEntry], n_resamples: int
) -> tuple[CorrelationReport | None, str]:
    """(correlation of the real cells that this campaign also ran, a note); None when no cell matches.
    ``totals``: the campaign's cell counts in the report's variant scope (``metrics.scope``)."""
    if not real or not totals:
        return None, ("no real-world results: `assay correlate --real REAL.csv --campaign NAME --record` (or "
                      "`assay report --real REAL.csv`) adds this section")
    sim = entries_of(totals, "campaign")
    tasks = {e.task for e in sim}
    cells = {(e.task, e.policy) for e in sim}
    matched = [e for e in real if (match_task(e.task, tasks), e.policy) in cells]
    if not matched:
        return None, (f"the {len(real)} real results share no (task, policy) cell with this campaign's "
                      f"{len(cells)} cells")
    report = correlate(matched, sim, ("real", "sim"), n_resamples=n_resamples)
    sources = ", ".join(sorted({e.source for e in matched if e.source}))
    return report, (f"{len(matched)} of {len(real)} real (task, policy) results"
                    + (f" (from {sources})" if sources else "") + " match this campaign")


def stored_real(store: Store) -> list[RateEntry]:
    """The real results ``assay correlate --record`` stored."""
    return load_real_results(store.root)


def checkpoints(grid: OutcomeGrid | None, order: Sequence[str], baseline: str | None,
                n_resamples: int) -> tuple[str | None, list[Comparison]]:
    """Every other policy against ``baseline`` (default: the campaign's first policy) on paired seeds, over
    ``grid`` (the episodes in the report's variant scope; None: there are none)."""
    present = [p for p in order if grid is not None and p in grid.policies]
    if baseline is not None and baseline not in present:
        raise AssayError(f"baseline {baseline!r} is not a policy of this campaign; valid: {', '.join(present)}")
    if grid is None or len(present) < 2:
        return None, []
    base = baseline or present[0]
    return base, compare(grid, base, [p for p in present if p != base], n_resamples=n_resamples)


def checkpoint_posteriors(grid: OutcomeGrid | None, baseline: str | None,
                          others: Sequence[str]) -> dict[str, dict[str, float]]:
    """``{other: {task: P(other > baseline), "suite": P(suite mean of other > baseline's)}}`` from Beta(1 + s,
    1 + f) posteriors of ``grid`` (in the report's variant scope) (``metrics.posterior``; the suite by seeded
    joint draws)."""
    if grid is None or baseline is None or not others:
        return {}
    out = {}
    for other in others:
        counts = {t.task: (*t.counts(other), *t.counts(baseline)) for t in grid.tasks}
        found = posterior_comparison(counts, seed=0)
        out[other] = {**found.per_task, "suite": found.suite}
    return out


def unsuccessful(store: Store, campaign: str) -> list[EpisodeRecord]:
    """The campaign's unsuccessful episodes, decoded, in listing order (policy, task, variant, index): what
    failure mining and the gallery read."""
    found = [r for outcome in (Outcome.FAILURE, Outcome.TIMEOUT, Outcome.ERROR)
             for r in store.catalog.episodes(campaign=campaign, outcome=outcome.value)]
    return sorted(found, key=lambda r: (r.policy_name, r.task_id, r.variant_key, r.episode_index))


def failure_facts(store: Store, campaign: str, failed: Sequence[EpisodeRecord]) -> dict[str, FailureFacts]:
    """Category, attribution and point of no return of every unsuccessful episode in ``failed`` (None where
    unknown); the nominal twins attribution pairs them with are looked up by (task, seed), only theirs, not
    decoded: a page of failures costs its own rows."""
    categories = FailureTable(store).get([r.key for r in failed])
    twins = nominal_successes(store.catalog, campaign, [(r.policy_name, r.task_id, r.seed) for r in failed])
    attributions = {a.key: a for a in attribute(list(failed), categories, twins)}
    ponrs = load_ponrs(store.root)
    out = {}
    for r in failed:
        known = categories.get(r.key)
        category = known.category.value if known is not None and known.category is not None else None
        trace = known.evidence.get("trace") if known is not None else None
        out[r.key] = FailureFacts(
            category, attributions.get(r.key), ponrs.get(r.key), trace if isinstance(trace, dict) else None)
    return out


def pick_gallery(failed: Sequence[EpisodeRecord], facts: dict[str, FailureFacts], limit: int) -> list[EpisodeRecord]:
    """Failures with a point of no return first, then one per (policy, category) in turn, so a gallery
    of ``limit`` cards shows as many different ways of failing as it can."""
    analysed = [r for r in failed if facts[r.key].ponr is not None]
    buckets: dict[tuple[str, str], list[EpisodeRecord]] = {}
    for r in failed:
        if facts[r.key].ponr is None:
            buckets.setdefault((r.policy_name, facts[r.key].category or r.outcome.value), []).append(r)
    chosen = analysed[:limit]
    queues = [list(b) for _, b in sorted(buckets.items())]
    while len(chosen) < limit and any(queues):
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(queue.pop(0))
    return chosen


def regression_status(store: Store, campaign: str) -> list[SetStatus]:
    """The regression sets mined from ``campaign``, with their reruns."""
    return statuses(store.root, source=campaign)


PRIORITY_LIMIT = 50_000  # episodes read for "what to collect next" (a bounded report at millions of episodes)
PRIORITY_ROWS = 10  # the heaviest (policy, task, region) cells shown


def collect_next(store: Store, campaign: str, planned: int) -> tuple[list[Priority], str]:
    """``assay priorities`` for the report: the heaviest cells by failure mass x recoverability (categories as
    ``assay failures mine`` stored them, recoverability from ``assay failures ponr``), and a note of the data it
    read (at most ``PRIORITY_LIMIT`` episodes)."""
    records = store.catalog.episodes(campaign=campaign, limit=PRIORITY_LIMIT)
    failed = [r.key for r in records if r.outcome is not Outcome.SUCCESS]
    mined = FailureTable(store).get(failed)
    rows = priorities(records, mined, load_ponrs(store.root))
    scope = (f"over the first {len(records):,} of {planned:,} episodes" if planned > len(records)
             else f"over all {len(records):,} episodes")
    note = (f"{scope}; categories of {len(mined):,} of {len(failed):,} unsuccessful episodes mined"
            + ("" if len(mined) == len(failed) else f" (`assay failures mine --campaign {campaign}` mines the rest)"))
    return sorted(rows, key=lambda p: (p.score is None, -(p.score or 0.0), -p.mass))[:PRIORITY_ROWS], note


def openloop(store: Store, campaign: str) -> dict[str, Any] | None:
    """The open-loop scores ``assay openloop`` saved for ``campaign``, or None."""
    return load_openloop(store, campaign)
