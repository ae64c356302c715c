"""Running twins: a set of twins × policies on one task is one campaign whose variants are the twins.

Episodes are paired across twins (the campaign seed fixes the initial conditions)
and keyed by the twin's values, so rerunning a twin that was already run reuses
its episodes instead of simulating them again.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from assay.errors import TwinError
from assay.metrics.results_csv import RateEntry, entries_from_records
from assay.run import Executor, InlineExecutor, prepare_campaign, run_campaign
from assay.spec import CameraSpec, CampaignSpec, PolicySpec, content_hash
from assay.store import Store, write_blob
from assay.twin.config import Twin


@dataclass(frozen=True)
class TwinSettings:
    """How twins are run: policies, episodes per (policy, twin), seed, horizon cap, cameras."""

    policies: tuple[PolicySpec, ...]
    episodes: int = 10
    seed: int = 0
    horizon: int | None = None
    cameras: tuple[CameraSpec, ...] = ()
    envs_per_worker: int | Literal["auto"] = 4


def unique_twins(twins: Sequence[Twin]) -> list[Twin]:
    """Twins in order, one per version (two names for the same values run once)."""
    seen: set[str] = set()
    out = []
    for twin in twins:
        if twin.version not in seen:
            seen.add(twin.version)
            out.append(twin)
    return out


def content_campaign(prefix: str, twins: Sequence[Twin], settings: TwinSettings) -> str:
    """``prefix-<hash>``: a campaign name derived from the twins' versions and the run settings.

    A campaign's spec is fixed once it exists, so a second calibration (other
    versions) or other settings under one name would be refused; naming the campaign
    by its content lets any number of calibrations coexist in one store, while the
    same calibration rerun resumes its own campaign.
    """
    content = {"versions": [t.version for t in unique_twins(twins)], "episodes": settings.episodes,
               "seed": settings.seed, "horizon": settings.horizon,
               "policies": [p.model_dump(mode="json") for p in settings.policies],
               "cameras": [c.model_dump(mode="json") for c in settings.cameras]}
    return f"{prefix}-{content_hash(content, 10)}"


def run_twins(name: str, twins: Sequence[Twin], settings: TwinSettings, store: Store,
              executor: Executor | None = None) -> dict[str, list[RateEntry]]:
    """Run every twin and return ``{twin version: per-policy rate entries}`` (task ids as the campaign ran them)."""
    twins = unique_twins(twins)
    tasks = {t.task for t in twins}
    if len(tasks) != 1:
        raise TwinError(f"twins of one run must share a task; got {', '.join(sorted(tasks))}")
    spec_fields: dict[str, Any] = dict(
        name=name, seed=settings.seed, episodes=settings.episodes, tasks=(twins[0].task,),
        policies=settings.policies, variants=tuple(t.values() for t in twins), cameras=settings.cameras or None,
        horizon=settings.horizon, envs_per_worker=settings.envs_per_worker,
        description="twins: " + ", ".join(f"{t.name}={t.version}" for t in twins))
    plan = prepare_campaign(CampaignSpec(**spec_fields))
    run_campaign(plan, store, executor or InlineExecutor(store.data_root))
    records = store.catalog.episodes(campaign=name)
    out: dict[str, list[RateEntry]] = {}
    for twin in twins:
        mine = [r for r in records if r.variant_key == twin.version]
        out[twin.version] = entries_from_records(mine, f"{name}:{twin.name}")
    return out


def settings_from_campaign(spec: CampaignSpec, twin_task: str) -> TwinSettings:
    """Policies, episodes, seed, horizon and cameras of a campaign file, checked against the twin's task."""
    if spec.tasks != (twin_task,):
        raise TwinError(f"campaign {spec.name!r} lists tasks {', '.join(spec.tasks)}; a twin study runs exactly "
                        f"the twin's task: tasks: [{twin_task}]")
    return TwinSettings(policies=spec.policies, episodes=spec.episodes, seed=spec.seed, horizon=spec.horizon,
                        cameras=spec.cameras or (), envs_per_worker=spec.envs_per_worker)


def write_results_csv(entries: Sequence[RateEntry], path: str | Path) -> Path:
    """Write ``task,policy,successes,trials`` (the statistics issue's format) atomically
    (:func:`assay.store.write_blob`, the one writer of every file Assay keeps)."""
    path = Path(path)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(["task", "policy", "successes", "trials"])
    writer.writerows([entry.task, entry.policy, entry.successes, entry.trials] for entry in entries)
    write_blob(path.parent, path.name, buffer.getvalue().encode("utf-8"), what="results CSV")
    return path
