"""The published tables and the state are Delta tables that any Delta reader reads: delta-rs (the `deltalake`
package, no Spark) reads every published table exactly as Spark does, as of the published version, after a full
rebuild and after a night merged onto it (with the files it changed rewritten, or with deletion vectors: the
pipeline's `deletion_vectors` option); each published version stays readable as one consistent set."""

from __future__ import annotations

from datetime import timedelta

import pytest
from archive_helpers import pipeline_config
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdcreplay import delta_tables, state_store, typed_tables
from cdcreplay.delta_tables import CHANGED_KEYS_WRITTEN
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.state_store import read_state
from cdcreplay.warehouse import PipelinePaths, published_rows, read_current, read_table
from cdcreplay_lab.simulator import build_sample_archive


def read_by_delta_rs(spark, paths: PipelinePaths, table_id: str, like):
    """The table as delta-rs reads it, as a Spark frame with the columns and types of ``like``."""
    rows = published_rows(paths, table_id)
    frame = spark.createDataFrame(rows) if rows.num_rows else spark.createDataFrame([], like.schema)
    return frame.select(*[F.col(name).cast(kind) for name, kind in like.dtypes])


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["rewritten", "deletion-vectors"])
def test_delta_rs_reads_every_published_table_as_spark_does(spark, tmp_path, monkeypatch, deletion_vectors):
    # The night merges its changed keys into the typed tables whatever their size, as a large table's night does.
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)
    # ... and, without deletion vectors, written whole with their changed keys applied, as a large table's night is
    monkeypatch.setattr(typed_tables, "REWRITE_MIN_KEYS_PER_FILE", 0)
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MAX_SHARE", 100)
    monkeypatch.setattr(state_store, "MAX_MERGE_SHARE", 100)
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=1500, seed=7, days=2)
    extra = "" if deletion_vectors else "    deletion_vectors: false\n"  # on by default
    config = pipeline_config(tmp_path, "sim", "debezium-json", tmp_path / "archive", extra=extra)
    paths = PipelinePaths(str(tmp_path / "warehouse"), "sim")
    # The night is the history's last six hours: it changes some keys of each table and leaves others as they are.
    first_night_end = (history.start + timedelta(days=1, hours=18)).isoformat()
    assert replay_main(["--config", str(config), "--run-id", "n1", "--end", first_night_end]) == EXIT_OK
    first = read_current(paths)
    assert replay_main(["--config", str(config), "--run-id", "n2", "--start", first_night_end]) == EXIT_OK
    second = read_current(paths)

    assert sorted(second["tables"]) == sorted(history.tables)
    vectors_written = 0
    for table_id in second["tables"]:
        table = DeltaTable(str(paths.table_dir(table_id)))
        night = table.history(1)[0]
        if deletion_vectors:
            assert night["operation"] == "MERGE", table_id
            vectors_written += int(night["operationMetrics"]["numTargetDeletionVectorsAdded"])
        else:  # written whole with the changed keys applied (delta_tables.rewrite_flagged)
            assert (night["operation"], night.get("userMetadata")) == ("WRITE", CHANGED_KEYS_WRITTEN), table_id
        # Without the option no table's protocol asks for deletion vectors: every Delta reader reads it as it is.
        assert ("deletionVectors" in (table.protocol().reader_features or ())) == deletion_vectors, table_id
        by_spark = read_table(spark, str(tmp_path / "warehouse"), "sim", table_id)
        assert by_spark.count() == len(history.final_state(table_id))
        assertDataFrameEqual(read_by_delta_rs(spark, paths, table_id, by_spark), by_spark)
        # The newest commit is the published one: a reader who ignores the pointer sees the same rows.
        newest = spark.read.format("delta").load(str(paths.table_dir(table_id)))
        assertDataFrameEqual(newest, by_spark)

    # With the option the night marked the rows it replaced instead of rewriting the files that held them.
    assert (vectors_written > 0) == deletion_vectors

    # The first night's version is still one consistent set: its tables and its state, as of their versions.
    for info in first["tables"].values():
        night_one = DeltaTable(str(paths.root / info["path"]), version=info["delta_version"])
        assert night_one.version() == info["delta_version"]
        # (its query engine: with the option, the table allows deletion vectors from its first version)
        counted = QueryBuilder().register("night_one", night_one).execute("SELECT count(*) AS n FROM night_one")
        assert counted.read_all()["n"][0].as_py() == info["rows"]
    state_rows = read_state(spark, paths.state_dir, first["state_version"])
    live = state_rows.where(~F.col("deleted")).groupBy("table_id").count().collect()
    assert {r.table_id: r["count"] for r in live} == {
        t: info["rows"] + info["type_conflicts"] for t, info in first["tables"].items()
    }


@pytest.mark.parametrize("apply", [delta_tables.merge_flagged, delta_tables.rewrite_flagged])
def test_a_merge_replaces_adds_and_deletes_by_flag_and_a_null_key_matches_no_row(spark, tmp_path, apply):
    """A changed row flagged true replaces its key's row or adds it, one flagged false deletes it (or, new, is left
    out), and a changed row whose key typed to NULL (held back) touches no row and is not added; by a MERGE and by a
    write of the whole table alike. (Whether keys match by `=` or `<=>` gives the same rows here: a stored key is
    never NULL, see delta_tables._same_key.)"""
    path = str(tmp_path / "t")
    schema = "id bigint, v string, _published boolean"
    delta_tables.write_whole(spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id bigint, v string"), path)
    night = [(2, "gone", False), (3, "C", True), (4, "new", True), (5, "held back", False), (None, "bad key", False)]
    version = apply(spark.createDataFrame(night, schema), path, ("id",), "_published")
    assert version == 1
    expected = spark.createDataFrame([(1, "a"), (3, "C"), (4, "new")], "id bigint, v string")
    assertDataFrameEqual(delta_tables.read_version(spark, path, version), expected)


def test_a_table_written_whole_with_its_changed_keys_keeps_its_files_and_adds_one(spark, tmp_path):
    """The stored rows are written back from the splits they are read in (here one per file); the changed rows,
    whatever partitions they come in, go to one new file, not one small file per partition, night after night;
    `table_detail` counts the files."""
    path = str(tmp_path / "t")
    stored = spark.range(0, 3000).select("id", F.col("id").cast("string").alias("v"))
    delta_tables.write_whole(stored.repartition(3), path)
    assert delta_tables.table_detail(spark, path)["numFiles"] == 3
    night = spark.range(0, 3000, 10).select("id", F.lit("night").alias("v"), (F.col("id") % 20 == 0).alias("_p"))
    version = delta_tables.rewrite_flagged(night.repartition(8), path, ("id",), "_p")
    assert delta_tables.table_detail(spark, path)["numFiles"] == 4
    rows = delta_tables.read_version(spark, path, version)
    assert (rows.count(), rows.where("v = 'night'").count()) == (3000 - 150, 150)  # 300 changed: 150 kept, 150 gone


def test_a_tables_merges_follow_the_deletion_vectors_option_each_time(spark, tmp_path):
    """On, a merge marks the rows it replaces; off again, the next merge rewrites the file that holds them (copying
    its other rows), and the table's protocol keeps allowing deletion vectors, as the option's doc says."""
    path = str(tmp_path / "t")
    delta_tables.write_whole(spark.range(0, 1000).select("id", F.col("id").cast("string").alias("v")).coalesce(1), path)

    def merge_night(ending: int, deletion_vectors: bool) -> tuple[int, int]:
        night = spark.range(ending, 1000, 10).select("id", F.lit("night").alias("v"), F.lit(True).alias("_published"))
        delta_tables.use_deletion_vectors(spark, path, deletion_vectors)
        delta_tables.merge_flagged(night, path, ("id",), "_published")
        metrics = DeltaTable(path).history(1)[0]["operationMetrics"]
        return int(metrics["numTargetDeletionVectorsAdded"]), int(metrics["numTargetRowsCopied"])

    assert merge_night(0, deletion_vectors=True) == (1, 0)
    assert merge_night(5, deletion_vectors=False) == (0, 800)  # 1,000 rows, 100 replaced before, 100 now
    assert "deletionVectors" in DeltaTable(path).protocol().reader_features
    by_spark = spark.read.format("delta").load(path)
    assert by_spark.where("v = 'night'").count() == 200
    assert by_spark.count() == 1000


def test_a_tables_newest_version_is_its_newest_commit_file_and_spark_agrees(spark, tmp_path):
    from delta import tables as delta_spark  # Delta's own API: its history names the newest commit

    path = str(tmp_path / "table")
    for version in range(12):  # Delta writes a checkpoint at version 10: the listing skips it and its companions
        assert delta_tables.write_whole(spark.range(version + 1), path) == version
    log = tmp_path / "table" / "_delta_log"
    assert {p.name for p in log.iterdir()} >= {"00000000000000000010.checkpoint.parquet", "_last_checkpoint"}
    assert (
        delta_tables.latest_version(path)
        == delta_spark.DeltaTable.forPath(spark, path).history(1).first().version
        == 11
    )
    (log / "00000000000000000012.json.tmp").write_text("")  # a commit being written is not one yet
    assert delta_tables.latest_version(path) == 11
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nothing'} is not a Delta table: .* holds no commit"):
        delta_tables.latest_version(tmp_path / "nothing")


@pytest.mark.parametrize("row_tracking", [False, True], ids=["by-delta-rs", "by-spark"])
def test_a_roll_back_makes_a_version_the_newest_content_again_whoever_writes_it(spark, tmp_path, caplog, row_tracking):
    """What a run committed after the published version goes: a merge that marked rows with deletion vectors and an
    added column. delta-rs writes the RESTORE for the tables this package writes; a table with a writer feature
    delta-rs does not write (row tracking, which a user's Spark defaults may turn on) is rolled back by Spark's."""
    path = str(tmp_path / "t")
    stored = spark.range(0, 100).select("id", F.col("id").cast("string").alias("v"))
    stored.coalesce(1).write.format("delta").option("delta.enableRowTracking", str(row_tracking).lower()).save(path)
    delta_tables.use_deletion_vectors(spark, path, True)
    published = delta_tables.latest_version(path)
    night = spark.range(0, 100, 10).select("id", F.lit("night").alias("v"), F.lit(True).alias("_published"))
    delta_tables.merge_flagged(night, path, ("id",), "_published")
    widened = spark.range(100, 105).select("id", F.lit("x").alias("v"), F.lit(1).alias("extra"))
    widened.write.format("delta").mode("append").option("mergeSchema", "true").save(path)

    with caplog.at_level("INFO", logger="cdcreplay.delta_tables"):
        assert delta_tables.roll_back_to(spark, path, published) is True
    assert delta_tables.roll_back_to(spark, path, delta_tables.latest_version(path)) is False  # nothing after it
    restore = DeltaTable(path).history(1)[0]
    assert restore["operation"] == "RESTORE"
    assert ("rolled back by Spark's RESTORE" in caplog.text) == row_tracking
    assertDataFrameEqual(spark.read.format("delta").load(path), stored)  # rows and columns of the published version
    # ... and the next night merges onto it as onto any version
    delta_tables.merge_flagged(night, path, ("id",), "_published")
    assert spark.read.format("delta").load(path).where("v = 'night'").count() == 10
