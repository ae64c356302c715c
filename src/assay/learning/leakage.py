"""Leakage: evaluation episodes whose scene a checkpoint saw during training.

An evaluation episode is *contaminated* for a checkpoint when its **scene** (task
id with its version, variant key, seed) appears in the provenance of the data the
checkpoint was trained on. The scene is what fixes the initial conditions and the
perturbations; the horizon (or any other task field that changes the task hash
without changing the scene) is deliberately not part of it: training on a seed
at horizon 300 and evaluating the same seed at horizon 150 is the same scene, and
its success says nothing about generalisation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from assay.errors import AssayError
from assay.store import EpisodeRecord

Scene = tuple[str, str, int]  # (task id with version, variant key, seed)


def scene_of(record: EpisodeRecord) -> Scene:
    return (record.task_id, record.variant_key, record.seed)


def provenance_keys(provenance: Iterable[Mapping[str, object]]) -> set[Scene]:
    return {(str(p["task_id"]), str(p["variant_key"]), int(p["seed"])) for p in provenance}  # type: ignore[call-overload]


def contaminated(records: Sequence[EpisodeRecord], provenance: Iterable[Mapping[str, object]]) -> list[str]:
    """Keys of the records whose scene the training data holds, in input order."""
    seen = provenance_keys(provenance)
    return [r.key for r in records if scene_of(r) in seen]


def checkpoint_provenance(path: str) -> list[dict[str, object]]:
    from assay.policies.bc import load_checkpoint_data

    return list(load_checkpoint_data(path)["provenance"])


@dataclass(frozen=True)
class Leakage:
    """One checkpoint against a set of evaluation episodes."""

    checkpoint: str
    episodes: int
    keys: tuple[str, ...]  # the contaminated ones
    by_cell: dict[str, int] = field(default_factory=dict)  # "policy | task | variant" -> contaminated episodes
    error: str | None = None  # why the checkpoint could not be checked (then nothing is claimed)

    @property
    def clean(self) -> bool:
        """No evaluation episode is a training scene."""
        return not self.keys

    def to_dict(self) -> dict[str, object]:
        """For JSON (``results``, the report, the dashboard)."""
        return {"checkpoint": self.checkpoint, "episodes": self.episodes, "contaminated": len(self.keys),
                "keys": list(self.keys), "by_cell": dict(self.by_cell), "error": self.error}

    def describe(self) -> str:
        """One line: clean, contaminated (how many), or not checked (why)."""
        if self.error is not None:
            return f"{self.checkpoint}: not checked ({self.error})"
        if self.clean:
            return f"{self.checkpoint}: clean (none of {self.episodes} episodes is a training scene)"
        return (f"{self.checkpoint}: {len(self.keys)} of {self.episodes} episodes are scenes it was trained on "
                f"(task, variant, seed); their successes say nothing about generalisation")


def leakage(records: Sequence[EpisodeRecord], path: str) -> Leakage:
    """Which of ``records`` the checkpoint at ``path`` was trained on (by scene)."""
    keys = contaminated(records, checkpoint_provenance(path))
    bad = set(keys)
    cells = Counter(f"{r.policy_name} | {r.task_id} | {r.variant_name}" for r in records if r.key in bad)
    return Leakage(path, len(records), tuple(keys), dict(sorted(cells.items())))


def bc_checkpoints(records: Sequence[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    """The records of each bc or pixel-bc policy among ``records``, by checkpoint path."""
    by_path: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        spec = record.policy_spec or {}
        params = spec.get("params")
        if spec.get("builtin") in ("bc", "pixel-bc") and isinstance(params, dict) and "path" in params:
            by_path.setdefault(str(spec["params"]["path"]), []).append(record)
    return by_path


def leakage_report(records: Sequence[EpisodeRecord]) -> dict[str, list[str]]:
    """For every bc policy among the records: the keys of its contaminated episodes (empty list if clean)."""
    return {path: contaminated(group, checkpoint_provenance(path))
            for path, group in sorted(bc_checkpoints(records).items())}


def campaign_leakage(records: Sequence[EpisodeRecord]) -> list[Leakage]:
    """Each bc checkpoint a campaign evaluated, against its own episodes (an unreadable one says why)."""
    out = []
    for path, group in sorted(bc_checkpoints(records).items()):
        try:
            out.append(leakage(group, path))
        except AssayError as exc:
            out.append(Leakage(path, len(group), (), {}, str(exc)))
    return out
