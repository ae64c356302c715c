"""Policies that fail in a known way (importable by worker processes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext
from assay.policies.libero_faults import FAULTS
from assay.policies.libero_faults import LiberoFaultyExpert as _PackagedLiberoFaultyExpert


class OpenGripperExpert:
    """The expert, but the gripper never closes: it reaches the object and cannot pick it up."""

    def __init__(self) -> None:
        self._expert = ExpertPolicy()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        actions = np.array(self._expert.act(observations), dtype=np.float64)
        actions[:, 3] = -1.0
        return actions


class LiberoFaultyExpert(_PackagedLiberoFaultyExpert):
    """The packaged ``libero-faulty-expert`` (``assay.policies.libero_faults``), importable by worker processes as
    ``tests.failure_policies:LiberoFaultyExpert``, with the ``wrong`` fault's distractor given positionally."""

    FAULTS = FAULTS

    def __init__(self, fault: str = "none", distractor: Any = None) -> None:
        super().__init__(fault, distractor)
