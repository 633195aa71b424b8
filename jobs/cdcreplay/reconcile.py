"""Reconcile snapshot loads against the state built from incremental changes.

A CDC source emits two kinds of row events: *snapshot* rows (a full read of the table: Debezium ``op=r``,
Canal/DTS/DRS ``INIT``, Qlik ``REFRESH``) and *incremental* changes (insert/update/delete, plus table-level
truncate). If the pipeline lost, duplicated or misapplied a change, the state built from the changes disagrees with
what a later snapshot read from the database. This module finds those disagreements. Everything here is
DataFrame -> DataFrame; only :func:`run_reconciliation` touches storage.

Order. Events are totally ordered by the struct ``(position, partition, offset, row_index)`` compared field by field
(``position`` is an array of decimals compared lexicographically; the Kafka coordinates only break ties). "order"
below always means that struct. A snapshot row archived twice is read once (exact duplicates: same table, key, op
and order). A duplicate of any other event changes nothing: either copy is the same latest event.

1. **Snapshot epochs.** The snapshot rows of a table, sorted by order, are split greedily into epochs: a new epoch
   starts at the first snapshot row whose key already occurred in the current epoch (a resync snapshot re-reads keys
   the initial one read). Epochs get ``epoch_no`` 1, 2, ... and their first/last order. A key occurs at most once
   per epoch, by construction.
2. **Incremental value.** For epoch E and its snapshot row for key k read at order p, the incremental value of k is
   the latest event for k (partial images merged onto the previous image by
   :func:`cdcreplay.compaction.latest_rows`) among all the table's rows that are *not snapshot rows of E* with
   order < p. Snapshot rows of earlier epochs count as state (they are what the table looked like then). The value
   is *live* unless that event is a delete or a truncate of the table lies after it and before p.
3. **Comparison.** Column by column over the columns both images carry (a column absent from one image's map was
   not carried by that message: not comparable, skipped), typed by ``column_types`` (snapshot side first) and
   compared null-safely: equal when the canonical texts are equal, or when both read back as the same typed value
   (``"12.5"`` and ``"12.50"`` are the same ``decimal(10,2)``). Types that cannot be cast from text compare as text.
4. **Statuses.** Snapshot row with a live incremental value: ``match`` or ``mismatch`` (with the differing columns
   and both values). Snapshot row without one: ``missing_in_incremental``. A key live in the incremental state as
   of E's last order (events with order < last) that E did not read: ``missing_in_snapshot``. Any non-match key
   with an insert/update/delete at an order within [first, last] of E -- or any non-match key at all when a truncate
   of the table lies in that window -- is ``in_flight`` instead: it changed while the snapshot was being taken, so
   the snapshot's copy and the change stream legitimately disagree about it. (Debezium, for one, stamps every
   snapshot row with the position where the snapshot started, so a row updated during the snapshot is read with
   its new value but ordered before the update.)
5. **Baseline.** The first epoch of a table with no non-snapshot event (insert/update/delete/truncate) before its
   first row is the baseline: there is nothing to compare it with. It is skipped and reported in the metrics with
   ``kind="baseline"`` and its row count. Later epochs, and a first epoch preceded by changes (e.g. the base state
   of an incremental run), are reconciled.

Diff table (:data:`DIFF_DDL`): one row per compared key and epoch, all statuses (users filter), with
``differing_columns`` (column, snapshot_value, incremental_value as canonical text, sorted by column) and the
provenance of both sides (topic, partition, offset, position as JSON text; ``incremental_op`` is the op of the
winning incremental event, or ``truncate`` when a truncate killed it -- its provenance is then the truncate's).

Metrics per (table_id, epoch_no): counts per status, ``snapshot_rows``, ``incremental_rows`` (keys whose
incremental value is live), first/last order, ``verdict`` ``pass`` when mismatch + missing_in_incremental +
missing_in_snapshot == 0 else ``fail`` (``baseline`` for skipped baseline epochs).

Implementation note: a table whose snapshot never reads a key twice has one epoch, found with one narrow
aggregation; the epochs of the other tables are found with window functions and a driver loop that runs one small
aggregation per epoch boundary (epochs are few). A table with one reconciled epoch and only complete images (the
common case: an initial load or one resync per run) is then reconciled from one sort of its events by key and
order: a read row's incremental value is the key's previous event, an unread key's is its last event before the
epoch's last read. The other tables take the general plan: the history is replicated per epoch and
:func:`cdcreplay.compaction.latest_rows` runs once, on a per-epoch scope of the table id; both plans feed the same
status and comparison step. Column comparison uses higher-order functions over the two maps, typed with
:func:`cdcreplay.value_types.typed_value`, for the rows whose two images differ (their key or value arrays).
Nothing collects changelog rows to the driver; only one row per epoch is. A run's base state is its history
(:class:`History`): where the epochs are found, its facts per table -- kept with the state in its patterns file --
stand in for its rows, so only the diff reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cdcreplay import schema
from cdcreplay.compaction import ORDER_FIELDS, event_order, latest_rows, partial_event
from cdcreplay.spark import vectorized_parquet_reads
from cdcreplay.state_store import read_patterns_ref, read_state_ref
from cdcreplay.storage import Location, local_folder

STATUS_MATCH = "match"
STATUS_MISMATCH = "mismatch"
STATUS_MISSING_IN_INCREMENTAL = "missing_in_incremental"
STATUS_MISSING_IN_SNAPSHOT = "missing_in_snapshot"
STATUS_IN_FLIGHT = "in_flight"
STATUSES = (STATUS_MATCH, STATUS_MISMATCH, STATUS_MISSING_IN_INCREMENTAL, STATUS_MISSING_IN_SNAPSHOT, STATUS_IN_FLIGHT)
FAILING_STATUSES = (STATUS_MISMATCH, STATUS_MISSING_IN_INCREMENTAL, STATUS_MISSING_IN_SNAPSHOT)

VERDICT_PASS = "pass"
VERDICT_FAIL = "fail"
VERDICT_BASELINE = "baseline"


DIFFERING_COLUMNS_DDL = "array<struct<column: string, snapshot_value: string, incremental_value: string>>"
DIFF_DDL = (
    "table_id string, epoch_no int, key string, status string, "
    f"differing_columns {DIFFERING_COLUMNS_DDL}, "
    "snapshot_topic string, snapshot_partition int, snapshot_offset bigint, snapshot_position string, "
    "incremental_op string, incremental_topic string, incremental_partition int, incremental_offset bigint, "
    "incremental_position string"
)
DIFF_COLUMNS = (
    "table_id",
    "epoch_no",
    "key",
    "status",
    "differing_columns",
    "snapshot_topic",
    "snapshot_partition",
    "snapshot_offset",
    "snapshot_position",
    "incremental_op",
    "incremental_topic",
    "incremental_partition",
    "incremental_offset",
    "incremental_position",
)

REPORT_SAMPLE_ROWS = 20

# Spark types whose canonical text is compared as the typed value ("12.5" = "12.50" as decimal(10,2), "1" = "true"
# as boolean); anything else (string, or a type that cannot be cast from text) is compared as text, which is exact
# for canonical text. A bare "decimal" is left out on purpose: Spark reads it as decimal(10,0) and would round.
_TYPED_COMPARISON = re.compile(
    r"^(boolean|tinyint|smallint|int|integer|bigint|long|float|real|double|date|timestamp|timestamp_ntz|"
    r"timestamp_ltz|binary|decimal\(\s*\d+\s*,\s*\d+\s*\))$"
)


@dataclass
class ReconcileResult:
    """The diff (cached: the metrics computed it; the caller writes it, then calls ``release``) and the metrics."""

    diff: DataFrame
    metrics: list[dict] = field(default_factory=list)
    one_pass_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_in_one_pass
    _cached: DataFrame | None = field(default=None, repr=False)

    def release(self) -> None:
        """Drop the cached diff once it has been written."""
        if self._cached is not None:
            self._cached.unpersist()


@dataclass
class ReconciliationPlan:
    """The diff as a plan not yet computed, and the epochs found on the way (one row each)."""

    diff: DataFrame
    epoch_rows: list = field(default_factory=list)
    one_pass_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_in_one_pass
    joined_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_of_reads_and_state

    def metrics(self, diff: DataFrame) -> list[dict]:
        """Metrics per epoch (module docstring), counted on ``diff``: this plan's diff, computed (cached or written).

        A key's incremental value is live exactly when its winning event is neither a delete nor emptied by a
        truncate, which the diff's ``incremental_op`` says (NULL: no event at all).
        """
        live = F.col("incremental_op").isNotNull() & ~F.col("incremental_op").isin(schema.OP_DELETE, schema.OP_TRUNCATE)
        counts = {
            (row.table_id, row.epoch_no): row.asDict()
            for row in diff.groupBy("table_id", "epoch_no")
            .agg(
                *[F.sum((F.col("status") == status).cast("long")).alias(status) for status in STATUSES],
                F.sum(live.cast("long")).alias("incremental_rows"),
            )
            .collect()
        }
        metrics = []
        for epoch in self.epoch_rows:
            row = counts.get((epoch.table_id, epoch._epoch_no), {})
            entry = {
                "table_id": epoch.table_id,
                "epoch_no": epoch._epoch_no,
                "kind": "baseline" if epoch._baseline else "reconciled",
                "first_order": epoch._first_text,
                "last_order": epoch._last_text,
                "snapshot_rows": int(epoch._rows),
                "incremental_rows": int(row.get("incremental_rows") or 0),
                **{status: int(row.get(status) or 0) for status in STATUSES},
            }
            if epoch._baseline:
                entry["verdict"] = VERDICT_BASELINE
            else:
                failing = sum(entry[status] for status in FAILING_STATUSES)
                entry["verdict"] = VERDICT_PASS if failing == 0 else VERDICT_FAIL
            metrics.append(entry)
        return metrics


@dataclass(frozen=True)
class History:
    """What came before a run's own changes: the published state it built on (earlier runs' compacted result), as
    events, and per table what the epochs need to know of those events (:func:`history_facts`): how many, their
    declared types, whether any image is partial, and their oldest or newest order. A table's epochs are decided by
    these facts and the run's changes, so the state's rows are read only by the diff itself."""

    events: DataFrame  # changelog contract
    facts: DataFrame  # one row per table: table_id, _h_rows, _h_types, _h_partial, _h_oldest, _h_newest


def _order_text(order: Column) -> Column:
    return F.to_json(order)


def _position_text(position: Column) -> Column:
    # array<decimal(38,0)> -> '[12,345]' (the text to_json gives, without its JSON writer per row); NULL stays NULL.
    return F.concat(F.lit("["), F.array_join(position.cast("array<string>"), ",", "null"), F.lit("]"))


# --------------------------------------------------------------------------------------------------------------------
# 1. Snapshot epochs
# --------------------------------------------------------------------------------------------------------------------


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


def _split_epochs(snapshot_rows: DataFrame) -> DataFrame:
    """Snapshot rows of tables that re-read keys, with ``_epoch_no``: one small aggregation per epoch boundary
    (epochs are few); no row is collected to the driver."""
    spark = snapshot_rows.sparkSession
    ranked = (
        snapshot_rows.withColumn("_rn", F.row_number().over(Window.partitionBy("table_id").orderBy("_order")))
        .withColumn("_prev_rn", F.lag("_rn").over(Window.partitionBy("table_id", "key").orderBy("_rn")))
        .localCheckpoint(eager=True)
    )
    # Only a row whose key was read before in the table can open an epoch. Row r opens the epoch after the one
    # starting at s when it is the first row after s whose key's previous read is at or after s. For the first
    # epoch (s = 1) that is simply the first re-read key of the table.
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


# --------------------------------------------------------------------------------------------------------------------
# 3. Column comparison
# --------------------------------------------------------------------------------------------------------------------


def _values_equal(snapshot_value: Column, incremental_value: Column, spark_type: Column, types: list[str]) -> Column:
    """Null-safe equality of two canonical texts of one column, typed by ``spark_type``."""
    from cdcreplay.value_types import typed_value

    text_equal = snapshot_value.eqNullSafe(incremental_value)
    typed = None
    for type_name in types:
        # typed_value reads one entry of a map image; wrap each text in a one-entry map to reuse the shared casting.
        left = typed_value(F.create_map(F.lit("v"), snapshot_value), "v", type_name)
        right = typed_value(F.create_map(F.lit("v"), incremental_value), "v", type_name)
        same = left.isNotNull() & right.isNotNull() & (left == right)
        typed = F.when(spark_type == type_name, same) if typed is None else typed.when(spark_type == type_name, same)
    if typed is None:
        return text_equal
    return text_equal | F.coalesce(typed.otherwise(F.lit(False)), F.lit(False))


def _comparable_types(declared: list[str]) -> list[str]:
    """The declared types (a handful), normalized, that have a typed comparison."""
    normalized = {t.strip().lower() for t in declared if t}
    return sorted(t for t in normalized if _TYPED_COMPARISON.match(t))


def _declared_types() -> Column:
    """Aggregate: the distinct types declared in ``column_types`` of a group of rows."""
    return F.array_distinct(F.flatten(F.collect_set(F.map_values("column_types"))))


def _any_partial() -> Column:
    """Aggregate: whether any row of a group carries a partial image."""
    return F.max(F.coalesce(partial_event(), F.lit(False)))


# --------------------------------------------------------------------------------------------------------------------
# 2-4. All reconciled epochs in one pass
# --------------------------------------------------------------------------------------------------------------------

# latest_rows groups by (table_id, key). Each reconciled epoch needs its own "latest as of" over the same history,
# so the history is replicated per epoch and the table id replaced by a scope "<table_id> NUL <epoch_no>" for the call.
_SCOPE_SEPARATOR = "\u0000"
_SCOPE = ["table_id", "_e"]
_SCOPED_KEY = ["table_id", "_e", "key"]


def _empty_differences() -> Column:
    return F.from_json(F.lit("[]"), DIFFERING_COLUMNS_DDL)


def _differing_columns(types: list[str]) -> Column:
    """The columns both images carry whose values differ, as sorted (column, snapshot_value, incremental_value)."""
    snapshot, incremental = F.col("_s_after"), F.col("_i_after")

    def entry(column: Column) -> Column:
        declared = F.coalesce(F.col("_s_types")[column], F.col("_i_types")[column])
        return F.struct(
            column.alias("column"),
            snapshot[column].alias("snapshot_value"),
            incremental[column].alias("incremental_value"),
            F.lower(F.trim(declared)).alias("type"),
        )

    def differs(item: Column) -> Column:
        # A column absent from the incremental image was not carried by its message: not comparable.
        carried = F.map_contains_key(incremental, item["column"])
        return carried & ~_values_equal(item["snapshot_value"], item["incremental_value"], item["type"], types)

    candidates = F.filter(F.transform(F.map_keys(snapshot), entry), differs)
    differing = F.array_sort(
        F.transform(
            candidates,
            lambda item: F.struct(
                item["column"].alias("column"),
                item["snapshot_value"].alias("snapshot_value"),
                item["incremental_value"].alias("incremental_value"),
            ),
        )
    ).cast(DIFFERING_COLUMNS_DDL)
    # Most compared rows match: two images with the same columns in the same order and the same values have no
    # differing column. Comparing their key and value arrays is compiled code, where the per-column comparison above
    # is interpreted (and comparing their JSON texts took 20x as long as the arrays, at 5M pairs).
    same_image = (F.map_keys(snapshot) == F.map_keys(incremental)) & F.map_values(snapshot).eqNullSafe(
        F.map_values(incremental)
    )
    return F.when(same_image, _empty_differences()).otherwise(differing)


def _epoch_columns(epochs: DataFrame) -> DataFrame:
    """The reconciled epochs, with the columns both plans below need."""
    return epochs.filter(~F.col("_baseline")).select(
        "table_id",
        F.col("_epoch_no").alias("_e"),
        "_first",
        "_last",
        F.concat_ws(_SCOPE_SEPARATOR, F.col("table_id"), F.col("_epoch_no").cast("string")).alias("_scope"),
        # A truncate while the snapshot was being read makes every non-matching key of the epoch in-flight.
        F.exists("_truncates", lambda t: t["order"].between(F.col("_first"), F.col("_last"))).alias(
            "_truncated_in_window"
        ),
        "_truncates",
    )


def _snapshot_side(order: Column, event: Column | None = None) -> list[Column]:
    """The snapshot row's image, types, order and provenance; ``event`` NULL (a when-condition) leaves them NULL."""

    def pick(column: str) -> Column:
        return F.col(column) if event is None else F.when(event, F.col(column))

    return [
        pick("after").alias("_s_after"),
        pick("column_types").alias("_s_types"),
        (order if event is None else F.when(event, order)).alias("_s_order"),
        pick("topic").alias("snapshot_topic"),
        pick("partition").alias("snapshot_partition"),
        pick("offset").alias("snapshot_offset"),
        _position_text(order["position"] if event is None else F.when(event, order["position"])).alias(
            "snapshot_position"
        ),
    ]


def _incremental_side(event: Column) -> list[Column]:
    """The winning incremental event's image, types, op, order and provenance, from a struct of changelog fields."""
    return [
        event["after"].alias("_i_after"),
        event["column_types"].alias("_i_types"),
        (event["op"] == schema.OP_DELETE).alias("_i_deleted"),
        event["_order"].alias("_i_order"),
        event["op"].alias("_i_op"),
        event["topic"].alias("_i_topic"),
        event["partition"].alias("_i_partition"),
        event["offset"].alias("_i_offset"),
        _position_text(event["_order"]["position"]).alias("_i_position"),
    ]


_EVENT_FIELDS = ("after", "column_types", "op", "_order", "topic", "partition", "offset")
_EPOCH_FIELDS = ("_last", "_truncates", "_truncated_in_window")
# Rows per task of the one-pass sort: about 100 MB of events, so two tasks sort in memory even with a 2 GB driver
# (sorting 10M events in 8 tasks spilled 7.5 GB to disk).
ROWS_PER_SORT_PARTITION = 200_000
# The key leads the sort: Spark compares rows first by an 8-byte prefix of the leading column, and the table id is the
# same for most rows of a task, so leading with it sent nearly every comparison to the full row comparator.
_SORT_KEY = ("key", "table_id")


def _pairs_in_one_pass(tagged: DataFrame, epoch: DataFrame, events_count: int) -> DataFrame:
    """Snapshot/incremental pairs of tables with one reconciled epoch and no partial image, from one sort by key.

    In such a table a key is read at most once by the epoch E, so the incremental value of a read row -- the latest
    event of the key before it that is not a read of E -- is simply the key's event right before it (a read of an
    earlier epoch included). A key E did not read is compared as of E's last read: its last event before that.
    Which keys changed while E was being read is one more aggregate over the key's events. ``events_count``: how
    many events these tables have (it sizes the sort).
    """
    # What the window needs of the epoch is settled per event before the sort, so only the event itself is sorted;
    # the epoch's own columns join the rows that come out (one per key).
    events = (
        tagged.filter(F.col("op").isin(*schema.ROW_OPS) & F.col("key").isNotNull())
        .join(epoch.select("table_id", "_e", "_first", "_last"), "table_id")
        .select(
            "table_id",
            "key",
            *_EVENT_FIELDS,
            F.coalesce(F.col("_epoch_no") == F.col("_e"), F.lit(False)).alias("_read"),
            (F.col("_order") < F.col("_last")).alias("_before_last"),
            (
                F.col("_epoch_no").isNull() & (F.col("_order") >= F.col("_first")) & (F.col("_order") < F.col("_last"))
            ).alias("_changed_in_window"),
        )
        .repartition(_sort_partitions(tagged, events_count), *_SORT_KEY)
    )
    by_order = Window.partitionBy(*_SORT_KEY).orderBy("_order")
    whole_key = by_order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = events.select(
        "*",
        F.lag(F.struct(*_EVENT_FIELDS)).over(by_order).alias("_previous"),
        F.lead("_before_last").over(by_order).alias("_next_before_last"),
        F.max("_read").over(whole_key).alias("_key_read"),
        F.max("_changed_in_window").over(whole_key).alias("_touched"),
    )
    # Events of a key come in order, so the last one before E's last read is the one whose successor is not.
    last_before_end = (
        ~F.col("_key_read") & F.col("_before_last") & ~F.coalesce(F.col("_next_before_last"), F.lit(False))
    )
    incremental = F.when(F.col("_read"), F.col("_previous")).otherwise(F.struct(*_EVENT_FIELDS))
    pairs = ranked.filter(F.col("_read") | last_before_end).select(
        "table_id",
        "key",
        *_snapshot_side(F.col("_order"), F.col("_read")),
        *_incremental_side(incremental),
        "_touched",
    )
    return pairs.join(epoch.select("table_id", "_e", *_EPOCH_FIELDS), "table_id")


def _pairs_of_reads_and_state(reads: DataFrame, state: DataFrame, epoch: DataFrame) -> DataFrame:
    """Snapshot/incremental pairs of tables whose run holds nothing but the reads of one epoch (no change, no
    truncate), against the state the run built on: a resync, or a nightly snapshot checked against the tables.

    Such a key has at most one read and at most one state row (the state keeps one row per key), so what
    :func:`_pairs_in_one_pass` finds by sorting each key's events -- a read's previous event, an unread key's last
    event before the epoch's last read, whether an event lies in the epoch's window -- is a full join of the reads
    with the state rows on the key: the images go through one join instead of a sort and window functions over
    every event (5M reads against 5M state rows, into Spark's noop sink: 15.6 s against 24 s). ``state``: the
    history's events of these tables.
    """
    on = list(_SORT_KEY)
    read_rows = reads.filter(F.col("key").isNotNull()).select(*on, *_EVENT_FIELDS, F.lit(True).alias("_read"))
    state_rows = state.filter(F.col("key").isNotNull()).select(*on, F.struct(*_EVENT_FIELDS).alias("_state"))
    # The join's own shuffle, which adaptive execution sizes by bytes. (Both sides repartitioned to a number first:
    # Spark 4.2 planned them with its 200 shuffle partitions whatever the number, 200 tasks each writing a diff file.)
    joined = read_rows.join(state_rows, on, "full").join(epoch.select("table_id", "_first", "_last"), "table_id")
    read = F.coalesce(F.col("_read"), F.lit(False))
    state_order = F.col("_state._order")
    # A read's incremental value is the state row when that came before the read; an unread key is compared as of
    # the epoch's last read; a state row inside the epoch's window changed the key while the snapshot was read.
    incremental = F.when(read, F.when(state_order < F.col("_order"), F.col("_state"))).otherwise(F.col("_state"))
    touched = F.coalesce((state_order >= F.col("_first")) & (state_order < F.col("_last")), F.lit(False))
    pairs = joined.filter(read | (state_order < F.col("_last"))).select(
        "table_id",
        "key",
        *_snapshot_side(F.col("_order"), read),
        *_incremental_side(incremental),
        touched.alias("_touched"),
    )
    return pairs.join(epoch.select("table_id", "_e", *_EPOCH_FIELDS), "table_id")


def _sort_partitions(df: DataFrame, events_count: int) -> int:
    """Partitions of the one-pass sort by key over ``events_count`` events: ROWS_PER_SORT_PARTITION each, and at
    least one per core. (Not Spark's 200 shuffle partitions: a repartition to a number is never coalesced, and a small
    run's sort would be 200 tasks of a few rows.)"""
    return max(df.sparkSession.sparkContext.defaultParallelism, -(-events_count // ROWS_PER_SORT_PARTITION))


def _pairs_by_scope(tagged: DataFrame, epoch: DataFrame, partial_images: bool) -> DataFrame:
    """Snapshot/incremental pairs of any epochs: the history is replicated per epoch and compacted per scope.
    ``partial_images``: whether any event of ``tagged`` has a partial image (the history's images then need
    completing)."""
    snapshot = tagged.join(epoch, (tagged.table_id == epoch.table_id) & (tagged._epoch_no == epoch._e)).select(
        tagged.table_id, epoch._e, tagged.key, *_snapshot_side(tagged._order)
    )

    # Everything but the epoch's own snapshot rows is history: changes, base state and other epochs' reads (those
    # of later epochs are cut off by the order). A key read by the snapshot is compared as of its own read
    # (order < p); any other key as of the epoch's last read (order < last: the last read is a snapshot row of the
    # epoch, never an incremental event).
    history = (
        tagged.filter((F.col("op") != schema.OP_TRUNCATE) & F.col("key").isNotNull())
        .join(epoch.drop("_truncates", "_truncated_in_window"), "table_id")
        .filter(F.col("_epoch_no").isNull() | (F.col("_epoch_no") != F.col("_e")))
        .filter(F.col("_order") < F.col("_last"))
        .join(snapshot.select(*_SCOPED_KEY, "_s_order"), _SCOPED_KEY, "left")
        .withColumn("_cutoff", F.coalesce(F.col("_s_order"), F.col("_last")))
    )
    # Keys changed by the stream while the snapshot was being read ([first, last] of the epoch): their snapshot copy
    # and the change stream may legitimately disagree.
    touched_keys = (
        history.filter(F.col("_epoch_no").isNull() & F.col("_order").between(F.col("_first"), F.col("_last")))
        .select(*_SCOPED_KEY, F.lit(True).alias("_touched"))
        .distinct()
    )
    scoped = history.filter(F.col("_order") < F.col("_cutoff")).select(
        *[F.col("_scope").alias("table_id") if c == "table_id" else F.col(c) for c in schema.CHANGELOG_COLUMNS]
    )
    latest = (
        latest_rows(scoped, partial_images).withColumnRenamed("table_id", "_scope").withColumn("_order", event_order())
    )
    incremental = latest.join(epoch.select("_scope", "table_id", "_e"), "_scope").select(
        *_SCOPED_KEY, *_incremental_side(F.struct(*_EVENT_FIELDS))
    )
    return (
        snapshot.join(incremental, _SCOPED_KEY, "full")
        .join(epoch.select("table_id", "_e", *_EPOCH_FIELDS), _SCOPE)
        .join(touched_keys, _SCOPED_KEY, "left")
    )


def _diff_rows(pairs: DataFrame, types: list[str], truncates: bool) -> DataFrame:
    """Diff rows from snapshot/incremental pairs: one row per key and epoch with a snapshot read or a live
    incremental value. ``pairs`` has the columns of :func:`_snapshot_side` and :func:`_incremental_side`,
    ``_touched``, and the epoch's ``_last``, ``_truncates`` and ``_truncated_in_window``. ``truncates``: whether any
    of the epochs has a truncate (without, no key is emptied by one, and no row needs to look)."""
    pairs = pairs.withColumn("_cutoff", F.coalesce(F.col("_s_order"), F.col("_last"))).withColumn(
        # The latest truncate after the key's latest event and before the cutoff empties the key.
        "_truncate",
        F.array_max(
            F.filter(
                "_truncates",
                lambda t: (t["order"] > F.col("_i_order")) & (t["order"] < F.col("_cutoff")),
            )
        )
        if truncates
        else F.lit(None).cast(pairs.schema["_truncates"].dataType.elementType),
    )
    killed = F.col("_truncate").isNotNull()
    live = F.col("_i_order").isNotNull() & ~F.coalesce(F.col("_i_deleted"), F.lit(False)) & ~killed
    in_snapshot = F.col("_s_order").isNotNull()
    pairs = pairs.withColumn("_i_live", live).filter(in_snapshot | F.col("_i_live"))

    has_diffs = F.size("_diffs") > 0
    plain_status = (
        F.when(~in_snapshot, F.lit(STATUS_MISSING_IN_SNAPSHOT))
        .when(~F.col("_i_live"), F.lit(STATUS_MISSING_IN_INCREMENTAL))
        .when(has_diffs, F.lit(STATUS_MISMATCH))
        .otherwise(F.lit(STATUS_MATCH))
    )
    changed_during_snapshot = F.coalesce(F.col("_touched"), F.lit(False)) | F.col("_truncated_in_window")

    def incremental_side(field: str) -> Column:
        # Provenance of the incremental value: its winning event, or the truncate that emptied the key.
        return F.when(killed, F.col(f"_truncate.{field}")).otherwise(F.col(f"_i_{field}"))

    return (
        pairs.withColumn(
            "_diffs",
            F.when(in_snapshot & F.col("_i_live"), _differing_columns(types)).otherwise(_empty_differences()),
        )
        .withColumn("_plain_status", plain_status)
        .select(
            "table_id",
            F.col("_e").cast("int").alias("epoch_no"),
            "key",
            F.when((F.col("_plain_status") != STATUS_MATCH) & changed_during_snapshot, F.lit(STATUS_IN_FLIGHT))
            .otherwise(F.col("_plain_status"))
            .alias("status"),
            F.col("_diffs").alias("differing_columns"),
            "snapshot_topic",
            "snapshot_partition",
            "snapshot_offset",
            "snapshot_position",
            F.when(killed, F.lit(schema.OP_TRUNCATE)).otherwise(F.col("_i_op")).alias("incremental_op"),
            incremental_side("topic").alias("incremental_topic"),
            incremental_side("partition").alias("incremental_partition"),
            incremental_side("offset").alias("incremental_offset"),
            incremental_side("position").alias("incremental_position"),
        )
    )


@dataclass
class _Paths:
    """Which plan computes each reconciled table's pairs (see :func:`_reconcile_epochs`)."""

    joined: list[str] = field(default_factory=list)  # _pairs_of_reads_and_state
    one_pass: list[str] = field(default_factory=list)  # _pairs_in_one_pass
    by_scope: list[str] = field(default_factory=list)  # _pairs_by_scope


def _paths(epoch_rows: list, history: bool, one_pass: bool) -> _Paths:
    """Tables with one reconciled epoch and no partial image take one sort by key (unless ``one_pass`` is False);
    of those, the ones whose run holds nothing but that epoch's reads are joined with their state instead (with a
    ``history``). Every other table takes the general plan."""
    reconciled = [row for row in epoch_rows if not row._baseline]
    paths = _Paths()
    for table in sorted({row.table_id for row in reconciled}):
        rows = [row for row in epoch_rows if row.table_id == table]
        if not one_pass or sum(not row._baseline for row in rows) != 1 or any(row._partial for row in rows):
            paths.by_scope.append(table)
        elif history and len(rows) == 1 and not rows[0]._changed_in_run:
            paths.joined.append(table)
        else:
            paths.one_pass.append(table)
    return paths


def _reconcile_epochs(
    tagged: DataFrame,
    history_events: DataFrame | None,
    epoch_rows: list,
    epochs: DataFrame,
    events_per_table: dict[str, int],
    one_pass: bool,
) -> tuple[DataFrame, _Paths]:
    """Diff rows of every epoch that is not a baseline, and which plan took each table (:func:`_paths`).
    ``tagged``: the run's events; ``history_events``: those of the state it built on (None without)."""
    reconciled = [row for row in epoch_rows if not row._baseline]
    types = _comparable_types([t for row in reconciled for t in row._types])
    paths = _paths(epoch_rows, history_events is not None, one_pass)
    # The history's events are plain state: never a snapshot read of an epoch.
    every_event = tagged if history_events is None else history_events.unionByName(tagged)

    def epochs_of(tables: list[str]) -> DataFrame:
        return F.broadcast(_epoch_columns(epochs).filter(F.col("table_id").isin(tables)))

    def events_of(tables: list[str]) -> int:
        return sum(events_per_table[table] for table in tables)

    parts = []
    if paths.joined:
        of_tables = F.col("table_id").isin(paths.joined)
        reads, state = tagged.filter(of_tables), history_events.filter(of_tables)
        parts.append(_pairs_of_reads_and_state(reads, state, epochs_of(paths.joined)))
    if paths.one_pass:
        parts.append(_pairs_in_one_pass(every_event, epochs_of(paths.one_pass), events_of(paths.one_pass)))
    if paths.by_scope:
        partial_images = any(row._partial for row in epoch_rows if row.table_id in paths.by_scope)
        parts.append(_pairs_by_scope(every_event, epochs_of(paths.by_scope), partial_images))
    pairs = reduce(DataFrame.unionByName, parts)
    return _diff_rows(pairs, types, truncates=any(row._truncates for row in reconciled)), paths


# --------------------------------------------------------------------------------------------------------------------
# History: the base state a run built on
# --------------------------------------------------------------------------------------------------------------------


def history_facts(events: DataFrame) -> DataFrame:
    """Per table of ``events`` (changelog contract): what the epochs need of them (see :class:`History`), from one
    aggregation over all of them. Their oldest order is exact; the newest is left NULL."""
    prepared = prepare_changelog(events)
    return prepared.groupBy("table_id").agg(
        F.count(F.lit(1)).alias("_h_rows"),
        _declared_types().alias("_h_types"),
        _any_partial().alias("_h_partial"),
        F.min("_order").alias("_h_oldest"),
        F.lit(None).cast(prepared.schema["_order"].dataType).alias("_h_newest"),
    )


def history_facts_from_patterns(patterns: DataFrame) -> DataFrame:
    """The same facts from a state's kept patterns (:func:`cdcreplay.tables.state_patterns`), read from a small
    file instead of the state's rows.

    Patterns keep the newest order of each live pattern, not the oldest: the oldest is left NULL, and
    :func:`_settled_facts` finds it where it decides a baseline. The types are those of the live rows: a
    tombstone's image is never compared.
    """
    live = ~F.col("deleted")
    declared_columns = F.transform("declared", lambda entry: entry["key"])
    partial = F.size(F.array_except(declared_columns, F.col("carried"))) > 0
    return patterns.groupBy("table_id").agg(
        F.sum("count").cast("long").alias("_h_rows"),
        F.array_distinct(
            F.flatten(F.collect_list(F.when(live, F.transform("declared", lambda entry: entry["value"]))))
        ).alias("_h_types"),
        F.coalesce(F.max(live & F.coalesce(partial, F.lit(False))), F.lit(False)).alias("_h_partial"),
        F.lit(None).cast(patterns.schema["newest"].dataType).alias("_h_oldest"),
        F.max(F.when(live, F.col("newest"))).alias("_h_newest"),
    )


def _settled_facts(history: History | None, snapshot_groups: DataFrame, changelog_df: DataFrame) -> DataFrame:
    """The history's facts (none without history), each table's oldest order found where only it can tell whether
    the table's first epoch is a baseline: the history has rows, no oldest is known, and the newest does not already
    lie at or before the epoch's first read (a rare case: a history newer than the run's snapshot). Those tables'
    history rows are aggregated; no other history row is read."""
    if history is None:
        return history_facts(changelog_df).limit(0)  # the facts' columns, no row (Spark runs no job for it)
    spark = snapshot_groups.sparkSession
    facts = spark.createDataFrame(history.facts.collect(), history.facts.schema)  # small: one row per table
    first_reads = snapshot_groups.filter(F.col("_epoch_no") == 1).select("table_id", "_first")
    undecided = [
        row.table_id
        for row in facts.join(first_reads, "table_id")
        .where(
            (F.col("_h_rows") > 0)
            & F.col("_h_oldest").isNull()
            & (F.col("_h_newest").isNull() | (F.col("_h_newest") > F.col("_first")))
        )
        .select("table_id")
        .collect()
    ]
    if not undecided:
        return facts
    oldest = (
        prepare_changelog(history.events.where(F.col("table_id").isin(undecided)))
        .groupBy("table_id")
        .agg(F.min("_order").alias("_found_oldest"))
    )
    settled = facts.join(oldest, "table_id", "left").select(
        *[F.coalesce("_found_oldest", "_h_oldest").alias(c) if c == "_h_oldest" else c for c in facts.columns]
    )
    return spark.createDataFrame(settled.collect(), facts.schema)


# --------------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------------


def prepare_changelog(changelog_df: DataFrame) -> DataFrame:
    """The changelog columns in contract order and types, plus ``_order``."""
    contract = schema.struct_type(schema.CHANGELOG_DDL)
    df = changelog_df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in contract.fields])
    return df.withColumn("_order", event_order())


def plan_reconciliation(
    changelog_df: DataFrame, *, history: History | None = None, one_pass: bool = True
) -> ReconciliationPlan:
    """The diff of every snapshot epoch of every table in ``changelog_df`` (changelog contract), as a plan: finding
    the epochs runs a few aggregations; the diff itself is computed by whatever reads it. See :func:`reconcile`.

    ``history``: the events before the run's own (its base state), which are never snapshot reads of an epoch. Its
    facts stand in for them where the epochs are found, so only ``changelog_df`` is aggregated.
    """
    spark = changelog_df.sparkSession
    # Not checkpointed: the events are read three times (epochs, their bounds, the diff), and each read of the
    # Parquet input takes only the columns it needs; materializing all of them cost more than it saved.
    events = prepare_changelog(changelog_df)
    tagged = tag_epochs(events)  # snapshot rows tagged with their epoch

    # One aggregation over all events per table and epoch (_epoch_no NULL: the table's other events), computed once.
    groups = (
        tagged.groupBy("table_id", "_epoch_no")
        .agg(
            F.min("_order").alias("_first"),
            F.max("_order").alias("_last"),
            F.count("*").alias("_rows"),
            _declared_types().alias("_group_types"),
            _any_partial().alias("_group_partial"),
            # Truncates are few: per table, their orders and provenance, carried along with the epochs.
            F.collect_list(
                F.when(
                    F.col("op") == schema.OP_TRUNCATE,
                    F.struct(
                        F.col("_order").alias("order"),
                        F.col("topic").alias("topic"),
                        F.col("partition").alias("partition"),
                        F.col("offset").alias("offset"),
                        _position_text(F.col("position")).alias("position"),
                    ),
                )
            ).alias("_truncates"),
        )
        .localCheckpoint(eager=True)
    )
    first_change = groups.filter(F.col("_epoch_no").isNull()).select(
        "table_id",
        F.col("_first").alias("_first_change"),
        F.col("_group_types").alias("_change_types"),
        F.col("_group_partial").alias("_change_partial"),
        "_truncates",
    )
    snapshot_groups = groups.filter(F.col("_epoch_no").isNotNull()).drop("_truncates")  # snapshot rows: no truncates
    facts = _settled_facts(history, snapshot_groups, changelog_df)
    history_before_first = (F.coalesce(F.col("_h_rows"), F.lit(0)) > 0) & (
        F.coalesce(F.col("_h_oldest"), F.col("_h_newest")) <= F.col("_first")
    )
    epochs_query = (
        snapshot_groups.join(first_change, "table_id", "left")
        .join(F.broadcast(facts), "table_id", "left")
        .select(
            "table_id",
            "_epoch_no",
            "_first",
            "_last",
            "_rows",
            # The baseline: a table's first epoch with no change (of any key) before its first read, neither in the
            # run nor in its history.
            (
                (F.col("_epoch_no") == 1)
                & (F.col("_first_change").isNull() | (F.col("_first_change") > F.col("_first")))
                & ~history_before_first
            ).alias("_baseline"),
            _order_text(F.col("_first")).alias("_first_text"),
            _order_text(F.col("_last")).alias("_last_text"),
            F.concat(
                F.col("_group_types"),
                F.coalesce(F.col("_change_types"), F.array()),
                F.coalesce(F.col("_h_types"), F.array()),
            ).alias("_types"),
            F.coalesce(F.col("_truncates"), F.array()).alias("_truncates"),
            (
                F.col("_group_partial")
                | F.coalesce(F.col("_change_partial"), F.lit(False))
                | F.coalesce(F.col("_h_partial"), F.lit(False))
            ).alias("_partial"),
            # Whether the run has any event of the table besides snapshot reads (a change or a truncate).
            F.col("_first_change").isNotNull().alias("_changed_in_run"),
        )
        .orderBy("table_id", "_epoch_no")
    )
    epoch_rows = epochs_query.collect()  # one row per epoch

    epochs = spark.createDataFrame(epoch_rows, epochs_query.schema).drop("_types")
    if any(not row._baseline for row in epoch_rows):
        events_per_table: dict[str, int] = {}
        counted = groups.groupBy("table_id").agg(F.sum("_rows").alias("events")).collect()
        for row in [*counted, *facts.select("table_id", F.col("_h_rows").alias("events")).collect()]:
            events_per_table[row.table_id] = events_per_table.get(row.table_id, 0) + int(row.events)
        history_events = None
        if history is not None:
            history_events = prepare_changelog(history.events).withColumn("_epoch_no", F.lit(None).cast("int"))
        diff, paths = _reconcile_epochs(tagged, history_events, epoch_rows, epochs, events_per_table, one_pass)
        return ReconciliationPlan(diff.select(*DIFF_COLUMNS), epoch_rows, paths.one_pass, paths.joined)
    return ReconciliationPlan(spark.createDataFrame([], DIFF_DDL), epoch_rows)


def reconcile(changelog_df: DataFrame, *, one_pass: bool = True) -> ReconcileResult:
    """Reconcile every snapshot epoch of every table in ``changelog_df`` (changelog contract). See module docstring.

    ``one_pass`` False computes every table with the general per-epoch plan; the tests check both plans agree.
    """
    plan = plan_reconciliation(changelog_df, one_pass=one_pass)
    cached = plan.diff.persist(StorageLevel.MEMORY_AND_DISK)
    return ReconcileResult(
        diff=cached, metrics=plan.metrics(cached), one_pass_tables=plan.one_pass_tables, _cached=cached
    )


def has_snapshot_rows(changelog_df: DataFrame) -> bool:
    """Whether any event of ``changelog_df`` is a snapshot read (a scan of its ``op`` column, stopping at the first)."""
    return not changelog_df.where(F.col("op") == schema.OP_SNAPSHOT).isEmpty()


def _contract_columns() -> list[Column]:
    return [F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.struct_type(schema.CHANGELOG_DDL).fields]


def read_changelog(spark: SparkSession, changelog_path: str | list[str]) -> DataFrame:
    """The run's changelog Parquet."""
    paths = [changelog_path] if isinstance(changelog_path, str | Path | Location) else list(changelog_path)
    return spark.read.parquet(*[str(p) for p in paths]).select(*_contract_columns())


def read_history(spark: SparkSession, base_state: dict) -> History:
    """The base state (earlier history; ``base_state`` as ``state_store.state_ref`` names it) relabelled as
    incremental events, with its facts: from the patterns kept with the state (a small file), or an aggregation of
    its rows for a state written without them."""
    base = read_state_ref(spark, base_state)
    # The base state is the compacted result of earlier runs: one row per key, tombstones flagged `deleted`.
    # A row whose winning event was a snapshot read is still plain state here, not part of any epoch of this run:
    # relabel it as an insert (its image is complete) and tombstones as deletes.
    deleted = F.coalesce(F.col("deleted"), F.lit(False)) if "deleted" in base.columns else F.lit(False)
    events = base.withColumn(
        "op",
        F.when(deleted, F.lit(schema.OP_DELETE))
        .when(F.col("op") == schema.OP_SNAPSHOT, F.lit(schema.OP_INSERT))
        .otherwise(F.col("op")),
    ).select(*_contract_columns())
    patterns = read_patterns_ref(spark, base_state)
    return History(events, history_facts_from_patterns(patterns) if patterns is not None else history_facts(events))


def _failing_counts(entry: dict) -> str:
    parts = [f"{entry[s]} {s}" for s in (*FAILING_STATUSES, STATUS_IN_FLIGHT) if entry.get(s)]
    return ", ".join(parts) or "no differences"


def _markdown_cell(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _render_report(summary: dict, metrics: list[dict], sample: list[dict], suite: dict) -> str:
    lines = [
        "# Reconciliation report",
        "",
        f"**Verdict: {summary['verdict'].upper()}**  ",
        f"Generated {summary['generated_at']}.",
        "",
        summary["headline"],
        "",
        "## Counts per table and snapshot epoch",
        "",
        "| table | epoch | kind | verdict | snapshot rows | incremental rows | match | mismatch "
        "| missing_in_incremental | missing_in_snapshot | in_flight |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in metrics:
        lines.append(
            f"| {_markdown_cell(m['table_id'])} | {m['epoch_no']} | {m['kind']} | {m['verdict']} "
            f"| {m['snapshot_rows']} | {m['incremental_rows']} | {m['match']} | {m['mismatch']} "
            f"| {m['missing_in_incremental']} | {m['missing_in_snapshot']} | {m['in_flight']} |"
        )
    if not metrics:
        lines.append("| (no snapshot epochs in this run) | | | | | | | | | | |")
    lines += ["", f"## First {REPORT_SAMPLE_ROWS} non-matching rows", ""]
    if sample:
        lines += [
            "| table | epoch | key | status | differing columns (snapshot / incremental) | snapshot at "
            "| incremental at |",
            "|---|---:|---|---|---|---|---|",
        ]
        for row in sample:
            diffs = "; ".join(
                f"{d['column']}: {d['snapshot_value']!r} / {d['incremental_value']!r}"
                for d in row["differing_columns"] or []
            )
            snap = (
                f"{row['snapshot_topic']}[{row['snapshot_partition']}]@{row['snapshot_offset']}"
                if row["snapshot_topic"] is not None or row["snapshot_offset"] is not None
                else ""
            )
            inc = (
                f"{row['incremental_op']} {row['incremental_topic']}[{row['incremental_partition']}]"
                f"@{row['incremental_offset']}"
                if row["incremental_op"] is not None
                else ""
            )
            lines.append(
                f"| {_markdown_cell(row['table_id'])} | {row['epoch_no']} | {_markdown_cell(row['key'])} "
                f"| {row['status']} | {_markdown_cell(diffs)} | {_markdown_cell(snap)} | {_markdown_cell(inc)} |"
            )
    else:
        lines.append("None: no compared key differs.")
    lines += ["", "## Great Expectations", ""]
    lines.append(f"Suite `{suite['suite_name']}`: {'passed' if suite['success'] else 'FAILED'}.")
    for failure in suite["failed"]:
        lines.append(f"- {failure}")
    lines += [
        "",
        "## Where things are",
        "",
        f"- Diff table (Parquet, all statuses): `{summary['diff_path']}`",
        f"- Metrics: `{summary['metrics_path']}`",
        f"- Data Docs: `{summary['data_docs_path']}`",
        "",
    ]
    return "\n".join(lines)


def run_reconciliation(
    spark: SparkSession,
    run_dir: Location | str,
    changelog_path: str | list[str],
    base_state: dict | None = None,
    expectations_dir: Path | None = None,
) -> dict:
    """Reconcile a run's changelog, write ``run_dir/reconcile/{diff/,metrics.json,report.md,data_docs/}``.

    Returns ``{verdict, headline, tables, diff_path, metrics_path, report_path, data_docs_path,
    failed_expectations, generated_at}``; ``verdict`` is ``fail`` when any epoch has mismatch/missing rows or the
    ``reconciliation_diff`` suite fails.
    """
    from cdcreplay import quality
    from cdcreplay.warehouse import write_json_atomically

    quality.import_in_background()  # the diff suite needs GX: import it while Spark reconciles
    out = Location(run_dir) / "reconcile"
    diff_path = out / "diff"
    data_docs = out / "data_docs"
    out.mkdir()

    # Nothing in the reconciliation runs Python over the rows, so Spark's faster Parquet reader can read its input.
    with vectorized_parquet_reads(spark):
        changelog = read_changelog(spark, changelog_path)
        # Epochs are made of the run's own snapshot reads (the base state's rows are history, never an epoch): a
        # night without a snapshot has nothing to compare, and reading the whole state would only say so.
        history = read_history(spark, base_state) if base_state and has_snapshot_rows(changelog) else None
        plan = plan_reconciliation(changelog, history=history)
        plan.diff.write.mode("overwrite").parquet(str(diff_path))
        # The metrics, the suite and the report's sample read the diff as written: it is computed once, and not
        # cached (at millions of keys the cache cost more than reading the few columns they need back).
        diff = spark.read.parquet(str(diff_path))
        metrics = plan.metrics(diff)
        with local_folder(data_docs) as docs_folder:  # GX writes its site to local files
            suite = quality.run_suite(
                diff,
                "reconciliation_diff",
                expectations_dir=expectations_dir,
                data_docs_dir=docs_folder,
                rows=sum(m[status] for m in metrics for status in STATUSES),  # the diff's rows: one per compared key
            ).to_dict()
        sample = [
            row.asDict(recursive=True)
            for row in diff.filter(F.col("status") != STATUS_MATCH)
            .orderBy("table_id", "epoch_no", "status", "key")
            .limit(REPORT_SAMPLE_ROWS)
            .collect()
        ]

    failing_epochs = [m for m in metrics if m["verdict"] == VERDICT_FAIL]
    verdict = VERDICT_FAIL if failing_epochs or not suite["success"] else VERDICT_PASS
    if failing_epochs:
        headline = "Reconciliation FAILED: " + "; ".join(
            f"{m['table_id']} epoch {m['epoch_no']}: {_failing_counts(m)}" for m in failing_epochs
        )
    elif not suite["success"]:
        headline = "Reconciliation FAILED: suite reconciliation_diff: " + "; ".join(suite["failed"])
    else:
        reconciled = [m for m in metrics if m["kind"] == "reconciled"]
        headline = (
            f"Reconciliation passed: {len(reconciled)} snapshot epoch(s) reconciled, "
            f"{sum(m['kind'] == 'baseline' for m in metrics)} baseline epoch(s) skipped."
        )
    summary = {
        "verdict": verdict,
        "headline": f"{headline} Diff: {diff_path}",
        "generated_at": datetime.now(UTC).isoformat(),
        "tables": metrics,
        "diff_path": str(diff_path),
        "metrics_path": str(out / "metrics.json"),
        "report_path": str(out / "report.md"),
        "data_docs_path": str(data_docs / "index.html"),
        "failed_expectations": suite["failed"],
    }
    write_json_atomically(out / "metrics.json", {**summary, "suite": suite})
    (out / "report.md").write_text(_render_report(summary, metrics, sample, suite))
    return summary
