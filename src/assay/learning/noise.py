"""Retraining noise: how much a training recipe's success moves when only its training seed changes.

A checkpoint is one draw of its recipe. Comparing two recipes by one checkpoint each treats the retraining seed
as if it were fixed, and a difference that is only the seed then "ships" (the field's measured false-ship rate
for such comparisons is about 16% of null pairs). Here a **recipe** (:class:`Recipe`: the scripted expert's
demos, how the BC is trained, where it is evaluated) is trained with R seeds on the *same* demos, and every
checkpoint is evaluated on the *same* evaluation seeds (paired episodes), so two sources separate:

* **harness (seed) variance**: a checkpoint's success over M evaluation episodes is binomial; its variance is
  p (1 − p) / M, estimated per checkpoint without bias by p̂ (1 − p̂) / (M − 1) and averaged;
* **retrain variance**: what the checkpoints' success rates vary by beyond that, the method-of-moments estimate
  var(p_r) − mean(p_r (1 − p_r) / M), floored at 0.

Renderer variance is 0 by construction for these state-input recipes (they read no frame); a pixel recipe would
add it, and none is measured here.

:func:`compare_recipes` decides between two recipes with the retraining noise counted: the unit that varies is
the checkpoint, so the test is Welch's t test over the R checkpoint success rates of each recipe (two-sided;
Fisher's exact test on the pooled episodes where neither recipe's checkpoints vary at all).
Beside it, the checkpoint-only comparison of the first checkpoint of each (exact McNemar over the paired
evaluation episodes) is reported as the comparison that ignores retraining; ``benchmarks/recipe_noise.py``
measures how often each one ships a difference between two identical recipes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.learning.bc import INPUTS, TrainConfig, train_bc
from assay.learning.data import episode_demo
from assay.learning.runs import bc_spec, run_grid
from assay.spec import PolicySpec
from assay.store import EpisodeRecord, Outcome, Store


@dataclass(frozen=True)
class Recipe:
    """A training recipe: the expert's ``demos`` per task from ``demo_seed``, a BC trained ``epochs`` on them with
    ``hidden`` widths and ``inputs``, evaluated on ``eval_episodes`` per task from ``eval_seed``."""

    name: str
    tasks: tuple[str, ...]
    demos: int = 10
    demo_seed: int = 0
    epochs: int = 200
    hidden: tuple[int, ...] = (256, 256)
    inputs: str = "state"
    eval_episodes: int = 20
    eval_seed: int = 10_000
    horizon: int | None = None

    def __post_init__(self) -> None:
        if not self.tasks or self.demos < 1 or self.epochs < 1 or self.eval_episodes < 1:
            raise AssayError(f"recipe {self.name!r} needs at least one task, one demo, one epoch and one evaluation "
                             "episode")
        if self.inputs not in INPUTS:
            raise AssayError(f"recipe {self.name!r}: inputs {self.inputs!r} are not valid; valid: {', '.join(INPUTS)}")

    def tag(self) -> str:
        """A short hash of what decides the recipe's checkpoints and their evaluation (its name aside)."""
        data = {k: v for k, v in asdict(self).items() if k != "name"}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]


def load_recipe(path: str | Path) -> Recipe:
    """A recipe from YAML (its keys are :class:`Recipe`'s fields); a one-line error for anything else."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise AssayError(f"recipe {path}: {exc}") from None
    if not isinstance(data, dict):
        raise AssayError(f"recipe {path}: expected a mapping of {', '.join(f.name for f in fields(Recipe))}")
    known = {f.name for f in fields(Recipe)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise AssayError(f"recipe {path}: unknown key {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
    data.setdefault("name", Path(path).stem)
    for key in ("tasks", "hidden"):
        if key in data:
            data[key] = tuple(data[key]) if isinstance(data[key], list) else (data[key],)
    try:
        return Recipe(**data)
    except TypeError as exc:
        raise AssayError(f"recipe {path}: {exc}") from None


@dataclass(frozen=True)
class Checkpoint:
    """One training of a recipe: its seed, path, and success over the paired evaluation episodes."""

    seed: int
    path: str
    successes: int
    trials: int

    @property
    def rate(self) -> float:
        """Its success rate over the evaluation episodes (error episodes left out)."""
        return self.successes / self.trials if self.trials else 0.0


@dataclass(frozen=True)
class Noise:
    """A recipe's checkpoints and the split of their success variance into harness and retrain parts."""

    recipe: Recipe
    checkpoints: tuple[Checkpoint, ...]

    @property
    def mean(self) -> float:
        """The mean success rate over the checkpoints."""
        return sum(c.rate for c in self.checkpoints) / len(self.checkpoints)

    @property
    def total_variance(self) -> float | None:
        """The sample variance of the checkpoints' success rates (None with one checkpoint)."""
        n = len(self.checkpoints)
        return None if n < 2 else sum((c.rate - self.mean) ** 2 for c in self.checkpoints) / (n - 1)

    @property
    def harness_variance(self) -> float:
        """The binomial variance of one checkpoint's rate over its M evaluation episodes, p (1 − p) / M, estimated
        without bias by p̂ (1 − p̂) / (M − 1) and averaged over the checkpoints."""
        return sum(c.rate * (1 - c.rate) / (c.trials - 1) for c in self.checkpoints if c.trials > 1) / \
            len(self.checkpoints)

    @property
    def retrain_variance(self) -> float | None:
        """What the checkpoints vary by beyond the harness: total − harness, floored at 0 (None with one)."""
        total = self.total_variance
        return None if total is None else max(0.0, total - self.harness_variance)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {"recipe": asdict(self.recipe), "checkpoints": [{**asdict(c), "rate": c.rate} for c in self.checkpoints],
                "mean": self.mean, "total_variance": self.total_variance, "harness_variance": self.harness_variance,
                "retrain_variance": self.retrain_variance, "renderer_variance": 0.0,
                "renderer_note": "state inputs: no frame is read, so the renderer cannot vary the result"}


def _demos(store: Store, recipe: Recipe, workers: int) -> list[EpisodeRecord]:
    _, records = run_grid(store, f"recipe-{recipe.tag()}-demos", recipe.tasks,
                          [PolicySpec(name="expert", builtin="expert")], recipe.demos, recipe.demo_seed,
                          recipe.horizon, workers, cameras=())
    solved = [r for r in records if r.outcome is Outcome.SUCCESS]
    unsolved = sorted(set(recipe.tasks) - {r.task_id for r in solved})
    if unsolved:
        raise AssayError(f"recipe {recipe.name!r}: the expert solved none of its demo episodes of "
                         f"{', '.join(unsolved)}; nothing to train on")
    return solved


def train_checkpoints(store: Store, recipe: Recipe, seeds: Sequence[int], folder: Path, workers: int = 1,
                      progress: Callable[[str], None] = lambda _: None) -> list[tuple[int, Path]]:
    """Train the recipe once per training seed on the same demos (a checkpoint already written is kept)."""
    demos = [episode_demo(store, r) for r in _demos(store, recipe, workers)]
    trained = []
    for seed in seeds:
        path = Path(folder) / f"recipe-{recipe.tag()}-seed{seed}.pt"
        if not path.exists():
            train_bc(demos, TrainConfig(seed=seed, epochs=recipe.epochs, hidden=recipe.hidden, inputs=recipe.inputs),
                     path)
            progress(f"trained {recipe.name} seed {seed}: {path.name}")
        trained.append((seed, path))
    return trained


def evaluate(store: Store, recipes: Sequence[Recipe], trained: Sequence[Sequence[tuple[int, Path]]],
             workers: int = 1) -> tuple[list[Noise], dict[str, dict[tuple[str, str, int], bool | None]]]:
    """Every checkpoint of every recipe on the same evaluation episodes (one campaign: paired across them); the
    recipes' noise, and each checkpoint's outcome by (task, variant, seed) (None: an error episode) by its name."""
    first = recipes[0]
    for other in recipes[1:]:
        if (other.tasks, other.eval_episodes, other.eval_seed, other.horizon) != \
                (first.tasks, first.eval_episodes, first.eval_seed, first.horizon):
            raise AssayError(f"recipes {first.name!r} and {other.name!r} are evaluated differently (tasks, "
                             "eval_episodes, eval_seed or horizon): they cannot be compared on paired episodes")
    names = [[f"{r.name}-s{seed}" for seed, _ in pairs] for r, pairs in zip(recipes, trained, strict=True)]
    if len({n for row in names for n in row}) != sum(len(row) for row in names):
        raise AssayError("two recipes of one name with one training seed: name them apart")
    by_path: dict[str, str] = {}  # one checkpoint evaluated once, whichever recipes name it (the same recipe twice)
    for row, pairs in zip(names, trained, strict=True):
        for name, (_, path) in zip(row, pairs, strict=True):
            by_path.setdefault(str(Path(path).resolve()), name)
    policies = [bc_spec(name, Path(path)) for path, name in by_path.items()]
    key = hashlib.sha256(json.dumps([[p.name, p.params["path"]] for p in policies]).encode()).hexdigest()[:10]
    _, records = run_grid(store, f"recipe-eval-{key}", first.tasks, policies, first.eval_episodes, first.eval_seed,
                          first.horizon, workers, cameras=())
    evaluated: dict[str, dict[tuple[str, str, int], bool | None]] = {}
    for r in records:
        evaluated.setdefault(r.policy_name, {})[(r.task_id, r.variant_name, r.seed)] = \
            None if r.outcome is Outcome.ERROR else r.outcome is Outcome.SUCCESS
    outcomes = {name: evaluated.get(by_path[str(Path(path).resolve())], {})
                for row, pairs in zip(names, trained, strict=True) for name, (_, path) in zip(row, pairs, strict=True)}
    out = []
    for recipe, row, pairs in zip(recipes, names, trained, strict=True):
        checkpoints = []
        for name, (seed, path) in zip(row, pairs, strict=True):
            scored = [v for v in outcomes.get(name, {}).values() if v is not None]
            checkpoints.append(Checkpoint(seed, str(path), sum(scored), len(scored)))
        out.append(Noise(recipe, tuple(checkpoints)))
    return out, {name: outcomes.get(name, {}) for row in names for name in row}


def noise(store: Store, recipe: Recipe, seeds: Sequence[int], folder: Path, workers: int = 1,
          progress: Callable[[str], None] = lambda _: None) -> Noise:
    """Train the recipe with each seed and split its checkpoints' success variance (module docstring)."""
    if len(set(seeds)) < 2:
        raise AssayError(f"retraining noise needs at least two training seeds; got {list(seeds)}")
    trained = train_checkpoints(store, recipe, seeds, folder, workers, progress)
    return evaluate(store, [recipe], [trained], workers)[0][0]


def recipe_p(a: Sequence[Checkpoint], b: Sequence[Checkpoint]) -> tuple[float, str]:
    """Two-sided p-value of equal mean success, and the test: Welch's t over the checkpoints' rates; where neither
    recipe's checkpoints vary at all (the observed retrain variance is 0, common near a ceiling), Fisher's exact
    test on the pooled episodes instead (the t statistic is undefined there, and a zero spread is no proof of an
    exact difference)."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        raise AssayError("a recipe comparison needs at least two checkpoints per recipe")
    rates_a, rates_b = [c.rate for c in a], [c.rate for c in b]
    if len(set(rates_a)) == 1 and len(set(rates_b)) == 1:
        sa, na = sum(c.successes for c in a), sum(c.trials for c in a)
        sb, nb = sum(c.successes for c in b), sum(c.trials for c in b)
        return float(stats.fisher_exact([[sa, na - sa], [sb, nb - sb]]).pvalue), \
            "Fisher exact on the pooled episodes (no spread between checkpoints on either side)"
    p = float(stats.ttest_ind(rates_a, rates_b, equal_var=False).pvalue)
    return (p if math.isfinite(p) else 1.0), "Welch t over checkpoint success rates (two-sided)"


@dataclass(frozen=True)
class RecipeComparison:
    """B − A over recipes (retraining counted) and over their first checkpoints alone (retraining ignored)."""

    a: Noise
    b: Noise
    p: float  # Welch over the checkpoints' rates (Fisher on pooled episodes where neither side varies)
    checkpoint_only_difference: float
    checkpoint_only_p: float  # exact McNemar of the first checkpoints on the paired episodes
    alpha: float
    test: str = "Welch t over checkpoint success rates (two-sided)"

    @property
    def difference(self) -> float:
        """Mean success of B's checkpoints minus A's."""
        return self.b.mean - self.a.mean

    @property
    def verdict(self) -> str:
        """``B better``, ``A better`` or ``no difference shown`` at ``alpha``, retraining counted."""
        if self.p >= self.alpha:
            return "no difference shown"
        return f"{self.b.recipe.name} better" if self.difference > 0 else f"{self.a.recipe.name} better"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {"a": self.a.to_dict(), "b": self.b.to_dict(), "difference": self.difference, "p": self.p,
                "test": self.test, "alpha": self.alpha,
                "verdict": self.verdict, "checkpoint_only": {
                    "difference": self.checkpoint_only_difference, "p": self.checkpoint_only_p,
                    "test": "exact McNemar, first checkpoint of each, paired evaluation episodes",
                    "ships": self.checkpoint_only_p < self.alpha}}


def compare_recipes(store: Store, a: Recipe, b: Recipe, seeds_a: Sequence[int], seeds_b: Sequence[int],
                    folder: Path, alpha: float = 0.05, workers: int = 1,
                    progress: Callable[[str], None] = lambda _: None) -> RecipeComparison:
    """Train both recipes with their seeds, evaluate every checkpoint on the same episodes, and compare."""
    from assay.metrics import paired_difference

    trained = [train_checkpoints(store, r, s, folder, workers, progress) for r, s in ((a, seeds_a), (b, seeds_b))]
    (noise_a, noise_b), outcomes = evaluate(store, [a, b], trained, workers)
    p, test = recipe_p(noise_a.checkpoints, noise_b.checkpoints)
    only = paired_difference(outcomes[f"{a.name}-s{seeds_a[0]}"], outcomes[f"{b.name}-s{seeds_b[0]}"])
    return RecipeComparison(noise_a, noise_b, p, only.difference, float(only.p_value), alpha, test)
