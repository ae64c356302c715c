"""The task registry (an explicit object, no import side effects) and ``make_env``.

``default_registry()`` holds the 50 Meta-World v3 tasks, the 130 LIBERO tasks
(``libero/<suite>/<task>@2``; running them needs ``assay[libero]``) and robosuite 1.5's 5
(``robosuite/lift@1``...; served only, from their own environment: ``assay serve-sim robosuite``). Ids under
``gymnasium/`` that are not registered are described on demand from Gymnasium
(``gymnasium/Pusher-v5``), so any Gymnasium Box-action environment can be run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from assay.errors import SpecError, UnknownTaskError, UnsupportedError
from assay.sim.backends import backend, backends
from assay.sim.protocol import SimEnv
from assay.spec import TaskSpec, Variant, parse_task_ref


def camera_names(task: TaskSpec) -> tuple[str, ...]:
    """The camera names a campaign may ask ``task``'s backend for."""
    return backend(task.backend).cameras


def apply_preset(task: TaskSpec, preset: str) -> TaskSpec:
    """``task`` under its backend's convention ``preset``; a one-line SpecError naming the valid ones."""
    presets = backend(task.backend).presets
    if preset not in presets:
        valid = "; ".join(f"{b.name}: {', '.join(b.presets)}" for b in sorted(backends().values(), key=lambda b: b.name)
                          if b.presets)
        raise SpecError(f"preset {preset!r} does not apply to {task.id}; presets: {valid}")
    return presets[preset](task)


def offers_fast_cameras(task: TaskSpec) -> bool:
    """Whether ``task``'s backend has a faster drawing than its default (``CameraSpec.fast``)."""
    return backend(task.backend).fast_cameras


def tasks_kept(task: TaskSpec) -> int | None:
    """How many tasks' environments of ``task``'s backend a worker keeps built at once (None: no limit)."""
    return backend(task.backend).tasks_kept


def instruction_for(task: TaskSpec, variant: Variant) -> str:
    """The instruction an episode of ``task`` runs under ``variant``, before paraphrasing."""
    rule = backend(task.backend).instruction
    return rule(task, variant) if rule is not None else task.instruction


class TaskRegistry:
    """Versioned tasks by name; registering the same ``name@version`` twice raises."""

    def __init__(self, tasks: Iterable[TaskSpec] = ()) -> None:
        self._tasks: dict[str, dict[int, TaskSpec]] = {}
        for task in tasks:
            self.register(task)

    def register(self, task: TaskSpec) -> TaskSpec:
        """Register ``task``; an unknown backend or an id already registered is a SpecError."""
        if task.backend not in backends():
            raise SpecError(f"{task.id}: unknown backend {task.backend!r}; valid: {', '.join(sorted(backends()))}")
        versions = self._tasks.setdefault(task.name, {})
        if task.version in versions:
            raise SpecError(f"task {task.id} is already registered")
        versions[task.version] = task
        return task

    def get(self, ref: str) -> TaskSpec:
        """Resolve ``name@version`` (or ``name`` for the latest version)."""
        name, version = parse_task_ref(ref)
        if name not in self._tasks and "/" in name:  # a backend that describes its ids on demand (gymnasium/<ID>)
            family = backends().get(name.split("/", 1)[0])
            if family is not None and family.describe is not None:
                self.register(family.describe(name.split("/", 1)[1]))
        if name not in self._tasks:
            close = difflib.get_close_matches(name, list(self._tasks), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else "; `assay tasks` lists them"
            raise UnknownTaskError(f"unknown task {ref!r}{hint}")
        versions = self._tasks[name]
        if version is None:
            return versions[max(versions)]
        if version not in versions:
            valid = ", ".join(f"{name}@{v}" for v in sorted(versions))
            raise UnknownTaskError(f"task {name} has no version {version}; valid: {valid}")
        return versions[version]

    def __contains__(self, ref: str) -> bool:
        try:
            self.get(ref)
        except SpecError:
            return False
        return True

    def __len__(self) -> int:
        return sum(len(v) for v in self._tasks.values())

    def list(
        self,
        backend: str | None = None,
        skill: str | None = None,
        family: str | None = None,
        level: str | None = None,
        contains: str | None = None,
    ) -> list[TaskSpec]:
        """Every registered task matching all the given filters (``contains``: a substring of the id), sorted by id."""
        tasks = [t for versions in self._tasks.values() for t in versions.values()]
        selected = [
            t
            for t in tasks
            if (backend is None or t.backend == backend)
            and (skill is None or t.skill == skill)
            and (family is None or t.family == family)
            and (level is None or t.level.value == level)
            and (contains is None or contains in t.id or contains in t.instruction)
        ]
        return sorted(selected, key=lambda t: (t.name, t.version))


def default_registry() -> TaskRegistry:
    """A fresh registry with every backend's tasks (:func:`assay.sim.backends.backends`): every Meta-World v3 task,
    every LIBERO task (version 2), robosuite 1.5's tasks (served only) and those of any backend plugin."""
    return TaskRegistry([task for found in backends().values() for task in found.tasks()])


def make_env(task: TaskSpec) -> SimEnv:
    """Build an environment for ``task`` (variants are applied per episode, see ``perturbed``)."""
    found = backends().get(task.backend)
    if found is None:
        raise UnsupportedError(f"{task.id}: unknown backend {task.backend!r}; valid: {', '.join(sorted(backends()))}")
    return found.make_env(task)
