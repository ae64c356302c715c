"""``lerobot``: a LeRobot ``PreTrainedPolicy`` directory evaluated as it is, with lerobot's own classes.

``lerobot:PATH`` (builtin ``lerobot``, param ``path``) reads ``PATH/config.json``
for the contract handshake without importing lerobot, so a campaign's plan and
its errors need no lerobot; the policy object itself is built where lerobot is
installed (``make test-interop``'s environment, or a server started there with
``assay serve-policy``): ``get_policy_class(config["type"]).from_pretrained(PATH)``
plus the pre/post-processors saved beside it (normalisation). Observations are
mapped by :mod:`assay.policies.lerobot_map`; each request returns the policy's
whole action chunk ``(B, H, A)`` (``predict_action_chunk``), which Assay's runner
executes up to the campaign's ``replan_every``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.errors import SpecError
from assay.policies.contract import STATE_KEY, ActionContract, ArraySpec, ImageSpec, PolicyContract
from assay.policies.lerobot_map import (
    IMAGE_PREFIX,
    STATE_FEATURE,
    FeatureMap,
    assay_actions,
    lerobot_batch,
    map_features,
    read_config,
)
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

INSTALL_HINT = (
    "lerobot is not installed here; run lerobot policies in its environment (make test-interop builds .venv-interop)"
)


class LeRobotParams(BaseModel):
    """Parameters of the ``lerobot`` policy."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="a PreTrainedPolicy directory saved by lerobot (config.json + model.safetensors)")
    device: str = Field(default="cpu", description="torch device for the policy")


class LeRobotPolicy:
    """A lerobot policy behind Assay's ``reset``/``act``; the feature mapping is checked at every reset."""

    Params = LeRobotParams
    version = "1"

    def __init__(self, **params: Any) -> None:
        self.params = LeRobotParams(**params)
        self.config = read_config(self.params.path)
        try:
            import torch
            from lerobot.policies.factory import get_policy_class, make_pre_post_processors
        except ImportError as exc:
            raise SpecError(f"{INSTALL_HINT} ({exc})") from None
        self._torch = torch
        self.policy = get_policy_class(self.config["type"]).from_pretrained(self.params.path)
        self.policy.to(self.params.device)
        self.policy.eval()
        self.preprocess, self.postprocess = make_pre_post_processors(
            self.policy.config, pretrained_path=self.params.path
        )
        self.features: FeatureMap | None = None
        self._instruction = ""

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Any task: the feature mapping at reset names a mismatch."""
        return None  # the feature mapping (at reset) names any mismatch

    @staticmethod
    def resolve_version(params: Mapping[str, Any]) -> str:
        """Content hash of every file in the policy directory."""
        path = Path(str(params.get("path", "")))
        read_config(path)
        digest = hashlib.sha256()
        for file in sorted(p for p in path.iterdir() if p.is_file()):
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
        return f"lerobot-{digest.hexdigest()[:12]}"

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """The contract read from ``config.json`` (no lerobot import): state, cameras, action, chunk."""
        config = read_config(LeRobotParams(**params).path)
        inputs = config["input_features"]
        observations = (
            {STATE_KEY: ArraySpec(shape=tuple(inputs[STATE_FEATURE]["shape"]))} if STATE_FEATURE in inputs else {}
        )
        images = {
            f"image.{key[len(IMAGE_PREFIX) :]}": ImageSpec(height=feature["shape"][1], width=feature["shape"][2])
            for key, feature in inputs.items()
            if key.startswith(IMAGE_PREFIX) and len(feature.get("shape", [])) == 3
        }
        action = config["output_features"].get("action", {}).get("shape", [0])
        return PolicyContract(
            observations=observations,
            images=images,
            action=ActionContract(dim=int(action[0]) if action and action[0] > 0 else 1),
            chunk_length=int(config.get("n_action_steps") or config.get("chunk_size") or 1),
        )

    def reset(self, context: PolicyContext) -> None:
        """Map the features to this task (ContractError on a mismatch) and reset lerobot's queues."""
        self.features = map_features(self.config, context.task)
        self.policy.reset()
        self._instruction = context.instructions[0] if context.instructions else context.task.instruction

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One action chunk ``(B, H, A)`` per row from lerobot's ``predict_action_chunk``."""
        assert self.features is not None, "reset() before act()"
        torch = self._torch
        arrays = lerobot_batch(self.features, observations)
        rows = len(next(iter(arrays.values())))
        batch: dict[str, Any] = {k: torch.from_numpy(v).to(self.params.device) for k, v in arrays.items()}
        batch["task"] = list(observations.get("instruction", [self._instruction] * rows))
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self.preprocess(batch))
            chunk = self.postprocess(chunk)
        return assay_actions(self.features, chunk.detach().cpu().numpy(), rows)
