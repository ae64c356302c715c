"""What ``assay store verify`` checks of every recorded episode, the verdict it keeps until a repair, and whether the
store seals its files.

Each episode with a step file must have a checksum in its row (a NULL one is a failure, not a skip), a file that
matches it, its row's key, columns and rows (:mod:`assay.store.validation`), a seal its row repeats, and step data
its summary is recomputed from (:mod:`assay.store.summaries`: outcome, success step, steps, return, trajectory
hash). Whether files may lack a seal is the **store's** property, not a row's: ``store_meta.seal_version`` is
written once, when a catalog is created: ``1`` (every file sealed) for a catalog whose rows name no step file yet,
``0`` (legacy: files from before seals may be there) for one opened with such rows before the marker existed
(:func:`assay.store.validation.mark_seals`). In a sealed store a file without a seal (or with one key of it
stripped) fails; in a legacy store it is counted, and its summary is still recomputed from its steps. ``store
verify`` raises a legacy store to sealed once it finds every file sealed (:func:`require_seals`), never the other
way.

A verdict is kept (``failed_checks``): every ``store verify`` replaces the table with what it found, forgetting an
episode deletes its entry, and while a campaign links a failed episode its results are refused
(:func:`failed`, read by the scoring commands) and a resume re-runs it (``Store.resume_plan``): the repair.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from assay.store.catalog import Catalog
from assay.store.records import Outcome
from assay.store.retention import pruned
from assay.store.roots import Root
from assay.store.schema import campaign_episodes, episodes, failed_checks
from assay.store.summaries import TaskLookup, rule_of, rules_from_campaigns, summary_problem
from assay.store.validation import LEGACY, SEAL_META, SEALED, Opened, Summary, file_check

CHUNK = 500  # keys per IN list
UNSEALED = ("no seal in the step file (its outcome, steps, total_return and success_step metadata, or one of them, "
            "is missing), and every step file of this store is sealed (store_meta.seal_version 1)")


@dataclass
class FileCheck:
    """What :func:`check_files` found: the untrusted episodes (key -> why) and a tally of the rest.

    ``files`` rows name a step file, ``file_problems`` of those failed; ``pruned`` rows had theirs deleted by
    ``assay store prune``; ``without_steps`` are errors before the first step (no file to have); ``unsealed``
    files of a legacy store carry no seal (their summary is still recomputed); ``unjudged`` episodes' outcomes
    were judged without their task's horizon and success mode (no campaign or registry names their task).
    """

    problems: dict[str, str] = field(default_factory=dict)
    files: int = 0
    file_problems: int = 0
    pruned: int = 0
    without_steps: int = 0
    unsealed: set[str] = field(default_factory=set)
    unjudged: set[str] = field(default_factory=set)
    sealed_store: bool = True


def seals_required(catalog: Catalog) -> bool:
    """Whether every step file of the store must carry a seal (anything but a legacy marker)."""
    return catalog.meta(SEAL_META) != LEGACY


def require_seals(catalog: Catalog) -> None:
    """Make a legacy store a sealed one (every file was found sealed); a sealed store is never made legacy."""
    catalog.set_meta(SEAL_META, SEALED)


def check_files(catalog: Catalog, data_root: Root, keys: Sequence[str], lookup: TaskLookup | None = None,
                chunk: int = 5000) -> FileCheck:
    """Check every episode of ``keys`` (see the module docstring), ``chunk`` rows read at a time. ``lookup`` finds
    a task no campaign of the store names (a registry's), for its horizon and success mode."""
    check = FileCheck(sealed_store=seals_required(catalog))
    rules = rules_from_campaigns(c.spec for c in catalog.campaigns())
    for start in range(0, len(keys), chunk):
        _check_chunk(catalog, data_root, list(keys[start:start + chunk]), check, rules, lookup)
    return check


def _check_chunk(catalog: Catalog, data_root: Root, keys: list[str], check: FileCheck, rules: dict[str, Any],
                 lookup: TaskLookup | None) -> None:
    opened: dict[tuple[str, str | None], Opened] = {}  # each pack read and hashed once for its episodes
    found = {key: f"catalog row cannot be read ({why})" for key, why in catalog.undecodable(keys).items()}
    rows = _rows(catalog, [key for key in keys if key not in found])
    marks = pruned(catalog, [key for key, row in rows.items() if row.data_path is None])
    for key, row in rows.items():
        summary = Summary(str(row.outcome), int(row.steps), float(row.total_return),
                          None if row.success_step is None else int(row.success_step))
        if row.data_path is None:
            if key in marks:
                check.pruned += 1
            elif summary.outcome == Outcome.ERROR.value and summary.steps == 0:
                check.without_steps += 1
            else:
                found[key] = (f"no step file, yet the row records {summary.outcome} after {summary.steps} steps "
                              "(only an error before the first step, or a pruned episode, has none)")
            continue
        check.files += 1
        checked = file_check(data_root, row.data_path, row.data_sha256, key, summary.steps, summary, opened)
        problem = checked.problem
        if problem is None and not checked.sealed:
            if check.sealed_store:
                problem = UNSEALED
            else:
                check.unsealed.add(key)
        if problem is None:
            rule = rule_of(str(row.task_id), str(row.task_hash), rules, lookup)
            if rule is None:
                check.unjudged.add(key)
            problem = "its step data could not be read to recompute its summary" if checked.facts is None else \
                summary_problem(checked.facts, summary.outcome, summary.steps, summary.total_return,
                                summary.success_step, str(row.trajectory_hash), rule)
        if problem is not None:
            found[key] = problem
            check.file_problems += 1
    check.problems.update(found)


def _rows(catalog: Catalog, keys: list[str]) -> dict[str, Any]:
    """What a check reads of each row: its summary, file, checksum, task and trajectory hash."""
    columns = (episodes.c.key, episodes.c.outcome, episodes.c.steps, episodes.c.total_return,
               episodes.c.success_step, episodes.c.data_path, episodes.c.data_sha256, episodes.c.task_id,
               episodes.c.task_hash, episodes.c.trajectory_hash)
    found: dict[str, Any] = {}
    with catalog.engine.connect() as conn:
        for start in range(0, len(keys), CHUNK):
            for row in conn.execute(sa.select(*columns).where(episodes.c.key.in_(keys[start:start + CHUNK]))):
                found[str(row.key)] = row
    return found


def record_verdicts(catalog: Catalog, problems: dict[str, str]) -> None:
    """Replace the kept verdict with ``problems`` (key -> why), in one transaction."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    with catalog.engine.begin() as conn:
        conn.execute(failed_checks.delete())
        if problems:
            conn.execute(failed_checks.insert(), [{"key": key, "problem": why[:2000], "found_at": now}
                                                  for key, why in sorted(problems.items())])


def failed(catalog: Catalog, keys: Iterable[str] | None = None, campaign: str | None = None) -> dict[str, str]:
    """The kept verdict's failed episodes (key -> why): among ``keys``, or linked to ``campaign``, or all. The table
    is empty in a sound store, so this costs nothing then."""
    query = sa.select(failed_checks.c.key, failed_checks.c.problem)
    if campaign is not None:
        linked = sa.select(campaign_episodes.c.key).where(campaign_episodes.c.campaign == campaign,
                                                          campaign_episodes.c.key == failed_checks.c.key)
        query = query.where(linked.exists())
    with catalog.engine.connect() as conn:
        found = {str(r.key): str(r.problem) for r in conn.execute(query)}
    if keys is None:
        return found
    return {key: found[key] for key in keys if key in found} if found else {}
