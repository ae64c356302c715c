"""One client connection inside a server process: its handshake, then its sessions, one environment each.

A session's environment is built by the server's own registry (``sim.make_env``), from the task spec the
client sends (the campaign's task as it runs it: preset, cameras, horizon), after checking that the
server's catalogue has that task and that both sides hash the spec alike. Variants come with each reset;
what the campaign's side applies itself (control latency, action and observation noise, the safety filter)
never reaches the server.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pydantic import ValidationError

from assay.errors import AssayError, WireError
from assay.served.handshake import facts, mismatch, not_a_hello
from assay.served.protocol import (
    CLOSES,
    E_PROTOCOL,
    E_SESSION,
    E_SIM,
    E_TASK,
    encode_steps,
    encode_transition,
    error_line,
    packb,
    unpackb,
)
from assay.sim import SimEnv, SupportsFramesOnDemand, TaskRegistry, Transition, make_env, renderer_info
from assay.spec import TaskSpec, Variant

log = logging.getLogger("assay.served")
HELLO_TIMEOUT_S = 30.0


class _Refusal(Exception):
    """A request refused with an error frame (``code``, one line); module-private control flow."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class Sessions:
    """The environments one connection opened, by session number."""

    def __init__(self, backend: str, registry: TaskRegistry, where: str) -> None:
        self.backend, self.registry, self.where = backend, registry, where
        self.envs: dict[int, SimEnv] = {}

    def answer(self, message: Any) -> dict[str, Any]:
        """The reply to one request (a :class:`_Refusal` for an error frame)."""
        if not isinstance(message, dict) or not isinstance(message.get("op"), str):
            raise _Refusal(E_PROTOCOL, "a request must be a map with an 'op' (open, reset, step, close)")
        op, session = message["op"], message.get("session")
        if op == "open":
            return self._open(session, message)
        if op == "check":
            return {"ok": True, "task_hash": self._task(message).content_hash()}
        if op == "steps":
            return self._steps(message)
        if op not in ("reset", "step", "close"):
            raise _Refusal(E_PROTOCOL, f"unknown op {op!r}; valid: check, open, reset, step, steps, close")
        env = self.envs.get(session) if isinstance(session, int) else None
        if env is None or not isinstance(session, int):
            raise _Refusal(E_SESSION, f"session {session!r} is not open on this connection; open it first")
        if op == "close":
            self.envs.pop(session).close()
            return {"ok": True}
        try:
            return self._reset(env, message) if op == "reset" else self._step(env, message)
        except (KeyError, TypeError, ValidationError) as exc:
            raise _Refusal(E_PROTOCOL, f"malformed {op}: {type(exc).__name__}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the backend's fault is this episode's, not the server's
            log.exception("session %s: %s raised", session, op)
            raise _Refusal(E_SIM, f"{op} raised {type(exc).__name__}: {exc}") from None

    def _open(self, session: Any, message: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(session, int) or session in self.envs:
            raise _Refusal(E_SESSION, f"session {session!r} must be a new integer on this connection")
        task = self._task(message)
        try:
            self.envs[session] = make_env(task)
        except AssayError as exc:
            raise _Refusal(E_TASK, f"cannot build {task.id} here: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a build failure refuses the session, the server goes on
            log.exception("building %s", task.id)
            raise _Refusal(E_TASK, f"building {task.id} raised {type(exc).__name__}: {exc}") from None
        return {"ok": True, "task_hash": task.content_hash()}

    def _task(self, message: dict[str, Any]) -> TaskSpec:
        """The request's task spec, once this server is known to have it and to hash it alike."""
        try:
            task = TaskSpec.model_validate(message["task"])
        except (KeyError, ValidationError) as exc:
            raise _Refusal(E_PROTOCOL, f"open needs a task spec: {' '.join(str(exc).split())[:200]}") from None
        if task.backend != self.backend:
            raise _Refusal(E_TASK, f"{task.id} is a {task.backend} task; {self.where} serves {self.backend}: start "
                                  f"`assay serve-sim {task.backend}`")
        if task.id not in self.registry:
            raise _Refusal(E_TASK, f"{self.where} has no task {task.id}; `assay tasks --backend {self.backend}` lists "
                                  "the ones it serves")
        if task.content_hash() != message.get("task_hash"):
            raise _Refusal(E_TASK, f"{task.id} hashes to {task.content_hash()} here and {message.get('task_hash')} "
                                  "on the campaign's side: run both from the same Assay checkout")
        return task

    def _reset(self, env: SimEnv, message: dict[str, Any]) -> dict[str, Any]:
        variant = Variant.model_validate(message["variant"]) if message.get("variant") else None
        observation = env.reset(int(message["seed"]), variant)
        info = renderer_info()
        return {"observation": observation, "initial_conditions": env.initial_conditions(),
                "renderer": info.to_dict() if info is not None else None}

    def _steps(self, message: dict[str, Any]) -> dict[str, Any]:
        """A lockstep batch's steps, in order (``steps``: ``sessions``, one ``actions`` row and one ``skip_frames``
        flag each): columns, or each one's answer or error line (a backend's fault, ``E_SIM``, or an unknown session,
        ``E_SESSION``, is that step's own); a malformed request refuses the whole batch (``E_PROTOCOL``, which closes
        the connection, as for ``step``)."""
        sessions, actions, skips = message.get("sessions"), message.get("actions"), message.get("skip_frames")
        if not (isinstance(sessions, list) and all(type(session) is int for session in sessions)
                and isinstance(actions, np.ndarray) and actions.ndim >= 2 and len(actions) == len(sessions)
                and isinstance(skips, list) and len(skips) == len(sessions)):
            raise _Refusal(E_PROTOCOL, "steps needs sessions (a list of integers), actions (an array of at least 2 "
                                       "dimensions, a row a session) and skip_frames (a list of booleans, one a "
                                       "session)")
        outcomes: list[Transition | str] = []
        for session, action, skip in zip(sessions, actions, skips, strict=True):
            env = self.envs.get(session)
            if env is None:
                outcomes.append(error_line(E_SESSION, f"session {session} is not open on this connection; open it "
                                                      "first"))
                continue
            try:
                if skip and isinstance(env, SupportsFramesOnDemand):
                    env.skip_next_frames()
                outcomes.append(env.step(action))
            except Exception as exc:  # noqa: BLE001 - the backend's fault is this step's episode's, not the batch's
                log.exception("session %s: step raised", session)
                outcomes.append(error_line(E_SIM, f"step raised {type(exc).__name__}: {exc}"))
        return encode_steps(outcomes)

    def _step(self, env: SimEnv, message: dict[str, Any]) -> dict[str, Any]:
        action = message["action"]
        if not isinstance(action, np.ndarray):
            raise TypeError("the action must be an array")
        if message.get("skip_frames") and isinstance(env, SupportsFramesOnDemand):
            env.skip_next_frames()
        return encode_transition(env.step(action))

    def close(self) -> None:
        """Close every environment still open (the connection ended)."""
        for env in self.envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001 - closing the rest matters more than one close's fault
                log.exception("closing an environment")
        self.envs.clear()


def handle(websocket: Any, backend: str, registry: TaskRegistry, where: str) -> None:
    """Serve one connection: the server's facts, the client's hello and its answer, then requests until the client
    leaves or a refusal closes it."""
    websocket.send(packb(facts(backend)))  # first, as a policy server sends its metadata: a client knows whom it met
    try:
        first = unpackb(websocket.recv(timeout=HELLO_TIMEOUT_S))
    except TimeoutError:
        websocket.send(error_line(E_PROTOCOL, f"no hello within {HELLO_TIMEOUT_S:g} s"))
        return
    except WireError as exc:
        websocket.send(error_line(E_PROTOCOL, f"{exc}; this is a {backend} simulator server (`assay serve-sim`)"))
        return
    refused = not_a_hello(first) or mismatch(first, facts(backend), where)
    if refused is not None:
        websocket.send(error_line(*refused))
        return
    websocket.send(packb({"ok": True}))
    sessions = Sessions(backend, registry, where)
    try:
        for frame in websocket:
            try:
                reply: bytes | str = packb(sessions.answer(unpackb(frame)))
            except (_Refusal, WireError) as exc:
                code, text = (exc.code, exc.message) if isinstance(exc, _Refusal) else (E_PROTOCOL, str(exc))
                websocket.send(error_line(code, text))
                if code in CLOSES:
                    return
                continue
            websocket.send(reply)
    finally:
        sessions.close()

