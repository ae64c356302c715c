"""Assay: closed-loop simulation evaluation for robot policies.

The public surface is what this module names; ``tests/test_public_api.py`` fails
when it drifts. Layers (imports flow one way)::

    spec → sim, policies → store → run → metrics → cli
"""

from assay.errors import AssayError, SpecError, StoreError, UnknownPolicyError, UnknownTaskError, UnsupportedError
from assay.policies import Policy, PolicyContext, make_policy
from assay.run import InlineExecutor, LocalExecutor, make_executor, prepare_campaign, run_campaign
from assay.sim import SimEnv, TaskRegistry, default_registry, make_env
from assay.spec import (
    CampaignSpec,
    EpisodeJob,
    Perturbation,
    PolicySpec,
    TaskSpec,
    Variant,
    campaign_from_data,
    load_campaign,
)
from assay.store import EpisodeRecord, Outcome, Store

__version__ = "0.1.0"

# Statistics pull in scipy.stats (~0.7 s to import): loaded on first use, so a worker process that only
# runs episodes (``import assay.run.worker``) starts without it.
_FROM_METRICS = ("rate_table", "results_table", "success_interval")


def __getattr__(name: str) -> object:
    if name in _FROM_METRICS:
        from assay import metrics

        value = getattr(metrics, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'assay' has no attribute {name!r}")


__all__ = [
    "AssayError",
    "CampaignSpec",
    "EpisodeJob",
    "EpisodeRecord",
    "InlineExecutor",
    "LocalExecutor",
    "Outcome",
    "Perturbation",
    "Policy",
    "PolicyContext",
    "PolicySpec",
    "SimEnv",
    "SpecError",
    "Store",
    "StoreError",
    "TaskRegistry",
    "TaskSpec",
    "UnknownPolicyError",
    "UnknownTaskError",
    "UnsupportedError",
    "Variant",
    "campaign_from_data",
    "default_registry",
    "load_campaign",
    "make_env",
    "make_executor",
    "make_policy",
    "prepare_campaign",
    "rate_table",
    "results_table",
    "run_campaign",
    "success_interval",
]
