"""The Ray executor: the local executor's contract on a Ray cluster.

* **Environment actors** are long-lived; each holds a :class:`Worker`, so its
  simulators are built once and reused across episodes. An actor receives a
  whole batch of jobs per call (never one step per call: a Ray call costs about
  a millisecond, a simulator step a fraction of one) and the records of each
  batch stream back to the driver as soon as it finishes.
* **Step files** are written by the actors to the store's data root: a shared
  directory or an fsspec URL every node reaches; before the first episode every
  node, and every actor as it starts, writes a probe there that the driver reads
  back (:mod:`assay.run.preflight`), so a root some node does not share fails in
  one line naming the node. **Catalog rows** are written by
  the driver only (``run_campaign``), from the records the actors return.
* **Faults**: an actor that dies (its process killed, its node lost) is replaced
  and its batch retried; a batch past its wall-clock limit has its actor killed
  (:mod:`assay.run.faults` decides what is retried and what becomes ``error``).
* **A shared policy server** (:class:`PolicyServing`): one actor per policy
  that merges concurrent ``act`` requests from many environment actors into one
  batched call (dynamic batching: up to ``max_batch`` rows or ``max_wait_ms``),
  so one GPU model can serve a whole cluster of CPU simulators.

Ray is optional: ``pip install 'assay[ray]'`` (with Ray Client, for ``ray://`` addresses).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from assay.errors import AssayError
from assay.policies import Policy, PolicyContext, add_import_root, import_roots, make_policy
from assay.policies.protocol import ENV_IDS, INSTRUCTION
from assay.policies.remote.batcher import DynamicBatcher
from assay.run.driver import Driver, Event, Happened
from assay.run.faults import Batch, Claim, FaultPolicy
from assay.run.observers import observed
from assay.run.preflight import Probe, check_probe, node_probe, preflight, refuse_process_memory, run_token
from assay.run.worker import Worker
from assay.spec import PolicySpec, TaskSpec, canonical_json
from assay.store import EpisodeRecord
from assay.store.roots import is_url

# What a driver of a cluster started with Ray's token authentication needs (docs/SCALING.md, "Ray token
# authentication"): the mode, and the cluster's token from one of Ray's three places.
TOKEN_HINT = ("set RAY_AUTH_MODE=token and give the cluster's token as RAY_AUTH_TOKEN, a file named by "
              "RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token, as on every node")


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise AssayError("the ray executor needs Ray: pip install 'assay[ray]'") from None
    return ray


@dataclass(frozen=True)
class PolicyServing:
    """Serve each policy from one shared actor with dynamic batching.

    For *stateless* policies, whose action for a row depends only on that row's
    observation, instruction and task (a neural network, the scripted expert):
    the server merges rows from many episodes into one call, so per-episode state
    kept by ``reset`` would be shared. ``num_gpus=1`` places the model on a GPU.
    """

    max_batch: int = 64
    max_wait_ms: float = 2.0
    num_cpus: float = 0.0
    num_gpus: float = 0.0

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0:
            raise AssayError(f"policy serving needs max_batch >= 1 and max_wait_ms >= 0, got {self}")


class BatchingPolicyActor:
    """Wraps any Assay policy; concurrent ``act`` calls are answered by batched ``policy.act`` calls.

    Requests meet in the same :class:`DynamicBatcher` as the websocket server's (up to ``max_batch``
    rows or ``max_wait_s``); within a batch, requests are grouped by task and every observation key
    (``state``, ``image.*``, ``depth.*``, ``calib.*``, ``instruction``) is forwarded.
    """

    def __init__(self, spec: dict[str, Any], max_batch: int, max_wait_s: float, roots: Sequence[str] = ()) -> None:
        for root in roots:  # the driver's campaign directories: its module:attr policies import here too
            add_import_root(root)
        self.policy = make_policy(PolicySpec.model_validate(spec))
        self.batcher = DynamicBatcher(self._infer, max_batch, max_wait_s, rows=lambda request: len(request[2]))
        self._loop_task: asyncio.Task[None] | None = None
        self._stats = {"calls": 0, "requests": 0, "rows": 0, "max_requests_per_call": 0, "max_rows_per_call": 0}

    async def act(self, task: TaskSpec, observations: dict[str, Any], seeds: list[int]) -> np.ndarray:
        """Actions for one environment actor's rows: ``observations`` as the runner gives them."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self.batcher.run())
        actions, _timing = await self.batcher.submit((task, observations, list(seeds)))
        return np.asarray(actions)

    def _infer(self, requests: list[tuple[TaskSpec, dict[str, Any], list[int]]]) -> list[Any]:
        """One result per request (its rows' actions, or the exception), one policy call per task."""
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request[0].content_hash(), []).append(index)
        results: list[Any] = [None] * len(requests)
        for members in groups.values():
            for index, answer in zip(members, self._answer([requests[i] for i in members]), strict=True):
                results[index] = answer
        return results

    def _answer(self, requests: list[tuple[TaskSpec, dict[str, Any], list[int]]]) -> list[Any]:
        task = requests[0][0]
        seeds = tuple(s for r in requests for s in r[2])
        batch: dict[str, Any] = {}
        for key in requests[0][1]:
            values = [r[1][key] for r in requests]
            batch[key] = ([v for value in values for v in value] if isinstance(values[0], list)
                          else np.concatenate([np.asarray(v) for v in values]))
        batch[ENV_IDS] = np.arange(len(seeds))
        try:
            self.policy.reset(PolicyContext(task, seeds, tuple(batch.get(INSTRUCTION, [""] * len(seeds)))))
            actions = np.asarray(self.policy.act(batch), dtype=np.float64)
            action = task.action_spec()
            if actions.ndim not in (2, 3) or actions.shape[0] != len(seeds) or actions.shape[-1:] != action.shape:
                raise AssayError(f"served policy returned shape {actions.shape} for {len(seeds)} rows; expected "
                                 f"({len(seeds)}, {action.shape[0]}) or a chunk ({len(seeds)}, H, {action.shape[0]})")
        except Exception as exc:  # noqa: BLE001 - each caller gets the error; the rollout retries rows alone
            return [exc] * len(requests)
        stats = self._stats
        stats["calls"] += 1
        stats["requests"] += len(requests)
        stats["rows"] += len(seeds)
        stats["max_requests_per_call"] = max(stats["max_requests_per_call"], len(requests))
        stats["max_rows_per_call"] = max(stats["max_rows_per_call"], len(seeds))
        out, start = [], 0
        for request in requests:
            end = start + len(request[2])
            out.append(actions[start:end])
            start = end
        return out

    async def stats(self) -> dict[str, int]:
        """Calls, requests and rows so far, and the most requests and rows merged into one call."""
        return dict(self._stats)


class ServedPolicy:
    """The client side, inside an environment actor: the Policy protocol over a server handle."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.context: PolicyContext | None = None

    def reset(self, context: PolicyContext) -> None:
        """Keep the context: the seeds go with every request, so the server's policy seeds each row as if alone."""
        self.context = context

    def act(self, observations: Mapping[str, Any]) -> np.ndarray:
        """Ask the shared policy actor for this batch's actions, forwarding every observation key."""
        assert self.context is not None, "reset() before act()"
        seeds = [self.context.seeds[i] for i in observations[ENV_IDS]]
        forwarded = {key: (list(value) if key == INSTRUCTION else value)
                     for key, value in observations.items() if key != ENV_IDS}
        ref = self.server.act.remote(self.context.task, forwarded, seeds)
        result: np.ndarray = _ray().get(ref)
        return result


def _policy_key(spec: PolicySpec) -> str:
    return canonical_json(spec.model_dump(mode="json"))


PROGRESS_GROUP = "progress"  # the actor's concurrency group for :meth:`EnvActor.started` (one thread)


class EnvActor:
    """A long-lived Ray actor holding one :class:`Worker` (environments and policies built once).

    Batches run in the actor's default concurrency group, one at a time; :meth:`started` runs in its own
    group (``PROGRESS_GROUP``), so the driver learns while a batch runs that it has begun stepping."""

    def __init__(self, store_root: str, servers: dict[str, Any], roots: Sequence[str] = ()) -> None:
        for root in roots:  # the driver's campaign directories: its module:attr policies import here too
            add_import_root(root)

        def factory(spec: PolicySpec) -> Policy:
            server = servers.get(_policy_key(spec))
            return ServedPolicy(server) if server is not None else make_policy(spec)

        self.worker = Worker(store_root, policy_factory=factory)
        self._progress = threading.Condition()
        self._started = 0  # the latest batch number that began stepping
        self._ended = 0  # the latest batch number that ended

    def run_batch(self, jobs: Batch, number: int = 0) -> list[EpisodeRecord]:
        """Run batch ``number`` (the pool's count of batches handed to this actor)."""
        def began() -> None:
            with self._progress:
                self._started = max(self._started, number)
                self._progress.notify_all()

        try:
            return self.worker.run_batch(jobs, on_started=began)
        finally:
            with self._progress:
                self._ended = max(self._ended, number)
                self._progress.notify_all()

    def started(self, number: int) -> bool:
        """Wait until batch ``number`` began stepping (True) or ended without doing so (False)."""
        with self._progress:
            self._progress.wait_for(lambda: self._started >= number or self._ended >= number)
            return self._started >= number

    def pid(self) -> int:
        """The actor's process id (to tell actors apart in tests and logs)."""
        return os.getpid()

    def probe(self, token: str) -> Probe:
        """This actor's probe of the data root (checked by the driver before the actor gets a batch)."""
        return node_probe(str(self.worker.store_root), token)


ADDRESS_FORMS = ("HOST:PORT (the address `ray start --head` prints; run on a node of that cluster), "
                 "ray://HOST:PORT (Ray Client, from outside the cluster: pip install 'assay[ray]'), "
                 "auto (the cluster this node has joined)")
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):([0-9]{1,5})")


def cluster_address(address: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The Ray cluster to join: ``address`` (``--address``), else ``RAY_ADDRESS`` from ``environ`` (default: this
    process's environment), else None (a local Ray). A value that is none of :data:`ADDRESS_FORMS` is one
    line naming where it came from and the valid forms."""
    where = "--address"
    if address is None:
        address, where = (os.environ if environ is None else environ).get("RAY_ADDRESS") or None, "RAY_ADDRESS"
    if address is None:
        return None
    value = address.strip()
    if value == "auto":
        return value
    found = _HOST_PORT.fullmatch(value.removeprefix("ray://"))
    if found is None or not 0 < int(found.group(1)) < 65536:
        raise AssayError(f"{where} {address!r} is not a Ray cluster address; valid: {ADDRESS_FORMS}")
    return value


class RayExecutor:
    """Environment actors on a Ray cluster, each running one batch at a time and sent its next while it runs one
    (short batches only: ``run.driver``).

    ``address`` (see :func:`cluster_address`): ``HOST:PORT`` joins the cluster whose head
    ``ray start --head`` started there (this process must run on a node of it); ``ray://HOST:PORT``
    connects through Ray Client from anywhere (``ray[client]``); ``auto`` joins the cluster of this
    node; ``None`` takes ``RAY_ADDRESS`` when set, else joins the Ray instance this process already
    started or starts a local one. ``store_root`` must be reachable from every node (a shared
    directory or an fsspec URL).
    """

    name = "ray"

    def __init__(
        self,
        store_root: str | Path,
        actors: int = 2,
        address: str | None = None,
        faults: FaultPolicy | None = None,
        serving: PolicyServing | None = None,
        actor_cpus: float = 1.0,
    ) -> None:
        if actors < 1:
            raise AssayError(f"the ray executor needs at least 1 actor, got {actors}")
        refuse_process_memory(store_root, "ray")
        address = cluster_address(address)
        self.store_root = str(store_root) if is_url(str(store_root)) else str(Path(store_root).resolve())
        self.actors, self.address, self.serving, self.actor_cpus = actors, address, serving, actor_cpus
        self.faults = faults or FaultPolicy()
        self.restarts = 0
        self.sent_ahead = 0  # batches sent to an actor while it ran another (run/driver.py)
        self.put_back = 0  # of those, the ones that went back to the queue (their actor died or timed out first)
        self.probed_nodes = 0  # nodes whose probe of the data root the driver read back (the last run)
        self.server_stats: dict[str, dict[str, int]] = {}

    def _connect(self) -> Any:
        ray = _ray()
        if ray.is_initialized():
            return ray
        if self.address is None:  # a new local Ray, never a `ray start` cluster found on this node by chance
            ray.init(address="local", include_dashboard=False, log_to_driver=False)
            return ray
        try:
            ray.init(address=self.address, log_to_driver=False)
        except ray.exceptions.AuthenticationError:  # RAY_AUTH_MODE=token here, and no token found
            raise AssayError(f"cannot join the Ray cluster at {self.address}: it needs its token and this driver has "
                             f"none: {TOKEN_HINT}") from None
        except (ImportError, ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if isinstance(exc, ImportError) or "ray[client]" in first:  # a plain `pip install ray` lacks grpcio
                raise AssayError(f"the Ray address {self.address} needs Ray Client: pip install 'assay[ray]' "
                                 "(it installs ray[client])") from None
            unauthenticated = os.environ.get("RAY_AUTH_MODE", "disabled") != "token"
            hint = f" (a cluster started with RAY_AUTH_MODE=token refuses a driver without it: {TOKEN_HINT})" \
                if unauthenticated else ""
            raise AssayError(f"cannot join the Ray cluster at {self.address}: {first}{hint}") from None
        return ray

    def _servers(self, ray: Any, batches: Sequence[Batch]) -> dict[str, Any]:
        if self.serving is None:
            return {}
        specs = {_policy_key(b[0].policy.spec): b[0].policy.spec for b in batches if b}
        server_cls = ray.remote(BatchingPolicyActor).options(
            num_cpus=self.serving.num_cpus, num_gpus=self.serving.num_gpus, max_concurrency=1000
        )
        return {
            key: server_cls.remote(spec.model_dump(mode="json"), self.serving.max_batch,
                                   self.serving.max_wait_ms / 1000, import_roots())
            for key, spec in specs.items()
        }

    @observed
    def run(self, batches: Sequence[Batch], claim: Claim | None = None) -> Iterator[EpisodeRecord]:
        """Run the batches on Ray actors after the data-root preflight (a shared policy actor when ``serving``)."""
        if not any(batches):
            return
        ray = self._connect()
        token = run_token()
        self.probed_nodes = preflight(ray, self.store_root, token, self.actor_cpus)  # before any episode
        servers = self._servers(ray, batches)
        # started() runs beside a batch, in its own group: named on the method, as Ray Client (ray://) refuses a
        # concurrency group given per call
        ray.method(concurrency_group=PROGRESS_GROUP)(EnvActor.started)
        actor_cls = ray.remote(concurrency_groups={PROGRESS_GROUP: 1})(EnvActor).options(
            num_cpus=self.actor_cpus, max_restarts=0)
        # A shared server batches requests per task, so actors on the same task merge theirs: no preference
        # for the environments an actor has built.
        roots = import_roots()
        pool = _ActorPool(ray, lambda: actor_cls.remote(self.store_root, servers, roots), reuse=self.serving is None,
                          probe=(self.store_root, token))
        driver = Driver(pool, self.actors, self.faults, self.store_root)
        try:
            yield from driver.run(batches, claim)
        finally:
            self.restarts += driver.restarts
            self.sent_ahead += driver.sent_ahead
            self.put_back += driver.put_back
            for key, server in servers.items():
                try:
                    self.server_stats[key] = ray.get(server.stats.remote(), timeout=30)
                finally:
                    ray.kill(server, no_restart=True)


class _ActorPool:
    """The :class:`~assay.run.driver.WorkerPool` of Ray actors: a batch per ``run_batch`` call.

    It sends ahead: an actor runs its batches one at a time in the order sent, so its next ``run_batch``
    waits in the actor while the batch before it runs, and the actor goes from one to the next without
    waiting for the driver (a hand-over through the driver idled an actor ~6 ms a batch, against ~2 ms for
    a worker process's pipe). Each batch is named by its number; DONE comes in the order sent."""

    reuse_environments: bool
    send_ahead = True

    def __init__(self, ray: Any, make_actor: Callable[[], Any], reuse: bool, probe: tuple[str, str]) -> None:
        self.ray, self.make_actor, self.reuse_environments = ray, make_actor, reuse
        self.root, self.token = probe  # each actor writes a probe to the data root; READY once the driver reads it
        self.actors: dict[Hashable, Any] = {}
        self.starting: dict[Any, Hashable] = {}  # probe() ref -> worker: READY once the actor is up and its probe read
        self.running: dict[Any, tuple[Hashable, int]] = {}  # run_batch ref -> (worker, batch number), in order sent
        self.progress: dict[Any, tuple[Hashable, int]] = {}  # started() ref -> (worker, batch): STARTED once it steps
        self._next = 0
        self._batches = 0

    def spawn(self) -> int:
        self._next += 1
        actor = self.make_actor()
        self.actors[self._next] = actor
        self.starting[actor.probe.remote(self.token)] = self._next
        return self._next

    def assign(self, worker: Hashable, jobs: Batch) -> int:
        self._batches += 1
        actor = self.actors[worker]
        self.running[actor.run_batch.remote(jobs, self._batches)] = (worker, self._batches)
        self.progress[actor.started.remote(self._batches)] = (worker, self._batches)
        return self._batches

    def wait(self, busy: Sequence[Hashable], timeout: float | None) -> list[Event]:
        ray = self.ray
        first: dict[Hashable, Any] = {}  # each actor's oldest run_batch: its DONE comes before the next one's
        for ref, (worker, _) in self.running.items():
            first.setdefault(worker, ref)
        ready, _ = ray.wait([*first.values(), *self.starting, *self.progress], num_returns=1, timeout=timeout)
        events: list[Event] = []
        for ref in ready:
            if ref in self.progress:
                worker, number = self.progress.pop(ref)
                try:
                    began = ray.get(ref)
                except ray.exceptions.RayError:  # the actor died: its run_batch ref says so
                    began = False
                if began:
                    events.append(Event(worker, Happened.STARTED, batch=number))
                continue
            if ref in self.starting:
                worker = self.starting.pop(ref)
                try:
                    probe = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise AssayError(f"a Ray actor failed to start: {exc}") from None
                check_probe(self.root, probe)  # an actor on a node that does not share the data root gets no batch
                events.append(Event(worker, Happened.READY))
                continue
            worker, number = self.running.pop(ref)
            try:
                records = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                events.append(Event(worker, Happened.DIED, detail=f"actor died: {type(exc).__name__}"))
                continue
            except ray.exceptions.RayTaskError as exc:
                raise AssayError(f"ray actor failed: {exc.cause!r}") from None
            events.append(Event(worker, Happened.DONE, records, batch=number))
        return events

    def worn_out(self, worker: Hashable, records: Sequence[EpisodeRecord]) -> bool:
        return False  # an actor's memory is Ray's to watch

    def kill(self, worker: Hashable) -> None:
        actor = self.actors.pop(worker)
        for refs in (self.running, self.progress):
            for ref in [r for r, (w, _) in refs.items() if w == worker]:
                del refs[ref]
        for ref in [r for r, w in self.starting.items() if w == worker]:
            del self.starting[ref]
        self.ray.kill(actor, no_restart=True)

    retire = kill

    def close(self) -> None:
        for worker in list(self.actors):
            self.kill(worker)
