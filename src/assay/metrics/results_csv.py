"""Results tables as (task, policy) rates: read from a CSV or built from a campaign's episodes.

A results CSV has a header row and the columns ``task,policy`` plus either
``successes,trials`` (preferred: intervals can resample episodes) or
``success_rate``; extra columns are ignored. Rows are numbered as a spreadsheet
shows them: the header is row 1, the first data row is row 2. Every problem is
one :class:`ResultsCsvError` line naming the file, the row and what is valid.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from assay.errors import ResultsCsvError
from assay.metrics.rates import totals_of
from assay.store import EpisodeRecord, write_blob
from assay.store.aggregates import CellTotals

REQUIRED = ("task", "policy")


@dataclass(frozen=True)
class RateEntry:
    """One (task, policy) success rate read from a results CSV or derived from episodes, with counts when known."""

    task: str
    policy: str
    rate: float
    successes: int | None = None
    trials: int | None = None
    row: int | None = None  # CSV row (header = 1); None when built from episodes
    source: str = ""

    @property
    def has_counts(self) -> bool:
        """Whether the entry carries successes and trials (not only a rate)."""
        return self.trials is not None

    def where(self) -> str:
        """Where the entry came from, for error messages: ``file row N``, or the source alone."""
        return f"{self.source} row {self.row}" if self.row is not None else self.source


def _integer(text: str, column: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ResultsCsvError(f"{where}: {column} {text!r} is not a whole number") from None
    if value < 0:
        raise ResultsCsvError(f"{where}: {column} {value} is negative; valid: 0 or more")
    return value


def _entry(row: dict[str, str | None], number: int, source: str, counts: bool) -> RateEntry:
    where = f"{source} row {number}"
    cells = {k: (v or "").strip() for k, v in row.items() if k is not None}
    needed = [*REQUIRED, *(("successes", "trials") if counts else ("success_rate",))]
    empty = [c for c in needed if not cells.get(c)]
    if empty:
        raise ResultsCsvError(f"{where}: empty {', '.join(empty)}")
    task, policy = cells["task"], cells["policy"]
    if counts:
        successes = _integer(cells["successes"], "successes", where)
        trials = _integer(cells["trials"], "trials", where)
        if trials == 0:
            raise ResultsCsvError(f"{where}: trials is 0; a rate needs at least one trial")
        if trials < successes:
            raise ResultsCsvError(f"{where}: trials ({trials}) < successes ({successes})")
        return RateEntry(task, policy, successes / trials, successes, trials, number, source)
    try:
        rate = float(cells["success_rate"])
    except ValueError:
        raise ResultsCsvError(f"{where}: success_rate {cells['success_rate']!r} is not a number") from None
    if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
        raise ResultsCsvError(f"{where}: success_rate {rate} is out of range; valid: [0, 1]")
    return RateEntry(task, policy, rate, None, None, number, source)


def read_results_csv(path: str | Path) -> list[RateEntry]:
    """Read a results CSV (task, policy and successes, trials or success_rate); one-line errors name the file and row.
    """
    path = Path(path)
    source = path.name
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ResultsCsvError(f"cannot read results CSV {path}: {exc.strerror or exc}") from None
    with io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise ResultsCsvError(f"{source} row 1: empty file; expected a header task,policy,successes,trials")
        reader.fieldnames = header
        missing = [c for c in REQUIRED if c not in header]
        counts = "successes" in header and "trials" in header
        if not counts and "success_rate" not in header:
            missing += [c for c in ("successes", "trials") if c not in header]
        if missing:
            raise ResultsCsvError(
                f"{source} row 1: missing column {', '.join(missing)}; a results CSV needs task,policy and "
                "successes,trials (or success_rate)")
        entries: list[RateEntry] = []
        seen: dict[tuple[str, str], int] = {}
        for offset, row in enumerate(reader):
            number = offset + 2
            if None in row:
                raise ResultsCsvError(f"{source} row {number}: more cells than header columns")
            entry = _entry(row, number, source, counts)
            first = seen.setdefault((entry.task, entry.policy), number)
            if first != number:
                raise ResultsCsvError(
                    f"{source} row {number}: task {entry.task!r} policy {entry.policy!r} already given on row {first}")
            entries.append(entry)
    if not entries:
        raise ResultsCsvError(f"{source}: no data rows after the header")
    return entries


def entries_from_records(records: Iterable[EpisodeRecord], source: str) -> list[RateEntry]:
    """Per (task, policy) successes and scored trials; ``error`` episodes are left out."""
    return entries_of(totals_of(records), source)


def entries_of(totals: Iterable[CellTotals], source: str) -> list[RateEntry]:
    """:func:`entries_from_records` from cell counts (``assay.store.aggregates.cell_totals``)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for total in totals:
        cell = counts.setdefault((total.task, total.policy), [0, 0])
        cell[0] += total.successes
        cell[1] += total.scored
    return [RateEntry(task, policy, k / n, k, n, None, source)
            for (task, policy), (k, n) in sorted(counts.items()) if n]


def format_results_csv(entries: Iterable[RateEntry]) -> str:
    """``task,policy,successes,trials,success_rate`` (what ``read_results_csv`` reads), sorted by task and policy."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["task", "policy", "successes", "trials", "success_rate"])
    writer.writerows([e.task, e.policy, e.successes, e.trials, f"{e.rate:.6g}"]
                     for e in sorted(entries, key=lambda e: (e.task, e.policy)))
    return buffer.getvalue()


def write_results_csv(path: str | Path, entries: Iterable[RateEntry]) -> Path:
    """Write :func:`format_results_csv` to ``path`` atomically."""
    path = Path(path)
    write_blob(path.parent, path.name, format_results_csv(entries).encode("utf-8"))
    return path
