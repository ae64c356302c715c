"""The built-in policies by name: what ``builtin: NAME`` in a campaign (or ``assay policies``) resolves to.

One explicit table, above every implementation module and below the loader: an implementation
module never imports it, so adding a policy never makes a circle (a policy built on another, as
``perception-expert`` on ``expert``, imports that one's module directly).
"""

from __future__ import annotations

from assay.policies.bc import BCPolicy
from assay.policies.builtin import DegradedExpertPolicy, ExpertPolicy, RandomPolicy
from assay.policies.lerobot_policy import LeRobotPolicy
from assay.policies.libero_faults import LiberoFaultyExpert
from assay.policies.mlp import MLPPolicy
from assay.policies.perception import PerceptionExpertPolicy
from assay.policies.pixel_bc import PixelBCPolicy
from assay.policies.router import InstructionRouterPolicy

BUILTIN_POLICIES: dict[str, type] = {
    "expert": ExpertPolicy,
    "random": RandomPolicy,
    "degraded-expert": DegradedExpertPolicy,
    "perception-expert": PerceptionExpertPolicy,
    "router": InstructionRouterPolicy,
    "mlp": MLPPolicy,
    "bc": BCPolicy,
    "pixel-bc": PixelBCPolicy,
    "lerobot": LeRobotPolicy,
    "libero-faulty-expert": LiberoFaultyExpert,
}
