"""Opening connections to a policy server: the ``remote:`` policy's params, retries with jittered backoff, and
the wait for room on a server at capacity; what a server says about itself before a campaign starts.

A connection that fails for a reason that may pass (refused, reset, timed out) is tried ``connect_attempts``
times. HTTP 503 (every connection the server holds is busy) is a server at capacity, not an outage: it is
tried again until ``capacity_wait_s`` has passed, each wait at least the ``Retry-After`` the server sends;
a session refused for room (``E_SESSIONS_FULL``, ``E_SESSION_SHARE``) is waited for the same way
(:class:`_Patience`, used by the client). The first wait on a server is said once a minute, with its deadline,
on the logger ``assay.policy_client``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from tenacity import AsyncRetrying, RetryCallState, RetryError, retry_if_exception

from assay.errors import CapacityWarning, PolicyUnavailableError, ServerBusyError, SpecError
from assay.policies.remote.wire import CLIENT_HEADER, MAX_MESSAGE_BYTES, unpackb


class RemoteParams(BaseModel):
    """The ``remote:`` policy's params: timeouts, retries, the API key's variable, image keys and sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(default=30.0, gt=0, description="per-request timeout")
    connect_attempts: int = Field(default=8, ge=1, le=100, description="connection attempts before giving up")
    capacity_wait_s: float = Field(default=300.0, ge=0, description=(
        "how long a request waits for room on a server at capacity (HTTP 503, E_SESSIONS_FULL, E_SESSION_SHARE) "
        "before its row fails"))
    backoff_s: float = Field(default=0.1, ge=0, description="first retry delay; doubles each attempt")
    max_backoff_s: float = Field(default=2.0, ge=0, description="longest delay between two attempts")
    api_key_env: str = Field(default="ASSAY_API_KEY", description="environment variable holding the API key")
    max_message_bytes: int = Field(default=MAX_MESSAGE_BYTES, gt=0)
    images: dict[str, str] | None = Field(
        default=None, description="wire key -> camera, e.g. {observation/image: front}; default: cameras in order")
    image_size: tuple[int, int] | None = Field(
        default=None, description="(height, width) every image is resized to with zero padding, as openpi's "
        "LIBERO client does (render 256, send 224), where the server's contract declares no size; default: "
        "as rendered")

    @field_validator("image_size")
    @classmethod
    def _positive(cls, size: tuple[int, int] | None) -> tuple[int, int] | None:
        if size is not None and min(size) < 1:
            raise ValueError(f"image_size {list(size)} must be two positive integers [height, width], e.g. [224, 224]")
        return size


def _headers(params: RemoteParams, client: str | None) -> dict[str, str]:
    key = os.environ.get(params.api_key_env)
    headers = {"Authorization": f"Api-Key {key}"} if key else {}
    if client is not None:
        headers[CLIENT_HEADER] = client
    return headers


BUSY = 503
MAX_RETRY_AFTER_S = 30.0  # the longest Retry-After honoured (a larger one is a server's mistake or a stall)
TELL_EVERY_S = 60.0  # at most one "waiting for room" log line per server this often
log = logging.getLogger("assay.policy_client")


def _status(exc: BaseException) -> int | None:
    from websockets.exceptions import InvalidStatus

    return exc.response.status_code if isinstance(exc, InvalidStatus) else None


def _refused(exc: BaseException, params: RemoteParams) -> str | None:
    """A reason not worth retrying (the server answered, and said no), else None."""
    status = _status(exc)
    if status in (401, 403):
        return f"the server refused the API key (HTTP {status}); set the key in ${params.api_key_env}"
    if status is not None and status != BUSY:
        return f"the server answered HTTP {status} instead of a websocket"
    return None


async def _open(url: str, params: RemoteParams, client: str | None) -> tuple[Any, dict[str, Any]]:
    """One attempt: a connection and its metadata frame."""
    from websockets.asyncio.client import ClientConnection, connect

    ws: ClientConnection = await asyncio.wait_for(
        connect(url, additional_headers=_headers(params, client), max_size=params.max_message_bytes,
                compression=None, open_timeout=None, ping_interval=None),
        params.timeout_s)
    metadata = unpackb(await asyncio.wait_for(ws.recv(), params.timeout_s), params.max_message_bytes)
    return ws, metadata if isinstance(metadata, dict) else {}


def _retry_after(exc: BaseException | None) -> float | None:
    """The seconds a 503's ``Retry-After`` header asks for (a number; an HTTP date is ignored), else None."""
    from websockets.exceptions import InvalidStatus

    if not isinstance(exc, InvalidStatus) or exc.response.status_code != BUSY:
        return None
    try:
        return max(0.0, float(exc.response.headers.get("Retry-After", "")))
    except ValueError:
        return None


def backoff_s(params: RemoteParams, attempt: int, retry_after: float | None = None) -> float:
    """The wait after failed attempt ``attempt`` (1, 2, ...): ``backoff_s`` doubling to at most ``max_backoff_s``,
    drawn within 25 % of that (jitter: clients turned away together spread out); at least ``retry_after`` (up to
    ``MAX_RETRY_AFTER_S``, plus up to 25 %) when the server said when to come back."""
    base = min(params.backoff_s * 2 ** (attempt - 1), params.max_backoff_s)
    wait = base * random.uniform(0.75, 1.25)
    if retry_after is not None:
        wait = max(wait, min(retry_after, MAX_RETRY_AFTER_S) * random.uniform(1.0, 1.25))
    return float(wait)


async def _connect(url: str, params: RemoteParams, client: str | None = None,
                   attempts: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Open one connection and read its metadata frame, retrying (backoff with jitter) what may pass: a refused
    or reset connection, a timeout (``connect_attempts`` tries, or ``attempts``), and HTTP 503, a server at its
    connection limit, until ``capacity_wait_s`` has passed (with ``attempts`` given, 503 counts as a try too)."""
    from websockets.exceptions import InvalidStatus

    tries = attempts or params.connect_attempts
    patient = attempts is None
    failures = [0]  # tries that were not a 503

    def stop(state: RetryCallState) -> bool:
        failed = state.outcome.exception() if state.outcome is not None else None
        if patient and failed is not None and _status(failed) == BUSY:
            return (state.seconds_since_start or 0.0) >= params.capacity_wait_s
        failures[0] += 1
        return failures[0] >= tries

    def wait(state: RetryCallState) -> float:
        failed = state.outcome.exception() if state.outcome is not None else None
        pause = backoff_s(params, min(state.attempt_number, 30), _retry_after(failed))
        if patient and failed is not None and _status(failed) == BUSY:
            _tell(url, "HTTP 503, every connection it holds is in use", params)
            pause = min(pause, max(0.0, params.capacity_wait_s - (state.seconds_since_start or 0.0)))
        return pause

    retrying = AsyncRetrying(stop=stop, reraise=False, wait=wait,
                             retry=retry_if_exception(lambda exc: _refused(exc, params) is None))
    try:
        opened: tuple[Any, dict[str, Any]] = await retrying(_open, url, params, client)
        return opened
    except RetryError as exhausted:
        last = exhausted.last_attempt.exception()
        busy = last is not None and _status(last) == BUSY
        detail = f"{type(last).__name__}: {last}".strip() if last is not None else "no attempt"
        if busy:
            after = f"waiting {params.capacity_wait_s:g} s (capacity_wait_s)" if patient else f"{tries} attempts"
            raise ServerBusyError(f"policy server {url} busy (HTTP 503: every connection it holds is in use) after "
                                  f"{after}, each wait at least its Retry-After") from None
        raise PolicyUnavailableError(f"policy server {url} unreachable after {failures[0]} attempts "
                                     f"({detail})") from None
    except InvalidStatus as exc:  # not retried: the server answered, and said no
        raise PolicyUnavailableError(f"policy server {url}: {_refused(exc, params)}") from None


_told: dict[str, float] = {}  # server URL -> when this process last said it waits for room there


def _tell(url: str, why: str, params: RemoteParams) -> None:
    """Say (at most once a minute per server) that requests wait for room, and how long at most."""
    now = time.monotonic()
    if now - _told.get(url, -TELL_EVERY_S) >= TELL_EVERY_S:
        _told[url] = now
        log.warning("policy server %s is at capacity (%s): each refused request waits up to %g s "
                    "(capacity_wait_s) for room, with backoff, before its episode is an error", url, why,
                    params.capacity_wait_s)


class _Patience:
    """How long one request may still wait for room: ``capacity_wait_s`` from its first refusal."""

    def __init__(self, params: RemoteParams) -> None:
        self.params, self.since, self.tries = params, 0.0, 0

    def next_wait(self) -> float | None:
        """Seconds to wait before asking again, or None once the deadline has passed."""
        now = time.monotonic()
        if not self.tries:
            self.since = now
        self.tries += 1
        left = self.since + self.params.capacity_wait_s - now
        return None if left <= 0 else min(backoff_s(self.params, min(self.tries, 30)), left)


def capacity_warning(url: str, metadata: dict[str, Any], clients: int, rows: int) -> str | None:
    """Why ``clients`` clients (workers) of ``rows`` environments each would exceed the limits ``url``
    publishes (``server`` in its metadata), or None. Past the connection limit each client shares its
    connections (slower, not failing); past the session limits episodes would be refused."""
    published = metadata.get("server")
    server: dict[str, Any] = published if isinstance(published, dict) else {}
    wanted, found = clients * rows, []
    connections = server.get("max_connections")
    if isinstance(connections, int) and wanted > connections:
        found.append(f"accepts {connections} connections and this run may open {clients} x {rows} = {wanted}: "
                     "each worker will share its connections (requests wait their turn)")
    if server.get("sessions") is True:
        total, per_client = server.get("max_sessions"), server.get("max_sessions_per_client")
        if isinstance(per_client, int) and rows > per_client:
            found.append(f"holds {per_client} sessions per client and each worker runs {rows} environments: "
                         "lower envs_per_worker or restart it with a larger --max-sessions-per-client")
        if isinstance(total, int) and wanted > total:
            found.append(f"holds {total} sessions and this run may open {wanted}: episodes past the limit will wait "
                         "for room (capacity_wait_s) and then be errors; use fewer workers or restart it with a "
                         "larger --max-sessions")
    return f"policy server {url} " + "; it ".join(found) if found else None


def warn_capacity(url: str, params: Mapping[str, Any], clients: int, rows: int) -> str | None:
    """Read the server's metadata and warn (:class:`CapacityWarning`) when :func:`capacity_warning` finds
    something; returns the message. A server that cannot be reached now is left to the run to report."""
    try:
        metadata = fetch_metadata(url, **params)
    except SpecError:
        return None
    message = capacity_warning(url, metadata, clients, rows)
    if message is not None:
        warnings.warn(message, CapacityWarning, stacklevel=2)
    return message


def fetch_metadata(url: str, **params: Any) -> dict[str, Any]:
    """Connect once, read the server's metadata frame, close (used before a campaign starts)."""
    settings = RemoteParams(**params)

    async def fetch() -> dict[str, Any]:  # named (a fresh token): a client holding no seat is given one
        ws, metadata = await _connect(url, settings, uuid.uuid4().hex)
        await ws.close()
        return metadata

    try:
        return asyncio.run(fetch())
    except PolicyUnavailableError as exc:
        raise SpecError(f"{exc}; start it with `assay serve-policy POLICY --port PORT`") from None
