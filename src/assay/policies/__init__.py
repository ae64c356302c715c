"""Policies: the inference-only Policy protocol, built-in policies and the loader.

May import ``assay.spec`` only.
"""

from assay.policies.builtin import BUILTIN_POLICIES, DegradedExpertPolicy, ExpertPolicy, RandomPolicy
from assay.policies.loader import check_supports, make_policy, resolve_policy
from assay.policies.protocol import Policy, PolicyContext

__all__ = [
    "BUILTIN_POLICIES",
    "DegradedExpertPolicy",
    "ExpertPolicy",
    "Policy",
    "PolicyContext",
    "RandomPolicy",
    "check_supports",
    "make_policy",
    "resolve_policy",
]
