"""Deterministic replay of a recorded episode, checked against the recording, and hand-over to a reference.

The Meta-World backend sets every initial condition from the seed and
``perturbed(env, variant)`` seeds its noise from it, so resetting with the
episode's seed and stepping its recorded actions reproduces the recorded
states exactly, provided the replay runs the same stack the episode ran: the
recorded ``action`` is what the policy chose, so a cell run with the safety
filter (``safety: true``) is replayed through the same filter.
:meth:`Replayer.verify` replays the whole episode and compares every state with
the recorded ``observation.state``; nothing built on a replay (a point of no
return, a recovery demo) may use one that does not reproduce the recording
(:class:`ReplayMismatch`). :meth:`Replayer.handoff` replays the first ``t``
actions, then lets the reference policy (the expert by default) act for up to a
budget of steps; ``draw > 0`` redraws the variant's noise from the hand-over on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, Policy, PolicyContext
from assay.sim import SafetyFilter, SimEnv, Transition, make_env, perturbed
from assay.spec import TaskSpec, Variant, derive_seed
from assay.store import EpisodeRecord

STATE_TOLERANCE = 1e-9  # a replay that differs by more than this from the recording is not the recording


@dataclass(frozen=True)
class ReplayCheck:
    """How a replay compared with the recording it replays."""

    steps: int  # recorded steps compared
    first_mismatch: int | None  # the first step whose replayed state differs; None: it reproduces
    max_error: float  # largest absolute state difference

    @property
    def ok(self) -> bool:
        """Whether the replay reproduced every recorded step."""
        return self.first_mismatch is None

    def describe(self) -> str:
        """One line saying whether the replay reproduces the recording, or where it diverges."""
        if self.ok:
            return f"replay reproduces all {self.steps} recorded steps"
        return (f"replay diverges from the recording at step {self.first_mismatch} of {self.steps} "
                f"(largest state difference {self.max_error:.3g})")


@dataclass
class Rollout:
    """States the policy saw (one per action), actions, and step results; ``success`` at any step."""

    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    last: dict[str, Any] = field(default_factory=dict)  # the whole observation after the last action

    @property
    def success(self) -> bool:
        """Whether any replayed step succeeded."""
        return any(t.success for t in self.transitions)


class Replayer:
    """One environment for (task, variant), reused for every replay of it; ``safety`` as the cell ran."""

    def __init__(self, task: TaskSpec, variant: Variant, reference: Policy | None = None, safety: bool = False) -> None:
        self.task = task
        self.variant = variant
        self.safety = safety
        # Cameras only render: states (and so every replay) are the same without them, and much cheaper.
        self._base = make_env(task.model_copy(update={"cameras": []}))
        self._noisy = perturbed(self._base, variant)
        self.env: SimEnv = SafetyFilter(self._noisy) if safety else self._noisy
        self.reference = reference or ExpertPolicy()

    @property
    def stochastic(self) -> bool:
        """Whether the variant draws noise per step (then a replay is compared in distribution, not step by step)."""
        return self._noisy.stochastic

    def close(self) -> None:
        """Close the environment."""
        self.env.close()

    def replay(self, seed: int, actions: np.ndarray, upto: int | None = None) -> Rollout:
        """Reset with ``seed`` and apply ``actions[:upto]``; the rollout holds each pre-action state."""
        out = Rollout()
        observation = dict(self.env.reset(seed))
        for action in actions[: len(actions) if upto is None else upto]:
            out.states.append(observation["state"])
            out.actions.append(np.asarray(action, dtype=np.float64))
            transition = self.env.step(np.asarray(action, dtype=np.float64))
            out.transitions.append(transition)
            observation = dict(transition.observation)
            if transition.terminated or transition.truncated:
                break
        out.states.append(observation["state"])  # the state after the last replayed action
        out.last = observation
        return out

    def verify(self, seed: int, actions: np.ndarray, states: np.ndarray) -> ReplayCheck:
        """Replay every action and compare each pre-action state with the recorded ``states``."""
        replayed = self.replay(seed, actions)
        got = np.asarray(replayed.states[:-1], dtype=np.float64).reshape(-1, states.shape[1])
        n = min(len(got), len(states))
        if n == 0:
            return ReplayCheck(len(states), 0 if len(states) else None, float("inf") if len(states) else 0.0)
        error = np.abs(got[:n] - states[:n]).max(axis=1)
        error = np.where(np.isfinite(error), error, np.inf)
        bad = np.flatnonzero(error > STATE_TOLERANCE)
        first = int(bad[0]) if bad.size else (n if len(got) != len(states) else None)
        return ReplayCheck(len(states), first, float(error.max()))

    def handoff(self, seed: int, actions: np.ndarray, t: int, budget: int, instruction: str = "",
                draw: int = 0) -> Rollout:
        """Replay ``actions[:t]``, then the reference acts for up to ``budget`` steps (stops at success).

        ``draw`` > 0 under a noisy variant redraws the noise from the hand-over on (draw 0 keeps the
        episode's own). The returned rollout holds only the reference's part (its first state is the
        hand-over state).
        """
        prefix = self.replay(seed, actions, t)
        observation = prefix.last
        out = Rollout()
        if prefix.success:  # already succeeded during the prefix: nothing to recover
            out.transitions = [prefix.transitions[-1]]
            return out
        # The budget counts from the hand-over: Meta-World's path-length counter (a benchmark limit, not
        # physics) restarts here, so a state late in a long episode gets the same budget as an early one.
        # (LIBERO's backend never truncates: robosuite's own limit is set far beyond horizon + budget.)
        sawyer = self._noisy.simulator
        if hasattr(sawyer, "curr_path_length"):
            sawyer.curr_path_length = 0
        if draw and self.stochastic:
            self._noisy.reseed_noise(derive_seed("handoff", seed, t, draw))
        self.reference.reset(PolicyContext(self.task, (seed,), (instruction or self.task.instruction,)))
        low, high = self.task.action.low, self.task.action.high
        for _ in range(budget):
            # every observation the backend gives (LIBERO's privileged.goal for its expert), as a batch of one
            batch = {**{key: np.asarray(value)[None] for key, value in observation.items()},
                     "instruction": [instruction or self.task.instruction], "env_ids": np.zeros(1, dtype=np.int64)}
            action = np.clip(np.asarray(self.reference.act(batch), dtype=np.float64)[0], low, high)
            transition = self.env.step(action)
            out.states.append(observation["state"])
            out.actions.append(action)
            out.transitions.append(transition)
            observation = dict(transition.observation)
            if transition.success or transition.terminated or transition.truncated:
                break
        out.last = observation
        return out


class Replayers:
    """One :class:`Replayer` per variant of ``task``, built on first use from a record's own variant.

    A recorded episode reproduces only in the variant it ran under (its perturbations change the
    dynamics), so code that replays failures from a campaign over several variants asks
    ``for_record(record)`` rather than building one replayer. ``close()`` closes every one built.
    """

    def __init__(self, task: TaskSpec, safety: bool = False) -> None:
        self.task = task
        self.safety = safety
        self._built: dict[str, Replayer] = {}

    def for_record(self, record: EpisodeRecord) -> Replayer:
        """The replayer of ``record.variant`` (the stored ``Variant`` dump)."""
        variant = Variant.model_validate(record.variant)
        if variant.key not in self._built:
            self._built[variant.key] = Replayer(self.task, variant, safety=self.safety)
        return self._built[variant.key]

    def close(self) -> None:
        """Close every replayer built so far."""
        for replayer in self._built.values():
            replayer.close()
        self._built.clear()

    def __enter__(self) -> Replayers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
