"""The wire codec: msgpack with numpy arrays, byte-for-byte openpi's format.

An array travels as a msgpack map whose keys are msgpack *bin* strings::

    {b"__ndarray__": True, b"data": <raw bytes>, b"dtype": "<f4", b"shape": [39]}

and a numpy scalar as ``{b"__npgeneric__": True, b"data": <item>, b"dtype": "<f8"}``.
Decoding never unpickles: only plain dtypes are accepted (bool, integers, floats,
fixed-width strings), the byte count must match the shape, and object, void and
complex arrays are refused in both directions (as openpi does).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from assay.errors import WireError

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Default cap on one frame (websockets enforces it before decoding)."""

SESSION_KEY, SEED_KEY, STEP_KEY = "assay/session", "assay/seed", "assay/step"
"""Request keys an Assay client adds for a server that keeps sessions (see ``remote.server``)."""

CLIENT_HEADER = "X-Assay-Client"
"""The upgrade header naming an Assay client (a random token): its sessions are bound to it."""

# What a server's error frame (a text frame of one line, ``CODE: message``) starts with.
E_PROTOCOL = "E_PROTOCOL"  # a malformed request (not msgpack, not a map, a missing key, a wrong shape); close 1008
E_POLICY = "E_POLICY"  # the policy raised for this request (its traceback is in the server's log); close 1011
E_REPLY = "E_REPLY"  # the policy's answer cannot be sent (not an array of numbers); close 1011
# The session codes refuse one request; the connection stays open.
E_SESSION_UNKNOWN = "E_SESSION_UNKNOWN"  # a session past its first step that the server does not hold
E_SESSION_QUOTA = "E_SESSION_QUOTA"  # the client holds its limit of sessions
E_SESSIONS_FULL = "E_SESSIONS_FULL"  # the server holds its limit of sessions
E_SESSION_SHARE = "E_SESSION_SHARE"  # the client holds its fair share of the sessions while others may need theirs
ERROR_CODES = (E_PROTOCOL, E_POLICY, E_REPLY, E_SESSION_UNKNOWN, E_SESSION_QUOTA, E_SESSIONS_FULL, E_SESSION_SHARE)
KEEPS_CONNECTION = (E_SESSION_UNKNOWN, E_SESSION_QUOTA, E_SESSIONS_FULL, E_SESSION_SHARE)
MAX_ERROR_CHARS = 400


def error_line(code: str, message: str) -> str:
    """One line for a client: ``CODE: message``, never a traceback (newlines folded, at most 400 characters)."""
    text = " ".join(str(message).split())
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 3] + "..."
    return f"{code}: {text}"


def session_id(client: str, epoch: int, slot: int) -> str:
    """An Assay client's session: ``client/epoch/slot`` (epoch counts the client's resets)."""
    return f"{client}/{epoch}/{slot}"


def session_epoch(session: str) -> tuple[str, int] | None:
    """``(client, epoch)`` of a :func:`session_id`, or None for any other session name."""
    parts = session.split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1])

_ALLOWED_KINDS = frozenset("biufSU")
_REFUSED_KINDS = frozenset("VOc")


def _encode(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _REFUSED_KINDS:
        raise WireError(f"cannot send dtype {obj.dtype}: object, void and complex arrays have no wire form")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__} over the wire")


def _dtype(value: Any) -> np.dtype:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise WireError(f"array dtype must be a string like '<f4', got {type(value).__name__}")
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise WireError(f"unknown array dtype {value!r}") from None
    if dtype.kind not in _ALLOWED_KINDS or dtype.hasobject:
        raise WireError(f"array dtype {value!r} is not allowed (valid kinds: bool, int, uint, float, str, bytes)")
    return dtype


def _decode(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        shape, data = obj.get(b"shape"), obj.get(b"data")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise WireError(f"array shape must be a list of non-negative integers, got {shape!r}")
        if not isinstance(data, bytes):
            raise WireError("array data must be a msgpack bin string")
        expected = math.prod(shape) * dtype.itemsize
        if len(data) != expected:
            raise WireError(f"array of shape {tuple(shape)} and dtype {dtype.str} needs {expected} bytes, got "
                            f"{len(data)}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError) as exc:
            raise WireError(f"bad numpy scalar: {exc}") from None
    return obj


def packb(obj: Any) -> bytes:
    """Encode a message (dicts, lists, strings, numbers, numpy arrays and scalars)."""
    packed: bytes = msgpack.packb(obj, default=_encode, use_bin_type=True)
    return packed


def unpackb(data: bytes | bytearray | memoryview | str, max_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    """Decode a message (a text frame is refused); anything malformed raises :class:`WireError` (never unpickles)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError("expected a binary frame, got text")
    if len(data) > max_bytes:
        raise WireError(f"message of {len(data)} bytes exceeds the cap of {max_bytes}")
    try:
        return msgpack.unpackb(data, object_hook=_decode, raw=False)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.exceptions.ExtraData, msgpack.exceptions.UnpackException) as exc:
        raise WireError(f"not a valid msgpack message: {type(exc).__name__}: {exc}") from None
