"""Alibaba DTS "Canal Json" and open-source Canal messages (formats.md section a1).

One message carries one or more row changes of one table: ``data[i]`` pairs with ``old[i]``. All values are JSON
strings (or null) and their types come from ``mysqlType``. Native Spark throughout.

Layouts (option ``legacy_swapped``, per source):
  true   legacy DTS instances (created before 2022-03-20 and not restarted since): `old` holds an UPDATE's after
         image and `data` its before image; a DELETE's row is in `old` with `data` null (an INSERT's row in `data`,
         else `old`).
  false  the open-source layout: `data` is the after image (a DELETE's row), `old` the changed columns' old values.
         A DELETE with `data` null is quarantined (`missing_image`, naming the option).
  unset  the open-source layout, except that a DELETE with `data` null and `old` set can only be the legacy layout:
         it is read from `old`, and a ``note`` control row says so, which the run summary counts. Not guessed silently:
         in a legacy stream the UPDATEs are swapped too, and only the option reads them right.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import (
    KIND_CHANGE,
    TEXT_MAP,
    control,
    decimal_positions,
    entry,
    finish,
    quarantine,
    single,
    text_payload,
    unreadable_json,
)
from cdcreplay.formats.configured_types import configured_keys, table_id_of
from cdcreplay.value_types import mysql_type_to_spark, safe_timestamp_millis

FORMAT_ID = "canal-json"

VALUE_SCHEMA = (
    "data array<map<string,string>>, old array<map<string,string>>, database string, table string, type string, "
    "isDdl boolean, pkNames array<string>, mysqlType map<string,string>, sql string, es bigint, ts bigint, id bigint, "
    "_corrupt_record string"
)
ROW_TYPES = {"INSERT": S.OP_INSERT, "UPDATE": S.OP_UPDATE, "DELETE": S.OP_DELETE, "INIT": S.OP_SNAPSHOT}
# Open-source Canal's DDL event types; DTS uses "DDL". TRUNCATE also empties the table.
DDL_TYPES = ("DDL", "CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX", "INIT_DDL", "TRUNCATE")

LAYOUT_LEGACY, LAYOUT_OPEN_SOURCE, LAYOUT_UNDECLARED = "legacy", "open-source", "undeclared"
LEGACY_DELETE_NOTE = (
    "canal-json: DELETE with `data` null and `old` set read as the legacy DTS layout (instances created before "
    "2022-03-20); declare options.legacy_swapped for this source: true also reads its UPDATEs right, false quarantines "
    "such DELETEs"
)


def _binary_as_base64(image: Column, spark_types: Column) -> Column:
    """Canal prints binary columns as ISO-8859-1 text of the bytes; canonical binary text is base64."""
    return F.transform_values(
        image,
        lambda column, value: F.when(
            spark_types[column] == "binary", F.base64(F.encode(value, "ISO-8859-1"))
        ).otherwise(value),
    )


def layout_of(pipeline: PipelineConfig) -> str:
    """The source's declared `data`/`old` layout: legacy, open-source, or undeclared (option absent)."""
    declared = pipeline.options.get("legacy_swapped")
    if declared is None:
        return LAYOUT_UNDECLARED
    return LAYOUT_LEGACY if declared else LAYOUT_OPEN_SOURCE


def _row_entries(m: Column, layout: str, pipeline: PipelineConfig) -> Column:
    """One changelog entry per element of `data` (or of `old`, for legacy DTS layouts); two for a key change."""
    # Computed once per message by decode(): referenced inside the per-row lambda they would be re-evaluated per
    # row and per use (no common-subexpression elimination inside higher-order functions).
    key_columns, spark_types = F.col("key_columns"), F.col("spark_types")
    row_op = F.element_at(F.create_map(*[F.lit(x) for kv in ROW_TYPES.items() for x in kv]), F.upper(m["type"]))
    is_update = row_op == S.OP_UPDATE
    is_delete = row_op == S.OP_DELETE
    legacy_delete = is_delete & m["data"].isNull() & m["old"].isNotNull()
    if layout == LAYOUT_LEGACY:
        # Legacy DTS instances swap the arrays: `old` holds the after image of an update and the deleted row of a
        # delete, `data` the update's before image. Where an INSERT's row sits is not documented: `data`, else `old`.
        rows = F.when(is_update | is_delete, m["old"]).otherwise(F.coalesce(m["data"], m["old"]))
    elif layout == LAYOUT_UNDECLARED:
        # The one shape only the legacy layout produces; read it that way (the caller adds a note for the summary).
        rows = F.when(legacy_delete, m["old"]).otherwise(m["data"])
    else:
        rows = m["data"]
    count = F.size(F.coalesce(rows, F.array().cast("array<map<string,string>>")))

    def one_row(index: Column) -> Column:
        row = _binary_as_base64(rows[index], spark_types)
        if layout == LAYOUT_LEGACY:
            before = F.when(is_update, _binary_as_base64(m["data"][index], spark_types)).when(is_delete, row)
        else:
            # `old[i]` holds only the changed columns' previous values: before = data[i] overlaid with old[i].
            # A column present in `old` with null means "was NULL"; absent means "unchanged" (test presence).
            changed = _binary_as_base64(F.coalesce(m["old"][index], F.create_map().cast(TEXT_MAP)), spark_types)
            before = F.when(is_update, F.map_concat(row, changed)).when(is_delete, row)
        common = {
            "record_kind": F.lit(KIND_CHANGE),
            "source_db": m["database"],
            "source_table": m["table"],
            "key_columns": m["pkNames"],
            "before": before,
            "column_types": spark_types,
            "position": decimal_positions(m["es"], m["id"]),
            "event_time": safe_timestamp_millis(m["es"]),
            "row_index": index,
        }
        change = entry(op=row_op, key_image=row, after=F.when(~is_delete, row), **common)
        # An UPDATE of a primary-key column moves the row: Canal sends one UPDATE whose before image has the old key.
        # The old key is deleted, else it would stay live next to the new one.
        key_values = F.transform(key_columns, lambda c: row[c])
        moved = is_update & F.coalesce(key_values != F.transform(key_columns, lambda c: before[c]), F.lit(False))
        delete_old = entry(op=F.lit(S.OP_DELETE), key_image=before, **common)
        return F.when(moved, F.array(delete_old, change)).otherwise(F.array(change))

    no_rows_detail = F.concat(
        F.lit("type "),
        m["type"],
        F.lit(" message without rows in data"),
        F.when(
            legacy_delete,
            F.lit(
                " (its row is in `old`: the legacy DTS layout of instances created before 2022-03-20; "
                "set options.legacy_swapped: true for this source)"
            ),
        ).otherwise(F.lit("")),
    )
    rows_entries = F.when(count > 0, F.flatten(F.transform(F.sequence(F.lit(0), count - 1), one_row))).otherwise(
        single(quarantine(S.REASON_MISSING_IMAGE, no_rows_detail))
    )
    if layout != LAYOUT_UNDECLARED:
        return rows_entries
    note = control(S.CONTROL_NOTE, LEGACY_DELETE_NOTE, source_db=m["database"], source_table=m["table"])
    return F.when(legacy_delete, F.concat(rows_entries, single(note))).otherwise(rows_entries)


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    layout = layout_of(pipeline)
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    staged = records.select("*", text.alias("text"), parsed.alias("m"))
    m = F.col("m")
    # The key columns as finish() will settle them: the configured primary key wins over the message's pkNames.
    table_id = table_id_of(m["database"], F.lit(None).cast("string"), m["table"])
    staged = staged.select(
        "*",
        F.coalesce(configured_keys(pipeline)[table_id], m["pkNames"], F.array().cast("array<string>")).alias(
            "key_columns"
        ),
        F.transform_values(
            F.coalesce(m["mysqlType"], F.create_map().cast(TEXT_MAP)), lambda _c, t: mysql_type_to_spark(t)
        ).alias("spark_types"),
    )
    message_type = F.upper(m["type"])
    identity = {"source_db": m["database"], "source_table": m["table"]}
    truncate = entry(
        record_kind=F.lit(KIND_CHANGE),
        op=F.lit(S.OP_TRUNCATE),
        position=decimal_positions(m["es"], m["id"]),
        event_time=safe_timestamp_millis(m["es"]),
        **identity,
    )
    entries = (
        unreadable_json(text, m)
        .when(message_type == "TRUNCATE", single(truncate))
        # DDL is recorded, never applied: the latest-state schema follows the row images' declared types.
        .when(m["isDdl"] | message_type.isin(*DDL_TYPES), single(control(S.CONTROL_DDL_KIND, m["sql"], **identity)))
        .when(message_type.isin(*ROW_TYPES), _row_entries(m, layout, pipeline))
        .otherwise(
            single(
                quarantine(
                    S.REASON_UNKNOWN_OP,
                    F.concat(
                        F.lit("type '"),
                        F.coalesce(m["type"], F.lit("null")),
                        F.lit("' is not INSERT, UPDATE, DELETE, INIT or DDL"),
                    ),
                )
            )
        )
    )
    return finish(staged, entries, pipeline)
