"""Behaviour cloning on CPU: deterministic for a seed, bit for bit.

``train_bc(demos, config, out)`` fits the ``bc`` network (``assay.policies.bc``)
to (state, task) -> action pairs by mean-squared error with Adam, minibatches
shuffled by a seeded generator. Determinism: weights are initialised from
``torch.manual_seed(seed)``, deterministic algorithms are required, and training
runs on one thread (all three restored afterwards), so the same demos and config
give identical weight bytes on every run. Targets are clipped to the action box
[-1, 1] (the environment clips the scripted expert's high-gain actions there).

What the network reads and predicts follows the state's layout (``assay.spec.state_layout``,
``assay.policies.features``): rotations enter as the 6-D form of their matrix, each quantity is
normalised on its own scale (a floor relative to it, not an absolute one), and action dimensions the
demonstrations never vary are kept at their data value instead of learned. ``inputs="state+environment"``
adds the recorded ``environment_state`` (LIBERO: the goal objects' and targets' positions) to the state.

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
from assay.policies.features import ActionHead, InputFeatures
from assay.policies.mlp import import_torch
from assay.run.observers import advanced
from assay.serialize import DictMixin
from assay.spec.state_layout import StateLayout, backend_of, environment_layout, state_layout
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
    inputs: str = "state"  # or "state+environment": the recorded environment_state too (LIBERO's goal positions)

    def __post_init__(self) -> None:
        conditioning(self.conditioning)
        if self.inputs not in INPUTS:
            raise AssayError(f"inputs {self.inputs!r} are not valid; valid: {', '.join(INPUTS)}")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0 or not self.hidden or min(self.hidden) < 1:
            raise AssayError(
                f"invalid training config {self}: epochs, batch size, lr and hidden widths must be positive")


@dataclass(frozen=True)
class TrainResult(DictMixin):
    """A trained checkpoint: where it is, its content version, and what it was trained on."""

    path: str
    version: str
    demos: int
    frames: int
    tasks: tuple[str, ...]
    final_loss: float


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
    check_demos(demos)
    states = np.concatenate([d.observations for d in demos]).astype(np.float32)
    actions = np.clip(np.concatenate([d.actions for d in demos]), -1.0, 1.0).astype(np.float32)
    hot = np.zeros((len(states), len(tasks)), np.float32)
    row = 0
    for demo in demos:
        hot[row:row + len(demo.observations), tasks.index(demo.task_id)] = 1.0
        row += len(demo.observations)
    return states, hot, actions


def check_demos(demos: Sequence[Demo]) -> None:
    """One line when there is nothing to train on or the demos disagree in shape (naming the shapes and an
    episode of each)."""
    if not demos:
        raise AssayError("no demonstrations to train on")
    shapes: dict[tuple[int, int], str] = {}
    for demo in demos:
        shapes.setdefault((demo.observations.shape[1], demo.actions.shape[1]), demo.key)
    if len(shapes) != 1:
        found = "; ".join(f"state {s} and action {a} (e.g. {key[:16]})" for (s, a), key in sorted(shapes.items()))
        raise AssayError(f"demos disagree on their (state, action) dimensions: {found}; train one model per "
                         "embodiment (select one with task= in --data)")


INPUTS = ("state", "state+environment")


def chunk_targets(targets: np.ndarray, lengths: Sequence[int], chunk: int) -> np.ndarray:
    """(N, L) per-step targets of demos of these lengths, stacked -> (N, chunk * L): each row's own target and
    the next ``chunk - 1`` of its demo, the demo's last one repeated past its end (ACT's action chunks)."""
    if chunk == 1:
        return targets
    rows, start = [], 0
    for length in lengths:
        index = np.minimum(np.arange(length)[:, None] + np.arange(chunk)[None, :], length - 1) + start
        rows.append(targets[index].reshape(length, -1))
        start += length
    return np.concatenate(rows).astype(targets.dtype)


def input_rows(demos: Sequence[Demo], inputs: str) -> tuple[np.ndarray, StateLayout]:
    """The network's raw inputs stacked over the demos, and their layout: the recorded state, followed by the
    recorded ``environment_state`` for ``state+environment``."""
    if inputs not in INPUTS:
        raise AssayError(f"inputs {inputs!r} are not valid; valid: {', '.join(INPUTS)}")
    try:
        backend = backend_of(d.task_id for d in demos)
    except ValueError as exc:
        raise AssayError(f"demos of several backends: {exc}; train one model per embodiment") from None
    # float32 first, as the policy reads them (the wire's dtype), so training and inference see the same numbers
    states = np.concatenate([d.observations for d in demos]).astype(np.float32).astype(np.float64)
    layout = state_layout(backend, states.shape[1])
    if inputs == "state":
        return states, layout
    missing = [d.key for d in demos if d.environment is None]
    if missing:
        raise AssayError(f"{len(missing)} of {len(demos)} demos recorded no observation.environment_state (e.g. "
                         f"{missing[0][:16]}); {backend} episodes record it only where the backend gives one "
                         "(LIBERO does): train with --obs state, or record the demos again")
    widths = {d.environment.shape[1] for d in demos if d.environment is not None}
    if len(widths) != 1:
        raise AssayError(f"demos disagree on the environment_state's width: {sorted(widths)}; their tasks have "
                         "different numbers of goal objects: train them apart (select with task= in --data)")
    environment = np.concatenate([d.environment for d in demos if d.environment is not None])
    environment = environment.astype(np.float32).astype(np.float64)
    both = layout.then(environment_layout(backend, environment.shape[1]), "environment.")
    return np.concatenate([states, environment], axis=1), both


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
    """Train, write the checkpoint to ``out`` atomically, and describe it.

    The network reads :class:`~assay.policies.features.InputFeatures` of its inputs (rotations in 6-D form,
    each quantity normalised on its own scale) and predicts the action dimensions the data varies; the others
    are kept at their data value (:class:`~assay.policies.features.ActionHead`)."""
    tasks = sorted({d.task_id for d in demos})
    _, _, actions = arrays(demos, tasks)
    kind = conditioning(config.conditioning)
    hot = condition_rows(demos, tasks, kind)
    raw, layout = input_rows(demos, config.inputs)
    features = InputFeatures.fit(raw, layout)
    head = ActionHead.fit(actions)
    inputs = np.concatenate([features.apply(raw), hot], axis=1).astype(np.float32)
    targets = head.targets(actions).astype(np.float32)
    with deterministic_torch(config.seed) as torch:
        model = build_network(features.width, hot.shape[1], config.hidden, head.learned)
        optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        x, y = torch.from_numpy(inputs), torch.from_numpy(np.ascontiguousarray(targets))
        generator = torch.Generator().manual_seed(config.seed)
        loss_value = float("nan")
        for _ in told_epochs(training_text("bc", out, len(demos), len(raw)), config.epochs):
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
            "config": {"state_dim": int(demos[0].observations.shape[1]), "action_dim": int(actions.shape[1]),
                       "tasks": tasks, "hidden": list(config.hidden), "inputs": config.inputs,
                       **checkpoint_entry(kind)},
            "train": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
            "state_dict": state_dict,
            "features": features.to_checkpoint(),
            "action_head": head.to_checkpoint(),
            "provenance": [d.provenance() for d in demos],
            "final_loss": loss_value,
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
    path = Path(out)
    write_checkpoint(path, buffer.getvalue())
    return TrainResult(str(path), checkpoint_version(path), len(demos), len(raw), tuple(tasks), loss_value)
