"""The handshake's two halves: what a client asks a served simulator to be, and what makes one unfit."""

from __future__ import annotations

from typing import Any

from assay.served.identity import code_hash, expected_versions, installed_versions, tasks_hash, version_difference
from assay.served.protocol import E_PROTOCOL, E_VERSION, PROTOCOL


def hello(backend: str) -> dict[str, Any]:
    """The client's first message: the protocol, the backend, and what the campaign's side is."""
    return {"op": "hello", "protocol": PROTOCOL, "backend": backend, "tasks_hash": tasks_hash(backend),
            "code_hash": code_hash(), "versions": expected_versions(backend)}


def facts(backend: str) -> dict[str, Any]:
    """What a server is: its protocol, backend, task catalogue, code and package versions."""
    return {"protocol": PROTOCOL, "backend": backend, "tasks_hash": tasks_hash(backend), "code_hash": code_hash(),
            "versions": installed_versions(backend)}


def mismatch(asked: dict[str, Any], served: dict[str, Any], where: str) -> tuple[str, str] | None:
    """``(code, message)`` of the first way a server (``served``: its :func:`facts`) does not fit a client's
    :func:`hello` (``asked``), each naming the fix; None when it fits."""
    backend = asked.get("backend")
    if served.get("protocol") != PROTOCOL or asked.get("protocol") != PROTOCOL:
        return E_VERSION, (f"{where} speaks {served.get('protocol')!r} and the client {asked.get('protocol')!r}: "
                           "run the campaign and `assay serve-sim` from the same Assay release")
    if served.get("backend") != backend:
        return E_VERSION, (f"{where} serves {served.get('backend')}, not {backend}: start `assay serve-sim "
                           f"{backend}` and name it under `simulators: {{{backend}: ws://HOST:PORT}}`")
    if served.get("tasks_hash") != asked.get("tasks_hash"):
        return E_VERSION, (f"{where} has other {backend} task specs (hash {served.get('tasks_hash')}, the "
                           f"campaign's {asked.get('tasks_hash')}): start `assay serve-sim {backend}` from the "
                           "campaign's Assay checkout")
    differ = version_difference(asked.get("versions") or {}, served.get("versions") or {})
    if differ:
        return E_VERSION, (f"{where} runs {differ}: start it from the backend's own environment (`assay env create "
                           f"{backend}`, then `assay serve-sim {backend}`) or align the versions")
    if served.get("code_hash") != asked.get("code_hash"):
        return E_VERSION, (f"{where} runs other Assay simulator code (hash {served.get('code_hash')}, the "
                           f"campaign's {asked.get('code_hash')}): restart `assay serve-sim {backend}` from the "
                           "campaign's checkout")
    return None


def not_a_hello(message: Any) -> tuple[str, str] | None:
    """``(E_PROTOCOL, message)`` when a first message is not a hello of any version; None when it is one."""
    if isinstance(message, dict) and message.get("op") == "hello":
        return None
    return E_PROTOCOL, (f"expected a {PROTOCOL} hello ({{op: hello, protocol, backend, ...}}) first: this is a "
                        "simulator server (`assay serve-sim`), not a policy server")
