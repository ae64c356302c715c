"""The learning sanity ladder: before a learner is blamed on a benchmark, it must reproduce its own demonstrations.

``run_ladder(store, config)`` (``assay ladder``) climbs the first two rungs on ordinary, resumable campaigns:

1. **Own demonstrations**: the scripted expert's demos on ``demos`` initial states per task (LIBERO: the
   benchmark's initial states ``0..demos-1``; other backends: the demo seed stream), a BC checkpoint trained on
   its successes, then evaluated from exactly the initial states of those successes. At least ``own_min``
   (default 90%) must succeed: a learner that cannot replay what it was shown has a bug (the LIBERO BC that
   fitted its demos open loop and scored 0/8 on them, issue 49), not a data problem.
2. **Held-out initial states** of the same tasks (LIBERO: states ``demos..demos+heldout-1``; others: the
   evaluation seed stream), with a 95% interval; gated only when ``heldout_min`` is given.

Rung 3 is the graded LIBERO zoo (``assay.learning.zoo``, ``make libero-zoo``), graded by ``assay zoo grade``.
Every number is a count with its mid-p interval and says which initial states it is over.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from assay.errors import AssayError
from assay.learning.bc import INPUTS, TrainConfig, train_bc
from assay.learning.data import episode_demo
from assay.learning.runs import DEMO_SEED, EVAL_SEED, Score, bc_spec, run_grid, score
from assay.spec import PolicySpec
from assay.store import EpisodeRecord, Outcome, Store

OWN_MIN = 0.9


@dataclass(frozen=True)
class LadderConfig:
    """The tasks, demos and held-out initial states per task, and how the BC is trained."""

    tasks: tuple[str, ...]
    demos: int = 10
    heldout: int = 10
    epochs: int = 1000
    hidden: tuple[int, ...] = (256, 256)
    inputs: str = "state"
    seed: int = 0
    horizon: int | None = None
    workers: int = 1
    own_min: float = OWN_MIN
    heldout_min: float | None = None

    def __post_init__(self) -> None:
        if not self.tasks or self.demos < 1 or self.heldout < 0 or self.epochs < 1:
            raise AssayError("a ladder needs at least one task, one demo per task and one epoch (held-out >= 0)")
        if self.inputs not in INPUTS:
            raise AssayError(f"inputs {self.inputs!r} are not valid; valid: {', '.join(INPUTS)}")
        for name, value in (("own_min", self.own_min), ("heldout_min", self.heldout_min)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise AssayError(f"{name} {value} is not a rate in [0, 1]")

    def tag(self) -> str:
        """A short hash of the config: its campaigns' and checkpoint's names."""
        data = {k: v for k, v in asdict(self).items() if k not in ("workers", "own_min", "heldout_min")}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Rung:
    """One rung: per-task and pooled success counts over the named initial states, and the verdict."""

    name: str
    scope: str  # which initial states, in words
    per_task: tuple[Score, ...]  # one per task (its ``policy`` field names the task)
    pooled: Score
    minimum: float | None
    passed: bool | None  # None: not gated

    def to_dict(self) -> dict[str, object]:
        """Plain data for ``--json``."""
        return {"name": self.name, "scope": self.scope, "per_task": [s.to_dict() for s in self.per_task],
                "pooled": self.pooled.to_dict(), "minimum": self.minimum, "passed": self.passed}


@dataclass(frozen=True)
class LadderResult:
    """The demos found, the checkpoint trained, the rungs climbed, and the CPU seconds each part took."""

    config: LadderConfig
    demos: Score  # the expert's successes over its demo episodes
    checkpoint: str
    rungs: tuple[Rung, ...]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether every gated rung passed."""
        return all(r.passed is not False for r in self.rungs)

    def to_dict(self) -> dict[str, object]:
        """Plain data for ``--json``."""
        return {"config": asdict(self.config), "demos": self.demos.to_dict(), "checkpoint": self.checkpoint,
                "rungs": [r.to_dict() for r in self.rungs], "passed": self.passed, "cpu_s": self.seconds}


def _seeds(store: Store, tasks: Sequence[str], count: int, start: int) -> tuple[int, str]:
    """The campaign seed of ``count`` episodes per task starting at initial state ``start`` (LIBERO) or at the
    ``start``-th seed stream (others), and the scope in words."""
    from assay.sim import default_registry

    registry = default_registry()
    fixed = {bool(registry.get(t).initial_states) for t in tasks}
    if len(fixed) != 1:
        raise AssayError("a ladder's tasks must all have fixed initial states (LIBERO) or none (Meta-World)")
    if fixed.pop():
        limit = min(registry.get(t).initial_states for t in tasks)
        if start + count > limit:
            raise AssayError(f"demos + held-out = {start + count} initial states per task, but these tasks have "
                             f"{limit}: lower --demos or --heldout")
        return start, f"initial states {start}-{start + count - 1}"
    seed = DEMO_SEED if start == 0 else EVAL_SEED
    return seed, f"{count} episodes of seed stream {seed}"


def _rung(name: str, scope: str, records: Sequence[EpisodeRecord], policy: str, tasks: Sequence[str],
          minimum: float | None) -> Rung:
    per_task = tuple(replace(score([r for r in records if r.task_id == t], policy), policy=t) for t in tasks)
    pooled = score(records, policy)
    passed = None if minimum is None else pooled.trials > 0 and pooled.rate >= minimum
    return Rung(name, scope, per_task, pooled, minimum, passed)


def run_ladder(store: Store, config: LadderConfig, folder: Path,
               progress: Callable[[str], None] = lambda _: None) -> LadderResult:
    """Collect the demos (resumed if stored), train, and climb rungs 1 and 2 (see the module docstring)."""
    tag, tasks, seconds = config.tag(), config.tasks, {}
    demo_seed, own_scope = _seeds(store, tasks, config.demos, 0)
    _seeds(store, tasks, config.demos + config.heldout, 0)  # refuse too many initial states before running any
    started = time.process_time()
    _, demo_records = run_grid(store, f"ladder-{tag}-demos", tasks, [PolicySpec(name="expert", builtin="expert")],
                               config.demos, demo_seed, config.horizon, config.workers, cameras=())
    seconds["demos"] = time.process_time() - started
    solved = [r for r in demo_records if r.outcome is Outcome.SUCCESS]
    unsolved = sorted(set(tasks) - {r.task_id for r in solved})
    if unsolved:
        raise AssayError(f"the expert solved none of its {config.demos} demo episodes of {', '.join(unsolved)}; "
                         "nothing to train on (the ladder needs tasks the scripted expert solves)")
    progress(f"demos: {len(solved)} of {len(demo_records)} expert episodes succeeded ({own_scope})")
    started = time.process_time()
    result = train_bc([episode_demo(store, r) for r in solved],
                      TrainConfig(seed=config.seed, epochs=config.epochs, hidden=config.hidden, inputs=config.inputs),
                      folder / f"ladder-{tag}.pt")
    seconds["train"] = time.process_time() - started
    progress(f"trained {result.path}: {result.frames} frames, {config.epochs} epochs, loss {result.final_loss:.2e}")
    policy = [bc_spec("bc", Path(result.path))]
    started = time.process_time()
    _, own = run_grid(store, f"ladder-{tag}-own", tasks, policy, config.demos, demo_seed, config.horizon,
                      config.workers, cameras=())
    own_seeds = {(r.task_id, r.seed) for r in solved}
    own = [r for r in own if (r.task_id, r.seed) in own_seeds]
    rungs = [_rung("own demonstrations", f"{own_scope}, those whose expert demo succeeded", own, "bc", tasks,
                   config.own_min)]
    if config.heldout:
        held_seed, held_scope = _seeds(store, tasks, config.heldout, config.demos)
        _, held = run_grid(store, f"ladder-{tag}-heldout", tasks, policy, config.heldout, held_seed, config.horizon,
                           config.workers, cameras=())
        rungs.append(_rung("held-out initial states", held_scope, held, "bc", tasks, config.heldout_min))
    seconds["evaluate"] = time.process_time() - started
    return LadderResult(config, score(demo_records, "expert"), result.path, tuple(rungs),
                        {k: round(v, 1) for k, v in seconds.items()})
