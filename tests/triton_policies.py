"""A policy with a CUDA torch's heavy dependency: it imports triton when it is built (importable by workers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext


class TritonExpert:
    """The scripted expert, built the way a lerobot policy is on a CUDA torch: triton is imported first."""

    def __init__(self) -> None:
        import triton  # noqa: F401 - the import is the point: after Mesa's LLVM it crashed the worker

        self._expert = ExpertPolicy()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return self._expert.act(observations)
