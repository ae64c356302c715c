"""Before episode 1: every served simulator a campaign names is reached, fits (the handshake) and has its tasks.

A backend that runs only served (:func:`assay.served.backends.served_backends`) and is not named in ``simulators:`` is
refused here too, with the commands that serve it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from assay.errors import SpecError
from assay.served.backends import backend_of, served_backends
from assay.served.client import ServedEnv, link
from assay.sim import SimEnv
from assay.spec import TaskSpec


def make_served_env(task: TaskSpec, url: str) -> SimEnv:
    """An environment of ``task`` stepped by the served simulator at ``url``."""
    return ServedEnv(task, url)


def check_served_backends(simulators: Mapping[str, str], tasks: Sequence[TaskSpec], safety: bool = False) -> None:
    """Refuse, in one line naming the fix, ``simulators:`` naming a backend no task has, a task whose backend runs
    only served with no simulator named for it, and the safety filter on a served simulator (it reads the
    simulator's own object, which stays in the server); no connection is made."""
    backends = {task.backend for task in tasks}
    if safety and simulators:
        raise SpecError("safety: true reads the simulator's own object (the Sawyer's action scale and hand box), "
                        "which a served simulator keeps: run the campaign without simulators:, or without safety",
                        at=("safety",))
    for backend in simulators:
        backend_of(backend)
        if backend not in backends:
            raise SpecError(f"simulators: names {backend}, but no task of the campaign is a {backend} task; "
                            f"its backends: {', '.join(sorted(backends))}", at=("simulators",))
    for task in tasks:
        facts = served_backends().get(task.backend)
        if task.backend not in simulators and facts is not None and facts.only_served:
            raise SpecError(f"{task.id} runs only on a served simulator (its environment conflicts with this one): "
                            f"`assay env create {task.backend}`, `assay serve-sim {task.backend} --port 8711`, then "
                            f"`simulators: {{{task.backend}: ws://127.0.0.1:8711}}` in the campaign (or --simulator "
                            f"{task.backend}=ws://127.0.0.1:8711)", at=("tasks",))


def check_simulators(simulators: Mapping[str, str], tasks: Sequence[TaskSpec], safety: bool = False) -> None:
    """Refuse, in one line naming the fix, served simulators that cannot run ``tasks``: unreachable, busy, of
    another version or protocol, or without a task (each server is connected to and asked about each task)."""
    check_served_backends(simulators, tasks, safety)
    served_tasks = [task for task in tasks if task.backend in simulators]
    links = {(simulators[t.backend], t.backend): link(simulators[t.backend], t.backend) for t in served_tasks}
    try:
        for task in served_tasks:
            links[(simulators[task.backend], task.backend)].request(
                {"op": "check", "task": task.model_dump(mode="json"), "task_hash": task.content_hash()})
    finally:
        for served in links.values():  # the preflight's connections give their server slots back
            served.close()
