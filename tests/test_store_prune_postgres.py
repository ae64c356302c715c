"""`assay store prune` on a PostgreSQL catalog (where ``pruned_episodes``' foreign key is enforced): rows,
summaries and counts kept, `store verify` clean, a rerun runs nothing, and forgetting a pruned episode
(its mark first, then its row) lets it run again."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from assay.cli.app import app
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data
from assay.store import Store
from assay.store import aggregates as ag
from assay.store.schema import episodes
from tests import test_postgres
from tests.test_integrity import CAMPAIGN

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def server_url():
    """A PostgreSQL server on loopback for this module, started as tests/test_postgres.py starts its own."""
    yield from test_postgres.postgres_url.__wrapped__()


def _run(root, url):
    with Store(root, catalog_url=url) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(CAMPAIGN)), store, InlineExecutor(root))
        return summary, store.catalog.episodes(campaign=CAMPAIGN["name"])


def test_prune_on_postgres(tmp_path, server_url):
    root = tmp_path / "store"
    _, records = _run(root, server_url)
    with Store(root, catalog_url=server_url) as store:
        counts = ag.cell_totals(store.catalog)
        plan = store.prune([CAMPAIGN["name"]])
        assert (len(plan.fresh), plan.count("episodes")) == (4, 4)
        assert ag.cell_totals(store.catalog) == counts
        with store.catalog.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(episodes)
                                .where(episodes.c.data_path.is_(None))).scalar() == 4
    assert not any((root / r.data_path).exists() for r in records)
    verify = CliRunner().invoke(app, ["store", "verify", "--store", str(root), "--catalog", server_url, "--json"])
    assert verify.exit_code == 0, verify.output
    assert (json.loads(verify.stdout)["pruned"], json.loads(verify.stdout)["failed"]) == (4, 0)
    again, _ = _run(root, server_url)
    assert (again.ran, again.skipped) == (0, 4)
    with Store(root, catalog_url=server_url) as store:
        assert store.forget([records[0].key]) == 1
    rerun, after = _run(root, server_url)
    assert rerun.ran == 1 and (root / records[0].data_path).exists()
    assert {r.key: r.trajectory_hash for r in after} == {r.key: r.trajectory_hash for r in records}
