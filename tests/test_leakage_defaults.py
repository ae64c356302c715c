"""Leakage: a variant whose factors sit at their nominal values runs nominal's trajectories, so it is the seen
scene (no simulator: hand-built records and provenance)."""

from __future__ import annotations

from assay.learning.leakage import NOMINAL_KEY, Perception, at_default, contaminated, scene_of
from assay.store import EpisodeRecord, Outcome

TASK = "metaworld/reach@1"


def _record(seed: int, name: str, factors: dict[str, object]) -> EpisodeRecord:
    axes = {"control.gain": "behavioral", "action.noise": "behavioral", "light.color": "visual",
            "light.intensity": "visual"}
    variant = {"perturbations": [{"axis": axes[f], "factor": f, "value": v} for f, v in factors.items()]}
    return EpisodeRecord(key=f"{name}-{seed}", campaign="eval", task_id=TASK, task_hash="h",
                         variant_key=NOMINAL_KEY if not factors else f"key-{name}", variant_name=name,
                         variant=variant, policy_name="bc", policy_version="1", policy_spec={}, seed=seed,
                         episode_index=seed, instruction="", outcome=Outcome.SUCCESS, reason="", steps=1,
                         total_return=0.0, success_step=None, trajectory_hash="t")


def test_a_variant_at_its_nominal_values_is_the_seen_scene():
    """Trained on nominal seeds 0-3. Evaluated on seeds 0-1 under control.gain 1.0 (the default: the same
    trajectories), under gain 0.5 (a new scene), and on seed 7 under gain 1.0 (an unseen seed): only the first
    are contaminated. Before, the variant's factor made gain 1.0 a "new scene"."""
    provenance = [{"task_id": TASK, "variant_key": NOMINAL_KEY, "seed": s} for s in range(4)]
    same = [_record(s, "gain-1", {"control.gain": 1.0}) for s in (0, 1)]
    weaker = [_record(s, "gain-0.5", {"control.gain": 0.5}) for s in (0, 1)]
    unseen = [_record(7, "gain-1", {"control.gain": 1.0})]
    mixed = [_record(0, "gain-1-noise-0", {"control.gain": 1, "action.noise": 0.0}),
             _record(1, "gain-1-noise", {"control.gain": 1.0, "action.noise": 0.3})]
    found = contaminated(same + weaker + unseen + mixed, provenance)
    assert found == ["gain-1-0", "gain-1-1", "gain-1-noise-0-0"]
    assert scene_of(same[0]) == (TASK, 0, ()) == scene_of(_record(0, "nominal", {}))


def test_defaults_compare_by_value_across_types_and_per_perception():
    assert at_default("control.gain", 1) and at_default("control.gain", 1.0) and not at_default("control.gain", 0.99)
    assert at_default("light.color", [1, 1, 1]) and not at_default("light.color", [1, 1, 0.9])
    assert at_default("instruction.paraphrase", "nominal") and not at_default("instruction.paraphrase", "p1")
    assert not at_default("no.such.factor", 1.0)
    # a state policy does not see the light at all; a camera policy sees a non-default light as a new scene
    lit = _record(0, "lit", {"light.intensity": 0.5})
    provenance = [{"task_id": TASK, "variant_key": NOMINAL_KEY, "seed": 0}]
    assert contaminated([lit], provenance, Perception(visual=False, semantic=False)) == ["lit-0"]
    assert contaminated([lit], provenance, Perception()) == []
    assert contaminated([_record(0, "white", {"light.color": [1.0, 1.0, 1.0]})], provenance) == ["white-0"]
