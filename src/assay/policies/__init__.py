"""Policies: the inference-only Policy protocol, built-in policies and the loader.

May import ``assay.spec`` only.
"""

from assay.errors import ContractError, ContractWarning
from assay.policies.builtin import DegradedExpertPolicy, ExpertPolicy, RandomPolicy
from assay.policies.contract import PolicyContract, check_contract
from assay.policies.loader import (
    add_import_root,
    check_policy_contract,
    check_supports,
    import_roots,
    make_policy,
    policy_contract,
    resolve_policy,
)
from assay.policies.mlp import MLPPolicy
from assay.policies.protocol import (
    Policy,
    PolicyClass,
    PolicyContext,
    SupportsContract,
    SupportsEpisodeInfo,
    SupportsFrameNeeds,
    SupportsMetadata,
    SupportsParams,
    SupportsResolveVersion,
    SupportsRowAnswers,
    SupportsStateless,
    SupportsStepTrace,
    SupportsTaskCheck,
    SupportsVersion,
    is_stateless,
    reads_frames,
)
from assay.policies.registry import BUILTIN_POLICIES

__all__ = [
    "BUILTIN_POLICIES",
    "ContractError",
    "ContractWarning",
    "DegradedExpertPolicy",
    "ExpertPolicy",
    "MLPPolicy",
    "Policy",
    "PolicyClass",
    "PolicyContext",
    "PolicyContract",
    "RandomPolicy",
    "SupportsContract",
    "SupportsEpisodeInfo",
    "SupportsFrameNeeds",
    "SupportsMetadata",
    "SupportsParams",
    "SupportsResolveVersion",
    "SupportsRowAnswers",
    "SupportsStateless",
    "SupportsStepTrace",
    "SupportsTaskCheck",
    "SupportsVersion",
    "add_import_root",
    "check_contract",
    "check_policy_contract",
    "check_supports",
    "import_roots",
    "make_policy",
    "policy_contract",
    "is_stateless",
    "reads_frames",
    "resolve_policy",
]
