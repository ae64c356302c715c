"""Pixel behaviour cloning on CPU: camera frames from the store + proprioception -> action.

``train_pixel_bc(store, demos, config, out)`` fits the ``pixel-bc`` network
(``assay.policies.pixel_bc``) to (image, proprioception, task) -> action pairs by
mean-squared error with Adam. The frames are the ones the campaign recorded
(``videos/<key>.<camera>.mp4`` in the store): nothing is rendered again. Frame
``i`` is the image the expert acted on at step ``i``.

Conditioning (``conditioning``): a one-hot over the trained tasks (``task``, the default)
or the MiniLM embedding of the instruction each demo ran under (``instruction``,
``assay.learning.language``), so one network serves several tasks by reading what it
is told, and a reworded or conflicting instruction moves its input.

Augmentation (``augment="shift"``): the random shift of DrQ (Kostrikov et al.,
2020): each training image is padded by ``shift_pad`` pixels (edge replicated) and
cropped back at a random offset; off (``"none"``) by default, and recorded in the
checkpoint's ``train`` metadata either way.

The proprioception and the targets go through the same input map and action head as state BC
(``assay.policies.features``: the hand's rotation in 6-D form, each quantity on its own scale, the
action dimensions the demos never vary kept at their data value).

Determinism as in ``assay.learning.bc``: seeded initialisation, a seeded generator
for minibatch order and shifts, deterministic algorithms, one thread; the same
frames and config give identical checkpoint bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError, DataQueryError
from assay.learning.bc import (
    check_demos,
    chunk_targets,
    deterministic_torch,
    told_epochs,
    training_text,
    write_checkpoint,
)
from assay.learning.data import Demo
from assay.learning.language import Conditioning, checkpoint_entry, condition_rows, condition_width, conditioning
from assay.policies.bc import checkpoint_version
from assay.policies.features import ActionHead, InputFeatures
from assay.policies.mlp import import_torch
from assay.policies.pixel_bc import PIXEL_FORMAT, build_pixel_network, proprio_layout, proprio_of, to_tensor_images
from assay.serialize import DictMixin
from assay.store import Store, read_video, video_relpath

AUGMENTATIONS = ("none", "shift")


@dataclass(frozen=True)
class PixelTrainConfig:
    """Pixel BC training options (all recorded in the checkpoint's ``train`` metadata)."""
    seed: int = 0
    epochs: int = 30
    camera: str = "front"
    image_size: int = 64
    channels: tuple[int, ...] = (16, 32, 32)
    hidden: tuple[int, ...] = (256, 256)
    batch_size: int = 64
    lr: float = 1e-3
    augment: str = "none"
    shift_pad: int = 4
    conditioning: str = "task"
    chunk: int = 1  # actions predicted per frame (an action chunk: a camera is drawn once per chunk at run time)

    def __post_init__(self) -> None:
        conditioning(self.conditioning)  # a one-line error naming the valid kinds
        if self.augment not in AUGMENTATIONS:
            raise AssayError(f"augmentation {self.augment!r} is not one of {', '.join(AUGMENTATIONS)}")
        if (
            self.epochs < 1
            or self.batch_size < 1
            or self.lr <= 0
            or not self.hidden
            or min(self.hidden) < 1
            or not self.channels
            or min(self.channels) < 1
            or not 8 <= self.image_size <= 256
            or self.shift_pad < 0
            or self.chunk < 1
        ):
            raise AssayError(
                f"invalid pixel training config {self}: epochs, batch size, lr, widths and channels must be "
                "positive, image size within [8, 256]"
            )


@dataclass(frozen=True)
class PixelTrainResult(DictMixin):
    """What training wrote: the checkpoint, its version, the data it saw and the final loss."""
    path: str
    version: str
    demos: int
    frames: int
    tasks: tuple[str, ...]
    final_loss: float


def demo_frames(store: Store, demo: Demo, camera: str) -> np.ndarray:
    """The recorded frames (T, H, W, 3) uint8 of a demo's camera, one per row: the frame of each row's step
    (``demo.steps``). A relabel (``relabel:KEY``: the expert's actions on episode KEY's states) reads KEY's
    frames, the images the policy saw there."""
    if demo.purpose not in ("episode", "relabel"):
        raise DataQueryError(f"demo {demo.key} is a recovery demo without camera frames; pixel BC trains on episodes "
                             "and relabels of them")
    key = demo.key.removeprefix("relabel:")
    relpath = video_relpath(key, camera)
    if not store.files.exists(relpath):
        raise DataQueryError(
            f"episode {key} has no {camera!r} camera video; collect demos with "
            f"'cameras: [{{name: {camera}, width: 64, height: 64}}]' in the campaign"
        )
    frames = read_video(store.data_root, relpath)
    steps = demo.step_indices()
    if len(steps) and len(frames) <= int(steps.max()):
        raise DataQueryError(f"episode {key}: {len(frames)} frames for {int(steps.max()) + 1} steps")
    return frames[steps]


def pixel_arrays(
    store: Store, demos: Sequence[Demo], tasks: Sequence[str], camera: str, image_size: int,
    kind: Conditioning = Conditioning.TASK,
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(images (N, 3, S, S) float tensor, proprioception (N, P), conditioning rows (N, K): task one-hots
    or instruction embeddings, actions clipped to [-1, 1])."""
    check_demos(demos)
    torch = import_torch()
    images = torch.cat([to_tensor_images(demo_frames(store, d, camera), image_size) for d in demos])
    rows = list(proprio_of({d.task_id for d in demos}))
    proprio = np.concatenate([d.observations[:, rows] for d in demos]).astype(np.float32).astype(np.float64)
    actions = np.clip(np.concatenate([d.actions for d in demos]), -1.0, 1.0).astype(np.float32)
    return images, proprio, condition_rows(demos, tasks, kind), actions


def random_shift(torch: Any, images: Any, pad: int, generator: Any) -> Any:
    """Pad each image by ``pad`` pixels (edges replicated) and crop it back at a seeded random offset."""
    if pad == 0:
        return images
    size = images.shape[-1]
    padded = torch.nn.functional.pad(images, (pad, pad, pad, pad), mode="replicate")
    offsets = torch.randint(0, 2 * pad + 1, (len(images), 2), generator=generator).tolist()
    return torch.stack([padded[i, :, dy : dy + size, dx : dx + size] for i, (dy, dx) in enumerate(offsets)])


def train_pixel_bc(store: Store, demos: Sequence[Demo], config: PixelTrainConfig, out: str | Path) -> PixelTrainResult:
    """Train on the demos' recorded frames, write the checkpoint to ``out`` atomically, and describe it."""
    tasks = sorted({d.task_id for d in demos})
    kind = conditioning(config.conditioning)
    with deterministic_torch(config.seed) as torch:
        images, proprio, hot, actions = pixel_arrays(store, demos, tasks, config.camera, config.image_size, kind)
        rows = proprio_of({d.task_id for d in demos})
        features = InputFeatures.fit(proprio, proprio_layout(tasks, demos[0].observations.shape[1], rows))
        head = ActionHead.fit(actions)
        torch.manual_seed(config.seed)
        model = build_pixel_network(
            config.image_size, config.channels, features.width, condition_width(kind, tasks), config.hidden,
            head.learned * config.chunk,
        )
        optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
        p = torch.from_numpy(features.apply(proprio))
        targets = chunk_targets(head.targets(actions), [len(d.actions) for d in demos], config.chunk)
        k, y = torch.from_numpy(hot), torch.from_numpy(np.ascontiguousarray(targets))
        generator = torch.Generator().manual_seed(config.seed)
        loss_value = float("nan")
        for _ in told_epochs(training_text("pixel-bc", out, len(demos), len(actions)), config.epochs):
            order = torch.randperm(len(y), generator=generator)
            total, count = 0.0, 0
            for start in range(0, len(y), config.batch_size):
                batch = order[start : start + config.batch_size]
                x = images[batch]
                if config.augment == "shift":
                    x = random_shift(torch, x, config.shift_pad, generator)
                loss = torch.nn.functional.mse_loss(model(x, p[batch], k[batch]), y[batch])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += loss.item() * len(batch)
                count += len(batch)
            loss_value = total / count
        checkpoint = {
            "format": PIXEL_FORMAT,
            "config": {
                "state_dim": int(demos[0].observations.shape[1]),
                "action_dim": int(actions.shape[1]),
                "tasks": tasks,
                "camera": config.camera,
                "image_size": config.image_size,
                "channels": list(config.channels),
                "hidden": list(config.hidden),
                "proprio": list(rows),
                "chunk": config.chunk,
                "conditioning": "task-onehot",
                **checkpoint_entry(kind),
            },
            "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
            "state_dict": {name: v.detach().clone() for name, v in model.state_dict().items()},
            "features": features.to_checkpoint(),
            "action_head": head.to_checkpoint(),
            "provenance": [d.provenance() for d in demos],
            "final_loss": loss_value,
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
    path = Path(out)
    write_checkpoint(path, buffer.getvalue())
    return PixelTrainResult(str(path), checkpoint_version(path), len(demos), len(actions), tuple(tasks), loss_value)
