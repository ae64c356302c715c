"""Regression sets: failing (task, variant, seed) cases frozen into named, versioned files.

Layout under the store root::

    regression/<name>/v<N>.json          the set, version N (never rewritten)
    regression/<name>/runs/<NNNN>.json   one rerun: set version, policy, outcome per case

Mining splits the failures deterministically (by a hash of the case) into the
mined set ``<name>`` and a held-out set ``<name>.heldout``; a fix is developed
against the mined set and checked on the held-out one, so mining cannot
quietly become overfitting. A rerun is compared with the previous run of the
same set (or, for the first, with the failures it was mined from).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import RegressionError
from assay.spec import TaskSpec, Variant, content_hash
from assay.store import EpisodeRecord, Outcome, write_blob

HELDOUT_SUFFIX = ".heldout"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # always fullmatch: "$" would let "name\n" through


DEFAULT_SETTINGS = {"safety": False, "replan_every": None, "pipeline": "lockstep"}


@dataclass(frozen=True)
class Case:
    """One case of a regression set: a failed episode's task, variant, seed, instruction and run settings."""

    id: str
    task: dict[str, Any]  # the full TaskSpec, so a rerun uses exactly the mined task
    variant: dict[str, Any]
    seed: int
    instruction: str
    source_key: str
    settings: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_SETTINGS))  # how the cell ran
    policy: dict[str, Any] = field(default_factory=dict)  # the failing policy's spec (rerun it by its name)

    @property
    def run_settings(self) -> dict[str, Any]:
        """The settings a rerun uses: the defaults overlaid with the case's own."""
        return {**DEFAULT_SETTINGS, **self.settings}

    @property
    def task_spec(self) -> TaskSpec:
        """The case's task as a TaskSpec."""
        return TaskSpec.model_validate(self.task)

    @property
    def variant_spec(self) -> Variant:
        """The case's variant as a Variant."""
        return Variant.model_validate(self.variant)

    @property
    def label(self) -> str:
        """``task | variant | seed N``, as listed."""
        return f"{self.task['name']} | {self.variant_spec.name} | seed {self.seed}"


@dataclass(frozen=True)
class RegressionSet:
    """A named, versioned regression set (``mined`` or ``heldout``) and the campaign its cases came from."""

    name: str
    version: int
    split: str  # mined or heldout
    source: str
    cases: tuple[Case, ...]

    def to_dict(self) -> dict[str, Any]:
        """The set as the JSON written to ``STORE/regression/NAME/vN.json``."""
        return {"name": self.name, "version": self.version, "split": self.split, "source": self.source,
                "cases": [asdict(c) for c in self.cases]}


def case_from(record: EpisodeRecord, task: TaskSpec, settings: dict[str, Any] | None = None) -> Case:
    """The case of a failed episode; ``settings`` (safety, replan_every, pipeline) as its cell ran, so a
    rerun repeats them (a non-default setting is part of the case's identity)."""
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    identity: dict[str, Any] = {"task": task.id, "task_hash": task.content_hash(), "variant": record.variant_key,
                                "seed": record.seed}
    if settings != DEFAULT_SETTINGS:
        identity["settings"] = settings
    return Case(content_hash(identity, length=16), task.model_dump(mode="json"), record.variant, record.seed,
                record.instruction, record.key, settings, dict(record.policy_spec or {}))


def _write_json(path: Path, data: Any) -> None:
    write_blob(path.parent, path.name, json.dumps(data, indent=2, sort_keys=True).encode())  # atomic


def _set_dir(root: Path, name: str) -> Path:
    return root / "regression" / name


def is_set_name(name: str) -> bool:
    """A valid stored set name: a user's name (``_NAME``), or one with the held-out suffix mining adds."""
    base = name[: -len(HELDOUT_SUFFIX)] if name.endswith(HELDOUT_SUFFIX) else name
    return bool(_NAME.fullmatch(base))


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise RegressionError(f"regression set name {name!r} is not valid; use letters, digits, '_' and '-' (max 64)")


def versions(root: Path, name: str) -> list[int]:
    """The stored versions of regression set ``name``, oldest first."""
    return sorted(int(p.stem[1:]) for p in _set_dir(root, name).glob("v*.json") if p.stem[1:].isdigit())


def load_set(root: Path, name: str, version: int | None = None) -> RegressionSet:
    """Load a regression set at ``version`` (the latest when None); one-line errors name the known sets or versions."""
    found = versions(root, name)
    if not found:
        known = sorted(p.name for p in (root / "regression").glob("*") if p.is_dir())
        raise RegressionError(f"no regression set {name!r} in {root}; known: {', '.join(known) or 'none'}")
    chosen = found[-1] if version is None else version
    if chosen not in found:
        raise RegressionError(f"regression set {name!r} has no version {chosen}; versions: "
                              f"{', '.join(map(str, found))}")
    data = json.loads((_set_dir(root, name) / f"v{chosen}.json").read_text())
    return RegressionSet(data["name"], data["version"], data["split"], data["source"],
                         tuple(Case(**{k: v for k, v in c.items() if k in Case.__dataclass_fields__})
                               for c in data["cases"]))


def _save_version(root: Path, name: str, split: str, source: str, cases: list[Case]) -> RegressionSet:
    """A new version when the cases changed; the latest version when they did not."""
    cases = sorted(cases, key=lambda c: c.id)
    found = versions(root, name)
    if found:
        latest = load_set(root, name)
        if [c.id for c in latest.cases] == [c.id for c in cases]:
            return latest
    regression_set = RegressionSet(name, (found[-1] + 1) if found else 1, split, source, tuple(cases))
    _write_json(_set_dir(root, name) / f"v{regression_set.version}.json", regression_set.to_dict())
    return regression_set


def add_sets(
    root: Path, name: str, source: str, cases: list[Case], holdout: float
) -> tuple[RegressionSet, RegressionSet | None]:
    """Freeze ``cases`` into ``name`` (mined) and ``name.heldout`` (a ``holdout`` share, by case hash)."""
    _check_name(name)
    if not 0.0 <= holdout < 1.0:
        raise RegressionError(f"--holdout {holdout} is not valid; valid: 0 <= holdout < 1")
    if not cases:
        raise RegressionError(f"no failing episodes match in {source}; nothing to freeze into {name!r}")
    unique = list({c.id: c for c in cases}.values())
    held = [c for c in unique if int(c.id[:8], 16) / 0xFFFFFFFF < holdout]
    mined = [c for c in unique if c not in held]
    mined_set = _save_version(root, name, "mined", source, mined)
    held_set = _save_version(root, name + HELDOUT_SUFFIX, "heldout", source, held) if held else None
    return mined_set, held_set


@dataclass(frozen=True)
class RunDiff:
    """How a rerun's cases moved against the previous run: fixed, still failing, newly failing, still passing."""

    fixed: tuple[str, ...]
    still_failing: tuple[str, ...]
    newly_failing: tuple[str, ...]
    still_passing: tuple[str, ...]
    baseline: str  # "mined" or the previous run's number

    def counts(self) -> dict[str, int]:
        """The number of cases in each class."""
        return {"fixed": len(self.fixed), "still_failing": len(self.still_failing),
                "newly_failing": len(self.newly_failing), "still_passing": len(self.still_passing)}


def diff_runs(previous: dict[str, bool] | None, current: dict[str, bool], baseline: str) -> RunDiff:
    """Per case: passed before? passes now? (no previous run: every case failed when it was mined)."""
    before = previous if previous is not None else {case: False for case in current}
    groups: dict[tuple[bool, bool], list[str]] = {(a, b): [] for a in (True, False) for b in (True, False)}
    for case, now in sorted(current.items()):
        groups[(before.get(case, False), now)].append(case)
    return RunDiff(tuple(groups[(False, True)]), tuple(groups[(False, False)]), tuple(groups[(True, False)]),
                   tuple(groups[(True, True)]), baseline)


def runs(root: Path, name: str) -> list[dict[str, Any]]:
    """Every recorded rerun of regression set ``name``, oldest first."""
    return [json.loads(p.read_text()) for p in sorted((_set_dir(root, name) / "runs").glob("*.json"))]


def record_run(
    root: Path, regression_set: RegressionSet, policy: str, outcomes: dict[str, EpisodeRecord]
) -> tuple[dict[str, Any], RunDiff]:
    """Save a rerun's outcomes and diff them against the previous run of this set."""
    previous = runs(root, regression_set.name)
    number = len(previous) + 1
    current = {case: record.outcome is Outcome.SUCCESS for case, record in outcomes.items()}
    last = previous[-1] if previous else None
    diff = diff_runs(last["passed"] if last else None, current, f"run {last['run']}" if last else "mined")
    run = {"run": number, "set": regression_set.name, "version": regression_set.version, "split": regression_set.split,
           "policy": policy, "passed": current, "keys": {case: r.key for case, r in outcomes.items()},
           "diff": diff.counts()}
    _write_json(_set_dir(root, regression_set.name) / "runs" / f"{number:04d}.json", run)
    return run, diff


@dataclass(frozen=True)
class SetStatus:
    """One regression set at its latest version, with every rerun recorded against it (oldest first)."""

    name: str
    version: int
    split: str
    source: str
    cases: int
    runs: tuple[dict[str, Any], ...]  # run, version, policy, passed (count), cases, diff counts

    @property
    def latest(self) -> dict[str, Any] | None:
        """The latest rerun, or None before the first."""
        return self.runs[-1] if self.runs else None

    def to_dict(self) -> dict[str, Any]:
        """The status as a JSON-ready dict, with the latest rerun."""
        return {**asdict(self), "runs": list(self.runs), "latest": self.latest}


def statuses(root: Path, source: str | None = None) -> list[SetStatus]:
    """Every regression set in the store (or only those mined from campaign ``source``), by name."""
    out = []
    base = root / "regression"
    for directory in sorted(p for p in base.glob("*") if p.is_dir()) if base.is_dir() else []:
        if not versions(root, directory.name):
            continue
        try:
            current = load_set(root, directory.name)
            history = runs(root, directory.name)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RegressionError(f"regression set {directory.name!r} in {root} is unreadable: {exc}") from None
        if source is not None and current.source != source:
            continue
        summary = tuple({"run": r["run"], "version": r["version"], "policy": r["policy"],
                         "passed": sum(bool(v) for v in r["passed"].values()), "cases": len(r["passed"]),
                         "diff": r.get("diff", {})} for r in history)
        out.append(SetStatus(current.name, current.version, current.split, current.source, len(current.cases), summary))
    return out
