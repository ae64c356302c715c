"""The online safety filter in a campaign: interventions are counted per step, NaN no longer ends an episode."""

from __future__ import annotations

import numpy as np
import pytest

from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Outcome, Store

pytestmark = pytest.mark.sim


def _campaign(name: str, safety: bool) -> dict:
    return {"name": name, "seed": 1, "episodes": 2, "horizon": 80, "envs_per_worker": 2, "safety": safety,
            "tasks": ["metaworld/reach@1"], "policies": ["tests.helpers:SloppyExpert"]}


def test_the_filter_rejects_nan_clips_and_counts_and_is_part_of_the_key(tmp_path):
    with Store(tmp_path / "store") as store:
        unfiltered = prepare_campaign(campaign_from_data(_campaign("raw", False)))
        filtered = prepare_campaign(campaign_from_data(_campaign("safe", True)))
        assert {j.key for j in unfiltered.jobs}.isdisjoint({j.key for j in filtered.jobs})
        run_campaign(unfiltered, store, InlineExecutor(store.root))
        run_campaign(filtered, store, InlineExecutor(store.root))
        raw = store.catalog.episodes(campaign="raw")
        assert all(r.outcome is Outcome.ERROR and "NaN" in r.reason for r in raw)  # no filter: NaN ends it
        for record in store.catalog.episodes(campaign="safe"):
            assert record.outcome is not Outcome.ERROR
            steps = store.steps(record)
            nan = np.asarray(steps.column("info.safety.nan"))
            limit = np.asarray(steps.column("info.safety.limit"))
            assert nan.sum() == len(nan) // 5  # every 5th action was NaN, and each was replaced
            assert limit.sum() > 0  # the x3 actions were clipped
            # The step data keeps what the policy chose; the NaN rows are exactly the filtered steps.
            chosen = np.stack(steps.column("action").to_numpy(zero_copy_only=False))
            np.testing.assert_array_equal(~np.isfinite(chosen).all(axis=1), nan == 1.0)
            # The record says how the cell ran and counts what the filter did.
            run = record.provenance["run"]
            assert run["safety"] is True and run["pipeline"] == "lockstep" and run["replan_every"] is None
            assert run["interventions"] == {"nan": int(nan.sum()), "limit": int(limit.sum()),
                                            "workspace": int(np.asarray(steps.column("info.safety.workspace")).sum())}
        assert all(r.provenance["run"] == {"safety": False, "replan_every": None, "pipeline": "lockstep"} for r in raw)
        # ... and results and the report show the counts per cell
        from assay.failures.safety import intervention_rows
        from assay.report import write_report

        [row] = intervention_rows(store.catalog.episodes(campaign="safe"))
        total = sum(r.provenance["run"]["interventions"]["nan"] for r in store.catalog.episodes(campaign="safe"))
        assert row["episodes"] == 2 and row["nan"] == total > 0 and row["limit"] > 0
        html = write_report(store, "safe", tmp_path / "r.html", embed_video=False).read_text()
        integrity = html.split("<section id='integrity'>")[1].split("</section>")[0]
        assert "Safety filter interventions" in integrity and f'<td class="num">{total}</td>' in integrity
