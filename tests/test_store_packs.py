"""`storage: {pack: batch}` (issue 39, files at scale): a batch's episodes in one Parquet file, a row group each.

A packed campaign has the keys and results of the same campaign unpacked, and each of its episodes reads
back as the same table (columns, types, values, metadata); `store verify` passes and names every episode
of a damaged pack; a resume keeps them; prune keeps rows and summaries and deletes a pack only with the
last of its episodes; `episodes replay` and the LeRobot export read packed episodes; a bad option is
one line naming the valid values.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from assay.cli.app import app
from assay.errors import SpecError, StoreError
from assay.run import InlineExecutor, prepare_campaign, run_campaign
from assay.spec import campaign_from_data, load_campaign
from assay.store import Store, read_episode
from assay.store.episodes import encode_episode
from assay.store.packs import encode_pack, episode_table, pack_relpath
from assay.store.roots import TMP_MARK
from assay.store.schema import episodes as episodes_table
from tests.helpers import untimed
from tests.test_integrity import CAMPAIGN

runner = CliRunner()
PACKED = {**CAMPAIGN, "name": "packed", "storage": {"pack": "batch"}}  # Pendulum, 4 episodes, batches of 2


def _run(root: Path, data: dict):
    with Store(root) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(data)), store, InlineExecutor(root))
        return summary, sorted(store.catalog.episodes(campaign=data["name"]), key=lambda r: r.key)


def _tables(root: Path, records) -> dict[str, pa.Table]:
    with Store(root) as store:
        return {r.key: store.steps(r) for r in records}


def _results(record) -> tuple:
    return (record.key, record.outcome, record.steps, record.total_return, record.success_step,
            record.trajectory_hash, record.seed)


def _same_tables(packed: pa.Table, plain: pa.Table) -> None:
    """Equal schemas (names, types) and equal values with the file's own metadata and seal, the wall-clock
    facts (the policy's latency, the trace's timings) aside."""
    assert packed.schema.equals(plain.schema)
    assert untimed(packed).equals(untimed(plain), check_metadata=True)


def test_a_pack_reads_back_each_episode_exactly_as_its_own_file(tmp_path):
    root = tmp_path / "plain"
    _, records = _run(root, {**CAMPAIGN, "name": "plain"})
    own = _tables(root, records)
    data = encode_pack(list(own.values()))
    relpath = pack_relpath(list(own))
    (root / relpath).parent.mkdir(parents=True)
    (root / relpath).write_bytes(data)
    for key, table in own.items():  # the very table, latency included, read through the one reader
        assert read_episode(root, relpath, key=key).equals(table, check_metadata=True)
    assert pq.ParquetFile(root / relpath).metadata.num_row_groups == len(own)
    with pytest.raises(StoreError, match="is not in the pack"):
        read_episode(root, relpath, key="0" * 24)
    with pytest.raises(StoreError, match="read by episode key"):
        read_episode(root, relpath)


def test_an_episode_read_lets_go_of_its_bytes_on_the_reading_thread(tmp_path):
    """Arrow's pool threads must not hold the step file's bytes: the last one to drop them takes the GIL, and at
    interpreter exit that aborts the process (CI saw `assay episodes show` die with SIGABRT). pq.read_table let
    go on a pool thread in 15 of 200 reads here and a threaded ParquetFile.read in 1 of 300; 300 reads of each
    layout (own file, pack) must let go on the reading thread every time."""
    root = tmp_path / "plain"
    _, records = _run(root, {**CAMPAIGN, "name": "plain"})
    own = _tables(root, records)
    released: list[int] = []

    class Tracked(bytes):
        def __del__(self):
            released.append(threading.get_ident())

    layouts = [(encode_episode(table), None) for table in own.values()]
    layouts += [(encode_pack(list(own.values())), key) for key in own]
    for i in range(300):
        data, key = layouts[i % len(layouts)]
        table = episode_table(Tracked(data), key)
        assert table.num_rows == own[_key_of(table, key)].num_rows
        del table
    assert released == [threading.get_ident()] * 300


def _key_of(table: pa.Table, key: str | None) -> str:
    return key if key is not None else table.schema.metadata[b"episode_key"].decode()


def test_a_packed_campaign_has_the_same_keys_results_and_tables_and_verifies(tmp_path):
    plain_root, packed_root = tmp_path / "plain", tmp_path / "packed"
    _, plain = _run(plain_root, {**CAMPAIGN, "name": "packed"})
    summary, packed = _run(packed_root, PACKED)
    assert summary.ran == 4
    assert [_results(r) for r in packed] == [_results(r) for r in plain]
    paths = {r.data_path for r in packed}
    assert len(paths) == 2 and all(p.startswith("packs/") for p in paths)  # 4 episodes, batches of 2
    assert not (packed_root / "episodes").exists()
    for record in packed:  # the row names the pack, its checksum and size
        data = (packed_root / record.data_path).read_bytes()
        assert (record.data_bytes, record.data_sha256) == (len(data), hashlib.sha256(data).hexdigest())
    tables, own = _tables(packed_root, packed), _tables(plain_root, plain)
    for key in tables:
        _same_tables(tables[key], own[key])
    verified = runner.invoke(app, ["store", "verify", "--store", str(packed_root), "--json"])
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["ok"] == 4
    again, _ = _run(packed_root, PACKED)  # a resume reads no file and keeps every packed episode
    assert (again.ran, again.skipped) == (0, 4)


def test_verify_names_every_episode_of_a_damaged_pack_and_a_resume_reruns_them(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root, PACKED)
    damaged_path = records[0].data_path
    members = sorted(r.key for r in records if r.data_path == damaged_path)
    path = root / damaged_path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    result = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert result.exit_code != 0
    document = json.loads(result.stdout)
    assert [p["key"] for p in document["problems"]] == members  # every episode the pack held, no other
    plain = runner.invoke(app, ["store", "verify", "--store", str(root)])
    assert all(key[:12] in plain.output for key in members), plain.output
    with Store(root) as store:
        assert store.damaged([r.key for r in records]) == dict.fromkeys(members,
                                                                        "checksum mismatch (corrupted or truncated)")
        with pytest.raises(StoreError, match="checksum"):
            store.steps(next(r for r in records if r.key == members[0]))
    with Store(root) as store:
        summary = run_campaign(prepare_campaign(campaign_from_data(PACKED)), store, InlineExecutor(root),
                               verify_files=True)
        assert (summary.ran, summary.repaired) == (len(members), len(members))
        assert store.damaged([r.key for r in records]) == {}


def test_prune_keeps_rows_and_deletes_a_pack_with_the_last_of_its_episodes(tmp_path):
    root = tmp_path / "store"
    _, records = _run(root, PACKED)
    pack = records[0].data_path
    members = [r.key for r in records if r.data_path == pack]
    with Store(root) as store, store.catalog.engine.begin() as conn:  # only one of the pack's episodes is old
        conn.execute(episodes_table.update().values(created_at="2099-01-01T00:00:00+00:00"))
        conn.execute(episodes_table.update().where(episodes_table.c.key == members[0])
                     .values(created_at="2000-01-01T00:00:00+00:00"))
    first = runner.invoke(app, ["store", "prune", "--store", str(root), "--older-than", "1d", "--json"])
    assert first.exit_code == 0, first.output
    document = json.loads(first.stdout)
    assert (document["episodes"], document["packs"], document["kept_packs"]) == (1, 0, 1)
    assert (root / pack).exists()
    with Store(root) as store:
        kept = next(r for r in store.catalog.episodes(campaign="packed") if r.key == members[1])
        store.steps(kept)  # its pack-mate still reads
        pruned = next(r for r in store.catalog.episodes(campaign="packed") if r.key == members[0])
        with pytest.raises(StoreError, match="pruned"):
            store.steps(pruned)
    whole = runner.invoke(app, ["store", "prune", "--store", str(root), "--campaign", "packed", "--json"])
    document = json.loads(whole.stdout)
    assert (document["packs"], document["kept_packs"]) == (2, 0)
    assert not any((root / r.data_path).exists() for r in records)
    with Store(root) as store:
        after = sorted(store.catalog.episodes(campaign="packed"), key=lambda r: r.key)
        assert [_results(r) for r in after] == [_results(r) for r in records]  # rows and summaries kept
        assert all(r.data_path is None for r in after)
    verified = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verified.exit_code == 0 and json.loads(verified.stdout)["pruned"] == 4
    rerun, _ = _run(root, PACKED)
    assert rerun.ran == 0


def test_a_killed_writers_partial_pack_is_a_temporary_removed_by_the_next_run(tmp_path):
    root = tmp_path / "store"
    _run(root, {**PACKED, "name": "small", "episodes": 2})
    stale = root / "packs" / "ab" / f"abcd.parquet{TMP_MARK}{socket.gethostname()}-999999999"  # a dead writer
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"PAR1 half a pack")
    summary, _ = _run(root, PACKED)  # shares the first 2 episodes, runs the other 2
    assert not stale.exists()
    assert summary.ran == 2
    with Store(root) as store, store.catalog.engine.connect() as conn:
        paths = conn.execute(sa.select(episodes_table.c.data_path)).scalars().all()
        assert all((root / p).exists() for p in paths)  # no row points at a missing file


@pytest.mark.parametrize(("storage", "message"), [
    ({"pack": "batches"}, "storage.pack: Input should be 'episode' or 'batch'"),
    ({"packing": "batch"}, "storage.packing: unknown field; did you mean 'pack'? valid: pack"),
])
def test_a_bad_storage_option_is_one_line_naming_the_valid_values(tmp_path, storage, message):
    path = tmp_path / "campaign.yaml"
    path.write_text(json.dumps({**CAMPAIGN, "storage": storage}))
    with pytest.raises(SpecError) as caught:
        load_campaign(path)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_the_option_changes_neither_keys_nor_the_campaign_hash():
    plain, packed = campaign_from_data(CAMPAIGN), campaign_from_data({**CAMPAIGN, "storage": {"pack": "batch"}})
    assert plain.content_hash() == packed.content_hash()
    assert "storage" not in plain.dump() and packed.dump()["storage"] == {"pack": "batch"}
    assert campaign_from_data({**CAMPAIGN, "storage": {}}).packed is False and packed.packed


METAWORLD = {"name": "mw", "seed": 4, "episodes": 3, "envs_per_worker": 2, "horizon": 25, "cameras": [],
             "tasks": ["metaworld/reach@1"], "policies": ["expert"]}


@pytest.fixture(scope="module")
def metaworld_stores(tmp_path_factory):
    base = tmp_path_factory.mktemp("packs")
    plain = _run(base / "plain", METAWORLD)[1]
    packed = _run(base / "packed", {**METAWORLD, "storage": {"pack": "batch"}})[1]
    return base / "plain", plain, base / "packed", packed


@pytest.mark.sim
def test_a_packed_metaworld_campaign_reads_back_identically(metaworld_stores):
    plain_root, plain, packed_root, packed = metaworld_stores
    assert [_results(r) for r in packed] == [_results(r) for r in plain]
    assert len({r.data_path for r in packed}) == 2  # batches of 2 and 1
    own, tables = _tables(plain_root, plain), _tables(packed_root, packed)
    for key in own:
        _same_tables(tables[key], own[key])


@pytest.mark.sim
def test_a_packed_episode_replays_and_exports(metaworld_stores, tmp_path):
    from assay.store.export_lerobot import export_lerobot

    _, plain, packed_root, packed = metaworld_stores
    replayed = runner.invoke(app, ["episodes", "replay", packed[0].key, "--store", str(packed_root), "--json"])
    assert replayed.exit_code == 0, replayed.output
    with Store(packed_root) as store:
        summary = export_lerobot(store, packed, tmp_path / "out")
    frames = pq.read_table(tmp_path / "out" / "data" / "chunk-000" / "file-000.parquet")
    assert frames.num_rows == sum(r.steps for r in packed) and summary is not None


def test_a_pack_no_row_names_is_reported_by_verify_and_deleted_by_prune_orphans(tmp_path):
    """A driver killed between a pack's write and its rows' commit leaves a pack no row names; when the rerun
    batches those episodes differently it writes new packs and the old one stays. `store verify` counts it,
    `store prune --orphans --dry-run` lists exactly it, `--orphans` deletes exactly it, and every episode
    still reads."""
    root = tmp_path / "store"
    _, records = _run(root, PACKED)
    orphan = records[0].data_path
    members = [r.key for r in records if r.data_path == orphan]
    assert len(members) == 2
    clean = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert json.loads(clean.stdout)["orphan_packs"] == 0
    with Store(root) as store:  # the state a kill leaves: the pack on disk, its episodes' rows never committed
        assert store.forget(members) == 2
    # the same episodes (same job keys) batched one per worker batch: each gets a pack of its own
    _run(root, {**PACKED, "name": "single", "envs_per_worker": 1})
    stale = root / "packs" / "ab" / f"abcd.parquet{TMP_MARK}{socket.gethostname()}-1"  # a writer's temporary
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"PAR1 half")
    size = (root / orphan).stat().st_size
    verified = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert verified.exit_code == 0, verified.output  # harmless: reported, not a failure
    assert (json.loads(verified.stdout)["orphan_packs"], json.loads(verified.stdout)["orphan_bytes"]) == (1, size)
    told = runner.invoke(app, ["store", "verify", "--store", str(root)])
    assert "1 pack files no row names" in told.output and "prune --orphans" in told.output
    dry = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["files"] == [{"path": orphan, "bytes": size}]
    assert (root / orphan).exists()
    done = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans"])
    assert done.exit_code == 0 and "deleted 1 files" in done.output, done.output
    assert not (root / orphan).exists() and stale.exists()  # a temporary is the run's to remove, not an orphan
    with Store(root) as store:
        everything = {r.key: r for r in store.catalog.episodes()}.values()  # a row per campaign that links it
        assert len(everything) == 4 and all(r.data_path for r in everything)
        for record in everything:
            store.steps(record)  # every pack still named reads and checks
    again = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans", "--json"])
    assert json.loads(again.stdout)["orphan_packs"] == 0


def test_prune_orphans_on_an_unlocked_data_root_waits_for_live_leases(tmp_path):
    """An object-store data root has no run lock: a pack in flight is named by no row until its batch commits,
    so orphans are refused while any driver holds an unexpired lease, and pruned once none does."""
    with Store(tmp_path / "store", data_url="memory://orphan-test/data") as store:
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names")
        store.claim(["k" * 24], "c", "driver-a", now=1000.0, ttl_s=300.0)
        with pytest.raises(StoreError, match=r"a run holds 1 job leases on this store .* no run is going on"):
            store.prune_orphans(now=1100.0)
        assert store.files.exists("packs/ab/abcd.parquet")
        # the lease ran out at 1300: the driver is gone, nothing is in flight
        assert store.prune_orphans(now=1400.0) == [("packs/ab/abcd.parquet", 24)]
        assert not store.files.exists("packs/ab/abcd.parquet")


def test_a_run_that_starts_while_orphans_are_listed_stops_the_prune(tmp_path, monkeypatch):
    """On an unlocked data root a driver may claim a batch and write its pack after the first lease check: the
    check is made again between listing the packs and reading the rows, so that pack is never deleted."""
    with Store(tmp_path / "store", data_url="memory://orphan-race/data") as store:
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names")
        root_type = type(store.files)  # a new view of the data root per access: patch its class
        listing = root_type.glob

        def glob_while_a_run_starts(self, pattern):
            store.claim(["k" * 24], "c", "driver-b", now=time.time(), ttl_s=300.0)
            self.write("packs/cd/cdef.parquet", b"PAR1 a pack in flight")
            return listing(self, pattern)

        monkeypatch.setattr(root_type, "glob", glob_while_a_run_starts)
        with pytest.raises(StoreError, match="a run holds 1 job leases"):
            store.prune_orphans()
        assert store.files.exists("packs/cd/cdef.parquet") and store.files.exists("packs/ab/abcd.parquet")


def test_prune_orphans_releases_the_leases_of_a_crashed_driver_of_this_host(tmp_path):
    """A driver of this host that died holds leases until they expire; `store prune --orphans` releases them
    first, as a rerun does, instead of refusing for --lease-seconds; a live driver's lease still refuses."""
    from assay.run.leases import _host

    url = "memory://orphan-dead/data"
    with Store(tmp_path / "store", data_url=url) as store:
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names")
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        store.claim(["k" * 24], "c", f"{_host()}:{dead.pid}:00000000", now=time.time(), ttl_s=300.0)
    done = runner.invoke(app, ["store", "prune", "--store", str(tmp_path / "store"), "--orphans", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["files"] == [{"path": "packs/ab/abcd.parquet", "bytes": 24}]
    with Store(tmp_path / "store") as store:
        assert store.claim_owners() == []
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names")
        store.claim(["k" * 24], "c", f"{_host()}:{os.getpid()}:00000000", now=time.time(), ttl_s=300.0)
    refused = runner.invoke(app, ["store", "prune", "--store", str(tmp_path / "store"), "--orphans"])
    assert refused.exit_code == 2 and "a run holds 1 job leases" in refused.stderr


def test_verify_says_when_its_orphan_count_includes_a_running_campaigns_packs(tmp_path):
    """A pack in flight is named by no row until its batch commits: while a driver holds a live lease, verify
    still counts the pack, and says that a run holds leases; without one it says nothing of the kind."""
    root = tmp_path / "store"
    with Store(root) as store:
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names")
    quiet = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert (json.loads(quiet.stdout)["orphan_packs"], json.loads(quiet.stdout)["live_leases"]) == (1, 0)
    assert "job leases" not in runner.invoke(app, ["store", "verify", "--store", str(root)]).output
    with Store(root) as store:
        store.claim(["k" * 24, "j" * 24], "c", "driver-a", now=time.time(), ttl_s=300.0)
    busy = runner.invoke(app, ["store", "verify", "--store", str(root), "--json"])
    assert (json.loads(busy.stdout)["orphan_packs"], json.loads(busy.stdout)["live_leases"]) == (1, 2)
    told = runner.invoke(app, ["store", "verify", "--store", str(root)]).output
    assert "1 pack files no row names" in told and "a run holds 2 job leases now" in told


HOLD_SHARED = """
import sys
from assay.store.locking import run_lock
with run_lock(sys.argv[1], shared=True):  # what a campaign run holds
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_dry_run_of_prune_orphans_during_a_run_warns_that_packs_may_be_in_flight(tmp_path):
    """Issue 50: the real `store prune --orphans` waits for a run (the run lock) and its dry run listed the run's
    packs in flight as orphans without a word; it now says a run holds the store, in text and in --json."""
    root = tmp_path / "store"
    with Store(root) as store:
        store.files.write("packs/ab/abcd.parquet", b"PAR1 a pack no row names yet")
    quiet = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans", "--dry-run", "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["run_in_progress"] is None, quiet.output
    assert "holds this store" not in quiet.stderr
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    run = subprocess.Popen([sys.executable, "-c", HOLD_SHARED, str(root)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "held"
        dry = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans", "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        assert json.loads(dry.stdout)["run_in_progress"] == "campaign runs in progress"
        assert json.loads(dry.stdout)["files"] == [{"path": "packs/ab/abcd.parquet", "bytes": 28}]
        told = runner.invoke(app, ["store", "prune", "--store", str(root), "--orphans", "--dry-run"])
        assert "a campaign run (campaign runs in progress) holds this store" in " ".join(told.stderr.split())
        assert "waits for the run to finish" in " ".join(told.stderr.split())
    finally:
        run.communicate(input="", timeout=60)
