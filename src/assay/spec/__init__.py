"""Specs: frozen, typed records that everything else leans on; pure data, no simulator.

Owns TaskSpec, Perturbation/Variant, PolicySpec, CampaignSpec, EpisodeJob, YAML
loading with line-numbered errors, canonical JSON and content hashes.
Imports nothing of assay but ``assay.errors``.
"""

from assay.spec.arrays import DEPTH_PREFIX, ENVIRONMENT_STATE, IMAGE_PREFIX, STATE, Array, BoundedArray
from assay.spec.campaign import (
    DEFAULT_ENVS_PER_WORKER,
    CampaignSpec,
    EpisodeJob,
    Pipeline,
    ResolvedPolicy,
    VariantRequest,
    batch_jobs,
    episode_key,
    episode_seed,
    plan,
)
from assay.spec.hashing import canonical_json, content_hash, derive_seed
from assay.spec.loading import campaign_from_data, load_campaign, load_yaml
from assay.spec.policy import PolicySpec, policy_from_shorthand
from assay.spec.task import ActionSpec, CameraSpec, Level, SuccessMode, TaskSpec, parse_task_ref
from assay.spec.variant import NOMINAL, Axis, Perturbation, Variant

__all__ = [
    "DEFAULT_ENVS_PER_WORKER",
    "ActionSpec",
    "Array",
    "BoundedArray",
    "Axis",
    "CameraSpec",
    "CampaignSpec",
    "DEPTH_PREFIX",
    "ENVIRONMENT_STATE",
    "EpisodeJob",
    "IMAGE_PREFIX",
    "Level",
    "NOMINAL",
    "Perturbation",
    "Pipeline",
    "PolicySpec",
    "ResolvedPolicy",
    "STATE",
    "SuccessMode",
    "TaskSpec",
    "Variant",
    "VariantRequest",
    "batch_jobs",
    "campaign_from_data",
    "canonical_json",
    "content_hash",
    "derive_seed",
    "episode_key",
    "episode_seed",
    "load_campaign",
    "load_yaml",
    "parse_task_ref",
    "plan",
    "policy_from_shorthand",
]
