"""``assay serve-sim BACKEND``: a backend's environments served over websockets, a process per client.

The server process only accepts connections. ``clients`` server processes (spawned at start, each with
the backend's imports and, per session, its environments) each serve one connection at a time: the
accepting process hands an accepted socket to an idle one (``socket.send_fds`` over a Unix socket pair),
which does the websocket handshake and serves it to the end, so the environments of two campaign workers
step in two processes, in parallel, with no relay in between. A connection that finds every process
busy is answered ``E_BUSY`` in one line and closed. A process that dies is replaced (its client's
episodes end as errors); each dies with the accepting process (``PR_SET_PDEATHSIG``), so killing the
server ends every session.

A connection is one campaign worker process: it opens one session per environment it steps
(:mod:`assay.served.sessions`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import select
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.policies.remote.wire import MAX_MESSAGE_BYTES
from assay.served.protocol import E_BUSY, error_line
from assay.served.transport import accept

log = logging.getLogger("assay.served")
MAX_FRAME_BYTES = 4 * MAX_MESSAGE_BYTES  # two 512 px cameras with depth fit with room to spare
_HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SimServerConfig:
    """Where and how a backend is served: ``clients`` processes, one connection (a campaign worker) each."""

    backend: str
    host: str = "127.0.0.1"
    port: int = 8710
    clients: int = 4


def serve_socket(sock: socket.socket, handler: Any) -> None:
    """The websocket handshake on an accepted ``sock``, then ``handler(channel)`` until it returns."""
    channel = accept(sock, _HANDSHAKE_TIMEOUT_S, MAX_FRAME_BYTES)
    if channel is None:
        sock.close()
        return
    try:
        handler(channel)
    except Exception:  # noqa: BLE001 - a client that leaves mid-request ends its own connection only
        log.debug("connection ended", exc_info=True)
    finally:
        channel.close()


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the accepting process dies (elsewhere: nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_main(control: socket.socket, config: SimServerConfig) -> None:
    """A server process: sockets in over ``control``, each served to its end, then ``b"i"`` (idle) back."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s assay-serve-sim[%(process)d] %(message)s")
    from assay.served.sessions import handle
    from assay.sim import default_registry

    registry = default_registry()
    where = f"the {config.backend} simulator server at ws://{config.host}:{config.port}"
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not message or not fds:
            return
        with socket.socket(fileno=fds[0]) as sock:
            serve_socket(sock, lambda ws: handle(ws, config.backend, registry, where))
        control.sendall(b"i")


def _refuse_busy(sock: socket.socket, clients: int) -> None:
    """Answer a connection no process is free for with one ``E_BUSY`` line."""
    line = error_line(E_BUSY, f"all {clients} client slots of this simulator server are taken (a campaign worker "
                              "holds one): restart it with a larger --clients (at least the campaign's --workers), "
                              "or run fewer workers")
    serve_socket(sock, lambda ws: ws.send(line))  # in place of the server's facts: the client's first frame


class SimServer:
    """The accepting process and its ``clients`` server processes (:meth:`serve_forever` until :meth:`stop`)."""

    def __init__(self, config: SimServerConfig) -> None:
        if config.clients < 1:
            raise AssayError(f"--clients must be at least 1, got {config.clients}")
        self.config = config
        self._context = multiprocessing.get_context("spawn")
        self._listener: socket.socket | None = None
        self._children: dict[socket.socket, Any] = {}  # control socket -> process
        self._idle: list[socket.socket] = []
        self._stopped = threading.Event()

    def bind(self) -> int:
        """Listen (port 0: any free port) and start the server processes; returns the port."""
        try:
            self._listener = socket.create_server((self.config.host, self.config.port), backlog=64)
        except OSError as exc:
            raise AssayError(f"cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}; pick another "
                             "--port") from None
        port = int(self._listener.getsockname()[1])
        self.config = SimServerConfig(self.config.backend, self.config.host, port, self.config.clients)
        for _ in range(self.config.clients):
            self._spawn()
        return port

    def _spawn(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        process = self._context.Process(target=_child_main, args=(theirs, self.config), daemon=True)
        process.start()
        theirs.close()
        self._children[mine] = process
        self._idle.append(mine)

    def serve_forever(self) -> None:
        """Accept connections and hand each to an idle server process, until :meth:`stop`."""
        if self._listener is None:
            self.bind()
        assert self._listener is not None
        try:
            while not self._stopped.is_set():
                readable, _, _ = select.select([self._listener, *self._children], [], [], 0.5)
                for ready in readable:
                    if ready is self._listener:
                        self._accept()
                    else:
                        self._heard(ready)
        finally:
            self._shutdown()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        with sock:
            if not self._idle:
                threading.Thread(target=_refuse_busy, args=(sock.dup(), self.config.clients), daemon=True).start()
                return
            child = self._idle.pop(0)
            socket.send_fds(child, [b"c"], [sock.fileno()])

    def _heard(self, control: socket.socket) -> None:
        """A server process is idle again (``b"i"``), or died (EOF: it is replaced)."""
        try:
            data = control.recv(64)
        except OSError:
            data = b""
        if data:
            self._idle.extend([control] * data.count(b"i"))
            return
        process = self._children.pop(control)
        process.join(timeout=1)
        log.warning("a server process exited (%s); its client's episodes end as errors; starting another",
                    process.exitcode)
        if control in self._idle:
            self._idle.remove(control)
        control.close()
        if not self._stopped.is_set():
            self._spawn()

    def stop(self) -> None:
        """Stop accepting; :meth:`serve_forever` returns and every server process ends."""
        self._stopped.set()

    def _shutdown(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for control, process in self._children.items():
            control.close()
            process.join(timeout=2)
            if process.is_alive():
                process.kill()
        self._children.clear()
