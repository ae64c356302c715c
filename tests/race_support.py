"""Racing processes for tests/test_store_races.py and tests/test_postgres.py: two processes meet at a barrier before
every trial and do the same thing at once; each reports what happened to it, trial by trial.

The processes are started once (spawn: nothing inherited but the arguments) and loop over the trials, so a trial
costs the racing operation, not an interpreter start. Nothing here measures time.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

BARRIER_S = 120  # only a hang reaches it
SPREAD_S = 0.25  # how far apart the two drivers of drivers_on_one_catalog start, at most

Outcome = tuple[int, int, str, str]  # (trial, racer, "ok" | "refused" | "crashed", detail)


def race(target: Callable[..., None], per_racer: Sequence[Any], trials: int, timeout_s: float = 600) -> list[
        tuple[Outcome, Outcome]]:
    """Run ``target(racer, argument, barrier, results)`` in two processes (``per_racer[racer]`` each) and return
    both outcomes of every trial, in trial order."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    racers = [context.Process(target=target, args=(i, per_racer[i], barrier, results), daemon=True) for i in (0, 1)]
    for racer in racers:
        racer.start()
    found: dict[tuple[int, int], Outcome] = {}
    try:
        while len(found) < 2 * trials:
            outcome = results.get(timeout=timeout_s)
            found[(outcome[0], outcome[1])] = outcome
    finally:
        for racer in racers:
            racer.join(timeout=30)
            if racer.is_alive():
                racer.kill()
    return [(found[(t, 0)], found[(t, 1)]) for t in range(trials)]


def _report(results: Any, trial: int, racer: int, attempt: Callable[[], str]) -> None:
    from assay.errors import AssayError

    try:
        results.put((trial, racer, "ok", attempt()))
    except AssayError as exc:
        results.put((trial, racer, "refused", str(exc)))
    except Exception:  # noqa: BLE001 - a crash is an outcome the test names
        results.put((trial, racer, "crashed", traceback.format_exc()[-1500:]))


def same_name_campaigns(racer: int, roots: Sequence[str], barrier: Any, results: Any) -> None:
    """Racer ``racer`` runs campaign ``race`` (its own seed, so its own spec) in each store of ``roots``."""
    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data
    from assay.store import Store

    plan = prepare_campaign(campaign_from_data({"name": "race", "seed": 100 + racer, "episodes": 1, "horizon": 3,
                                                "tasks": ["gymnasium/Pendulum-v1"], "policies": ["random"]}))

    def run(root: str) -> str:
        with Store(root) as store:
            summary = run_campaign(plan, store, InlineExecutor(root))
        return f"{plan.spec.content_hash()} ran {summary.ran}"

    for trial, root in enumerate(roots):
        barrier.wait(BARRIER_S)
        _report(results, trial, racer, lambda: run(root))  # noqa: B023 - called at once, in this iteration


def stores_on_one_root(racer: int, trials: Sequence[tuple[str, str]], barrier: Any, results: Any) -> None:
    """Racer ``racer`` opens its own store directory (``<dir>-<racer>``) on the trial's shared data root."""
    from assay.store import Store

    def open_store(directory: str, data: str) -> str:
        with Store(f"{directory}-{racer}", data_url=data) as store:
            return str(store.store_id)

    for trial, (directory, data) in enumerate(trials):
        barrier.wait(BARRIER_S)
        _report(results, trial, racer, lambda: open_store(directory, data))  # noqa: B023 - called at once


def drivers_on_one_catalog(racer: int, trials: Sequence[tuple[str, str]], barrier: Any, results: Any) -> None:
    """Racer ``racer`` opens the trial's store directory with the trial's (new) catalog URL, as a driver does; racer
    1 starts a few milliseconds later in each trial than in the one before (0 to ``SPREAD_S`` over the trials), so
    its open lands on every step of racer 0's creating the catalog."""
    from assay.store import Store

    def open_store(directory: str, url: str) -> str:
        with Store(directory, url) as store:
            return str(store.store_id)

    for trial, (directory, url) in enumerate(trials):
        barrier.wait(BARRIER_S)
        if racer == 1:
            time.sleep(SPREAD_S * trial / max(1, len(trials) - 1))
        _report(results, trial, racer, lambda: open_store(directory, url))  # noqa: B023 - called at once


def campaign_claims(racer: int, job: tuple[str, int], barrier: Any, results: Any) -> None:
    """Racer ``racer`` claims campaign name ``race-<trial>`` for its own spec hash in the catalog at ``job[0]``, for
    ``job[1]`` trials: "ok" with the hash it saved, or "refused" with the hash the name already held."""
    from assay.store import Catalog

    url, trials = job
    catalog = Catalog(url)
    try:
        for trial in range(trials):
            barrier.wait(BARRIER_S)
            mine = f"spec-{racer}"
            try:
                held = catalog.save_campaign(f"race-{trial}", mine, {"racer": racer})
                results.put((trial, racer, "ok", mine) if held is None else (trial, racer, "refused", held))
            except Exception:  # noqa: BLE001 - a crash is an outcome the test names
                results.put((trial, racer, "crashed", traceback.format_exc()[-1500:]))
    finally:
        catalog.close()
