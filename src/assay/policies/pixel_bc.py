"""``pixel-bc``: a behaviour-cloned CNN that sees camera images and proprioception only.

The checkpoint (written by ``assay train-bc --obs image+proprio``; ``torch.save`` of
plain dicts and tensors, read with ``weights_only=True``) holds the network, the
camera it reads, its input image size, the proprioception normalisation, the task
list for the one-hot task embedding or, for ``conditioning: instruction``, the sentence
encoder whose embedding of each episode's instruction it reads instead, the training
options (augmentation included)
and the provenance of every training episode. The version is the content hash of
the file, as for ``bc``.

What the network receives (:meth:`PixelBCPolicy.network_inputs`) is the camera's
RGB image, resized to the checkpoint's size by area averaging, and
the state's proprioceptive rows (``proprio_of``): on Meta-World the hand position and gripper opening of
this and the previous control step, on LIBERO its whole 8-d robot state. Object and goal positions, which
the Meta-World state also carries, never reach it: they must be seen. The network runs one row per call
(``mlp.forward_rows``), on one torch thread, so every row's action is bitwise independent of its batch-mates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.errors import SpecError
from assay.policies.bc import checkpoint_version, load_checkpoint_data
from assay.policies.contract import (
    PROMPT_KEY,
    STATE_KEY,
    ActionContract,
    ActionMode,
    ArraySpec,
    GripperPolarity,
    ImageSpec,
    PolicyContract,
)
from assay.policies.features import ActionHead, InputFeatures
from assay.policies.language import EMBED_DIM, embed_each
from assay.policies.mlp import forward_rows, import_torch
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec
from assay.spec.state_layout import Quantity, Segment, StateLayout, backend_of, state_layout

PIXEL_FORMAT = "assay-pixel-bc/2"
PIXEL_LEGACY_FORMATS = ("assay-pixel-bc/1",)  # read as written: proprioception by (mean, std), every action learned
# Meta-World's 39-d state: hand xyz (0:3), gripper (3), objects (4:18), the same 18 of the previous
# step (18:36), goal (36:39). Proprioception is the robot's own part of both steps.
PROPRIO = (0, 1, 2, 3, 18, 19, 20, 21)
# Per backend, the state's proprioceptive rows. LIBERO's 8-d state (openpi's) is all the robot's own: the
# end-effector position (0:3), its orientation as an axis-angle (3:6) and the two gripper finger joints (6:8).
PROPRIO_BY_BACKEND: dict[str, tuple[int, ...]] = {"metaworld": PROPRIO, "libero": tuple(range(8))}


def proprio_of(task_ids: set[str] | list[str] | tuple[str, ...]) -> tuple[int, ...]:
    """The proprioceptive state rows for demos of these tasks: one backend's, or a one-line error naming
    the backends pixel BC knows (a Gymnasium task's state says nothing of which rows are the robot's own)."""
    backends = sorted({task.split("/", 1)[0] for task in task_ids})
    if len(backends) != 1 or backends[0] not in PROPRIO_BY_BACKEND:
        raise SpecError(f"pixel BC reads the proprioception of one backend's state; these demos are of "
                        f"{', '.join(backends) or 'no task'}; valid: {', '.join(sorted(PROPRIO_BY_BACKEND))}")
    return PROPRIO_BY_BACKEND[backends[0]]


class PixelBCParams(BaseModel):
    """Parameters of the ``pixel-bc`` policy."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="a checkpoint written by 'assay train-bc --obs image+proprio'")


def build_pixel_network(
    image_size: int, channels: tuple[int, ...], proprio_dim: int, n_tasks: int, hidden: tuple[int, ...], action_dim: int
) -> Any:
    """Conv encoder (stride-2 3x3 convolutions, ReLU) -> spatial softmax keypoints (x, y per channel),
    concatenated with normalised proprioception and the task one-hot -> MLP -> action."""
    torch = import_torch()
    nn = torch.nn

    class SpatialSoftmax(nn.Module):  # type: ignore[name-defined, misc]  # torch is not followed: Any to mypy
        """Expected (x, y) image coordinate of each channel's activation: where things are."""

        def forward(self, features: Any) -> Any:
            batch, chans, height, width = features.shape
            weights = torch.softmax(features.reshape(batch, chans, height * width), dim=-1)
            ys = torch.linspace(-1.0, 1.0, height, dtype=features.dtype).repeat_interleave(width)
            xs = torch.linspace(-1.0, 1.0, width, dtype=features.dtype).repeat(height)
            return torch.cat([(weights * xs).sum(-1), (weights * ys).sum(-1)], dim=1)

    class PixelNet(nn.Module):  # type: ignore[name-defined, misc]  # torch is not followed: Any to mypy
        def __init__(self) -> None:
            super().__init__()
            layers: list[Any] = []
            n_in = 3
            for index, n_out in enumerate(channels):
                layers += [
                    nn.Conv2d(n_in, n_out, 3, stride=2 if index < len(channels) - 1 else 1, padding=1),
                    nn.ReLU(),
                ]
                n_in = n_out
            self.encoder = nn.Sequential(*layers, SpatialSoftmax())
            widths = (2 * channels[-1] + proprio_dim + n_tasks, *hidden)
            head: list[Any] = []
            for a, b in zip(widths[:-1], widths[1:], strict=True):
                head += [nn.Linear(a, b), nn.ReLU()]
            self.head = nn.Sequential(*head, nn.Linear(widths[-1], action_dim))

        def forward(self, images: Any, proprio: Any, task: Any) -> Any:
            return self.head(torch.cat([self.encoder(images), proprio, task], dim=1))

    if image_size < 8 or not channels:
        raise SpecError(
            f"pixel network needs image size >= 8 and at least one conv layer, got {image_size}, {channels}"
        )
    return PixelNet()


def to_tensor_images(frames: np.ndarray, size: int) -> Any:
    """(B, H, W, 3) uint8 -> (B, 3, size, size) float32 in [0, 1]; resized by area averaging if needed."""
    torch = import_torch()
    images = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float().div_(255.0)
    if images.shape[-2:] != (size, size):
        images = torch.nn.functional.interpolate(images, size=(size, size), mode="area")
    return images.contiguous()


def proprio_layout(task_ids: Sequence[str], state_dim: int, rows: Sequence[int]) -> StateLayout:
    """The layout of the proprioceptive rows of these tasks' state (``assay.spec.state_layout``)."""
    return state_layout(backend_of(task_ids), state_dim).select(rows)


def pixel_io(data: Mapping[str, Any]) -> tuple[InputFeatures, ActionHead]:
    """A pixel checkpoint's proprioception map and action head (a legacy checkpoint's as it was trained)."""
    config = data["config"]
    if data.get("format") in PIXEL_LEGACY_FORMATS:
        mean = data["proprio_mean"].numpy().astype(np.float64)
        std = data["proprio_std"].numpy().astype(np.float64)
        layout = StateLayout((Segment("proprio", Quantity.OTHER, 0, len(mean)),))
        action_dim = int(config["action_dim"])
        return (InputFeatures(layout, mean, std, np.ones(len(mean), bool)),
                ActionHead(np.zeros(action_dim, bool), np.zeros(action_dim)))
    return InputFeatures.from_checkpoint(data["features"]), ActionHead.from_checkpoint(data["action_head"])


def load_pixel_checkpoint(path: str | Path) -> dict[str, Any]:
    """A pixel-bc checkpoint's dict; SpecError naming the file (and the right policy) otherwise."""
    data = load_checkpoint_data(path)
    if data.get("format") not in (PIXEL_FORMAT, *PIXEL_LEGACY_FORMATS):
        raise SpecError(
            f"{path} is not a pixel-bc checkpoint (format {PIXEL_FORMAT!r} expected, found "
            f"{data.get('format')!r}); a state checkpoint runs as bc:{path}"
        )
    return data


class PixelBCPolicy:
    """``action = clip(CNN(image) ⊕ proprio ⊕ (onehot(task) | embed(instruction)) -> MLP, -1, 1)``; a checkpoint
    trained with ``chunk: H`` answers each row with H actions (the runner executes them before asking again, so
    the camera is drawn once per chunk)."""

    Params = PixelBCParams
    version = "1"

    def __init__(self, **params: Any) -> None:
        self.params = PixelBCParams(**params)
        torch = import_torch()
        self._torch = torch
        data = load_pixel_checkpoint(self.params.path)
        config = data["config"]
        self.config = config
        self.tasks: list[str] = list(config["tasks"])
        self.camera: str = config["camera"]
        self.image_size = int(config["image_size"])
        self.proprio = tuple(int(i) for i in config["proprio"])
        self.action_dim = int(config["action_dim"])
        self.by_instruction = config.get("conditioning") == "instruction"
        self.condition_dim = EMBED_DIM if self.by_instruction else len(self.tasks)
        self.features, self.head = pixel_io(data)
        self.chunk = int(config.get("chunk", 1))
        self.model = build_pixel_network(
            self.image_size,
            tuple(config["channels"]),
            self.features.width,
            self.condition_dim,
            tuple(config["hidden"]),
            self.head.learned * self.chunk,
        )
        self.model.load_state_dict(data["state_dict"])
        self.model.eval()
        self.trained = {(str(p["task_id"]), int(p["seed"])) for p in data["provenance"]}  # the scene, not the horizon
        self._onehot = np.zeros(len(self.tasks), np.float32)
        self._rows = np.zeros((0, self.condition_dim), np.float32)  # per slot: the instruction's embedding
        self._flags: list[dict[str, Any]] = []

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """A reason when the task renders no camera (the contract names which camera is needed)."""
        if not task.cameras:
            return ("pixel-bc needs camera images; add 'cameras:' to the campaign "
                    "(e.g. {name: front, width: 64, height: 64})")
        return None

    @staticmethod
    def resolve_version(params: Mapping[str, Any]) -> str:
        """The checkpoint's content hash; SpecError when the file is missing."""
        path = params.get("path")
        if not path or not Path(path).is_file():
            raise SpecError(
                f"pixel-bc checkpoint {path} does not exist (write one with 'assay train-bc --obs image+proprio')"
            )
        return checkpoint_version(path)

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """State (for proprioception), the camera image it reads, a delta action in [-1, 1]; a task one-hot
        checkpoint runs only the tasks it was trained on."""
        config = load_pixel_checkpoint(PixelBCParams(**params).path)["config"]
        size = int(config["image_size"])
        by_instruction = config.get("conditioning") == "instruction"
        reads = {PROMPT_KEY: ArraySpec(shape=(), dtype="str")} if by_instruction else {}
        return PolicyContract(  # the prompt is declared when it is read: what leakage counts as perceived
            observations={STATE_KEY: ArraySpec(shape=(int(config["state_dim"]),), dtype="float32"), **reads},
            images={f"image.{config['camera']}": ImageSpec(height=size, width=size)},
            action=ActionContract(
                dim=int(config["action_dim"]),
                mode=ActionMode.DELTA,
                gripper=GripperPolarity.POSITIVE_CLOSES,
                low=-1.0,
                high=1.0,
            ),
            chunk_length=int(config.get("chunk", 1)),
            tasks=None if by_instruction else tuple(config["tasks"]),
        )

    def reset(self, context: PolicyContext) -> None:
        """Select the task's one-hot (or embed each episode's instruction) and note, per episode, whether
        its seed was in the training data."""
        self._onehot = self.task_onehot(context.task.id)
        if self.by_instruction:
            self._rows = embed_each(context.instructions)
        task = context.task.id
        self._flags = [
            {"task_known": task in self.tasks, "trained_on_seed": (task, int(seed)) in self.trained}
            for seed in context.seeds
        ]

    def episode_info(self, slot: int) -> dict[str, Any]:
        """``task_known`` and ``trained_on_seed`` for the episode in ``slot``."""
        return dict(self._flags[slot]) if slot < len(self._flags) else {}

    def task_onehot(self, task_id: str) -> np.ndarray:
        """The one-hot of ``task_id`` over the trained tasks (zeros for an unknown task)."""
        hot = np.zeros(len(self.tasks), np.float32)
        if task_id in self.tasks:
            hot[self.tasks.index(task_id)] = 1.0
        return hot

    def network_inputs(self, observations: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """Exactly what the network sees: the camera's frames (B, H, W, 3) uint8 and the proprioception (B, P)."""
        key = f"image.{self.camera}"
        if key not in observations:
            raise KeyError(
                f"pixel-bc reads {key!r}; the observation has "
                f"{sorted(k for k in observations if k.startswith('image.'))}"
            )
        frames = np.asarray(observations[key])
        if frames.ndim == 3:
            frames = frames[None]
        states = np.asarray(observations["state"], dtype=np.float32)  # what the wire carries (a served policy)
        if states.ndim == 1:
            states = states[None]
        return frames, states[:, list(self.proprio)]

    def predict(self, frames: np.ndarray, proprio: np.ndarray, onehot: np.ndarray | None = None) -> np.ndarray:
        """Actions for B frames and proprioception rows, one row per call so rows never affect each other."""
        torch = self._torch
        rows = len(frames)
        if len(proprio) != rows:
            raise ValueError(f"pixel-bc got {rows} frames but {len(proprio)} proprioception rows")
        hot = np.broadcast_to(self._onehot if onehot is None else onehot, (rows, self.condition_dim)).astype(np.float32)
        prop = self.features.apply(np.asarray(proprio, np.float32).astype(np.float64))
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)
        size = self.image_size
        network = self.model

        def model(images: Any, prop_rows: Any, hot_rows: Any) -> Any:
            return network(to_tensor_images(images.numpy(), size), prop_rows, hot_rows)

        out = forward_rows(torch, model, np.ascontiguousarray(frames), prop, np.ascontiguousarray(hot))
        if self.chunk == 1:
            clipped: np.ndarray = np.clip(self.head.assemble(out), -1.0, 1.0)
            return clipped
        steps = self.head.assemble(out.reshape(rows * self.chunk, -1)).reshape(rows, self.chunk, -1)
        chunks: np.ndarray = np.clip(steps, -1.0, 1.0)
        return chunks

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Actions for the batch, from the camera image, proprioception and the task or instruction only."""
        frames, proprio = self.network_inputs(observations)
        if self.by_instruction:
            slots = np.asarray(observations.get("env_ids", np.arange(len(frames))), dtype=int)
            return self.predict(frames, proprio, self._rows[slots])
        return self.predict(frames, proprio)
