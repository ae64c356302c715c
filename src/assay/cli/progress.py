"""Campaign progress: episodes done/total, episodes/s, ETA, successes, errors.

On a terminal, a Rich progress bar. Elsewhere (a SLURM log, CI, a pipe) a bar draws nothing
until the end, so plain lines go to stderr instead: at the start, every ``every`` seconds, and at the end.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from assay.run import CampaignSummary
from assay.store import EpisodeRecord, Outcome


class CampaignProgress:
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
            TextColumn("success {task.fields[successes]}/{task.fields[scored]}"),
            TextColumn("[red]errors {task.fields[errors]}"),
            console=console,
            disable=not enabled or self.plain,
        )
        self._task: TaskID | None = None
        self._started = 0.0
        self._counts = {o: 0 for o in Outcome}

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
            summary.name, total=summary.total, completed=summary.skipped, rate=0.0, successes=0, scored=0, errors=0
        )

    def record(self, record: EpisodeRecord) -> None:
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

    def _line(self, final: bool = False) -> None:
        """``campaign NAME: 12/40 episodes (30%), 1.52 ep/s, ETA 18s, success 10/12, errors 0``."""
        self._last_line = now = time.perf_counter()
        ran = sum(self._counts.values())
        done = self._skipped + ran
        rate = ran / max(now - self._started, 1e-9)
        eta = f"{(self._total - done) / rate:.0f}s" if ran and done < self._total else "-"
        percent = 100 * done / self._total if self._total else 100
        errors = self._counts[Outcome.ERROR]
        self.console.print(
            f"campaign {self._name}: {done}/{self._total} episodes ({percent:.0f}%), {rate:.2f} ep/s, "
            f"{'done' if final else 'ETA ' + eta}, success {self._counts[Outcome.SUCCESS]}/{ran - errors}, "
            f"errors {errors}", highlight=False, markup=False, soft_wrap=True)
