"""Version-set equivalence: did upgrading MuJoCo (or changing the renderer) move my number?

``assay equivalence`` runs one campaign (a file, or ``--protocol NAME --policy P``) under two environments, each
an interpreter and environment variables (``python=/envs/mujoco33/bin/python MUJOCO_GL=egl``), into a store of
its own (an episode's key does not name the packages it ran with, so one store would run it once), then compares
them on paired seeds: every episode of A has the same key, task, variant and seed in B.

* **Success rates**: TOST at a stated margin (``metrics.paired.equivalence``): equivalent when the ``1 − 2α``
  paired interval of B − A lies inside ±margin; beside it the paired difference and McNemar's p.
* **What differs between the environments**: the package versions and renderers the episodes' provenance records,
  each difference named.
* **Trajectories**: per paired episode, whether the trajectory hashes agree, and over the pairs the largest
  absolute difference of the state and of the action at any step, and the earliest step they differ at.
* **Pixels** (``frames``): for episodes with videos, the largest per-pixel difference and the share of pixels
  differing by more than 10/255 between the two environments' decoded frames (videos are H.264: identical frames
  encode identically, and a difference shows at about its size).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.metrics.paired import Equivalence, equivalence
from assay.serialize import DictMixin
from assay.store import EpisodeRecord, Outcome, Store, step_matrix
from assay.store.video import read_video, video_relpath

DIFFERENT_PIXEL = 10  # /255: a pixel differs when a channel moves by more than this


@dataclass(frozen=True)
class Environment:
    """Where a campaign runs: an interpreter and the environment variables set for it."""

    label: str
    python: str
    variables: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``python=... VAR=...``."""
        return " ".join([f"python={self.python}", *(f"{k}={v}" for k, v in sorted(self.variables.items()))])


def parse_environment(label: str, text: str) -> Environment:
    """``python=PATH VAR=VALUE ...`` (python defaults to this interpreter); one-line AssayError otherwise."""
    variables = {}
    for part in shlex.split(text):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise AssayError(f"environment {label}: {part!r} is not NAME=VALUE (e.g. 'python=/venv/bin/python "
                             "MUJOCO_GL=egl')")
        variables[name] = value
    python = variables.pop("python", sys.executable)
    if not Path(python).is_file():
        raise AssayError(f"environment {label}: no interpreter at {python}")
    return Environment(label, python, variables)


def child_environment(environment: Environment) -> dict[str, str]:
    """This process's environment with the environment's variables; a renderer it names (``MUJOCO_GL``) also sets
    PyOpenGL's platform, which this process may have set for its own renderer."""
    variables = dict(environment.variables)
    gl = variables.get("MUJOCO_GL")
    inherited = {k: v for k, v in os.environ.items() if gl is None or k != "PYOPENGL_PLATFORM"}
    if gl in ("egl", "osmesa"):
        variables.setdefault("PYOPENGL_PLATFORM", gl)
    return {**inherited, **variables}


def run_in(environment: Environment, run_args: Sequence[str], store: Path, workers: int, executor: str) -> str:
    """Run ``assay run RUN_ARGS`` with the environment's interpreter and variables into ``store``; the campaign's
    name (one-line AssayError with the run's last message when it fails)."""
    command = [environment.python, "-m", "assay", "run", *run_args, "--store", str(store), "--workers", str(workers),
               "--executor", executor, "--allow-errors", "--json"]
    done = subprocess.run(command, env=child_environment(environment), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise AssayError(f"environment {environment.label} ({environment.describe()}): assay run exited "
                         f"{done.returncode}: {last}")
    try:
        return str(json.loads(done.stdout)["campaign"])
    except (ValueError, KeyError):
        raise AssayError(f"environment {environment.label}: assay run printed no campaign document") from None


@dataclass(frozen=True)
class Trajectories(DictMixin):
    """How the paired episodes' trajectories (and frames) differ between A and B."""

    pairs: int
    identical: int  # trajectory hashes equal
    max_state: float
    max_action: float
    first_divergence: int | None  # the earliest step where state or action differ (None: never)
    frames_compared: int = 0
    max_pixel: int = 0
    share_different: float = 0.0  # of the pixels compared, those more than DIFFERENT_PIXEL apart


@dataclass(frozen=True)
class EquivalenceResult:
    """A campaign under two environments: the TOST verdict, what differs between them, trajectories and pixels."""

    campaign: str
    environments: dict[str, dict[str, Any]]
    packages: list[tuple[str, str, str]]  # (package, A's version, B's) where they differ
    renderers: dict[str, list[str]]
    test: Equivalence
    trajectories: Trajectories

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON."""
        return {"campaign": self.campaign, "environments": self.environments,
                "package_differences": [list(p) for p in self.packages], "renderers": self.renderers,
                "equivalence": self.test.to_dict(), "trajectories": self.trajectories.to_dict()}


def _outcomes(records: Sequence[EpisodeRecord]) -> dict[tuple[str, str, int], bool | None]:
    return {(r.task_id, r.variant_name, r.seed): None if r.outcome is Outcome.ERROR else r.outcome is Outcome.SUCCESS
            for r in records}


def _versions(records: Sequence[EpisodeRecord]) -> tuple[dict[str, str], list[str]]:
    packages: dict[str, set[str]] = {}
    renderers = set()
    for record in records:
        for name, version in (record.provenance.get("packages") or {}).items():
            packages.setdefault(name, set()).add(str(version))
        renderer = record.provenance.get("renderer")
        if renderer:
            renderers.add(" / ".join(str(renderer.get(k, "")) for k in ("backend", "vendor", "renderer")))
    return {n: ", ".join(sorted(v)) for n, v in packages.items()}, sorted(renderers)


def _trajectory(a: Store, b: Store, first: EpisodeRecord, second: EpisodeRecord) -> tuple[float, float, int | None]:
    left, right = a.steps(first), b.steps(second)
    worst, divergence = [0.0, 0.0], None
    for i, column in enumerate(("observation.state", "action")):
        x, y = step_matrix(left, column, np.float64), step_matrix(right, column, np.float64)
        steps = min(len(x), len(y))
        if len(x) != len(y):
            divergence = steps if divergence is None else min(divergence, steps)
        if steps:
            gap = np.abs(x[:steps] - y[:steps]).reshape(steps, -1).max(axis=1)
            worst[i] = float(gap.max())
            moved = np.flatnonzero(gap > 0)
            if moved.size:
                divergence = int(moved[0]) if divergence is None else min(divergence, int(moved[0]))
    return worst[0], worst[1], divergence


def _frames(a: Store, b: Store, record: EpisodeRecord, cameras: Sequence[str]) -> tuple[int, int, int, int]:
    """(frames compared, largest pixel difference, pixels over DIFFERENT_PIXEL, pixels compared)."""
    compared = worst = over = total = 0
    for camera in cameras:
        try:
            x = read_video(a.data_root, video_relpath(record.key, camera))
            y = read_video(b.data_root, video_relpath(record.key, camera))
        except AssayError:
            continue
        n = min(len(x), len(y))
        if not n:
            continue
        gap = np.abs(x[:n].astype(np.int16) - y[:n].astype(np.int16)).max(axis=-1)
        compared, worst = compared + n, max(worst, int(gap.max()))
        over, total = over + int((gap > DIFFERENT_PIXEL).sum()), total + gap.size
    return compared, worst, over, total


def compare_stores(a: Store, b: Store, campaign: str, margin: float, alpha: float, frames: bool,
                   environments: Mapping[str, Environment]) -> EquivalenceResult:
    """The campaign in store A against store B (module doc)."""
    first = {r.key: r for r in a.catalog.episodes(campaign=campaign)}
    second = {r.key: r for r in b.catalog.episodes(campaign=campaign)}
    if not first or not second:
        raise AssayError(f"campaign {campaign!r} has no episode in {'A' if not first else 'B'}'s store")
    test = equivalence(_outcomes(list(first.values())), _outcomes(list(second.values())), margin, alpha)
    row = a.catalog.campaign(campaign)
    tasks = row.spec.get("tasks", []) if row is not None else []
    cameras = sorted({c["name"] for t in tasks for c in t["spec"].get("cameras", [])})
    pairs = sorted(set(first) & set(second))
    identical, states, actions, starts = 0, [0.0], [0.0], []
    seen = [0, 0, 0, 0]
    for key in pairs:
        if first[key].trajectory_hash == second[key].trajectory_hash:
            identical += 1
        else:
            state, action, divergence = _trajectory(a, b, first[key], second[key])
            states.append(state)
            actions.append(action)
            starts += [divergence] if divergence is not None else []
        if frames and cameras:
            found = _frames(a, b, first[key], cameras)
            seen = [seen[0] + found[0], max(seen[1], found[1]), seen[2] + found[2], seen[3] + found[3]]
    trajectories = Trajectories(len(pairs), identical, max(states), max(actions), min(starts) if starts else None,
                                seen[0], seen[1], seen[2] / seen[3] if seen[3] else 0.0)
    (pa, ra), (pb, rb) = _versions(list(first.values())), _versions(list(second.values()))
    differing = [(n, pa.get(n, "-"), pb.get(n, "-")) for n in sorted(set(pa) | set(pb)) if pa.get(n) != pb.get(n)]
    described = {label: {"environment": env.describe(), "packages": (pa if label == "A" else pb),
                         "renderers": (ra if label == "A" else rb)} for label, env in environments.items()}
    return EquivalenceResult(campaign, described, differing, {"A": ra, "B": rb}, test, trajectories)


def run_equivalence(run_args: Sequence[str], first: Environment, second: Environment, out: Path, margin: float,
                    alpha: float = 0.05, workers: int = 1, executor: str = "local",
                    frames: bool = True) -> EquivalenceResult:
    """Run the campaign under both environments into ``out/A`` and ``out/B`` and compare them (module doc)."""
    names = [run_in(env, run_args, out / env.label, workers, executor) for env in (first, second)]
    if names[0] != names[1]:
        raise AssayError(f"the two environments ran different campaigns ({names[0]}, {names[1]})")
    with Store(out / first.label) as a, Store(out / second.label) as b:
        return compare_stores(a, b, names[0], margin, alpha, frames, {"A": first, "B": second})
