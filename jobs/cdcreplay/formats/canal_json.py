"""Alibaba DTS "Canal Json" and open-source Canal messages (formats.md section a1).

One message carries one or more row changes of one table: ``data[i]`` pairs with ``old[i]``. All values are JSON
strings (or null) and their types come from ``mysqlType``. Native Spark throughout.
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
)
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


def _binary_as_base64(image: Column, spark_types: Column) -> Column:
    """Canal prints binary columns as ISO-8859-1 text of the bytes; canonical binary text is base64."""
    return F.transform_values(
        image,
        lambda column, value: F.when(
            spark_types[column] == "binary", F.base64(F.encode(value, "ISO-8859-1"))
        ).otherwise(value),
    )


def _row_entries(m: Column, legacy_swapped: bool) -> Column:
    """One changelog entry per element of `data` (or of `old`, for legacy DTS deletes)."""
    row_op = F.element_at(F.create_map(*[F.lit(x) for kv in ROW_TYPES.items() for x in kv]), F.upper(m["type"]))
    spark_types = F.transform_values(
        F.coalesce(m["mysqlType"], F.create_map().cast(TEXT_MAP)), lambda _c, t: mysql_type_to_spark(t)
    )
    is_update = row_op == S.OP_UPDATE
    is_delete = row_op == S.OP_DELETE
    # Legacy DTS instances (created before 2022-03-20) swap the arrays: `old` holds the after image of an update
    # and the deleted row of a delete. A DELETE with `data` null and `old` set is that layout even unflagged.
    if legacy_swapped:
        primary, secondary = m["old"], m["data"]
        rows = F.when(is_update | is_delete, primary).otherwise(m["data"])
    else:
        rows = F.when(is_delete & m["data"].isNull(), m["old"]).otherwise(m["data"])
    count = F.size(F.coalesce(rows, F.array().cast("array<map<string,string>>")))

    def one_row(index: Column) -> Column:
        row = _binary_as_base64(rows[index], spark_types)
        if legacy_swapped:
            before = F.when(is_update, _binary_as_base64(secondary[index], spark_types)).when(is_delete, row)
        else:
            # `old[i]` holds only the changed columns' previous values: before = data[i] overlaid with old[i].
            # A column present in `old` with null means "was NULL"; absent means "unchanged" (test presence).
            changed = _binary_as_base64(F.coalesce(m["old"][index], F.create_map().cast(TEXT_MAP)), spark_types)
            before = F.when(is_update, F.map_concat(row, changed)).when(is_delete, row)
        return entry(
            record_kind=F.lit(KIND_CHANGE),
            op=row_op,
            source_db=m["database"],
            source_table=m["table"],
            key_columns=m["pkNames"],
            key_image=row,
            after=F.when(~is_delete, row),
            before=before,
            column_types=spark_types,
            position=decimal_positions(m["es"], m["id"]),
            event_time=safe_timestamp_millis(m["es"]),
            row_index=index,
        )

    return F.when(count > 0, F.transform(F.sequence(F.lit(0), count - 1), one_row)).otherwise(
        single(
            quarantine(
                S.REASON_MISSING_IMAGE, F.concat(F.lit("type "), m["type"], F.lit(" message without rows in data"))
            )
        )
    )


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    legacy_swapped = bool(pipeline.options.get("legacy_swapped", False))
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    staged = records.select("*", text.alias("text"), parsed.alias("m"))
    m = F.col("m")
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
        F.when(
            F.col("value").isNull() | (F.length("value") == 0),
            single(control(S.CONTROL_TOMBSTONE, F.col("key").cast("string"))),
        )
        .when(text.isNull(), single(quarantine(S.REASON_NOT_UTF8, "payload is not valid UTF-8 text")))
        .when(
            m.isNull() | m["_corrupt_record"].isNotNull(),
            single(
                quarantine(
                    S.REASON_NOT_JSON, F.concat(F.lit("payload is not a JSON object: "), F.substring(text, 1, 120))
                )
            ),
        )
        .when(message_type == "TRUNCATE", single(truncate))
        # DDL is recorded, never applied: the latest-state schema follows the row images' declared types.
        .when(m["isDdl"] | message_type.isin(*DDL_TYPES), single(control(S.CONTROL_DDL_KIND, m["sql"], **identity)))
        .when(message_type.isin(*ROW_TYPES), _row_entries(m, legacy_swapped))
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
