"""The published tables and the state are Delta tables that any Delta reader reads: delta-rs (the `deltalake`
package, no Spark) reads every published table exactly as Spark does, as of the published version, after a full
rebuild and after a night merged onto it; each published version stays readable as one consistent set."""

from __future__ import annotations

from datetime import timedelta

from archive_helpers import pipeline_config
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.state_store import read_state
from cdcreplay.warehouse import PipelinePaths, published_rows, read_current, read_table
from cdcreplay_lab.simulator import build_sample_archive


def read_by_delta_rs(spark, paths: PipelinePaths, table_id: str, like):
    """The table as delta-rs reads it, as a Spark frame with the columns and types of ``like``."""
    rows = published_rows(paths, table_id)
    frame = spark.createDataFrame(rows) if rows.num_rows else spark.createDataFrame([], like.schema)
    return frame.select(*[F.col(name).cast(kind) for name, kind in like.dtypes])


def test_delta_rs_reads_every_published_table_as_spark_does(spark, tmp_path):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=1500, seed=7, days=2)
    config = pipeline_config(tmp_path, "sim", "debezium-json", tmp_path / "archive")
    paths = PipelinePaths(str(tmp_path / "warehouse"), "sim")
    first_night_end = (history.start + timedelta(days=1)).isoformat()
    assert replay_main(["--config", str(config), "--run-id", "n1", "--end", first_night_end]) == EXIT_OK
    first = read_current(paths)
    assert replay_main(["--config", str(config), "--run-id", "n2", "--start", first_night_end]) == EXIT_OK
    second = read_current(paths)

    assert sorted(second["tables"]) == sorted(history.tables)
    for table_id in second["tables"]:
        by_spark = read_table(spark, str(tmp_path / "warehouse"), "sim", table_id)
        assert by_spark.count() == len(history.final_state(table_id))
        assertDataFrameEqual(read_by_delta_rs(spark, paths, table_id, by_spark), by_spark)
        # The newest commit is the published one: a reader who ignores the pointer sees the same rows.
        newest = spark.read.format("delta").load(str(paths.table_dir(table_id)))
        assertDataFrameEqual(newest, by_spark)

    # The first night's version is still one consistent set: its tables and its state, as of their versions.
    for info in first["tables"].values():
        night_one = DeltaTable(str(paths.root / info["path"]), version=info["delta_version"])
        assert night_one.version() == info["delta_version"]
        assert night_one.to_pyarrow_dataset().to_table().num_rows == info["rows"]
    state_rows = read_state(spark, paths.state_dir, first["state_version"])
    live = state_rows.where(~F.col("deleted")).groupBy("table_id").count().collect()
    assert {r.table_id: r["count"] for r in live} == {
        t: info["rows"] + info["type_conflicts"] for t, info in first["tables"].items()
    }
