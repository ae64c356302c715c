"""``--workers auto`` and ``envs_per_worker: auto``: a short probe of this host, backend and policy picks them.

The probe runs the largest pending cell's own episodes, cut to :data:`PROBE_STEPS` steps, in this process through
a :class:`~assay.run.worker.Worker` (the same builds, policy calls, recording and per-step work as a campaign;
nothing is written to the store): first one environment twice (the second run is timed, the first pays the
builds and any warm-up), then 2, 4, 8, ... environments in lockstep, until a doubling gains less than
:data:`GAIN`, the cell has no more episodes, or the probe has spent :data:`PROBE_BUDGET_S` or more than
:data:`PROBE_SHARE` of the campaign's predicted wall time (a short campaign is sized from its first roll).
Each point gives the seconds of one lockstep step with ``B`` environments, the seconds to build one more
environment and the resident memory it added.

The choice minimises the predicted wall time of the pending episodes over ``W`` worker processes (at most the
cores this process may use: simulation and CPU inference are compute-bound, one process a core) and ``B``
environments each::

    time(W, B) = T * B * build + ceil(batches(B) / W) * H * step(B)

with ``batches(B)`` the lockstep batches the pending episodes form (:func:`assay.spec.batch_jobs`: one cell's
episodes, B at a time), ``T`` the tasks a worker sees (it keeps B environments of each; at most its rounds) and
``H`` their horizon (an upper bound: episodes that succeed stop early), and
keeps ``W * B`` environments within :data:`MEMORY_SHARE` of the memory available now. A prediction within
:data:`TIE` of the fastest is a tie, which goes to fewer processes, then fewer environments (a lockstep batch
waits for its longest episode, which the model, running every episode to the horizon, does not see). The
grouping of episodes into batches never changes their results (:func:`assay.spec.batch_jobs`), so neither
does the choice for a batch-invariant policy; it is printed with the figures it came from. The probe runs on a
thread of the driver: one that fails or has not finished after :data:`PROBE_TIMEOUT_S` (a hanging policy) leaves
the defaults (4 environments) and says so. A campaign of one episode a cell is not probed (a batch never holds
two cells): one environment a worker. Not done: an adaptive campaign is sized from its first round's pending
episodes (small rounds: usually one roll) and keeps that choice for its later rounds.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from assay.errors import ProbeFailed
from assay.spec import DEFAULT_ENVS_PER_WORKER, EpisodeJob, batch_jobs

PROBE_STEPS = 30  # steps of each probe episode (the task's horizon, cut)
GAIN = 1.05  # a doubling of the environments that raises steps/s by less than this ends the probe
PROBE_BUDGET_S = 20.0  # the probe stops doubling once it has spent this long
PROBE_SHARE = 0.05  # ... or more than this share of the campaign's predicted wall time
PROBE_TIMEOUT_S = 120.0  # a probe still running after this long is left behind: the defaults are used
MAX_ENVS = 32  # the most environments a worker is probed with
MEMORY_SHARE = 0.8  # of the memory available now, the most the chosen environments may take
TIE = 0.05  # predicted times this close to the fastest count as a tie


@dataclass(frozen=True)
class ProbePoint:
    """One probe: ``envs`` environments in lockstep; seconds a lockstep step took, seconds to build one more
    environment, MiB one more environment took (None where the platform does not say)."""

    envs: int
    step_s: float
    build_s: float
    env_mib: float | None

    @property
    def steps_per_s(self) -> float:
        """Environment steps a second of one worker with this many environments."""
        return self.envs / self.step_s if self.step_s > 0 else math.inf


@dataclass(frozen=True)
class Sizing:
    """What ``auto`` chose: worker processes and environments per worker, and the figures it chose from."""

    workers: int
    envs_per_worker: int
    cores: int
    pending: int
    horizon: int
    points: tuple[ProbePoint, ...]
    probe_s: float
    predicted_s: float | None
    note: str | None = None  # why the choice is not the model's (a probe that failed)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One line: the choice and why."""
        probed = ", ".join(f"{p.envs} env{'s' if p.envs > 1 else ''} {p.steps_per_s:.0f} steps/s" for p in self.points)
        build = f"; {self.points[0].build_s:.2f} s to build an environment" if self.points else ""
        if self.note is not None:
            return f"auto: {self.workers} worker{'s' if self.workers > 1 else ''} x {self.envs_per_worker} " \
                   f"({self.note})"
        return (f"auto: {self.workers} worker{'s' if self.workers > 1 else ''} x {self.envs_per_worker} "
                f"environment{'s' if self.envs_per_worker > 1 else ''} for {self.pending} episodes on {self.cores} "
                f"core{'s' if self.cores > 1 else ''} (probe {self.probe_s:.1f} s: {probed or 'not run'}{build})")


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_mib() -> float | None:
    """Memory available now (``MemAvailable`` of /proc/meminfo), MiB; None where the platform does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _rss_mib() -> float | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return None


def _probe_cell(jobs: Sequence[EpisodeJob]) -> list[EpisodeJob]:
    """The pending cell with the most episodes (the first of them on a tie), in order, each cut to
    :data:`PROBE_STEPS` steps: after a resume the first cell may hold one episode where others hold hundreds."""
    sizes = Counter(j.cell for j in jobs)
    largest = max(sizes.values())
    chosen = next(j for j in jobs if sizes[j.cell] == largest)
    cell = [j for j in jobs if j.cell == chosen.cell and j.task == chosen.task][:MAX_ENVS]
    short = chosen.task.model_copy(update={"horizon": min(PROBE_STEPS, chosen.task.horizon)})
    return [dataclasses.replace(j, task=short) for j in cell]


def probe(jobs: Sequence[EpisodeJob], worth: Callable[[ProbePoint, float], bool] = lambda point, spent: True,
          max_envs: int = MAX_ENVS) -> list[ProbePoint]:
    """Time the largest pending cell's episodes on 1, 2, 4, ... environments (the module docstring). ``worth(point,
    seconds spent)``, asked after each roll, ends the probe when it answers False (``size_run``: the probe may
    cost at most :data:`PROBE_SHARE` of the campaign it sizes)."""
    from assay.run.worker import Worker

    cell = _probe_cell(jobs)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="assay-probe-") as scratch:
        worker = Worker(scratch)
        try:
            memory = _rss_mib()
            warm = _point(_rolled(worker, cell[:1]), 1, time.perf_counter() - began, 0, 0.0)  # builds, warms up
            points, built = [dataclasses.replace(warm, env_mib=_grown(memory, 1))], 1
            envs = 1
            while envs <= min(max_envs, len(cell)) and worth(points[-1], time.perf_counter() - began) and \
                    _affordable(points[-1], envs - built, time.perf_counter() - began):
                memory, started = _rss_mib(), time.perf_counter()
                point = _point(_rolled(worker, cell[:envs]), envs, time.perf_counter() - started, built,
                               points[-1].build_s)
                if envs > built:  # this roll built the new environments: their memory each
                    point, built = dataclasses.replace(point, env_mib=_grown(memory, envs - built)), envs
                if envs == 1:  # the warm roll measured again, warm: its build time stays the first build's
                    points[0] = dataclasses.replace(point, build_s=warm.build_s, env_mib=points[0].env_mib)
                    envs *= 2
                    continue
                points.append(point)
                if point.steps_per_s < GAIN * points[-2].steps_per_s or time.perf_counter() - began > PROBE_BUDGET_S:
                    break
                envs *= 2
        finally:
            worker.close()
            worker.close_policies()
    if len(points) > 1:  # the first build also paid the imports and the policy (and their memory), once per worker
        points[0] = dataclasses.replace(points[0], build_s=points[1].build_s, env_mib=points[1].env_mib)
    return points


def _rolled(worker: Any, jobs: Sequence[EpisodeJob]) -> list[Any]:
    """``worker.roll(jobs)``; :class:`ProbeFailed` when an episode failed before its first step."""
    recorders: list[Any] = worker.roll(jobs)
    failed = [r for r in recorders if r.steps == 0]
    if failed:
        raise ProbeFailed(failed[0].reason or "an episode ended before its first step")
    return recorders


def _affordable(last: ProbePoint, new_envs: int, spent: float) -> bool:
    """Whether building ``new_envs`` more environments keeps the probe within :data:`PROBE_BUDGET_S` and the
    memory available now (checked before they are built, from the last point's figures)."""
    if spent + max(0, new_envs) * last.build_s > PROBE_BUDGET_S:
        return False
    available = available_mib()
    return available is None or last.env_mib is None or max(0, new_envs) * last.env_mib <= MEMORY_SHARE * available


def _point(recorders: Sequence[Any], envs: int, elapsed: float, built: int, build_s: float) -> ProbePoint:
    """A probe point from one roll of ``envs`` environments that took ``elapsed`` seconds, ``built`` of them built
    before it: the lockstep step's seconds (the roll less its set-up) and the set-up's seconds per environment
    this roll built (``build_s`` when it built none)."""
    setup = max((r.executor.get("setup_ms", 0.0) for r in recorders), default=0.0) / 1000.0
    lockstep = max((r.steps for r in recorders), default=0)
    build = setup / (envs - built) if envs > built else build_s
    return ProbePoint(envs, max(elapsed - setup, 1e-9) / max(lockstep, 1), build, None)


def _grown(before: float | None, count: int) -> float | None:
    """MiB the resident memory grew since ``before``, per one of ``count`` new environments."""
    after = _rss_mib()
    return None if before is None or after is None else max(0.0, after - before) / count


def predicted_s(point: ProbePoint, workers: int, pending: Sequence[EpisodeJob], horizon: int) -> float:
    """The wall time the module docstring's model predicts for ``pending`` on ``workers`` processes of
    ``point.envs`` environments each (rounds of batches as :func:`assay.spec.batch_jobs` forms them)."""
    batches = len(batch_jobs(list(pending), point.envs))
    rounds = math.ceil(batches / workers)
    tasks = min(len({j.task.id for j in pending}), rounds)  # a worker keeps B environments of each task it runs
    return tasks * point.envs * point.build_s + rounds * horizon * point.step_s


def choose(points: Sequence[ProbePoint], pending: Sequence[EpisodeJob], horizon: int, cores: int,
           workers: int | None = None, memory_mib: float | None = None) -> tuple[int, ProbePoint, float]:
    """(workers, the probe point chosen, its predicted seconds): the least predicted wall time over the process
    counts 1..``cores`` (or ``workers``, fixed) and the probed environment counts whose memory fits (the module
    docstring); with none that fits, one process of the fewest environments probed."""
    counts = [workers] if workers is not None else list(range(1, max(1, cores) + 1))

    def fits(w: int, point: ProbePoint) -> bool:
        unknown = memory_mib is None or point.env_mib is None
        return unknown or w * point.envs * point.env_mib <= MEMORY_SHARE * memory_mib  # type: ignore[operator]

    options = [(round(predicted_s(point, w, pending, horizon), 6), w, point.envs, point)
               for point in points for w in counts if fits(w, point)]
    if not options:
        return counts[0], points[0], predicted_s(points[0], counts[0], pending, horizon)
    fastest = min(o[0] for o in options)
    # within TIE of the fastest is a tie (the probe's own noise): fewer processes, then fewer environments, which
    # also wait less in lockstep for a batch's longest episode (the model runs every episode to the horizon)
    best = min((o for o in options if o[0] <= fastest * (1 + TIE)), key=lambda o: (o[1], o[2]))
    return best[1], best[3], best[0]


def _probe_within(pending: Sequence[EpisodeJob], worth: Callable[[ProbePoint, float], bool],
                  timeout_s: float) -> tuple[list[ProbePoint], str | None]:
    """:func:`probe` on a thread of its own, waited for at most ``timeout_s``: (its points, None), or ([], why not)
    when it failed or did not finish (a policy or a simulator that hangs: the thread is left behind, a daemon, and
    the campaign's own workers, under its episode timeout, meet the hang)."""
    found: dict[str, Any] = {}

    def run() -> None:
        try:
            found["points"] = probe(pending, worth)
        except ProbeFailed as exc:
            found["failed"] = f"the probe's episode failed ({exc})"
        except Exception as exc:  # noqa: BLE001 - any fault of the probe leaves the campaign to meet it
            found["failed"] = f"the probe failed ({type(exc).__name__}: {exc})"

    thread = threading.Thread(target=run, name="assay-autosize-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return [], f"the probe did not finish in {timeout_s:.0f} s"
    return found.get("points", []), found.get("failed")


def size_run(pending: Sequence[EpisodeJob], workers: int | None, envs_per_worker: int | None,
             cores: int | None = None) -> Sizing:
    """Choose what is ``None`` of ``workers`` and ``envs_per_worker`` for ``pending`` on this host: the
    environments by a probe; the processes alone (environments fixed) as one a core, no more than there are
    batches, which the model above always prefers without one."""
    cores = usable_cores() if cores is None else cores
    horizon = max((j.task.horizon for j in pending), default=1)
    if envs_per_worker is None and max(Counter(j.cell for j in pending).values(), default=0) <= 1:
        envs_per_worker = 1  # a batch holds one cell's episodes: with one episode a cell there is nothing to probe
    if envs_per_worker is not None or not pending:
        envs = envs_per_worker or 1
        chosen = workers or max(1, min(cores, len(batch_jobs(list(pending), envs))))
        return Sizing(chosen, envs, cores, len(pending), horizon, (), 0.0, None)
    began = time.perf_counter()

    def worth(point: ProbePoint, spent: float) -> bool:  # the probe's cost against the campaign it sizes
        workers_then = workers or max(1, min(cores, len(batch_jobs(list(pending), point.envs))))
        return spent <= PROBE_SHARE * predicted_s(point, workers_then, pending, horizon)

    points, failed = _probe_within(pending, worth, PROBE_TIMEOUT_S)
    if failed is not None:  # the campaign itself records what fails or hangs; the probe only sizes it
        envs = DEFAULT_ENVS_PER_WORKER
        return Sizing(workers or max(1, min(cores, len(batch_jobs(list(pending), envs)))), envs, cores, len(pending),
                      horizon, (), time.perf_counter() - began, None, f"{failed}: the defaults")
    chosen, point, seconds = choose(points, pending, horizon, cores, workers, available_mib())
    return Sizing(chosen, point.envs, cores, len(pending), horizon, tuple(points), time.perf_counter() - began,
                  seconds)
