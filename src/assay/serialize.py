"""``to_dict`` for the dataclasses whose JSON form is their fields, written once.

A result dataclass that inherits :class:`DictMixin` has ``to_dict()``, ``dataclasses.asdict`` of itself (nested
dataclasses, lists, tuples and dicts copied recursively); one whose JSON form is more than its fields (a
derived value, a renamed key) writes its own. Like ``assay.errors``, every layer may import this module.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

__all__ = ["DictMixin"]


class DictMixin:
    """``to_dict()`` as ``dataclasses.asdict(self)``, for a dataclass that inherits it."""

    __dataclass_fields__: ClassVar[dict[str, Any]]  # set by @dataclass on the subclass

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (``dataclasses.asdict``)."""
        return dataclasses.asdict(self)
