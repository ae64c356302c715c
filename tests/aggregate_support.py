"""A golden store for the aggregate tests, and the check that counts read from the database equal the rows.

``golden_records`` builds one campaign of hand-made episodes through the project's own API: three
policies (one a router that names a skill), two tasks, three variants (nominal, a visual and a
behavioral one), eight seeds, every outcome including errors, cells left partial and one left
empty, renderers and safety-filter interventions on some episodes. ``check_store`` computes every
result both ways, from the decoded rows (``Catalog.episodes``, the row-based functions) and from
the database's counts (``assay.store.aggregates``, the count-based functions), and asserts they are
equal: exactly for everything computed from integers, to 1e-12 for sums of floats.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from assay.failures.safety import SAFETY_KINDS, campaign_interventions, intervention_rows
from assay.metrics import (
    entries_from_records,
    entries_of,
    gate_cells,
    gate_cells_of,
    leaderboard,
    outcome_grid,
    rate_rows,
    rate_table,
    recorded_cells,
    recorded_of,
    retention_table,
    routing_rows,
    routing_table,
    stored_grid,
    stored_retention,
    totals_of,
)
from assay.metrics.comparisons import Pairing, compare
from assay.metrics.passk import pass_k_rows, pass_k_table
from assay.store import EpisodeRecord, Outcome, Store, renderer_counts, renderer_notes
from assay.store import aggregates as ag
from assay.store.provenance import renderer_counts_of, renderer_notes_of

POLICIES = ("expert", "router", "shaky")
TASKS = ("metaworld/push@1", "metaworld/reach@1")
VARIANTS = {"nominal": ("nominal", {"perturbations": []}),
            "k-light": ("light.intensity=0.3", {"perturbations": [{"axis": "visual", "factor": "light.intensity",
                                                                   "value": 0.3}]}),
            "k-mass": ("object.mass=2.0", {"perturbations": [{"axis": "behavioral", "factor": "object.mass",
                                                              "value": 2.0}]})}
SEEDS = 8
GPU = {"backend": "egl", "vendor": "NVIDIA", "renderer": "H200/PCIe", "version": "4.6", "software": False,
       "gpu_host": True}
SOFT = {"backend": "osmesa", "vendor": "Mesa", "renderer": "llvmpipe", "version": "4.5", "software": True,
        "gpu_host": True}


def _record(campaign: str, policy: str, task: str, key: str, seed: int, rng: np.random.Generator) -> EpisodeRecord:
    name, variant = VARIANTS[key]
    draw = rng.random()
    outcome = Outcome.ERROR if draw < 0.12 else Outcome.SUCCESS if draw < 0.55 else \
        Outcome.TIMEOUT if draw < 0.8 else Outcome.FAILURE
    steps = 0 if outcome is Outcome.ERROR and draw < 0.06 else int(rng.integers(5, 40))
    run: dict[str, Any] = {"safety": policy == "shaky", "replan_every": None, "pipeline": "lockstep"}
    if policy == "shaky":
        run["interventions"] = {kind: int(rng.integers(0, 4)) for kind in SAFETY_KINDS}
    provenance: dict[str, Any] = {"packages": {"assay": "0.1", "mujoco": "3.3" if seed % 2 else "3.2"},
                                  "python": "3.11", "code_revision": "abc" if seed < 6 else "def",
                                  "host": f"h{seed % 3}", "run": run}
    if task == "metaworld/push@1":
        provenance["renderer"] = GPU if seed % 4 else SOFT
    info = {"chosen_skill": "push-v3" if seed % 3 else "reach-v3"} if policy == "router" else {}
    return EpisodeRecord(
        key=f"{policy}-{task[10:14]}-{key}-{seed}", campaign=campaign, task_id=task, task_hash="h", variant_key=key,
        variant_name=name, variant={"name": name, **variant}, policy_name=policy, policy_version="1",
        policy_spec={"builtin": policy}, seed=1000 + seed, episode_index=seed, instruction="do it", outcome=outcome,
        reason="worker died" if outcome is Outcome.ERROR and seed % 2 else "policy raised" if outcome is Outcome.ERROR
        else "", steps=steps, total_return=float(rng.normal(3.0, 2.0)) * 1.000001 if steps else 0.0,
        success_step=steps - 1 if outcome is Outcome.SUCCESS else None, trajectory_hash="t", policy_info=info,
        provenance=provenance)


def golden_records(campaign: str = "golden") -> list[EpisodeRecord]:
    """The golden campaign's episodes (partial: some seeds of some cells are missing, one cell has none)."""
    rng = np.random.default_rng(39)
    records = []
    for policy in POLICIES:
        for task in TASKS:
            for key in VARIANTS:
                if (policy, task, key) == ("shaky", "metaworld/reach@1", "k-mass"):
                    continue  # a cell with no episode at all
                for seed in range(SEEDS):
                    if policy == "router" and key == "k-light" and seed >= 5:
                        continue  # a partial cell
                    records.append(_record(campaign, policy, task, key, seed, rng))
    return records


def build(store: Store) -> list[EpisodeRecord]:
    """Write the golden campaign (and a second one sharing some of its episodes) through ``Store.record``."""
    records = golden_records()
    store.catalog.save_campaign("golden", "h", {"campaign": {"name": "golden"}})
    for start in range(0, len(records), 7):  # several transactions, as the driver writes them
        store.record(records[start:start + 7])
    shared = [dataclasses.replace(r, campaign="other", policy_name=f"{r.policy_name}-again")
              for r in records if r.seed % 2 == 0]
    store.catalog.save_campaign("other", "h2", {})
    store.record(shared)
    return records


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _same_grid(one: Any, other: Any) -> None:
    assert one.policies == other.policies and one.task_ids == other.task_ids
    for a, b in zip(one.tasks, other.tasks, strict=True):
        assert np.array_equal(a.patterns, b.patterns, equal_nan=True)
        assert np.array_equal(a.weights, b.weights) and a.errors == b.errors


def check_store(store: Store, campaign: str = "golden") -> None:
    """Every result from the rows equals the same result from the database's counts (see the module docstring)."""
    records = store.catalog.episodes(campaign=campaign)
    assert records, "the golden campaign holds no episode"
    kept = ag.cell_totals(store.catalog, campaign)
    counted = ag.cell_totals(store.catalog, campaign, from_rows=True)
    python = totals_of(records)
    for one in (counted, python):
        assert [dataclasses.astuple(t)[:-2] for t in one] == [dataclasses.astuple(t)[:-2] for t in kept]
        assert close([(t.return_sum, t.return_squares) for t in one], [(t.return_sum, t.return_squares) for t in kept])
    for by in (("policy", "task"), ("policy", "task", "variant"), ("variant",), ("campaign", "policy")):
        for errors_as_failures in (False, True):
            assert close([r.to_dict() for r in rate_rows(kept, by, errors_as_failures=errors_as_failures)],
                          [r.to_dict() for r in rate_table(records, by, errors_as_failures=errors_as_failures)])
    assert entries_of(kept, "c") == entries_from_records(records, "c")
    assert gate_cells_of(kept) == gate_cells(records) and gate_cells_of(kept, True) == gate_cells(records, True)
    assert recorded_of(kept) == recorded_cells(records)
    assert pass_k_rows(kept, 2).to_dict() == pass_k_table(records, 2).to_dict()
    for variants in ({"nominal"}, None):
        scoped = [t for t in kept if variants is None or t.variant in variants]
        rows = [r for r in records if variants is None or r.variant_name in variants]
        grid, expected = stored_grid(store.catalog, campaign, scoped), outcome_grid(rows)
        _same_grid(grid, expected)
        assert leaderboard(grid, n_resamples=300).to_dict() == leaderboard(expected, n_resamples=300).to_dict()
        a, *others = grid.policies
        for pairing in (Pairing.PAIRED, Pairing.UNPAIRED):
            assert [c.to_dict() for c in compare(grid, a, others, pairing, n_resamples=500)] == \
                [c.to_dict() for c in compare(expected, a, others, pairing, n_resamples=500)]
    assert [r.to_dict() for r in stored_retention(store.catalog, campaign, kept)] == \
        [r.to_dict() for r in retention_table(records)]
    renderers = ag.renderer_totals(store.catalog, campaign)
    assert renderer_counts_of(renderers) == renderer_counts(records)
    assert renderer_notes_of(renderers) == renderer_notes(records)
    assert campaign_interventions(store, campaign) == intervention_rows(records)
    assert routing_rows(ag.routing_totals(store.catalog, campaign)) == routing_table(records)
    assert ag.error_reasons(store.catalog, campaign) == {
        reason: sum(1 for r in records if r.outcome is Outcome.ERROR and r.reason == reason)
        for reason in {r.reason for r in records if r.outcome is Outcome.ERROR}}
    assert ag.campaign_seeds(store.catalog, campaign) == sorted({r.seed for r in records})
    found = ag.provenance_totals(store.catalog, campaign)
    assert found["hosts"] == {h: sum(1 for r in records if r.provenance["host"] == h)
                              for h in {r.provenance["host"] for r in records}}
    versions = {r.provenance["packages"]["mujoco"] for r in records}
    assert found["packages"]["mujoco"] == {v: sum(1 for r in records if r.provenance["packages"]["mujoco"] == v)
                                           for v in versions}


def skip_without_campaign(store: Store, campaign: str) -> None:
    if store.catalog.campaign(campaign) is None:
        pytest.skip(f"no campaign {campaign}")
