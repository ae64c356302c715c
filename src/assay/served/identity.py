"""What a served simulator must share with the campaign for its episodes to be the campaign's own.

Three things, compared in the handshake (:mod:`assay.served.protocol`):

* the **task catalogue** of the backend: the content hash of every task spec the backend registers
  (a task's definition changed on one side gives another hash);
* the **code** that turns a task spec into episodes: a hash of Assay's ``spec``, ``sim`` and ``served``
  sources (an edit on one side only would change episodes silently);
* the **package versions** that decide the backend's results (the registry's
  ``packages``): a backend that runs in the campaign's own environment is expected at the versions
  installed there (its in-process episodes are the reference); one that runs only in its own environment
  (robosuite 1.5) at the versions its lock file pins.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

from assay.served.backends import backend_of
from assay.sim import default_registry
from assay.spec import content_hash

_SOURCES = ("spec", "sim", "served")  # the packages whose code decides what an episode is
_SUFFIXES = (".py", ".json")


@functools.cache
def code_hash() -> str:
    """A hash of the sources of Assay's ``spec``, ``sim`` and ``served`` packages (16 hex characters)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in _SOURCES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in _SUFFIXES and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def tasks_hash(backend: str) -> str:
    """The content hash of every task ``backend`` registers, in id order."""
    return content_hash([t.content_hash() for t in default_registry().list(backend=backend)])


def installed_versions(backend: str) -> dict[str, str]:
    """The versions of ``backend``'s packages installed in this environment ("absent" for one that is not)."""
    versions = {}
    for package in backend_of(backend).packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "absent"
    return versions


def expected_versions(backend: str) -> dict[str, str]:
    """The versions a campaign expects of a served ``backend``: its lock's pins where it runs only in its own
    environment, else what this environment has installed."""
    pins = backend_of(backend).pins
    return dict(pins) if pins else installed_versions(backend)


def version_difference(expected: dict[str, str], served: dict[str, str]) -> str:
    """The packages whose versions differ, as ``name served X, expected Y``; empty when none."""
    return "; ".join(f"{name} {served.get(name, 'absent')} (the campaign's: {version})"
                     for name, version in sorted(expected.items()) if served.get(name) != version)
