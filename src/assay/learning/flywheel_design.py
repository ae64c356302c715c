"""The flywheel experiment's design and each arm's data selection (issues 21, 43).

A design file (YAML) declares an evaluation distribution (the task's initial conditions
times the design's ``variants``, e.g. nominal and ``control.gain: 0.5``) and a *deployment
gap*: the base policy learns from expert demos in a ``slice`` of it (one threshold on one
component of Meta-World's ``rand_vec``, and/or some of the variants), and is evaluated on
the whole distribution. It declares its primary endpoint (``primary``: the test and its unit).
Six arms then get an extra budget, equal in episodes *and* frames:

* ``base``: the slice demos only;
* ``random``: + K expert demos drawn uniformly from the whole distribution;
* ``targeted``: + K expert demos drawn uniformly from where failure mining on a probe run of the base
  points (:func:`mine`, on the probe's records alone, never the slice): the variants with the highest
  failure rate, then within them the initial-condition split with the largest Gini gain
  (:func:`assay.failures.priorities.failure_region`);
* ``recovery``: + the expert's actions on the states the base visited in K failing probe
  episodes (DAgger-style relabels, each replayed in its own variant);
* ``ponr``: + up to K point-of-no-return recovery demos (the expert takes over just before
  each failure's point of no return, in the failure's variant; ``ponr: false`` leaves it out);
* ``oracle``: + K expert demos drawn uniformly from the true uncovered part (outside the slice): the
  ceiling, the only arm that reads the slice.

Every arm that takes pool demos draws them by one blind rule (:func:`draw_demos`): the same seeded
permutation of the same candidates (the successful pool episodes after the base's last one, which
its slice selection never examined), each arm taking the first K of it inside its region.

Budgets are made equal by :func:`equal_budget` in two groups: the primary pair (targeted and random)
against each other alone, then the secondary arms among themselves, capped at the primary pair's
budget (so no secondary arm learns from more data than random, its comparator). Within a group
every arm keeps the same number of episodes (the fewest any arm of the group has) and is trimmed
to the same number of frames (the smallest total), each demo keeping its share of frames at evenly
spaced steps (BC learns from (state, action) pairs, so a frame budget is a set of pairs). The
functions here are pure over records and demos; :mod:`assay.learning.flywheel_run` runs the campaigns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from assay.errors import AssayError
from assay.failures.priorities import InitRegion, failure_region
from assay.learning.data import Demo
from assay.spec import canonical_json, content_hash, load_yaml
from assay.spec.loading import validation_error
from assay.store import EpisodeRecord, Outcome

ARMS = ("base", "random", "targeted", "recovery", "ponr", "oracle")
EXTRA_ARMS = ARMS[1:]
PRIMARY_PAIR = ("targeted", "random")  # the declared comparison; every other extra arm is secondary


class SliceSpec(BaseModel):
    """The part of the evaluation distribution the base policy's demos come from: an initial-condition
    region ``init[component] < threshold`` (``below: true``) or ``>=``, and/or some of the design's
    variants (``variants``: the requests the base saw; unset: every variant)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    component: int | None = Field(default=None, ge=0, le=5)
    threshold: float | None = None
    below: bool = True
    variants: tuple[dict[str, Any], ...] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _region_or_variants(self) -> SliceSpec:
        if (self.component is None) != (self.threshold is None):
            raise ValueError("give component and threshold together (the region init[component] < threshold)")
        if self.component is None and self.variants is None:
            raise ValueError("a slice is a region (component, threshold), variants, or both")
        return self

    def region(self) -> InitRegion | None:
        """The slice's initial-condition region (None: the slice is by variant only)."""
        if self.component is None or self.threshold is None:
            return None
        return InitRegion(self.component, self.threshold, self.below)

    def hashed(self) -> dict[str, Any]:
        """What of the slice fixes the data (a region-only slice hashes as it did before variants)."""
        out: dict[str, Any] = {}
        if self.component is not None:
            out = {"component": self.component, "threshold": self.threshold, "below": self.below}
        if self.variants is not None:
            out["variants"] = [dict(v) for v in self.variants]
        return out


@dataclass(frozen=True)
class Where:
    """A part of the evaluation distribution: an initial-condition region (None: any) within a set of
    variants (their keys; None: any). ``names`` are the variants' names, for the account."""

    region: InitRegion | None = None
    variants: frozenset[str] | None = None
    names: tuple[str, ...] = ()

    def contains(self, record: EpisodeRecord) -> bool:
        """Whether the episode ran in one of the variants and started inside the region."""
        if self.variants is not None and record.variant_key not in self.variants:
            return False
        return self.region is None or self.region.contains(initial(record))

    @property
    def label(self) -> str:
        """``variant A or B, init[3] >= 0.01``; ``anywhere`` for the whole distribution."""
        parts = [] if self.variants is None else [f"variant {' or '.join(self.names)}"]
        parts += [] if self.region is None else [self.region.label]
        return ", ".join(parts) or "anywhere"


class PrimaryEndpoint(BaseModel):
    """The design's declared primary endpoint for targeted − random: ``test: ttest, unit: replicate`` (a
    two-sided one-sample t test over the replicate differences: the replicate is what varies the data) or
    ``test: mcnemar, unit: scene`` (McNemar's exact test over the pooled (replicate, scene) pairs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    test: Literal["ttest", "mcnemar"]
    unit: Literal["replicate", "scene"]
    alpha: float = Field(default=0.05, gt=0, lt=1)

    @model_validator(mode="after")
    def _test_fits_unit(self) -> PrimaryEndpoint:
        if (self.test, self.unit) not in (("ttest", "replicate"), ("mcnemar", "scene")):
            raise ValueError(f"test {self.test} with unit {self.unit}: valid are {{test: ttest, unit: replicate}} "
                             "(t test over the replicate differences) and {test: mcnemar, unit: scene} (McNemar "
                             "over the pooled scene pairs)")
        return self

    @property
    def label(self) -> str:
        """``two-sided one-sample t test over the replicate differences, alpha 0.05`` (or McNemar's)."""
        if self.test == "ttest":
            return f"two-sided one-sample t test over the replicate differences, alpha {self.alpha:g}"
        return f"McNemar exact over the pooled (replicate, scene) pairs, alpha {self.alpha:g}"


class FlywheelDesign(BaseModel):
    """One flywheel experiment, as data (``assay flywheel --design FILE.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][\w.\-]*$")
    task: str
    slice: SliceSpec
    primary: PrimaryEndpoint  # declared before the run; analysis only (not in the tag)
    variants: tuple[dict[str, Any], ...] = Field(default=({},), min_length=1)  # the evaluation distribution's
    # variants ({factor: value} requests; {} is nominal): pool, probe and evaluation run over every one
    horizon: int | None = Field(default=None, ge=1)
    base_demos: int = Field(default=20, ge=1)
    extra_demos: int = Field(default=6, ge=1)  # K, per extra arm
    pool: int = Field(default=100, ge=2)  # expert episodes per replicate that base and the demo arms draw from
    probe: int = Field(default=40, ge=4)
    eval_episodes: int = Field(default=60, ge=1, alias="eval")
    replicates: int = Field(default=5, ge=1)
    first_replicate: int = Field(default=0, ge=0)  # replicates first_replicate, first_replicate + 1, ...: a pilot's
    # replicates can be kept out of the confirmatory run (their seed streams are not reused)
    ponr: bool = True  # the point-of-no-return recovery arm (its partial demos set the secondary frame budget);
    # false leaves it out. Not in the tag: it changes only which checkpoints train, and they are keyed by their data
    recovery: bool = True  # the DAgger-relabel arm; false leaves it out (not in the tag, as ponr)
    obs: Literal["state", "image+proprio"] = "state"  # what every arm's policy sees: state BC, or pixel BC
    # (assay.learning.pixel_bc) on a square front camera of camera_size px that pool, probe and evaluation record
    camera_size: int = Field(default=64, ge=16, le=256)
    inputs: Literal["state", "state+environment"] = "state"  # what a state BC reads: the recorded state, and
    # with state+environment the recorded environment_state too (LIBERO's goal positions: assay.learning.bc)
    epochs: int = Field(default=100, ge=1)
    hidden: tuple[int, ...] = (256, 256)
    bootstrap: int = Field(default=10000, ge=100)
    power_baseline: float = Field(default=0.7, gt=0, lt=1)  # the expected random-arm rate the power plan assumed
    delta: float = Field(default=0.10, gt=0, lt=1)  # the difference the plan is sized to detect
    power_sd: float | None = Field(default=None, gt=0)  # the spread (sd) of the replicate differences a pilot
    # showed: the replicate-level plan (t test over replicates, noncentral t) is sized with it
    power_discordance: float | None = Field(default=None, gt=0, lt=1)  # P(pair discordant) a pilot showed (None:
    # the pessimistic independent-outcomes value), as `assay budget --discordance`
    goal_ratio: float | None = Field(default=None, gt=1)  # the gain ratio the experiment hopes to show (e.g. 1.5):
    # the power plan says whether the design can reach it and the primary test's power there
    power_base: float | None = Field(default=None, ge=0, lt=1)  # the base arm's expected rate (the gain ratio's
    # zero): with power_baseline, the largest gain ratio the design can reach, (1 - base) / (random - base)

    @model_validator(mode="before")
    @classmethod
    def _primary_declared(cls, data: Any) -> Any:
        if isinstance(data, dict) and "primary" not in data:
            raise ValueError("declare the primary endpoint before the run: primary: {test: ttest, unit: replicate} "
                             "(t test over the replicate differences) or {test: mcnemar, unit: scene}")
        return data

    @model_validator(mode="after")
    def _inputs_of_state_bc(self) -> FlywheelDesign:
        if self.inputs != "state" and self.obs != "state":
            raise ValueError(f"inputs {self.inputs} is what a state BC reads; obs {self.obs} reads pixels")
        return self

    @model_validator(mode="after")
    def _pixel_arms_have_frames(self) -> FlywheelDesign:
        if self.obs != "state" and self.ponr:
            raise ValueError("obs image+proprio: PoNR recovery demos have no camera frames; set ponr: false")
        return self

    @model_validator(mode="after")
    def _slice_variants_declared(self) -> FlywheelDesign:
        declared = {canonical_json(v) for v in self.variants}
        if len(declared) < len(self.variants):
            raise ValueError("variants: a variant is listed twice")
        for request in self.slice.variants or ():
            if canonical_json(request) not in declared:
                raise ValueError(f"slice.variants: {canonical_json(request)} is not one of the design's variants "
                                 f"({', '.join(canonical_json(v) for v in self.variants)})")
        return self

    @model_validator(mode="after")
    def _ratio_has_a_gain(self) -> FlywheelDesign:
        if self.power_base is not None and self.power_base >= self.power_baseline:
            raise ValueError(f"power_base {self.power_base} must be below power_baseline {self.power_baseline} (the "
                             "random arm's expected rate): the gain ratio divides by random − base")
        return self

    def design_hash(self) -> str:
        """What the run commits to before any data: the data and checkpoints (:meth:`tag`) and the declared primary
        endpoint. Recorded when a run starts (``assay.learning.flywheel_run.declare``); a primary edited after
        that changes this hash, and the analysis says so."""
        return content_hash({"tag": self.tag(), "primary": self.primary.model_dump()}, length=12)

    def tag(self) -> str:
        """What fixes the data and checkpoints (not the replicate count, endpoint, bootstrap or power settings)."""
        fixed: dict[str, Any] = {"task": self.task, "slice": self.slice.hashed(), "horizon": self.horizon,
                                 "base": self.base_demos, "extra": self.extra_demos, "pool": self.pool,
                                 "probe": self.probe, "epochs": self.epochs, "hidden": list(self.hidden)}
        if self.variants != ({},):  # a nominal-only design hashes as it did before variants
            fixed["variants"] = [dict(v) for v in self.variants]
        if self.obs != "state":  # a state design hashes as it did before pixel designs
            fixed["obs"], fixed["camera_size"] = self.obs, self.camera_size
        return content_hash(fixed, length=8)


def scene_primary_refusal(design: FlywheelDesign) -> str | None:
    """Why the design's primary endpoint cannot be run as declared (None: it can). McNemar over pooled scenes
    treats every (replicate, scene) pair as an independent unit; with several replicates each trains on its own
    data, so the scenes of a replicate share its checkpoints and the test ignores the variance between them
    (push-goal-slice: pooled McNemar p = 0.00018, the replicate t test 0.28)."""
    if design.primary.test == "mcnemar" and design.replicates > 1:
        return (f"primary {{test: mcnemar, unit: scene}} is refused: the design's {design.replicates} replicates "
                "each train on their own data, so its scenes are not independent units; declare primary: "
                "{test: ttest, unit: replicate} (McNemar is still reported, as secondary)")
    return None


def load_design(path: Path) -> FlywheelDesign:
    """A design file, or one ``file:line: field: message`` error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AssayError(f"cannot read design file {path}: {exc.strerror or exc}") from None
    data, lines = load_yaml(text, str(path))
    if not isinstance(data, dict):
        raise AssayError(f"{path}:1: a flywheel design is a mapping (name, task, slice, primary, ...)")
    try:
        return FlywheelDesign.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, str(path), lines, model=FlywheelDesign) from None


def initial(record: EpisodeRecord) -> list[float]:
    """The episode's initial-condition vector (Meta-World's ``rand_vec``), or AssayError."""
    values = record.initial_conditions.get("rand_vec") if isinstance(record.initial_conditions, dict) else None
    if not values:
        raise AssayError(f"episode {record.key} recorded no initial conditions (rand_vec); the flywheel design "
                         "needs a task whose resets record them (Meta-World)")
    return [float(v) for v in values]


def _ordered_successes(pool: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    return sorted((r for r in pool if r.outcome is Outcome.SUCCESS), key=lambda r: (r.episode_index, r.key))


def select_base(pool: Sequence[EpisodeRecord], training: Where, count: int) -> list[EpisodeRecord]:
    """The first ``count`` successful pool episodes inside the training slice."""
    return [r for r in _ordered_successes(pool) if training.contains(r)][:count]


def candidates(pool: Sequence[EpisodeRecord], base: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    """The successful pool episodes after the base's last one, in every variant: the part of the pool its slice
    selection never examined, distributed as the evaluation is (up to the expert's own success there).

    The base took the first successes *inside the slice*, so the pool's earlier episodes left over are the
    ones outside it: drawing from them would favour the uncovered part (any arm would lean toward the oracle)."""
    after = max((r.episode_index for r in base), default=-1)
    return [r for r in _ordered_successes(pool) if r.episode_index > after]


def draw_demos(pool: Sequence[EpisodeRecord], base: Sequence[EpisodeRecord], count: int, seed: int,
               where: Where | None = None, outside: bool = False) -> list[EpisodeRecord]:
    """``count`` of the :func:`candidates` drawn uniformly (seeded) inside ``where`` (outside it when
    ``outside``; anywhere when ``where`` is None), fewer when fewer lie there.

    One blind rule for every arm: a seeded permutation of the candidates, of which each arm takes the first
    ``count`` in its region. With the replicate's seed the arms share the permutation, so a region that
    holds every candidate draws exactly the random arm's demos, and inside any region the draw is uniform."""
    pooled = candidates(pool, base)
    order = np.random.default_rng(seed).permutation(len(pooled))
    chosen = []
    for i in order:
        record = pooled[int(i)]
        if where is None or where.contains(record) != outside:
            chosen.append(record)
            if len(chosen) == count:
                break
    return chosen


def probe_failures(probe: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
    """The probe's failures and timeouts in episode order (the recovery arms relabel the first ones)."""
    return sorted((r for r in probe if r.outcome in (Outcome.FAILURE, Outcome.TIMEOUT)),
                  key=lambda r: (r.episode_index, r.variant_name, r.key))


def _fails(record: EpisodeRecord) -> bool:
    return record.outcome is not Outcome.SUCCESS


def mine_variants(scored: Sequence[EpisodeRecord]) -> tuple[frozenset[str] | None, tuple[str, ...], dict[str, Any]]:
    """The variants whose probe failure rate is the highest (their keys and names; None when every variant
    ties, then targeting is over all of them), and the per-variant counts."""
    counts: dict[str, list[Any]] = {}
    for record in scored:
        entry = counts.setdefault(record.variant_name, [record.variant_key, 0, 0])
        entry[1] += _fails(record)
        entry[2] += 1
    table = {name: {"failures": f, "episodes": n, "rate": f / n} for name, (_, f, n) in sorted(counts.items())}
    top = max((row["rate"] for row in table.values()), default=0.0)
    chosen = sorted(name for name, row in table.items() if row["rate"] == top)
    if top == 0 or len(chosen) == len(table):
        return None, (), table
    return frozenset(counts[name][0] for name in chosen), tuple(chosen), table


def mine(probe: Sequence[EpisodeRecord]) -> tuple[Where, dict[str, Any]]:
    """Where the probe's failures are, from the records alone: the variants with the highest failure rate,
    then within them the initial-condition region with the largest Gini gain; and the account of it."""
    scored = [r for r in probe if r.outcome is not Outcome.ERROR]
    failed = probe_failures(scored)
    keys, names, variants = mine_variants(scored)
    within = [r for r in scored if keys is None or r.variant_key in keys]
    region = failure_region(within)
    target = Where(region, keys, names)
    account: dict[str, Any] = {
        "probe_episodes": len(scored), "probe_failures": len(failed), "variants": variants,
        "chosen_variants": None if keys is None else list(names), "target": target.label,
        "region": None if region is None else region.to_dict()}
    counted = {n: f"{n} {v['failures']}/{v['episodes']}" for n, v in variants.items()}
    if keys is None:
        why = [f"every variant fails at the same rate ({', '.join(counted.values())}): targeted demos from every "
               "variant"] if len(variants) > 1 else []
    else:
        rest = ", ".join(text for n, text in counted.items() if n not in names)
        why = [f"{' and '.join(counted[n] for n in names)} failing: the highest failure rate (against {rest})"]
    if region is not None:
        inside = [r for r in within if region.contains(initial(r))]
        account["inside"] = {"episodes": len(inside), "failures": sum(_fails(r) for r in inside)}
        account["outside"] = {"episodes": len(within) - len(inside),
                              "failures": sum(_fails(r) for r in within) - account["inside"]["failures"]}
        why.append(f"{account['inside']['failures']}/{len(inside)} probe episodes fail in {region.label}, "
                   f"{account['outside']['failures']}/{len(within) - len(inside)} outside it "
                   "(the one-threshold split of the initial conditions with the largest Gini gain)")
    elif keys is None:
        why.append("the probe's outcomes do not separate by initial condition: targeted demos come from anywhere")
    else:
        why.append("within it the outcomes do not separate by initial condition")
    account["why"] = "; ".join(why)
    return target, account


def agreement(mined: Sequence[bool], uncovered: Sequence[bool]) -> dict[str, Any]:
    """Precision and recall of ``mined`` (scene inside the mined target) against ``uncovered`` (scene
    outside the training slice), over the same scenes."""
    got, truth = np.array(mined, dtype=bool), np.array(uncovered, dtype=bool)
    both = int((got & truth).sum())
    return {"scenes": len(truth), "uncovered": int(truth.sum()), "mined": int(got.sum()), "both": both,
            "precision": both / int(got.sum()) if got.any() else None,
            "recall": both / int(truth.sum()) if truth.any() else None}


def region_agreement(mined: InitRegion | None, truth: InitRegion, scenes: Sequence[Sequence[float]]) -> dict[str, Any]:
    """:func:`agreement` of a mined region (None: everywhere) against the true uncovered region, over the
    initial conditions ``scenes`` (the evaluation scenes: a fresh sample of the distribution)."""
    return agreement([True if mined is None else mined.contains(s) for s in scenes],
                     [truth.contains(s) for s in scenes])


def trim_frames(demos: Sequence[Demo], frames: int) -> list[Demo]:
    """``demos`` cut to ``frames`` (state, action) pairs in all: each demo keeps its share (largest
    remainder, at least one frame each) at evenly spaced steps, first and last included (``steps`` records
    which, so pixel training reads those steps' frames)."""
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
                        demo.observations[rows], demo.actions[rows], demo.instruction, demo.step_indices()[rows],
                        None if demo.environment is None else demo.environment[rows]))
    return out


def budget_shortfall(account: Mapping[str, Any], wanted: int) -> str | None:
    """A warning when some arm found fewer than the design's ``wanted`` extra demos (so :func:`equal_budget` cut
    its group to that count), naming each short arm with what it found and the cut of each group; None when
    every arm found enough."""
    short = {name: int(got["episodes"]) for name, got in sorted(account["available"].items())
             if int(got["episodes"]) < wanted}
    if not short:
        return None
    found = ", ".join(f"{name} {count}" for name, count in short.items())
    secondary = account.get("secondary") or {}
    cuts = [f"the primary pair ({' and '.join(PRIMARY_PAIR)}) to {account['episodes']}"]
    empty = secondary.get("empty") or []
    cut = [name for name in secondary.get("arms") or [] if name not in empty]
    if cut:
        cuts.append(f"the secondary arms ({', '.join(cut)}) to {secondary['episodes']}")
    if empty:
        cuts.append(f"left {', '.join(empty)} with no extra data")
    return (f"warning: arm(s) found fewer than the {wanted} extra demos asked ({found}); {' and '.join(cuts)} "
            "episodes (enlarge 'pool' or 'probe')")


def _equalise(arms: Mapping[str, Sequence[Demo]],
              cap: tuple[int, int] | None) -> tuple[dict[str, list[Demo]], int, int]:
    """One group cut to its fewest episodes and then its fewest frames, neither above ``cap`` (episodes, frames)."""
    episodes = min(len(d) for d in arms.values())
    if cap is not None:
        episodes = min(episodes, cap[0])
    cut = {name: list(d)[:episodes] for name, d in arms.items()}
    frames = min(sum(len(x.actions) for x in d) for d in cut.values())
    if cap is not None:
        frames = min(frames, cap[1])
    return {name: trim_frames(d, frames) for name, d in cut.items()}, episodes, frames


def equal_budget(arms: Mapping[str, Sequence[Demo]]) -> tuple[dict[str, list[Demo]], dict[str, Any]]:
    """Every arm at an equal budget, in two groups, and the account of it.

    The primary pair (targeted and random) is cut to its own fewest episodes and then fewest frames, whatever
    the other arms found; the secondary arms (every other arm) likewise among themselves, capped at the
    primary pair's budget. A secondary arm that found no data (a probe with no failure to relabel) keeps no
    extra data, is named in ``secondary.empty`` and does not cut the others. A primary arm that found none (a
    mined region holding no candidate) cuts the pair to 0 by the same rule: both arms are the base, that
    replicate's difference is 0 (towards no effect, never for targeting), and the shortfall warning says so.
    The account: ``episodes`` and ``frames`` of the primary pair, ``secondary`` (its arms, episodes, frames and
    empty arms) and what each arm had before (``available``)."""
    if not arms:
        raise AssayError("no arm to budget; a design has at least targeted and random")
    primary = {name: d for name, d in arms.items() if name in PRIMARY_PAIR}
    secondary = {name: d for name, d in arms.items() if name not in PRIMARY_PAIR}
    trimmed, episodes, frames = _equalise(primary or secondary, None)
    account: dict[str, Any] = {"episodes": episodes, "frames": frames, "secondary": None}
    if primary and secondary:
        found = {name: d for name, d in secondary.items() if d}
        rest, s_episodes, s_frames = _equalise(found, (episodes, frames)) if found else ({}, 0, 0)
        trimmed.update(rest)
        trimmed.update({name: [] for name in secondary if name not in found})
        account["secondary"] = {"arms": sorted(secondary), "episodes": s_episodes, "frames": s_frames,
                                "empty": sorted(set(secondary) - set(found))}
    account["available"] = {name: {"episodes": len(d), "frames": sum(len(x.actions) for x in d)}
                            for name, d in arms.items()}
    return {name: trimmed[name] for name in arms}, account
