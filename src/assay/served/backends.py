"""Each backend's serving facts: the packages that decide its results, and the environment it runs in.

The rows are the backend registry's (:mod:`assay.sim.backends`, where a plugin adds its own), read by the
handshake (:mod:`assay.served.identity`), ``assay env create`` and ``assay serve-sim``; nothing else tests a
backend's name.

A backend with a ``lock`` has its own virtual environment, built from that lock file
(``requirements/<lock>``) into ``.venv-<backend>`` beside the checkout (``ASSAY_ENVS`` moves it):
``assay serve-sim`` starts its server with that environment's Python. Its ``pins`` are what the
handshake expects of a served copy; the others are expected at the versions of the campaign's own
environment, which runs them in process too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from assay.sim.backends import backend, backends


@dataclass(frozen=True)
class ServedBackend:
    """How a backend is served: its result-deciding ``packages``, and for one with an environment of its own its
    lock file and the versions that lock pins."""

    name: str
    packages: tuple[str, ...]
    lock: str | None = None  # requirements/<lock>: the backend's own environment
    pins: dict[str, str] = field(default_factory=dict)
    only_served: bool = False  # conflicts with the campaign's environment: runs only through `assay serve-sim`


def served_backends() -> dict[str, ServedBackend]:
    """Every backend's serving facts, read from the backend registry (:func:`assay.sim.backends.backends`)."""
    return {name: ServedBackend(name, found.packages, found.lock, dict(found.pins), found.only_served)
            for name, found in backends().items()}


def backend_of(name: str) -> ServedBackend:
    """The serving facts of backend ``name``; an unknown one is a SpecError naming the valid ones."""
    found = backend(name)
    return ServedBackend(name, found.packages, found.lock, dict(found.pins), found.only_served)


def checkout() -> Path:
    """The checkout Assay runs from (the directory holding ``src/assay``), where locks and environments live."""
    return Path(__file__).resolve().parents[3]


def lock_path(name: str) -> Path | None:
    """The lock file of backend ``name``'s own environment (None: it runs in the campaign's)."""
    lock = backend_of(name).lock
    return checkout() / "requirements" / lock if lock else None


def environment_path(name: str) -> Path:
    """Where backend ``name``'s own environment is built: ``$ASSAY_ENVS/<name>``, else ``.venv-<name>`` in the
    checkout."""
    root = os.environ.get("ASSAY_ENVS")
    return Path(root) / name if root else checkout() / f".venv-{name}"


def environment_python(name: str) -> Path | None:
    """The Python of backend ``name``'s own environment, when one has been built (None otherwise)."""
    python = environment_path(name) / "bin" / "python"
    return python if python.exists() else None
