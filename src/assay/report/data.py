"""What a report shows, gathered from the store: one frozen ``ReportData`` per campaign.

Everything here is computed from the catalog and ``assay.metrics``; rendering
(``figures``, ``html``) never touches the store except to read episode videos, which it
reads through the store's data root (``Store.files``: the store directory, a ``--data``
directory or an fsspec URL), as it reads step files.
Robustness comes from ``metrics.retention_table`` (paired seeds); failure categories
from the table that ``assay failures mine`` fills.
"""

from __future__ import annotations

import json
import os
import shlex
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError, unknown_name
from assay.failures import SetStatus
from assay.failures.attribution import coverage_of
from assay.failures.priorities import Priority
from assay.failures.safety import campaign_interventions
from assay.metrics import (
    AxisProfile,
    CategoryProfile,
    Comparison,
    Completeness,
    CorrelationReport,
    Leaderboard,
    RateEntry,
    RateRow,
    RetentionRow,
    Signoff,
    VariantScope,
    category_profile,
    leaderboard,
    planned_variants,
    rate_rows,
    retention_table,
    robustness_profile,
    stored_grid,
    stored_retention,
    totals_completeness,
    totals_signoff,
    variant_scope,
)
from assay.metrics.passk import PassKTable, pass_k_rows
from assay.metrics.stamp import Stamp, campaign_stamp, known_manifests
from assay.report import evidence
from assay.report.evidence import FailureFacts
from assay.report.flywheel import load_flywheel
from assay.report.gallery import campaign_failures
from assay.spec.protocol import Manifest
from assay.store import EpisodeRecord, Outcome, Store, video_relpath
from assay.store.aggregates import (
    CellTotals,
    campaign_seeds,
    cell_totals,
    error_reasons,
    provenance_totals,
    renderer_totals,
    unsound_rows,
    variant_examples,
)
from assay.store.provenance import renderer_notes_of

GALLERY_LIMIT = 8  # failure episodes shown with keyframes/video; the rest are listed


@dataclass(frozen=True)
class RobustnessRow:
    """One policy under one variant, against its own nominal episodes on the same (task, seed) pairs."""

    policy: str
    variant: str
    axis: str  # visual / behavioral / semantic, or "mixed" for multi-factor variants
    factor: str  # the factor name(s), comma-joined
    value: str
    pairs: int
    nominal_rate: float | None
    variant_rate: float | None
    retention: float | None  # variant_rate / nominal_rate; None when nominal never succeeded
    ci_low: float | None = None  # MOVER-R interval of the paired ratio (metrics.retention_table)
    ci_high: float | None = None
    discordant: int = 0  # pairs whose outcome changed under the variant

    def to_dict(self) -> dict[str, Any]:
        """The row as a JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class GalleryItem:
    """One failed episode of the gallery: its record, the videos that exist, and what mining found about it."""

    record: EpisodeRecord
    videos: tuple[tuple[str, str], ...]  # (camera, path relative to the data root) that exist there
    facts: FailureFacts | None = None


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, gathered once from the store (the report never runs a policy or a simulator)."""

    campaign: str
    spec: dict[str, Any]  # the resolved campaign saved in the catalog
    store_root: str  # the store as the report names it (shown_store: relative to the report, or its name)
    episodes: int  # recorded episodes linked to the campaign (counted, not read)
    rates: tuple[RateRow, ...]  # by policy × task
    leaderboard: Leaderboard | None
    signoffs: tuple[Signoff, ...]
    robustness: tuple[RobustnessRow, ...]
    outcomes_by_policy: dict[str, dict[str, int]]
    failure_categories: dict[str, dict[str, int]]  # policy -> category -> count (after `assay failures mine`)
    gallery: tuple[GalleryItem, ...]
    provenance: dict[str, Any]
    reproduce: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    axes: tuple[AxisProfile, ...] = ()  # robustness pooled per policy and axis
    categories: tuple[CategoryProfile, ...] = ()  # robustness pooled per policy and LIBERO-Plus category
    attribution: tuple[dict[str, Any], ...] = ()  # failures.coverage rows: capability, confidence, failures, share
    real_to_sim: CorrelationReport | None = None
    real_to_sim_note: str = ""
    openloop: dict[str, Any] | None = None  # what `assay openloop` saved: reference, rows, closed, agreement
    regression: tuple[SetStatus, ...] = ()
    baseline: str | None = None
    comparisons: tuple[Comparison, ...] = ()
    posteriors: dict[str, dict[str, float]] = field(default_factory=dict)  # other -> task|suite -> P(other > base)
    adaptive: dict[str, Any] | None = None  # campaigns/NAME/adaptive.json of an adaptive campaign
    safety: tuple[dict[str, Any], ...] = ()  # failures.safety.intervention_rows: the filter's counts per cell
    leakage: tuple[dict[str, Any], ...] = ()  # per bc checkpoint (learning.leakage.Leakage.to_dict), from the caller
    flywheel: tuple[dict[str, Any], ...] = ()  # STORE/learning/flywheel/*.json that ran this campaign
    collect_next: tuple[Priority, ...] = ()  # failures.priorities: the heaviest cells, what to collect there
    collect_next_note: str = ""  # the data they were computed over (bounded) and how much of it was mined
    pass_k: PassKTable | None = None  # pass^k per policy × task and per policy (metrics.passk)
    scoring: Scoring | None = None  # the variant scope of the headline numbers and the campaign's completeness
    unsuccessful: int = 0  # episodes that did not succeed (the gallery shows a few of them)
    error_reasons: dict[str, int] = field(default_factory=dict)  # error episodes per reason

    @property
    def progress(self) -> tuple[int, int]:
        """(episodes recorded, jobs planned)."""
        return self.episodes, int(self.spec.get("jobs", self.episodes))


def _cameras(spec: dict[str, Any]) -> list[str]:
    """The cameras the campaign's tasks rendered (a task's own when the campaign named none), first seen first."""
    names = [c["name"] for c in spec.get("campaign", {}).get("cameras", []) or []]
    for task in spec.get("tasks", []):
        names += [c["name"] for c in (task.get("spec") or {}).get("cameras", [])]
    return list(dict.fromkeys(names))


def _variant_labels(variant: Any) -> tuple[str, str, str]:
    perturbations = variant.get("perturbations", []) if isinstance(variant, dict) else []
    axes = sorted({str(p.get("axis", "")) for p in perturbations})
    factors = ",".join(str(p.get("factor", "")) for p in perturbations)
    values = ",".join(str(p.get("value", "")) for p in perturbations)
    return (axes[0] if len(axes) == 1 else "mixed"), factors, values


def _retention(records: Sequence[EpisodeRecord]) -> list[RetentionRow]:
    """``metrics.retention_table`` (empty without variants, or without nominal episodes to pair with)."""
    if not any(r.variant_name != "nominal" for r in records) or not any(r.variant_name == "nominal" for r in records):
        return []
    return retention_table(records)


def robustness_rows(
    records: Sequence[EpisodeRecord], retention: Sequence[RetentionRow] | None = None
) -> list[RobustnessRow]:
    """Per policy and non-nominal variant: paired rates and retention (``retention``: the table, if computed)."""
    labels = {r.variant_name: _variant_labels(r.variant) for r in records if r.variant_name != "nominal"}
    return labelled_rows(_retention(records) if retention is None else retention, labels)


def labelled_rows(retention: Sequence[RetentionRow], labels: dict[str, tuple[str, str, str]]) -> list[RobustnessRow]:
    """:func:`robustness_rows` of a retention table, each variant's (axis, factors, values) given."""
    rows = []
    for row in retention:
        axis, factor, value = labels[row.variant]
        axis = axis if axis == "mixed" else row.axis  # semantic:conflict marks words that name another task
        n = row.pairs
        rows.append(RobustnessRow(row.policy, row.variant, axis, factor, value, n,
                                  row.nominal_successes / n if n else None, row.variant_successes / n if n else None,
                                  row.retention, row.ci_low, row.ci_high, row.only_nominal + row.only_variant))
    return rows


def _provenance(store: Store, campaign: str) -> dict[str, Any]:
    """Episodes per code revision, package version, Python and host, and the seeds (counted by the database)."""
    found = provenance_totals(store.catalog, campaign)
    return {"code_revisions": found["code_revisions"],
            "packages": {name: found["packages"][name] for name in sorted(found["packages"])},
            "python": found["python"], "hosts": found["hosts"], "seeds": campaign_seeds(store.catalog, campaign)}


def _failure_gallery(store: Store, campaign: str, cameras: Sequence[str]
                     ) -> tuple[dict[str, dict[str, int]], list[dict[str, object]], list[GalleryItem]]:
    """Failure categories per policy, attribution coverage and the gallery's cards (with the videos each has in
    the data root), from one bounded pass over the campaign's failures (:mod:`assay.report.gallery`)."""
    found = campaign_failures(store, campaign, GALLERY_LIMIT)
    gallery = []
    for r in found.gallery:
        videos = tuple((c, video_relpath(r.key, c)) for c in cameras if store.files.exists(video_relpath(r.key, c)))
        gallery.append(GalleryItem(r, videos, found.facts[r.key]))
    return found.categories, coverage_of(found.attributions), gallery


def stored_totals(store: Store, campaign: str) -> list[CellTotals]:
    """The campaign's cell counts as the catalog keeps them, counted from the rows when a row's outcome is not one
    (it is left out, and named when the command ends, as a reader that decodes rows names it)."""
    left_out = unsound_rows(store.catalog, campaign)
    store.catalog.skipped.update(left_out)
    return cell_totals(store.catalog, campaign, from_rows=bool(left_out))


def _stored_retention(store: Store, campaign: str, totals: Sequence[CellTotals]) -> list[RetentionRow]:
    """``metrics.stored_retention`` (empty without variants, or without nominal episodes to pair with)."""
    names = {t.variant for t in totals}
    if "nominal" not in names or len(names) < 2:
        return []
    return stored_retention(store.catalog, campaign, totals)


def shown_store(root: Path, out_dir: Path | None) -> str:
    """The store as a report names it: relative to the report's directory when that is near (``runs/demo``,
    ``../store``), else only its name, never the machine's absolute path (a report is shared)."""
    if out_dir is not None:
        relative = Path(os.path.relpath(root, out_dir))
        if relative.parts.count("..") <= 2:
            return relative.as_posix()
    return root.name


@dataclass(frozen=True)
class Scoring:
    """The variant scope of a report's headline numbers, the campaign's completeness in it, and why the
    leaderboard and comparisons are withheld (empty: shown)."""

    scope: VariantScope
    completeness: Completeness  # the cells in scope
    campaign: Completeness  # every cell of the campaign
    withheld: str = ""
    variants: tuple[str, ...] = ()  # every variant the campaign plans, in plan order
    stamp: Stamp | None = None  # reportable or diagnostic (assay.metrics.stamp)

    def to_dict(self) -> dict[str, Any]:
        """The ``scope``, ``completeness`` and ``stamp`` documents the CLI's --json carries too."""
        return {"scope": self.scope.to_dict(), "completeness": {**self.completeness.to_dict(),
                                                                "campaign": self.campaign.summary()},
                "withheld": self.withheld or None, "stamp": self.stamp.to_dict() if self.stamp else None}


def score_scope(spec: dict[str, Any], totals: Sequence[CellTotals], adaptive: dict[str, Any] | None,
                allow_partial: bool = False, hint: str = "pass --allow-partial to `assay report`",
                manifests: Sequence[Manifest] = ()) -> Scoring:
    """The default variant scope of a campaign (``metrics.scope``), its completeness and the refusal to rank
    over cells with no episode (unless ``allow_partial``; ``hint`` says how to ask): the rule ``assay results``
    applies. ``totals``: the campaign's cell counts."""
    variants = planned_variants(spec) or sorted({t.variant for t in totals})
    scope = variant_scope(variants)
    whole = totals_completeness(spec, totals, adaptive)
    covered = whole.select(variants=scope.variants)
    withheld = ""
    try:
        covered.refuse_missing("the leaderboard and the checkpoint comparison", allow_partial)
    except AssayError as exc:
        withheld = str(exc).replace("pass --allow-partial", hint)
    stamp = campaign_stamp(spec, whole, totals, manifests)
    return Scoring(scope, covered, whole, withheld, tuple(variants), stamp)


def campaign_scoring(store: Store, campaign: str, totals: Sequence[CellTotals], allow_partial: bool = False,
                     hint: str = "pass --allow-partial to `assay report`") -> Scoring:
    """:func:`score_scope` of a stored campaign (its resolved document and adaptive state): what the report and
    the dashboard show their headline numbers under."""
    row = store.catalog.campaign(campaign)
    adaptive_path = store.campaign_dir(campaign) / "adaptive.json"
    adaptive = json.loads(adaptive_path.read_text()) if adaptive_path.exists() else None
    manifests, _ = known_manifests(store.root)
    return score_scope(row.spec if row is not None else {}, totals, adaptive, allow_partial, hint, manifests)


def gather(store: Store, campaign: str, confidence: float = 0.95, n_resamples: int = 2000,
           real: Sequence[RateEntry] | None = None, baseline: str | None = None,
           leakage: Sequence[dict[str, Any]] = (), pass_k: int = 3, out_dir: Path | None = None,
           allow_partial: bool = False) -> ReportData:
    """Collect everything the report shows for ``campaign`` (AssayError if the store has no such campaign).

    ``real``: real-world results to plot against the campaign (default: those stored by ``assay correlate
    --record``); ``baseline``: the policy the checkpoint comparison is against (default: the first listed);
    ``leakage``: the leakage check of each bc checkpoint the campaign ran (the caller loads checkpoints:
    ``assay.learning.leakage.campaign_leakage``; this package never does); ``pass_k``: the k of the pass^k section;
    ``out_dir``: where the report is written, which the store's path is shown relative to (:func:`shown_store`).
    Headline numbers (rates, leaderboard, comparisons, real-to-sim) are in the campaign's default variant scope
    (``metrics.scope``: nominal when planned), and the leaderboard and comparisons are withheld while a cell
    has no episode, unless ``allow_partial`` (``metrics.completeness``).
    """
    known = {c.name: c for c in store.catalog.campaigns()}
    if campaign not in known:
        raise AssayError(unknown_name("campaign", campaign, known, store.root))
    spec = known[campaign].spec
    totals = stored_totals(store, campaign)
    adaptive_path = store.campaign_dir(campaign) / "adaptive.json"
    adaptive = json.loads(adaptive_path.read_text()) if adaptive_path.exists() else None
    scoring = campaign_scoring(store, campaign, totals, allow_partial)
    notes: list[str] = [f"leakage: {leak['contaminated']} of {leak['episodes']} episodes of {leak['checkpoint']} are "
                        "scenes it was trained on; their successes say nothing about generalisation"
                        for leak in leakage if leak.get("contaminated")]
    notes += renderer_notes_of(renderer_totals(store.catalog, campaign))  # several renderers, or software on a GPU
    board, grid = None, None
    signoffs: list[Signoff] = []
    chosen = set(scoring.scope.variants)
    scoped = [t for t in totals if t.variant in chosen]
    if scoped:
        signoffs = totals_signoff(scoped, store.root)
        grid = stored_grid(store.catalog, campaign, scoped)
    if grid is not None and not scoring.withheld:
        board = leaderboard(grid, confidence=confidence, n_resamples=n_resamples)
    if not totals:
        notes.append("no episodes recorded yet")
    outcomes: dict[str, dict[str, int]] = defaultdict(lambda: {o.value: 0 for o in Outcome})
    for t in totals:
        for outcome, n in (("success", t.successes), ("failure", t.failures), ("timeout", t.timeouts),
                           ("error", t.errors)):
            outcomes[t.policy][outcome] += n
    retention = _stored_retention(store, campaign, totals)
    labels = {name: _variant_labels(variant) for name, variant, _ in variant_examples(store.catalog, campaign).values()
              if name != "nominal"}
    categories, attribution, gallery = _failure_gallery(store, campaign, _cameras(spec))
    collect, collect_note = evidence.collect_next(store, campaign, sum(t.episodes for t in totals))
    real_report, real_note = evidence.real_to_sim(scoped, evidence.stored_real(store) if real is None else real,
                                                  n_resamples)
    order = [p.get("name") for p in spec.get("policies", [])] or sorted({t.policy for t in totals})
    base, comparisons = evidence.checkpoints(grid, order, baseline, n_resamples) if not scoring.withheld \
        else (None, [])
    posteriors = evidence.checkpoint_posteriors(grid, base, sorted({c.b for c in comparisons}))
    name_file = f"{campaign}.yaml"
    shown = shown_store(store.root, out_dir)
    reproduce = (
        f"assay run {shlex.quote(name_file)} --store {shlex.quote(shown)}",
        f"assay report {shlex.quote(campaign)} --store {shlex.quote(shown)} -o {shlex.quote(campaign)}.html",
    )
    return ReportData(
        adaptive=adaptive, scoring=scoring,
        campaign=campaign, spec=spec, store_root=shown, episodes=sum(t.episodes for t in totals),
        unsuccessful=sum(t.episodes - t.successes for t in totals),
        error_reasons=error_reasons(store.catalog, campaign),
        rates=tuple(rate_rows(scoped, by=("policy", "task"), confidence=confidence)) if scoped else (),
        leaderboard=board, signoffs=tuple(signoffs), robustness=tuple(labelled_rows(retention, labels)),
        axes=tuple(robustness_profile(retention)), categories=tuple(category_profile(retention)),
        outcomes_by_policy=dict(outcomes), failure_categories=categories, gallery=tuple(gallery),
        provenance=_provenance(store, campaign), reproduce=reproduce, notes=tuple(notes),
        attribution=tuple(attribution),
        real_to_sim=real_report, real_to_sim_note=real_note, openloop=evidence.openloop(store, campaign),
        regression=tuple(evidence.regression_status(store, campaign)), baseline=base, comparisons=tuple(comparisons),
        posteriors=posteriors, safety=tuple(campaign_interventions(store, campaign)), leakage=tuple(leakage),
        flywheel=tuple(load_flywheel(store, campaign)), collect_next=tuple(collect), collect_next_note=collect_note,
        pass_k=pass_k_rows(scoped, pass_k, confidence=confidence) if scoped else None,  # the scope's, as results
    )
