"""Step 1: split each table's snapshot rows into epochs (see the package's doc)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema
from cdcreplay.compaction import ORDER_FIELDS


def tag_epochs(events: DataFrame) -> DataFrame:
    """The events (a snapshot row archived twice once), plus ``_epoch_no``: a snapshot row's epoch (the greedy split
    described in the module docstring), NULL for any other event.

    A table whose snapshot rows never read a key twice has a single epoch, found with one narrow aggregation; only
    the tables that re-read keys are ranked (a table's rows are ordered in one task, so ranking is what does not
    scale).
    """
    is_snapshot = F.coalesce(F.col("op") == schema.OP_SNAPSHOT, F.lit(False))
    snapshots = events.filter(is_snapshot)
    rereading = [
        row.table_id
        for row in snapshots.groupBy("table_id", "key")
        .count()
        .where(F.col("count") > 1)
        .select("table_id")
        .distinct()
        .collect()
    ]
    reread = F.coalesce(F.col("table_id").isin(rereading), F.lit(False)) if rereading else F.lit(False)
    tagged = events.filter(~(is_snapshot & reread)).withColumn("_epoch_no", F.when(is_snapshot, F.lit(1)))
    if not rereading:
        return tagged
    # A snapshot row archived twice is read once: it must not open an epoch of its own.
    once = snapshots.filter(reread).dropDuplicates(["table_id", "key", "op", *ORDER_FIELDS])
    return tagged.unionByName(_split_epochs(once))


def _read_unit() -> Column:
    """What orders snapshot rows for the epoch split: their source position, rows of one position being one unit.

    A connector stamps every row of one snapshot run with the position the run started at (Debezium: the binlog
    file and offset, the LSN), so within a run the position orders nothing, and across a topic's partitions neither
    do the Kafka coordinates (offsets of two partitions are not comparable). Splitting such a run by partition and
    offset put rows of a resync before the row that opened its epoch, into the epoch before it. The rows of one
    position are therefore one unit, which an epoch boundary never cuts; rows without a position are ordered by
    their Kafka coordinates, the only order they have.
    """
    positioned = F.coalesce(F.size("position") > 0, F.lit(False))
    return F.struct(
        F.col("position"), *[F.when(~positioned, F.col(name)) for name in ORDER_FIELDS if name != "position"]
    )


def _split_epochs(snapshot_rows: DataFrame) -> DataFrame:
    """Snapshot rows of tables that re-read keys, with ``_epoch_no``: one small aggregation per epoch boundary
    (epochs are few); no row is collected to the driver."""
    spark = snapshot_rows.sparkSession
    ranked = (
        snapshot_rows.withColumn("_rn", F.dense_rank().over(Window.partitionBy("table_id").orderBy(_read_unit())))
        .withColumn("_prev_rn", F.lag("_rn").over(Window.partitionBy("table_id", "key").orderBy("_order")))
        .localCheckpoint(eager=True)
    )
    # ``_rn`` numbers the table's read units in order (see _read_unit). Only a unit holding a key that was read
    # before in the table can open an epoch. Unit r opens the epoch after the one starting at s when it is the first
    # unit after s holding a key whose previous read is at or after s. For the first epoch (s = 1) that is simply
    # the first unit with a re-read key.
    repeats = ranked.filter(F.col("_prev_rn").isNotNull()).select("table_id", "_rn", "_prev_rn")
    following = repeats.groupBy("table_id").agg(F.min("_rn").alias("_next")).collect()
    starts: dict[str, list[int]] = {}
    while following:
        current = {row.table_id: row._next for row in following}
        for table, start in current.items():
            starts.setdefault(table, [1]).append(start)
        current_df = spark.createDataFrame(sorted(current.items()), "table_id string, _start int")
        following = (
            repeats.join(F.broadcast(current_df), "table_id")
            .filter((F.col("_rn") > F.col("_start")) & (F.col("_prev_rn") >= F.col("_start")))
            .groupBy("table_id")
            .agg(F.min("_rn").alias("_next"))
            .collect()
        )
    bounds = [
        (table, epoch_no, start, table_starts[epoch_no] if epoch_no < len(table_starts) else None)
        for table, table_starts in sorted(starts.items())
        for epoch_no, start in enumerate(table_starts, start=1)
    ]
    bounds_df = spark.createDataFrame(bounds, "table_id string, _epoch_no int, _start int, _end int")
    joined = ranked.join(
        F.broadcast(bounds_df),
        (ranked.table_id == bounds_df.table_id)
        & (ranked._rn >= bounds_df._start)
        & (bounds_df._end.isNull() | (ranked._rn < bounds_df._end)),
        "left",
    )
    epoch_no = F.coalesce(bounds_df._epoch_no, F.lit(1)).alias("_epoch_no")
    return joined.select(*[ranked[c] for c in ranked.columns if c not in ("_rn", "_prev_rn")], epoch_no)
