"""Policies: the inference-only Policy protocol, built-in policies and the loader.

May import ``assay.spec`` only.
"""

from assay.policies.builtin import BUILTIN_POLICIES, DegradedExpertPolicy, ExpertPolicy, RandomPolicy
from assay.policies.contract import ContractError, ContractWarning, PolicyContract, check_contract
from assay.policies.loader import check_policy_contract, check_supports, make_policy, policy_contract, resolve_policy
from assay.policies.mlp import MLPPolicy
from assay.policies.protocol import (
    Policy,
    PolicyClass,
    PolicyContext,
    SupportsContract,
    SupportsEpisodeInfo,
    SupportsMetadata,
    SupportsParams,
    SupportsResolveVersion,
    SupportsStepTrace,
    SupportsTaskCheck,
    SupportsVersion,
)

__all__ = [
    "BUILTIN_POLICIES",
    "ContractError",
    "ContractWarning",
    "MLPPolicy",
    "PolicyContract",
    "check_contract",
    "check_policy_contract",
    "policy_contract",
    "DegradedExpertPolicy",
    "ExpertPolicy",
    "Policy",
    "PolicyClass",
    "PolicyContext",
    "SupportsContract",
    "SupportsEpisodeInfo",
    "SupportsMetadata",
    "SupportsParams",
    "SupportsResolveVersion",
    "SupportsStepTrace",
    "SupportsTaskCheck",
    "SupportsVersion",
    "RandomPolicy",
    "check_supports",
    "make_policy",
    "resolve_policy",
]
