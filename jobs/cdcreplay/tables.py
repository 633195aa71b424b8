"""Compacted state (canonical text images) -> typed latest-state tables with provenance columns."""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay.compaction import event_order, order_key
from cdcreplay.value_types import typed_value

# The version of what typed_table writes for a given state. A run carries a table it did not change over from the
# previous version (typed_tables.unchanged_tables) only when that version typed it under the same value: raise it when a
# release changes the typed output of the same rows (a provenance column, a conversion rule), so every table is typed
# again once.
TYPED_TABLE_FORMAT = 1


@dataclass(frozen=True)
class TableLayout:
    table_id: str
    key_columns: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (name, Spark type), key columns first


@dataclass(frozen=True)
class StateCounts:
    rows: int  # live rows
    tombstones: int


# What groups the rows of a table into patterns (see table_layouts). A tombstone declares nothing: a table's
# tombstones are one group of their own.
PATTERN_KEY = ("table_id", "deleted", "declared", "carried", "key_columns")


def state_patterns(rows: DataFrame) -> DataFrame:
    """The patterns of state rows (changelog columns + deleted): per table, (declared types, carried columns, key
    columns) of its live rows with their newest event, and its tombstones; each with its row count. Tombstones have
    no newest event: only live patterns are ordered."""
    live = ~F.col("deleted")
    return rows.groupBy(
        "table_id",
        "deleted",
        F.when(live, F.map_entries("column_types")).alias("declared"),
        F.when(live, F.map_keys("after")).alias("carried"),
        F.when(live, F.col("key_columns")).alias("key_columns"),
    ).agg(F.max(F.when(live, event_order())).alias("newest"), F.count(F.lit(1)).alias("count"))


def changed_patterns(previous: DataFrame, replaced: DataFrame, written: DataFrame) -> DataFrame | None:
    """The patterns of a state that is ``previous``'s state with the rows whose patterns are ``replaced`` swapped for
    rows whose patterns are ``written`` (a night's merge: the changed keys' stored rows, and their new rows). All
    three are :func:`state_patterns` frames, and small: this is a night's cost, not the state's.

    Counts add up. A pattern's newest event may be one of the replaced rows, though, and then its new newest is one
    of its remaining rows, which only the whole state knows: the answer is then None, and the caller aggregates the
    whole state. (The newest events order a table's patterns: the newest declaration of a column wins.) That takes a
    live pattern whose newest row changed tonight to another pattern or a delete, with no row of that pattern
    written tonight: rare, as a night's rows of a pattern are newer than its earlier ones.
    """
    none = F.lit(None).cast(previous.schema["newest"].dataType)

    def side(patterns: DataFrame, kept=none, written=none, replaced=none, sign: int = 1) -> DataFrame:
        newest = (kept.alias("kept_newest"), written.alias("written_newest"), replaced.alias("replaced_newest"))
        return patterns.select(*PATTERN_KEY, *newest, (F.col("count") * sign).alias("count"))

    newest = F.col("newest")
    combined = (
        side(previous, kept=newest)
        .unionByName(side(written, written=newest))
        .unionByName(side(replaced, replaced=newest, sign=-1))
    )
    totals = (
        combined.groupBy(*PATTERN_KEY)
        .agg(
            F.max("kept_newest").alias("kept_newest"),
            F.max("written_newest").alias("written_newest"),
            F.max("replaced_newest").alias("replaced_newest"),
            F.sum("count").alias("count"),
        )
        .where(F.col("count") != 0)  # a pattern whose rows were all replaced is gone
    )
    # The previous newest still stands unless a replaced row was it (or tied with it) and no written row outdoes it.
    kept, written_newest, replaced_newest = F.col("kept_newest"), F.col("written_newest"), F.col("replaced_newest")
    certain = kept.isNull() | replaced_newest.isNull() | (replaced_newest < kept) | (written_newest >= kept)
    result = totals.select(
        *PATTERN_KEY, F.greatest(kept, written_newest).alias("newest"), "count", certain.alias("_certain")
    ).collect()
    if not all(row._certain for row in result):
        return None
    if any(row["count"] < 0 for row in result):
        # More rows replaced than the kept patterns counted: they are not the patterns of the state the night built
        # on. Never the case when the state and its patterns were written together; trust the whole state then.
        return None
    spark = previous.sparkSession
    return spark.createDataFrame([row[:-1] for row in result], previous.select(*PATTERN_KEY, "newest", "count").schema)


def table_layouts(state: DataFrame) -> tuple[dict[str, TableLayout], dict[str, StateCounts]]:
    """Columns and types per table: the latest declaration of each column wins; undeclared columns are strings. And
    per table (also one whose every key is deleted) its live rows and tombstones, from the same scan.

    One narrow aggregation: the live rows of a table share a handful of (declared types, carried columns, key)
    patterns -- one per schema version -- so they are grouped by pattern (:func:`state_patterns`) and the patterns
    are folded on the driver (:func:`layouts_of_patterns`).
    """
    return layouts_of_patterns(state_patterns(state))


def layouts_of_patterns(patterns: DataFrame) -> tuple[dict[str, TableLayout], dict[str, StateCounts]]:
    """:func:`table_layouts` of the state whose patterns are ``patterns``: folded from each table's oldest pattern
    to its newest. The newest declaration of a column is the one of the newest pattern that declares it (every row of
    a pattern declares the same columns)."""
    # A handful of rows per table (one per schema version), already computed: folded here, in the driver's Python.
    found = patterns.select("table_id", "deleted", "declared", "carried", "key_columns", "newest", "count").collect()
    types: dict[str, dict[str, str]] = {}
    keys: dict[str, tuple[str, ...]] = {}
    rows: dict[str, int] = {}
    tombstones: dict[str, int] = {}
    for row in found:
        if row.deleted:  # tombstones declare nothing and have no newest event: only counted
            tombstones[row.table_id] = tombstones.get(row.table_id, 0) + row["count"]
    live = [row for row in found if not row.deleted]
    for row in sorted(live, key=lambda r: (r.table_id, order_key(*r.newest))):  # each table's oldest pattern first
        rows[row.table_id] = rows.get(row.table_id, 0) + row["count"]
        table_types = types.setdefault(row.table_id, {})
        for column in row.carried or ():
            table_types.setdefault(column, "string")
        for entry in row.declared or ():
            table_types[entry.key] = entry.value
        keys[row.table_id] = tuple(row.key_columns)  # the newest pattern's key, in the end
    counts = {t: StateCounts(rows.get(t, 0), tombstones.get(t, 0)) for t in sorted({*rows, *tombstones})}
    layouts = {}
    for table_id, key_columns in keys.items():
        table_types = types[table_id]
        ordered = [(c, table_types.get(c, "string")) for c in key_columns] + [
            (c, t) for c, t in sorted(table_types.items()) if c not in key_columns
        ]
        layouts[table_id] = TableLayout(table_id, key_columns, tuple(ordered))
    return layouts, counts


def _live_rows(state: DataFrame, layout: TableLayout) -> DataFrame:
    return state.where((F.col("table_id") == layout.table_id) & ~F.col("deleted"))


def _conflicts(layout: TableLayout) -> list[tuple[str, Column]]:
    """Per column of the layout: whether a row's stored (non-NULL) value does not convert to the column's type."""
    after = F.col("after")
    return [
        (name, after[name].isNotNull() & typed_value(after, name, spark_type).isNull())
        for name, spark_type in layout.columns
    ]


def has_type_conflict(layout: TableLayout) -> Column:
    """Whether a state row has a column whose stored value does not fit (see :func:`conflicting_columns`).

    A plain OR of the per-column checks: Spark compiles it, where the array of ``conflicting_columns`` needs an
    interpreted lambda (``array_compact``) per row. Every live row is checked; almost none conflict.
    """
    checks = [check for _, check in _conflicts(layout)]
    return reduce(lambda left, right: left | right, checks) if checks else F.lit(False)


def conflicting_columns(layout: TableLayout) -> Column:
    """The columns of a state row whose stored (non-NULL) value does not convert to the table's column type.

    The newest declaration of a column gives its type; an older row written under another declaration still
    holds its old text. A widening (int -> bigint, varchar(8) -> text, decimal(5,2) -> decimal(12,2)) reads every old
    value; a change no old value survives (text 'abc' in a column now int) is a conflict.
    """
    flags = [F.when(check, F.lit(name)) for name, check in _conflicts(layout)]
    return F.array_compact(F.array(*flags)) if flags else F.array().cast("array<string>")


def typed_table(state: DataFrame, layout: TableLayout) -> DataFrame:
    """Live rows of one table, one typed column per source column, then the provenance of the winning event.

    Rows with a type conflict (``conflicting_columns``) are held back: see ``type_conflicts``.
    """
    live = _live_rows(state, layout).where(~has_type_conflict(layout))
    return live.select(*_typed_columns(layout, F.col("after")))


# The flag of typed_changes: whether the typed table holds the key's row.
PUBLISHED = "_published"


def typed_changes(rows: DataFrame, layout: TableLayout) -> DataFrame:
    """The state rows of keys a night changed in one table, typed as ``typed_table`` types them, for a merge into the
    typed table: every changed key, with :data:`PUBLISHED` false where the table must not hold it (deleted, or held
    back by a type conflict). A tombstone has no image: its key columns are read from its key (a live row's image
    has them too, and wins)."""
    key_image = F.map_from_arrays(F.col("key_columns"), F.from_json("key", "array<string>"))
    image = F.map_concat(key_image, F.coalesce(F.col("after"), F.create_map().cast("map<string,string>")))
    published = ~F.col("deleted") & ~has_type_conflict(layout)
    return rows.where(F.col("table_id") == layout.table_id).select(
        *_typed_columns(layout, image), published.alias(PUBLISHED)
    )


def _typed_columns(layout: TableLayout, image: Column) -> list[Column]:
    return [
        *[typed_value(image, name, spark_type) for name, spark_type in layout.columns],
        F.col("op").alias("_op"),
        F.col("event_time").alias("_event_time"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        position_text(F.col("position")).alias("_position"),
    ]


TYPE_CONFLICT = "type_conflict"


def type_conflicts(state: DataFrame, layouts: dict[str, TableLayout]) -> DataFrame:
    """The live rows ``typed_table`` holds back, of every table in ``layouts``: key, columns named with their stored
    text and the type they do not fit, and the Kafka coordinates of the event that wrote them (so the message can be
    found in the archive).

    One pass over ``state`` with each table's check chosen by its id: a database of hundreds of tables would otherwise
    build and analyse a union of hundreds of plans, which cost more than the scan itself.
    """
    tables = sorted(layouts.items())
    conflicting = F.coalesce(
        *[F.when(F.col("table_id") == table_id, has_type_conflict(layout)) for table_id, layout in tables]
    )
    columns = F.coalesce(
        *[F.when(F.col("table_id") == table_id, conflicting_columns(layout)) for table_id, layout in tables]
    )
    # The declared type of each column: table id -> column -> type.
    types = F.create_map(
        *[
            part
            for table_id, layout in tables
            for part in (F.lit(table_id), F.create_map(*[F.lit(x) for column in layout.columns for x in column]))
        ]
    )
    live = state.where(F.col("table_id").isin([table_id for table_id, _ in tables]) & ~F.col("deleted"))
    # The compiled check finds the few conflicting rows; only they get the list of their columns.
    conflicts = live.where(conflicting).withColumn("columns", columns)
    return conflicts.select(
        "table_id",
        "key",
        "columns",
        F.lit(TYPE_CONFLICT).alias("reason"),
        F.concat(
            F.lit("stored values do not fit the column type a newer event declared: "),
            F.array_join(
                F.transform(
                    "columns",
                    lambda c: F.concat(
                        c,
                        F.lit(" = '"),
                        F.substring(F.col("after")[c], 1, 60),
                        F.lit("' does not fit "),
                        types[F.col("table_id")][c],
                    ),
                ),
                "; ",
            ),
        ).alias("detail"),
        "after",
        "topic",
        "partition",
        "offset",
        position_text(F.col("position")).alias("position"),
        "event_time",
    )


def position_text(position: Column) -> Column:
    """A source position as text, its parts joined by ":" (a cast of the whole array: no per-element lambda)."""
    return F.array_join(position.cast("array<string>"), ":")
