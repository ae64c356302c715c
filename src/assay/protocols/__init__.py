"""Protocols: campaigns built from published protocol manifests, knob-by-knob differences between two
protocols, and the equivalence of two environments on paired seeds.

May import ``assay.spec``, ``assay.sim``, ``assay.policies``, ``assay.store``, ``assay.run`` and
``assay.metrics``. The manifests themselves are data (``assay.spec.protocol``); the reportable stamp is a
statistic of a stored campaign (``assay.metrics.stamp``).
"""

from assay.protocols.build import build_campaign, campaign_spec, knob_value, protocol_tasks, with_knob

__all__ = ["build_campaign", "campaign_spec", "knob_value", "protocol_tasks", "with_knob"]
