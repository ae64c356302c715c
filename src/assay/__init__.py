"""Assay: closed-loop simulation evaluation for robot policies.

The public surface is what this module names; ``tests/test_public_api.py`` fails
when it drifts. Layers (imports flow one way)::

    spec → sim, policies → store → run → metrics → cli

Every name is loaded on first use (PEP 562): ``import assay`` (and so every ``import assay.x``, which runs
this module first) costs nothing beyond ``assay.errors``, so ``assay --version`` and a worker process that
only runs episodes start without the simulator, torch, SQLAlchemy or scipy they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from assay.errors import AssayError, SpecError, StoreError, UnknownPolicyError, UnknownTaskError, UnsupportedError
from assay.lazy import lazy_names

if TYPE_CHECKING:
    from assay.metrics import rate_table, results_table, success_interval
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

_LAZY = {
    "assay.metrics": ("rate_table", "results_table", "success_interval"),
    "assay.policies": ("Policy", "PolicyContext", "make_policy"),
    "assay.run": ("InlineExecutor", "LocalExecutor", "make_executor", "prepare_campaign", "run_campaign"),
    "assay.sim": ("SimEnv", "TaskRegistry", "default_registry", "make_env"),
    "assay.spec": ("CampaignSpec", "EpisodeJob", "Perturbation", "PolicySpec", "TaskSpec", "Variant",
                   "campaign_from_data", "load_campaign"),
    "assay.store": ("EpisodeRecord", "Outcome", "Store"),
}
__getattr__ = lazy_names(__name__, _LAZY, globals())  # a public name loads from its package on first use

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
