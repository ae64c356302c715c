"""JSON views of the store for the dashboard: campaign progress, episode summaries, step series.

All reads; the server calls these in a thread pool (SQLAlchemy and PyArrow block).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from assay.errors import AssayError, StoreError, unknown_name
from assay.report.evidence import FailureFacts, failure_facts
from assay.store import EpisodeRecord, Outcome, Store, listing, step_matrix
from assay.store.aggregates import CellTotals, cell_totals
from assay.store.roots import local_path

MAX_PLOT_POINTS = 1000  # step series longer than this are thinned evenly for the browser
SERVED_DIRS = ("videos", "episodes", "campaigns")
OUTCOMES = tuple(o.value for o in Outcome)


def campaign_rows(store: Store) -> list[dict[str, Any]]:
    """Every campaign with its progress: episodes linked so far vs the resolved campaign's job count."""
    rows = []
    for c in store.catalog.campaigns():
        jobs = int(c.spec.get("jobs", c.episodes))
        spec = c.spec.get("campaign", {})
        rows.append({"name": c.name, "episodes": c.episodes, "jobs": jobs,
                     "progress": (c.episodes / jobs) if jobs else 1.0, "created_at": c.created_at,
                     "updated_at": c.updated_at, "tasks": spec.get("tasks", []),
                     "policies": [p["name"] for p in c.spec.get("policies", [])],
                     "variants": [v["name"] for v in c.spec.get("variants", [])]})
    return rows


def campaign_row(store: Store, name: str) -> dict[str, Any]:
    """One campaign's progress row (episodes recorded of jobs planned); an AssayError for an unknown campaign."""
    for row in campaign_rows(store):
        if row["name"] == name:
            return row
    raise AssayError(unknown_name("campaign", name, (r["name"] for r in campaign_rows(store))))


def episode_summary(record: EpisodeRecord) -> dict[str, Any]:
    """An episode as the API lists it."""
    return {"key": record.key, "policy": record.policy_name, "task": record.task_id, "variant": record.variant_name,
            "seed": record.seed, "index": record.episode_index, "outcome": record.outcome.value,
            "reason": record.reason, "steps": record.steps, "return": record.total_return,
            "success_step": record.success_step}


def videos(store: Store, record: EpisodeRecord) -> list[dict[str, str]]:
    """The episode's camera videos present in the store's data root, as paths relative to it (what
    ``/api/files/`` serves)."""
    found = store.files.glob(f"videos/{record.key[:2]}/{record.key}.*.mp4")
    return [{"camera": name.rsplit("/", 1)[-1][len(record.key) + 1 : -len(".mp4")], "path": name} for name in found]


def _matrix(table: pa.Table, name: str) -> np.ndarray:
    values = step_matrix(table, name, np.float64)
    return values if values.ndim == 2 else values.reshape(-1, 1)


def _clean(matrix: np.ndarray) -> list[list[float | None]]:
    return [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in matrix]


def episode_detail(store: Store, key: str) -> dict[str, Any]:
    """Record, step series (time, actions, states, reward), the events timeline and videos."""
    record = store.catalog.episode(key)
    facts = None
    if record.outcome is not Outcome.SUCCESS:
        facts = failure_facts(store, record.campaign, [record]).get(record.key)  # this episode's, not its campaign's
    detail: dict[str, Any] = {"episode": record.to_dict(), "videos": videos(store, record), "series": None,
                              "events": [], "failure": facts_dict(facts)}
    if record.data_path is None:
        return detail
    table = store.steps(record)
    n = table.num_rows
    rows = np.unique(np.linspace(0, n - 1, min(n, MAX_PLOT_POINTS)).round().astype(int)) if n else np.array([], int)
    t = table.column("t").to_numpy()
    detail["series"] = {
        "t": [round(float(x), 6) for x in t[rows]],
        "action": _clean(_matrix(table, "action")[rows]),
        "state": _clean(_matrix(table, "observation.state")[rows]),
        "reward": _clean(_matrix(table, "reward")[rows]),
        "control_dt": float(t[1] - t[0]) if n > 1 else None,
    }
    detail["trace"] = trace_series(table, rows)
    events = [{"t": 0.0, "step": 0, "kind": "start", "label": "reset"}]
    if record.success_step is not None:
        events.append({"t": float(t[record.success_step]), "step": record.success_step, "kind": "success",
                       "label": "first success"})
    for name, kind in (("terminated", "terminated"), ("truncated", "truncated")):
        flags = table.column(name).to_numpy(zero_copy_only=False)
        hits = np.flatnonzero(flags)
        if hits.size:
            events.append({"t": float(t[hits[0]]), "step": int(hits[0]), "kind": kind, "label": name})
    point = facts.ponr.point if facts is not None and facts.ponr is not None else None
    if point is not None and point < n:
        events.append({"t": float(t[point]), "step": point, "kind": "ponr", "label": "point of no return"})
    if n:
        events.append({"t": float(t[-1]), "step": n - 1, "kind": "end", "label": f"end ({record.outcome.value})"})
    detail["events"] = events
    return detail


def trace_series(table: Any, rows: np.ndarray) -> dict[str, Any]:
    """The policy's own per-step account (``trace.*`` columns): numbers at the plotted rows, and each text
    column as runs of one value (``[value, first step, last step]``)."""
    numeric: dict[str, list[float | None]] = {}
    text: dict[str, list[list[Any]]] = {}
    for name in table.column_names:
        if not name.startswith("trace."):
            continue
        column = table.column(name).combine_chunks()
        if pa.types.is_floating(column.type) or pa.types.is_integer(column.type):
            values = column.to_numpy(zero_copy_only=False).astype(np.float64)
            numeric[name[6:]] = [None if not np.isfinite(v) else round(float(v), 6) for v in values[rows]]
        else:
            runs: list[list[Any]] = []
            for step, value in enumerate(column.to_pylist()):
                if runs and runs[-1][0] == value:
                    runs[-1][2] = step
                else:
                    runs.append([value, step, step])
            text[name[6:]] = runs
    return {"numeric": numeric, "text": text}


def facts_dict(facts: FailureFacts | None) -> dict[str, Any] | None:
    """What failure mining stored about one failure: category, attribution, point of no return (None: unknown)."""
    if facts is None:
        return None
    a, p = facts.attribution, facts.ponr
    return {"category": facts.category, "trace": facts.trace,
            "attribution": None if a is None else {"capability": a.capability, "confidence": a.confidence,
                                                   "evidence": a.evidence},
            "ponr": None if p is None else {"t": p.t, "steps": p.steps, "handoffs": p.handoffs, "lost": p.lost,
                                            "budget": p.budget, "interval": p.interval, "verified": p.verified,
                                            "t_time_limited": p.t_time_limited, "summary": p.describe()}}


UNSUCCESSFUL = ("failure", "timeout", "error")
PAGE = 50  # episodes per page unless asked otherwise
MAX_PAGE = 500


def _page_cells(totals: list[CellTotals], policy: str | None, outcomes: tuple[str, ...]) -> list[tuple[str, str]]:
    """The (policy, outcome) ranges of the listing index a page reads: those the kept counts say hold episodes."""
    held: dict[tuple[str, str], int] = {}
    for t in totals:
        for outcome, n in (("success", t.successes), ("failure", t.failures), ("timeout", t.timeouts),
                           ("error", t.errors)):
            held[(t.policy, outcome)] = held.get((t.policy, outcome), 0) + n
    return sorted(cell for cell, n in held.items()
                  if n and cell[1] in outcomes and (policy is None or cell[0] == policy))


def episode_page(store: Store, campaign: str, policy: str | None = None, outcomes: tuple[str, ...] = OUTCOMES,
                 after: str | None = None, limit: int = PAGE) -> tuple[list[EpisodeRecord], str | None]:
    """A page of the campaign's episodes (of ``policy``, with one of ``outcomes``), newest first: at most
    ``limit`` after the episode ``after`` (None: the newest), and the key the next page starts after (None: the
    last page). Bounded by the page and the campaign's cells, never by its episodes (:mod:`assay.store.listing`);
    an AssayError when ``after`` is not an episode of the campaign."""
    totals = cell_totals(store.catalog, campaign)
    with store.catalog.engine.connect() as conn:
        cursor = None
        if after is not None:
            cursor = listing.cursor_of(conn, campaign, after)
            if cursor is None:
                raise AssayError(f"after={after!r} is not an episode of campaign {campaign!r}: pass the key the "
                                 "previous page gave as its next")
        found = listing.page(conn, campaign, _page_cells(totals, policy, outcomes), cursor, limit)
    return store.catalog.records(campaign, found.keys), found.next


def failures(store: Store, campaign: str, after: str | None = None, limit: int = PAGE,
             policy: str | None = None) -> dict[str, Any]:
    """The campaign's unsuccessful episodes counted per policy and outcome (``by_policy``, from the kept cell
    counts), and one page of them, newest first, with their videos and what mining found
    (``assay failures mine`` / ``ponr``); ``next``: the key the next page starts after (None: the last page)."""
    counts: dict[str, dict[str, int]] = {}
    for t in cell_totals(store.catalog, campaign):
        for outcome, n in (("failure", t.failures), ("timeout", t.timeouts), ("error", t.errors)):
            if n:
                counts.setdefault(t.policy, {}).setdefault(outcome, 0)
                counts[t.policy][outcome] += n
    records, following = episode_page(store, campaign, policy, UNSUCCESSFUL, after, limit)
    facts = failure_facts(store, campaign, records)
    return {"by_policy": counts, "next": following,
            "episodes": [episode_summary(r) | {"videos": videos(store, r), "failure": facts_dict(facts.get(r.key))}
                         for r in records]}


def confined_file(store_root: Path, relpath: str, served: tuple[str, ...] = SERVED_DIRS) -> Path:
    """The file at ``relpath`` inside the ``served`` folders of a directory, symlinks resolved; StoreError otherwise.

    The folders themselves are taken under the resolved root and never followed: a
    ``videos`` link to ``/elsewhere`` serves nothing of ``/elsewhere``.
    """
    if "\x00" in relpath:  # the OS refuses such names; say "no file", never crash
        raise StoreError(f"no file {relpath!r} in the store")
    root = store_root.resolve()
    candidate = (root / relpath).resolve()
    allowed = [root / d for d in served]  # not resolved: a served folder that is a link leads nowhere
    if not any(candidate.is_relative_to(base) for base in allowed) or not candidate.is_file():
        raise StoreError(f"no file {relpath!r} in the store")
    return candidate


DATA_DIRS = ("videos", "episodes")  # served from the data root; the rest of SERVED_DIRS from the store


def served_file(store: Store, relpath: str) -> Path | bytes:
    """A served file: step files and videos from the data root (a local path, or the bytes read through an
    fsspec URL), resolved campaigns from the store directory; StoreError for anything else."""
    top = relpath.split("/", 1)[0]
    if top not in DATA_DIRS:
        return confined_file(store.root, relpath, tuple(d for d in SERVED_DIRS if d not in DATA_DIRS))
    local = local_path(store.data_root)
    if local is not None:
        return confined_file(local, relpath, DATA_DIRS)
    parts = relpath.split("/")
    if "\x00" in relpath or any(part in ("", ".", "..") for part in parts) or not store.files.exists(relpath):
        raise StoreError(f"no file {relpath!r} in the store")
    return store.files.read(relpath)
