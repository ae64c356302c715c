"""Assay's own cost per episode on the inline path, part by part (the simulator and policy left out).

    python benchmarks/episode_overhead.py [--episodes 64] [--task pick-place] [--rounds 3]

Runs ``--episodes`` real expert episodes once (untimed) to get finished recorders, then times,
per episode, what the worker and the driver do with each after its last step, exactly as a
campaign does it: the step columns and Arrow table, the Parquet write (atomic rename), the
record, and the driver's catalog write (``store.catalog.add`` per record, or the driver's
flush of a batch). Best of ``--rounds``; the machine may be shared, so compare parts within one run.

Then end to end, the same episodes three ways, each building its ``--envs`` environments inside the timing:
a hand-written batched loop over Assay's environment (reset, one policy call per step, step; nothing
kept), ``rollout`` (the runner and its recorders, nothing written) and a whole inline campaign (writer
thread, Parquet, catalog, a fresh store); what each costs per episode beyond the hand loop is the
overhead a user pays.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from assay.policies import PolicyContext
from assay.run import InlineExecutor, Worker, prepare_campaign, rollout, run_campaign
from assay.run.worker import file_metadata
from assay.sim import make_env, perturbed
from assay.spec import batch_jobs, campaign_from_data
from assay.store import Store, build_table, provenance, write_episode


def _encode(table: pa.Table, use_dictionary: bool = False, write_statistics: bool = False) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", use_dictionary=use_dictionary, write_statistics=write_statistics)
    return sink.getvalue().to_pybytes()


def _best(fn: Callable[[], object], rounds: int, n: int) -> float:
    """Milliseconds per episode: the best round of ``fn`` (which handles ``n`` episodes)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / n * 1000


def _hand_loop(task, policy, batches, count: int) -> int:
    """What a user writes around Assay's environment: a batch of episodes in lockstep, one batched policy call
    a step, an episode ends at success, termination or the horizon; nothing is recorded."""
    import numpy as np

    envs = [make_env(task) for _ in range(count)]
    steps = 0
    for batch in batches:
        live = {slot: env.reset(job.seed) for slot, (env, job) in enumerate(zip(envs, batch, strict=False))}
        policy.reset(PolicyContext(task, tuple(j.seed for j in batch), tuple(j.instruction for j in batch)))
        for _ in range(task.horizon):
            if not live:
                break
            slots = list(live)
            actions = policy.act({"state": np.stack([live[s]["state"] for s in slots]), "env_ids": np.asarray(slots),
                                  "instruction": [batch[s].instruction for s in slots]})
            for slot, action in zip(slots, actions, strict=True):
                transition = envs[slot].step(np.asarray(action, dtype=np.float64))
                steps += 1
                live[slot] = transition.observation
                if transition.success or transition.terminated or transition.truncated:
                    del live[slot]
    for env in envs:
        env.close()
    return steps


def _end_to_end(campaign, batches, policy, envs: int, rounds: int) -> None:
    task = batches[0][0].task
    n = sum(len(b) for b in batches)

    def rolled() -> int:
        built = [make_env(task) for _ in range(envs)]
        steps = sum(r.steps for b in batches for r in rollout(built[: len(b)], policy, b))
        for env in built:
            env.close()
        return steps

    def inline() -> int:
        with tempfile.TemporaryDirectory() as root, Store(root) as store:
            run_campaign(campaign, store, InlineExecutor(root))
            return sum(r.steps for r in store.catalog.episodes(campaign=campaign.spec.name))

    loops = {"hand-written loop over Assay's environment": lambda: _hand_loop(task, policy, batches, envs),
             "rollout (runner + recorders, nothing written)": rolled,
             "inline campaign (writes, catalog, fresh store)": inline}
    times: dict[str, list[float]] = {name: [] for name in loops}
    counts: dict[str, set[int]] = {name: set() for name in loops}
    for _ in range(rounds):  # round-robin: a load spike hits every loop alike
        for name, loop in loops.items():
            start = time.perf_counter()
            counts[name].add(loop())
            times[name].append(time.perf_counter() - start)
    assert len(set().union(*counts.values())) == 1, f"the loops ran different episodes: {counts}"
    base = min(times["hand-written loop over Assay's environment"])
    print(f"\nend to end, {n} episodes, {envs} environments, {rounds} rounds ({counts[name].pop()} steps in each loop)")
    print(f"{'loop':<52} {'best s':>7} {'ms/episode over the hand loop':>30} {'its rounds spread, ms/episode':>30}")
    for name, seconds in times.items():
        print(f"{name:<52} {min(seconds):7.3f} {(min(seconds) - base) / n * 1000:30.2f} "
              f"{(max(seconds) - min(seconds)) / n * 1000:30.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--task", default="pick-place")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spec = campaign_from_data({"name": "overhead", "seed": 0, "episodes": args.episodes, "envs_per_worker": args.envs,
                               "tasks": [f"metaworld/{args.task}@1"], "policies": ["expert"]})
    campaign = prepare_campaign(spec)
    batches = batch_jobs(list(campaign.jobs), args.envs)
    worker = Worker(tempfile.mkdtemp())
    policy = worker._policy(batches[0][0].policy.spec)
    envs = [perturbed(make_env(batches[0][0].task), batches[0][0].variant) for _ in range(args.envs)]
    recorders = [r for batch in batches for r in rollout(envs[: len(batch)], policy, batch)]
    steps = sum(r.steps for r in recorders)
    n = len(recorders)
    provenance()  # once per process
    with tempfile.TemporaryDirectory() as root:
        worker = Worker(root)
        parts = {
            "step columns (recorder.columns)": lambda: [r.columns() for r in recorders],
            "Arrow table (build_table + file metadata)": lambda: [build_table(r.columns(), file_metadata(r.job))
                                                                 for r in recorders],
        }
        tables = [build_table(r.columns(), file_metadata(r.job)) for r in recorders]
        parts["Parquet write (zstd, temporary + rename, sha256)"] = lambda: [
            write_episode(root, r.job.key, t) for r, t in zip(recorders, tables, strict=True)]
        parts["  of which encoding, as written now"] = lambda: [_encode(t) for t in tables]
        parts["  of which encoding, before (dictionary pages, statistics)"] = lambda: [
            _encode(t, use_dictionary=True, write_statistics=True) for t in tables]
        parts["record (EpisodeRecord, trajectory hash)"] = lambda: [r.record(provenance(), "p", "s") for r in recorders]
        parts["worker total after the last step (Worker._save)"] = lambda: [worker._save(r) for r in recorders]
        records = [worker._save(r) for r in recorders]
        results = {name: _best(fn, args.rounds, n) for name, fn in parts.items()}

        def catalog_per_record() -> None:
            with Store(Path(root) / f"store-{time.monotonic_ns()}") as store:
                for record in records:
                    store.catalog.add(record)

        def catalog_per_batch() -> None:
            with Store(Path(root) / f"store-{time.monotonic_ns()}") as store:
                for start in range(0, n, args.envs):
                    store.catalog.add_many(records[start:start + args.envs])

        per_batch = f"catalog: one transaction per batch of {args.envs} (add_many, what the driver does)"
        results["catalog: one transaction per record (store.catalog.add, before)"] = _best(
            catalog_per_record, args.rounds, n)
        results[per_batch] = _best(catalog_per_batch, args.rounds, n)
    print(f"{n} expert episodes of {args.task}, {steps / n:.1f} steps on average; best of {args.rounds} rounds")
    print(f"{'part':<60} {'ms/episode':>10}")
    for name, ms in results.items():
        print(f"{name:<60} {ms:10.2f}")
    _end_to_end(campaign, batches, policy, args.envs, args.rounds)


if __name__ == "__main__":
    main()
