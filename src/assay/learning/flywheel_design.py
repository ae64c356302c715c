"""The flywheel experiment's design and each arm's data selection (issue 21).

A design file (YAML) declares a *deployment gap*: the base policy learns from expert
demos whose initial conditions lie in a ``slice`` of the workspace (one threshold on one
component of Meta-World's ``rand_vec``), and is evaluated on the whole distribution.
Five arms then get the same extra budget, equal in episodes *and* frames:

* ``base``: the slice demos only;
* ``random``: + K expert demos from the whole distribution (the demo pool, in order);
* ``targeted``: + K expert demos from the region that failure mining found on a probe
  run of the base (:func:`assay.failures.priorities.failure_region` on the probe's
  records: outcomes and initial conditions, never the slice);
* ``recovery``: + the expert's actions on the states the base visited in K failing probe
  episodes (DAgger-style relabels);
* ``oracle``: + K expert demos from the true uncovered region (the slice's complement): the
  ceiling, the only arm that reads the slice.

Budgets are made equal by :func:`equal_budget`: every extra arm keeps the same number of
episodes (the smallest any arm could fill) and is trimmed to the same number of frames
(the smallest total), each demo keeping its share of frames at evenly spaced steps (BC
learns from (state, action) pairs, so a frame budget is a set of pairs). The functions
here are pure over records and demos; :mod:`assay.learning.flywheel_run` runs the campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.errors import AssayError
from assay.failures.priorities import InitRegion, failure_region
from assay.learning.data import Demo
from assay.spec import load_yaml
from assay.spec.loading import validation_error
from assay.store import EpisodeRecord, Outcome

ARMS = ("base", "random", "targeted", "recovery", "oracle")
EXTRA_ARMS = ARMS[1:]


class SliceSpec(BaseModel):
    """The part of the workspace the base policy's demos come from: ``init[component] < threshold``
    (``below: true``) or ``>=``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    component: int = Field(ge=0, le=5)
    threshold: float
    below: bool = True

    def region(self) -> InitRegion:
        """The slice as an initial-condition region."""
        return InitRegion(self.component, self.threshold, self.below)


class FlywheelDesign(BaseModel):
    """One flywheel experiment, as data (``assay flywheel --design FILE.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$")
    task: str
    slice: SliceSpec
    horizon: int | None = Field(default=None, ge=1)
    base_demos: int = Field(default=20, ge=1)
    extra_demos: int = Field(default=6, ge=1)  # K, per extra arm
    pool: int = Field(default=100, ge=2)  # expert episodes per replicate that base and the demo arms draw from
    probe: int = Field(default=40, ge=4)
    eval_episodes: int = Field(default=60, ge=1, alias="eval")
    replicates: int = Field(default=5, ge=1)
    first_replicate: int = Field(default=0, ge=0)  # replicates first_replicate, first_replicate + 1, ...: a pilot's
    # replicates can be kept out of the confirmatory run (their seed streams are not reused)
    epochs: int = Field(default=100, ge=1)
    hidden: tuple[int, ...] = (256, 256)
    bootstrap: int = Field(default=10000, ge=100)
    power_baseline: float = Field(default=0.7, gt=0, lt=1)  # the expected random-arm rate the power plan assumed
    delta: float = Field(default=0.10, gt=0, lt=1)  # the difference the plan is sized to detect

    def tag(self) -> str:
        """What fixes the data and checkpoints (not the replicate count, bootstrap or power settings)."""
        from assay.spec import content_hash

        return content_hash({"task": self.task, "slice": self.slice.model_dump(), "horizon": self.horizon,
                             "base": self.base_demos, "extra": self.extra_demos, "pool": self.pool,
                             "probe": self.probe, "epochs": self.epochs, "hidden": list(self.hidden)}, length=8)


def load_design(path: Path) -> FlywheelDesign:
    """A design file, or one ``file:line: field: message`` error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AssayError(f"cannot read design file {path}: {exc.strerror or exc}") from None
    data, lines = load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise AssayError(f"{path}:1: a flywheel design is a mapping (name, task, slice, ...)")
    try:
        return FlywheelDesign.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, str(path), lines) from None


def initial(record: EpisodeRecord) -> list[float]:
    """The episode's initial-condition vector (Meta-World's ``rand_vec``), or AssayError."""
    values = record.initial_conditions.get("rand_vec") if isinstance(record.initial_conditions, dict) else None
    if not values:
        raise AssayError(f"episode {record.key} recorded no initial conditions (rand_vec); the flywheel design "
                         "needs a task whose resets record them (Meta-World)")
    return [float(v) for v in values]


def _ordered_successes(pool: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted((r for r in pool if r.outcome is Outcome.SUCCESS), key=lambda r: (r.episode_index, r.key))


def select_base(pool: Sequence[EpisodeRecord], slice_region: InitRegion, count: int) -> list[EpisodeRecord]:
    """The first ``count`` successful pool episodes inside the slice."""
    return [r for r in _ordered_successes(pool) if slice_region.contains(initial(r))][:count]


def select_demos(pool: Sequence[EpisodeRecord], used: set[str], region: InitRegion | None, count: int,
                 outside: bool = False) -> list[EpisodeRecord]:
    """The first ``count`` successful pool episodes not in ``used``, inside ``region`` (outside it when
    ``outside``; anywhere when ``region`` is None)."""
    chosen = []
    for record in _ordered_successes(pool):
        if record.key in used:
            continue
        if region is not None and region.contains(initial(record)) == outside:
            continue
        chosen.append(record)
        if len(chosen) == count:
            break
    return chosen


def probe_failures(probe: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    """The probe's failures and timeouts in episode order (the recovery arm relabels the first ones)."""
    return sorted((r for r in probe if r.outcome in (Outcome.FAILURE, Outcome.TIMEOUT)),
                  key=lambda r: (r.episode_index, r.key))


def mine(probe: Sequence[EpisodeRecord]) -> tuple[InitRegion | None, dict[str, Any]]:
    """Where the probe's failures are (from the records alone), and the account of it for the result."""
    scored = [r for r in probe if r.outcome is not Outcome.ERROR]
    region = failure_region(scored)
    failed = probe_failures(scored)
    variants: dict[str, list[int]] = {}
    for record in scored:
        counts = variants.setdefault(record.variant_name, [0, 0])
        counts[0] += record.outcome is not Outcome.SUCCESS
        counts[1] += 1
    account: dict[str, Any] = {
        "probe_episodes": len(scored), "probe_failures": len(failed),
        "variants": {name: {"failures": f, "episodes": n} for name, (f, n) in sorted(variants.items())},
        "region": None if region is None else region.to_dict()}
    if region is not None:
        inside = [r for r in scored if region.contains(initial(r))]
        account["inside"] = {"episodes": len(inside), "failures": sum(r.outcome is not Outcome.SUCCESS for r in inside)}
        account["outside"] = {"episodes": len(scored) - len(inside),
                              "failures": len(failed) - account["inside"]["failures"]}
        account["why"] = (f"{account['inside']['failures']}/{len(inside)} probe episodes fail in {region.label}, "
                          f"{account['outside']['failures']}/{len(scored) - len(inside)} outside it "
                          "(the one-threshold split of the initial conditions with the largest Gini gain)")
    else:
        account["why"] = "the probe's outcomes do not separate by initial condition: targeted demos come from anywhere"
    return region, account


def region_agreement(mined: InitRegion | None, truth: InitRegion, scenes: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Precision and recall of the mined region against the true uncovered region (``truth``), over the
    initial conditions ``scenes`` (the evaluation scenes: a fresh sample of the distribution)."""
    uncovered = np.array([truth.contains(s) for s in scenes], dtype=bool)
    mined_in = np.array([True if mined is None else mined.contains(s) for s in scenes], dtype=bool)
    both = int((uncovered & mined_in).sum())
    return {"scenes": len(scenes), "uncovered": int(uncovered.sum()), "mined": int(mined_in.sum()), "both": both,
            "precision": both / int(mined_in.sum()) if mined_in.any() else None,
            "recall": both / int(uncovered.sum()) if uncovered.any() else None}


def trim_frames(demos: Sequence[Demo], frames: int) -> list[Demo]:
    """``demos`` cut to ``frames`` (state, action) pairs in all: each demo keeps its share (largest
    remainder, at least one frame each) at evenly spaced steps, first and last included."""
    total = sum(len(d.actions) for d in demos)
    if frames > total or frames < len(demos):
        raise AssayError(f"cannot trim {len(demos)} demos of {total} frames to {frames} frames")
    if frames == total:
        return list(demos)
    lengths = np.array([len(d.actions) for d in demos])
    exact = 1 + (frames - len(demos)) * (lengths - 1) / max(int((lengths - 1).sum()), 1)
    keep = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - keep), kind="stable")[: frames - int(keep.sum())]:
        keep[i] += 1
    out = []
    for demo, n in zip(demos, keep, strict=True):
        rows = np.unique(np.round(np.linspace(0, len(demo.actions) - 1, int(n))).astype(int))
        out.append(Demo(demo.key, demo.task_id, demo.task_hash, demo.variant_key, demo.seed, demo.purpose,
                        demo.observations[rows], demo.actions[rows], demo.instruction))
    return out


def equal_budget(arms: Mapping[str, Sequence[Demo]]) -> tuple[dict[str, list[Demo]], dict[str, Any]]:
    """Every arm cut to the same episodes (the fewest any arm has) and the same frames (the fewest any
    arm then has), and the account: what each arm had before and the common budget."""
    if not arms or min(len(d) for d in arms.values()) == 0:
        empty = sorted(name for name, d in arms.items() if not d)
        raise AssayError(f"arm(s) {', '.join(empty) or '(none)'} found no data; enlarge the pool or the probe")
    episodes = min(len(d) for d in arms.values())
    cut = {name: list(d)[:episodes] for name, d in arms.items()}
    frames = min(sum(len(x.actions) for x in d) for d in cut.values())
    trimmed = {name: trim_frames(d, frames) for name, d in cut.items()}
    available = {name: {"episodes": len(d), "frames": sum(len(x.actions) for x in d)} for name, d in arms.items()}
    account = {"episodes": episodes, "frames": frames, "available": available}
    return trimmed, account
