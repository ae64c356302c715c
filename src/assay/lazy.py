"""Packages whose names load on first use (PEP 562): ``import assay.run`` costs nothing until a name is read.

A package lists where each of its names lives and sets ``__getattr__ = lazy_names(__name__, table, globals())``;
its ``__init__`` also imports the names under ``if TYPE_CHECKING:`` for type checkers and readers. Like
``assay.errors``, every layer may import this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, table: Mapping[str, tuple[str, ...]], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: a name of ``table`` (module -> names) is imported from its module
    the first time it is read and kept in ``namespace`` (the package's globals); any other is an AttributeError."""
    home = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        namespace[name] = value
        return value

    return __getattr__
