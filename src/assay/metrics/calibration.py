"""Calibration records and the sign-off gate, keyed by what was calibrated.

A calibration record comes from a ``correlate`` run: Pearson r (with the lower end
of its bootstrap interval) and MMRV between real and sim rates, for one task, the
sim side's **variant set** (the variant keys whose episodes were scored: a twin is a
variant, so its version is in the key) and the **policies** compared, with the date
and the source. The records live in ``STORE/calibration.json`` under ``records``
(written atomically, merged by (task, variants)); the same file may carry
``thresholds``, and ``real_results``: the real-world (task, policy) rates the records
came from, merged by cell, so a report can draw the real-vs-sim scatter later.

A ranking is *validated for sign-off* on a task when a record exists for that task
**and** the exact set of variants the ranking scores, every ranked policy was among
the calibrated ones, the record carries **evidence** and its figures clear the
thresholds; anything else is "not validated for sign-off" with the reason. So a
campaign with gain 0.3 is not validated by a nominal calibration, and records are per
task *version*: ``metaworld/reach@2`` is not validated by a record for ``@1``. Records
written before variants and policies were kept (a ``tasks`` object keyed by task id)
are read as nominal records with an unknown policy set, which validates nothing.

**Evidence** (checked before the figures; failing it is "insufficient evidence", never
green): ``policies >= min_policies`` (4: the fewest for which Fisher's interval exists
and the permutation floor 1/4! = 0.042 is below 0.05), an exact (or sampled) one-sided
permutation p of r ``<= max_permutation_p`` (0.05; 3 policies can never reach it: their
floor is 1/6), and a **non-degenerate** correlation interval: Fisher's z interval
defined with low < high (an r of ±1 gives the point [r, r]) and r's bootstrap interval
with low < high (3 policies resampled by episodes often give [1.000, 1.000]). A record
written before these were kept carries no evidence. Then the **figures**: ``pearson >=
min_pearson``, the lower end of r's bootstrap interval ``>= min_pearson_low`` and
``mmrv <= max_mmrv``.

Default thresholds (r ≥ 0.8, MMRV ≤ 0.05, ≥ 4 policies, permutation p ≤ 0.05) sit below
what published twins report (SimFoundry: mean r 0.911, MMRV 0.018) and above chance
agreement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from assay.errors import StoreError
from assay.metrics.rates import totals_of
from assay.metrics.results_csv import RateEntry
from assay.store import EpisodeRecord, write_blob
from assay.store.aggregates import CellTotals

if TYPE_CHECKING:  # correlation loads scipy.stats; the sign-off gate only reads its records
    from assay.metrics.correlation import CorrelationReport

CALIBRATION_FILE = "calibration.json"
NOT_VALIDATED = "not validated for sign-off"
VALIDATED = "validated for sign-off"
INSUFFICIENT = "insufficient evidence"


NOMINAL = ("nominal",)


@dataclass(frozen=True)
class CalibrationRecord:
    """One task's real-to-sim calibration: Pearson and MMRV over its policies, with where and when they were measured.
    """

    task: str
    pearson: float | None
    mmrv: float | None  # None with one policy (no pair to misrank)
    policies: int
    date: str
    source: str
    variants: tuple[str, ...] = NOMINAL  # variant keys of the sim episodes scored (a twin is a variant)
    policy_names: tuple[str, ...] = ()  # the policies compared; () = not recorded (validates nothing)
    pearson_low: float | None = None  # lower end of r's bootstrap interval
    pearson_high: float | None = None  # its upper end; None: recorded before the evidence checks
    fisher_low: float | None = None  # Fisher's z interval of r (None: undefined, fewer than 4 policies)
    fisher_high: float | None = None
    permutation_p: float | None = None  # one-sided permutation p of r (None: undefined or not recorded)
    permutation_mode: str = "not recorded"  # "exact", "sampled", "undefined: ..." or "not recorded"

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """The (task, sorted variants) this record calibrates; a later record with the same key replaces it."""
        return self.task, tuple(sorted(self.variants))


@dataclass(frozen=True)
class Thresholds:
    """The sign-off thresholds: the minimum Pearson (and its interval's low end), the maximum MMRV, the fewest policies.
    """

    min_pearson: float = 0.8
    max_mmrv: float = 0.05
    min_policies: int = 4  # Fisher's interval needs 4; 1/4! = 0.042 is the first permutation floor below 0.05
    min_pearson_low: float = 0.0  # the interval must at least exclude a negative correlation
    max_permutation_p: float = 0.05


@dataclass(frozen=True)
class GateCell:
    """What a ranking scores on one task: its variant keys (with names, for messages) and policies."""

    task: str
    variants: tuple[str, ...] = NOMINAL
    policies: tuple[str, ...] = ()
    variant_names: tuple[str, ...] = ()


def gate_cells(records: Iterable[EpisodeRecord], per_variant: bool = False) -> list[GateCell]:
    """One cell per task of ``records`` (the episodes a ranking scores), sorted; ``per_variant``: one
    per (task, variant), for commands that rank each variant on its own (asset swaps)."""
    return gate_cells_of(totals_of(records), per_variant)


def gate_cells_of(totals: Iterable[CellTotals], per_variant: bool = False) -> list[GateCell]:
    """:func:`gate_cells` from cell counts (``assay.store.aggregates.cell_totals``)."""
    variants: dict[tuple[str, str], dict[str, str]] = {}
    policies: dict[tuple[str, str], set[str]] = {}
    for total in totals:
        cell = (total.task, total.variant_key if per_variant else "")
        variants.setdefault(cell, {})[total.variant_key] = total.variant
        policies.setdefault(cell, set()).add(total.policy)
    return [GateCell(cell[0], tuple(sorted(variants[cell])), tuple(sorted(policies[cell])),
                     tuple(variants[cell][k] for k in sorted(variants[cell]))) for cell in sorted(variants)]


Calibration = dict[tuple[str, tuple[str, ...]], CalibrationRecord]


@dataclass(frozen=True)
class Signoff:
    """Whether a task's sim ranking is validated against reality, and why."""

    task: str
    validated: bool
    reason: str
    record: CalibrationRecord | None
    variants: tuple[str, ...] = ()  # names of the variants the ranking scores
    insufficient: bool = False  # the record's evidence is too thin to say (never validated)

    @property
    def label(self) -> str:
        """``VALIDATED``, ``INSUFFICIENT`` or ``NOT_VALIDATED``, as printed."""
        return VALIDATED if self.validated else INSUFFICIENT if self.insufficient else NOT_VALIDATED

    def to_dict(self) -> dict[str, object]:
        """The sign-off as a JSON-ready dict, with its calibration record when one exists."""
        return {"task": self.task, "variants": list(self.variants), "validated": self.validated,
                "insufficient_evidence": self.insufficient, "status": self.label, "reason": self.reason,
                "calibration": asdict(self.record) if self.record else None}


def records_from_report(report: CorrelationReport, source: str, date: str | None = None,
                        variants: dict[str, tuple[str, ...]] | None = None) -> list[CalibrationRecord]:
    """One record per task of a correlate run, under the *sim* side's task id.

    ``variants`` maps a sim task to the variant keys its episodes came from (default: nominal,
    the case of a sim results CSV exported from a nominal campaign).
    """
    stamp = date or datetime.now(UTC).isoformat(timespec="seconds")
    variants = variants or {}
    return [CalibrationRecord(t.other_task, t.stats["pearson"].value, t.stats["mmrv"].value,
                              len(t.policies), stamp, source, tuple(sorted(variants.get(t.other_task, NOMINAL))),
                              tuple(sorted(t.policies)), t.stats["pearson"].ci_low, t.stats["pearson"].ci_high,
                              t.checks.fisher_low if t.checks else None, t.checks.fisher_high if t.checks else None,
                              t.checks.permutation_p if t.checks else None,
                              t.checks.permutation_mode if t.checks else "not recorded") for t in report.tasks]


def _path(store_root: str | Path) -> Path:
    return Path(store_root) / CALIBRATION_FILE


def _read(store_root: str | Path) -> dict:
    path = _path(store_root)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("top level is not an object")
        return data
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read {path}: {exc}; fix or remove the file") from None


def _from_json(item: dict) -> CalibrationRecord:
    names = {f.name for f in fields(CalibrationRecord)}
    data = {k: v for k, v in item.items() if k in names}
    for key in ("variants", "policy_names"):
        if key in data:
            data[key] = tuple(data[key])
    return CalibrationRecord(**data)


def load_calibration(store_root: str | Path) -> Calibration:
    """Every record, keyed by (task, sorted variant keys); legacy ``tasks`` entries as nominal records."""
    data = _read(store_root)
    try:
        legacy = [_from_json({**record, "task": task}) for task, record in data.get("tasks", {}).items()]
        current = [_from_json(record) for record in data.get("records", [])]
    except TypeError as exc:
        raise StoreError(f"{_path(store_root)}: malformed calibration record ({exc})") from None
    return {r.key: r for r in [*legacy, *current]}


def load_thresholds(store_root: str | Path | None) -> Thresholds:
    """The store's ``thresholds`` (if the calibration file sets any), else the defaults."""
    if store_root is None:
        return Thresholds()
    given = _read(store_root).get("thresholds", {})
    unknown = sorted(set(given) - {f.name for f in fields(Thresholds)})
    if unknown:
        valid = ", ".join(f.name for f in fields(Thresholds))
        raise StoreError(f"{_path(store_root)}: unknown threshold {', '.join(unknown)}; valid: {valid}")
    return Thresholds(**given)


def _write(store_root: str | Path, data: dict) -> Path:
    write_blob(Path(store_root), CALIBRATION_FILE, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    return _path(store_root)


def save_calibration(store_root: str | Path, records: Iterable[CalibrationRecord],
                     thresholds: Thresholds | None = None) -> Path:
    """Merge ``records`` (by task and variant set) into the store's calibration file, atomically."""
    data = _read(store_root)
    merged = load_calibration(store_root)  # legacy ``tasks`` entries are kept, rewritten as records
    merged.update({r.key: r for r in records})
    data = {k: v for k, v in data.items() if k != "tasks"}
    data = {**data, "schema_version": 2, "records": [asdict(merged[k]) for k in sorted(merged)]}
    if thresholds is not None:
        data["thresholds"] = asdict(thresholds)
    return _write(store_root, data)


def save_real_results(store_root: str | Path, entries: Iterable[RateEntry]) -> Path:
    """Merge real-world (task, policy) results into the calibration file, so reports can plot real vs sim."""
    data = _read(store_root)
    cells = {(row["task"], row["policy"]): row for row in data.get("real_results", [])}
    for e in entries:
        cells[(e.task, e.policy)] = {"task": e.task, "policy": e.policy, "rate": e.rate, "successes": e.successes,
                                     "trials": e.trials, "source": e.source}
    data = {"schema_version": 1, **data, "real_results": [cells[k] for k in sorted(cells)]}
    return _write(store_root, data)


def load_real_results(store_root: str | Path) -> list[RateEntry]:
    """The real-world results saved by ``assay correlate --record`` (empty when there are none)."""
    rows = _read(store_root).get("real_results", [])
    try:
        return [RateEntry(r["task"], r["policy"], float(r["rate"]), r.get("successes"), r.get("trials"), None,
                          str(r.get("source", CALIBRATION_FILE))) for r in rows]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"{_path(store_root)}: malformed real_results entry ({exc})") from None


def _variant_label(cell: GateCell) -> str:
    return ", ".join(cell.variant_names or cell.variants)


def _no_record(cell: GateCell, calibration: Calibration) -> str:
    others = sorted({", ".join(r.variants) for (task, _), r in calibration.items() if task == cell.task})
    return (f"no calibration record for variant {_variant_label(cell)}"
            + (f" (calibrated: {'; '.join(others)})" if others else "")
            + " (run `assay correlate ... --record` on these episodes)")


def _interval(low: float | None, high: float | None) -> str:
    return "undefined" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def evidence_gap(record: CalibrationRecord, thresholds: Thresholds) -> str | None:
    """Why a record is too thin to validate anything (module docstring), None when its evidence suffices."""
    if record.policies < thresholds.min_policies:
        return f"calibrated on {record.policies} policies < {thresholds.min_policies}"
    if record.permutation_mode == "not recorded":
        return "its calibration has no permutation p or Fisher interval (recorded by an older assay); rerun " \
               "`assay correlate ... --record`"
    if record.permutation_p is None:
        return f"permutation p {record.permutation_mode}"
    if record.permutation_p > thresholds.max_permutation_p:
        return f"permutation p {record.permutation_p:.3g} > {thresholds.max_permutation_p}"
    if record.fisher_low is None or record.fisher_high is None or not record.fisher_low < record.fisher_high:
        return f"Fisher-z interval of r {_interval(record.fisher_low, record.fisher_high)} is not an interval"
    if record.pearson_low is None or record.pearson_high is None or not record.pearson_low < record.pearson_high:
        return f"r's bootstrap interval {_interval(record.pearson_low, record.pearson_high)} is not an interval"
    return None


def _figures_gap(record: CalibrationRecord, thresholds: Thresholds) -> str | None:
    """Why a record with enough evidence still fails the thresholds on r, its interval or MMRV."""
    if record.pearson is None:
        return "Pearson r undefined in its calibration"
    if record.pearson < thresholds.min_pearson:
        return f"Pearson r {record.pearson:.3f} < {thresholds.min_pearson}"
    if record.pearson_low is None or record.pearson_low < thresholds.min_pearson_low:
        low = "undefined" if record.pearson_low is None else f"{record.pearson_low:.3f}"
        return f"lower end of r's 95% interval {low} < {thresholds.min_pearson_low}"
    if record.mmrv is None:
        return "MMRV undefined in its calibration"
    if record.mmrv > thresholds.max_mmrv:
        return f"MMRV {record.mmrv:.3f} > {thresholds.max_mmrv}"
    return None


def signoff(cells: Sequence[GateCell], calibration: Calibration, thresholds: Thresholds) -> list[Signoff]:
    """The gate per task: validated only by a record for the same task, variant set and policies, with evidence."""
    result = []
    for cell in cells:
        record = calibration.get((cell.task, tuple(sorted(cell.variants))))
        names = cell.variant_names or cell.variants
        missing = sorted(set(cell.policies) - set(record.policy_names)) if record else []
        if record is None:
            result.append(Signoff(cell.task, False, _no_record(cell, calibration), None, names))
        elif not record.policy_names:
            result.append(Signoff(cell.task, False, "its calibration does not list the policies it compared "
                                  "(recorded by an older assay); rerun `assay correlate ... --record`", record, names))
        elif missing:
            result.append(Signoff(cell.task, False, f"policies {', '.join(missing)} were not in its calibration "
                                  f"({', '.join(record.policy_names)})", record, names))
        elif (thin := evidence_gap(record, thresholds)) is not None:
            result.append(Signoff(cell.task, False, thin, record, names, insufficient=True))
        elif (weak := _figures_gap(record, thresholds)) is not None:
            result.append(Signoff(cell.task, False, weak, record, names))
        else:
            assert record.pearson is not None and record.mmrv is not None and record.permutation_p is not None
            result.append(Signoff(cell.task, True, (
                f"r {record.pearson:.3f} (low {record.pearson_low:.3f}, permutation p {record.permutation_p:.3g}), "
                f"MMRV {record.mmrv:.3f} over {record.policies} policies, variant {_variant_label(cell)} "
                f"({record.source}, {record.date})"), record, names))
    return result


def campaign_signoff(records: Iterable[EpisodeRecord], store_root: str | Path, thresholds: Thresholds | None = None,
                     per_variant: bool = False) -> list[Signoff]:
    """The gate for the episodes a ranking scores, with the store's calibration and thresholds."""
    return totals_signoff(totals_of(records), store_root, thresholds, per_variant)


def totals_signoff(totals: Iterable[CellTotals], store_root: str | Path, thresholds: Thresholds | None = None,
                   per_variant: bool = False) -> list[Signoff]:
    """:func:`campaign_signoff` from the cell counts of the episodes a ranking scores."""
    return signoff(gate_cells_of(totals, per_variant), load_calibration(store_root),
                   thresholds or load_thresholds(store_root))
