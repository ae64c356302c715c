"""A cluster proves its data root is shared before its first episode: a probe per node and per worker.

On a Ray cluster every actor writes step files to the data root and only the driver
writes rows. With a data root that is not shared (a path that is a private disk on
some node), a campaign used to exit 0 with its rows in the catalog and its files only
on the node that wrote them; every rerun found them missing and re-ran some, without
a word. So before the first batch, the driver runs a probe on every node: it writes a
small file to the data root there, and the driver reads it back through its own view of
the data root. Every environment actor writes one more when it starts, before it gets
any batch (nodes that join later are covered too). A probe the driver cannot read, or
a node that cannot write, is a one-line :class:`AssayError` naming the node.

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
from assay.store.roots import Root, as_root, open_root

PROBE_DIR = ".assay-probes"
SHARED_HINT = ("give --data a directory every node mounts at the same path, or an fsspec URL every node "
               "reaches (s3://..., gs://...)")


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
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(root, token)
            for node in nodes]
    for probe in ray.get(refs):
        check_probe(root, probe)
    return len(nodes)
