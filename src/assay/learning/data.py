"""Training data from the store: a query over the catalog plus recovery demos.

A query is ``key=value`` pairs joined by ``,``; a value may list alternatives
joined by ``|``::

    campaign=expert-demos,task=metaworld/reach@1,outcome=success
    campaign=base|extra,demos=demos

Keys: ``campaign``, ``task``, ``policy``, ``outcome`` (default ``success``: behaviour
cloning learns from successes; ``any`` takes every episode with step data) and
``demos``: a folder under the store root (``demos`` for all recovery demos written
by ``assay failures``), whose Parquet files are added. Every demo carries its
provenance (task id and hash, variant key, seed, source episode) for the leakage
check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from assay.errors import DataQueryError
from assay.store import EpisodeRecord, Store, check_step_format, step_matrix

ENVIRONMENT_COLUMN = "observation.environment_state"
QUERY_KEYS = ("campaign", "task", "policy", "outcome", "demos")


@dataclass(frozen=True)
class DataQuery:
    """Which stored episodes become demos: campaigns, tasks, policies, an outcome, and whether recovery demos join."""

    campaigns: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    outcome: str = "success"
    demos: str | None = None

    @staticmethod
    def parse(text: str) -> DataQuery:
        """Parse ``campaign=a,task=b,...``; a part that is not KEY=VALUE with a known KEY is a DataQueryError."""
        fields: dict[str, tuple[str, ...]] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in QUERY_KEYS or not value.strip():
                raise DataQueryError(
                    f"data query part {part!r} is not KEY=VALUE with KEY one of {', '.join(QUERY_KEYS)}")
            fields[key.strip()] = tuple(v.strip() for v in value.split("|") if v.strip())
        if not fields.get("campaign") and not fields.get("demos"):
            raise DataQueryError(f"data query {text!r} names no 'campaign=' and no 'demos='; give at least one")
        outcome = fields.get("outcome", ("success",))
        if len(outcome) != 1 or outcome[0] not in ("success", "failure", "timeout", "any"):
            raise DataQueryError(f"outcome must be one of success, failure, timeout, any; got {'|'.join(outcome)}")
        demos = fields.get("demos")
        return DataQuery(fields.get("campaign", ()), fields.get("task", ()), fields.get("policy", ()), outcome[0],
                         demos[0] if demos else None)


@dataclass(frozen=True)
class Demo:
    """One demonstration: recorded states and actions, with where it came from."""

    key: str  # the episode key, or the demo file's path under the store for a recovery demo
    task_id: str
    task_hash: str
    variant_key: str
    seed: int
    purpose: str  # "episode" or "recovery"
    observations: np.ndarray  # (T, state_dim) float64
    actions: np.ndarray  # (T, action_dim) float64
    instruction: str = ""  # the instruction the episode ran under (language-conditioned training reads it)
    steps: np.ndarray | None = None  # the episode step of each row (None: rows 0..T-1; a frame-trimmed demo keeps
    # some steps, and pixel training reads the recorded frames of exactly those)
    environment: np.ndarray | None = None  # (T, n) the recorded observation.environment_state, where there is one

    def step_indices(self) -> np.ndarray:
        """The episode step of each row (0..T-1 unless the demo was cut to some of its steps)."""
        return np.arange(len(self.actions)) if self.steps is None else self.steps

    def provenance(self) -> dict[str, object]:
        """Where the demo came from (its key, task, variant, seed and purpose), recorded with a checkpoint."""
        return {"key": self.key, "task_id": self.task_id, "task_hash": self.task_hash,
                "variant_key": self.variant_key, "seed": self.seed, "purpose": self.purpose}


def episode_demo(store: Store, record: EpisodeRecord) -> Demo:
    """A stored episode's states and actions as a demo."""
    table = store.steps(record)
    environment = (step_matrix(table, ENVIRONMENT_COLUMN, np.float64)
                   if ENVIRONMENT_COLUMN in table.column_names else None)
    return Demo(record.key, record.task_id, record.task_hash, record.variant_key, record.seed, "episode",
                step_matrix(table, "observation.state", np.float64), step_matrix(table, "action", np.float64),
                record.instruction, environment=environment)


def recovery_demo(store: Store, path: Path) -> Demo:
    """A recovery demo file; its task hash and variant key come from its source episode's record."""
    table = pq.read_table(path)
    check_step_format(table.schema.metadata, str(path))
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    source = meta.get("source_episode")
    if not source:
        raise DataQueryError(f"{path} has no source_episode in its metadata; is it a recovery demo?")
    record = store.catalog.episode(source)
    relpath = str(path.relative_to(store.root)) if path.is_relative_to(store.root) else str(path)
    return Demo(relpath, record.task_id, record.task_hash, record.variant_key, record.seed, "recovery",
                step_matrix(table, "observation.state", np.float64), step_matrix(table, "action", np.float64),
                record.instruction)


def select_records(store: Store, query: DataQuery) -> list[EpisodeRecord]:
    """The episodes the query selects, by key, in campaign order."""
    records: dict[str, EpisodeRecord] = {}
    for campaign in query.campaigns:
        for record in store.catalog.episodes(campaign=campaign):
            if query.tasks and record.task_id not in query.tasks:
                continue
            if query.policies and record.policy_name not in query.policies:
                continue
            if query.outcome != "any" and record.outcome.value != query.outcome:
                continue
            if record.data_path is not None:
                records.setdefault(record.key, record)
    return sorted(records.values(), key=lambda r: (r.task_id, r.seed, r.key))


def load_demos(store: Store, query: DataQuery | str) -> list[Demo]:
    """Every demo the query selects, in a deterministic order (task, seed, key; then demo files by path)."""
    if isinstance(query, str):
        query = DataQuery.parse(query)
    demos = [episode_demo(store, r) for r in select_records(store, query)]
    if query.demos is not None:
        folder = store.root / query.demos
        if not folder.is_dir():
            raise DataQueryError(f"demos folder {folder} does not exist (write recovery demos with 'assay failures')")
        for path in sorted(folder.rglob("*.parquet")):
            demo = recovery_demo(store, path)
            if not query.tasks or demo.task_id in query.tasks:
                demos.append(demo)
    if not demos:
        raise DataQueryError(f"the data query selects no episode with step data in {store.root}")
    return demos
