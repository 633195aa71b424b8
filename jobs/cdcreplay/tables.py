"""Compacted state (canonical text images) -> typed latest-state tables with provenance columns."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay.compaction import event_order
from cdcreplay.value_types import typed_value

# The version of what typed_table writes for a given state. A run carries a table it did not change over from the
# previous version (pipeline.unchanged_tables) only when that version typed it under the same value: raise it when a
# release changes the typed output of the same rows (a provenance column, a conversion rule), so every table is typed
# again once.
TYPED_TABLE_FORMAT = 1


@dataclass(frozen=True)
class TableLayout:
    table_id: str
    key_columns: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]  # (name, Spark type), key columns first


def table_layouts(state: DataFrame) -> dict[str, TableLayout]:
    """Columns and types per table: the latest declaration of each column wins; undeclared columns are strings."""
    live = state.where(~F.col("deleted"))
    declared = (
        live.select("table_id", event_order().alias("order"), F.explode("column_types").alias("column", "type"))
        .groupBy("table_id", "column")
        .agg(F.max_by("type", "order").alias("type"))
    )
    carried = live.select("table_id", F.explode(F.map_keys("after")).alias("column")).distinct()
    columns = (
        carried.join(declared, ["table_id", "column"], "full")
        .select("table_id", "column", F.coalesce("type", F.lit("string")).alias("type"))
        .collect()
    )
    keys = live.groupBy("table_id").agg(F.max_by("key_columns", event_order()).alias("key_columns")).collect()
    by_table: dict[str, dict[str, str]] = {}
    for row in columns:
        by_table.setdefault(row.table_id, {})[row.column] = row.type
    layouts = {}
    for row in keys:
        types = by_table.get(row.table_id, {})
        key_columns = tuple(row.key_columns)
        ordered = [(c, types.get(c, "string")) for c in key_columns] + [
            (c, t) for c, t in sorted(types.items()) if c not in key_columns
        ]
        layouts[row.table_id] = TableLayout(row.table_id, key_columns, tuple(ordered))
    return layouts


def _live_rows(state: DataFrame, layout: TableLayout) -> DataFrame:
    return state.where((F.col("table_id") == layout.table_id) & ~F.col("deleted"))


def conflicting_columns(layout: TableLayout) -> Column:
    """The columns of a state row whose stored (non-NULL) value does not convert to the table's column type.

    The newest declaration of a column gives its type; an older row written under another declaration still
    holds its old text. A widening (int -> bigint, varchar(8) -> text, decimal(5,2) -> decimal(12,2)) reads every old
    value; a change no old value survives (text 'abc' in a column now int) is a conflict.
    """
    after = F.col("after")
    flags = [
        F.when(after[name].isNotNull() & typed_value(after, name, spark_type).isNull(), F.lit(name))
        for name, spark_type in layout.columns
    ]
    return F.array_compact(F.array(*flags)) if flags else F.array().cast("array<string>")


def typed_table(state: DataFrame, layout: TableLayout) -> DataFrame:
    """Live rows of one table, one typed column per source column, then the provenance of the winning event.

    Rows with a type conflict (``conflicting_columns``) are held back: see ``type_conflicts``.
    """
    live = _live_rows(state, layout).where(F.size(conflicting_columns(layout)) == 0)
    return live.select(
        *[typed_value(F.col("after"), name, spark_type) for name, spark_type in layout.columns],
        F.col("op").alias("_op"),
        F.col("event_time").alias("_event_time"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        position_text(F.col("position")).alias("_position"),
    )


TYPE_CONFLICT = "type_conflict"


def type_conflicts(state: DataFrame, layouts: dict[str, TableLayout]) -> DataFrame:
    """The live rows ``typed_table`` holds back, of every table in ``layouts``: key, columns named with their stored
    text and the type they do not fit, and the Kafka coordinates of the event that wrote them (so the message can be
    found in the archive).

    One pass over ``state`` with each table's check chosen by its id: a database of hundreds of tables would otherwise
    build and analyse a union of hundreds of plans, which cost more than the scan itself.
    """
    tables = sorted(layouts.items())
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
    conflicts = live.withColumn("columns", columns)
    return conflicts.where(F.size("columns") > 0).select(
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
    return F.array_join(F.transform(position, lambda p: p.cast("string")), ":")
