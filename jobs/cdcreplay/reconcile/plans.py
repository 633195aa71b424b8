"""Step 2, the incremental value of every compared key, by the plan that fits each table (one sort by key, a join of
the snapshot's reads with the state, or the general per-epoch plan), and the public API that builds the diff."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cdcreplay import schema
from cdcreplay.compaction import event_order, latest_rows
from cdcreplay.reconcile.comparison import _any_partial, _comparable_types, _declared_types, _diff_rows
from cdcreplay.reconcile.epochs import tag_epochs
from cdcreplay.reconcile.model import (
    DIFF_COLUMNS,
    DIFF_DDL,
    History,
    ReconcileResult,
    ReconciliationPlan,
    _order_text,
    _position_text,
)
from cdcreplay.state_store import read_patterns_ref, read_state_ref
from cdcreplay.storage import Location

# latest_rows groups by (table_id, key). Each reconciled epoch needs its own "latest as of" over the same history,
# so the history is replicated per epoch and the table id replaced by a scope "<table_id> NUL <epoch_no>" for the call.
_SCOPE_SEPARATOR = "\u0000"


_SCOPE = ["table_id", "_e"]


_SCOPED_KEY = ["table_id", "_e", "key"]


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
