"""A Rich progress bar for campaigns: episodes done/total, episodes/s, ETA, successes, errors."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from assay.run import CampaignSummary
from assay.store import EpisodeRecord, Outcome


class CampaignProgress:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.enabled = enabled
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
            disable=not enabled,
        )
        self._task: TaskID | None = None
        self._started = 0.0
        self._counts = {o: 0 for o in Outcome}

    def __enter__(self) -> CampaignProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def start(self, summary: CampaignSummary) -> None:
        self._started = time.perf_counter()
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
