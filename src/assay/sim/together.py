"""Stepping a lockstep batch's environments together: one request for those a served simulator steps on one
connection.

A worker steps its batch's environments in lockstep, one action each. In process, each ``step`` is a call; on a
served simulator (``assay serve-sim``) each is a round trip, and on a small machine the round trip (two process
hand-offs, a socket each way) costs about as much as a Meta-World step. An environment that can step with others
(:class:`SupportsSteppingTogether`: its ``together_key`` names what they share, its ``step_together`` sends them
as one request) is stepped here in one call per key; wrappers apply their own part on each side of it
(``SimEnvWrapper.before_step`` / ``after_step``). Each environment's own step is unchanged: the same action
reaches it and the same transition comes back, in the order a step by step loop gives (each environment's
transitions are its own; they share no state).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

from assay.sim.protocol import SimEnv, Transition
from assay.sim.wrapper import SimEnvWrapper

Outcome = Transition | Exception  # a step's transition, or what its step raised


@runtime_checkable
class SupportsSteppingTogether(Protocol):
    """An environment that steps with others of the same ``together_key`` in one call."""

    def together_key(self) -> Hashable | None:
        """What the environments that can step together with this one share (None: step it alone now)."""
        ...

    def step_together(self, others: Sequence[SupportsSteppingTogether],
                      actions: Sequence[np.ndarray]) -> list[Outcome]:
        """Step this environment and ``others`` (all of this one's key), one action each: each one's transition
        or what its step raised, in order."""
        ...


def _split(env: SimEnv) -> tuple[list[SimEnvWrapper], SimEnv]:
    """The wrappers around ``env`` that step as ``before_step``/``after_step``, outermost first, and what they
    wrap (a wrapper that overrides ``step`` itself is stepped whole)."""
    chain: list[SimEnvWrapper] = []
    while isinstance(env, SimEnvWrapper) and type(env).step is SimEnvWrapper.step:
        chain.append(env)
        env = env.env
    return chain, env


def innermost_steps_together(env: SimEnv) -> bool:
    """Whether ``env`` (through the wrappers that split their step) can be stepped with others."""
    return isinstance(_split(env)[1], SupportsSteppingTogether)


def step_together(envs: Sequence[SimEnv], actions: Sequence[np.ndarray]) -> list[Outcome]:
    """Step each of ``envs`` with its action: each one's transition or what its step raised, in order. Those
    whose innermost environment shares a ``together_key`` step in one call; the rest one by one."""
    outcomes: list[Outcome | None] = [None] * len(envs)
    chains: list[list[SimEnvWrapper]] = []
    groups: dict[Hashable, list[tuple[int, SupportsSteppingTogether, np.ndarray]]] = {}
    for index, (env, action) in enumerate(zip(envs, actions, strict=True)):
        chain, inner = _split(env)
        chains.append(chain)
        try:
            for wrapper in chain:
                action = wrapper.before_step(action)
            # by name, not a runtime Protocol check (several µs per environment and step)
            together = cast(SupportsSteppingTogether | None, inner if hasattr(inner, "together_key") else None)
            key = together.together_key() if together is not None else None
            if together is None or key is None:
                outcomes[index] = inner.step(action)
            else:
                groups.setdefault(key, []).append((index, together, action))
        except Exception as exc:  # noqa: BLE001 - one environment's fault is its own episode's
            outcomes[index] = exc
    for members in groups.values():
        first = members[0][1]
        try:
            stepped = first.step_together([inner for _, inner, _ in members[1:]],
                                          [action for _, _, action in members])
        except Exception as exc:  # noqa: BLE001 - the shared call failed: each of its environments' step did
            stepped = [exc] * len(members)
        for (index, _, _), result in zip(members, stepped, strict=True):
            outcomes[index] = result
    return [_after(chain, outcome) for chain, outcome in zip(chains, outcomes, strict=True)]


def _after(chain: list[SimEnvWrapper], outcome: Outcome | None) -> Outcome:
    """``outcome`` through the wrappers' ``after_step``, innermost first (a fault passes through untouched)."""
    assert outcome is not None  # every environment was stepped
    try:
        for wrapper in reversed(chain):
            if isinstance(outcome, Exception):
                break
            outcome = wrapper.after_step(outcome)
    except Exception as exc:  # noqa: BLE001 - one environment's fault is its own episode's
        outcome = exc
    return outcome


__all__ = ["Outcome", "SupportsSteppingTogether", "innermost_steps_together", "step_together"]
