"""The Policy protocol: inference only.

``reset(context)`` starts a batch of episodes; ``act(observations)`` returns one
action per active environment. The observation batch is a mapping:

* ``"state"``: float array ``(B, state_dim)``
* ``"instruction"``: list of ``B`` strings
* ``"env_ids"``: int array ``(B,)``, the slot of each row in ``context.seeds``

Only environments still running are in the batch, so a policy that keeps state
per environment keys it by ``env_ids``. Keeping per-environment state (RNGs
seeded from ``context.seeds``) is what makes results independent of batching.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from assay.spec import TaskSpec


@dataclass(frozen=True)
class PolicyContext:
    """What a policy knows when a batch of episodes starts."""

    task: TaskSpec
    seeds: tuple[int, ...]
    instructions: tuple[str, ...]

    @property
    def batch_size(self) -> int:
        return len(self.seeds)


@runtime_checkable
class Policy(Protocol):
    def reset(self, context: PolicyContext) -> None:
        """Forget previous episodes; prepare ``context.batch_size`` environment slots."""

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Return actions ``(B, action_dim)`` for the ``B`` rows of ``observations``."""
