"""Fault handling shared by the executors: bounded retries, wall-clock limits, no loss, no duplicates.

The executors hand out *work items* (a batch of jobs plus how often it was tried)
and report back one of three things: records, "the worker died", or "the batch
ran past its deadline". The :class:`Dispatcher` decides what happens next:

* **worker died** (SIGKILL, OOM killer, lost node): every job of the batch is
  tried again, up to ``max_attempts`` times in all. The retry runs each job of
  the batch alone, so one episode that crashes its process cannot take its
  batch-mates down with it (results do not depend on batching, so this costs
  only speed); a job that exhausts its attempts becomes an ``error`` record
  naming the cause.
* **deadline passed**: the executor kills the worker (the only way to stop a hung
  simulator or policy) and reports it. A batch that never *started* (its policy
  or environments hung while being built or reset, or its policy's first
  ``act`` never returned: the worker never said it began stepping) ends at once,
  every job ``error`` with reason ``wall_timeout: ...``: the hang is the batch's
  set-up or first inference, which every job alone would repeat, so one hang
  costs one timeout, not one per job (a policy that hangs at step 0 on one seed
  only takes its batch-mates down with it; ``--retry-errors`` reruns them). A batch that
  started runs in lockstep and lasts as long as its slowest episode: a batch of
  several jobs is split and each job rerun alone (their results do not depend on
  batching); a single job that runs past the limit becomes ``error`` with reason
  ``wall_timeout: ...``.
* **records**: passed on, except keys already passed on (a duplicate can only
  arise if a batch is retried after its results were sent), so the driver sees
  every job exactly once.

The records of a batch travel together, after all of its step files are written
atomically, so a killed worker leaves no partial file (only a temporary that
``remove_stale_temporaries`` deletes) and no half-reported batch.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from assay.errors import AssayError
from assay.run.recorder import EpisodeRecorder
from assay.spec import EpisodeJob
from assay.store import EpisodeRecord, Outcome, provenance

Batch = tuple[EpisodeJob, ...]

DEFAULT_MAX_ATTEMPTS = 3
# Every wait has a limit: a batch that runs longer than this (a policy that never answers, a
# simulator stuck in a loop) has its worker killed and its episodes recorded as errors. Generous
# for CPU camera campaigns (a 500-step, two-camera batch takes a few minutes); set lower per
# campaign (``episode_timeout_s``) or per run (``assay run --episode-timeout``).
DEFAULT_EPISODE_TIMEOUT_S = 900.0


# What an error reason says when the worker process itself is exhausted, not just the episode:
# after such an episode the worker is replaced, so the next policy starts in a fresh process.
RESOURCE_EXHAUSTION = ("MemoryError", "Cannot allocate memory", "out of memory", "Too many open files")


def exhausted(records: Iterable[EpisodeRecord]) -> str | None:
    """The reason of the first error record that names an exhausted resource, else None."""
    for record in records:
        if record.outcome is Outcome.ERROR and any(mark in (record.reason or "") for mark in RESOURCE_EXHAUSTION):
            return record.reason
    return None


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (Linux ``/proc``), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class Failure(str, Enum):
    """Why a worker's batch did not come back: its worker died, or it ran past its wall-clock limit."""

    DIED = "died"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True)
class FaultPolicy:
    """How hard to try. ``episode_timeout_s``: wall-clock limit of one episode (None: no limit;
    the default is :data:`DEFAULT_EPISODE_TIMEOUT_S`). The local and Ray executors enforce it;
    the inline executor runs in the caller's process and cannot stop a hung call.

    The limit is enforced per batch: a batch must finish within ``episode_timeout_s``
    of being handed to a started worker (its episodes run side by side; a worker's
    process start-up does not count). Building the worker's environments at first
    use does count, so set the limit well above the ~1 s an environment takes to build.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    episode_timeout_s: float | None = DEFAULT_EPISODE_TIMEOUT_S
    # A worker above this resident memory after a batch is replaced (None: no ceiling). A worker
    # is always replaced after an episode that ended in a resource error (see ``exhausted``).
    worker_rss_limit_mb: float | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise AssayError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.episode_timeout_s is not None and self.episode_timeout_s <= 0:
            raise AssayError(f"episode timeout must be positive seconds, got {self.episode_timeout_s}")

    def deadline(self, started: float) -> float | None:
        """When a batch started at ``started`` (monotonic seconds) times out, or None without a limit."""
        return None if self.episode_timeout_s is None else started + self.episode_timeout_s


@dataclass(frozen=True)
class WorkItem:
    """One batch as queued, and which attempt at it this is."""

    jobs: Batch
    attempt: int = 1  # 1 for the first try


def error_records(jobs: Iterable[EpisodeJob], reason: str) -> list[EpisodeRecord]:
    """``error`` records (no step data) for jobs that could not be run."""
    records = []
    for job in jobs:
        recorder = EpisodeRecorder(job)
        recorder.finish(Outcome.ERROR, reason)
        records.append(recorder.record(provenance(), None, None))
    return records


def environment_key(item: WorkItem) -> str:
    """The environment a work item needs: a worker that built it once reuses it (variants apply at reset)."""
    task = item.jobs[0].task
    return f"{task.id}#{task.content_hash()}"


# Called with a batch just before it is first handed to a worker: the jobs of it this run may run (the job
# leases of :mod:`assay.run.leases`); the rest are dropped, and a batch left empty is skipped. Retries of a
# batch already handed out are not asked again.
Claim = Callable[[Batch], Batch]


class Dispatcher:
    """The queue of work items and the bookkeeping of what has been reported.

    Items wait in per-environment queues (in the order given) so that ``take`` can keep
    a worker on environments it has already built (``gym.make`` of a Meta-World task
    costs ~0.7 s) and hand a fresh worker an environment no other worker is on.
    Retried items wait in front of everything. Which worker runs an episode never
    changes its result, so this only changes speed.
    """

    def __init__(self, batches: Sequence[Batch], policy: FaultPolicy, claim: Claim | None = None) -> None:
        self.policy, self._claim = policy, claim
        self._retries: deque[WorkItem] = deque()
        self._queues: dict[str, deque[WorkItem]] = {}
        for batch in batches:
            if batch:
                item = WorkItem(tuple(batch))
                self._queues.setdefault(environment_key(item), deque()).append(item)
        self._reported: set[str] = set()
        self.retries = 0  # work items requeued after a failure (for tests and logs)

    def has_work(self) -> bool:
        """Whether any batch is still queued or waiting for a retry."""
        return bool(self._retries) or bool(self._queues)

    def waiting(self) -> int:
        """How many items are still queued or waiting for a retry."""
        return len(self._retries) + sum(len(queue) for queue in self._queues.values())

    def put_back(self, item: WorkItem) -> None:
        """Return ``item``, taken but never begun (it was sent ahead to a worker that died, timed out or was
        retired first): it goes first, as it is, claims kept, no attempt charged."""
        self._retries.appendleft(item)

    def take(self, warm: Collection[str] = (), elsewhere: Collection[str] = ()) -> WorkItem | None:
        """The next item: a retry; else one for an environment in ``warm`` (built by the taker); else one
        no other worker is on (not in ``elsewhere``); else the oldest queued environment's next item. With a
        ``claim``, a fresh item keeps the jobs it grants; None when it granted none of what was left."""
        if self._retries:
            return self._retries.popleft()
        while self._queues:
            key = next((k for k in self._queues if k in warm), None) \
                or next((k for k in self._queues if k not in elsewhere), None) or next(iter(self._queues))
            queue = self._queues[key]
            item = queue.popleft()
            if not queue:
                del self._queues[key]
            if self._claim is None:
                return item
            granted = tuple(self._claim(item.jobs))
            if granted:
                return WorkItem(granted, item.attempt)
        return None

    def succeeded(self, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
        """The records of a batch that came back, reported to the observers."""
        return self._report(records)

    def failed(self, item: WorkItem, failure: Failure, detail: str, started: bool = True) -> list[EpisodeRecord]:
        """Requeue what deserves another try; return error records for what does not. ``started``: whether
        the batch began stepping (a timed-out batch that did not is recorded whole, see the module docstring)."""
        if failure is Failure.TIMED_OUT:
            limit = self.policy.episode_timeout_s
            if not started:
                reason = (f"wall_timeout: its batch of {len(item.jobs)} took no step within the {limit:g} s "
                          "wall-clock limit (the policy or the environments hung while being built or reset, "
                          "or in the policy's first inference)")
                return self._report(error_records(item.jobs, reason))
            if len(item.jobs) > 1:
                self._requeue([WorkItem((job,), item.attempt) for job in item.jobs])
                return []
            reason = f"wall_timeout: episode ran past its {limit:g} s wall-clock limit"
            return self._report(error_records(item.jobs, reason))
        if len(item.jobs) > 1 and item.attempt < self.policy.max_attempts:
            self._requeue([WorkItem((job,), item.attempt + 1) for job in item.jobs])
            return []
        if item.attempt >= self.policy.max_attempts:
            reason = f"worker died {item.attempt} times running this episode ({detail}); gave up"
            return self._report(error_records(item.jobs, reason))
        self._requeue([WorkItem(item.jobs, item.attempt + 1)])
        return []

    def _requeue(self, items: list[WorkItem]) -> None:
        self.retries += len(items)
        # Retries go first: they hold the oldest work, and a failing job should surface early.
        self._retries.extendleft(reversed(items))

    def _report(self, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
        fresh = [r for r in records if r.key not in self._reported]
        self._reported.update(r.key for r in fresh)
        return fresh
