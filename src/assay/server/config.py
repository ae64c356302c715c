"""What a dashboard serves (``ServerConfig``) and which ``Host`` headers it answers (loopback only, on loopback)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServerConfig:
    """What ``assay serve`` serves: the store, the write token, the campaign directory and how runs start."""

    store_root: Path
    token: str
    campaigns_dir: Path
    catalog_url: str | None = None
    executor: str = "local"
    workers: int = 2
    poll_s: float = 1.0  # how often the progress stream looks at the catalog
    host: str = "127.0.0.1"  # the interface served; on loopback, only loopback Host headers are answered


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str) -> list[str]:
    """Host headers answered. Bound to loopback: loopback names only, so a page of another site whose
    name a DNS rebinding points at 127.0.0.1 cannot read the open API. Bound elsewhere: any (the
    operator exposed it on purpose; writes still need the token)."""
    return ["127.0.0.1", "localhost", "[::1]", host] if is_loopback(host) else ["*"]
