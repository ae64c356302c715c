"""The remote policy client: a campaign's ``remote:ws://host:port`` policy.

Each environment row becomes one openpi request: ``observation/state`` (in the
dtype the server's contract declares, float32 when it declares none), ``prompt``,
each camera's RGB image under the wire key openpi policies read
(``observation/image``, ``observation/wrist_image``; ``images:`` in the
campaign's policy params maps them otherwise; a served Assay camera policy whose
contract names ``image.<camera>`` gets exactly those keys) as uint8 HWC, resized with padding
to the size the contract declares (openpi's ``resize_with_pad``), and any other
observation the contract names. The server's metadata frame is read before the
first request is built, so every request of a campaign has the same form. When the
server keeps sessions (an Assay server: ``server.sessions`` in its metadata), each
request also names its environment's session (``assay/session``: unique per reset and
slot), the episode's seed (``assay/seed``) and its index in the episode (``assay/step``),
so a stateful policy keeps its state per environment on the server too. The rows of
a batch travel concurrently on a pool of connections (openpi's protocol answers
one request per connection at a time), so a server with a dynamic batcher can
gather them, and those of other workers, into one forward pass. The reply's
``actions`` is one action ``(A,)`` or a chunk ``(H, A)``.

Connections are opened with retries (tenacity): exponential backoff with jitter, by default
8 attempts from 0.1 s doubling to at most 2 s, each wait within 25 % of that (5 to 9 s in all), so a
server that restarts within about 5 s is
reached again and clients turned away together do not come back together (``connect_attempts``,
``backoff_s`` and ``max_backoff_s`` are policy params). A server at capacity is waited for, not counted
as an outage: HTTP 503 (the server holds its limit of busy connections), and a new session refused for
a full table (``E_SESSIONS_FULL``) or for this client's fair share of it (``E_SESSION_SHARE``), are asked
again with the same backoff until ``capacity_wait_s`` (300 s by default) has passed since the first
refusal, which the client states in a log line (logger ``assay.policy_client``) when it starts waiting
and in the row's error when it gives up. A 503's wait is at least the ``Retry-After`` the server sends
(up to 25 % more; at most ``MAX_RETRY_AFTER_S``): an Assay server says when an idle connection can
next be evicted for a newcomer, so a client arriving right after an idle crowd waits for its seat
instead of giving up first. A client that already holds connections does not wait for more: it sends
its rows over the ones it has, one request at a time on each, so a campaign wider than the server's
connection limit runs slower instead of failing. A request whose idle connection the server closed
(1000 idle, 1013 evicted: the server drops such a request unread) is sent again, over another
connection the client holds, else a fresh one.

Rows are answered one by one (``act_rows``, the runner's ``SupportsRowAnswers`` hook): a row that fails
is that row's, and no row is ever sent twice once the server may have read it, so a stateful session is
stepped exactly once per answer. A server that is gone (refused, closed, timed out, busy past the wait)
gives each row it did not answer a :class:`PolicyUnavailableError`; an error frame (one coded line: the
server's policy raised, a session refused) a :class:`RemotePolicyError`. A request that timed out or whose
connection broke after it was sent may have been served: its row fails, and is not asked again. ``act``
raises the first of them for the batch.

Each client names itself to the server with a random token (``X-Assay-Client``): its sessions are
bound to it, so no other client can reach them. :func:`capacity_warning` compares what a campaign
will open with the limits a server publishes in its metadata.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.errors import EpisodeError, PolicyUnavailableError, RemotePolicyError, ServerBusyError, WireError
from assay.policies.contract import PROMPT_KEY, STATE_KEY, ImageLayout, PolicyContract, camera_wire_keys
from assay.policies.protocol import PolicyContext
from assay.policies.remote.connecting import (
    RemoteParams,
    _connect,
    _Patience,
    _tell,
    capacity_warning,
    fetch_metadata,
    warn_capacity,
)
from assay.policies.remote.wire import (
    E_SESSION_SHARE,
    E_SESSIONS_FULL,
    KEEPS_CONNECTION,
    SEED_KEY,
    SESSION_KEY,
    STEP_KEY,
    packb,
    session_id,
    unpackb,
)

__all__ = ["RemoteParams", "RemotePolicy", "capacity_warning", "fetch_metadata", "warn_capacity", "wire_image"]

RETRYABLE_CLOSE = (1000, 1013)  # the server closed an idle connection (idle timeout, evicted): resend on a new one
WAITED_CODES = (E_SESSIONS_FULL, E_SESSION_SHARE)  # refusals that pass as other episodes end: waited for


class _Resend(Exception):
    """The server closed an idle connection before reading the request: send it again elsewhere."""

    def __init__(self, error: PolicyUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


_RESENT = object()  # what :meth:`RemotePolicy._answer` gives for a request to send again


class _Loop:
    """An asyncio event loop in a daemon thread: the client's connections live there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="assay-remote-policy", daemon=True)
        self.thread.start()

    def run(self, coroutine: Any, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


class RemotePolicy:
    """A Policy whose ``act`` is answered by an openpi-protocol server."""

    Params = RemoteParams
    version = "1"

    def __init__(self, url: str, **params: Any) -> None:
        self.url = url
        self.params = RemoteParams(**params)
        self.metadata: dict[str, Any] = {}
        self.contract: PolicyContract | None = None
        self._loop: _Loop | None = None
        self._idle: list[Any] = []
        self._images: dict[str, str] = {}  # wire key -> camera, set at reset from the task's cameras
        self._batch_sizes: dict[int, int] = {}  # env slot -> the server's batch size for its latest request
        self._seeds: tuple[int, ...] = ()
        self._client = uuid.uuid4().hex  # names this client's sessions on the server
        self._epoch = 0  # counts resets: a new one tells the server the previous episodes are over
        self._steps: dict[int, int] = {}  # env slot -> requests sent in its episode
        self._pool_cap: int | None = None  # connections the server let this client hold (after a 503)

    @staticmethod
    def supports(task: Any) -> str | None:
        """Accept every task: the server answers what it serves."""
        return None

    def reset(self, context: PolicyContext) -> None:
        """Start a batch: camera keys for the wire, the seeds, and a new epoch (the server ends the old episodes)."""
        # openpi servers have no reset; the served policy is a function of its observation
        self._images = camera_wire_keys([c.name for c in context.task.cameras], self.params.images)
        self._seeds, self._epoch, self._steps = tuple(context.seeds), self._epoch + 1, {}
        self._pool_cap = None  # a new batch tries for a connection per environment again

    def act_rows(self, observations: Mapping[str, Any]) -> list[np.ndarray | Exception]:
        """Send every row to the server (one connection per environment, within the server's cap): per row, its
        answer or the exception it failed with. No row is sent twice once the server may have read it."""
        if self._loop is None:
            self._loop = _Loop()
        slots = [int(s) for s in np.asarray(observations.get("env_ids", np.arange(len(observations["state"]))))]
        replies = self._loop.run(self._round(observations, slots))
        answers: list[np.ndarray | Exception] = []
        for slot, reply in zip(slots, replies, strict=True):
            if isinstance(reply, Exception):
                self._batch_sizes.pop(slot, None)
                answers.append(reply)
            else:
                self._batch_sizes[slot] = reply[1]
                answers.append(reply[0])
        return answers

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Every row's answer, stacked; the batch raises the first row's failure (a server gone first)."""
        answers = self.act_rows(observations)
        for answer in answers:
            if isinstance(answer, PolicyUnavailableError):
                raise answer
        for answer in answers:
            if isinstance(answer, Exception):
                raise answer
        return _stack([answer for answer in answers if isinstance(answer, np.ndarray)], self.url)

    def step_trace(self, slot: int) -> dict[str, float]:
        """The server's batch size for the request that produced this slot's action (``trace.server_batch_size``)."""
        size = self._batch_sizes.get(slot)
        return {"server_batch_size": float(size)} if size is not None else {}

    def episode_info(self, slot: int) -> dict[str, Any]:
        """What the server said about itself (its metadata frame, contract aside), kept with each episode."""
        return {"server": {k: v for k, v in self.metadata.items() if k != "contract"}} if self.metadata else {}

    def _requests(self, observations: Mapping[str, Any], slots: list[int]) -> list[dict[str, Any]]:
        state = np.asarray(observations["state"])
        server = self.metadata.get("server")
        sessions = isinstance(server, dict) and server.get("sessions") is True
        dtype: np.dtype[Any] = np.dtype(np.float32)
        if self.contract is not None and STATE_KEY in self.contract.observations:
            dtype = np.dtype(self.contract.observations[STATE_KEY].dtype)
        images = {key: (camera, self._image_target(key)) for key, camera in self._wire_images().items()
                  if f"image.{camera}" in observations}
        extra = [k for k in (self.contract.observations if self.contract else {})
                 if k not in (STATE_KEY, PROMPT_KEY) and k not in images]
        rows = []
        for row in range(len(state)):
            request: dict[str, Any] = {STATE_KEY: np.ascontiguousarray(state[row], dtype=dtype),
                                       PROMPT_KEY: str(observations["instruction"][row])}
            for key, (camera, target) in images.items():
                request[key] = wire_image(observations[f"image.{camera}"][row], *target)
            for key in extra:
                name = key.split("/", 1)[-1]
                if name in observations:
                    request[key] = np.ascontiguousarray(observations[name][row])
            if sessions:
                slot = slots[row]
                step = self._steps.get(slot, 0)
                self._steps[slot] = step + 1
                request.update({SESSION_KEY: session_id(self._client, self._epoch, slot), STEP_KEY: step,
                                SEED_KEY: int(self._seeds[slot]) if slot < len(self._seeds) else 0})
            rows.append(request)
        return rows

    def _wire_images(self) -> dict[str, str]:
        """Wire key -> camera for this request: the ``image.<camera>`` keys a served Assay camera policy's
        contract names (each under its own key), else every camera under the openpi wire keys."""
        named = {key: key[len("image."):] for key in (self.contract.images if self.contract else {})
                 if key.startswith("image.")}
        return named or self._images

    def _image_target(self, key: str) -> tuple[tuple[int, int] | None, ImageLayout]:
        """The (height, width) and layout the server's contract declares for an image key, else the campaign's
        ``image_size`` (None: as rendered)."""
        fallback = self.params.image_size, ImageLayout.HWC
        if self.contract is None:
            return fallback
        if key in self.contract.images:
            spec = self.contract.images[key]
            return (spec.height, spec.width), spec.layout
        declared = self.contract.observations.get(key)
        if declared is not None and len(declared.shape) == 3:
            return (declared.shape[0], declared.shape[1]), ImageLayout.HWC
        return fallback

    async def _round(self, observations: Mapping[str, Any], slots: list[int]) -> list[Any]:
        """Per row: ``(actions, server batch size)`` or the exception it failed with. The rows share the
        connections this client holds, each taking the next row when it is free; a row whose connection the
        server closed unread goes to another (a fresh one when none is left)."""
        from websockets.protocol import State

        self._idle = [ws for ws in self._idle if ws.state is State.OPEN]  # a restarted server left stale ones
        try:
            await self._grow(len(slots))
        except PolicyUnavailableError as exc:  # no connection at all: no row was sent
            return [exc] * len(slots)
        # built only now: the contract (state dtype, image sizes) is known before the first request
        requests = self._requests(observations, slots)
        connections, self._idle = self._idle[: len(requests)], self._idle[len(requests):]
        results: list[Any] = [None] * len(requests)
        todo, lanes = deque(range(len(requests))), [len(connections)]
        resent: dict[int, float] = {}  # row -> when the server first closed its connection unread

        async def lane(ws: Any) -> None:  # one connection answers one request at a time
            try:
                while todo:
                    row = todo.popleft()
                    ws, result = await self._answer(ws, requests[row])
                    if result is not _RESENT:
                        results[row] = result
                        continue
                    first = resent.setdefault(row, time.monotonic())
                    if time.monotonic() - first > self.params.capacity_wait_s:
                        results[row] = PolicyUnavailableError(
                            f"policy server {self.url} kept closing connections before reading this request "
                            f"for {self.params.capacity_wait_s:g} s (capacity_wait_s)")
                        continue
                    todo.appendleft(row)
                    if lanes[0] > 1:
                        return  # another connection of this client takes it
            finally:
                lanes[0] -= 1
                if ws is not None:
                    self._idle.append(ws)

        await asyncio.gather(*(lane(ws) for ws in connections))
        return results

    async def _grow(self, rows: int) -> None:
        """Hold a connection per row, as far as the server allows: the first with the whole retry budget,
        the others with one attempt each; a 503 caps this client's pool until its next reset."""
        if not self._idle:
            self._adopt(*await _connect(self.url, self.params, self._client))
        want = min(rows, self._pool_cap or rows)
        missing = want - len(self._idle)
        if missing <= 0:
            return
        opened = await asyncio.gather(*(_connect(self.url, self.params, self._client, attempts=1)
                                        for _ in range(missing)), return_exceptions=True)
        for result in opened:
            if not isinstance(result, BaseException):
                self._adopt(*result)
        if any(isinstance(result, ServerBusyError) for result in opened):
            self._pool_cap = len(self._idle)

    def _adopt(self, ws: Any, metadata: dict[str, Any]) -> None:
        self._idle.append(ws)
        if metadata and not self.metadata:
            self.metadata = metadata
            self.contract = PolicyContract.from_metadata(metadata)

    async def _answer(self, ws: Any | None, request: dict[str, Any]) -> tuple[Any | None, Any]:
        """(the connection to go on with, or None; the reply, the exception, or ``_RESENT``) for one request.
        ``_RESENT``: the server closed the connection without reading the request, which may be sent again.
        A new session refused for room (``WAITED_CODES``) is asked again after :func:`backoff_s` until
        ``capacity_wait_s`` has passed since the first refusal."""
        patience = _Patience(self.params)
        while True:
            try:
                if ws is None:
                    ws = (await _connect(self.url, self.params, self._client))[0]
                return ws, await self._request(ws, request)
            except _Resend:
                return None, _RESENT
            except RemotePolicyError as exc:  # answered with an error: the connection goes on if the server says so
                if ws is not None and exc.code not in KEEPS_CONNECTION:
                    await ws.close()
                    ws = None
                if exc.code not in WAITED_CODES:
                    return ws, exc
                pause = patience.next_wait()
                if pause is None:
                    return ws, RemotePolicyError(f"{exc}; still refused after it waited "
                                                 f"{self.params.capacity_wait_s:g} s (capacity_wait_s)", exc.code)
                _tell(self.url, exc.code, self.params)
                await asyncio.sleep(pause)
            except EpisodeError as exc:  # this row's failure, reported for it
                if ws is not None:
                    await ws.close()  # a late reply would answer the next request: never reuse it
                return None, exc

    async def _request(self, ws: Any, request: dict[str, Any]) -> tuple[np.ndarray, int | None]:
        from websockets.exceptions import ConnectionClosed

        try:
            await ws.send(packb(request))
            reply = await asyncio.wait_for(ws.recv(), self.params.timeout_s)
        except TimeoutError:
            raise PolicyUnavailableError(
                f"policy server {self.url}: no reply within {self.params.timeout_s:g} s (it may have acted on the "
                "request, so the episode is not asked again)") from None
        except ConnectionClosed as exc:
            error = PolicyUnavailableError(f"policy server {self.url} closed the connection ({exc})")
            if exc.rcvd is not None and exc.rcvd.code in RETRYABLE_CLOSE:
                raise _Resend(error) from None
            raise error from None
        except OSError as exc:
            raise PolicyUnavailableError(f"policy server {self.url}: {type(exc).__name__}: {exc}") from None
        if isinstance(reply, str):
            lines = [line for line in reply.strip().splitlines() if line.strip()]
            last = lines[-1] if lines else "empty error"
            raise RemotePolicyError(f"policy server {self.url} failed: {last}", last.split(":", 1)[0])
        try:
            message = unpackb(reply, self.params.max_message_bytes)
        except WireError as exc:
            raise RemotePolicyError(f"policy server {self.url} sent a malformed reply: {exc}") from None
        actions = message.get("actions") if isinstance(message, dict) else None
        if not isinstance(actions, np.ndarray):
            raise RemotePolicyError(f"policy server {self.url}: reply has no 'actions' array")
        timing = message.get("server_timing")
        size = timing.get("batch_size") if isinstance(timing, dict) else None
        return actions, int(size) if isinstance(size, (int, np.integer)) else None

    def close(self) -> None:
        """Close the connections and stop the client's event loop thread."""
        if self._loop is not None and self._loop.thread.is_alive():
            idle, self._idle = self._idle, []

            async def close_all() -> None:
                await asyncio.gather(*(ws.close() for ws in idle), return_exceptions=True)

            try:
                self._loop.run(close_all(), timeout=5)
            finally:
                self._loop.stop()
        self._loop = None


def wire_image(image: np.ndarray, size: tuple[int, int] | None, layout: ImageLayout = ImageLayout.HWC) -> np.ndarray:
    """One camera frame as openpi policies take it: uint8, resized with zero padding to ``size`` (H, W)
    keeping its aspect ratio (openpi's ``image_tools.resize_with_pad``, bilinear), HWC or CHW."""
    frame = np.asarray(image)
    if frame.dtype.kind == "f":
        frame = (255 * np.clip(frame, 0.0, 1.0)).astype(np.uint8)
    frame = frame.astype(np.uint8, copy=False)
    if size is not None and frame.shape[:2] != tuple(size):
        from PIL import Image

        height, width = size
        ratio = max(frame.shape[1] / width, frame.shape[0] / height)
        scaled = Image.fromarray(frame).resize((int(frame.shape[1] / ratio), int(frame.shape[0] / ratio)),
                                               resample=Image.Resampling.BILINEAR)
        canvas = Image.new(scaled.mode, (width, height), 0)
        canvas.paste(scaled, (max(0, int((width - scaled.width) / 2)), max(0, int((height - scaled.height) / 2))))
        frame = np.asarray(canvas)
    if layout is ImageLayout.CHW:
        frame = np.moveaxis(frame, -1, 0)
    return np.ascontiguousarray(frame)


def _stack(replies: list[np.ndarray], url: str) -> np.ndarray:
    """``(B, A)`` or ``(B, H, A)``; the runner judges dtype, shape and finiteness per row."""
    shapes = {reply.shape for reply in replies}
    if len(shapes) != 1:
        raise RemotePolicyError(f"policy server {url}: replies of different shapes {sorted(shapes)} in one batch")
    return np.stack(replies)
