"""Campaign progress: episodes done/total, episodes/s, ETA, successes, errors; and the progress of any other
long command (its episodes, phases and counted work such as a checkpoint's epochs).

On a terminal, a Rich progress bar. Elsewhere (a SLURM log, CI, a pipe) a bar draws nothing
until the end, so plain lines go to stderr instead: at the start, every ``every`` seconds, and at the end.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from assay.errors import AssayError
from assay.run import CampaignSummary, observing
from assay.store import EpisodeRecord, Outcome


class CampaignProgress:
    """``assay run``'s campaign progress: a Rich bar on a terminal, plain lines every ``every`` seconds elsewhere."""

    def __init__(self, console: Console, enabled: bool = True, every: float = 30.0) -> None:
        self.enabled = enabled
        self.plain = enabled and not console.is_terminal
        self.console, self.every = console, every
        self._name, self._total, self._skipped, self._last_line = "", 0, 0, 0.0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("episodes"),
            TextColumn("{task.fields[rate]:.2f} ep/s"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[scope]}success {task.fields[successes]}/{task.fields[scored]}"),
            TextColumn("[red]errors {task.fields[errors]}"),
            console=console,
            disable=not enabled or self.plain,
        )
        self._task: TaskID | None = None
        self._started = 0.0
        self._counts = {o: 0 for o in Outcome}
        self._elsewhere = 0  # episodes another run on the store ran meanwhile (job leases)

    def __enter__(self) -> CampaignProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)
        if self.plain and self._name and exc[0] is None:
            self._line(final=True)

    def start(self, summary: CampaignSummary) -> None:
        """A campaign starts; an adaptive campaign calls this again for each round, whose episodes are
        added to the total so far (the rate and the counts run on from the first round)."""
        if self._task is not None and summary.name == self._name:
            self._total += summary.total
            self._skipped += summary.skipped
            self._progress.update(self._task, total=self._total, advance=summary.skipped)
            return
        self._started = self._last_line = time.perf_counter()
        self._name, self._total, self._skipped = summary.name, summary.total, summary.skipped
        if self.plain:
            self._line()
        self._task = self._progress.add_task(
            summary.name, total=summary.total, completed=summary.skipped, rate=0.0, successes=0, scored=0, errors=0,
            scope=f"{summary.skipped} were stored; run now: " if summary.skipped else "",
        )

    def record(self, record: EpisodeRecord) -> None:
        """Count a finished episode and move the bar (or print a line when one is due)."""
        self._counts[record.outcome] += 1
        ran = sum(self._counts.values())
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        assert self._task is not None
        self._progress.update(
            self._task,
            advance=1,
            rate=ran / elapsed,
            successes=self._counts[Outcome.SUCCESS],
            scored=ran - self._counts[Outcome.ERROR],
            errors=self._counts[Outcome.ERROR],
        )
        if self.plain and time.perf_counter() - self._last_line >= self.every:
            self._line()

    def ran_elsewhere(self, count: int) -> None:
        """Count the campaign's episodes that another run on the same store ran meanwhile (the summary's
        ``elsewhere``): they are done, though not run here."""
        self._elsewhere += count
        if count and self._task is not None:
            self._progress.update(self._task, advance=count)

    @property
    def stored(self) -> int:
        """Episodes of the campaign in the store now: those found there at the start and those run since."""
        return self._skipped + sum(self._counts.values()) + self._elsewhere

    @property
    def total(self) -> int:
        """The campaign's episodes (an adaptive campaign's, over the rounds so far)."""
        return self._total

    def _line(self, final: bool = False) -> None:
        """``campaign NAME: 12/40 episodes (30%), 1.52 ep/s, ETA 18s, success 10/12, errors 0``; a resumed run adds
        ``(N were already stored)`` and its success and error counts are of the episodes run now, so says."""
        self._last_line = now = time.perf_counter()
        ran = sum(self._counts.values())
        done = self._skipped + ran + self._elsewhere
        rate = ran / max(now - self._started, 1e-9)
        eta = f"{(self._total - done) / rate:.0f}s" if ran and done < self._total else "-"
        percent = 100 * done / self._total if self._total else 100
        errors = self._counts[Outcome.ERROR]
        resumed = f" ({self._skipped} were already stored)" if self._skipped else ""
        resumed += f" ({self._elsewhere} run by another run on this store)" if self._elsewhere else ""
        scope = f" of the {ran} run now" if self._skipped or self._elsewhere else ""
        self.console.print(
            f"campaign {self._name}: {done}/{self._total} episodes ({percent:.0f}%){resumed}, {rate:.2f} ep/s, "
            f"{'done' if final else 'ETA ' + eta}, success {self._counts[Outcome.SUCCESS]}/{ran - errors}{scope}, "
            f"errors {errors}", highlight=False, markup=False, soft_wrap=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a scheduler's stop, a container's shutdown) during a command that runs episodes: it
    unwinds as Ctrl-C does (what finished is committed, workers are stopped) and the command exits 143."""


@contextlib.contextmanager
def sigterm_as_interrupt(running: Callable[[], bool]) -> Iterator[None]:
    """In the block, SIGTERM raises :class:`Terminated` once ``running()`` says episodes were queued; before that
    (planning, a server that runs none) it does what it did before the block: by default the process ends by the
    signal. Only the main thread can take a signal handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    before = previous if previous is not None else signal.SIG_DFL  # None: a handler installed from C

    def terminate(signum: int, frame: FrameType | None) -> None:
        if running():
            raise Terminated()
        signal.signal(signal.SIGTERM, before)
        if callable(before):
            before(signum, frame)
        else:
            signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def interrupted_line(stored: int, total: int, terminated: bool = False) -> str:
    """What Ctrl-C (or SIGTERM) prints: how much of the work is safe in the store, and how to go on."""
    how = "terminated (SIGTERM)" if terminated else "interrupted"
    return f"{how}: {stored} of {total} episodes stored; rerun the same command to resume"


def _status(exc: KeyboardInterrupt) -> int:
    return 143 if isinstance(exc, Terminated) else 130


@contextlib.contextmanager
def interrupt_told(progress: CampaignProgress, console: Console) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) during a campaign prints :func:`interrupted_line` (the campaign's episodes in the store,
    of its total) and exits with status 130 (143); before the campaign started it is left as it was."""
    try:
        with sigterm_as_interrupt(lambda: bool(progress.total)):
            yield
    except KeyboardInterrupt as exc:
        if not progress.total:
            raise
        console.print(interrupted_line(progress.stored, progress.total, isinstance(exc, Terminated)),
                      highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(_status(exc)) from None


class WorkProgress:
    """The progress of any command that runs episodes or long work (an :class:`assay.run.Observer`): the
    episodes its executors were handed so far, how many finished, their rate, successes and errors; the phase
    of other work; and how far counted work is (a checkpoint's epochs). On a terminal a bar that appears with
    the first event (a row for the episodes, a row for the counted work); elsewhere plain lines on stderr: a
    phase when it starts, the episodes when a batch of them is handed out and every ``every`` seconds, counted
    work when it starts, every ``every`` seconds and when it ends, and a last episodes line at the end."""

    def __init__(self, name: str, console: Console, every: float = 30.0) -> None:
        self.name, self.console, self.every = name, console, every
        self.plain = not console.is_terminal
        self.queued_total, self.phase_text = 0, ""
        self.finished_keys: list[str] = []
        self._counts = {o: 0 for o in Outcome}
        self._started = self._last_line = 0.0
        self._work, self._work_started, self._work_line = "", 0.0, 0.0  # the counted work, when it began, last line
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[detail]}"), console=console, disable=self.plain)
        self._task: TaskID | None = None  # the episodes' row
        self._work_task: TaskID | None = None  # the counted work's row

    @property
    def finished_total(self) -> int:
        """Episodes finished (their files written) since the command started."""
        return sum(self._counts.values())

    def _begin(self) -> None:
        if self._started:
            return
        self._started = self._last_line = time.perf_counter()
        if not self.plain:
            self._bar.start()

    def _episodes_row(self) -> TaskID:
        if self._task is None:
            self._task = self._bar.add_task(self.name, total=0, detail="")
            self._draw_episodes()
        return self._task

    def _draw_episodes(self) -> None:
        ran, errors = self.finished_total, self._counts[Outcome.ERROR]
        rate = ran / max(time.perf_counter() - self._started, 1e-9)
        self._bar.update(self._episodes_row(), completed=ran, total=self.queued_total,
                         detail=f"episodes (queued so far) {rate:.2f} ep/s success {self._counts[Outcome.SUCCESS]}/"
                                f"{ran - errors} [red]errors {errors}[/]")

    def queued(self, episodes: int) -> None:
        """An executor was handed ``episodes`` more."""
        self._begin()
        self.queued_total += episodes
        if not self.plain:
            self._draw_episodes()
        elif episodes:
            self._line()

    def finished(self, record: EpisodeRecord) -> None:
        """One episode finished."""
        self._counts[record.outcome] += 1
        self.finished_keys.append(record.key)
        if not self.plain:
            self._draw_episodes()
        elif time.perf_counter() - self._last_line >= self.every:
            self._line()

    def phase(self, text: str) -> None:
        """Other long work started."""
        self._begin()
        self.phase_text = text
        if not self.plain:
            self._bar.update(self._episodes_row(), description=f"{self.name}: {text}")
        else:
            self.console.print(f"{self.name}: {text}", highlight=False, markup=False, soft_wrap=True)

    def advanced(self, text: str, done: int, total: int, unit: str) -> None:
        """Counted work advanced: ``done`` of ``total`` ``unit`` of ``text`` (a new ``text`` is new work)."""
        self._begin()
        now = time.perf_counter()
        new = text != self._work
        if new:
            self._work, self._work_started = text, now
        if not self.plain:
            if self._work_task is None:
                self._work_task = self._bar.add_task(f"{self.name}: {text}", total=total, completed=done, detail=unit)
            self._bar.update(self._work_task, description=f"{self.name}: {text}", completed=done, total=total,
                             detail=unit)
        elif new or done >= total or now - self._work_line >= self.every:
            self._work_line = now
            elapsed = now - self._work_started
            if done >= total:
                tail = f", done in {elapsed:.0f}s"
            else:
                tail = f", ETA {elapsed / done * (total - done):.0f}s" if done else ""
            self.console.print(f"{self.name}: {text}: {done}/{total} {unit}{tail}", highlight=False, markup=False,
                               soft_wrap=True)

    def close(self, final: bool = True) -> None:
        """The command ended: the bar stops; without a terminal a last line (when any episode was queued and
        the work was not interrupted)."""
        if not self.plain and self._started:
            self._bar.stop()
        elif self.plain and self.queued_total and final:
            self._line(final=True)

    def _line(self, final: bool = False) -> None:
        """``sweep: 12 of 40 queued episodes done, 1.52 ep/s, success 10/12, errors 0``."""
        self._last_line = now = time.perf_counter()
        ran, errors = self.finished_total, self._counts[Outcome.ERROR]
        rate = ran / max(now - self._started, 1e-9)
        head = (f"done, {ran} episodes run in {now - self._started:.0f}s" if final
                else f"{ran} of {self.queued_total} queued episodes done")
        self.console.print(f"{self.name}: {head}, {rate:.2f} ep/s, success {self._counts[Outcome.SUCCESS]}/"
                           f"{ran - errors}, errors {errors}", highlight=False, markup=False, soft_wrap=True)


def stored_episodes(store: Path, catalog: str | None, keys: Sequence[str]) -> int:
    """How many of ``keys`` the catalog of the store at ``store`` (or ``catalog``) holds now."""
    from assay.store import Store

    with Store(store, catalog, create=False) as opened:
        return len(opened.integrity(keys))


@contextlib.contextmanager
def watch(name: str, console: Console,
          count_stored: Callable[[Sequence[str]], int] | None = None) -> Iterator[WorkProgress]:
    """Show the progress of the work done in the block; Ctrl-C after an episode was queued prints how many of
    the queued episodes are stored (``count_stored`` counts the finished ones in the catalog after the block
    has unwound: the rows it committed on the way out; without it, or when the catalog cannot be read, the
    finished episodes count) and exits with status 130 (a Ctrl-C before any is left as it was); SIGTERM the same
    way, with status 143."""
    progress = WorkProgress(name, console)
    interrupted: KeyboardInterrupt | None = None
    ended = False
    try:
        with observing(progress), sigterm_as_interrupt(lambda: bool(progress.queued_total)):
            yield progress
        ended = True
    except KeyboardInterrupt as exc:
        if not progress.queued_total:
            raise
        interrupted = exc
    finally:
        progress.close(final=ended)  # a command that failed or was interrupted has said why: no "done" line
    if interrupted is not None:
        stored = progress.finished_total
        if count_stored is not None and progress.finished_keys:
            with contextlib.suppress(AssayError, OSError):
                stored = count_stored(progress.finished_keys)
        console.print(interrupted_line(stored, progress.queued_total, isinstance(interrupted, Terminated)),
                      highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(_status(interrupted))
