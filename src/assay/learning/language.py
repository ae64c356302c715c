"""What a behaviour-cloning network is conditioned on: a task one-hot, or the instruction's embedding.

``task`` (the default) appends a one-hot over the trained task list; ``instruction``
appends the all-MiniLM-L6-v2 sentence embedding of the instruction each demo ran
under (``assay.policies.language``: offline, one cached vector per text, batch
invariant), so the network reads language and a reworded instruction moves its
input. ``condition_rows`` gives the per-frame conditioning block for training;
at inference ``assay.policies.bc`` builds the same block from each episode's
instruction. Any network (state or pixels) can concatenate it to its features.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np

from assay.errors import AssayError
from assay.learning.data import Demo
from assay.policies.language import EMBED_DIM, ENCODER, embed_each


class Conditioning(str, Enum):
    """What a BC network is conditioned on besides the state: the task's one-hot or the instruction's embedding."""

    TASK = "task"  # one-hot over the trained tasks
    INSTRUCTION = "instruction"  # sentence embedding of the instruction


def conditioning(name: str) -> Conditioning:
    """The conditioning named ``name``; an unknown name is an AssayError listing the valid ones."""
    try:
        return Conditioning(name)
    except ValueError:
        raise AssayError(
            f"conditioning {name!r} is not valid; valid: {', '.join(c.value for c in Conditioning)}") from None


def condition_width(kind: Conditioning, tasks: Sequence[str]) -> int:
    """The width of the conditioning vector: the number of tasks, or the embedding's dimension."""
    return len(tasks) if kind is Conditioning.TASK else EMBED_DIM


def condition_rows(demos: Sequence[Demo], tasks: Sequence[str], kind: Conditioning | str) -> np.ndarray:
    """``(frames, width)`` float32: each demo's conditioning vector repeated over its frames, demos in order."""
    kind = conditioning(kind) if isinstance(kind, str) else kind
    if kind is Conditioning.TASK:
        vectors = np.eye(len(tasks), dtype=np.float32)[[list(tasks).index(d.task_id) for d in demos]]
    else:
        missing = [d.key for d in demos if not d.instruction]
        if missing:
            raise AssayError(f"instruction conditioning needs each demo's instruction; {len(missing)} have none "
                             f"(e.g. {missing[0]})")
        vectors = embed_each([d.instruction for d in demos])
    return np.repeat(vectors, [len(d.observations) for d in demos], axis=0).astype(np.float32)


def checkpoint_entry(kind: Conditioning) -> dict[str, object]:
    """What a checkpoint records about its conditioning (read back by ``assay.policies.bc``)."""
    if kind is Conditioning.TASK:
        return {}  # the original format: no key means a task one-hot
    return {"conditioning": kind.value, "encoder": ENCODER, "embed_dim": EMBED_DIM}
