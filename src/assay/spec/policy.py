"""PolicySpec: how a campaign names a policy.

Exactly one source: a ``builtin`` name (``expert``, ``random``, ``degraded-expert``, ``mlp``),
an ``entrypoint`` ``module:attr`` (a Policy class or a factory taking the params), or a
``remote`` policy server URL (``ws://host:port``, openpi's wire protocol).
The version is part of every episode key; builtins carry their own, an entrypoint
without an explicit version is versioned by the hash of every file of its package (a top-level
module: itself and the sibling modules it imported), so changing a module it imports changes its keys.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from assay.annotations import public_api
from assay.spec.hashing import content_hash
from assay.spec.names import clean_name

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_REMOTE = re.compile(r"^wss?://[A-Za-z0-9.\-\[\]:]+:\d{1,5}(/[\w\-./]*)?$")
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*$")


@public_api
class PolicySpec(BaseModel):
    """A policy to evaluate: a builtin, a ``module:attr`` entrypoint or a ``remote:`` server, with its params."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(max_length=100)
    builtin: str | None = None
    entrypoint: str | None = None
    remote: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    version: str | None = None

    @field_validator("name", mode="before")
    @classmethod
    def _clean_name(cls, name: Any) -> Any:
        return clean_name(name, "policy name") if isinstance(name, str) else name

    @model_validator(mode="after")
    def _one_source(self) -> PolicySpec:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"policy name {self.name!r} may hold letters, digits, '.', '_' and '-' only")
        if sum(source is not None for source in (self.builtin, self.entrypoint, self.remote)) != 1:
            raise ValueError("give exactly one of 'builtin', 'entrypoint' (module:attr) or 'remote' (ws://host:port)")
        if self.remote is not None and not _REMOTE.match(self.remote):
            raise ValueError(f"remote {self.remote!r} must look like 'ws://host:port' (or wss://)")
        if self.entrypoint is not None and not _ENTRYPOINT.match(self.entrypoint):
            raise ValueError(f"entrypoint {self.entrypoint!r} must look like 'package.module:attr'")
        return self

    @property
    def source(self) -> str:
        """Where the policy comes from: ``remote:URL``, the builtin's name, or ``entrypoint:module:attr``."""
        if self.remote is not None:
            return f"remote:{self.remote}"
        return self.builtin if self.builtin is not None else f"entrypoint:{self.entrypoint}"

    def identity(self, resolved_version: str) -> dict[str, Any]:
        """What makes two policies the same policy: source, params and version (not the display name)."""
        return {"source": self.source, "params": self.params, "version": resolved_version}

    def params_hash(self) -> str:
        """A short content hash of the params."""
        return content_hash(self.params, length=8)


def policy_from_shorthand(value: str) -> PolicySpec:
    """``'expert'`` is a builtin; ``'pkg.mod:attr'`` an entrypoint named after its attr;
    ``'remote:ws://host:port'`` a policy server, named ``remote-host-port``; ``'bc:PATH'`` a
    behaviour-cloning checkpoint (builtin ``bc`` with param ``path``), named ``bc-<file stem>``;
    ``'pixel-bc:PATH'`` a camera BC checkpoint (builtin ``pixel-bc``), named ``pixel-bc-<file stem>``;
    ``'lerobot:PATH'`` a lerobot PreTrainedPolicy directory (builtin ``lerobot``), named ``lerobot-<dir name>``."""
    for prefix in ("bc:", "pixel-bc:", "lerobot:"):
        if value.startswith(prefix):
            path = value[len(prefix):]
            if not path:
                raise ValueError(f"'{prefix}' needs a checkpoint path, e.g. {prefix}runs/base.pt")
            stem = re.sub(r"[^\w.\-]+", "-", path.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[0]).strip("-") or "ckpt"
            return PolicySpec(name=f"{prefix[:-1]}-{stem}", builtin=prefix[:-1], params={"path": path})
    if value.startswith("remote:"):
        url = value[len("remote:"):]
        name = "remote-" + re.sub(r"[^\w.\-]+", "-", url.split("://", 1)[-1]).strip("-")
        return PolicySpec(name=name, remote=url)
    if ":" in value:
        return PolicySpec(name=value.rsplit(":", 1)[1], entrypoint=value)
    return PolicySpec(name=value, builtin=value)
