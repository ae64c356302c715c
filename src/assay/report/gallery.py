"""The report's failures in bounded memory: the gallery's cards, failure categories and attribution per policy.

The report shows a few failure cards (``GALLERY_LIMIT``), failure categories counted per policy, and each
policy's failures attributed to capabilities. It used to decode every unsuccessful row for them (848 MB at 100k
episodes, killed at 6 GB at a million). Here one pass over the campaign's unsuccessful links, in listing order
(policy, task, variant, episode index), reads each failure's catalog facts only (key, policy, task, variant, seed,
outcome, stored category: no JSON column) a chunk at a time, and keeps:

* the gallery's candidates: the first ``limit`` failures with a point of no return, and the first ``limit`` of
  each (policy, category or outcome) stratum, which is every failure :func:`~assay.report.evidence.pick_gallery`
  can choose (it takes the analysed ones first, then one stratum's head after another), so the cards are the very
  ones it picks from all the failures; only those few rows are decoded;
* categories counted per policy;
* attributions counted per (policy, capability, confidence) (:func:`assay.failures.attribution.coverage_of`),
  each chunk attributed from its stored categories and whether its nominal twin succeeded (the ``nominal`` code
  on its paired row across variants, which the catalog keeps: joined in the same query).

Memory is bounded by the chunk, the strata and the cells, not by the campaign; time is one ordered scan of its
failures.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sqlalchemy as sa

from assay.failures.attribution import attribute
from assay.failures.categories import Categorized, Category
from assay.failures.ponr import load_ponrs
from assay.failures.table import FailureTable, failure_categories
from assay.report.evidence import FailureFacts, failure_facts, pick_gallery
from assay.store import EpisodeRecord, Outcome, Store, pairs
from assay.store.aggregates import cell_totals, nominal_successes, variant_dumps
from assay.store.schema import campaign_episodes, cell_counts, episodes, seed_rows

CHUNK = 2000  # failures attributed at a time
UNSUCCESSFUL = (Outcome.FAILURE.value, Outcome.TIMEOUT.value, Outcome.ERROR.value)
TWIN = "nominal twin"  # stands for a twin's key where only its existence is counted


class Failure(NamedTuple):
    """An unsuccessful episode as attribution reads it (its catalog facts; no JSON column decoded but its variant's,
    once per variant). ``instruction`` is left empty: it only words a trace attribution's evidence, which the
    counts do not show."""

    key: str
    policy_name: str
    task_id: str
    seed: int
    variant_key: str
    variant_name: str
    variant: dict[str, Any]
    instruction: str
    outcome: Outcome


@dataclass
class CampaignFailures:
    """What one pass over a campaign's failures gives the report."""

    gallery: list[EpisodeRecord] = field(default_factory=list)  # the cards, in the order pick_gallery chose them
    facts: dict[str, FailureFacts] = field(default_factory=dict)  # of the cards
    categories: dict[str, dict[str, int]] = field(default_factory=dict)  # policy -> category -> failures
    attributions: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (policy, capability, confidence)


def _ordered(store: Store, campaign: str) -> Iterator[Any]:
    """The campaign's unsuccessful links in listing order (read from the listing index), with their stored category
    and evidence (None: not mined) and their paired row across variants (``pattern``: its outcome codes, among
    them the nominal twin's, :mod:`assay.store.pairs`)."""
    with store.catalog.engine.connect() as conn:
        policies: Sequence[Any] = conn.execute(sa.select(cell_counts.c.policy_name).distinct().where(
            cell_counts.c.campaign == campaign)).scalars().all()
    paired = sa.and_(seed_rows.c.campaign == campaign, seed_rows.c.across == "variant",
                     seed_rows.c.g0 == campaign_episodes.c.policy_name, seed_rows.c.g1 == episodes.c.task_id,
                     seed_rows.c.seed == episodes.c.seed)
    query = sa.select(campaign_episodes.c.key, campaign_episodes.c.policy_name, episodes.c.task_id,
                      episodes.c.variant_key, episodes.c.variant_name, episodes.c.seed, episodes.c.outcome,
                      failure_categories.c.category, failure_categories.c.evidence_json, seed_rows.c.pattern) \
        .select_from(campaign_episodes.join(episodes, campaign_episodes.c.key == episodes.c.key)
                     .outerjoin(failure_categories, failure_categories.c.key == episodes.c.key)
                     .outerjoin(seed_rows, paired)) \
        .where(campaign_episodes.c.campaign == campaign, campaign_episodes.c.policy_name.in_(list(policies)),
               campaign_episodes.c.outcome.in_(UNSUCCESSFUL), episodes.c.outcome.in_(UNSUCCESSFUL)) \
        .order_by(campaign_episodes.c.policy_name, episodes.c.task_id, episodes.c.variant_key,
                  episodes.c.episode_index, episodes.c.key)
    with store.catalog.engine.connect() as conn:
        yield from conn.execute(query.execution_options(yield_per=CHUNK))


def campaign_failures(store: Store, campaign: str, limit: int) -> CampaignFailures:
    """The gallery of ``limit`` cards, categories per policy and attribution counts of ``campaign`` (see the module
    docstring)."""
    FailureTable(store)  # the categories' table, made if no failures command made it yet
    ponrs = load_ponrs(store.root)
    variants = {key: dump for key, (_, dump) in
                variant_dumps(store.catalog, {t.variant_key for t in cell_totals(store.catalog, campaign)}).items()}
    found = CampaignFailures()
    analysed: list[str] = []
    strata: dict[tuple[str, str], list[str]] = {}
    order: dict[str, int] = {}
    chunk: list[Failure] = []
    categories: dict[str, Categorized] = {}
    twins: dict[tuple[str, str, int], str] = {}
    doubled: list[tuple[str, str, int]] = []
    for position, row in enumerate(_ordered(store, campaign)):
        key, policy = str(row.key), str(row.policy_name)
        if row.category is not None:
            counted = found.categories.setdefault(policy, {})
            counted[str(row.category)] = counted.get(str(row.category), 0) + 1
        if key in ponrs:
            if len(analysed) < limit:
                analysed.append(key)
                order[key] = position
        else:
            stratum = strata.setdefault((policy, str(row.category or row.outcome)), [])
            if len(stratum) < limit:
                stratum.append(key)
                order[key] = position
        failure = Failure(key, policy, str(row.task_id), int(row.seed), str(row.variant_key), str(row.variant_name),
                          variants.get(str(row.variant_key), {}), "", Outcome(row.outcome))
        chunk.append(failure)
        if row.evidence_json is not None:  # mined: its category, and the trace summary attribution reads first
            trace = json.loads(row.evidence_json).get("trace") if '"trace"' in row.evidence_json else None
            categories[key] = Categorized(Category(row.category) if row.category else None, (), "",
                                          {"trace": trace} if trace is not None else {})
        nominal = json.loads(row.pattern).get("nominal") if row.pattern and '"nominal":' in row.pattern else None
        if nominal == pairs.SUCCESS:
            twins[(policy, failure.task_id, failure.seed)] = TWIN
        elif nominal == pairs.DUPLICATE:  # two nominal episodes of one policy on the row: ask which succeeded
            doubled.append((policy, failure.task_id, failure.seed))
        if len(chunk) == CHUNK:
            _count(store, campaign, chunk, categories, twins, doubled, found.attributions)
            chunk, categories, twins, doubled = [], {}, {}, []
    _count(store, campaign, chunk, categories, twins, doubled, found.attributions)
    candidates = store.catalog.records(campaign, sorted(order, key=order.__getitem__))  # listing order
    facts = failure_facts(store, campaign, candidates)
    found.gallery = pick_gallery(candidates, facts, limit)
    found.facts = {r.key: facts[r.key] for r in found.gallery}
    return found


def _count(store: Store, campaign: str, chunk: Sequence[Failure], categories: dict[str, Categorized],
           twins: dict[tuple[str, str, int], str], doubled: list[tuple[str, str, int]],
           counts: Counter[tuple[str, str, str]]) -> None:
    """Count the attributions of ``chunk`` (its stored categories, and which of its nominal twins succeeded)."""
    if doubled:
        twins |= nominal_successes(store.catalog, campaign, doubled)
    for a in attribute(chunk, categories, twins):
        counts[(a.policy, a.capability, a.confidence)] += 1
