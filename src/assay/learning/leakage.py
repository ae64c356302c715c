"""Leakage: evaluation episodes that a checkpoint saw during training.

An evaluation episode is *contaminated* for a checkpoint when its task version
(task hash), variant key and seed appear in the provenance of the data the
checkpoint was trained on: its success says nothing about generalisation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from assay.store import EpisodeRecord


def provenance_keys(provenance: Iterable[Mapping[str, object]]) -> set[tuple[str, str, int]]:
    return {(str(p["task_hash"]), str(p["variant_key"]), int(p["seed"])) for p in provenance}  # type: ignore[call-overload]


def contaminated(records: Sequence[EpisodeRecord], provenance: Iterable[Mapping[str, object]]) -> list[str]:
    """Keys of the records whose (task hash, variant key, seed) the training data holds, in input order."""
    seen = provenance_keys(provenance)
    return [r.key for r in records if (r.task_hash, r.variant_key, r.seed) in seen]


def checkpoint_provenance(path: str) -> list[dict[str, object]]:
    from assay.policies.bc import load_checkpoint_data

    return list(load_checkpoint_data(path)["provenance"])


def leakage_report(records: Sequence[EpisodeRecord]) -> dict[str, list[str]]:
    """For every bc or pixel-bc policy among the records: the keys of its contaminated episodes (empty if clean)."""
    by_path: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        spec = record.policy_spec or {}
        params = spec.get("params")
        if spec.get("builtin") in ("bc", "pixel-bc") and isinstance(params, dict) and "path" in params:
            by_path.setdefault(str(spec["params"]["path"]), []).append(record)
    return {path: contaminated(group, checkpoint_provenance(path)) for path, group in sorted(by_path.items())}
