"""Repairs keep every link (issue 50): an episode two campaigns share, damaged and re-run by one of them, comes back
linked to both, in the same transaction as its new row."""

from __future__ import annotations

import sqlalchemy as sa
from typer.testing import CliRunner

from assay.cli.app import app
from assay.store import Store
from assay.store import aggregates as ag
from tests.test_integrity import CAMPAIGN, _run

WIDER = {**CAMPAIGN, "name": "wider", "episodes": 6}  # the same seeds and 2 more: it shares 4 episodes


def _links(root, campaign: str) -> int:
    with Store(root) as store, store.catalog.engine.connect() as conn:
        return int(conn.execute(sa.text("select count(*) from campaign_episodes where campaign = :c"),
                                {"c": campaign}).scalar())


def _counted(root, campaign: str) -> int:
    with Store(root) as store:
        return sum(t.episodes for t in ag.cell_totals(store.catalog, campaign))


def test_a_shared_episode_repaired_by_one_campaign_is_relinked_to_both(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root)
    wider, _ = _run(root, WIDER)
    assert (wider.ran, wider.skipped) == (2, 4)
    assert (_links(root, "integrity"), _links(root, "wider")) == (4, 6)
    victim = sorted(records, key=lambda r: r.key)[0]
    (root / victim.data_path).unlink()  # damage a shared episode
    repaired, again = _run(root)  # the narrower campaign finds and re-runs it
    assert (repaired.ran, repaired.repaired) == (1, 1)
    assert victim.key in {r.key for r in again}
    # both campaigns link it again, under their own policy names, and both cells count it
    assert (_links(root, "integrity"), _links(root, "wider")) == (4, 6)
    assert (_counted(root, "integrity"), _counted(root, "wider")) == (4, 6)
    with Store(root) as store:
        assert ag.count_differences(store.catalog)[1] == []
        assert victim.key in {r.key for r in store.catalog.episodes(campaign="wider")}
    # the wider campaign is complete: a rerun runs nothing and a prune of the narrower keeps the shared files
    rerun, _ = _run(root, WIDER)
    assert (rerun.ran, rerun.skipped) == (0, 6)
    dry = CliRunner().invoke(app, ["store", "prune", "--store", str(root), "--campaign", "integrity", "--dry-run",
                                   "--json"])
    assert dry.exit_code == 0, dry.output
    assert '"wider": 4' in dry.output.replace("\n", "").replace("  ", "")


def test_a_forgotten_episode_is_relinked_even_when_another_campaign_reruns_it(tmp_path):
    root = tmp_path / "store"
    _run(root)
    _, wide = _run(root, WIDER)
    shared = sorted(r.key for r in wide)
    with Store(root) as store:
        store.forget(shared[:2])  # as a resume does with damaged episodes
        assert (_links(root, "integrity"), _links(root, "wider")) in {(2, 4), (3, 4), (4, 4)}
    _run(root, WIDER)  # the other campaign re-runs them: the first gets its links back in the same transaction
    assert (_links(root, "integrity"), _links(root, "wider")) == (4, 6)
    assert (_counted(root, "integrity"), _counted(root, "wider")) == (4, 6)
