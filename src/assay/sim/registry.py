"""The task registry (an explicit object, no import side effects) and ``make_env``.

``default_registry()`` holds the 50 Meta-World v3 tasks, the 130 LIBERO tasks
(``libero/<suite>/<task>@2``; running them needs ``assay[libero]``) and robosuite 1.5's 5
(``robosuite/lift@1``...; served only, from their own environment: ``assay serve-sim robosuite``). Ids under
``gymnasium/`` that are not registered are described on demand from Gymnasium
(``gymnasium/Pusher-v5``), so any Gymnasium Box-action environment can be run.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

from assay.errors import SpecError, UnknownTaskError, UnsupportedError
from assay.sim.gymnasium_env import GymnasiumEnv, gymnasium_task
from assay.sim.libero_env import CAMERA_NAMES as LIBERO_CAMERAS
from assay.sim.libero_env import PRESETS as LIBERO_PRESETS
from assay.sim.libero_env import LiberoEnv, libero_tasks
from assay.sim.libero_pro import pro_instruction
from assay.sim.metaworld_env import MetaWorldEnv, metaworld_task
from assay.sim.protocol import SimEnv
from assay.sim.render import VIEWS
from assay.sim.robosuite_env import RobosuiteEnv, robosuite_tasks
from assay.spec import TaskSpec, Variant, parse_task_ref
from assay.spec.metaworld_catalog import METAWORLD_TASKS
from assay.spec.robosuite_catalog import ROBOSUITE_CAMERAS

BACKENDS: dict[str, Callable[[TaskSpec], SimEnv]] = {
    "metaworld": MetaWorldEnv,
    "gymnasium": GymnasiumEnv,
    "libero": LiberoEnv,
    "robosuite": RobosuiteEnv,  # robosuite 1.5, only in its own environment, behind `assay serve-sim robosuite`
}
CAMERA_NAMES: dict[str, tuple[str, ...]] = {  # the cameras a campaign may ask each backend for
    "metaworld": tuple(VIEWS),
    "gymnasium": (),
    "libero": LIBERO_CAMERAS,  # openpi's agentview and wrist, and LeRobot's image and image2 for them
    "robosuite": ROBOSUITE_CAMERAS,
}
# A backend's named evaluation conventions (a campaign's `preset:`): each turns a task into the task as run there.
PRESETS: dict[str, dict[str, Callable[[TaskSpec], TaskSpec]]] = {"libero": LIBERO_PRESETS}
FAST_CAMERAS = frozenset({"libero"})  # backends whose cameras offer `fast: true` (a drawing not the benchmark's own)

# How many tasks' environments a worker keeps built at once, per backend (default: every task it met). A LIBERO
# environment holds ~1.1 GB and takes ~10 s to build: a worker moving to the next task of a suite closes the last.
TASKS_KEPT: dict[str, int] = {"libero": 1}


# A backend whose variants change the task's own instruction (before any paraphrase): LIBERO-PRO's language.
INSTRUCTIONS: dict[str, Callable[[TaskSpec, Variant], str]] = {"libero": pro_instruction}


def camera_names(task: TaskSpec) -> tuple[str, ...]:
    """The camera names a campaign may ask ``task``'s backend for."""
    return CAMERA_NAMES.get(task.backend, ())


def apply_preset(task: TaskSpec, preset: str) -> TaskSpec:
    """``task`` under its backend's convention ``preset``; a one-line SpecError naming the valid ones."""
    presets = PRESETS.get(task.backend, {})
    if preset not in presets:
        valid = "; ".join(f"{backend}: {', '.join(names)}" for backend, names in sorted(PRESETS.items()))
        raise SpecError(f"preset {preset!r} does not apply to {task.id}; presets: {valid}")
    return presets[preset](task)


def offers_fast_cameras(task: TaskSpec) -> bool:
    """Whether ``task``'s backend has a faster drawing than its default (``CameraSpec.fast``)."""
    return task.backend in FAST_CAMERAS


def tasks_kept(task: TaskSpec) -> int | None:
    """How many tasks' environments of ``task``'s backend a worker keeps built at once (None: no limit)."""
    return TASKS_KEPT.get(task.backend)


def instruction_for(task: TaskSpec, variant: Variant) -> str:
    """The instruction an episode of ``task`` runs under ``variant``, before paraphrasing."""
    rule = INSTRUCTIONS.get(task.backend)
    return rule(task, variant) if rule is not None else task.instruction


class TaskRegistry:
    """Versioned tasks by name; registering the same ``name@version`` twice raises."""

    def __init__(self, tasks: Iterable[TaskSpec] = ()) -> None:
        self._tasks: dict[str, dict[int, TaskSpec]] = {}
        for task in tasks:
            self.register(task)

    def register(self, task: TaskSpec) -> TaskSpec:
        """Register ``task``; an unknown backend or an id already registered is a SpecError."""
        if task.backend not in BACKENDS:
            raise SpecError(f"{task.id}: unknown backend {task.backend!r}; valid: {', '.join(sorted(BACKENDS))}")
        versions = self._tasks.setdefault(task.name, {})
        if task.version in versions:
            raise SpecError(f"task {task.id} is already registered")
        versions[task.version] = task
        return task

    def get(self, ref: str) -> TaskSpec:
        """Resolve ``name@version`` (or ``name`` for the latest version)."""
        name, version = parse_task_ref(ref)
        if name not in self._tasks and name.startswith("gymnasium/"):
            self.register(gymnasium_task(name.removeprefix("gymnasium/")))
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
    """A fresh registry with every Meta-World v3 task, every LIBERO task (version 2) and robosuite 1.5's tasks
    (served only)."""
    return TaskRegistry([*(metaworld_task(name) for name in METAWORLD_TASKS), *libero_tasks(), *robosuite_tasks()])


def make_env(task: TaskSpec) -> SimEnv:
    """Build an environment for ``task`` (variants are applied per episode, see ``perturbed``)."""
    try:
        factory = BACKENDS[task.backend]
    except KeyError:
        raise UnsupportedError(f"{task.id}: unknown backend {task.backend!r}") from None
    return factory(task)
