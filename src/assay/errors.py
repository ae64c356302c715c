"""Every exception (and warning) Assay defines, and their tree.

Every error Assay raises on purpose derives from :class:`AssayError`, so a caller
(the CLI above all) can catch user mistakes in one place and print one line. The
classes live here, in one module (httpx's ``_exceptions``); the modules that raise
them import them from here::

    AssayError
    ├── SpecError              a campaign, task or policy spec is malformed
    │   ├── UnknownTaskError       a task id that no registry holds
    │   ├── UnknownPolicyError     a builtin name or ``module:attr`` that does not resolve
    │   ├── UnsupportedError       a valid spec that this task/backend/policy cannot run
    │   ├── ContractError          a policy's declared interface does not fit the task
    │   └── ManifestError          an unknown protocol, or a manifest whose hash is not its content's
    ├── StoreError             the store or catalog cannot be read or written
    │   ├── WriteError             a file could not be written (where, and the OS's reason)
    │   ├── UndecodableRow         a catalog row that does not decode into an EpisodeRecord
    │   ├── DuplicateEpisodes      two episodes of one column on one paired row of a seed table
    │   └── TraceError             no per-layer trace to read, or two sides with nothing to pair
    ├── BundleError            a result bundle that fails its SHA-256 manifest or cannot be read
    ├── ResultsCsvError        a results CSV that cannot be used (file and row named)
    ├── DataQueryError         a training-data query that does not parse or selects nothing
    ├── RegressionError        a regression set that is missing, malformed or has no such version
    ├── ReplayMismatch         a replay that does not reproduce its recording
    ├── TwinError              a digital twin that cannot be built or used
    ├── WireError              a frame that is not openpi's msgpack array format
    ├── ProtocolError          a request that breaks the policy server's protocol (also a ValueError)
    ├── ServerStartError       the policy server did not come up
    ├── SessionRefused         a policy-server session that cannot be served (its ``E_SESSION*`` code)
    ├── ConformanceError       a backend or policy breaks its contract (``assay.testing``'s checks)
    ├── SimulatorRefused       a served simulator that cannot serve this campaign (gone, busy, another version or
    │                          protocol, a task it does not have): one line naming the fix, before episode 1
    └── EpisodeError           one episode went wrong (simulator raised, bad action);
        │                      recorded as outcome ``error``, never raised out of a campaign
        ├── PolicyUnavailableError   the policy server cannot be reached or did not answer in time
        │   └── ServerBusyError          it answered 503 past the retry budget
        ├── RemotePolicyError        it answered with an error or a malformed reply
        └── SimulatorLostError       a served simulator went away (or raised) during an episode

    UserWarning
    ├── ContractWarning        a range mismatch between a policy's contract and a task (the run goes on)
    └── CapacityWarning        a campaign would open more connections than its policy server holds

Infrastructure errors (``StoreError``) are never scored as policy failures; an
``EpisodeError`` becomes an ``error`` outcome with its reason, counted apart.
(Three module-private control-flow signals, ``policies.remote.client._Resend``,
``policies.remote.server._ClientError`` and ``served.sessions._Refusal``, never leave their modules and stay
there.)
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator


def unknown_name(kind: str, name: str, known: Iterable[str], where: object = None, none: str = "none yet") -> str:
    """The one wording for a name that is not there (a campaign, a regression set, a protocol):
    ``no campaign 'x' in ROOT; known: a, b; did you mean 'a'?`` (the closest known names, when any is close)."""
    names = sorted({str(n) for n in known})
    close = difflib.get_close_matches(str(name), names, n=2, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    at = f" in {where}" if where is not None else ""
    return f"no {kind} {name!r}{at}; known: {', '.join(names) or none}{hint}"


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


class ContractError(SpecError):
    """A policy's contract does not fit a task in a way that would produce garbage."""


class ManifestError(SpecError):
    """An unknown protocol name, or a protocol manifest whose recorded hash is not the hash of its content."""


class BundleError(AssayError):
    """A result bundle that cannot be read, or whose files do not match its SHA-256 manifest."""


class StoreError(AssayError):
    """The store directory or the catalog cannot be used."""


class TraceError(StoreError):
    """An episode or campaign has no per-layer trace to read (recorded before tracing, or pruned), or two
    campaigns have no paired episodes to compare; the message says which and what to do."""


class WriteError(StoreError):
    """A file could not be written (``where``) for ``reason`` (the OS's words: a full disk, a permission)."""

    def __init__(self, where: str, reason: str, what: str = "") -> None:
        super().__init__(f"cannot write {what + ' ' if what else ''}{where}: {reason}")
        self.where, self.reason = where, reason


class UndecodableRow(StoreError):
    """A catalog row that does not decode into an EpisodeRecord (an unknown outcome, broken JSON)."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"catalog row of episode {key[:12]} cannot be read: {why}")
        self.key, self.why = key, why


class DuplicateEpisodes(StoreError):
    """Two episodes of one column (a policy, or a variant) on one paired row (task, variant or policy, seed): a
    paired table cannot hold them (``assay.store.aggregates.seed_patterns``)."""


class ResultsCsvError(AssayError):
    """A results CSV that cannot be used; the message names the file and row."""


class DataQueryError(AssayError):
    """A data query that cannot be parsed or selects nothing."""


class RegressionError(AssayError):
    """A regression set that is missing, malformed or asked for at a version it does not have."""


class ReplayMismatch(AssayError):
    """A replay does not reproduce the recorded episode: it cannot stand for what happened."""


class TwinError(AssayError):
    """A twin that cannot be built or used; the message names what is wrong and what is valid."""


class WireError(AssayError):
    """A frame that is not valid msgpack in openpi's array format."""


class ProtocolError(AssayError, ValueError):
    """A request that does not follow the protocol or the server's contract."""


class ServerStartError(AssayError):
    """The policy server did not come up (its port taken, its policy failing to build, ...)."""


class SessionRefused(AssayError):
    """A request's session cannot be served: ``code`` is one of the ``E_SESSION*`` codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class SimulatorRefused(AssayError):
    """A served simulator (``assay serve-sim``) cannot serve this campaign; the message names the fix."""


class ProbeFailed(AssayError):
    """A ``--workers auto`` probe roll whose episode did not run (its set-up or its first step failed): no figure
    to size a campaign from (``assay.run.autosize`` then leaves the defaults)."""


class ConformanceError(AssayError):
    """A SimEnv or Policy does not do what its protocol promises (found by ``assay.testing``)."""


class EpisodeError(AssayError):
    """One episode failed for a reason outside the policy's skill (recorded, not raised)."""


class PolicyUnavailableError(EpisodeError):
    """The policy server cannot be reached, closed the connection, or did not answer in time."""


class ServerBusyError(PolicyUnavailableError):
    """The server answered HTTP 503 (every connection it holds is busy) past the retry budget."""


class SimulatorLostError(EpisodeError):
    """A served simulator's connection broke, or its environment raised, during an episode (an ``error`` outcome)."""


class RemotePolicyError(EpisodeError):
    """The server answered with an error (a coded line: ``code``) or with a malformed reply (``code`` None)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class ContractWarning(UserWarning):
    """A range mismatch between a policy's contract and a task (the campaign still runs)."""


class CapacityWarning(UserWarning):
    """A campaign would open more connections or sessions than its policy server holds."""
