"""Who is told what runs in this process: the episodes every executor queues and finishes, and the phases of
long work (training a checkpoint, one replicate of an experiment) and how far counted work is (a checkpoint's
epochs).

The CLI registers an observer for the duration of a command and shows it as progress; nothing else reads it,
and with no observer registered the cost is one empty-list check per executor run. Every executor's ``run`` is
wrapped by :func:`observed`, so a library function that runs episodes (a sweep, a boundary search, a
flywheel arm, a twin calibration) shows progress without taking a callback.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:  # `cli.progress` watches read-only commands too: neither the runner nor the store is loaded here
    from assay.run.faults import Batch
    from assay.store import EpisodeRecord


class Observer(Protocol):
    """What an observer is told."""

    def queued(self, episodes: int) -> None:
        """An executor was handed ``episodes`` more episodes to run."""

    def finished(self, record: EpisodeRecord) -> None:
        """One episode finished and its files are written (its record is what the catalog will hold)."""

    def phase(self, text: str) -> None:
        """Long work other than episodes started: ``text`` says what (``training arm random on 120 demos``)."""

    def advanced(self, text: str, done: int, total: int, unit: str) -> None:
        """Counted long work advanced: ``done`` of ``total`` ``unit`` of ``text`` (3 of 50 epochs of ``training
        bc checkpoint bc.pt on 120 demos (6000 frames)``); ``done`` is 0 when it starts and ``total`` when it ends."""


_OBSERVERS: list[Observer] = []


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Tell ``observer`` of every episode and phase while the block runs."""
    _OBSERVERS.append(observer)
    try:
        yield observer
    finally:
        _OBSERVERS.remove(observer)


def phase(text: str) -> None:
    """Say that long work other than episodes starts (observers show it; without any it is a no-op)."""
    for observer in list(_OBSERVERS):
        observer.phase(text)


def advanced(text: str, done: int, total: int, unit: str) -> None:
    """Say how far counted long work is (``done`` of ``total`` ``unit``: epochs of one checkpoint's training);
    observers show it, without any it is a no-op."""
    for observer in list(_OBSERVERS):
        observer.advanced(text, done, total, unit)


E = TypeVar("E")
P = ParamSpec("P")
Run: TypeAlias = "Callable[Concatenate[E, Sequence[Batch], P], Iterator[EpisodeRecord]]"


def observed(run: Run[E, P]) -> Run[E, P]:
    """Decorate an executor's ``run``: observers hear how many episodes it was given, then each record."""

    @functools.wraps(run)
    def observed_run(self: E, batches: Sequence[Batch], /, *args: P.args,
                     **kwargs: P.kwargs) -> Iterator[EpisodeRecord]:
        records = run(self, batches, *args, **kwargs)
        return _told(batches, records) if _OBSERVERS else records

    return observed_run


def _told(batches: Sequence[Batch], records: Iterator[EpisodeRecord]) -> Iterator[EpisodeRecord]:
    watching = list(_OBSERVERS)
    for observer in watching:
        observer.queued(sum(len(batch) for batch in batches))
    for record in records:
        for observer in watching:
            observer.finished(record)
        yield record
