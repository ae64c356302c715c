"""``mlp``: a small torch MLP policy, random or trained weights, batched forward.

It maps ``observation/state`` (float32, ``state_dim``) to an action, or to a chunk
of ``chunk`` actions, squashed by ``tanh`` into [-1, 1]. Weights are random from
``seed`` (deterministic, the same on every machine) or read from ``weights``, a
``state_dict`` saved with ``torch.save`` and loaded with ``weights_only=True``
(never unpickles code). Rows are independent, and results never depend on how
environments are batched, bit for bit: CPU GEMM kernels round differently for
different row counts (a 1-row call takes another path than an 8-row one, and on
some CPUs 16 rows another than 8), so by default every forward runs on blocks of
exactly ``PAD_ROWS`` rows, zero-padded, one call each (tests check the invariance
exactly). One batched forward costs far less per row than
single calls, which is what a policy server's dynamic batcher exploits.

torch is imported lazily; without it the policy says how to install it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.errors import UnsupportedError
from assay.policies.contract import (
    STATE_KEY,
    ActionContract,
    ActionMode,
    ArraySpec,
    GripperPolarity,
    PolicyContract,
)
from assay.policies.protocol import PolicyContext
from assay.spec import TaskSpec

PAD_ROWS = 8
TORCH_HINT = "the 'mlp' policy needs torch: pip install 'assay[torch]' (or pip install torch==2.13.0)"


def forward_blocks(torch: Any, model: Any, state: np.ndarray) -> np.ndarray:
    """``model(state)`` on blocks of exactly ``PAD_ROWS`` rows (the last zero-padded), each block its own call:
    a GEMM's kernel depends on the row count (8 and 16 rows round differently on some CPUs), not, for a linear
    layer, on a row's place in a block of fixed size."""
    rows = len(state)
    pad = (-rows) % PAD_ROWS
    if pad:
        state = np.concatenate([state, np.zeros((pad, state.shape[1]), state.dtype)])
    with torch.inference_mode():
        blocks = [model(torch.from_numpy(np.ascontiguousarray(state[start:start + PAD_ROWS]))).numpy()
                  for start in range(0, len(state), PAD_ROWS)]
    out: np.ndarray = np.concatenate(blocks)[:rows]
    return out


def forward_rows(torch: Any, model: Any, *inputs: np.ndarray) -> np.ndarray:
    """``model(*inputs)`` one row per call: a CPU kernel's arithmetic can depend on the batch's size and on a
    row's place in it (GEMM kernels for 8 and 16 rows round differently on some CPUs, convolutions by
    position in the batch), so only single-row calls give every row the same bits in any batch, on any CPU.
    For the small networks that run this way (``bc``, ``pixel-bc``) a call costs tens of microseconds."""
    rows = len(inputs[0])
    with torch.inference_mode():
        outs = [model(*(torch.from_numpy(np.ascontiguousarray(a[row:row + 1])) for a in inputs)).numpy()
                for row in range(rows)]
    out: np.ndarray = np.concatenate(outs) if outs else np.zeros((0,))
    return out


def import_torch() -> Any:
    """The torch module, or UnsupportedError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError(TORCH_HINT) from None
    return torch


_torch = import_torch  # the old private name, for code written against it


class MLPParams(BaseModel):
    """The ``mlp`` policy's params: dimensions, hidden widths, chunk length, seed or weights file, threads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_dim: int = Field(default=39, gt=0, description="length of observation/state")
    action_dim: int = Field(default=4, gt=0)
    hidden: tuple[int, ...] = Field(
        default=(2048, 2048, 2048), description="hidden layer widths (default ~8.5 M parameters)")
    chunk: int = Field(default=1, gt=0, le=256, description="actions per call (an action chunk when > 1)")
    seed: int = Field(default=0, ge=0, description="seed of the random initial weights")
    weights: str | None = Field(default=None, description="a state_dict file saved with torch.save")
    control_hz: float | None = Field(default=None, gt=0, description="the rate the weights were trained at")
    threads: int | None = Field(default=None, gt=0, description="torch intra-op threads (default: torch's)")
    batch_invariant: bool = Field(default=True, description="pad batches to a multiple of 8 rows so each row's "
                                  "result is bitwise independent of its batch-mates")


class MLPPolicy:
    """A torch MLP: ``state -> tanh(MLP(state))`` reshaped to ``(B, action_dim)`` or ``(B, chunk, action_dim)``."""

    Params = MLPParams
    version = "1"
    stateless = True  # each row's action depends on its own observation only: served batched, one instance

    def __init__(self, **params: Any) -> None:
        self.params = MLPParams(**params)
        torch = import_torch()
        if self.params.threads is not None:
            torch.set_num_threads(self.params.threads)
        self._torch = torch
        self.model = build_model(self.params)
        if self.params.weights is not None:
            state = torch.load(Path(self.params.weights), map_location="cpu", weights_only=True)
            self.model.load_state_dict(state)
        self.model.eval()

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Accept every task: the contract handshake says precisely what does not fit."""
        return None  # the contract handshake says precisely what does not fit

    @staticmethod
    def resolve_version(params: Mapping[str, Any]) -> str:
        """Weights are part of the identity: a weights file is versioned by its content."""
        weights = params.get("weights")
        if not weights:
            return f"builtin-{MLPPolicy.version}"
        digest = hashlib.sha256(Path(weights).read_bytes()).hexdigest()[:12]
        return f"builtin-{MLPPolicy.version}-w{digest}"

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """The network's interface: its state in, bounded delta actions (or chunks) out."""
        p = MLPParams(**params)
        return PolicyContract(
            observations={STATE_KEY: ArraySpec(shape=(p.state_dim,), dtype="float32")},
            action=ActionContract(dim=p.action_dim, mode=ActionMode.DELTA, gripper=GripperPolarity.POSITIVE_CLOSES,
                                  low=-1.0, high=1.0),
            chunk_length=p.chunk,
            control_hz=p.control_hz,
        )

    def metadata(self) -> dict[str, Any]:
        """The contract, sent to remote clients on connect."""
        return {"contract": self.contract(self.params.model_dump()).model_dump(mode="json")}

    def reset(self, context: PolicyContext) -> None:
        """Nothing to reset: each row depends on its own observation only."""
        pass  # stateless (see ``stateless``): each row depends on its own observation only

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One action (or chunk) per row from its state."""
        torch, p = self._torch, self.params
        state = np.asarray(observations["state"], dtype=np.float32)
        if state.ndim != 2 or state.shape[1] != p.state_dim:
            raise ValueError(f"mlp expects state of shape (B, {p.state_dim}), got {state.shape}")
        if p.threads is not None and torch.get_num_threads() != p.threads:
            torch.set_num_threads(p.threads)  # the setting is per OS thread: a server's inference thread is new
        rows = len(state)
        if p.batch_invariant:
            out = forward_blocks(torch, self.model, state)
        else:
            with torch.inference_mode():
                out = self.model(torch.from_numpy(np.ascontiguousarray(state))).numpy()
        if p.chunk == 1:
            return out
        return out.reshape(rows, p.chunk, p.action_dim)


def build_model(params: MLPParams) -> Any:
    """The network, initialised from ``params.seed`` (same weights on every machine)."""
    torch = import_torch()
    generator = torch.Generator().manual_seed(params.seed)
    widths = (params.state_dim, *params.hidden, params.chunk * params.action_dim)
    layers: list[Any] = []
    for index, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        linear = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            bound = (1.0 / n_in) ** 0.5
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
        layers.append(linear)
        layers.append(torch.nn.ReLU() if index < len(widths) - 2 else torch.nn.Tanh())
    return torch.nn.Sequential(*layers)
