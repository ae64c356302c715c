"""``bc``: a behaviour-cloned MLP read from a checkpoint written by ``assay train-bc``.

The checkpoint (``torch.save`` of plain dicts and tensors, loaded with
``weights_only=True`` so it never unpickles code) holds the network weights, the
observation normalisation, the list of tasks it was trained on (the task input is
a one-hot over that list: multi-task conditioning; a task outside the list gets
zeros and ``episode_info`` says so) and the provenance of every training episode
(task hash, variant key, seed). A checkpoint trained with ``conditioning:
instruction`` (``assay.learning.language``) is conditioned instead on the sentence
embedding of each episode's instruction (``assay.policies.language``), so it reads
language and is hurt by what the semantic factors do to the words. The policy's
version is the content hash of the checkpoint file, so retraining gives a new
identity in every episode key.

Leakage: ``episode_info`` reports ``trained_on_seed: true`` for an episode whose
task hash and seed appear in the training provenance (the exact check with the
variant is ``assay.learning.leakage``). The network runs one row per call
(``mlp.forward_rows``), so every row's action is bitwise independent of its
batch-mates; inference runs on one torch thread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from assay.errors import SpecError
from assay.policies.contract import (
    PROMPT_KEY,
    STATE_KEY,
    ActionContract,
    ActionMode,
    ArraySpec,
    GripperPolarity,
    PolicyContract,
)
from assay.policies.features import ActionHead, InputFeatures
from assay.policies.language import EMBED_DIM, embed_each
from assay.policies.mlp import forward_rows, import_torch
from assay.policies.protocol import PolicyContext
from assay.spec import ENVIRONMENT_STATE, TaskSpec
from assay.spec.state_layout import Quantity, Segment, StateLayout

CHECKPOINT_FORMAT = "assay-bc/2"
LEGACY_FORMATS = ("assay-bc/1",)  # read as written: raw state normalised by (mean, std), every action learned


class BCParams(BaseModel):
    """The ``bc`` policy's params: the checkpoint to load."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="a checkpoint written by 'assay train-bc'")


def build_network(state_dim: int, n_tasks: int, hidden: tuple[int, ...], action_dim: int) -> Any:
    """The BC network: [normalised state, task one-hot] -> hidden ReLU layers -> action (linear)."""
    torch = import_torch()
    widths = (state_dim + n_tasks, *hidden, action_dim)
    layers: list[Any] = []
    for index, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(torch.nn.Linear(n_in, n_out))
        if index < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def load_checkpoint_data(path: str | Path) -> dict[str, Any]:
    """Any Assay checkpoint's dict (``bc`` or ``pixel-bc``); SpecError naming the file if missing or unreadable."""
    torch = import_torch()
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"bc checkpoint {path} does not exist (write one with 'assay train-bc')")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a bad file
        raise SpecError(f"{path} is not a readable bc checkpoint: {exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path} is not a bc checkpoint (format {CHECKPOINT_FORMAT!r} expected)")
    return data


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict; SpecError naming the file when it is missing or not a (state) BC checkpoint."""
    data = load_checkpoint_data(path)
    if data.get("format") not in (CHECKPOINT_FORMAT, *LEGACY_FORMATS):
        pixel = str(data.get("format", "")).startswith("assay-pixel-bc")
        hint = f"; it is a pixel checkpoint: run it as pixel-bc:{path}" if pixel else ""
        raise SpecError(f"{path} is not a bc checkpoint (format {CHECKPOINT_FORMAT!r} expected){hint}")
    return data


def checkpoint_version(path: str | Path) -> str:
    """The version a checkpoint's episodes record: the policy's version and the checkpoint's content digest."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    return f"builtin-{BCPolicy.version}-c{digest}"


def checkpoint_io(data: Mapping[str, Any], state_dim: int) -> tuple[InputFeatures, ActionHead, str]:
    """A checkpoint's input map, action head and inputs (``state`` or ``state+environment``); a legacy
    ``assay-bc/1`` checkpoint's raw-state normalisation as an input map over a layout of unknown meaning."""
    if data.get("format") in LEGACY_FORMATS:
        mean, std = data["obs_mean"].numpy().astype(np.float64), data["obs_std"].numpy().astype(np.float64)
        layout = StateLayout((Segment("state", Quantity.OTHER, 0, state_dim),))
        action_dim = int(data["config"]["action_dim"])
        head = ActionHead(np.zeros(action_dim, bool), np.zeros(action_dim))
        return InputFeatures(layout, mean, std, np.ones(len(mean), bool)), head, "state"
    return (InputFeatures.from_checkpoint(data["features"]), ActionHead.from_checkpoint(data["action_head"]),
            str(data["config"].get("inputs", "state")))


class BCPolicy:
    """Behaviour cloning: ``action = clip(head(MLP([features(state), onehot(task)])), -1, 1)`` (the features and
    the head: ``assay.policies.features``)."""

    Params = BCParams
    version = "1"

    def __init__(self, **params: Any) -> None:
        self.params = BCParams(**params)
        torch = import_torch()
        self._torch = torch
        data = load_checkpoint(self.params.path)
        config = data["config"]
        self.tasks: list[str] = list(config["tasks"])
        self.state_dim, self.action_dim = int(config["state_dim"]), int(config["action_dim"])
        self.features, self.head, self.inputs = checkpoint_io(data, self.state_dim)
        self.by_instruction = config.get("conditioning", "task") == "instruction"
        width = EMBED_DIM if self.by_instruction else len(self.tasks)
        self.model = build_network(self.features.width, width, tuple(config["hidden"]), self.head.learned)
        self.model.load_state_dict(data["state_dict"])
        self.model.eval()
        self.trained = {(str(p["task_id"]), int(p["seed"])) for p in data["provenance"]}  # the scene, not the horizon
        self._onehot = np.zeros(len(self.tasks), np.float32)
        self._rows = np.zeros((0, width), np.float32)  # per slot: the instruction's embedding
        self._flags: list[dict[str, Any]] = []

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """Accept every task: the contract handshake checks the dimensions and the tasks."""
        return None

    @staticmethod
    def resolve_version(params: Mapping[str, Any]) -> str:
        """The checkpoint's content version; a missing checkpoint is a SpecError naming how to write one."""
        path = params.get("path")
        if not path or not Path(path).is_file():
            raise SpecError(f"bc checkpoint {path} does not exist (write one with 'assay train-bc')")
        return checkpoint_version(path)

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """The checkpoint's interface: state (and instruction, when conditioned on it) in, bounded deltas out; a
        task one-hot checkpoint runs only the tasks it was trained on."""
        config = load_checkpoint(BCParams(**params).path)["config"]
        by_instruction = config.get("conditioning") == "instruction"
        reads = {PROMPT_KEY: ArraySpec(shape=(), dtype="str")} if by_instruction else {}
        return PolicyContract(  # the prompt is declared when it is read: what leakage counts as perceived
            observations={STATE_KEY: ArraySpec(shape=(int(config["state_dim"]),), dtype="float32"), **reads},
            action=ActionContract(dim=int(config["action_dim"]), mode=ActionMode.DELTA,
                                  gripper=GripperPolarity.POSITIVE_CLOSES, low=-1.0, high=1.0),
            chunk_length=1,
            tasks=None if by_instruction else tuple(config["tasks"]),
        )

    def reset(self, context: PolicyContext) -> None:
        """Prepare each slot's conditioning (task one-hot or instruction embedding) and its leakage flags."""
        if self.by_instruction:
            self._rows = embed_each(context.instructions)
        self._onehot = np.zeros(len(self.tasks), np.float32)
        known = context.task.id in self.tasks
        if known:
            self._onehot[self.tasks.index(context.task.id)] = 1.0
        self._flags = [{"task_known": known, "trained_on_seed": (context.task.id, int(seed)) in self.trained}
                       for seed in context.seeds]

    def episode_info(self, slot: int) -> dict[str, Any]:
        """The slot's flags: whether the task was known and the episode's seed was trained on."""
        return dict(self._flags[slot]) if slot < len(self._flags) else {}

    def predict(self, states: np.ndarray, onehot: np.ndarray | None = None,
                environment: np.ndarray | None = None) -> np.ndarray:
        """Actions for a (B, state_dim) array (and the (B, n) environment states of a ``state+environment``
        checkpoint), one row per call so rows never affect each other."""
        torch = self._torch
        states = np.asarray(states, dtype=np.float32).astype(np.float64)  # float32: what the wire carries
        if states.ndim != 2 or states.shape[1] != self.state_dim:
            raise ValueError(f"bc expects state of shape (B, {self.state_dim}), got {states.shape}")
        raw = states
        if self.inputs == "state+environment":
            if environment is None:
                raise ValueError("this bc checkpoint reads environment_state (trained with --obs state+environment), "
                                 "and the observation has none: its backend gives none")
            environment = np.asarray(environment, dtype=np.float32).astype(np.float64).reshape(len(states), -1)
            raw = np.concatenate([states, environment], 1)
        rows = len(states)
        condition = self._onehot if onehot is None else onehot
        hot = np.broadcast_to(condition, (rows, condition.shape[-1]))
        inputs = np.concatenate([self.features.apply(raw), hot], axis=1).astype(np.float32)
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)  # tiny network: one thread is fastest and keeps kernels the same everywhere
        out = forward_rows(torch, self.model, inputs)
        clipped: np.ndarray = np.clip(self.head.assemble(out), -1.0, 1.0)
        return clipped

    def task_onehot(self, task_id: str) -> np.ndarray:
        """The task's one-hot row (all zeros for a task the checkpoint never saw)."""
        hot = np.zeros(len(self.tasks), np.float32)
        if task_id in self.tasks:
            hot[self.tasks.index(task_id)] = 1.0
        return hot

    def reads_frames(self) -> bool:
        """No camera frame is read (the runner renders none for it)."""
        return False

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """One action per row from its state (and environment state) and its slot's conditioning."""
        environment = observations.get(ENVIRONMENT_STATE)
        if self.by_instruction:
            slots = np.asarray(observations.get("env_ids", np.arange(len(observations["state"]))), dtype=int)
            return self.predict(observations["state"], self._rows[slots], environment)
        return self.predict(observations["state"], environment=environment)
