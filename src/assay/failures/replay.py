"""Deterministic replay of a recorded episode, and hand-over to a reference policy.

The Meta-World backend sets every initial condition from the seed and
``perturbed(env, variant)`` seeds its noise from it, so resetting with the
episode's seed and stepping its recorded actions reproduces the recorded
states exactly. :meth:`Replayer.handoff` replays the first ``t`` actions, then
lets the reference policy (the expert by default) act for the rest of the
budget and says whether it succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assay.policies import ExpertPolicy, Policy, PolicyContext
from assay.sim import SimEnv, Transition, make_env, perturbed
from assay.spec import TaskSpec, Variant


@dataclass
class Rollout:
    """States the policy saw (one per action), actions, and step results; ``success`` at any step."""

    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return any(t.success for t in self.transitions)


class Replayer:
    """One environment for (task, variant), reused for every replay of it."""

    def __init__(self, task: TaskSpec, variant: Variant, reference: Policy | None = None) -> None:
        self.task = task
        self.variant = variant
        self._base = make_env(task)
        self.env: SimEnv = perturbed(self._base, variant)
        self.reference = reference or ExpertPolicy()

    def close(self) -> None:
        self.env.close()

    def replay(self, seed: int, actions: np.ndarray, upto: int | None = None) -> Rollout:
        """Reset with ``seed`` and apply ``actions[:upto]``; the rollout holds each pre-action state."""
        out = Rollout()
        state = self.env.reset(seed)["state"]
        for action in actions[: len(actions) if upto is None else upto]:
            out.states.append(state)
            out.actions.append(np.asarray(action, dtype=np.float64))
            transition = self.env.step(np.asarray(action, dtype=np.float64))
            out.transitions.append(transition)
            state = transition.observation["state"]
            if transition.terminated or transition.truncated:
                break
        out.states.append(state)  # the state after the last replayed action
        return out

    def handoff(self, seed: int, actions: np.ndarray, t: int, budget: int, instruction: str = "") -> Rollout:
        """Replay ``actions[:t]``, then the reference acts for up to ``budget`` steps (stops at success).

        The returned rollout holds only the reference's part (its first state is the hand-over state).
        """
        prefix = self.replay(seed, actions, t)
        state = prefix.states[-1]
        out = Rollout()
        if prefix.success:  # already succeeded during the prefix: nothing to recover
            out.transitions = [prefix.transitions[-1]]
            return out
        self.reference.reset(PolicyContext(self.task, (seed,), (instruction or self.task.instruction,)))
        low, high = self.task.action.low, self.task.action.high
        for _ in range(budget):
            batch = {"state": state[None], "instruction": [instruction or self.task.instruction],
                     "env_ids": np.zeros(1, dtype=np.int64)}
            action = np.clip(np.asarray(self.reference.act(batch), dtype=np.float64)[0], low, high)
            transition = self.env.step(action)
            out.states.append(state)
            out.actions.append(action)
            out.transitions.append(transition)
            state = transition.observation["state"]
            if transition.success or transition.terminated or transition.truncated:
                break
        return out
