"""Steps 3 and 4: compare a snapshot row with its incremental value column by column, and give each key its status
(see the package's doc)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema
from cdcreplay.compaction import partial_event
from cdcreplay.contracts import (
    STATUS_IN_FLIGHT,
    STATUS_MATCH,
    STATUS_MISMATCH,
    STATUS_MISSING_IN_INCREMENTAL,
    STATUS_MISSING_IN_SNAPSHOT,
)
from cdcreplay.reconcile.model import _TYPED_COMPARISON, DIFFERING_COLUMNS_DDL


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
