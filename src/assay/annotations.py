"""Stability markers on what plugin authors and users build on (Ray's ``util/annotations.py``).

``@public_api`` marks what stays compatible across minor releases: a change to it is a new major
version, or a deprecation that warns for a minor release first. ``@developer_api`` marks what an
extension reaches into (a wrapper base, a fake, a check's building block): it may change in a minor
release, with a note in the changelog. Everything unmarked is internal.

The markers record each name in :data:`STABILITY` and add a line to its docstring; they set no
attribute on the object, so a runtime-checkable ``Protocol`` keeps exactly its own members. Like
``assay.errors``, every layer may import this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

PUBLIC = "public"
DEVELOPER = "developer"
NOTES = {
    PUBLIC: "Public API: stable across minor releases (a change is a new major version or warns first).",
    DEVELOPER: "Developer API: for extensions; it may change in a minor release, with a changelog note.",
}

STABILITY: dict[str, str] = {}  # "module.QualifiedName" -> PUBLIC or DEVELOPER

Marked = TypeVar("Marked", bound=Callable[..., object])


def _mark(obj: Marked, level: str) -> Marked:
    name = f"{obj.__module__}.{obj.__qualname__}"
    if STABILITY.setdefault(name, level) != level:
        raise ValueError(f"{name} is marked both {STABILITY[name]} and {level}")
    doc = (obj.__doc__ or "").rstrip()
    lines = doc.splitlines()[1:]
    margin = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    obj.__doc__ = f"{doc}\n\n{' ' * margin}{NOTES[level]}" if doc else NOTES[level]
    return obj


def public_api(obj: Marked) -> Marked:
    """Mark ``obj`` (a class or a function) as public API."""
    return _mark(obj, PUBLIC)


def developer_api(obj: Marked) -> Marked:
    """Mark ``obj`` (a class or a function) as developer API."""
    return _mark(obj, DEVELOPER)


def stability(obj: object) -> str | None:
    """``public``, ``developer``, or None for an unmarked (internal) name."""
    return STABILITY.get(f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}")
