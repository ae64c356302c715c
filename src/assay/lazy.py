"""Packages whose names load on first use (PEP 562): ``import assay.run`` costs nothing until a name is read.

A package lists where each of its names lives and sets ``__getattr__ = lazy_names(__name__, table, globals())``;
its ``__init__`` also imports the names under ``if TYPE_CHECKING:`` for type checkers and readers. Like
``assay.errors``, every layer may import this module.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, table: Mapping[str, tuple[str, ...]], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``table`` (module -> names) is imported from its module
    the first time it is read and kept in ``namespace`` (the package's globals); any other is an AttributeError."""
    home = {name: module for module, names in table.items() for name in names}
    _shield(package, frozenset(name for name in home if f"{package}.{name}" in table))

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        namespace[name] = value
        return value

    return __getattr__


def _shield(package: str, shadowed: frozenset[str]) -> None:
    """Keep the names in ``shadowed`` (a function named like the submodule it lives in: ``metrics.correlation``)
    from being bound to that submodule when it is imported: importing ``package.NAME`` sets the package's ``NAME``
    to the module, which an eager ``__init__`` rebinds to the function afterwards and a lazy one never would."""
    if not shadowed:
        return

    class ShieldedPackage(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in shadowed and isinstance(value, types.ModuleType):
                return  # the package's NAME stays the function (read through __getattr__), as it was eagerly
            super().__setattr__(name, value)

    sys.modules[package].__class__ = ShieldedPackage


class _Deferred(types.ModuleType):
    """Stands in for a module until an attribute is read, then imports it (the import system's own lock makes two
    first reads in two threads safe) and copies its names in, so that later reads find them directly."""

    def __getattr__(self, attribute: str) -> Any:
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, attribute)


def deferred_module(name: str) -> Any:
    """Module ``name`` imported at the first read of one of its attributes, for a heavy library (pyarrow) that only
    some paths of a module use. Not put in ``sys.modules``: ``import name`` elsewhere is unchanged. A module keeps
    its type checking with ``if TYPE_CHECKING: import pyarrow as pa`` / ``else: pa = deferred_module("pyarrow")``.
    Not ``importlib.util.LazyLoader``: that one replaces the module in ``sys.modules`` for every importer, and on
    Python 3.11 two threads reading its first attribute at once can see it half-loaded (fixed in 3.12)."""
    loaded = sys.modules.get(name)
    return loaded if loaded is not None else _Deferred(name)
