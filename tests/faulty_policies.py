"""Policies that break their worker on purpose (importable by worker processes and Ray actors).

Each wraps the scripted expert, so the episodes they do not break are the expert's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from assay.policies import ExpertPolicy, PolicyContext


class _Wrapped:
    def __init__(self) -> None:
        self._expert = ExpertPolicy()
        self.seeds: tuple[int, ...] = ()

    def reset(self, context: PolicyContext) -> None:
        self._expert.reset(context)
        self.seeds = context.seeds

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return self._expert.act(observations)


class KillingExpert(_Wrapped):
    """SIGKILLs its own process at the first step of an episode whose ``seed % modulo == 0``.

    ``once=True``: only the first time for each seed (a marker file in ``marker_dir``
    remembers it across processes), so a retry succeeds; ``once=False``: every time.
    """

    def __init__(self, marker_dir: str, modulo: int = 4, once: bool = True) -> None:
        super().__init__()
        self.marker_dir, self.modulo, self.once = Path(marker_dir), modulo, once

    def reset(self, context: PolicyContext) -> None:
        super().reset(context)
        for seed in context.seeds:
            if seed % self.modulo:
                continue
            marker = self.marker_dir / f"killed-{seed}"
            if self.once and marker.exists():
                continue
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)


class HangingExpert(_Wrapped):
    """Hangs (sleeps an hour) at inference number ``at_step`` (0: the first) of any episode whose
    ``seed % modulo == 0``. The default 1 hangs after the batch has started stepping (its first inference
    answered), so the hang is one episode's and its batch-mates are rerun; ``at_step: 0`` hangs a batch that
    never started, which is timed out whole."""

    def __init__(self, modulo: int = 3, at_step: int = 1) -> None:
        super().__init__()
        self.modulo, self.at_step, self.calls = modulo, at_step, 0

    def reset(self, context: PolicyContext) -> None:
        super().reset(context)
        self.calls = 0

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        if self.calls == self.at_step and any(self.seeds[i] % self.modulo == 0 for i in observations["env_ids"]):
            time.sleep(3600)
        self.calls += 1
        return super().act(observations)


_POISONED = False  # set in the process once a LeakingExpert has "leaked"


class LeakingExpert(_Wrapped):
    """At an episode whose ``seed % modulo == 0`` it runs out of memory (MemoryError) and leaves its
    process poisoned: every later episode in the same process also dies of MemoryError at step 0.
    A fresh process is clean, so only a worker that is replaced after a resource error recovers."""

    def __init__(self, modulo: int = 5) -> None:
        super().__init__()
        self.modulo = modulo

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        global _POISONED
        if _POISONED:
            raise MemoryError("the previous policy leaked everything")
        if any(self.seeds[i] % self.modulo == 0 for i in observations["env_ids"]):
            _POISONED = True
            raise MemoryError("leaked")
        return super().act(observations)


class HangingConstructor:
    """Hangs (sleeps an hour) while it is being built: a batch using it never starts stepping."""

    def __init__(self, seconds: float = 3600.0) -> None:
        time.sleep(seconds)

    def reset(self, context: PolicyContext) -> None:
        pass

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        return np.zeros((len(observations["state"]), 1))
