"""The policy zoo: pixel BC checkpoints of graded quality, trained on camera demos from the store.

``build_zoo(store, config)`` (``assay zoo build``) runs one expert campaign with a
camera on every zoo task (the demos; its frames are the training images, never
rendered again), then trains one multi-task ``pixel-bc`` checkpoint per member of
:data:`MEMBERS` (or ``config.members``): more or fewer demos per task, more or fewer
epochs, augmentation on or off, another input size. Checkpoints and ``zoo.json``
(the manifest: each member's options, version, training time and the episode keys
it was trained on) live in ``STORE/zoo/<tag>/``, where ``tag`` hashes the config;
the checkpoints carry their provenance, so ``assay leakage`` and the report's
leakage check work on them. Evaluation is an ordinary campaign: ``zoo_campaign``
writes its spec (the zoo's members and the state expert on the zoo's tasks and
camera, nominal and/or visual variants, on seeds disjoint from the demos).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.learning.data import episode_demo
from assay.learning.pixel_bc import PixelTrainConfig, train_pixel_bc
from assay.learning.runs import DEMO_SEED, EVAL_SEED, run_grid
from assay.spec import CameraSpec, PolicySpec, content_hash
from assay.store import Outcome, Store, write_blob

# Tasks the expert solves reliably and whose goal or object position must be seen (it varies per seed).
ZOO_TASKS = ("metaworld/reach@1", "metaworld/button-press-topdown@1", "metaworld/drawer-open@1")


@dataclass(frozen=True)
class Member:
    """One zoo checkpoint: the fraction of the demos it sees, its epochs (fraction of the zoo's), its options."""

    name: str
    demo_fraction: float
    epoch_fraction: float
    augment: str = "none"
    image_size: int = 64


MEMBERS = (
    Member("full-shift", 1.0, 1.0, "shift"),
    Member("full", 1.0, 1.0),
    Member("full-48px", 1.0, 1.0, "none", 48),
    Member("half", 0.5, 0.5),
    Member("quarter-short", 0.25, 0.2),
    Member("tiny", 0.1, 0.1),
)


@dataclass(frozen=True)
class ZooConfig:
    """The zoo's tasks, demo budget, longest training, camera, horizon and members."""
    tasks: tuple[str, ...] = ZOO_TASKS
    demos: int = 20  # expert episodes per task (successes are used)
    epochs: int = 30  # the longest-trained member's epochs
    camera_size: int = 64
    horizon: int = 100
    seed: int = 0
    workers: int = 1
    members: tuple[Member, ...] = MEMBERS

    def __post_init__(self) -> None:
        if not self.tasks or self.demos < 1 or self.epochs < 1 or len(self.members) < 1:
            raise AssayError("a zoo needs at least one task, one demo, one epoch and one member")
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise AssayError(f"zoo member names must be unique: {names}")

    def camera(self) -> CameraSpec:
        """The camera the demos record and the members read (``front``, square)."""
        return CameraSpec(name="front", width=self.camera_size, height=self.camera_size)

    def tag(self) -> str:
        """Content hash of the config (worker count excluded): names the demo campaign and the folder."""
        return content_hash(asdict(self) | {"workers": None}, length=8)


def zoo_dir(store: Store, config: ZooConfig) -> Path:
    """The zoo's default folder, ``STORE/zoo/<tag>``."""
    return store.root / "zoo" / config.tag()


def build_zoo(
    store: Store, config: ZooConfig, progress: Callable[[str], None] = lambda _: None, folder: Path | None = None
) -> dict[str, Any]:
    """Collect camera demos (or reuse them: the campaign resumes), train every member, write ``zoo.json``
    (in ``folder``, default ``STORE/zoo/<tag>``)."""
    started = time.perf_counter()
    tag = config.tag()
    expert = [PolicySpec(name="expert", builtin="expert")]
    _, records = run_grid(
        store,
        f"zoo-{tag}-demos",
        config.tasks,
        expert,
        config.demos,
        DEMO_SEED,
        config.horizon,
        config.workers,
        cameras=(config.camera(),),
    )
    collect_s = time.perf_counter() - started
    ok = [r for r in records if r.outcome is Outcome.SUCCESS]
    by_task: dict[str, list[Any]] = {}
    for record in sorted(ok, key=lambda r: (r.task_id, r.episode_index)):
        by_task.setdefault(record.task_id, []).append(record)
    if len(by_task) < len(config.tasks):
        raise AssayError(
            f"the expert solved no demo of some zoo task (solved: {', '.join(sorted(by_task)) or 'none'}); "
            "the zoo needs demos of every task"
        )
    progress(f"demos: {len(ok)} successes of {len(records)} expert episodes ({collect_s:.0f} s)")
    folder = Path(folder).resolve() if folder is not None else zoo_dir(store, config)
    members = []
    for member in config.members:
        chosen = [
            r
            for task in sorted(by_task)
            for r in by_task[task][: max(1, round(member.demo_fraction * len(by_task[task])))]
        ]
        train = PixelTrainConfig(
            seed=config.seed,
            epochs=max(1, round(member.epoch_fraction * config.epochs)),
            image_size=member.image_size,
            augment=member.augment,
        )
        t0 = time.perf_counter()
        result = train_pixel_bc(store, [episode_demo(store, r) for r in chosen], train, folder / f"{member.name}.pt")
        seconds = time.perf_counter() - t0
        progress(
            f"trained {member.name}: {result.demos} demos, {result.frames} frames, {train.epochs} epochs, "
            f"loss {result.final_loss:.5f} ({seconds:.0f} s)"
        )
        members.append(
            {
                "name": member.name,
                "path": str(Path(result.path).resolve()),
                "version": result.version,
                "demos": result.demos,
                "frames": result.frames,
                "epochs": train.epochs,
                "augment": member.augment,
                "image_size": member.image_size,
                "final_loss": result.final_loss,
                "train_s": round(seconds, 1),
                "episodes": [r.key for r in chosen],
            }
        )
    manifest = {
        "schema_version": 1,
        "tag": tag,
        "config": {k: v for k, v in asdict(config).items() if k != "members"},
        "camera": config.camera().model_dump(mode="json"),
        "demo_campaign": f"zoo-{tag}-demos",
        "collect_s": round(collect_s, 1),
        "build_s": round(time.perf_counter() - started, 1),
        "members": members,
    }
    manifest["dir"] = str(folder)
    write_blob(folder, "zoo.json", json.dumps(manifest, indent=2).encode())
    return manifest


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a zoo folder (or a zoo.json path); AssayError when there is none."""
    path = Path(path)
    file = path / "zoo.json" if path.is_dir() else path
    if not file.is_file():
        raise AssayError(f"no zoo manifest at {file} (build one with 'assay zoo build')")
    return json.loads(file.read_text())


def zoo_campaign(
    manifest: dict[str, Any],
    name: str,
    episodes: int,
    variants: Sequence[dict[str, Any]] = ({},),
    tasks: Sequence[str] | None = None,
    members: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A campaign spec (plain data, as YAML would give) evaluating the members (default all) and the state expert."""
    config = manifest["config"]
    known = [m["name"] for m in manifest["members"]]
    unknown = sorted(set(members or ()) - set(known))
    if unknown:
        raise AssayError(f"unknown zoo member {', '.join(unknown)}; this zoo has {', '.join(known)}")
    policies = [{"name": m["name"], "builtin": "pixel-bc", "params": {"path": m["path"]}}
                for m in manifest["members"] if not members or m["name"] in members]
    return {
        "name": name,
        "seed": EVAL_SEED,
        "episodes": episodes,
        "tasks": list(tasks or config["tasks"]),
        "policies": [*policies, {"name": "expert", "builtin": "expert"}],
        "variants": list(variants),
        "cameras": [manifest["camera"]],
        "horizon": config["horizon"],
        "envs_per_worker": 4,
    }
