"""The policy zoo: BC checkpoints of graded skill, trained on the scripted expert's demos from the store.

``build_zoo(store, config)`` (``assay zoo build``) runs one expert campaign on every zoo task (the demos;
recorded with the zoo's camera at every control step when a member reads pixels, so its frames are the
training images and are never rendered again; with no camera at all when every member reads state), then
trains one multi-task checkpoint per member: ``pixel-bc`` (a CNN on the camera and proprioception) or
``bc`` (an MLP on the recorded state, optionally with the ``environment_state``), each on more or fewer demos
per task, for more or fewer epochs, with or without augmentation, predicting single actions or chunks.
Checkpoints and ``zoo.json`` (the manifest: each member's options, version, training CPU time and the episode
keys it was trained on) live in ``STORE/zoo/<tag>/``, where ``tag`` hashes the config; the checkpoints carry
their provenance, so ``assay leakage`` and the report's leakage check work on them.

Two presets: Meta-World's pixel zoo (:data:`MEMBERS` on :data:`ZOO_TASKS`) and the graded LIBERO zoo
(:data:`LIBERO_ZOO`: three LIBERO-Object and three LIBERO-Spatial tasks, demos on the benchmark's initial
states 0-19, state and pixel members on 2 to 20 demos per task, evaluated on initial states 20-49).
Evaluation is an ordinary campaign: ``zoo_campaign`` writes its spec (the zoo's members, or one kind of them,
and the scripted expert on the zoo's tasks, on initial states or seeds disjoint from the demos), and
``grade_zoo`` reads it back: each member's held-out success with its interval, per task and pooled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.learning.bc import INPUTS, TrainConfig, train_bc
from assay.learning.data import episode_demo
from assay.learning.pixel_bc import PixelTrainConfig, train_pixel_bc
from assay.learning.runs import DEMO_SEED, EVAL_SEED, Score, run_grid, score
from assay.spec import CameraSpec, PolicySpec, content_hash
from assay.store import EpisodeRecord, Outcome, Store, write_blob

# Tasks the expert solves reliably and whose goal or object position must be seen (it varies per seed).
ZOO_TASKS = ("metaworld/reach@1", "metaworld/button-press-topdown@1", "metaworld/drawer-open@1")
PIXELS = "image+proprio"
OBS = (*INPUTS, PIXELS)


@dataclass(frozen=True)
class Member:
    """One zoo checkpoint: what it reads (``obs``), the demos per task it sees (``demos``, else a fraction of
    them), its epochs (``epochs``, else a fraction of the zoo's), augmentation, input size and chunk."""

    name: str
    demo_fraction: float = 1.0
    epoch_fraction: float = 1.0
    augment: str = "none"
    image_size: int = 64
    obs: str = PIXELS
    demos: int | None = None
    epochs: int | None = None
    chunk: int = 1
    sampled: int = 0  # LIBERO: sampled-layout demos per task on top of ``demos`` (the zoo's ``sampled_demos``)

    def __post_init__(self) -> None:
        if self.obs not in OBS:
            raise AssayError(f"zoo member {self.name}: obs {self.obs!r} is not one of {', '.join(OBS)}")

    @property
    def pixels(self) -> bool:
        """Whether the member reads camera frames."""
        return self.obs == PIXELS

    @property
    def kind(self) -> str:
        """``pixel`` or ``state``: what grading groups it with."""
        return "pixel" if self.pixels else "state"


MEMBERS = (
    Member("full-shift", 1.0, 1.0, "shift"),
    Member("full", 1.0, 1.0),
    Member("full-48px", 1.0, 1.0, "none", 48),
    Member("half", 0.5, 0.5),
    Member("quarter-short", 0.25, 0.2),
    Member("tiny", 0.1, 0.1),
)

LIBERO_TASKS = (
    "libero/object/pick_up_the_alphabet_soup_and_place_it_in_the_basket@2",
    "libero/object/pick_up_the_bbq_sauce_and_place_it_in_the_basket@2",
    "libero/object/pick_up_the_ketchup_and_place_it_in_the_basket@2",
    "libero/spatial/pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate@2",
    "libero/spatial/pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate@2",
    "libero/spatial/pick_up_the_black_bowl_on_the_cookie_box_and_place_it_on_the_plate@2",
)
STATE = "state+environment"
LIBERO_MEMBERS = (
    Member("state-20", obs=STATE, demos=20, epochs=1000),
    Member("state-5", obs=STATE, demos=5, epochs=1000),
    Member("state-2", obs=STATE, demos=2, epochs=1000),
    Member("state-blind-20", obs="state", demos=20, epochs=1000),
    Member("pixel-20", augment="shift", demos=20, epochs=300, chunk=5),
    Member("pixel-5", augment="shift", demos=5, epochs=300, chunk=5),
)


@dataclass(frozen=True)
class ZooConfig:
    """The zoo's tasks, demos per task, longest training, camera, horizon, seeds and members."""

    tasks: tuple[str, ...] = ZOO_TASKS
    demos: int = 20  # expert episodes per task (successes are used)
    epochs: int = 30  # the longest-trained member's epochs (for members without their own)
    camera_size: int = 64
    horizon: int | None = 100  # None: each task's own
    seed: int = 0
    workers: int = 1
    members: tuple[Member, ...] = MEMBERS
    camera_name: str = "front"
    demo_seed: int = DEMO_SEED  # LIBERO: the first initial state of the demos
    eval_seed: int = EVAL_SEED  # LIBERO: the first initial state of the evaluation
    video_fps: float | None = None  # the demo videos' rate (None: the task's own; LIBERO's is 4: set 20)
    sampled_demos: int = 0  # LIBERO: expert episodes per task on sampled layouts (``libero.init: sampled``)

    def __post_init__(self) -> None:
        if not self.tasks or self.demos < 1 or self.epochs < 1 or len(self.members) < 1:
            raise AssayError("a zoo needs at least one task, one demo, one epoch and one member")
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise AssayError(f"zoo member names must be unique: {names}")
        wanting = [m.name for m in self.members if m.sampled > self.sampled_demos]
        if wanting:
            raise AssayError(f"zoo members {', '.join(wanting)} train on more sampled-layout demos than the zoo "
                             f"records ({self.sampled_demos} per task, sampled_demos)")
        if self.sampled_demos and not all(t.startswith("libero/") for t in self.tasks):
            raise AssayError("sampled_demos draws LIBERO's sampled layouts (libero.init: sampled); tasks "
                             f"{', '.join(t for t in self.tasks if not t.startswith('libero/'))} are not LIBERO's")

    @property
    def pixels(self) -> bool:
        """Whether any member reads camera frames (then the demos record the camera)."""
        return any(m.pixels for m in self.members)

    def camera(self) -> CameraSpec:
        """The camera the demos record and the pixel members read (square)."""
        return CameraSpec(name=self.camera_name, width=self.camera_size, height=self.camera_size)

    def tag(self) -> str:
        """Content hash of the config (worker count excluded; options added later left out at their defaults, so
        an older zoo keeps its tag): names the demo campaign and the folder."""
        data = asdict(self) | {"workers": None}
        for name, default in _ADDED_CONFIG.items():
            if data[name] == default:
                del data[name]
        data["members"] = [{k: v for k, v in m.items() if k not in _ADDED_MEMBER or v != _ADDED_MEMBER[k]}
                           for m in data["members"]]
        return content_hash(data, length=8)


_ADDED_CONFIG = {"camera_name": "front", "demo_seed": DEMO_SEED, "eval_seed": EVAL_SEED, "video_fps": None,
                 "sampled_demos": 0}
_ADDED_MEMBER = {f.name: f.default for f in fields(Member)
                 if f.name in ("obs", "demos", "epochs", "chunk", "sampled")}
SAMPLED = {"libero.init": "sampled"}

LIBERO_ZOO = ZooConfig(tasks=LIBERO_TASKS, demos=20, epochs=300, camera_size=64, horizon=None,
                       members=LIBERO_MEMBERS, camera_name="agentview", demo_seed=0, eval_seed=20, video_fps=20.0)
# State members only (no camera): the zoo's 20 fixed-state demos per task and 30 more on LIBERO's sampled layouts
# (examples/libero_zoo/state-50-design.md; the evaluation's fixed initial states 20-49 stay held out).
LIBERO_STATE_ZOO = ZooConfig(tasks=LIBERO_TASKS, demos=20, epochs=1000, horizon=None, camera_name="agentview",
                             demo_seed=0, eval_seed=20, sampled_demos=30,
                             members=(Member("state-20", obs=STATE, demos=20, epochs=1000),
                                      Member("state-50", obs=STATE, demos=20, sampled=30, epochs=1000)))
PRESETS = {"metaworld": ZooConfig(), "libero": LIBERO_ZOO, "libero-state": LIBERO_STATE_ZOO}


def zoo_dir(store: Store, config: ZooConfig) -> Path:
    """The zoo's default folder, ``STORE/zoo/<tag>``."""
    return store.root / "zoo" / config.tag()


def _collect(store: Store, config: ZooConfig, name: str, episodes: int, variant: dict[str, Any] | None = None,
             ) -> tuple[dict[str, list[EpisodeRecord]], int, float]:
    """The expert's demos (resumed if stored), its successes by task in episode order, and the CPU seconds this call
    spent on them, worker processes included (0 when every demo was already in the store)."""
    started = _cpu_seconds()
    _, records = run_grid(store, name, config.tasks, [PolicySpec(name="expert", builtin="expert")], episodes,
                          config.demo_seed, config.horizon, config.workers,
                          cameras=(config.camera(),) if config.pixels else (), variants=(variant or {},),
                          video_fps=config.video_fps if config.pixels else None)
    by_task: dict[str, list[EpisodeRecord]] = {}
    for record in sorted((r for r in records if r.outcome is Outcome.SUCCESS), key=lambda r: r.episode_index):
        by_task.setdefault(record.task_id, []).append(record)
    unsolved = sorted(set(config.tasks) - set(by_task))
    if unsolved:
        raise AssayError(f"the expert solved none of its {episodes} demo episodes of {', '.join(unsolved)} in "
                         f"{name}; a zoo needs successful demos of every task (choose tasks the scripted expert "
                         "solves)")
    return by_task, len(records), _cpu_seconds() - started


def _cpu_seconds() -> float:
    """This process's CPU seconds plus those of its finished child processes (the executor's workers)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _train(store: Store, config: ZooConfig, member: Member, chosen: list[EpisodeRecord], path: Path) -> Any:
    epochs = member.epochs or max(1, round(member.epoch_fraction * config.epochs))
    demos = [episode_demo(store, r) for r in chosen]
    if member.pixels:
        return train_pixel_bc(store, demos, PixelTrainConfig(
            seed=config.seed, epochs=epochs, camera=config.camera_name, image_size=member.image_size,
            augment=member.augment, chunk=member.chunk), path), epochs
    return train_bc(demos, TrainConfig(seed=config.seed, epochs=epochs, inputs=member.obs), path), epochs


def build_zoo(
    store: Store, config: ZooConfig, progress: Callable[[str], None] = lambda _: None, folder: Path | None = None
) -> dict[str, Any]:
    """Collect the demos (or reuse them: the campaign resumes), train every member, write ``zoo.json``
    (in ``folder``, default ``STORE/zoo/<tag>``)."""
    started = time.perf_counter()
    by_task, episodes, collect_cpu = _collect(store, config, f"zoo-{config.tag()}-demos", config.demos)
    solved = sum(len(v) for v in by_task.values())
    progress(f"demos: {solved} successes of {episodes} expert episodes ({collect_cpu:.0f} CPU s)")
    sampled: dict[str, list[EpisodeRecord]] = {}
    if config.sampled_demos:
        sampled, more, cpu = _collect(store, config, f"zoo-{config.tag()}-demos-sampled", config.sampled_demos,
                                      SAMPLED)
        episodes, collect_cpu = episodes + more, collect_cpu + cpu
        progress(f"sampled-layout demos: {sum(len(v) for v in sampled.values())} successes of {more} expert "
                 f"episodes ({cpu:.0f} CPU s)")
    folder = Path(folder).resolve() if folder is not None else zoo_dir(store, config)
    members = []
    for member in config.members:
        chosen = [r for task in sorted(by_task) for r in
                  by_task[task][:_per_task(member, len(by_task[task]))] + sampled.get(task, [])[:member.sampled]]
        cpu = time.process_time()
        result, epochs = _train(store, config, member, chosen, folder / f"{member.name}.pt")
        seconds = time.process_time() - cpu
        progress(f"trained {member.name} ({member.obs}): {result.demos} demos, {result.frames} frames, {epochs} "
                 f"epochs, loss {result.final_loss:.2e} ({seconds:.0f} CPU s)")
        members.append({
            "name": member.name, "kind": member.kind, "obs": member.obs,
            "policy": "pixel-bc" if member.pixels else "bc", "path": str(Path(result.path).resolve()),
            "version": result.version, "demos": result.demos, "frames": result.frames, "epochs": epochs,
            "augment": member.augment, "image_size": member.image_size, "chunk": member.chunk,
            "sampled": sum(len(v[:member.sampled]) for v in sampled.values()),
            "final_loss": result.final_loss, "train_cpu_s": round(seconds, 1), "episodes": [r.key for r in chosen],
        })
    manifest = {
        "schema_version": 2,
        "tag": config.tag(),
        "config": {k: v for k, v in asdict(config).items() if k != "members"},
        "camera": config.camera().model_dump(mode="json") if config.pixels else None,
        "demo_campaign": f"zoo-{config.tag()}-demos",
        "demo_episodes": episodes,
        "demo_successes": {task: len(records) for task, records in sorted(by_task.items())},
        **({"sampled_demo_campaign": f"zoo-{config.tag()}-demos-sampled",
            "sampled_demo_successes": {task: len(records) for task, records in sorted(sampled.items())}}
           if config.sampled_demos else {}),
        "collect_cpu_s": round(collect_cpu, 1),
        "build_s": round(time.perf_counter() - started, 1),
        "members": members,
    }
    manifest["dir"] = str(folder)
    write_blob(folder, "zoo.json", json.dumps(manifest, indent=2).encode())
    return manifest


def _per_task(member: Member, available: int) -> int:
    """How many of a task's successful demos a member trains on."""
    wanted = member.demos if member.demos is not None else max(1, round(member.demo_fraction * available))
    return min(wanted, available)


def load_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a zoo folder (or a zoo.json path); AssayError when there is none."""
    path = Path(path)
    file = path / "zoo.json" if path.is_dir() else path
    if not file.is_file():
        raise AssayError(f"no zoo manifest at {file} (build one with 'assay zoo build')")
    manifest: dict[str, Any] = json.loads(file.read_text())
    for member in manifest["members"]:  # a schema-1 (Meta-World pixel) zoo's members are all pixel-bc
        member.setdefault("kind", "pixel")
        member.setdefault("policy", "pixel-bc")
    return manifest


def _selected(manifest: dict[str, Any], members: Sequence[str] | None, kind: str | None) -> list[dict[str, Any]]:
    known = [m["name"] for m in manifest["members"]]
    unknown = sorted(set(members or ()) - set(known))
    if unknown:
        raise AssayError(f"unknown zoo member {', '.join(unknown)}; this zoo has {', '.join(known)}")
    if kind not in (None, "state", "pixel"):
        raise AssayError(f"zoo member kind {kind!r} is not one of state, pixel")
    chosen = [m for m in manifest["members"] if (not members or m["name"] in members) and kind in (None, m["kind"])]
    if not chosen:
        raise AssayError(f"no {kind} member in this zoo; it has {', '.join(known)}")
    return chosen


def zoo_campaign(
    manifest: dict[str, Any],
    name: str,
    episodes: int,
    variants: Sequence[dict[str, Any]] = ({},),
    tasks: Sequence[str] | None = None,
    members: Sequence[str] | None = None,
    kind: str | None = None,
    expert: bool = True,
) -> dict[str, Any]:
    """A campaign spec (plain data, as YAML would give) evaluating the members (default all, or one ``kind``)
    and (``expert``) the scripted expert on held-out initial states or seeds; a campaign of state members only
    renders no camera."""
    config = manifest["config"]
    chosen = _selected(manifest, members, kind)
    policies = [{"name": m["name"], "builtin": m["policy"], "params": {"path": m["path"]}} for m in chosen]
    camera = manifest.get("camera")
    spec: dict[str, Any] = {
        "name": name,
        "seed": config.get("eval_seed", EVAL_SEED),
        "episodes": episodes,
        "tasks": list(tasks or config["tasks"]),
        "policies": [*policies, *([{"name": "expert", "builtin": "expert"}] if expert else [])],
        "variants": list(variants),
        "cameras": [camera] if camera and any(m["kind"] == "pixel" for m in chosen) else [],
        "envs_per_worker": 4,
    }
    if config.get("horizon") is not None:
        spec["horizon"] = config["horizon"]
    return spec


@dataclass(frozen=True)
class Grade:
    """One member's held-out success in an evaluation campaign: pooled and per task, and its scenes in training."""

    member: str
    kind: str
    pooled: Score
    per_task: tuple[Score, ...]  # each Score's ``policy`` names the task
    leaked: int  # evaluation episodes whose scene the checkpoint was trained on
    minimum: float | None = None
    passed: bool | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        """Plain data for ``--json``."""
        return {"member": self.member, "kind": self.kind, "pooled": self.pooled.to_dict(),
                "per_task": [s.to_dict() for s in self.per_task], "leaked": self.leaked, "minimum": self.minimum,
                "passed": self.passed}


def grade_zoo(manifest: dict[str, Any], records: Sequence[EpisodeRecord],
              minimums: dict[str, float] | None = None) -> list[Grade]:
    """Each member's success over the campaign's records (error episodes out of the denominator) with its mid-p
    interval; the best member of each kind in ``minimums`` is gated on its pooled rate (a member whose
    evaluation touched its training scenes never passes)."""
    from assay.learning.leakage import leakage_report

    minimums = minimums or {}
    leaks = leakage_report(list(records))
    tasks = sorted({r.task_id for r in records})
    grades = []
    for member in manifest["members"]:
        mine = [r for r in records if r.policy_name == member["name"]]
        if not mine:
            continue
        per_task = tuple(Score(task, *_counts([r for r in mine if r.task_id == task])) for task in tasks)
        leaked = len(leaks.get(member["path"], leaks.get(str(Path(member["path"]).resolve()), [])))
        grades.append(Grade(member["name"], member["kind"], score(mine, member["name"]), per_task, leaked))
    for kind, minimum in minimums.items():
        ranked = sorted((g for g in grades if g.kind == kind), key=lambda g: -g.pooled.rate)
        if not ranked:
            raise AssayError(f"the campaign evaluated no {kind} member of this zoo; its members: "
                             f"{', '.join(m['name'] for m in manifest['members'])}")
        best = ranked[0]
        passed = best.pooled.trials > 0 and best.pooled.rate >= minimum and best.leaked == 0
        grades[grades.index(best)] = replace(best, minimum=minimum, passed=passed, notes=("best of its kind",))
    return grades


def _counts(records: Sequence[EpisodeRecord]) -> tuple[int, int, float, float]:
    s = score(records, records[0].policy_name) if records else score([], "")
    return s.successes, s.trials, s.low, s.high
