"""Canonical JSON and content hashes: the identity of every spec and job."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace and no NaN: equal data gives equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def content_hash(value: Any, length: int = 16) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``, truncated to ``length`` characters."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()[:length]


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed derived from ``parts`` alone (never from global RNG state)."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % (2**31)
