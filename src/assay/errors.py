"""The exception root of Assay and its tree.

Every error Assay raises on purpose derives from :class:`AssayError`, so a caller
(the CLI above all) can catch user mistakes in one place and print one line::

    AssayError
    ├── SpecError            a campaign, task or policy spec is malformed
    │   ├── UnknownTaskError     a task id that no registry holds
    │   ├── UnknownPolicyError   a builtin name or ``module:attr`` that does not resolve
    │   └── UnsupportedError     a valid spec that this task/backend/policy cannot run
    ├── StoreError           the store or catalog cannot be read or written
    ├── ConformanceError     a backend or policy breaks its contract (``assay.testing``'s checks)
    └── EpisodeError         one episode went wrong (simulator raised, bad action);
                             recorded as outcome ``error``, never raised out of a campaign

Infrastructure errors (``StoreError``) are never scored as policy failures; an
``EpisodeError`` becomes an ``error`` outcome with its reason, counted apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class AssayError(Exception):
    """Root of every error Assay raises on purpose."""


class SpecError(AssayError):
    """A campaign, task or policy spec is malformed; the message names where and what.

    ``at`` is the field's path in the campaign (``("policies", 1, "params", "noise")``) when a check after
    loading found the mistake, so that whoever holds the file can name its line (``assay run`` does)."""

    def __init__(self, message: str = "", at: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.at = at


@contextlib.contextmanager
def located(*at: str | int) -> Iterator[None]:
    """A SpecError raised in the block is at ``at`` (before any path it already names inside it)."""
    try:
        yield
    except SpecError as exc:
        exc.at = at + exc.at
        raise


class UnknownTaskError(SpecError):
    """A task id that the registry does not hold."""


class UnknownPolicyError(SpecError):
    """A policy reference that does not resolve."""


class UnsupportedError(SpecError):
    """A well-formed spec that the chosen task, backend or policy cannot run."""


class StoreError(AssayError):
    """The store directory or the catalog cannot be used."""


class ConformanceError(AssayError):
    """A SimEnv or Policy does not do what its protocol promises (found by ``assay.testing``)."""


class EpisodeError(AssayError):
    """One episode failed for a reason outside the policy's skill (recorded, not raised)."""
