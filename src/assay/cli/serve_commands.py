"""``assay serve-policy``: serve any Assay policy over openpi's websocket protocol."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from assay.cli import render
from assay.cli.common import user_errors
from assay.errors import AssayError, SpecError

if TYPE_CHECKING:
    from assay.policies.contract import PolicyContract
    from assay.policies.remote import PolicyServer, PolicyServerConfig
    from assay.spec import TaskSpec

DEFAULT_BUFFER_MB = 256.0  # serve-policy's byte budget for frames in flight, unless --max-message-mb is larger
MinSessionsOpt = Annotated[int, typer.Option("--min-sessions-per-client", min=1, max=1_000_000, help=(
    "Sessions every client may open while the server has room; past them a client gets at most its fair share "
    "(--max-sessions / clients holding sessions), and the last --reserved-sessions places are kept for clients "
    "below this minimum."))]
ReservedSessionsOpt = Annotated[int | None, typer.Option("--reserved-sessions", min=0, max=1_000_000, help=(
    "Places kept for clients below --min-sessions-per-client. [default: a quarter of --max-sessions]"))]
RequestRateOpt = Annotated[float, typer.Option("--max-requests-per-s", min=0.0, help=(
    "Requests per second one client may send (bursts of a second's worth); a request over it waits its turn "
    "(0: no limit)."))]

def register(app: typer.Typer) -> None:
    """Add ``serve-policy`` to ``app``."""
    app.command("serve-policy")(serve_policy)


def policy_server(policy: str, task: str, params: dict, config: PolicyServerConfig,
                  stateless: bool = False) -> PolicyServer:
    """The server ``serve-policy`` runs: the policy, its identity and its class's own declared contract
    (else the served task's interface), bound to ``task``; one policy instance per session unless the
    class declares ``stateless = True`` or ``stateless`` is asked for."""
    from assay.policies import add_import_root, is_stateless, make_policy, policy_contract, resolve_policy
    from assay.policies.remote import PolicyServer
    from assay.sim import default_registry
    from assay.spec import PolicySpec, policy_from_shorthand

    base = policy_from_shorthand(policy)
    if base.remote is not None:
        raise SpecError("serve-policy serves a local policy; a remote: URL is already served")
    if base.entrypoint is not None:  # a module:attr is also looked up in the directory the server starts in
        add_import_root(Path.cwd())
    spec = PolicySpec(**{**base.model_dump(), "params": params})
    resolved = resolve_policy(spec)
    contract = policy_contract(resolved)
    served_task = with_policy_cameras(default_registry().get(task), contract)
    served = make_policy(spec)
    sessions = not (stateless or is_stateless(served))
    identity = {"policy": spec.name, "source": spec.source, "params": spec.params, "version": resolved.version,
                "sessions": sessions}
    return PolicyServer(served, served_task, config, identity, contract,
                        factory=(lambda: make_policy(spec)) if sessions else None)


def announcement(server: PolicyServer) -> str:
    """The line ``serve-policy`` prints once its server is built: what it serves, where, and how."""
    spec, config = server.metadata["assay"], server.config
    idle = f", ended after {config.session_idle_s:g} s idle" if config.session_idle_s else ""
    sessions = (f"sessions (at most {config.max_sessions}, an instance each{idle})" if server.factory
                else "stateless (one instance)")
    return (f"serving {spec['policy']} ({spec['version']}) for {server.task.id} on ws://{config.host}:{config.port} "
            f"— max batch {config.max_batch}, max wait {config.max_wait_ms:g} ms, {sessions}"
            f"{', API key required' if config.api_key else ''}; GET /healthz for health")


def with_policy_cameras(task: TaskSpec, contract: PolicyContract | None) -> TaskSpec:
    """The served task with a camera for each ``image.<camera>`` its policy reads (at the declared size),
    so a camera policy's reset sees the cameras its requests will bring."""
    from assay.spec import CameraSpec

    if contract is None:
        return task
    have = {camera.name for camera in task.cameras}
    extra = tuple(CameraSpec(name=key[len("image."):], width=image.width, height=image.height)
                  for key, image in contract.images.items()
                  if key.startswith("image.") and key[len("image."):] not in have)
    return task.model_copy(update={"cameras": (*task.cameras, *extra)}) if extra else task


def serve_policy(
    policy: Annotated[str, typer.Argument(help="A builtin (mlp, expert, ...) or package.module:attr.")],
    host: Annotated[str, typer.Option(
        help="Interface to bind; 0.0.0.0 exposes the server to the network.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    max_batch: Annotated[int, typer.Option("--max-batch", min=1, max=4096, help="Largest batch of requests.")] = 32,
    max_wait_ms: Annotated[float, typer.Option("--max-wait-ms", min=0.0, help="Longest wait to fill a batch.")] = 5.0,
    api_key: Annotated[str | None, typer.Option("--api-key", help="Require 'Authorization: Api-Key KEY' "
                                                   "(env ASSAY_API_KEY).")] = None,
    task: Annotated[str, typer.Option(help="The task the policy is reset for.")] = "metaworld/pick-place@1",
    params: Annotated[str, typer.Option(help="Policy parameters as a JSON object.")] = "{}",
    max_message_mb: Annotated[float, typer.Option("--max-message-mb", min=0.001, help="Cap on one frame.")] = 16.0,
    max_connections: Annotated[int, typer.Option("--max-connections", min=1, max=100_000,
                                                 help="Websockets served at once; more get HTTP 503.")] = 64,
    idle_timeout: Annotated[float, typer.Option("--idle-timeout", min=0.0,
                                                help="Close a connection idle this many seconds (0: never).")] = 300.0,
    stateless: Annotated[bool, typer.Option("--stateless", help="Serve one policy instance as a function of each "
                                            "row's observation, batched across environments (default: an instance "
                                            "per environment session, unless the class declares stateless = True).")]
    = False,
    max_sessions: Annotated[int, typer.Option("--max-sessions", min=1, max=1_000_000, help=(
        "Live sessions at most (a stateful policy: one policy instance each, so memory grows by one instance per "
        "environment served, up to this many); past it new sessions are refused, live ones never evicted."))] = 1024,
    max_sessions_per_client: Annotated[int, typer.Option("--max-sessions-per-client", min=1, max=1_000_000,
                                                         help="Live sessions one client may hold.")] = 256,
    min_sessions_per_client: MinSessionsOpt = 64,
    reserved_sessions: ReservedSessionsOpt = None,
    max_requests_per_s: RequestRateOpt = 2000.0,
    session_idle_s: Annotated[float, typer.Option("--session-idle-s", min=0.0, help=(
        "End a session not stepped for this many seconds, freeing its instance (0: never). An episode asks "
        "every few steps; sessions a client left behind without closing its connection would otherwise hold "
        "--max-sessions until it disconnects. A session in use is never ended to make room for another "
        "client's."))] = 120.0,
    max_buffer_mb: Annotated[float | None, typer.Option("--max-buffer-mb", min=1.0, help=(
        "Byte budget for frames being received and decoded, across all connections; a large frame waits for "
        "room (TCP pushes back on its sender). At least --max-message-mb. [default: 256, or --max-message-mb "
        "when larger]"))] = None,
) -> None:
    """Serve POLICY (openpi protocol: websocket + msgpack) with a dynamic batcher across all connections.

    Memory: a stateless policy (declared by its class, or --stateless) is one shared instance whatever the number
    of clients.

    A stateful one gets an instance per environment session, so the server holds up to --max-sessions instances
    (sessions idle past --session-idle-s end and free theirs): measured, a policy holding 20 MiB of weights costs
    20 MiB per session stateful and nothing per session stateless (docs/RELIABILITY.md).

    Frames in flight add at most --max-buffer-mb.
    """
    from assay.policies.remote import PolicyServerConfig

    with user_errors():
        try:
            parsed = json.loads(params)
        except json.JSONDecodeError as exc:
            raise SpecError(f"--params is not valid JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise SpecError("--params must be a JSON object like '{\"hidden\": [256, 256]}'")
        if max_buffer_mb is not None and max_buffer_mb < max_message_mb:
            raise AssayError(f"--max-buffer-mb {max_buffer_mb:g} cannot hold one frame of --max-message-mb "
                             f"{max_message_mb:g}; give --max-buffer-mb {max_message_mb:g} or more")
        budget_mb = max(DEFAULT_BUFFER_MB, max_message_mb) if max_buffer_mb is None else max_buffer_mb
        config = PolicyServerConfig(host=host, port=port, max_batch=max_batch, max_wait_ms=max_wait_ms,
                              api_key=api_key or os.environ.get("ASSAY_API_KEY") or None,
                              max_message_bytes=int(max_message_mb * 1024 * 1024), max_connections=max_connections,
                              idle_timeout_s=idle_timeout or None, max_sessions=max_sessions,
                              max_sessions_per_client=max_sessions_per_client,
                              min_sessions_per_client=min_sessions_per_client, reserved_sessions=reserved_sessions,
                              max_requests_per_s=max_requests_per_s or None,
                              session_idle_s=session_idle_s or None,
                              max_buffer_bytes=int(budget_mb * 1024 * 1024))
        server = policy_server(policy, task, parsed, config, stateless)
        render.err_console.print(announcement(server), highlight=False, soft_wrap=True)
        try:
            asyncio.run(server.serve())
        except OSError as exc:
            raise AssayError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
        except KeyboardInterrupt:
            pass
