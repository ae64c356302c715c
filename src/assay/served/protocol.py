"""The served-simulator protocol: messages, error codes and the handshake, on the policy side's wire.

Frames are the policy side's (:mod:`assay.policies.remote.wire`): binary msgpack maps with numpy
arrays as openpi encodes them; an error is one text frame, ``CODE: message``. A connection opens with
the server's facts (sent first, as a policy server sends its metadata, so a client knows at once what it
reached; ``E_BUSY`` instead when no server process is free), the client's ``hello`` and the server's answer,
then carries requests, each answered in order::

    client                                       server
                                                 {protocol, backend, tasks_hash, code_hash, versions}
                                                   or  "E_BUSY: ..." and close
    {op: hello, protocol, backend, tasks_hash,   {ok}   or  "E_VERSION: ..." / "E_PROTOCOL: ..." and close
     code_hash, versions}
    {op: check, task, task_hash}                 {ok, task_hash}   or  "E_TASK: ..." (connection stays)
    {op: open, session, task}                    {ok, task_hash}   or  "E_TASK: ..." (connection stays)
    {op: reset, session, seed, variant}          {observation, initial_conditions, renderer}
    {op: step, session, action, skip_frames}     {observation, reward, terminated, truncated, success, info}
    {op: steps, steps: [{session, action,         {replies: [each step's answer, or its error line]}
                         skip_frames}, ...]}
    {op: close, session}                         {ok}

One session is one environment: the client numbers them, the server builds the task's environment on
``open`` and keeps it until ``close`` or the connection ends. ``skip_frames`` on a step is the
backend's ``skip_next_frames()`` for that step, so frames on demand cost no round trip. ``steps`` is a worker's
lockstep batch in one round trip (:mod:`assay.sim.together`): the server steps the sessions in the order given and
answers each as ``step`` would, a fault (``E_SIM``) or a refusal (``E_SESSION``) as that step's error line; a
malformed step refuses the whole request (``E_PROTOCOL``, and the connection closes, as for ``step``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from assay.errors import SimulatorRefused
from assay.policies.remote.wire import error_line, packb, unpackb
from assay.sim.protocol import Observation, Transition

PROTOCOL = "assay-sim/1"

# What an error frame starts with. E_PROTOCOL as on the policy side (a malformed request; the connection closes).
E_PROTOCOL = "E_PROTOCOL"
E_VERSION = "E_VERSION"  # the handshake found another protocol, task catalogue, code or package versions; closes
E_BUSY = "E_BUSY"  # every client slot of the server is taken; closes
E_TASK = "E_TASK"  # the server does not have the task, or cannot build it; the connection stays
E_SESSION = "E_SESSION"  # a request for a session the connection did not open; the connection stays
E_SIM = "E_SIM"  # the backend raised on reset or step (its traceback is in the server's log); the connection stays
CLOSES = (E_PROTOCOL, E_VERSION, E_BUSY)
ERROR_CODES = (E_PROTOCOL, E_VERSION, E_BUSY, E_TASK, E_SESSION, E_SIM)

__all__ = ["PROTOCOL", "ERROR_CODES", "decode_transition", "encode_transition", "error_line", "packb", "split_error",
           "unpackb"]


def split_error(frame: str) -> tuple[str, str]:
    """``(code, message)`` of an error frame (``("", frame)`` when it names no known code)."""
    code, _, message = frame.partition(": ")
    return (code, message) if code in ERROR_CODES else ("", frame)


def encode_transition(transition: Transition) -> dict[str, Any]:
    """A step's answer as a message."""
    return {"observation": transition.observation, "reward": float(transition.reward),
            "terminated": bool(transition.terminated), "truncated": bool(transition.truncated),
            "success": bool(transition.success), "info": {k: float(v) for k, v in transition.info.items()}}


def decode_observation(value: Any, where: str) -> Observation:
    """The observation of a reply: names to arrays (a malformed one is refused in one line)."""
    if not isinstance(value, dict) or not all(isinstance(v, np.ndarray) for v in value.values()):
        raise SimulatorRefused(f"{where} sent an observation that is not a map of arrays: it does not speak "
                               f"{PROTOCOL}; point the campaign's `simulators:` at `assay serve-sim`")
    return {str(name): array for name, array in value.items()}


def decode_transition(reply: dict[str, Any], where: str) -> Transition:
    """A step's answer from its message (the arrays are the frame's, read-only)."""
    try:
        return Transition(decode_observation(reply["observation"], where), float(reply["reward"]),
                          bool(reply["terminated"]), bool(reply["truncated"]), bool(reply["success"]),
                          {str(k): float(v) for k, v in reply["info"].items()})
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SimulatorRefused(f"{where} answered a step without {exc}: it does not speak {PROTOCOL}; "
                               "point the campaign's `simulators:` at `assay serve-sim`") from None
