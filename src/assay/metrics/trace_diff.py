"""Regression localisation: where two runs' per-layer traces first part, on paired seeds.

Two sides (a campaign, optionally one policy and one variant of it) are paired by (task, seed): each policy
and each variant runs on the same seeds, so a pair is the same episode under the two settings. For each
pair and each ``value`` field of the trace (``store.trace``: a field the episode's inputs determine; timings
and batch formation are never compared) the first step where the two differ beyond the noise band; the
pair's **first divergence** is the earliest (step, stage) among them: within one step an earlier stage causes
the later ones (the policy decides, the action is processed, the controller commands, physics simulates, the
controller's tracking is what physics left, the frame is drawn), so the first stage to part is where the
change entered. A changed controller gain moves the controller's target at step 0 before physics or the
policy see anything; a changed friction parts the contacts first, the policy only at the next step's
observation; a changed light parts the frames and nothing else.

**The noise band.** The simulators Assay drives repeat an episode bit for bit from its seed, on any
executor and worker count (the determinism tests), and so do its policies, so the run-to-run noise of a
value field is zero on one machine; the band, ``atol + rtol × max(|a|, |b|)`` (1e-9 and 1e-6 by default),
absorbs floating-point differences across machines and libraries. A backend or policy that does not
repeat itself (sampling without a seed, GPU kernels) needs a wider band (``atol``/``rtol``). Durations are
compared apart, never used to localise: B's median of the per-episode medians against side A's, beyond the
noise when outside the spread of A's own episodes widened to ±25% (``TIMING_BAND``).

Aggregated over the pairs: per layer, in how many pairs it parts first and at all, and its median first step;
the verdict names the layer that parts first in most pairs ("first diverges in controller at step k"), and
where success changes ("success changes at step m").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from assay.errors import TraceError, unknown_name
from assay.store import EpisodeRecord, Outcome, Store
from assay.store.trace import EpisodeTrace, Kind, Layer, Stage, field_of, kind_of, read_trace

ATOL, RTOL = 1e-9, 1e-6
TIMING_BAND = 0.25  # a timing within ±25% of side A's (or within its episodes' own spread) is noise
LAYER_ORDER = {layer: i for i, layer in enumerate(Layer)}


@dataclass(frozen=True)
class Side:
    """One side of a comparison: a campaign's episodes, of one policy and one variant when named."""

    campaign: str
    policy: str | None = None
    variant: str | None = None

    @classmethod
    def parse(cls, text: str) -> Side:
        """``CAMPAIGN``, ``CAMPAIGN:POLICY`` or ``CAMPAIGN:POLICY:VARIANT`` (an empty policy: every policy)."""
        campaign, _, rest = text.partition(":")
        policy, _, variant = rest.partition(":")
        return cls(campaign, policy or None, variant or None)

    @property
    def label(self) -> str:
        """The side as it was named."""
        return ":".join(p for p in (self.campaign, self.policy or ("" if self.variant else None), self.variant)
                        if p is not None)


@dataclass(frozen=True)
class Divergence:
    """Where one field of a pair first parts."""

    column: str
    layer: Layer
    stage: Stage
    step: int
    a: Any
    b: Any

    @property
    def order(self) -> tuple[int, int, int]:
        """Earlier step first, then earlier stage, then the layer's place in the loop."""
        return (self.step, int(self.stage), LAYER_ORDER[self.layer])


@dataclass(frozen=True)
class PairDiff:
    """One (task, seed) pair: each layer's first divergence, the pair's first, and where success changes."""

    task: str
    seed: int
    key_a: str
    key_b: str
    outcome_a: Outcome
    outcome_b: Outcome
    by_layer: dict[Layer, Divergence]
    success_step: int | None  # the first step at which "succeeded so far" differs (None: it never does)

    @property
    def first(self) -> Divergence | None:
        """The pair's first divergence (None: no value field parts)."""
        return min(self.by_layer.values(), key=lambda d: d.order) if self.by_layer else None


@dataclass(frozen=True)
class LayerSummary:
    """One layer over every pair."""

    layer: Layer
    first_in: int  # pairs where this layer parts first
    diverged: int  # pairs where it parts at all
    median_step: float | None  # its median first step over the pairs where it parts
    columns: dict[str, int] = field(default_factory=dict)  # the field that parted first in it, and in how many


@dataclass(frozen=True)
class TimingRow:
    """A timing field's per-episode medians on both sides."""

    column: str
    layer: Layer
    median_a: float
    median_b: float
    band: tuple[float, float]  # side A's episodes' medians relative to A's own median (min, max)

    @property
    def ratio(self) -> float:
        """B's median over A's."""
        return self.median_b / self.median_a if self.median_a > 0 else math.nan

    @property
    def beyond(self) -> bool:
        """Whether B's median lies outside the spread of A's episodes."""
        return bool(math.isfinite(self.ratio) and not self.band[0] <= self.ratio <= self.band[1])


@dataclass(frozen=True)
class TraceDiff:
    """Two sides' traces compared pair by pair."""

    a: Side
    b: Side
    pairs: tuple[PairDiff, ...]
    skipped: dict[str, int]  # why episodes were left out (no step file, no trace, no partner) -> how many
    atol: float
    rtol: float
    timings: tuple[TimingRow, ...] = ()

    def layers(self) -> list[LayerSummary]:
        """Every layer's summary, in loop order."""
        rows = []
        for layer in Layer:
            firsts = [p for p in self.pairs if p.first is not None and p.first.layer is layer]
            parted = [p.by_layer[layer].step for p in self.pairs if layer in p.by_layer]
            columns: dict[str, int] = {}
            for p in firsts:
                assert p.first is not None
                columns[p.first.column] = columns.get(p.first.column, 0) + 1
            rows.append(LayerSummary(layer, len(firsts), len(parted),
                                     float(np.median(parted)) if parted else None, columns))
        return rows

    @property
    def named(self) -> LayerSummary | None:
        """The layer that parts first in most pairs (ties: the earlier median step, then the earlier layer);
        None when no pair parts."""
        candidates = [row for row in self.layers() if row.first_in]
        if not candidates:
            return None
        return min(candidates, key=lambda r: (-r.first_in, r.median_step if r.median_step is not None else math.inf,
                                              LAYER_ORDER[r.layer]))

    @property
    def success_changes(self) -> list[int]:
        """The steps at which success changes, one per pair where it does."""
        return [p.success_step for p in self.pairs if p.success_step is not None]

    def verdict(self) -> str:
        """The one sentence: which layer parts first, at which step, and where success changes."""
        n = len(self.pairs)
        changes = self.success_changes
        success = (f"success changes at step {int(np.median(changes))} (median over the {len(changes)} of {n} pairs "
                   "where it changes)" if changes else "success never changes")
        named = self.named
        if named is None:
            return f"no layer diverges beyond the noise band in {n} paired episode{'s' * (n != 1)}; {success}"
        column = max(named.columns, key=lambda c: named.columns[c])
        firsts = sorted(p.first.step for p in self.pairs if p.first is not None and p.first.layer is named.layer)
        return (f"first diverges in {named.layer.value} ({column}) at step {int(np.median(firsts))} (median over the "
                f"{named.first_in} of {n} pairs where it parts first); {success}")

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON data."""
        named = self.named
        return {
            "a": self.a.label, "b": self.b.label, "pairs": len(self.pairs), "skipped": self.skipped,
            "band": {"atol": self.atol, "rtol": self.rtol},
            "named": None if named is None else named.layer.value, "verdict": self.verdict(),
            "success_changes": {"pairs": len(self.success_changes),
                                "median_step": float(np.median(self.success_changes)) if self.success_changes
                                else None},
            "layers": [{"layer": r.layer.value, "first_in": r.first_in, "diverged": r.diverged,
                        "median_step": r.median_step, "first_fields": r.columns} for r in self.layers()],
            "timings": [{"column": t.column, "layer": t.layer.value, "median_a_ms": t.median_a,
                         "median_b_ms": t.median_b, "ratio": _finite(t.ratio), "band": list(t.band),
                         "beyond": t.beyond} for t in self.timings],
            "by_pair": [{"task": p.task, "seed": p.seed, "a": p.key_a, "b": p.key_b, "outcome_a": p.outcome_a.value,
                         "outcome_b": p.outcome_b.value, "success_step": p.success_step,
                         "first": None if p.first is None else {"layer": p.first.layer.value,
                                                                "column": p.first.column, "step": p.first.step},
                         "layers": {layer.value: d.step for layer, d in p.by_layer.items()}} for p in self.pairs],
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _parts(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Per step: whether ``a`` and ``b`` differ beyond the band (NaN equals NaN; NaN against a number parts)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 1:
        a, b = a[:, None], b[:, None]
    if a.shape[1] != b.shape[1]:
        return np.ones(len(a), dtype=bool)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    with np.errstate(invalid="ignore"):
        gap = np.abs(a - b)
        band = atol + rtol * np.maximum(np.abs(a), np.abs(b))
        beyond = np.where(nan_a | nan_b, nan_a != nan_b, gap > band)
    return np.asarray(beyond.any(axis=1))


def _value(column: np.ndarray, step: int) -> Any:
    value = column[step]
    if isinstance(value, np.ndarray):
        return [float(v) for v in value]
    return value if isinstance(value, str) else float(value)


def compare_pair(a: EpisodeTrace, b: EpisodeTrace, atol: float = ATOL, rtol: float = RTOL) -> dict[Layer, Divergence]:
    """Each layer's first divergence between two traces of one (task, seed), over the steps both have."""
    n = min(a.steps, b.steps)
    found: dict[Layer, Divergence] = {}
    for column in sorted(set(a.columns) & set(b.columns)):
        declared = field_of(column)
        if declared is None or kind_of(column) is not Kind.VALUE or n == 0:
            continue
        left, right = a.columns[column][:n], b.columns[column][:n]
        if left.dtype == object or right.dtype == object:  # text: a policy's own account
            beyond = np.asarray([x != y for x, y in zip(left, right, strict=True)], dtype=bool)
        else:
            beyond = _parts(left, right, atol, rtol)
        if not beyond.any():
            continue
        step = int(np.argmax(beyond))
        divergence = Divergence(column, declared.layer, declared.stage, step, _value(left, step), _value(right, step))
        if declared.layer not in found or divergence.order < found[declared.layer].order:
            found[declared.layer] = divergence
    return found


def success_change(a: EpisodeTrace, b: EpisodeTrace) -> int | None:
    """The first step at which "has succeeded so far" differs (an ended episode keeps its last value)."""
    left = np.maximum.accumulate(np.asarray(a.context.get("success", np.zeros(a.steps)), dtype=bool))
    right = np.maximum.accumulate(np.asarray(b.context.get("success", np.zeros(b.steps)), dtype=bool))
    n = max(len(left), len(right))
    if n == 0:
        return None
    pad = [np.concatenate([x, np.full(n - len(x), x[-1] if len(x) else False)]) for x in (left, right)]
    differs = pad[0] != pad[1]
    return int(np.argmax(differs)) if differs.any() else None


def side_records(store: Store, side: Side) -> list[EpisodeRecord]:
    """The side's episodes; a one-line error for a campaign, policy or variant that is not there."""
    if store.campaign(side.campaign) is None:
        known = (row.name for row in store.catalog.campaigns())
        raise TraceError(unknown_name("campaign", side.campaign, known, "this store", none="none"))
    records = list(store.catalog.episodes(campaign=side.campaign))
    for attribute, wanted in (("policy_name", side.policy), ("variant_name", side.variant)):
        if wanted is None:
            continue
        valid = sorted({getattr(r, attribute) for r in records})
        if wanted not in valid:
            what = attribute.split("_")[0]
            raise TraceError(f"campaign {side.campaign!r} has no {what} {wanted!r}; valid: {', '.join(valid)}")
        records = [r for r in records if getattr(r, attribute) == wanted]
    return records


def _by_pair(records: Sequence[EpisodeRecord], side: Side) -> dict[tuple[str, int], EpisodeRecord]:
    paired: dict[tuple[str, int], EpisodeRecord] = {}
    for record in records:
        pair = (record.task_id, record.seed)
        if pair in paired and paired[pair].key != record.key:
            other = paired[pair]
            raise TraceError(
                f"side {side.label!r} has two episodes of task {record.task_id} seed {record.seed} (policy "
                f"{other.policy_name} variant {other.variant_name}, and policy {record.policy_name} variant "
                f"{record.variant_name}): name one as CAMPAIGN:POLICY[:VARIANT]")
        paired[pair] = record
    return paired


def _seeds(pairs: Mapping[tuple[str, int], Any]) -> str:
    seeds = sorted({seed for _, seed in pairs})
    shown = ", ".join(str(s) for s in seeds[:5])
    return f"{shown}{', ...' if len(seeds) > 5 else ''} ({len(seeds)} seeds)"


def diff(store: Store, a: Side, b: Side, atol: float = ATOL, rtol: float = RTOL) -> TraceDiff:
    """Compare the two sides' traces on their shared (task, seed) pairs (see the module docstring)."""
    left, right = _by_pair(side_records(store, a), a), _by_pair(side_records(store, b), b)
    shared = sorted(set(left) & set(right))
    if not shared:
        raise TraceError(f"{a.label!r} and {b.label!r} share no (task, seed): {a.label} ran "
                         f"{_seeds(left) if left else 'no episode'}, {b.label} ran "
                         f"{_seeds(right) if right else 'no episode'}; run both on one campaign seed")
    skipped = {"unpaired": len(left) + len(right) - 2 * len(shared)}
    pairs, traces = [], []
    problem = ""
    for pair in shared:
        ra, rb = left[pair], right[pair]
        if ra.data_path is None or rb.data_path is None:
            skipped["no step file"] = skipped.get("no step file", 0) + 1
            continue
        try:
            ta, tb = read_trace(store, ra), read_trace(store, rb)
        except TraceError as exc:
            skipped["no trace"] = skipped.get("no trace", 0) + 1
            problem = str(exc)
            continue
        traces.append((ta, tb))
        pairs.append(PairDiff(pair[0], pair[1], ra.key, rb.key, ra.outcome, rb.outcome,
                              compare_pair(ta, tb, atol, rtol), success_change(ta, tb)))
    if not pairs:
        raise TraceError(f"no paired episode of {a.label!r} and {b.label!r} has a trace to compare"
                         f"{' (' + problem + ')' if problem else ''}")
    return TraceDiff(a, b, tuple(pairs), {k: v for k, v in skipped.items() if v}, atol, rtol, _timings(traces))


def _timings(traces: Sequence[tuple[EpisodeTrace, EpisodeTrace]]) -> tuple[TimingRow, ...]:
    """Each timing field's per-episode medians, B against the spread of A's."""
    columns = sorted({c for ta, tb in traces for c in set(ta.columns) & set(tb.columns)
                      if kind_of(c) is Kind.TIMING and not c.endswith("start_ms")})  # durations, not clock readings
    rows = []
    for column in columns:
        declared = field_of(column)
        medians = [[_median(t.columns[column]) for t in side if column in t.columns] for side in zip(*traces,
                                                                                                   strict=True)]
        left = [m for m in medians[0] if math.isfinite(m)]
        right = [m for m in medians[1] if math.isfinite(m)]
        if declared is None or not left or not right:
            continue
        centre = float(np.median(left))
        spread = (min(left) / centre, max(left) / centre) if centre > 0 else (math.nan, math.nan)
        band = (min(spread[0], 1.0 - TIMING_BAND), max(spread[1], 1.0 + TIMING_BAND))
        rows.append(TimingRow(column, declared.layer, centre, float(np.median(right)), band))
    return tuple(rows)


def _median(values: np.ndarray) -> float:
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else math.nan
