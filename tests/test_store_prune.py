"""`assay store prune` (issue 39): step files and videos of chosen campaigns or old episodes go, rows stay.

Two Pendulum campaigns on one store (a third shares the first's episodes): pruning keeps every
catalog row and summary, the kept counts and `assay results` unchanged; `store verify` passes and
counts the pruned episodes; a rerun runs nothing; `episodes replay` says "step file pruned" in one
line; `--dry-run` lists the files and bytes and deletes nothing; a prune interrupted between its
marks and its deletions is finished by the next; `--older-than` selects by the row's age.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import StoreError
from assay.store import Store, video_relpath
from assay.store import aggregates as ag
from assay.store.retention import parse_age
from assay.store.schema import episodes as episodes_table
from tests.test_integrity import CAMPAIGN, _run

runner = CliRunner()
OLD = {**CAMPAIGN, "name": "old", "seed": 11}
KEEP = {**CAMPAIGN, "name": "keep", "seed": 12}
TWIN = {**OLD, "name": "twin"}  # the same jobs as "old" under another name: linked, not re-run


def _summaries(root: Path) -> dict[str, tuple]:
    with Store(root) as store, store.catalog.engine.connect() as conn:
        columns = (episodes_table.c.key, episodes_table.c.outcome, episodes_table.c.steps,
                   episodes_table.c.total_return, episodes_table.c.success_step, episodes_table.c.trajectory_hash,
                   episodes_table.c.seed)
        return {r.key: tuple(r[1:]) for r in conn.execute(sa.select(*columns))}


def _results(root: Path, campaign: str) -> dict:
    result = runner.invoke(app, ["results", "--store", str(root), "--campaign", campaign, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _videos(root: Path, records) -> dict[str, int]:
    """A video per episode, as a camera would have left (Pendulum renders none): path -> bytes."""
    made = {}
    for i, record in enumerate(records):
        path = root / video_relpath(record.key, "front")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"v" * (100 + i))
        made[video_relpath(record.key, "front")] = 100 + i
    return made


def _prune(root: Path, *args: str) -> dict:
    result = runner.invoke(app, ["store", "prune", "--store", str(root), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_prune_keeps_rows_summaries_and_results_and_a_rerun_runs_nothing(tmp_path):
    root = tmp_path / "store"
    _, old = _run(root, OLD)
    _, keep = _run(root, KEEP)
    videos = _videos(root, old)
    before_rows, before_results = _summaries(root), _results(root, "old")
    with Store(root) as store:
        before_counts = ag.cell_totals(store.catalog)
    step_bytes = {r.data_path: (root / r.data_path).stat().st_size for r in old}

    dry = _prune(root, "--campaign", "old", "--dry-run")
    expected = sorted([*step_bytes.items(), *videos.items()])
    assert [(f["path"], f["bytes"]) for f in dry["files"]] == expected
    assert (dry["episodes"], dry["step_files"], dry["videos"], dry["bytes"]) == \
        (4, 4, 4, sum(step_bytes.values()) + sum(videos.values()))
    assert all((root / path).exists() for path, _ in expected)  # a dry run deletes nothing
    plain = runner.invoke(app, ["store", "prune", "--store", str(root), "-c", "old", "--dry-run"])
    assert f"{sorted(step_bytes)[0]}" in plain.output and "would delete 4 step files and 4 videos" in plain.output

    done = _prune(root, "--campaign", "old")
    assert (done["episodes"], done["newly_pruned"], done["bytes"]) == (4, 4, dry["bytes"])
    assert not any((root / path).exists() for path, _ in expected)
    assert all((root / r.data_path).exists() for r in keep)  # the other campaign's files stay
    assert _summaries(root) == before_rows  # every row, every summary
    assert _results(root, "old") == before_results
    with Store(root) as store:
        assert ag.cell_totals(store.catalog) == before_counts
        assert {r.key for r in store.catalog.episodes(campaign="old") if r.data_path is None} == {r.key for r in old}

    verify = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verify.exit_code == 0, verify.output
    document = json.loads(verify.stdout)
    assert (document["files"], document["ok"], document["failed"], document["pruned"]) == (4, 4, 0, 4)

    again, records = _run(root, OLD)  # a resume keeps pruned episodes: nothing runs
    assert (again.ran, again.skipped, again.repaired) == (0, 4, 0)
    assert {r.key for r in records} == {r.key for r in old}
    checked, _ = _run(root, OLD, verify_files=True)  # --verify-files does not re-run them either
    assert (checked.ran, checked.repaired) == (0, 0)

    replay = runner.invoke(app, ["episodes", "replay", old[0].key, "--store", str(root)])
    assert replay.exit_code == 2
    [line] = replay.stderr.strip().splitlines()
    assert line.startswith(f"error: episode {old[0].key[:12]}: step file pruned (")
    show = runner.invoke(app, ["episodes", "show", old[0].key[:12], "--store", str(root)])
    assert show.exit_code == 0, show.output
    with Store(root) as store, pytest.raises(StoreError, match="step file pruned"):
        store.steps(store.catalog.episode(old[0].key))

    twice = _prune(root, "--campaign", "old")  # nothing left to delete
    assert (twice["episodes"], twice["newly_pruned"], twice["files"]) == (4, 0, [])


def test_an_episode_another_campaign_links_is_kept_unless_both_are_chosen(tmp_path):
    root = tmp_path / "store"
    _, old = _run(root, OLD)
    twin, _ = _run(root, TWIN)
    assert twin.ran == 0  # the twin linked the old campaign's episodes
    kept = _prune(root, "--campaign", "old")
    assert (kept["episodes"], kept["kept_shared"], kept["files"]) == (0, {"twin": 4}, [])
    assert all((root / r.data_path).exists() for r in old)
    both = _prune(root, "--campaign", "old", "--campaign", "twin")
    assert (both["episodes"], both["step_files"], both["kept_shared"]) == (4, 4, {})
    assert not any((root / r.data_path).exists() for r in old)


def test_older_than_selects_by_the_rows_age_and_an_interrupted_prune_is_finished(tmp_path):
    root = tmp_path / "store"
    _, old = _run(root, OLD)
    aged = sorted(r.key for r in old)[:2]
    with Store(root) as store, store.catalog.engine.begin() as conn:
        conn.execute(episodes_table.update().where(episodes_table.c.key.in_(aged))
                     .values(created_at="2020-01-01T00:00:00+00:00"))
    paths = {r.key: r.data_path for r in old}
    with Store(root) as store:
        plan = store.prune(older_than=parse_age("30d"), dry_run=True)
        assert plan.episodes == tuple(aged)
        from assay.store.retention import _mark  # an interruption after the marks, before any deletion
        _mark(store.catalog, [aged[0]], "2026-01-01T00:00:00+00:00")
    assert (root / paths[aged[0]]).exists()
    done = _prune(root, "--older-than", "30d")
    assert (done["episodes"], done["newly_pruned"], done["step_files"]) == (2, 1, 2)
    assert [k for k in paths if not (root / paths[k]).exists()] == [k for k in paths if k in aged]
    assert _prune(root, "--older-than", "3650d")["episodes"] == 0


def test_forgetting_a_pruned_episode_drops_its_mark_and_a_rerun_writes_its_file_again(tmp_path):
    root = tmp_path / "store"
    _, old = _run(root, OLD)
    before = _summaries(root)
    _prune(root, "--campaign", "old")
    victim = old[0]
    with Store(root) as store:
        store.forget([victim.key])
    again, _ = _run(root, OLD)
    assert (again.ran, again.skipped) == (1, 3)
    assert (root / victim.data_path).exists()
    assert _summaries(root) == before  # the same trajectory, recorded again
    verify = json.loads(runner.invoke(app, ["store", "verify", "--store", str(root), "--json"]).stdout)
    assert (verify["files"], verify["pruned"], verify["failed"]) == (1, 3, 0)


@pytest.mark.parametrize(("args", "message"), [
    ([], "prune what? give --campaign NAME (repeatable) and/or --older-than AGE (a number and a unit: 90s"),
    (["--older-than", "30x"], "--older-than '30x' is not an age; valid: a number and a unit: 90s, 45m, 12h, 30d, 2w"),
    (["--campaign", "nope"], "no campaign 'nope' in this store; known: old"),
])
def test_a_bad_selection_is_one_line(tmp_path, args, message):
    root = tmp_path / "store"
    _run(root, OLD)
    result = runner.invoke(app, ["store", "prune", "--store", str(root), *args])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {message}"), line


def test_ages():
    assert parse_age("30d").total_seconds() == 30 * 86400
    assert parse_age(" 1.5h ").total_seconds() == 5400
    assert parse_age("2w").days == 14 and parse_age("90s").total_seconds() == 90


def test_the_report_of_a_pruned_campaign_still_shows_its_tables_and_gallery_cards(tmp_path):
    root = tmp_path / "store"
    _, old = _run(root, OLD)
    _prune(root, "--campaign", "old")
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "old", "--store", str(root), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "Failure gallery" in page
    assert all(f"episode {r.key}" in page for r in old)  # a card per unsuccessful episode, without its trace


def test_prune_deletes_through_an_fsspec_data_root(tmp_path):
    from assay.run import InlineExecutor, prepare_campaign, run_campaign
    from assay.spec import campaign_from_data

    root, data = tmp_path / "store", tmp_path / "data"
    with Store(root, data_url=f"file://{data}") as store:
        run_campaign(prepare_campaign(campaign_from_data(OLD)), store, InlineExecutor(store.data_root))
        records = store.catalog.episodes(campaign="old")
    videos = _videos(data, records)
    assert all((data / r.data_path).exists() for r in records) and not (root / "episodes").exists()
    dry = _prune(root, "--campaign", "old", "--dry-run")
    assert (dry["step_files"], dry["videos"]) == (4, 4)
    assert sorted(f["path"] for f in dry["files"]) == sorted([*(r.data_path for r in records), *videos])
    _prune(root, "--campaign", "old")
    assert not any((data / r.data_path).exists() for r in records)
    assert not any((data / path).exists() for path in videos)
    verify = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verify.exit_code == 0 and json.loads(verify.stdout)["pruned"] == 4


def test_videos_are_found_by_one_listing_per_folder_where_many_keys_share_it(tmp_path):
    from assay.store.retention import _videos
    from assay.store.roots import LocalRoot

    keys = [f"ab{i:022d}" for i in range(20)]
    for key in keys:
        for camera in ("front", "wrist"):
            path = tmp_path / video_relpath(key, camera)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x" * len(camera))
    wanted = keys[:18]  # 18 of the folder's 20 episodes: listed once, the other two left out
    found = _videos(LocalRoot(tmp_path), wanted)
    assert sorted(found) == sorted((video_relpath(k, c), len(c)) for k in wanted for c in ("front", "wrist"))
    assert sorted(_videos(LocalRoot(tmp_path), keys[18:])) == \
        sorted((video_relpath(k, c), len(c)) for k in keys[18:] for c in ("front", "wrist"))
