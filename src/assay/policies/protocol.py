"""The Policy protocol (inference only) and the declared hooks a policy class may offer.

``reset(context)`` starts a batch of episodes; ``act(observations)`` returns one
action per active environment. The observation batch is a mapping; every array
has the batch as its first axis ``B``:

* ``"state"``: float array ``(B, state_dim)``, always present;
* ``"environment_state"``: float ``(B, n)``, the scene's low-dimensional state where a backend gives one
  (LIBERO: the position of each pick-and-place goal's object and target); recorded as
  ``observation.environment_state``, read by state BC trained with it, sent to a remote policy only when its
  contract names it;
* ``"image.<camera>"``: uint8 RGB ``(B, height, width, 3)`` for each camera the task declares;
* ``"depth.<camera>"``: float32 metres ``(B, height, width)`` when the camera has ``depth: true``;
* ``"calib.<camera>"``: float ``(B, 10)``, the *nominal* camera pose (position, forward, up, vertical
  field of view in degrees; see ``assay.sim.render.calibration``), which a camera perturbation does not move;
* ``"privileged.<name>"``: float ``(B, n)``, true simulator state a backend offers scripted experts
  (LIBERO: ``privileged.goal``, object and target positions); never recorded, and sent to a remote
  policy only when its contract names it;
* ``"instruction"``: list of ``B`` strings (the episode's instruction, paraphrased or not);
* ``"env_ids"``: int array ``(B,)``, the slot of each row in ``context.seeds``.

Only environments still running are in the batch, so a policy that keeps state
per environment keys it by ``env_ids``. Keeping per-environment state (RNGs
seeded from ``context.seeds``) is what makes results independent of batching.

``act`` answers ``(B, A)`` (one action per row) or an action chunk ``(B, H, A)``;
the runner executes the first ``replan_every`` actions of each row's chunk (all
of it by default) before asking that environment again. ``A`` is the task's
``action.dim``; values must be finite floats.

A policy *class* (what a builtin name or a ``module:attr`` entrypoint names) may
declare optional hooks; each is a small protocol below, and the loader, the
runner and the policy server look for exactly these and nothing else:

==========================  =========================================================  ==============
hook                        meaning                                                    used by
==========================  =========================================================  ==============
``Params``                  a pydantic model validating ``params`` (builtins: required)  loader
``version``                 a string: the builtin's version ``builtin-<version>``       loader
``resolve_version(params)`` static; the version from params (e.g. a weights digest)     loader
``supports(task)``          static; a reason string when the task cannot be run, else None  loader
``contract(params)``        static; the :class:`PolicyContract` for the handshake       loader
``episode_info(slot)``      instance; JSON-able facts the policy decided for a slot     runner
``step_trace(slot)``        instance; the policy's account of its latest answer for a  runner
                            slot (recorded per step as ``trace.<name>`` columns)
``act_rows(observations)``  instance; ``act`` answered row by row: each row's action or  runner
                            chunk, or the exception its row failed with; a row that
                            failed is never asked again, nor are the others (a remote
                            policy's sessions are stepped once per answer)
``metadata()``              instance; served metadata (``{"contract": ...}``)            server
``reads_frames()``          instance; ``False``: ``act`` never reads ``image.*`` or      runner
                            ``depth.*``, so frames are rendered for the video only (and
                            left out of the batch); without the hook a policy reads them
``stateless``               ``True`` (``SupportsStateless``, read by ``is_stateless``):  server
                            actions depend on each row's observation only, so
                            one instance serves every environment, batched (else one
                            instance per environment session)
==========================  =========================================================  ==============

``assay.testing.check_policy`` checks a policy against this contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel

from assay.annotations import developer_api, public_api
from assay.spec import DEPTH_PREFIX as DEPTH_PREFIX  # the keys of TaskSpec.observation_spec(), re-exported here
from assay.spec import ENVIRONMENT_STATE as ENVIRONMENT_STATE
from assay.spec import IMAGE_PREFIX as IMAGE_PREFIX
from assay.spec import STATE as STATE
from assay.spec import TaskSpec

if TYPE_CHECKING:
    from assay.policies.contract import PolicyContract

#: Observation keys (and key prefixes, ending in ``.``) a policy may receive; ``state``, ``image.`` and
#: ``depth.`` are the task's own arrays (``TaskSpec.observation_spec()``).
INSTRUCTION = "instruction"
ENV_IDS = "env_ids"
CALIB_PREFIX = "calib."
PRIVILEGED_PREFIX = "privileged."
OBSERVATION_KEYS = (STATE, ENVIRONMENT_STATE, INSTRUCTION, ENV_IDS)
OBSERVATION_PREFIXES = (IMAGE_PREFIX, DEPTH_PREFIX, CALIB_PREFIX, PRIVILEGED_PREFIX)


def is_observation_key(key: str) -> bool:
    """Whether ``key`` is one the runner documents (``state``, ``image.*``, ...)."""
    return key in OBSERVATION_KEYS or any(key.startswith(p) and len(key) > len(p) for p in OBSERVATION_PREFIXES)


@public_api
@dataclass(frozen=True)
class PolicyContext:
    """What a policy knows when a batch of episodes starts."""

    task: TaskSpec
    seeds: tuple[int, ...]
    instructions: tuple[str, ...]

    @property
    def batch_size(self) -> int:
        """The number of environments in the batch."""
        return len(self.seeds)


@public_api
@runtime_checkable
class Policy(Protocol):
    """The inference-only policy: ``reset`` once per batch of episodes, then ``act`` on each batch of observations."""

    def reset(self, context: PolicyContext) -> None:
        """Forget previous episodes; prepare ``context.batch_size`` environment slots."""

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Return actions ``(B, A)`` or chunks ``(B, H, A)`` for the ``B`` rows of ``observations``."""


@public_api
@runtime_checkable
class SupportsParams(Protocol):
    """A class whose constructor keywords are validated by a pydantic model."""

    Params: ClassVar[type[BaseModel]]


@public_api
@runtime_checkable
class SupportsVersion(Protocol):
    """A class with a fixed version string (a builtin's is ``builtin-<version>``)."""

    version: ClassVar[str]


@public_api
@runtime_checkable
class SupportsResolveVersion(Protocol):
    """A class whose version depends on its params (weights are part of the identity)."""

    @staticmethod
    def resolve_version(params: Mapping[str, Any]) -> str:
        """The version for these params."""


@public_api
@runtime_checkable
class SupportsTaskCheck(Protocol):
    """A class that can refuse a task before anything is built: a reason string, or None."""

    @staticmethod
    def supports(task: TaskSpec) -> str | None:
        """None to accept the task, else the reason it is refused."""


@public_api
@runtime_checkable
class SupportsContract(Protocol):
    """A class that declares its interface for the contract handshake."""

    @staticmethod
    def contract(params: Mapping[str, Any]) -> PolicyContract:
        """The declared interface for these params."""


@public_api
@runtime_checkable
class SupportsEpisodeInfo(Protocol):
    """A policy that reports what it decided for an environment slot (recorded as ``policy_info``)."""

    def episode_info(self, slot: int) -> Mapping[str, Any]:
        """What the policy decided for environment slot ``slot`` in its episode."""


@public_api
@runtime_checkable
class SupportsStepTrace(Protocol):
    """A policy that explains each answer for a slot (recorded per step as ``trace.<name>``)."""

    def step_trace(self, slot: int) -> Mapping[str, Any]:
        """The explanation of the slot's latest answer, one value per trace column."""


@public_api
@runtime_checkable
class SupportsRowAnswers(Protocol):
    """A policy that answers each row of a batch on its own (a remote policy: a request per environment).

    Without this hook, when a batched ``act`` raises, the runner asks each row again alone, which steps a
    stateful row twice. With it, the runner calls ``act_rows`` instead of ``act``: a row's failure is that row's
    (its episode ends as ``error`` with the exception's message), the answered rows go on, and nothing is asked
    again."""

    def act_rows(self, observations: Mapping[str, Any]) -> Sequence[np.ndarray | Exception]:
        """Per row of ``observations``: its action ``(A,)`` or chunk ``(H, A)``, or the exception it failed with."""


@public_api
@runtime_checkable
class SupportsFrameNeeds(Protocol):
    """A policy that says whether its ``act`` reads camera frames (``image.*``, ``depth.*``); asked after
    each ``reset``. One that answers False is given none, and the runner renders none for it."""

    def reads_frames(self) -> bool:
        """Whether ``act`` reads camera frames in the episodes since the last ``reset``."""


@developer_api
def reads_frames(policy: Policy) -> bool:
    """Whether ``policy`` reads camera frames: its ``reads_frames()`` hook, True without one."""
    return bool(policy.reads_frames()) if isinstance(policy, SupportsFrameNeeds) else True


@public_api
@runtime_checkable
class SupportsStateless(Protocol):
    """A policy class that says whether each row's action depends on that row's observation only (``True``:
    one instance serves every environment, batched; else the server keeps one instance per session)."""

    stateless: ClassVar[bool]


@developer_api
def is_stateless(policy: object) -> bool:
    """Whether ``policy`` (a class or an instance) declares ``stateless = True``; False without the hook."""
    return isinstance(policy, SupportsStateless) and policy.stateless is True


@public_api
@runtime_checkable
class SupportsMetadata(Protocol):
    """A policy that describes itself to remote clients (the server sends this on connect)."""

    def metadata(self) -> Mapping[str, Any]:
        """The description sent to remote clients on connect."""


@public_api
@runtime_checkable
class PolicyClass(SupportsParams, SupportsVersion, Protocol):
    """What a builtin policy class is: ``Params``, ``version``, and a constructor taking the params."""

    def __call__(self, **params: Any) -> Policy:
        """Build a policy from validated params."""
