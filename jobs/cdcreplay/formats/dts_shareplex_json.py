"""Alibaba DTS "Shareplex Json" (formats.md section a2). Native Spark throughout.

A message is ``{meta: {time, userid, op, scn, rowid, trans, seq, size, table, idx, posttime}, data, key}``:
  ins / INSERT              `data` is the new row.
  upd / UPDATE / UPDATE AFTER
                            `data` holds ONLY the changed columns (new values) and `key` the before image SharePlex
                            logs (the key columns plus the changed columns' old values). The after state is the merge
                            key <- data; a column neither carries keeps its stored value (compaction completes the
                            image from the key's history, because the config declares every column), it is never
                            set to NULL. An update whose `data` changes a key column moves the row: a delete of the
                            old key, then the new key -- applied when the merged image holds every configured column,
                            else quarantined as ``partial_key_change`` (the other columns' values are not in the
                            message), the delete still applied.
  del / DELETE              `data` is the deleted row (full or key columns).
  UPDATE BEFORE             a before image alone: a control row ``update_before``; its UPDATE AFTER applies the change.
  TRUNCATE                  a table-level truncate (empties the table) plus a control row ``truncate``.
  DROP COLUMN               a control row ``ddl`` (recorded, never applied).
Both spellings are accepted case-insensitively, with spaces or underscores ("UPDATE_AFTER").

Keys and types are not in the format: every table needs ``tables.<SCHEMA.TABLE>.primary_key`` and ``column_types``
(all columns) in the pipeline config, checked before any record is decoded. Values are strings or null, kept as text
and typed by the configured ``column_types``; a value its type would round or truncate is quarantined (``bad_value``).
Binary columns are not supported (the format's rendering of bytes is undocumented): declare them ``string``.

Order: (scn, trans, seq) -- the SCN compared as a number, then the transaction id "a.b.c" part by part as numbers,
then the operation's sequence number inside its transaction. ``meta.time`` (UTC) is the event time. Table identity:
``meta.table`` "SCHEMA.TABLE" -> source_schema, source_table.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
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
from cdcreplay.formats.configured_types import (
    configured_keys,
    configured_types,
    lossy_columns,
    table_id_of,
)

FORMAT_ID = "dts-shareplex-json"

VALUE_SCHEMA = (
    "meta struct<time: string, userid: string, op: string, scn: string, rowid: string, trans: string, seq: string, "
    "size: string, table: string, idx: string, posttime: string>, "
    "data map<string,string>, key map<string,string>, _corrupt_record string"
)
# Normalized op (upper case, one space between words) -> what it means.
INSERT_OPS = ("INS", "INSERT")
UPDATE_OPS = ("UPD", "UPDATE", "UPDATE AFTER")
DELETE_OPS = ("DEL", "DELETE")
BEFORE_OPS = ("UPDATE BEFORE",)
TRUNCATE_OPS = ("TRUNCATE",)
DROP_COLUMN_OPS = ("DROP COLUMN",)
KNOWN_OPS = "ins, upd, del, INSERT, UPDATE, DELETE, UPDATE BEFORE, UPDATE AFTER, TRUNCATE, DROP COLUMN"


def check_config(pipeline: PipelineConfig) -> None:
    """Keys and column lists come from the config only: without them nothing can be decoded, so fail before work."""
    keyed = {table_id: table for table_id, table in pipeline.tables.items() if table.primary_key}
    if not keyed:
        raise ConfigError(
            f"pipeline {pipeline.name}: {FORMAT_ID} messages carry no primary key; declare "
            "tables.<SCHEMA.TABLE>.primary_key and tables.<SCHEMA.TABLE>.column_types (every column) for each "
            "replicated table"
        )
    for table_id, table in sorted(keyed.items()):
        if not table.column_types:
            raise ConfigError(
                f"pipeline {pipeline.name}: tables.{table_id}.column_types is missing; {FORMAT_ID} updates carry "
                "only the changed columns, so list every column of the table with its Spark type (string for text)"
            )
        unlisted = [c for c in table.primary_key if c not in table.column_types]
        if unlisted:
            raise ConfigError(
                f"pipeline {pipeline.name}: tables.{table_id}.column_types does not list the key column(s) "
                f"{', '.join(unlisted)}; add them"
            )


def _normalized_op(op: Column) -> Column:
    return F.regexp_replace(F.upper(F.trim(op)), r"[\s_]+", " ")


def _position(meta: Column) -> Column:
    # A transaction id without its three "a.b.c" parts leaves the missing parts NULL (get: no error past the end).
    trans = F.split(meta["trans"], r"\.")
    return decimal_positions(meta["scn"], *(F.get(trans, i) for i in range(3)), meta["seq"])


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    check_config(pipeline)
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    staged = records.select("*", text.alias("text"), parsed.alias("m"))
    m = F.col("m")
    meta = m["meta"]
    qualified = meta["table"]
    has_schema = F.instr(qualified, ".") > 0
    identity = {
        "source_schema": F.when(has_schema, F.substring_index(qualified, ".", 1)),
        "source_table": F.when(has_schema, F.regexp_extract(qualified, r"^[^.]*\.(.*)$", 1)).otherwise(qualified),
    }
    table_id = table_id_of(F.lit(None).cast("string"), identity["source_schema"], identity["source_table"])
    key_columns = configured_keys(pipeline)[table_id]
    types = configured_types(pipeline)[table_id]
    empty = F.create_map().cast(TEXT_MAP)
    data, before_key = m["data"], m["key"]
    merged = F.map_concat(F.coalesce(before_key, empty), F.coalesce(data, empty))
    staged = staged.select(
        "*",
        _normalized_op(meta["op"]).alias("op_name"),
        merged.alias("merged"),
        F.array_distinct(
            F.concat(lossy_columns(merged, types), lossy_columns(data, types), lossy_columns(before_key, types))
        ).alias("lossy"),
    )
    op_name, merged, lossy = F.col("op_name"), F.col("merged"), F.col("lossy")
    position, event_time = _position(meta), meta["time"].try_cast("timestamp")

    def change(op: str, after: Column | None, before: Column | None, key_image: Column) -> Column:
        images = {name: image for name, image in (("after", after), ("before", before)) if image is not None}
        return entry(
            record_kind=F.lit(KIND_CHANGE),
            op=F.lit(op),
            key_image=key_image,
            position=position,
            event_time=event_time,
            **images,
            **identity,
        )

    # A key column present in `data` with a value other than the one in `key`: the update moves the row.
    key_changed = F.coalesce(
        F.exists(
            key_columns,
            lambda c: (
                F.map_contains_key(data, c) & F.map_contains_key(before_key, c) & ~data[c].eqNullSafe(before_key[c])
            ),
        ),
        F.lit(False),
    )
    complete = F.forall(
        F.coalesce(F.map_keys(types), F.array().cast("array<string>")), lambda c: F.map_contains_key(merged, c)
    )
    moved_row = F.when(complete, change(S.OP_UPDATE, merged, before_key, merged)).otherwise(
        quarantine(
            S.REASON_PARTIAL_KEY_CHANGE,
            F.concat(
                F.lit("update moves the row to a new key but carries only the columns "),
                F.array_join(F.array_sort(F.map_keys(merged)), ", "),
                F.lit("; the old key is deleted, the new row's other values are not in the message (resync the table)"),
            ),
        )
    )
    update = F.when(key_changed, F.array(change(S.OP_DELETE, None, before_key, before_key), moved_row)).otherwise(
        single(change(S.OP_UPDATE, merged, before_key, merged))
    )
    truncate = entry(
        record_kind=F.lit(KIND_CHANGE), op=F.lit(S.OP_TRUNCATE), position=position, event_time=event_time, **identity
    )

    entries = (
        unreadable_json(text, m)
        .when(
            op_name.isin(*TRUNCATE_OPS),
            F.array(truncate, control(S.CONTROL_TRUNCATE, F.concat(F.lit("TRUNCATE "), qualified), **identity)),
        )
        .when(
            op_name.isin(*DROP_COLUMN_OPS),
            single(
                control(
                    S.CONTROL_DDL_KIND,
                    F.concat(F.lit("DROP COLUMN "), F.coalesce(F.to_json(data), F.lit(""))),
                    **identity,
                )
            ),
        )
        .when(
            op_name.isin(*BEFORE_OPS),
            single(
                control(
                    S.CONTROL_UPDATE_BEFORE,
                    "UPDATE BEFORE carries the before image only; the UPDATE AFTER message applies the change",
                    **identity,
                )
            ),
        )
        .when(
            op_name.isin(*INSERT_OPS, *UPDATE_OPS, *DELETE_OPS) & (F.size(lossy) > 0),
            single(
                quarantine(
                    S.REASON_BAD_VALUE,
                    F.concat(
                        F.lit("value would be rounded or truncated by its configured type in column(s): "),
                        F.array_join(F.array_sort(lossy), ", "),
                    ),
                )
            ),
        )
        .when(
            op_name.isin(*INSERT_OPS) & data.isNull(),
            single(quarantine(S.REASON_MISSING_IMAGE, F.concat(F.lit("op "), meta["op"], F.lit(" without data")))),
        )
        .when(op_name.isin(*INSERT_OPS), single(change(S.OP_INSERT, data, None, data)))
        .when(
            op_name.isin(*UPDATE_OPS) & data.isNull() & before_key.isNull(),
            single(
                quarantine(S.REASON_MISSING_IMAGE, F.concat(F.lit("op "), meta["op"], F.lit(" without data and key")))
            ),
        )
        .when(op_name.isin(*UPDATE_OPS), update)
        .when(
            op_name.isin(*DELETE_OPS) & data.isNull(),
            single(quarantine(S.REASON_MISSING_IMAGE, F.concat(F.lit("op "), meta["op"], F.lit(" without data")))),
        )
        .when(op_name.isin(*DELETE_OPS), single(change(S.OP_DELETE, None, data, data)))
        .otherwise(
            single(
                quarantine(
                    S.REASON_UNKNOWN_OP,
                    F.concat(
                        F.lit("meta.op '"),
                        F.coalesce(meta["op"], F.lit("null")),
                        F.lit(f"' is not one of {KNOWN_OPS}"),
                    ),
                )
            )
        )
    )
    return finish(staged, entries, pipeline)
