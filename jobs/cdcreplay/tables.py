"""Compacted state (canonical text images) -> typed latest-state tables with provenance columns."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdcreplay.compaction import event_order
from cdcreplay.value_types import typed_value


class TypeConflictError(ValueError):
    """Values that passed decoding but cannot be stored in the table's column type."""


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


def typed_table(state: DataFrame, layout: TableLayout) -> DataFrame:
    """Live rows of one table, one typed column per source column, then the provenance of the winning event."""
    live = state.where((F.col("table_id") == layout.table_id) & ~F.col("deleted"))
    return live.select(
        *[typed_value(F.col("after"), name, spark_type) for name, spark_type in layout.columns],
        F.col("op").alias("_op"),
        F.col("event_time").alias("_event_time"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.array_join(F.transform("position", lambda p: p.cast("string")), ":").alias("_position"),
    )


def unreadable_values(state: DataFrame, layout: TableLayout) -> list[str]:
    """Columns where a non-NULL stored value does not convert to the column's type (e.g. a type changed mid-way)."""
    live = state.where((F.col("table_id") == layout.table_id) & ~F.col("deleted"))
    checks = [
        F.sum(
            (F.col("after")[name].isNotNull() & typed_value(F.col("after"), name, spark_type).isNull()).cast("int")
        ).alias(name)
        for name, spark_type in layout.columns
    ]
    if not checks:
        return []
    counts = live.agg(*checks).first().asDict()
    return [f"{name} ({counts[name]} rows)" for name, _ in layout.columns if counts.get(name)]
