"""Campaigns started from the dashboard: ``assay run`` in a subprocess, one process group each.

The campaign file must lie inside the server's campaign directory (``--campaigns``,
default the directory ``assay serve`` started in) and must load as a campaign, so
a request can neither run an arbitrary file nor start something that fails on
its first line. Cancelling sends SIGTERM to the run's whole process group (the
local executor's workers included), then SIGKILL if it has not ended in time.
Episodes finished before a cancel stay in the store; rerunning resumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from assay.errors import AssayError
from assay.spec import load_campaign
from assay.store import redact_url

CANCEL_GRACE_S = 10.0


class RunState(str, Enum):
    """Where a run started by the server stands."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class Run:
    """One ``assay run`` the server started: its campaign, command, log file and process."""

    id: str
    campaign: str
    path: str
    command: list[str]
    log: str
    started_at: str
    process: subprocess.Popen = field(repr=False)
    cancelled: bool = False

    @property
    def state(self) -> RunState:
        """Running while the process lives; then cancelled, succeeded (exit 0) or failed."""
        code = self.process.poll()
        if code is None:
            return RunState.RUNNING
        if self.cancelled:
            return RunState.CANCELLED
        return RunState.SUCCEEDED if code == 0 else RunState.FAILED

    def to_dict(self) -> dict[str, Any]:
        """The run as the API shows it (the command without a catalog password)."""
        state = self.state
        return {"id": self.id, "campaign": self.campaign, "path": self.path, "state": state.value,
                "returncode": self.process.poll(), "started_at": self.started_at, "command": _redacted(self.command),
                "log": self.log, "error": last_error(Path(self.log)) if state is RunState.FAILED else None}


def last_error(log: Path, tail_bytes: int = 65536) -> str | None:
    """Why a failed run failed, as the dashboard shows it: the log's last ``error:`` line (``assay run`` prints a
    user error as one such line), else its last non-empty line; None when the log is empty or unreadable."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - tail_bytes))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return None
    errors = [line for line in lines if line.startswith("error:")]
    chosen = errors or lines
    return chosen[-1] if chosen else None


class RunManager:
    """The ``assay run`` processes this server started, one process group each, on campaign files of its directory."""

    def __init__(self, store_root: Path, campaigns_dir: Path, catalog_url: str | None = None,
                 executor: str = "local", workers: int = 2) -> None:
        self.store_root = store_root
        self.campaigns_dir = campaigns_dir.expanduser().resolve()
        self.catalog_url = catalog_url
        self.executor = executor
        self.workers = workers
        self.runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    def confine(self, path: str) -> Path:
        """The campaign file for ``path`` (relative to the campaign directory), or AssayError."""
        if "\x00" in path:
            raise AssayError(f"campaign file {path!r}: a path may not hold a NUL character")
        candidate = (self.campaigns_dir / path).resolve()
        if not candidate.is_relative_to(self.campaigns_dir):
            raise AssayError(f"campaign file {path!r} is outside the campaign directory {self.campaigns_dir}")
        if candidate.suffix not in (".yaml", ".yml") or not candidate.is_file():
            raise AssayError(f"no campaign file {path!r} in {self.campaigns_dir} (a .yaml or .yml file)")
        return candidate

    def start(self, path: str) -> Run:
        """Start ``assay run`` on ``path`` (inside the campaign directory, else an AssayError) in its own process group.
        """
        campaign_file = self.confine(path)
        spec = load_campaign(campaign_file)  # SpecError (an AssayError) with file:line on a bad campaign
        with self._lock:
            if any(r.campaign == spec.name and r.state is RunState.RUNNING for r in self.runs.values()):
                raise AssayError(f"campaign {spec.name!r} is already running")
            run_id = uuid.uuid4().hex[:12]
            log_dir = self.store_root / ".dashboard"
            log_dir.mkdir(parents=True, exist_ok=True)
            log = log_dir / f"run-{run_id}.log"
            command = [sys.executable, "-m", "assay.cli.app", "run", str(campaign_file), "--store",
                       str(self.store_root), "--executor", self.executor, "--workers", str(self.workers)]
            if self.catalog_url:
                command += ["--catalog", self.catalog_url]
            with open(log, "wb") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True)  # its own group: cancel reaches the workers
            run = Run(run_id, spec.name, str(campaign_file), command, str(log),
                      datetime.now(UTC).isoformat(timespec="seconds"), process)
            self.runs[run_id] = run
            return run

    def get(self, run_id: str) -> Run:
        """The run ``run_id``; an AssayError names an unknown one."""
        try:
            return self.runs[run_id]
        except KeyError:
            raise AssayError(f"no run {run_id!r}; runs: {', '.join(self.runs) or 'none'}") from None

    def cancel(self, run_id: str) -> Run:
        """Cancel a run: SIGTERM to its process group, SIGKILL after the grace period (finished episodes stay)."""
        run = self.get(run_id)
        if run.state is not RunState.RUNNING:
            return run
        run.cancelled = True
        _signal_group(run.process, signal.SIGTERM)
        try:
            run.process.wait(timeout=CANCEL_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(run.process, signal.SIGKILL)
            run.process.wait()
        return run

    def running(self, campaign: str) -> bool:
        """Whether one of this server's runs of ``campaign`` is still going."""
        return any(r.campaign == campaign and r.state is RunState.RUNNING for r in self.runs.values())

    def shutdown(self) -> None:
        """Cancel every run still going (the server is stopping)."""
        for run_id, run in list(self.runs.items()):
            if run.state is RunState.RUNNING:
                self.cancel(run_id)


def _redacted(command: list[str]) -> list[str]:
    """The command as the API shows it: a ``--catalog`` URL without its password."""
    return [redact_url(arg) if i and command[i - 1] == "--catalog" else arg for i, arg in enumerate(command)]


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
