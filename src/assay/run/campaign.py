"""Campaign orchestration: resolve, plan, skip what is done, execute, catalog.

Rerunning the same campaign resumes it: jobs whose key is already in the
catalog are skipped (and linked to this campaign if another campaign ran them),
so nothing is ever run twice. A resume trusts the catalog's rows and reads no step
file: an episode whose row is unsound, or whose file is missing or not the size the
row records, is forgotten (row, links, the rows of registered tables such as its
failure category) and re-run, so it is never scored. Hashing every file (a flipped
byte, a file rewritten at the same size) is ``assay store verify``'s job, and
``verify_files`` (``assay run --verify-files``) re-runs what it finds. ``retry_errors``
also re-runs episodes recorded as ``error`` (an outage of a policy server, a dead
machine), which a plain resume keeps.

The driver commits catalog rows in transactions sized by count or age
(:class:`~assay.run.catalog_writer.CatalogWriter`, :class:`~assay.run.catalog_writer.CommitPolicy`),
not one per episode or per batch; a worker has written a batch's files (each by rename) before
it hands the batch's records back, so a row never names a file that is not complete.

Many drivers may run on one store at once, of one campaign or of several (the run lock is shared):
each claims a batch's jobs in the catalog just before it runs them and renews its leases while they run
(:mod:`assay.run.leases`, ``lease_s``); a job another live driver holds is left to it, and at the end
the driver waits until every planned job has a row, taking over the jobs whose lease ran out (their
driver died). A job whose row exists is done, whoever ran it; seeds come from job keys, so results do
not depend on how many drivers ran them (``CampaignSummary.elsewhere`` counts the ones another ran).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from assay.annotations import public_api
from assay.errors import SpecError, UnsupportedError, located
from assay.policies import check_policy_contract, check_supports, resolve_policy
from assay.policies.remote import warn_capacity
from assay.run.adaptive import Judge, run_rounds
from assay.run.autosize import Sizing, size_run
from assay.run.catalog_writer import CatalogWriter, CommitPolicy
from assay.run.executors import Executor, InlineExecutor, SupportsWorkers
from assay.run.leases import DEFAULT_LEASE_S, Leases
from assay.run.plan import CampaignPlan, CampaignSummary
from assay.served import check_served_backends, check_simulators
from assay.sim import TaskRegistry, default_registry, instruct, resolve_variant
from assay.sim.registry import apply_preset, camera_names, offers_fast_cameras
from assay.spec import DEFAULT_ENVS_PER_WORKER, CampaignSpec, EpisodeJob, TaskSpec, Variant, batch_jobs, plan
from assay.store import EpisodeRecord, Outcome, Store
from assay.store.linked import linked_count


def _adapted(task: TaskSpec, spec: CampaignSpec) -> TaskSpec:
    """The task as this campaign runs it: its preset, cameras (unset: the task's own; []: none), and a shorter
    horizon if asked (all change the hash)."""
    if spec.preset is not None:
        task = apply_preset(task, spec.preset)
    if spec.horizon is not None and spec.horizon < task.horizon:
        task = task.model_copy(update={"horizon": spec.horizon})
    cameras = spec.cameras
    if cameras is None:
        return task
    if not cameras:
        return task.model_copy(update={"cameras": ()})
    valid = camera_names(task)
    if not valid:
        raise UnsupportedError(f"{task.id}: backend {task.backend} renders no cameras")
    unknown = sorted({c.name for c in cameras} - set(valid))
    if unknown:
        raise SpecError(f"unknown camera {', '.join(unknown)} for {task.id}; valid: {', '.join(sorted(valid))}")
    fast = sorted(c.name for c in cameras if c.fast)
    if fast and not offers_fast_cameras(task):
        raise SpecError(f"camera {', '.join(fast)}: fast applies to LIBERO cameras only; {task.backend} always "
                        "draws without shadows and reflections (leave fast out)")
    return task.model_copy(update={"cameras": cameras})


def _located_task(registry: TaskRegistry, spec: CampaignSpec, index: int) -> TaskSpec:
    with located("tasks", index):
        task = registry.get(spec.tasks[index])
    where: tuple[str | int, ...] = ("cameras",) if spec.cameras else ("preset",) if spec.preset else ("tasks", index)
    with located(*where):
        return _adapted(task, spec)


def _located_variant(spec: CampaignSpec, index: int, task: TaskSpec) -> Variant:
    with located("variants", index):  # the index of the expanded list: spec.loading.field_line maps it back
        return resolve_variant(spec.variants[index], task)


def _task_instruction(task: TaskSpec, variant: Variant, seed: int) -> str:
    """``prompt: task``: the task's own instruction whatever the variant (openpi's and LeRobot's scripts send
    LIBERO's ``task.language`` on every suite, a perturbed one too)."""
    return task.instruction


@public_api
def prepare_campaign(spec: CampaignSpec, registry: TaskRegistry | None = None) -> CampaignPlan:
    """Resolve tasks, variants and policies and plan every job; all spec errors surface here, before any run.

    Each policy's contract is checked against each task: a mismatch that would give
    garbage raises ContractError with the diff, a range mismatch warns (ContractWarning).
    """
    registry = registry or default_registry()
    if len(set(spec.tasks)) != len(spec.tasks):
        raise SpecError(f"campaign {spec.name!r}: a task is listed twice in 'tasks'", at=("tasks",))
    tasks = tuple(_located_task(registry, spec, i) for i in range(len(spec.tasks)))
    variants = [_located_variant(spec, i, tasks[0]) for i in range(len(spec.variants))]
    for task in tasks[1:]:  # every variant must apply to every task's backend
        for i in range(len(spec.variants)):
            _located_variant(spec, i, task)
    policies = []
    for i, declared in enumerate(spec.policies):  # a mistake names its policy's entry (assay run: file:line)
        with located("policies", i):
            policies.append(resolve_policy(declared))
            for task in tasks:
                check_supports(policies[-1], task)
                check_policy_contract(policies[-1], task)  # the handshake: before episode 1, never during
    check_served_backends(spec.simulators or {}, tasks, spec.safety)  # e.g. a backend that runs only served
    with located("episodes"):
        jobs = plan(spec, list(tasks), policies, variants, _task_instruction if spec.prompt == "task" else instruct)
    return CampaignPlan(spec, tasks, tuple(policies), tuple(variants), tuple(jobs))


@public_api
def run_campaign(
    campaign: CampaignPlan,
    store: Store,
    executor: Executor,
    on_start: Callable[[CampaignSummary], None] | None = None,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    retry_errors: bool = False,
    judge: Judge | None = None,
    verify_files: bool = False,
    commit: CommitPolicy | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    auto_workers: bool = False,
) -> CampaignSummary:
    """Run the campaign's pending jobs, holding the store's run lock shared: other runs on the same store, of
    this campaign or another, go on beside it, and job leases in the catalog keep each job to one driver
    (the module docstring; ``lease_s``: how long a dead driver's jobs wait before another takes them over).

    An adaptive campaign (``adaptive:`` in its spec) runs in rounds judged by ``judge``
    (``assay.metrics.adaptive.judge_for(spec)``), see :mod:`assay.run.adaptive`. ``verify_files`` reads and
    checks every recorded step file before the resume (see the module docstring); ``commit`` sizes the
    catalog's transactions (default :class:`~assay.run.catalog_writer.CommitPolicy`). ``auto_workers`` (``--workers
    auto``) lets a probe set a local executor's process count, as ``envs_per_worker: auto`` lets it choose the
    environments (:mod:`assay.run.autosize`; once, before the first episode runs; the summary's ``sizing``)."""
    if campaign.spec.envs_per_worker == "auto" and not isinstance(executor, SupportsWorkers | InlineExecutor):
        name = getattr(type(executor), "name", type(executor).__name__)
        raise UnsupportedError(f"envs_per_worker: auto is probed on this host, for its local or inline executor; the "
                               f"{name} executor's workers run elsewhere: give envs_per_worker a number")
    if auto_workers and not isinstance(executor, SupportsWorkers):
        name = getattr(type(executor), "name", type(executor).__name__)
        raise UnsupportedError(f"--workers auto sizes local worker processes on this host; the {name} executor takes "
                               "a number (--workers N)")
    run = _Run(executor, on_start, on_record, retry_errors, verify_files, commit, lease_s, auto_workers)
    with store.run_lock(shared=True):
        if campaign.spec.adaptive is None:
            return _run_pending(campaign, store, run)
        if judge is None:
            raise SpecError(f"campaign {campaign.spec.name!r} is adaptive: pass judge=assay.metrics.adaptive."
                            "judge_for(spec) (assay run does)")
        # the full plan is the campaign's document while it runs: each round runs a sub-plan of it and must not
        # replace it (planned counts, the dashboard's progress); the final state then records episodes used
        _save_plan(campaign, store)
        return run_rounds(campaign, store, lambda sub: _run_pending(sub, store, run, save_plan=False), judge)[0]


def _save_plan(campaign: CampaignPlan, store: Store) -> None:
    """Save the campaign's resolved document (its plan); SpecError if the store holds another spec by its name
    (claimed in the catalog, so two campaigns of one name started at once cannot both pass)."""
    spec = campaign.spec
    store.save_resolved_campaign(spec.name, spec.content_hash(), campaign.resolved())


@dataclass(frozen=True)
class _Run:
    """How ``run_campaign`` was asked to run (the same for every adaptive round)."""

    executor: Executor
    on_start: Callable[[CampaignSummary], None] | None
    on_record: Callable[[EpisodeRecord], None] | None
    retry_errors: bool
    verify_files: bool
    commit: CommitPolicy | None
    lease_s: float
    auto_workers: bool = False
    sized: dict[str, Sizing] = field(default_factory=dict)  # the probe's choice, kept for every adaptive round


def _batch_size(campaign: CampaignPlan, pending: list[EpisodeJob], run: _Run, summary: CampaignSummary) -> int:
    """The campaign's ``envs_per_worker``, or what the probe chooses for ``auto`` (and for ``--workers auto``,
    which also sets the executor's processes); probed once per run, before any episode."""
    asked = campaign.spec.envs_per_worker
    if asked != "auto" and not run.auto_workers:
        return asked
    if "chosen" not in run.sized:
        if not pending:
            return DEFAULT_ENVS_PER_WORKER if asked == "auto" else asked
        workers = None if run.auto_workers else (run.executor.workers if isinstance(run.executor, SupportsWorkers)
                                                 else 1)
        run.sized["chosen"] = size_run(pending, workers, None if asked == "auto" else asked)
    sizing = run.sized["chosen"]
    if run.auto_workers and isinstance(run.executor, SupportsWorkers):
        run.executor.workers = sizing.workers
    summary.sizing = sizing.to_dict() | {"line": sizing.describe()}
    return sizing.envs_per_worker


def _run_pending(campaign: CampaignPlan, store: Store, run: _Run, save_plan: bool = True) -> CampaignSummary:
    """Run the plan's pending jobs under job leases; ``save_plan``: save the plan as the campaign's document first
    (False for an adaptive round, a sub-plan of the document already saved)."""
    spec = campaign.spec
    if save_plan:
        _save_plan(campaign, store)
    store.clean_temporaries()
    pending, repaired, retried = _resume(campaign, store, run)
    summary = CampaignSummary(spec.name, total=len(campaign.jobs), skipped=len(campaign.jobs) - len(pending),
                              repaired=repaired, retried=retried)
    if pending and spec.simulators:  # the served simulators' handshake: before episode 1 (and the probe), never during
        check_simulators(spec.simulators, [t for t in campaign.tasks if t.backend in spec.simulators], spec.safety)
    size = _batch_size(campaign, pending, run, summary)
    if run.on_start is not None:
        run.on_start(summary)
    batches = batch_jobs(pending, size)
    _warn_capacity(campaign, run.executor, batches)
    with Leases(store, spec.name, run.lease_s) as leases, \
            CatalogWriter(_released(store, leases), run.commit) as writer:  # closing commits what finished
        for record in _claimed_run(run.executor, batches, leases):
            _count(summary, record, writer, run.on_record)
        writer.flush()  # this driver's rows are in before it waits for the others'
        left = [job for job in pending if job.key in leases.elsewhere]
        for taken in leases.wait_for_others(left):  # jobs whose driver died
            for record in _claimed_run(run.executor, batch_jobs(taken, size), leases):
                _count(summary, record, writer, run.on_record)
            writer.flush()
        if leases.finished_elsewhere:  # another campaign's driver ran them: link them to this campaign too
            done = set(leases.finished_elsewhere)
            store.link(spec.name, [(job.key, job.policy.name) for job in pending if job.key in done])
    summary.elsewhere = len(leases.finished_elsewhere)
    return summary


RESUME_CHUNK = 20_000  # planned jobs a resume decides at a time


def _resume(campaign: CampaignPlan, store: Store, run: _Run) -> tuple[list[EpisodeJob], int, int]:
    """Decide the resume a chunk of planned jobs at a time (:meth:`Store.resume_plan`): forget what is untrusted
    (or errored, with ``retry_errors``), link what is done to this campaign (skipped where every done job of the
    chunk is linked already: a count, not a read), and return the jobs left to run, with how many were repaired
    and retried. A chunk's rows are all that is held, so a rerun of a finished campaign of a million episodes holds
    its plan and not a million rows beside it."""
    pending: list[EpisodeJob] = []
    repaired = retried = 0
    for start in range(0, len(campaign.jobs), RESUME_CHUNK):
        chunk = campaign.jobs[start:start + RESUME_CHUNK]
        resume = store.resume_plan([job.key for job in chunk], run.retry_errors, verify=run.verify_files)
        store.forget(resume.forget)
        done = [(job.key, job.policy.name) for job in chunk if job.key in resume.done]
        if linked_count(store, campaign.spec.name, [key for key, _ in done]) < len(done):
            store.link(campaign.spec.name, done)
        pending += [job for job in chunk if job.key not in resume.done]
        repaired += len(resume.damaged)
        retried += len(resume.errored)
    return pending, repaired, retried


def _released(store: Store, leases: Leases) -> Callable[[Sequence[EpisodeRecord]], None]:
    """The writer's commit: the rows, then the claims on their jobs let go (a row is what says done)."""

    def commit(records: Sequence[EpisodeRecord]) -> None:
        store.record(records)
        leases.release([record.key for record in records])

    return commit


def _claimed_run(executor: Executor, batches: Sequence[Sequence[EpisodeJob]], leases: Leases,
                 ) -> Iterator[EpisodeRecord]:
    """The executor's run with each batch claimed as it goes out; an executor whose ``run`` takes no ``claim``
    gets the jobs the leases grant up front."""
    if "claim" in inspect.signature(executor.run).parameters:
        planned = [tuple(b) for b in batches]
        return executor.run(planned, claim=leases.ahead(planned))  # short batches claimed many at a time
    held = {job.key for job in leases.claim(tuple(job for b in batches for job in b))}  # one transaction
    granted = [g for g in (tuple(job for job in b if job.key in held) for b in batches) if g]
    return executor.run(granted)


def _count(summary: CampaignSummary, record: EpisodeRecord, writer: CatalogWriter,
           on_record: Callable[[EpisodeRecord], None] | None) -> None:
    writer.add(record)
    summary.ran += 1
    summary.outcomes[record.outcome.value] += 1
    if record.outcome is Outcome.ERROR:
        summary.count_error(record.policy_name, record.reason)
    if on_record is not None:
        on_record(record)


def _warn_capacity(campaign: CampaignPlan, executor: Executor, batches: Sequence[Sequence[EpisodeJob]]) -> None:
    """Each served policy's limits against what this run may open: workers x environments per worker."""
    if not batches:
        return
    workers = getattr(executor, "workers", None) or getattr(executor, "actors", None) or 1
    clients, rows = min(int(workers), len(batches)), max(len(batch) for batch in batches)
    for policy in campaign.policies:
        if policy.spec.remote is not None:
            warn_capacity(policy.spec.remote, policy.spec.params, clients, rows)
