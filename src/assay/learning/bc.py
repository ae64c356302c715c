"""Behaviour cloning on CPU: deterministic for a seed, bit for bit.

``train_bc(demos, config, out)`` fits the ``bc`` network (``assay.policies.bc``)
to (state, task) -> action pairs by mean-squared error with Adam, minibatches
shuffled by a seeded generator. Determinism: weights are initialised from
``torch.manual_seed(seed)``, deterministic algorithms are required, and training
runs on one thread (all three restored afterwards), so the same demos and config
give identical weight bytes on every run. Targets are clipped to the action box
[-1, 1] (the environment clips the scripted expert's high-gain actions there).

The checkpoint is written atomically and holds the provenance of every demo. Training says how far it is
(:func:`told_epochs`: epochs done of the total, per checkpoint) to whoever observes this process
(``assay.run.observers``; the CLI shows it as progress).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.learning.data import Demo
from assay.learning.language import checkpoint_entry, condition_rows, conditioning
from assay.policies.bc import CHECKPOINT_FORMAT, build_network, checkpoint_version
from assay.policies.mlp import import_torch
from assay.run.observers import advanced
from assay.store import write_blob


@dataclass(frozen=True)
class TrainConfig:
    """How to train a BC checkpoint: seed, epochs, widths, batch size, optimiser settings and conditioning."""

    seed: int = 0
    epochs: int = 50
    hidden: tuple[int, ...] = (256, 256)
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    conditioning: str = "task"  # or "instruction": see assay.learning.language

    def __post_init__(self) -> None:
        conditioning(self.conditioning)
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or not self.hidden or min(self.hidden) < 1:
            raise AssayError(
                f"invalid training config {self}: epochs, batch size, lr and hidden widths must be positive")


@dataclass(frozen=True)
class TrainResult:
    """A trained checkpoint: where it is, its content version, and what it was trained on."""

    path: str
    version: str
    demos: int
    frames: int
    tasks: tuple[str, ...]
    final_loss: float

    def to_dict(self) -> dict[str, object]:
        """The result as a JSON-ready dict."""
        return asdict(self)


@contextmanager
def deterministic_torch(seed: int) -> Iterator[Any]:
    """Torch on one thread with deterministic algorithms and ``seed``, the previous settings restored after."""
    torch = import_torch()
    threads, was_deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield torch
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)


def arrays(demos: Sequence[Demo], tasks: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(states, task one-hots, actions clipped to [-1, 1]) stacked over all demos."""
    if not demos:
        raise AssayError("no demonstrations to train on")
    dims = {(d.observations.shape[1], d.actions.shape[1]) for d in demos}
    if len(dims) != 1:
        raise AssayError(
            f"demos disagree on (state, action) dimensions: {sorted(dims)}; train one model per embodiment")
    states = np.concatenate([d.observations for d in demos]).astype(np.float32)
    actions = np.clip(np.concatenate([d.actions for d in demos]), -1.0, 1.0).astype(np.float32)
    hot = np.zeros((len(states), len(tasks)), np.float32)
    row = 0
    for demo in demos:
        hot[row:row + len(demo.observations), tasks.index(demo.task_id)] = 1.0
        row += len(demo.observations)
    return states, hot, actions


def told_epochs(what: str, epochs: int) -> Iterator[int]:
    """``range(epochs)``, telling the observers (``assay.run.observers.advanced``) 0 of ``epochs`` epochs of
    ``what`` before the first and each epoch once its loop body has finished."""
    advanced(what, 0, epochs, "epochs")
    for epoch in range(epochs):
        yield epoch
        advanced(what, epoch + 1, epochs, "epochs")


def training_text(kind: str, out: str | Path, demos: int, frames: int) -> str:
    """What a checkpoint's training is called in progress: ``training bc checkpoint bc.pt on 3 demos (150
    frames)``."""
    return f"training {kind} checkpoint {Path(out).name} on {demos} demos ({frames} frames)"


def write_checkpoint(path: Path, data: bytes) -> None:
    """Write a checkpoint atomically (``store.write_blob``: never a partial file)."""
    write_blob(path.parent, path.name, data, what="checkpoint")


def train_bc(demos: Sequence[Demo], config: TrainConfig, out: str | Path) -> TrainResult:
    """Train, write the checkpoint to ``out`` atomically, and describe it."""
    tasks = sorted({d.task_id for d in demos})
    states, _, actions = arrays(demos, tasks)
    kind = conditioning(config.conditioning)
    hot = condition_rows(demos, tasks, kind)
    mean = states.mean(axis=0)
    std = np.maximum(states.std(axis=0), 1e-3)  # constant state dimensions (padding) must not blow up
    inputs = np.concatenate([(states - mean) / std, hot], axis=1).astype(np.float32)
    with deterministic_torch(config.seed) as torch:
        model = build_network(states.shape[1], hot.shape[1], config.hidden, actions.shape[1])
        optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        x, y = torch.from_numpy(inputs), torch.from_numpy(actions)
        generator = torch.Generator().manual_seed(config.seed)
        loss_value = float("nan")
        for _ in told_epochs(training_text("bc", out, len(demos), len(states)), config.epochs):
            order = torch.randperm(len(x), generator=generator)
            total, count = 0.0, 0
            for start in range(0, len(x), config.batch_size):
                batch = order[start:start + config.batch_size]
                loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += loss.item() * len(batch)
                count += len(batch)
            loss_value = total / count
        state_dict = {k: v.detach().clone() for k, v in model.state_dict().items()}
        checkpoint = {
            "format": CHECKPOINT_FORMAT,
            "config": {"state_dim": int(states.shape[1]), "action_dim": int(actions.shape[1]), "tasks": tasks,
                       "hidden": list(config.hidden), **checkpoint_entry(kind)},
            "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
            "state_dict": state_dict,
            "obs_mean": torch.from_numpy(mean.astype(np.float32)),
            "obs_std": torch.from_numpy(std.astype(np.float32)),
            "provenance": [d.provenance() for d in demos],
            "final_loss": loss_value,
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
    path = Path(out)
    write_checkpoint(path, buffer.getvalue())
    return TrainResult(str(path), checkpoint_version(path), len(demos), len(states), tuple(tasks), loss_value)
