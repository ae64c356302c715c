"""A worker: environments and policies built once and reused, batches in, records out.

The worker writes each episode's step file (atomically, its metadata naming the key, task,
variant, seed, instruction and policy, and sealing the episode's summary: outcome, steps,
total return, success step; see :mod:`assay.store.validation`) and returns its record;
it never touches the catalog, which only the driver writes. A job with ``pack`` set (a campaign's
``storage: {pack: batch}``) has its step table written with the rest of its batch's into one pack
file instead (:mod:`assay.store.packs`), atomically as well, before any record is returned: a batch
killed mid-write leaves no pack and no record.

Policies are built before environments, and triton (shipped with every CUDA build
of torch) is imported before the first environment of a process: importing triton
after Mesa's LLVM is loaded (OSMesa, camera rendering on CPU) crashes the process
with SIGSEGV, so a torch policy built after a camera environment killed its worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
from tenacity import Retrying, retry_if_not_exception_type, stop_after_attempt, wait_incrementing

from assay.errors import AssayError
from assay.policies import Policy, make_policy
from assay.run.batch import EpisodeBatch, Fault, FaultKind, describe_error
from assay.run.closed_loop import rollout
from assay.run.recorder import EpisodeRecorder
from assay.served import close_links, make_served_env
from assay.sim import SafetyFilter, SimEnv, make_env, perturbed, tasks_kept
from assay.spec import EpisodeJob, PolicySpec, TaskSpec, canonical_json
from assay.store import EpisodeRecord, build_table, encode_episode, episode_relpath, provenance, write_blob, write_video
from assay.store.packs import encode_pack, pack_relpath, same_schema_groups
from assay.store.roots import as_root
from assay.store.validation import Summary, seal

ENV_CREATION_ATTEMPTS = 3
# Imported before any environment: each crashes when loaded after Mesa's LLVM (see the module docstring).
LOAD_BEFORE_RENDERING = ("triton",)


def load_before_rendering() -> list[str]:
    """Import the installed modules of ``LOAD_BEFORE_RENDERING`` not yet imported; returns their names."""
    loaded = []
    for name in LOAD_BEFORE_RENDERING:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            __import__(name)
            loaded.append(name)
    return loaded


# A backend that fails to build for a passing reason (a GL context, a file lock) is tried again, a bounded number
# of times with a growing pause; a spec that cannot run (AssayError) is not.
_BUILD_RETRIES = Retrying(stop=stop_after_attempt(ENV_CREATION_ATTEMPTS), wait=wait_incrementing(0.1, 0.1),
                          retry=retry_if_not_exception_type(AssayError), reraise=True)


def _build(task: TaskSpec, simulator: str | None = None) -> SimEnv:
    """One environment for ``task`` (stepped by the served ``simulator`` when one is named), retried as
    :data:`_BUILD_RETRIES` says."""
    env: SimEnv = _BUILD_RETRIES(make_served_env, task, simulator) if simulator else _BUILD_RETRIES(make_env, task)
    return env


class Worker:
    """``store_root``: a directory or an fsspec URL for step files; ``policy_factory`` builds policies
    (a Ray env actor passes one that returns a client of a shared policy server); ``render_on_demand=False``
    renders every observation, ``tracing=False`` records no per-layer trace (same results: for comparisons)."""

    def __init__(self, store_root: str | Path, policy_factory: Callable[[PolicySpec], Policy] = make_policy,
                 render_on_demand: bool = True, tracing: bool = True) -> None:
        self.store_root = as_root(store_root)
        self.policy_factory = policy_factory
        self.render_on_demand = render_on_demand
        self.tracing = tracing
        self._envs: dict[tuple[str, str, str], list[SimEnv]] = {}
        self._policies: dict[str, Policy] = {}
        self._idle_since = time.perf_counter()  # when the worker last finished a batch (its queue wait starts)

    def _environments(self, job: EpisodeJob, count: int) -> list[SimEnv]:
        """``count`` environments for the job's task, built once and reused (variants apply per episode); a
        backend that limits how many tasks a worker keeps built (``sim.tasks_kept``) has the least recently
        used others closed first."""
        key = (job.task.id, job.task.content_hash(), job.simulator or "")
        if key not in self._envs:
            self._make_room(job.task.backend, tasks_kept(job.task))
        pool = self._envs.pop(key, [])
        self._envs[key] = pool  # the most recently used last
        if len(pool) < count:
            load_before_rendering()
        while len(pool) < count:
            pool.append(_build(job.task, job.simulator))
        return pool[:count]

    def _make_room(self, backend: str, kept: int | None) -> None:
        """Close the least recently used environments of ``backend`` until one more task fits in ``kept``."""
        if kept is None:
            return
        mine = [key for key, pool in self._envs.items() if pool and pool[0].task.backend == backend]
        for key in mine[: max(0, len(mine) - kept + 1)]:
            for env in self._envs.pop(key):
                env.close()

    def _policy(self, spec: PolicySpec) -> Policy:
        key = canonical_json(spec.model_dump(mode="json"))
        if key not in self._policies:
            self._policies[key] = self.policy_factory(spec)
        return self._policies[key]

    def run_batch(self, jobs: Sequence[EpisodeJob],
                  on_started: Callable[[], None] | None = None) -> list[EpisodeRecord]:
        """Run the batch's episodes, write their files, return their records (``on_started``: see :meth:`roll`)."""
        return self.save(self.roll(jobs, on_started))

    def roll(self, jobs: Sequence[EpisodeJob],
             on_started: Callable[[], None] | None = None) -> list[EpisodeRecorder]:
        """Run the batch's episodes (an error becomes that episode's outcome); nothing is written yet.
        ``on_started`` is called once the policy and the environments are built and reset and the policy's
        first inference has returned (not at all when that fails or hangs): past it, a hang is in an episode's
        steps, before it in the batch's set-up or first inference."""
        batch = EpisodeBatch.of(jobs)  # the cell's settings, held once (ValueError for a mixed batch)
        began, idle_s = time.perf_counter(), time.perf_counter() - self._idle_since
        try:
            policy = self._policy(batch.policy.spec)  # first: its imports must precede the renderer's
            envs: list[SimEnv] = [perturbed(env, batch.variant)
                                  for env in self._environments(batch.jobs[0], len(batch))]
            if batch.safety:  # outermost: it sees the policy's own action
                envs = [SafetyFilter(env) for env in envs]
        except Exception as exc:  # noqa: BLE001 - becomes an error outcome for each job
            fault = Fault(FaultKind.SETUP, f"setup failed: {describe_error(exc)}")
            recorders = [EpisodeRecorder(job) for job in batch.jobs]
            for recorder in recorders:
                recorder.fail(fault)
        else:
            setup_s, started_unix = time.perf_counter() - began, time.time()
            recorders = rollout(envs, policy, batch, render_on_demand=self.render_on_demand, on_started=on_started,
                                tracing=self.tracing)
            for slot, recorder in enumerate(recorders):  # the executor's part of the trace: batch formation
                recorder.executor = {"batch_size": len(batch), "slot": slot, "pid": os.getpid(),
                                     "setup_ms": round(setup_s * 1000.0, 3), "idle_ms": round(idle_s * 1000.0, 3),
                                     "started_unix": round(started_unix, 6)}
        self._idle_since = time.perf_counter()
        return recorders

    def save(self, recorders: Sequence[EpisodeRecorder]) -> list[EpisodeRecord]:
        """Write each episode's files (videos, then the step file or the batch's packs) and return the records.
        Touches no environment or policy, so it may run on another thread while the next batch rolls out."""
        tables = {i: self._table(recorder) for i, recorder in enumerate(recorders) if recorder.steps}
        files: dict[int, tuple[str, str, int]] = {}  # recorder -> (step file, its sha256, its size)
        packed = [i for i in tables if recorders[i].job.pack]
        for group in same_schema_groups([tables[i] for i in packed]):
            members = [packed[g] for g in group]
            encoded = encode_pack([tables[i] for i in members])
            path = pack_relpath([recorders[i].job.key for i in members])
            sha = write_blob(self.store_root, path, encoded)
            files.update({i: (path, sha, len(encoded)) for i in members})
        for i in tables.keys() - set(packed):
            encoded = encode_episode(tables[i])
            path = episode_relpath(recorders[i].job.key)
            files[i] = (path, write_blob(self.store_root, path, encoded), len(encoded))
        return [recorder.record(provenance(), *files.get(i, (None, None, None)))
                for i, recorder in enumerate(recorders)]

    def _table(self, recorder: EpisodeRecorder) -> pa.Table:
        """The episode's step table, its videos written first (the step file marks completion)."""
        summary = Summary(recorder.outcome.value if recorder.outcome else "", recorder.steps,
                          recorder.total_return, recorder.success_step)
        table = build_table(recorder.columns(), {**file_metadata(recorder.job), **seal(summary),
                                                 **recorder.trace_metadata()})
        for camera, frames in recorder.frames.items():
            write_video(self.store_root, recorder.job.key, camera, frames, recorder.video_rate)
        return table

    def close(self) -> None:
        """Close every environment the worker built, and its connections to served simulators."""
        for pool in self._envs.values():
            for env in pool:
                env.close()
        self._envs.clear()
        close_links()

    def close_policies(self) -> None:
        """Close the policies the worker built (those with a ``close``: remote clients' connections) and forget
        them; a worker process leaves with its policies, the driver's probe (``run.autosize``) does not."""
        for policy in self._policies.values():
            closing = getattr(policy, "close", None)
            if callable(closing):
                closing()
        self._policies.clear()


def file_metadata(job: EpisodeJob) -> dict[str, str]:
    """What makes a step file meaningful without the catalog: key, task, variant, seed, instruction, policy."""
    policy = {"name": job.policy.name, "version": job.policy.version, "spec": job.policy.spec.model_dump(mode="json")}
    return {"episode_key": job.key, "task_id": job.task.id, "task_hash": job.task.content_hash(),
            "variant": job.variant.key, "seed": str(job.seed), "episode_index": str(job.episode_index),
            "instruction": job.instruction, "policy": json.dumps(policy, sort_keys=True)}
