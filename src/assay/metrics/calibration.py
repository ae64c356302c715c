"""Calibration records and the sign-off gate.

A task earns a calibration record from a ``correlate`` run: Pearson r and MMRV
between real and sim rates over N policies, the date and the source. The records
live in ``STORE/calibration.json`` (written atomically, merged by task id); the
same file may carry ``thresholds``, and ``real_results``: the real-world (task, policy) rates the
records came from, merged by cell, so a report can draw the real-vs-sim scatter later. A task is *validated for sign-off* when it has
a record with ``policies >= min_policies``, a defined ``pearson >= min_pearson``
and ``mmrv <= max_mmrv``; any other task is marked "not validated for sign-off"
with the reason. Records are per task *version*: ``metaworld/reach@2`` is not
validated by a record for ``@1`` (a new twin needs its own correlate run).

Default thresholds (r ≥ 0.8, MMRV ≤ 0.05, ≥ 3 policies) sit below what published
twins report (SimFoundry: mean r 0.911, MMRV 0.018) and above chance agreement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from assay.errors import StoreError
from assay.metrics.correlation import CorrelationReport
from assay.metrics.results_csv import RateEntry
from assay.store import write_blob

CALIBRATION_FILE = "calibration.json"
NOT_VALIDATED = "not validated for sign-off"
VALIDATED = "validated for sign-off"


@dataclass(frozen=True)
class CalibrationRecord:
    task: str
    pearson: float | None
    mmrv: float
    policies: int
    date: str
    source: str


@dataclass(frozen=True)
class Thresholds:
    min_pearson: float = 0.8
    max_mmrv: float = 0.05
    min_policies: int = 3


@dataclass(frozen=True)
class Signoff:
    task: str
    validated: bool
    reason: str
    record: CalibrationRecord | None

    @property
    def label(self) -> str:
        return VALIDATED if self.validated else NOT_VALIDATED

    def to_dict(self) -> dict[str, object]:
        return {"task": self.task, "validated": self.validated, "status": self.label, "reason": self.reason,
                "calibration": asdict(self.record) if self.record else None}


def records_from_report(report: CorrelationReport, source: str, date: str | None = None) -> list[CalibrationRecord]:
    """One record per task of a correlate run, under the *sim* side's task id."""
    stamp = date or datetime.now(UTC).isoformat(timespec="seconds")
    return [CalibrationRecord(t.other_task, t.stats["pearson"].value, float(t.stats["mmrv"].value or 0.0),
                              len(t.policies), stamp, source) for t in report.tasks]


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


def load_calibration(store_root: str | Path) -> dict[str, CalibrationRecord]:
    names = {f.name for f in fields(CalibrationRecord)}
    try:
        return {task: CalibrationRecord(**{k: v for k, v in record.items() if k in names})
                for task, record in _read(store_root).get("tasks", {}).items()}
    except TypeError as exc:
        raise StoreError(f"{_path(store_root)}: malformed calibration record ({exc})") from None


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
    """Merge ``records`` (by task) into the store's calibration file, atomically."""
    data = _read(store_root)
    tasks = dict(data.get("tasks", {}))
    tasks.update({r.task: asdict(r) for r in records})
    data = {"schema_version": 1, **data, "tasks": dict(sorted(tasks.items()))}
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


def signoff(tasks: Sequence[str], calibration: dict[str, CalibrationRecord], thresholds: Thresholds) -> list[Signoff]:
    result = []
    for task in tasks:
        record = calibration.get(task)
        validated = False
        if record is None:
            reason = "no calibration record (run `assay correlate ... --record`)"
        elif record.policies < thresholds.min_policies:
            reason = f"calibrated on {record.policies} policies < {thresholds.min_policies}"
        elif record.pearson is None:
            reason = "Pearson r undefined in its calibration"
        elif record.pearson < thresholds.min_pearson:
            reason = f"Pearson r {record.pearson:.3f} < {thresholds.min_pearson}"
        elif record.mmrv > thresholds.max_mmrv:
            reason = f"MMRV {record.mmrv:.3f} > {thresholds.max_mmrv}"
        else:
            validated = True
            reason = (f"r {record.pearson:.3f}, MMRV {record.mmrv:.3f} over {record.policies} policies "
                      f"({record.source}, {record.date})")
        result.append(Signoff(task, validated, reason, record))
    return result
