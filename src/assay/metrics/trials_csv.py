"""Per-trial outcomes keyed to seeds: ``task,policy,seed,success``, one row per episode or real trial.

The results CSV (``task,policy,successes,trials``) holds one rate per cell and so no pairing; a real
trial pairs with the sim episode of its seed only when each trial is a row. ``seed`` is the sim
episode's seed (``assay episodes ls`` shows it; for LIBERO the fixed initial state's index is the
campaign seed plus the episode index). ``success`` is 1/0, true/false, yes/no or success/failure.
Errors are one line with the row (header = row 1), as for the results CSV. ``assay episodes ls
--trials-csv FILE`` writes one from stored episodes (a campaign standing in for a real robot, as the
README's tour does with the reality proxy).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from assay.errors import ResultsCsvError
from assay.store import EpisodeRecord, Outcome, write_blob

COLUMNS = ("task", "policy", "seed", "success")
_TRUE = {"1", "true", "yes", "success", "succeeded"}
_FALSE = {"0", "false", "no", "failure", "failed"}


@dataclass(frozen=True)
class Trial:
    """One scored episode or real trial: its cell, the seed it started from, and whether it succeeded."""

    task: str
    policy: str
    seed: int
    success: bool
    where: str = ""  # "FILE row N", for messages


def csv_header(path: str | Path) -> list[str]:
    """The stripped header of a CSV file (a one-line error when it cannot be read)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return [h.strip() for h in next(csv.reader(handle), [])]
    except OSError as exc:
        raise ResultsCsvError(f"cannot read CSV {path}: {exc.strerror or exc}") from None


def is_trials_csv(path: str | Path) -> bool:
    """Whether the file has the per-trial columns (else it is a results CSV of counts, or malformed)."""
    return all(column in csv_header(path) for column in COLUMNS)


def _success(value: str, where: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ResultsCsvError(f"{where}: success {value!r} is not valid; valid: 1/0, true/false, yes/no, success/failure")


def read_trials_csv(path: str | Path) -> list[Trial]:
    """Every row of a ``task,policy,seed,success`` file (extra columns ignored)."""
    path = Path(path)
    header = csv_header(path)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ResultsCsvError(f"{path.name} row 1: missing column {', '.join(missing)}; a per-trial CSV needs "
                              "task,policy,seed,success (one row per trial)")
    trials = []
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        reader.fieldnames = [h.strip() for h in (reader.fieldnames or [])]  # reads the header row, then strips it
        for offset, row in enumerate(reader):
            where = f"{path.name} row {offset + 2}"
            if None in row:
                raise ResultsCsvError(f"{where}: more cells than header columns")
            empty = [c for c in COLUMNS if not (row.get(c) or "").strip()]
            if empty:
                raise ResultsCsvError(f"{where}: empty {', '.join(empty)}")
            try:
                seed = int(row["seed"].strip())
            except ValueError:
                raise ResultsCsvError(f"{where}: seed {row['seed']!r} is not a whole number") from None
            if seed < 0:
                raise ResultsCsvError(f"{where}: seed {seed} is negative; seeds are 0 or more")
            trials.append(Trial(row["task"].strip(), row["policy"].strip(), seed, _success(row["success"], where),
                                where))
    if not trials:
        raise ResultsCsvError(f"{path.name}: no data rows after the header")
    return trials


def trials_from_records(records: Iterable[EpisodeRecord]) -> list[Trial]:
    """Scored episodes as trials (``error`` episodes left out), keyed by their episode seed."""
    return [Trial(r.task_id, r.policy_name, r.seed, r.outcome is Outcome.SUCCESS, f"episode {r.key[:12]}")
            for r in records if r.outcome is not Outcome.ERROR]


def format_trials_csv(trials: Iterable[Trial]) -> str:
    """``task,policy,seed,success`` (what :func:`read_trials_csv` reads; success 1/0), sorted by task, policy, seed."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    writer.writerows([t.task, t.policy, t.seed, int(t.success)]
                     for t in sorted(trials, key=lambda t: (t.task, t.policy, t.seed)))
    return buffer.getvalue()


def write_trials_csv(path: str | Path, trials: Iterable[Trial]) -> Path:
    """Write :func:`format_trials_csv` to ``path`` atomically."""
    path = Path(path)
    write_blob(path.parent, path.name, format_trials_csv(trials).encode("utf-8"))
    return path
