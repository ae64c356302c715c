"""An episode's summary recomputed from its step data, and judged against its catalog row.

A checksum proves a file's bytes, and a seal (:mod:`assay.store.validation`) that the row repeats what the
worker wrote beside them; neither proves the row is the episode's: whoever can rewrite a file can rewrite
its seal and its checksum. The step data itself cannot be argued with, so ``assay store verify`` recomputes
every summary field from it and compares:

* ``steps``: the file's rows;
* ``total_return``: the sum of the ``reward`` column (as the recorder sums it: ``np.sum`` over float64);
* ``success_step``: the first row whose ``success`` flag is set, or none;
* ``trajectory_hash``: SHA-256 over the states, actions and rewards and the outcome (as the recorder hashes);
* ``outcome``: the rule the rollout ends an episode by (``run.closed_loop.outcome_after``, restated here below the
  run layer and tested equal to it), applied to the ``success``, ``terminated`` and ``truncated`` flags with
  the task's horizon and success mode (:class:`TaskRule`). The first step the rule ends the episode at must be
  the last row, and the outcome it gives there the row's; an ``error`` (an episode stopped from outside the
  simulation) must have no step the rule ends it at. Without the task's rule (a task no campaign of the store
  and no registry names with this hash) only what holds under every rule is judged: a success ends on a
  success flag, a timeout on no termination, and no step before the last ends the episode.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from assay.lazy import deferred_module
from assay.spec import SuccessMode, TaskSpec
from assay.store.columns import step_matrix

if TYPE_CHECKING:
    import pyarrow as pa
else:  # loaded at first use: listing and scoring commands read the catalog only
    pa = deferred_module("pyarrow")

FLAG_COLUMNS = ("success", "terminated", "truncated")
FACT_COLUMNS = ("observation.state", "action", "reward", *FLAG_COLUMNS)  # what the summary is recomputed from


class TaskRule(NamedTuple):
    """What the outcome of an episode of a task depends on besides its steps."""

    horizon: int
    success: SuccessMode


@dataclass(frozen=True)
class StepFacts:
    """What a step table says of its episode's summary: rows, return, first success, the flags, and the trajectory
    digest before the outcome is added (``digest``: a hashlib object, copied for each outcome judged)."""

    rows: int
    total_return: float
    success_step: int | None
    success: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    digest: Any

    def trajectory_hash(self, outcome: str) -> str:
        """The trajectory hash the recorder gives these steps with ``outcome``."""
        digest = self.digest.copy()
        digest.update(outcome.encode())
        return str(digest.hexdigest()[:32])


def step_facts(table: pa.Table) -> StepFacts | None:
    """The facts of a step table (an episode's own file or its row group of a pack), or None when it lacks a column
    they are recomputed from (a missing required column is named by the file check)."""
    if any(name not in table.column_names for name in FACT_COLUMNS):
        return None
    rows = table.num_rows
    rewards = step_matrix(table, "reward", np.float64)
    flags = {name: np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=bool) for name in FLAG_COLUMNS}
    digest = hashlib.sha256()
    for values in (step_matrix(table, "observation.state", np.float64), step_matrix(table, "action", np.float64),
                   rewards):
        digest.update(np.ascontiguousarray(values).tobytes())
    hits = np.flatnonzero(flags["success"])
    return StepFacts(rows, float(np.sum(rewards)) if rows else 0.0, int(hits[0]) if hits.size else None,
                     flags["success"], flags["terminated"], flags["truncated"], digest)


def ended_at(facts: StepFacts, rule: TaskRule) -> tuple[int, str] | None:
    """The first row (from 0) at which the rollout's rule ends the episode, and the outcome it gives; None when no
    row ends it. The rule (``run.closed_loop.outcome_after``) after the ``t``-th step: at the horizon when ``t >=
    horizon`` or truncated; ``any_step``: success on a success flag; ``at_end``: at the horizon or on termination,
    success if the flag is set, else failure; then termination is a failure, the horizon a timeout."""
    index = np.arange(1, facts.rows + 1)
    at_horizon = (index >= rule.horizon) | facts.truncated
    if rule.success is SuccessMode.ANY_STEP:
        ends = facts.success | facts.terminated | at_horizon
    else:
        ends = facts.terminated | at_horizon
    hits = np.flatnonzero(ends)
    if not hits.size:
        return None
    row = int(hits[0])
    if rule.success is SuccessMode.ANY_STEP and facts.success[row]:
        return row, "success"
    if rule.success is SuccessMode.AT_END:
        return row, "success" if facts.success[row] else "failure"
    return row, "failure" if facts.terminated[row] else "timeout"


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def summary_problem(facts: StepFacts, outcome: str, steps: int, total_return: float, success_step: int | None,
                    trajectory_hash: str, rule: TaskRule | None) -> str | None:
    """Which summary field of a catalog row its step data contradicts (recomputed as the module docstring says), or
    None. ``rule`` None: the task's rule is unknown, and the outcome is judged on what holds under every rule."""
    if facts.rows != steps:
        return f"{facts.rows} rows, the catalog records {steps} steps"
    if not _same(facts.total_return, float(total_return)):
        return (f"the step data's rewards sum to {facts.total_return!r}, the catalog row records total_return "
                f"{float(total_return)!r}")
    if facts.success_step != success_step:
        return (f"the step data's first success is at step {_shown(facts.success_step)}, the catalog row records "
                f"success_step {_shown(success_step)}")
    problem = _outcome_problem(facts, outcome, rule)
    if problem is not None:
        return problem
    if facts.trajectory_hash(outcome) != trajectory_hash:
        return "the step data's states, actions and rewards do not hash to the catalog row's trajectory_hash"
    return None


def _shown(step: int | None) -> str:
    return "none" if step is None else str(step)


def _outcome_problem(facts: StepFacts, outcome: str, rule: TaskRule | None) -> str | None:
    last = facts.rows - 1
    if rule is not None:
        end = ended_at(facts, rule)
        if end is None:
            return None if outcome == "error" else (
                f"the catalog row records {outcome}, yet no step of the step data ends the episode (horizon "
                f"{rule.horizon}, success {rule.success.value}): only an error stops it there")
        row, judged = end
        if row < last:
            return (f"the step data ends the episode at step {row} ({judged}), yet holds {facts.rows} rows (the "
                    f"catalog row records {outcome})")
        return None if judged == outcome else (f"the step data ends the episode in {judged} at its last step, the "
                                               f"catalog row records {outcome}")
    ends = facts.terminated | facts.truncated
    early = np.flatnonzero(ends[:last]) if last > 0 else np.array([], dtype=np.int64)
    if early.size:
        return f"the step data ends the episode at step {int(early[0])}, yet holds {facts.rows} rows"
    if outcome == "success" and (last < 0 or not facts.success[last]):
        return "the catalog row records success, yet the step data's last step has no success flag"
    if outcome == "timeout" and last >= 0 and facts.terminated[last]:
        return "the catalog row records timeout, yet the step data's last step terminated the episode"
    if outcome == "error" and last >= 0 and ends[last]:
        return "the catalog row records error, yet the step data's last step ended the episode"
    return None


Rules = dict[str, TaskRule | None]  # task hash -> its rule (None: looked up and not found)


def rules_from_campaigns(resolved: Iterable[Mapping[str, Any]]) -> Rules:
    """Task hash -> rule, from campaigns' resolved documents (their ``tasks``: id, hash, spec); an entry counts only
    where its spec validates and hashes to the hash it is listed under (an edited horizon does not)."""
    rules: Rules = {}
    for document in resolved:
        tasks = document.get("tasks") if isinstance(document, Mapping) else None
        for entry in tasks if isinstance(tasks, list) else []:
            if not isinstance(entry, Mapping) or entry.get("hash") in rules:
                continue
            task = _task(entry.get("spec"))
            if task is not None and task.content_hash() == entry.get("hash"):
                rules[task.content_hash()] = TaskRule(task.horizon, task.success)
    return rules


def _task(spec: Any) -> TaskSpec | None:
    try:
        return TaskSpec.model_validate(spec)
    except ValueError:  # pydantic's ValidationError is one
        return None


TaskLookup = Callable[[str], TaskSpec | None]  # a task id -> its spec, where a registry holds it


def rule_of(task_id: str, task_hash: str, rules: Rules, lookup: TaskLookup | None) -> TaskRule | None:
    """The rule of the task ``task_hash`` names: from ``rules``, else from ``lookup(task_id)`` when its hash is
    ``task_hash``, else None (the answer remembered in ``rules``, hit or miss)."""
    if task_hash not in rules:
        task = lookup(task_id) if lookup is not None else None
        rules[task_hash] = TaskRule(task.horizon, task.success) if task is not None and \
            task.content_hash() == task_hash else None
    return rules[task_hash]
