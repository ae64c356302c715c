"""The base of every SimEnv wrapper (Gymnasium's ``core.Wrapper``).

A wrapper holds the environment it wraps as ``env`` and forwards what it does not
change: ``reset``, ``step`` (as ``before_step``, the wrapped environment's step, then ``after_step``: a wrapper
that changes the action or the transition overrides those two, so that environments can be stepped together,
:mod:`assay.sim.together`), ``initial_conditions``, ``skip_next_frames`` (to an
environment that renders on demand; a no-op otherwise), ``layer_trace`` (the wrapped
environment's per-layer trace, nothing when it keeps none) and ``close``.
``unwrapped`` reaches through any number of wrappers to the innermost environment
(Gymnasium's meaning) and ``simulator`` to that environment's simulator object (None
when it hands out none), so no caller walks ``.env`` attributes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from assay.annotations import public_api
from assay.sim.protocol import (
    LayerValue,
    Observation,
    SimEnv,
    SupportsFramesOnDemand,
    SupportsSimulator,
    Transition,
)
from assay.spec import Variant


@public_api
class SimEnvWrapper:
    """A :class:`SimEnv` around another: subclasses override what they change and inherit the rest."""

    def __init__(self, env: SimEnv) -> None:
        self.env = env
        self.task = env.task
        # decided once, by name (SupportsLayerTrace): a runtime Protocol check costs more than a step's trace
        hook = getattr(env, "layer_trace", None)
        self._inner_trace: Callable[[frozenset[str]], Mapping[str, LayerValue]] | None = hook if callable(hook) \
            else None

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Reset the wrapped environment."""
        return self.env.reset(seed, variant)

    def step(self, action: np.ndarray) -> Transition:
        """Step the wrapped environment: ``after_step(env.step(before_step(action)))``."""
        return self.after_step(self.env.step(self.before_step(action)))

    def before_step(self, action: np.ndarray) -> np.ndarray:
        """The action the wrapped environment is given for ``action`` (this wrapper's own: unchanged)."""
        return action

    def after_step(self, transition: Transition) -> Transition:
        """The transition this wrapper returns for the wrapped environment's ``transition`` (unchanged)."""
        return transition

    def initial_conditions(self) -> dict[str, Any]:
        """The wrapped environment's initial conditions."""
        return self.env.initial_conditions()

    def skip_next_frames(self) -> None:
        """Passed on to the wrapped environment (a no-op when it always renders)."""
        if isinstance(self.env, SupportsFramesOnDemand):
            self.env.skip_next_frames()

    def layer_trace(self, groups: frozenset[str]) -> Mapping[str, LayerValue]:
        """The wrapped environment's per-layer trace of the latest step (nothing when it keeps none)."""
        return self._inner_trace(groups) if self._inner_trace is not None else {}

    def close(self) -> None:
        """Close the wrapped environment."""
        self.env.close()

    @property
    def unwrapped(self) -> Any:
        """The innermost environment, through any number of wrappers (Gymnasium's ``unwrapped``)."""
        return self.env.unwrapped if isinstance(self.env, SimEnvWrapper) else getattr(self.env, "unwrapped", self.env)

    @property
    def simulator(self) -> Any:
        """The innermost environment's simulator object (``SupportsSimulator``); None when it hands out none."""
        return self.env.simulator if isinstance(self.env, SupportsSimulator) else None
