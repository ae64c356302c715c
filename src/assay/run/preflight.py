"""Every worker proves the data root is shared before its first episode: a probe per node and per worker.

This runs for every executor whose workers are separate processes (local and Ray), and, for the inline
executor, for every data root that is not a local directory (an fsspec URL: written and read back in
process, so a root that cannot be written or read fails before the first episode, not after it). A
``memory://`` root lives in one process's memory: with workers in other processes it is refused in one
line before anything runs (:func:`refuse_process_memory`).

Local worker processes (:func:`check_from_worker`): the driver writes a probe to the data root before it
starts them, and each worker, before it takes a batch, reads it back through its own view of the root and
writes one of its own; a worker that cannot is a one-line :class:`AssayError` naming it, sent to the driver.

On a Ray cluster every actor writes step files to the data root and only the driver
writes rows. With a data root that is not shared (a path that is a private disk on
some node), a campaign used to exit 0 with its rows in the catalog and its files only
on the node that wrote them; every rerun found them missing and re-ran some, without
a word. So before the first batch, the driver runs a probe on every node: it writes a
small file to the data root there, and the driver reads it back through its own view of
the data root. Every environment actor writes one more when it starts, before it gets
any batch (nodes that join later are covered too). A probe the driver cannot read, or
a node that cannot write, is a one-line :class:`AssayError` naming the node. The node of a
Ray instance this process started itself with no runtime environment (its raylet and workers
are this process's children, with the environment it had) is probed in process, with no task
to start; its actors still write theirs.

Probes are ``.assay-probes/<run>-<node>-<pid>.txt`` at the top of the data root, deleted once read.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from assay.errors import AssayError
from assay.store.roots import Root, as_root, local_path, open_root

PROBE_DIR = ".assay-probes"
SHARED_HINT = ("give --data a directory every node mounts at the same path, or an fsspec URL every node "
               "reaches (s3://..., gs://...)")
PROCESS_MEMORY = "memory://"  # fsspec's in-memory file system: one per process


@dataclass(frozen=True)
class Probe:
    """What a worker wrote (or why it could not), and where it ran."""

    node: str  # the Ray node ID
    address: str  # the node's IP address
    host: str
    relpath: str
    content: str
    error: str | None = None

    def where(self) -> str:
        """How messages name the node."""
        return f"node {self.node[:12]} ({self.address}, host {self.host})"


def run_token() -> str:
    """A fresh name for one run's probes."""
    return uuid.uuid4().hex[:12]


def write_probe(root: Root, token: str, node: str, address: str) -> Probe:
    """Write this process's probe to the data root ``root`` as this process sees it (on the worker)."""
    host = socket.gethostname()
    relpath = f"{PROBE_DIR}/{token}-{node[:16]}-{os.getpid()}.txt"
    content = f"{token} {node} {host} {os.getpid()}"
    try:
        open_root(as_root(root)).write(relpath, content.encode())
    except (AssayError, OSError) as exc:
        return Probe(node, address, host, relpath, content, error=str(exc))
    return Probe(node, address, host, relpath, content)


def check_probe(root: Root, probe: Probe) -> None:
    """Read the probe back through the driver's view of ``root``; AssayError naming the node when it is not there."""
    data_root = open_root(as_root(root))
    if probe.error is not None:
        raise AssayError(f"{probe.where()} cannot write the data root {root}: {probe.error}")
    try:
        found = data_root.read(probe.relpath).decode("utf-8", "replace")
    except FileNotFoundError:
        raise AssayError(f"the data root {root} is not shared with {probe.where()}: the probe a worker wrote there "
                         f"is not visible to the driver; {SHARED_HINT}") from None
    except OSError as exc:
        raise AssayError(f"the driver cannot read the data root {root} back ({exc}); {SHARED_HINT}") from None
    if found != probe.content:
        raise AssayError(f"the data root {root} is not shared with {probe.where()}: the driver read another "
                         f"file at {data_root.where(probe.relpath)}; {SHARED_HINT}")
    with contextlib.suppress(OSError):  # a probe left behind harms nothing
        data_root.delete(probe.relpath)


def node_probe(root: str, token: str) -> Probe:
    """Body of the per-node Ray task (and of an actor's own probe): the node it runs on writes a probe."""
    import ray

    return write_probe(root, token, ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())


def preflight(ray: Any, root: str, token: str, actor_cpus: float = 1.0) -> int:
    """Run a probe on every alive node that can hold an environment actor (``actor_cpus``) and check each;
    returns how many nodes were checked."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(node_probe)
    nodes = [n["NodeID"] for n in ray.nodes()
             if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0.0)) >= actor_cpus]
    own = _own_head_node(ray)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(root, token)
            for node in nodes if node != own]
    if own in nodes:  # its workers see the root as this process does: written and read back here
        probe_in_process(root)
    for probe in ray.get(refs):
        check_probe(root, probe)
    return len(nodes)


def _own_head_node(ray: Any) -> str | None:
    """The node ID of the Ray instance this process started itself with no runtime environment (``ray.init`` with
    no cluster to join and no ``runtime_env``: its raylet and workers are this process's children, with the
    environment and file system it had), else None."""
    try:
        node = ray._private.worker._global_node
        context = ray.get_runtime_context()
        if node is not None and node.head and not ray.util.client.ray.is_connected() and not context.runtime_env:
            return str(context.get_node_id())
    except Exception:  # noqa: BLE001 - Ray's internals moved: probe every node, as for a cluster
        return None
    return None


def refuse_process_memory(root: Root, executor: str) -> None:
    """A ``memory://`` data root with workers in other processes: one-line AssayError (each process has its own)."""
    if str(root).startswith(PROCESS_MEMORY):
        raise AssayError(f"the data root {root} lives in one process's memory, and the {executor} executor's workers "
                         "are other processes: they would write step files the driver never sees; use --executor "
                         "inline, or give --data a directory or a URL every worker reaches")


def needs_probe(root: Root) -> bool:
    """Whether the inline executor probes ``root`` first: any root that is not a local directory."""
    return local_path(as_root(root)) is None


def probe_in_process(root: Root) -> None:
    """Write a probe to ``root`` and read it back in this process (the inline executor on an fsspec root)."""
    check_probe(root, write_probe(root, run_token(), "this-process", "local"))


def check_from_worker(root: Root, driver: Probe) -> None:
    """In a local worker process, before its first batch: the probe the driver wrote (``driver``) is visible here, and
    this process can write the root. AssayError naming the worker otherwise."""
    here = f"worker process {os.getpid()} (host {socket.gethostname()})"
    own = write_probe(root, driver.content.split(" ", 1)[0], "worker", "local")
    if own.error is not None:
        raise AssayError(f"{here} cannot write the data root {root}: {own.error}")
    data_root = open_root(as_root(root))
    with contextlib.suppress(OSError):
        data_root.delete(own.relpath)
    try:
        found = data_root.read(driver.relpath).decode("utf-8", "replace")
    except FileNotFoundError:
        raise AssayError(f"the data root {root} is not shared with {here}: the probe the driver wrote there is not "
                         f"visible to it; {SHARED_HINT}") from None
    except OSError as exc:
        raise AssayError(f"{here} cannot read the data root {root} ({exc}); {SHARED_HINT}") from None
    if found != driver.content:
        raise AssayError(f"the data root {root} is not shared with {here}: it read another file at "
                         f"{data_root.where(driver.relpath)}; {SHARED_HINT}")


def remove_probe(root: Root, probe: Probe) -> None:
    """Delete a probe the driver wrote (a probe left behind harms nothing)."""
    with contextlib.suppress(OSError, AssayError):
        open_root(as_root(root)).delete(probe.relpath)
