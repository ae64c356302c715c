"""Leakage: evaluation episodes whose scene a checkpoint saw during training.

An evaluation episode is *contaminated* for a checkpoint when its **scene** appears in the
provenance of the data the checkpoint was trained on. A scene is what the policy can tell
apart: the task (id with its version), the seed (which fixes the initial conditions) and the
variant's factors **the policy can perceive**:

* behavioral factors (dynamics, control, noise) change what happens, so every policy perceives them;
* visual factors (lighting, textures, camera, distractors) only change the rendered images, so a
  policy perceives them only when it reads a camera;
* semantic factors (instruction rewrites) only change the words, so a policy perceives them only
  when it reads the instruction.

What a policy reads is decided by its **contract** (``assay.policies.contract``, the handshake
every campaign checks): it reads a camera when its contract declares an image (``images``, or an
``image``/``depth`` observation key), and the instruction when its contract declares the
``prompt`` observation (a bc or pixel-bc checkpoint conditioned on the instruction's embedding
does; one conditioned on a task one-hot does not). A policy without a contract is taken to
perceive every factor. So a state policy evaluated on its training seeds under
``light.intensity: 0.5`` replays its training episodes step for step and is flagged; the
variant's key alone used to make that a "new scene".

A factor at its **default** (its nominal value: ``control.gain: 1.0``, ``action.noise: 0``) changes nothing,
so its episodes equal nominal's step for step; it is no part of the scene, and a variant of only such factors
is the nominal scene (it used to count as a new scene, hiding the leak).

The horizon (or any other task field that changes the task hash without changing the scene) is
deliberately not part of it: training on a seed at horizon 300 and evaluating it at horizon 150
is the same scene. A training episode's factors are looked up by its variant key (in the store
it came from; the nominal variant has none); a key that cannot be resolved is compared by key.
Only the checkpoint's own evaluation episodes are counted, never other policies' episodes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.spec import Variant
from assay.store import EpisodeRecord, Store

Scene = tuple[str, int, tuple[tuple[str, str], ...]]  # (task id with version, seed, perceived (factor, value))
KeyScene = tuple[str, str, int]  # (task id, variant key, seed): for a training variant that cannot be resolved
NOMINAL_KEY = Variant().key
ALWAYS = "behavioral"


@dataclass(frozen=True)
class Perception:
    """Which kinds of factor a policy can perceive (from its contract)."""

    visual: bool = True
    semantic: bool = True

    def sees(self, axis: str) -> bool:
        """Whether a factor on ``axis`` can change what the policy observes."""
        if axis == "visual":
            return self.visual
        if axis == "semantic" or axis.startswith("semantic"):
            return self.semantic
        return True  # behavioral, and any axis this module does not know

    def describe(self) -> str:
        """How messages name it: ``behavioral factors only`` ... ``every factor``."""
        kinds = ["behavioral"] + (["visual"] if self.visual else []) + (["semantic"] if self.semantic else [])
        return "every factor" if len(kinds) == 3 else " and ".join(kinds) + " factors only"


def perception(policy_spec: Mapping[str, Any]) -> Perception:
    """What the policy of a record's ``policy_spec`` perceives, from its declared contract."""
    from assay.policies import policy_contract
    from assay.policies.contract import PROMPT_KEY
    from assay.spec import PolicySpec, ResolvedPolicy

    try:
        contract = policy_contract(ResolvedPolicy(PolicySpec.model_validate(policy_spec), ""))
    except (AssayError, ValueError, TypeError):
        return Perception()
    if contract is None:
        return Perception()
    keys = list(contract.observations) + list(contract.images)
    visual = bool(contract.images) or any(k.split("/")[-1].startswith(("image", "depth")) for k in keys)
    return Perception(visual=visual, semantic=PROMPT_KEY in contract.observations)


def at_default(factor: str, value: Any) -> bool:
    """Whether ``value`` is the factor's default, its nominal value (``control.gain: 1.0``, ``action.noise: 0``):
    such a perturbation changes nothing, so its episodes are nominal's step for step. An unknown factor is not."""
    from assay.sim.factors import FACTORS

    known = FACTORS.get(factor)
    if known is None:
        return False
    default = known.default
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return [float(v) for v in value] == [float(d) for d in default] if len(value) == len(default) else False
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default
    if isinstance(value, (int, float)) and isinstance(default, (int, float)):
        return float(value) == float(default)
    return bool(value == default)


def _factors(perturbations: Iterable[Mapping[str, Any]], seen: Perception) -> tuple[tuple[str, str], ...]:
    """The perceived (factor, value) pairs of a variant, leaving out those at their default: a variant whose
    factors are all at their nominal values (``control.gain: 1.0``) runs nominal's trajectories, so it is the
    nominal scene (it used to count as unseen)."""
    return tuple(sorted((str(p.get("factor")), json.dumps(p.get("value"), sort_keys=True))
                        for p in perturbations if seen.sees(str(p.get("axis", ALWAYS)))
                        and not at_default(str(p.get("factor")), p.get("value"))))


def scene_of(record: EpisodeRecord, seen: Perception | None = None) -> Scene:
    """The scene of an episode as a policy with ``seen`` perception tells scenes apart (default: every factor)."""
    variant = record.variant if isinstance(record.variant, dict) else {}
    return (record.task_id, int(record.seed), _factors(variant.get("perturbations", []), seen or Perception()))


def provenance_keys(provenance: Iterable[Mapping[str, object]]) -> set[KeyScene]:
    """The (task, variant key, seed) of every training episode."""
    return {(str(p["task_id"]), str(p["variant_key"]), int(str(p["seed"]))) for p in provenance}


def training_scenes(provenance: Iterable[Mapping[str, object]], seen: Perception,
                    variants: Mapping[str, Mapping[str, Any]]) -> tuple[set[Scene], set[KeyScene]]:
    """The perceived scenes of the training data, and the (task, key, seed) of those whose variant is unknown."""
    scenes: set[Scene] = set()
    unknown: set[KeyScene] = set()
    for task, key, seed in provenance_keys(provenance):
        if key == NOMINAL_KEY:
            scenes.add((task, seed, ()))
        elif key in variants:
            scenes.add((task, seed, _factors(variants[key].get("perturbations", []), seen)))
        else:
            unknown.add((task, key, seed))
    return scenes, unknown


def contaminated(records: Sequence[EpisodeRecord], provenance: Iterable[Mapping[str, object]],
                 seen: Perception | None = None, variants: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Keys of the records whose scene (as ``seen`` perceives it) the training data holds, in input order."""
    seen = seen or Perception()
    known = {r.variant_key: r.variant for r in records if isinstance(r.variant, dict)}
    scenes, unknown = training_scenes(provenance, seen, {**known, **(variants or {})})
    return [r.key for r in records
            if scene_of(r, seen) in scenes or (r.task_id, r.variant_key, int(r.seed)) in unknown]


def checkpoint_provenance(path: str) -> list[dict[str, object]]:
    """The provenance of a bc or pixel-bc checkpoint: one entry per training episode."""
    from assay.policies.bc import load_checkpoint_data

    return list(load_checkpoint_data(path)["provenance"])


@dataclass(frozen=True)
class Leakage:
    """One checkpoint against its own evaluation episodes."""

    checkpoint: str
    episodes: int
    keys: tuple[str, ...]  # the contaminated ones
    by_cell: dict[str, int] = field(default_factory=dict)  # "policy | task | variant" -> contaminated episodes
    error: str | None = None  # why the checkpoint could not be checked (then nothing is claimed)
    perceives: str = "every factor"  # Perception.describe(): what made two episodes one scene

    @property
    def clean(self) -> bool:
        """No evaluation episode is a training scene."""
        return not self.keys

    def to_dict(self) -> dict[str, object]:
        """For JSON (``results``, the report, the dashboard)."""
        return {"checkpoint": self.checkpoint, "episodes": self.episodes, "contaminated": len(self.keys),
                "keys": list(self.keys), "by_cell": dict(self.by_cell), "error": self.error,
                "perceives": self.perceives}

    def describe(self) -> str:
        """One line: clean, contaminated (how many), or not checked (why)."""
        if self.error is not None:
            return f"{self.checkpoint}: not checked ({self.error})"
        scene = f"task, seed and the factors it perceives: {self.perceives}"
        if self.clean:
            return f"{self.checkpoint}: clean (none of its {self.episodes} episodes is a training scene; {scene})"
        return (f"{self.checkpoint}: {len(self.keys)} of its {self.episodes} episodes are scenes it was trained on "
                f"({scene}); their successes say nothing about generalisation")


def variant_specs(store: Store | None, provenance: Iterable[Mapping[str, object]]) -> dict[str, dict[str, Any]]:
    """The variants of the training episodes, looked up by key in ``store`` (empty without one)."""
    if store is None:
        return {}
    keys = {str(p["variant_key"]) for p in provenance} - {NOMINAL_KEY}
    return store.catalog.variant_specs(keys) if keys else {}


def leakage(records: Sequence[EpisodeRecord], path: str, store: Store | None = None) -> Leakage:
    """Which of the checkpoint's own evaluation episodes among ``records`` it was trained on (by perceived
    scene); ``store`` resolves the training episodes' variants. AssayError when no record ran the checkpoint."""
    own = own_episodes(records, path)
    provenance = checkpoint_provenance(path)
    seen = perception(own[0].policy_spec)
    keys = contaminated(own, provenance, seen, variant_specs(store, provenance))
    bad = set(keys)
    cells = Counter(f"{r.policy_name} | {r.task_id} | {r.variant_name}" for r in own if r.key in bad)
    return Leakage(path, len(own), tuple(keys), dict(sorted(cells.items())), perceives=seen.describe())


def _checkpoint_path(record: EpisodeRecord) -> str | None:
    spec = record.policy_spec or {}
    params = spec.get("params")
    if spec.get("builtin") in ("bc", "pixel-bc") and isinstance(params, dict) and "path" in params:
        return str(params["path"])
    return None


def own_episodes(records: Sequence[EpisodeRecord], path: str) -> list[EpisodeRecord]:
    """The records whose policy is the checkpoint at ``path`` (bc or pixel-bc); AssayError naming the
    checkpoints the records ran when there is none."""
    wanted = Path(path).expanduser().resolve()
    own = [r for r in records if (p := _checkpoint_path(r)) is not None and Path(p).expanduser().resolve() == wanted]
    if not own:
        ran = sorted({p for r in records if (p := _checkpoint_path(r)) is not None})
        raise AssayError(f"no episode here ran the checkpoint {path}; the bc checkpoints evaluated: "
                         f"{', '.join(ran) or 'none'}")
    return own


def bc_checkpoints(records: Sequence[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    """The records of each bc or pixel-bc policy among ``records``, by checkpoint path."""
    by_path: dict[str, list[EpisodeRecord]] = {}
    for record in records:
        path = _checkpoint_path(record)
        if path is not None:
            by_path.setdefault(path, []).append(record)
    return by_path


def stored_leakage(store: Store, campaign: str) -> list[Leakage]:
    """:func:`campaign_leakage` of a campaign, decoding the rows of its bc and pixel-bc policies only (which the
    campaign's resolved spec names): the other policies' episodes are never read."""
    row = store.catalog.campaign(campaign)
    policies = (row.spec.get("policies") or []) if row is not None else []
    names = [str(p["name"]) for p in policies if isinstance(p, dict) and
             (p.get("spec") or {}).get("builtin") in ("bc", "pixel-bc")]
    records = [r for name in names for r in store.catalog.episodes(campaign=campaign, policy=name)]
    return campaign_leakage(records, store) if records else []


def leakage_report(records: Sequence[EpisodeRecord], store: Store | None = None) -> dict[str, list[str]]:
    """For every bc policy among the records: the keys of its contaminated episodes (empty list if clean)."""
    return {path: list(leakage(group, path, store).keys) for path, group in sorted(bc_checkpoints(records).items())}


def campaign_leakage(records: Sequence[EpisodeRecord], store: Store | None = None) -> list[Leakage]:
    """Each bc checkpoint a campaign evaluated, against its own episodes (an unreadable one says why)."""
    out = []
    for path, group in sorted(bc_checkpoints(records).items()):
        try:
            out.append(leakage(group, path, store))
        except AssayError as exc:
            out.append(Leakage(path, len(group), (), {}, str(exc)))
    return out
