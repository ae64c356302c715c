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
    {op: steps, sessions: [n session numbers],    columns, when every step succeeded alike:
     actions: <array, n rows>,                      {observation: {name: <array, n rows>}, info_keys: [k names],
     skip_frames: [n booleans]}                      values: <f8 n x (4 + k): reward, terminated, truncated,
                                                              success, then the info values in info_keys' order>}
                                                   else {replies: [each step's answer as for step, or its error line]}
    {op: close, session}                         {ok}

One session is one environment: the client numbers them, the server builds the task's environment on
``open`` and keeps it until ``close`` or the connection ends. ``skip_frames`` on a step is the
backend's ``skip_next_frames()`` for that step, so frames on demand cost no round trip. ``steps`` is a worker's
lockstep batch in one round trip (:mod:`assay.sim.together`): the server steps the sessions in the order given, row
``i`` of ``actions`` for ``sessions[i]``. When every step succeeded and their observations share names, shapes and
dtypes and their infos share keys (a batch of one task: the common case), the answer is columns, row ``i``
session ``i``'s; otherwise each step is answered as ``step`` would be, a fault (``E_SIM``) or a refusal
(``E_SESSION``) as that step's error line. The request itself is checked first, so whatever a backend's step raises
in a batch is that step's ``E_SIM`` (a lone ``step`` takes a ``KeyError`` or ``TypeError`` for a malformed request,
``E_PROTOCOL``). Columns carry one array per observation name and one matrix of numbers
where a map per step carried ``n`` maps: about half the client's CPU to decode a batch of 4 Meta-World steps (20 µs
against 37, hot), the server's about the same. A malformed request refuses the whole batch
(``E_PROTOCOL``, and the connection closes, as for ``step``). ``assay-sim/1`` sent a list of step maps and always
answered per step; a side of either version refuses the other at the hello (``E_VERSION``).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from assay.errors import SimulatorRefused
from assay.policies.remote.wire import error_line, packb, unpackb
from assay.sim.protocol import Observation, Transition

PROTOCOL = "assay-sim/2"

# What an error frame starts with. E_PROTOCOL as on the policy side (a malformed request; the connection closes).
E_PROTOCOL = "E_PROTOCOL"
E_VERSION = "E_VERSION"  # the handshake found another protocol, task catalogue, code or package versions; closes
E_BUSY = "E_BUSY"  # every client slot of the server is taken; closes
E_TASK = "E_TASK"  # the server does not have the task, or cannot build it; the connection stays
E_SESSION = "E_SESSION"  # a request for a session the connection did not open; the connection stays
E_SIM = "E_SIM"  # the backend raised on reset or step (its traceback is in the server's log); the connection stays
CLOSES = (E_PROTOCOL, E_VERSION, E_BUSY)
ERROR_CODES = (E_PROTOCOL, E_VERSION, E_BUSY, E_TASK, E_SESSION, E_SIM)

__all__ = ["PROTOCOL", "ERROR_CODES", "decode_steps", "decode_transition", "encode_steps", "encode_transition",
           "error_line", "packb", "split_error", "unpackb"]


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


def encode_steps(outcomes: list[Transition | str]) -> dict[str, Any]:
    """A ``steps`` answer: columns when every step succeeded alike, else each step's answer or error line."""
    columns = _columns(outcomes)
    if columns is not None:
        return columns
    replies: list[dict[str, Any] | str] = []
    for outcome in outcomes:
        try:
            replies.append(encode_transition(outcome) if isinstance(outcome, Transition) else outcome)
        except (TypeError, ValueError) as exc:  # info is float scalars only: anything else is the backend's fault
            replies.append(error_line(E_SIM, f"step answered a value the wire cannot carry: {exc}"))
    return {"replies": replies}


def _columns(outcomes: list[Transition | str]) -> dict[str, Any] | None:
    """Columns, when every outcome is a transition and they share observation names, shapes and dtypes and info keys
    (in order): each observation name's rows stacked, and one float64 matrix of ``reward, terminated, truncated,
    success`` and the info values in ``info_keys``' order (booleans as 0 and 1; float64 carries every value exactly).
    None otherwise."""
    if not outcomes or not all(isinstance(outcome, Transition) for outcome in outcomes):
        return None
    done = cast(list[Transition], outcomes)
    names, keys = tuple(done[0].observation), tuple(done[0].info)
    if not all(tuple(t.observation) == names and tuple(t.info) == keys for t in done):
        return None
    observation = {}
    for name in names:
        arrays = [t.observation[name] for t in done]
        head = arrays[0]
        if not all(type(a) is np.ndarray and a.shape == head.shape and a.dtype == head.dtype for a in arrays):
            return None
        observation[name] = np.stack(arrays)
    try:  # as encode_transition converts each value: float() and bool(), so either way answers alike
        values = np.array([(float(t.reward), bool(t.terminated), bool(t.truncated), bool(t.success),
                            *map(float, t.info.values())) for t in done], dtype=np.float64)
    except (TypeError, ValueError):  # a value that is not a number: answered per step (its E_SIM)
        return None
    return {"observation": observation, "info_keys": list(keys), "values": values}


def decode_steps(reply: dict[str, Any], count: int, where: str) -> list[Transition | dict[str, Any] | str]:
    """A ``steps`` answer for ``count`` steps: columns as transitions (each observation a row of the frame's arrays,
    read-only), or the per-step answers as sent (maps and error lines). A malformed answer is refused in one
    line."""
    if "replies" in reply:
        replies = reply["replies"]
        if not isinstance(replies, list) or len(replies) != count:
            raise SimulatorRefused(f"{where} answered {count} steps with {replies!r:.80}: it does not speak "
                                   f"{PROTOCOL}; point the campaign's `simulators:` at `assay serve-sim`")
        return replies
    try:
        observation, keys, values = reply["observation"], reply["info_keys"], reply["values"]
        arrays = list(decode_observation(observation, where).items())
        if not (isinstance(keys, list) and values.dtype == np.float64 and values.shape == (count, 4 + len(keys))
                and all(array.shape[:1] == (count,) for _, array in arrays)):
            raise ValueError("columns of other lengths")
        names = [str(key) for key in keys]  # a row is 4 + len(names) long: the shape check above says so
        return [Transition({name: array[i, ...] for name, array in arrays}, row[0], row[1] != 0.0, row[2] != 0.0,
                           row[3] != 0.0, dict(zip(names, row[4:], strict=False)))
                for i, row in enumerate(values.tolist())]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SimulatorRefused(f"{where} answered {count} steps with malformed columns ({exc}): it does not speak "
                               f"{PROTOCOL}; point the campaign's `simulators:` at `assay serve-sim`") from None
