"""Applying a variant to a reused environment, and the backend-independent control factors.

``perturbed(env, variant)`` is a thin per-batch wrapper: each ``reset(seed)``
hands the variant to the backend (which restores its nominal model, then applies
model factors) and seeds the wrapper's own noise generator from the episode seed;
each ``step`` applies control latency, action noise and observation noise. Its part of the
per-layer trace (``layer_trace``) is the action processing: the action the backend received,
the components clipped to the action box, the injected latency and the noise drawn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import numpy as np

from assay.sim.factors import value_of
from assay.sim.protocol import LayerValue, Observation, SimEnv, Transition
from assay.sim.wrapper import SimEnvWrapper
from assay.spec import Variant, derive_seed


class PerturbedEnv(SimEnvWrapper):
    """A :class:`SimEnv` under one variant: model factors at reset, control factors per step."""

    def __init__(self, env: SimEnv, variant: Variant) -> None:
        super().__init__(env)
        self._low, self._high = self.task.action.low, self.task.action.high  # every step clips to them
        self._configure(variant)
        self._rng = np.random.default_rng(0)
        self._queue: deque[np.ndarray] = deque()
        # the latest step's action before and after its clip, and the noise added (the trace reads them)
        self._unclipped: np.ndarray | None = None
        self._applied: np.ndarray | None = None
        self._noise: np.ndarray | float = 0.0

    def _configure(self, variant: Variant) -> None:
        self.variant = variant
        self._action_noise = float(value_of(variant, "action.noise"))
        self._observation_noise = float(value_of(variant, "observation.noise"))
        self._latency = int(value_of(variant, "control.latency"))

    def reset(self, seed: int, variant: Variant | None = None) -> Observation:
        """Start an episode under the wrapper's variant (or ``variant``, which then becomes the wrapper's)."""
        if variant is not None and variant != self.variant:
            self._configure(variant)
        observation = self.env.reset(seed, self.variant)
        self._rng = np.random.default_rng(derive_seed("perturbation", seed))
        self._queue = deque([np.zeros(self.task.action.dim)] * self._latency)
        return self._noisy(observation)

    @property
    def stochastic(self) -> bool:
        """Whether steps draw noise (so one continuation is one draw of several possible)."""
        return bool(self._action_noise or self._observation_noise)

    def reseed_noise(self, seed: int) -> None:
        """Draw the noise of the steps from here on from ``seed`` (another draw of the same variant)."""
        self._rng = np.random.default_rng(derive_seed("perturbation-redraw", seed))

    def before_step(self, action: np.ndarray) -> np.ndarray:
        """Apply latency and action noise (the step is ``after_step(env.step(before_step(action)))``)."""
        self._queue.append(np.asarray(action, dtype=np.float64))
        applied = self._queue.popleft()
        noise = self._rng.normal(0.0, self._action_noise, applied.shape) if self._action_noise else 0.0
        self._unclipped = applied + noise
        # np.clip's own arithmetic (NaN kept) without its wrapper, which cost as much again
        applied = self._applied = np.minimum(np.maximum(self._unclipped, self._low), self._high)
        self._noise = noise
        return applied

    def after_step(self, transition: Transition) -> Transition:
        """Add observation noise."""
        if not self._observation_noise:
            return transition
        return Transition(self._noisy(transition.observation), transition.reward, transition.terminated,
                          transition.truncated, transition.success, transition.info)

    def layer_trace(self, groups: frozenset[str]) -> Mapping[str, LayerValue]:
        """The wrapped environment's trace and the step's action processing (``action.*``)."""
        inner = self._inner_trace(groups) if self._inner_trace is not None else {}
        fields = inner if type(inner) is dict else dict(inner)  # fresh from the wrapped environment: extended
        if self._applied is not None and self._unclipped is not None:
            fields["action.applied"] = self._applied
            fields["action.clipped"] = float(sum(a != b for a, b in zip(self._applied.tolist(),
                                                                        self._unclipped.tolist(), strict=True)))
            if self._latency:  # a factor's fields only where the variant sets it: no column of zeros to write
                fields["action.delay_steps"] = float(self._latency)
            if self._action_noise:
                fields["action.noise"] = float(np.sqrt(np.sum(np.square(self._noise))))
        return fields

    def _noisy(self, observation: Observation) -> Observation:
        if not self._observation_noise:
            return observation
        noisy = dict(observation)
        state = observation["state"]
        noisy["state"] = state + self._rng.normal(0.0, self._observation_noise, state.shape)
        return noisy


def perturbed(env: SimEnv, variant: Variant) -> PerturbedEnv:
    """The environment under ``variant`` (a pass-through wrapper for nominal)."""
    return PerturbedEnv(env, variant)
