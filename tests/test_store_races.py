"""Races closed where they happen (issue 50): claims decided by the database or the file system, never by a check
followed by a write. Each test races two processes, started together at a barrier, over 50 trials; every trial
must end with exactly one winner. Nothing is timed.

* Two campaigns of one name and different specs started at once on one store: the catalog's primary key on the
  name decides (an insert inside a transaction); exactly one runs, the other is refused in one line before any
  episode, and the store holds the winner's spec alone (catalog row, ``campaign.json``, links).
* Two stores opened at once on one data root: the root's marker is created exclusively (a link that fails when
  the name exists); exactly one store is accepted, the other refused in one line, and the marker names the winner.

The third race, two drivers creating one PostgreSQL catalog, is in tests/test_postgres.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa

from assay.store import Store
from tests.race_support import race, same_name_campaigns, stores_on_one_root

TRIALS = 50


def _one_winner(outcomes) -> tuple[int, str]:
    """The racer that won a trial and the loser's message; asserts exactly one of each, and no crash."""
    kinds = sorted(o[2] for o in outcomes)
    assert kinds == ["ok", "refused"], outcomes
    winner = next(o for o in outcomes if o[2] == "ok")
    loser = next(o for o in outcomes if o[2] == "refused")
    assert "\n" not in loser[3], loser
    return winner[1], loser[3]


def test_same_name_campaigns_with_different_specs_started_at_once_run_one(tmp_path):
    roots = [str(tmp_path / f"store-{t}") for t in range(TRIALS)]
    for root in roots:  # the stores exist: the race is the campaign's name alone
        Store(root).close()
    for trial, outcomes in enumerate(race(same_name_campaigns, [roots, roots], TRIALS)):
        winner, message = _one_winner(outcomes)
        assert "campaign 'race' already exists" in message and "with a different spec" in message
        spec_hash, ran = outcomes[winner][3].split(" ran ")
        assert ran == "1"
        with Store(roots[trial]) as store:
            row = store.campaign("race")
            assert row is not None and row.spec_hash == spec_hash
            assert [c.name for c in store.catalog.campaigns()] == ["race"]
            assert row.spec["campaign"]["seed"] == 100 + winner
            with store.catalog.engine.connect() as conn:  # only the winner's episode, linked once
                assert conn.execute(sa.text("select count(*) from episodes")).scalar() == 1
                assert conn.execute(sa.text("select count(*) from campaign_episodes")).scalar() == 1
        saved = json.loads((Path(roots[trial]) / "campaigns" / "race" / "campaign.json").read_text())
        assert saved["campaign"]["seed"] == 100 + winner


def test_two_stores_opened_at_once_on_one_data_root_accept_one(tmp_path):
    trials = [(str(tmp_path / f"store-{t}"), str(tmp_path / f"data-{t}")) for t in range(TRIALS)]
    for trial, outcomes in enumerate(race(stores_on_one_root, [trials, trials], TRIALS)):
        winner, message = _one_winner(outcomes)
        assert "a second store on one data root" in message, message
        marker = json.loads((Path(trials[trial][1]) / ".assay-store.json").read_text())
        assert marker == {"store_id": outcomes[winner][3], "store": str(Path(f"{trials[trial][0]}-{winner}"))}
        with Store(f"{trials[trial][0]}-{winner}"):  # the winner opens again; the loser stays refused
            pass
