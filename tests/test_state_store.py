"""The state on disk, a Delta table: a night merges only the rows of the keys it changed, and the merged state is
exactly the state a whole rewrite gives; past the limits, or on a truncate or a tombstone purge, the state is written
whole again. Every version a published run names stays readable until keep_versions lets it go."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from archive_helpers import Record, pipeline_config, write_parquet
from deltalake import DeltaTable
from frame_helpers import assert_same_frames
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual
from test_compaction import change, frame

from cdcreplay import delta_tables, state_store, typed_tables
from cdcreplay.compaction import CARRY_OVER_MAX_CHANGES, changed_rows, latest_rows
from cdcreplay.delta_tables import CHANGED_KEYS_WRITTEN
from cdcreplay.entrypoints import EXIT_ERROR, EXIT_OK, reconcile_main, replay_main
from cdcreplay.state_store import (
    commit_state,
    local_patterns,
    local_rows,
    merge_fits,
    read_patterns_ref,
    read_state,
    read_state_ref,
    table_state,
    write_state,
)
from cdcreplay.tables import changed_patterns, layouts_of_patterns, state_patterns, table_layouts
from cdcreplay.warehouse import PipelinePaths, read_current, read_table

DAY_1 = [
    *[change("insert", k, {"id": str(k), "v": f"t{k}", "w": "x"}, position=(k,)) for k in range(1, 9)],
    change("delete", 8, None, position=(9,)),  # a tombstone from the start
    change("insert", 1, {"id": "1", "v": "u1", "w": None}, table="db.u", position=(10,)),
    change("insert", 2, {"id": "2", "v": "u2", "w": None}, table="db.u", position=(11,)),
]
DAY_2 = [
    change("update", 1, {"id": "1", "v": "t1'"}, position=(20,)),  # partial image: w comes from the stored row
    change("delete", 2, None, position=(21,)),
    change("insert", 9, {"id": "9", "v": "t9", "w": None}, position=(22,)),
    change("update", 8, {"id": "8", "v": "late", "w": None}, position=(5,)),  # older than key 8's delete: loses
]
DAY_3 = [
    change("insert", 2, {"id": "2", "v": "t2 again", "w": "y"}, position=(30,)),  # back after its delete
    change("update", 1, {"id": "1", "w": "z"}, position=(31,)),  # partial again, over day 2's delta row
    change("delete", 9, None, position=(32,)),  # deletes a key only a delta has
    change("delete", 3, None, position=(33,)),  # a primary-key change 3 -> 10: delete and insert
    change("insert", 10, {"id": "10", "v": "t3", "w": "x"}, position=(33,), row_index=1),
    change("update", 2, {"id": "2", "v": "u2'", "w": None}, table="db.u", position=(34,)),
]


def night(spark, path: Path, changes: list[dict]) -> state_store.StateCommit:
    """Commit the changes of one night onto the newest state at ``path``, read as of its version as a run reads it."""
    newest = read_state(spark, path, delta_tables.latest_version(path))
    return commit_state(path, newest, None, frame(spark, changes), len(changes), None)


@pytest.mark.parametrize("broadcast_max_bytes", [delta_tables.BROADCAST_MAX_BYTES, 0], ids=["broadcast", "shuffled"])
def test_merged_nights_read_as_the_whole_merge_of_their_history(spark, tmp_path, monkeypatch, broadcast_max_bytes):
    monkeypatch.setattr(state_store, "MAX_MERGE_SHARE", 100)  # day 3 changes more than half of these few keys
    # The merge's source broadcast to the join with the state (these few rows), or shuffled with it (a large night).
    monkeypatch.setattr(delta_tables, "BROADCAST_MAX_BYTES", broadcast_max_bytes)
    path = tmp_path / "state"
    assert write_state(latest_rows(frame(spark, DAY_1)), path) == 0
    committed = night(spark, path, DAY_2)
    assert (committed.version, committed.merged, committed.patterns) == (1, True, None)
    # The merged rows stay for the type stage: the new rows of exactly the keys the night changed.
    night_keys = {(r.table_id, r.key) for r in frame(spark, DAY_2).collect()}
    assert sorted((r.table_id, r.key) for r in committed.merged_rows.collect()) == sorted(night_keys)
    committed.release_merged_rows()
    assert night(spark, path, DAY_3).version == 2

    expected = latest_rows(frame(spark, DAY_1 + DAY_2 + DAY_3))
    assert_same_frames(read_state(spark, path), expected)
    assert_same_frames(read_state(spark, path, 2), expected)
    # The earlier versions still read as of their own nights.
    assert_same_frames(read_state(spark, path, 1), latest_rows(frame(spark, DAY_1 + DAY_2)))
    assert_same_frames(read_state(spark, path, 0), latest_rows(frame(spark, DAY_1)))
    assert read_state(spark, path).columns == read_state(spark, path, 0).columns
    # Merged, not rewritten: one commit a night marks the replaced rows in deletion vectors beside the files they are
    # in, and adds the new rows.
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    assert [(r.operation, "replaceOnCond" in r.operationParameters) for r in history] == [
        ("WRITE", False),
        ("WRITE", True),
        ("WRITE", True),
    ]
    stored_keys = {(r.table_id, r.key) for r in latest_rows(frame(spark, DAY_1)).collect()}
    assert int(history[1].operationMetrics["numDeletedRows"]) == len(night_keys & stored_keys)
    night_1 = [json.loads(line) for line in (path / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    assert any((action.get("add") or {}).get("deletionVector") for action in night_1)


def test_a_merge_source_is_broadcast_when_its_cached_rows_are_small(spark, monkeypatch):
    rows = spark.range(1000).selectExpr("id", "repeat('x', 100) AS text").persist()
    try:
        rows.count()
        size = delta_tables.cached_bytes(rows)
        assert 100_000 < size < 1_000_000  # 1,000 rows of ~100 characters: the cached rows, not a default guess
        assert delta_tables.fits_broadcast(rows)
        monkeypatch.setattr(delta_tables, "BROADCAST_MAX_BYTES", size - 1)
        assert not delta_tables.fits_broadcast(rows)
    finally:
        rows.unpersist()


def test_a_merge_source_whose_size_cannot_be_read_is_not_broadcast(spark, monkeypatch, caplog):
    def unreadable(rows):
        raise RuntimeError("no plan statistics")  # what a Spark without that internal API would raise

    monkeypatch.setattr(delta_tables, "cached_bytes", unreadable)
    with caplog.at_level(logging.WARNING, logger="cdcreplay.delta_tables"):
        assert not delta_tables.fits_broadcast(spark.range(3))
    assert "could not read the size of a MERGE source; merging without a broadcast hint" in caplog.text


def test_one_tables_rows_are_read_from_its_partition_of_the_state(spark, tmp_path):
    write_state(latest_rows(frame(spark, DAY_1)), tmp_path / "state")
    night(spark, tmp_path / "state", DAY_3)
    rows = table_state(read_state(spark, tmp_path / "state", keep_partition=True), "db.u")

    plan = rows._jdf.queryExecution().executedPlan().toString()  # before running: the plan as planned, once
    assertDataFrameEqual(
        rows.select("key", F.col("after")["v"].alias("v")),
        spark.createDataFrame([('["1"]', "u1"), ('["2"]', "u2'")], "key string, v string"),
    )
    scans = [line for line in plan.splitlines() if "FileScan" in line or "Scan parquet" in line]
    assert scans and all(re.search(r"PartitionFilters: \[[^\]]*\(table_hash#\d+L? = -?\d+\)", s) for s in scans), plan


def test_a_run_without_row_changes_leaves_the_state_as_it_was(spark, tmp_path):
    write_state(latest_rows(frame(spark, DAY_1)), tmp_path / "state")
    committed = night(spark, tmp_path / "state", [])

    assert committed.merged
    assert_same_frames(read_state(spark, tmp_path / "state"), read_state(spark, tmp_path / "state", 0))


def test_a_merge_fits_while_the_changes_stay_small_and_broadcastable():
    assert merge_fits(100, 50)
    assert not merge_fits(100, 51)  # more than half the state's rows
    assert merge_fits(10**10, CARRY_OVER_MAX_CHANGES)
    assert not merge_fits(10**10, CARRY_OVER_MAX_CHANGES + 1)  # more keys than one broadcast join carries
    assert not merge_fits(0, 1)


def test_vacuum_keeps_every_file_a_kept_version_reads(spark, tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    for version in range(4):  # each version replaces the last one's files
        delta_tables.write_whole(spark.range(version * 10, version * 10 + 5), path)
    ids = lambda version: sorted(r.id for r in delta_tables.read_version(spark, path, version).collect())  # noqa: E731

    delta_tables.vacuum_older_than(spark, path, 1)  # younger than an hour: skipped, no listing of the files
    assert delta_tables.latest_version(path) == 3
    monkeypatch.setattr(delta_tables, "VACUUM_MIN_AGE_S", 0)
    delta_tables.vacuum_older_than(spark, path, 1)  # the shortest retention Delta takes: an hour
    assert (ids(1), ids(2), ids(3)) == ([10, 11, 12, 13, 14], [20, 21, 22, 23, 24], [30, 31, 32, 33, 34])
    # A version's age is its commit file's: two hours back, the vacuum runs at the default minimum age.
    monkeypatch.undo()
    commit = Path(path) / "_delta_log" / f"{1:020d}.json"
    os.utime(commit, (commit.stat().st_atime, commit.stat().st_mtime - 7200))
    before = delta_tables.latest_version(path)
    delta_tables.vacuum_older_than(spark, path, 1)
    assert delta_tables.latest_version(path) == before + 2  # Delta logs a vacuum as two commits: it ran
    delta_tables.vacuum_older_than(spark, path, 99)  # no such commit (its log entry cleaned up): nothing to measure
    assert delta_tables.latest_version(path) == before + 2
    assert (ids(1), ids(2), ids(3)) == ([10, 11, 12, 13, 14], [20, 21, 22, 23, 24], [30, 31, 32, 33, 34])
    # Delta rounds the retention to whole hours: rounded up, never below the oldest kept version's age.
    assert delta_tables.retention_hours(0, 1) == 1
    assert delta_tables.retention_hours(0, 3600) == 1
    assert delta_tables.retention_hours(0, 3601) == 2


# --- through the job ----------------------------------------------------------------------------------------------

TYPES = {"id": "int", "v": "varchar(8)"}


def canal(offset: int, kind: str, data: list[dict] | None, table: str = "a") -> Record:
    message = {"data": data, "old": None, "database": "shop", "table": table, "type": kind, "isDdl": False,
               "pkNames": ["id"], "mysqlType": TYPES, "es": 1000 + offset, "id": offset}  # fmt: skip
    return Record("c", 0, offset, json.dumps(message))


# fmt: off
NIGHTS = {
    1: [
        canal(0, "INSERT", [{"id": str(k), "v": f"a{k}"} for k in range(1, 11)]),
        canal(1, "INSERT", [{"id": "1", "v": "b1"}], table="b"),
    ],
    2: [canal(2, "UPDATE", [{"id": "1", "v": "a1'"}]), canal(3, "DELETE", [{"id": "2", "v": "a2"}])],
    3: [canal(4, "INSERT", [{"id": "2", "v": "a2 back"}]), canal(5, "INSERT", [{"id": "11", "v": "a11"}])],
    4: [canal(6, "TRUNCATE", None, table="b"), canal(7, "INSERT", [{"id": "2", "v": "b2"}], table="b")],
    5: [canal(8, "DELETE", [{"id": "3", "v": "a3"}])],
    6: [canal(9, "UPDATE", [{"id": k, "v": "many"} for k in map(str, range(4, 11))])],  # 7 changes: over half of 11
}
# fmt: on


def replay_nights(tmp_path, folder: str, nights, extra: str = "", keep_versions: int = 10) -> list[dict]:
    """Archive and run each night in turn (the first a full rebuild) into ``tmp_path/folder``; their summaries."""
    root = tmp_path / folder
    summaries = []
    for day, records in nights:
        stamped = [dataclasses.replace(r, timestamp=datetime(2026, 1, day, 12, tzinfo=UTC)) for r in records]
        write_parquet(stamped, root / "archive" / f"day{day}" / "p.parquet")
        config = pipeline_config(root, "p", "canal-json", root / "archive", extra=extra)
        config.write_text(f"keep_versions: {keep_versions}\n" + config.read_text(encoding="utf-8"), encoding="utf-8")
        options = ["--full-rebuild"] if day == 1 else ["--start", f"2026-01-0{day}T00:00:00+00:00"]
        assert replay_main(["--config", str(config), "--run-id", f"n{day}", *options]) == EXIT_OK
        paths = PipelinePaths(str(root / "warehouse"), "p")
        summaries.append(json.loads(paths.run_file(f"n{day}", "summary.json").read_text(encoding="utf-8")))
    return summaries


def assert_same_published_tables(spark, root, expected_root) -> None:
    """The two warehouses publish the same tables, each with the same schema and rows."""
    warehouse, expected_warehouse = str(root / "warehouse"), str(expected_root / "warehouse")
    tables = read_current(PipelinePaths(warehouse, "p"))["tables"]
    assert sorted(tables) == sorted(read_current(PipelinePaths(expected_warehouse, "p"))["tables"])
    for table in tables:
        assertDataFrameEqual(
            read_table(spark, warehouse, "p", table), read_table(spark, expected_warehouse, "p", table)
        )


def test_nights_merge_until_a_limit_and_publish_what_a_full_rebuild_does(spark, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)  # the typed tables too are merged where the state is
    with caplog.at_level(logging.INFO, logger="cdcreplay.progress"):
        summaries = replay_nights(tmp_path, "nightly", sorted(NIGHTS.items()))
    # night 1 a full rebuild; 2 and 3 merge; 4 truncates: whole; 5 merges onto that; 6 too many changes: whole.
    assert [s["state_merged"] for s in summaries] == [False, True, True, False, True, False]
    # A merge's table layouts and counts come from the patterns kept with the state it built on, updated with the
    # rows it changed; every state version keeps patterns equal to those of its whole rows.
    assert [s["layouts_from_merge"] for s in summaries] == [False, True, True, False, True, False]
    for summary in summaries:
        kept = local_rows(read_patterns_ref(spark, summary["state"]))["rows"]
        assert sorted(kept) == sorted(local_rows(state_patterns(read_state_ref(spark, summary["state"])))["rows"])
    compacted = [r.getMessage().split(" compacted, ")[1] for r in caplog.records if "compact: done" in r.getMessage()]
    merged, whole = "changed keys merged into the state", "state written whole"
    assert compacted == [whole, merged, merged, whole, merged, whole]
    # One state table, one version a night.
    assert [s["state"]["version"] for s in summaries] == [0, 1, 2, 3, 4, 5]
    assert (summaries[2]["tables"]["shop.a"]["rows"], summaries[2]["tables"]["shop.a"]["tombstones"]) == (11, 0)

    # The state of a night merged onto a merged state, of a merge onto a state written whole, and the last: each
    # equals the state a full rebuild of the nights so far writes; the published tables equal the full rebuild's.
    for night in (3, 5, 6):
        history = [record for n in range(1, night + 1) for record in NIGHTS[n]]
        rebuilt = replay_nights(tmp_path, f"rebuilt-{night}", [(1, history)])[0]
        nightly = summaries[night - 1]["state"]
        assert_same_frames(read_state_ref(spark, nightly), read_state_ref(spark, rebuilt["state"]))
    assert_same_published_tables(spark, tmp_path / "nightly", tmp_path / "rebuilt-6")
    # Table a is merged on the nights the state is (its keys' rows replaced, added and deleted): nights 2, 3 and 5;
    # night 4 truncates b alone (a gets no commit), night 6 writes the state and a whole.
    operations = [
        r.userMetadata or r.operation
        for r in spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path}/nightly/warehouse/p/tables/shop.a`")
        .orderBy("version")
        .collect()
    ]
    assert operations == ["WRITE", "MERGE", "MERGE", "MERGE", "WRITE"]


@pytest.mark.parametrize("keys_per_file", [None, 0], ids=["merged", "written-whole"])
def test_a_merge_that_would_fold_two_keys_into_one_typed_row_is_written_whole_and_refused(
    spark, tmp_path, monkeypatch, keys_per_file
):
    """Keys "1" and "01" are two keys of the state but one int: a merge would update the typed row of key 1 with
    key "01"'s row, and the table would silently hold one row for two keys. The run writes the table whole instead,
    and the audit refuses it, as it refuses a full rebuild of the same rows. Likewise when the night's changed keys
    are applied by writing the table whole (rewrite_flagged) instead of a MERGE."""
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)
    if keys_per_file is not None:
        monkeypatch.setattr(typed_tables, "REWRITE_MIN_KEYS_PER_FILE", keys_per_file)
    night_2 = [canal(2, "INSERT", [{"id": "01", "v": "a01"}])]
    # written-whole: without deletion vectors a merge that would rewrite every file (0 keys per file suffice) is a
    # whole write with the changed keys applied instead
    extra = "    deletion_vectors: false\n" if keys_per_file is not None else ""
    replay_nights(tmp_path, "folded", [(1, NIGHTS[1])], extra)
    root = tmp_path / "folded"
    paths = PipelinePaths(str(root / "warehouse"), "p")
    before = read_current(paths)
    write_parquet(
        [dataclasses.replace(r, timestamp=datetime(2026, 1, 2, 12, tzinfo=UTC)) for r in night_2],
        root / "archive" / "day2" / "p.parquet",
    )
    options = ["--start", "2026-01-02T00:00:00+00:00"]
    assert replay_main(["--config", str(root / "p.yaml"), "--run-id", "n2", *options]) == EXIT_ERROR
    assert read_current(paths) == before
    table = str(paths.table_dir("shop.a"))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    # merged or written whole with the changed keys applied, then written whole, rolled back
    night = "MERGE" if keys_per_file is None else CHANGED_KEYS_WRITTEN
    assert [r.userMetadata or r.operation for r in history] == ["WRITE", night, "WRITE", "RESTORE"]
    newest = spark.read.format("delta").load(table)
    assertDataFrameEqual(
        newest.select("id", "v"), spark.createDataFrame([(k, f"a{k}") for k in range(1, 11)], "id int, v string")
    )


def test_a_pipeline_that_purges_tombstones_writes_its_state_whole(spark, tmp_path):
    summaries = replay_nights(
        tmp_path, "purging", [(1, NIGHTS[1]), (2, NIGHTS[2])], "    tombstone_retention_days: 30\n"
    )
    assert [s["state_merged"] for s in summaries] == [False, False]


def test_a_table_whose_merges_marked_too_many_rows_deleted_is_written_whole_by_the_next_night(
    spark, tmp_path, caplog, monkeypatch
):
    """A merge leaves the rows it replaces in their files, marked deleted. Past MAX_MARKED_SHARE of a table's rows,
    the next night applies its changed keys by a whole write instead, which leaves no marked row; the state and the
    tables are still the full rebuild's."""
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)
    monkeypatch.setattr(delta_tables, "MAX_MARKED_SHARE", 0.1)
    with caplog.at_level(logging.INFO, logger="cdcreplay.progress"):
        summaries = replay_nights(tmp_path, "worn", [(n, NIGHTS[n]) for n in (1, 2, 3)])
    compacted = [r.getMessage().split(" compacted, ")[1] for r in caplog.records if "compact: done" in r.getMessage()]
    assert compacted == [
        "state written whole",
        "changed keys merged into the state",
        "changed keys applied, state written whole (too many rows marked deleted)",
    ]
    paths = PipelinePaths(str(tmp_path / "worn" / "warehouse"), "p")

    def marked(path) -> list[int | None]:
        """Each version's rows marked deleted, as the files hold them: the rows in the version's files (read as
        plain Parquet, so none is skipped) less the rows Delta reads. The checksum files give the same count, or
        none while the table does not allow deletion vectors."""
        counts = []
        for version in range(delta_tables.latest_version(path) + 1):
            in_files = spark.read.parquet(*DeltaTable(str(path), version=version).file_uris()).count()
            live = delta_tables.read_version(spark, str(path), version).count()
            by_checksum = delta_tables.rows_marked_deleted(path, version)
            assert by_checksum == in_files - live or (by_checksum is None and in_files == live), version
            counts.append(in_files - live)
        return counts

    # Night 2 marked the replaced rows of keys 1 and 2 (2 of the state's 11 rows: over 10%); night 3 wrote the state
    # whole, with none.
    assert marked(paths.state_dir) == [0, 2, 0]
    state_history = spark.sql(f"DESCRIBE HISTORY delta.`{paths.state_dir}`").orderBy("version").collect()
    assert [r.userMetadata for r in state_history] == [None, None, CHANGED_KEYS_WRITTEN]
    # Table a likewise: night 2's merge marked 2 of its 10 rows, night 3 wrote it whole with its keys applied.
    table_a = paths.table_dir("shop.a")
    table_history = spark.sql(f"DESCRIBE HISTORY delta.`{table_a}`").orderBy("version").collect()
    assert [r.userMetadata or r.operation for r in table_history] == ["WRITE", "MERGE", CHANGED_KEYS_WRITTEN]
    assert marked(table_a) == [0, 2, 0]

    rebuilt = replay_nights(tmp_path, "rebuilt", [(1, [r for n in (1, 2, 3) for r in NIGHTS[n]])])[0]
    assert_same_frames(read_state_ref(spark, summaries[-1]["state"]), read_state_ref(spark, rebuilt["state"]))
    assert_same_published_tables(spark, tmp_path / "worn", tmp_path / "rebuilt")


def test_rows_marked_deleted_come_from_the_versions_checksum_file_or_are_unknown(tmp_path):
    """A version whose checksum file counts no marked rows (a table without deletion vectors), or has no checksum
    file (another writer), is never taken for worn: it is merged as before."""
    log = tmp_path / "_delta_log"
    log.mkdir()
    (log / f"{3:020d}.crc").write_text(json.dumps({"numFiles": 2, "numDeletedRecordsOpt": 6}))
    (log / f"{4:020d}.crc").write_text(json.dumps({"numFiles": 2}))
    assert [delta_tables.rows_marked_deleted(tmp_path, v) for v in (3, 4, 5)] == [6, None, None]
    # 6 marked rows pass half of 11 live rows, not half of 12
    assert delta_tables.worn_by_merges(tmp_path, 3, 11) and not delta_tables.worn_by_merges(tmp_path, 3, 12)
    assert not delta_tables.worn_by_merges(tmp_path, 4, 0) and not delta_tables.worn_by_merges(tmp_path, 5, 0)


def test_with_one_version_kept_a_nights_reconciliation_still_reads_the_state_it_built_on(spark, tmp_path):
    summaries = replay_nights(tmp_path, "one", [(1, NIGHTS[1]), (2, NIGHTS[2])], keep_versions=1)
    versions = [s["version"] for s in summaries]
    root = tmp_path / "one"
    paths = PipelinePaths(str(root / "warehouse"), "p")
    kept_patterns = lambda: sorted(p.name for p in (paths.root / "patterns").iterdir())  # noqa: E731
    # keep_versions 1 keeps the published version, and the one night 2 built on until the next publish.
    current = read_current(paths)
    assert [entry["version"] for entry in current["history"]] == [versions[1]]
    assert current["built_on"]["version"] == versions[0]
    assert summaries[1]["base_state"] == summaries[0]["state"]
    assert kept_patterns() == ["0.json", "1.json"]
    assert reconcile_main(["--config", str(root / "p.yaml"), "--run-id", "n2"]) == EXIT_OK
    reconciled = json.loads(paths.run_file("n2", "summary.json").read_text())
    assert reconciled["reconciliation"]["verdict"] == "pass"

    third = replay_nights(tmp_path, "one", [(3, NIGHTS[3])], keep_versions=1)[0]
    current = read_current(paths)
    assert [current["history"][0]["version"], current["built_on"]["version"]] == [third["version"], versions[1]]
    assert kept_patterns() == ["1.json", "2.json"]  # night 1's state version goes with the next publish


A_TYPES = {"id": "int", "v": "string"}
B_TYPES = {"id": "bigint", "v": "string", "w": "int"}
TWO_PATTERNS = [
    change("insert", 1, {"id": "1", "v": "a"}, position=(1,), types=A_TYPES),
    change("insert", 4, {"id": "4", "v": "b", "w": "4"}, position=(2,), types=B_TYPES),
    change("insert", 3, {"id": "3", "v": "b", "w": "3"}, position=(3,), types=B_TYPES),  # B's newest row
    change("insert", 2, {"id": "2", "v": "a"}, position=(5,), types=A_TYPES),  # A's newest row, the table's newest
]


def night_patterns(spark, history: list[dict], night: list[dict]):
    """changed_patterns for ``night`` over the state of ``history``, and the layouts of the whole resulting state."""
    previous = latest_rows(frame(spark, history))
    with changed_rows(previous, frame(spark, night)) as change:
        replaced, written = local_patterns(state_patterns(change.stored)), local_patterns(state_patterns(change.rows))
    patterns = changed_patterns(local_patterns(state_patterns(previous)), replaced, written)
    return patterns, table_layouts(latest_rows(frame(spark, history + night)))


def test_a_nights_patterns_give_the_layouts_of_the_whole_state_or_none_when_they_cannot(spark):
    # B's newest row is updated, still as B: B's newest is the night's row. B's bigint id now wins over A's int.
    patterns, whole = night_patterns(
        spark, TWO_PATTERNS, [change("update", 3, {"id": "3", "v": "c", "w": "5"}, position=(6,), types=B_TYPES)]
    )
    assert layouts_of_patterns(patterns) == whole
    assert whole[0]["db.t"].columns == (("id", "bigint"), ("v", "string"), ("w", "int"))

    # A key of each pattern changes to the other one, and a new key is inserted: counts move, both newests stand.
    patterns, whole = night_patterns(
        spark,
        TWO_PATTERNS,
        [
            change("update", 1, {"id": "1", "v": "c", "w": "1"}, position=(6,), types=B_TYPES),
            change("update", 4, {"id": "4", "v": "c"}, position=(7,), types=A_TYPES),
            change("insert", 9, {"id": "9", "v": "c"}, position=(8,), types=A_TYPES),
        ],
    )
    assert layouts_of_patterns(patterns) == whole
    assert whole[1]["db.t"].rows == 5

    # B's newest row is deleted and no row of B is written: B's new newest is somewhere in its other rows, which only
    # the whole state knows -- and it decides whether A or B declares id last.
    patterns, _ = night_patterns(spark, TWO_PATTERNS, [change("delete", 3, None, position=(6,))])
    assert patterns is None

    # Patterns that do not count the rows the night replaced are not the state's: never trusted.
    stale = local_patterns(state_patterns(latest_rows(frame(spark, TWO_PATTERNS[:1]))))
    replaced = local_patterns(state_patterns(latest_rows(frame(spark, TWO_PATTERNS))))
    assert changed_patterns(stale, replaced, stale) is None
