"""Alibaba DTS "Shareplex Json" (docs/format-spec.md section a2). Decoded in Python (``python_rows``):
one JSON parse per message, read as Spark's from_json read it (``from_json_in_python``). With ``options.reader``
spark (auto: from 500,000 records) Spark's JSON reader decodes the row changes ``dts_shareplex_native`` vouches for,
and this decoder the rest.

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

import re
from functools import partial

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats import dts_shareplex_native
from cdcreplay.formats.envelopes.shareplex_message import (
    BEFORE_OPS,
    DELETE_OPS,
    DROP_COLUMN_OPS,
    FORMAT_ID,
    INSERT_OPS,
    KNOWN_OPS,
    TRUNCATE_OPS,
    UPDATE_OPS,
    table_identity,
)
from cdcreplay.formats.python_rows import (
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    truncate,
)
from cdcreplay.formats.routing import KIND_QUARANTINE, table_id_of
from cdcreplay.formats.values.configured_types import lossy_columns
from cdcreplay.formats.values.text_casts import try_decimal, try_timestamp
from cdcreplay.formats.wire.from_json_in_python import (
    Mismatch,
    json_string,
    struct,
    text_map,
    texts_of,
)
from cdcreplay.formats.wire.json_reader import AS_SPARK_READ, not_json, read_object
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

JSON_READING = AS_SPARK_READ  # how its messages' JSON is read (``json_reader``)

META_FIELDS = ("time", "userid", "op", "scn", "rowid", "trans", "seq", "size", "table", "idx", "posttime")


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


_OP_SEPARATORS = re.compile(r"[ \t\n\x0b\f\r_]+")


def _normalized_op(op: str | None) -> str | None:
    """Upper case, one space between words; only spaces are trimmed at the ends (as Spark's trim)."""
    return None if op is None else _OP_SEPARATORS.sub(" ", op.strip(" ").upper())


def _position(meta: dict) -> list:
    # A transaction id without its three "a.b.c" parts leaves the missing parts NULL.
    trans = meta["trans"].split(".") if meta["trans"] is not None else []
    parts = [trans[i] if i < len(trans) else None for i in range(3)]
    return [try_decimal(part) for part in (meta["scn"], *parts, meta["seq"])]


def _quarantine(reason: str, detail: str) -> dict:
    return {"record_kind": KIND_QUARANTINE, "reason": reason, "detail": detail}


def decode_record(tables: dict[str, tuple[list[str], dict[str, str]]], record: RawRecord) -> list[dict]:
    message = read_object(record.value, JSON_READING)
    try:
        meta = texts_of(struct(message.get("meta")) or {}, *META_FIELDS)
        data, before_key = text_map(message.get("data")), text_map(message.get("key"))
    except Mismatch:
        raise not_json(record.value) from None
    return _entries(tables, meta, data, before_key)


def _entries(tables: dict, meta: dict, data: dict | None, before_key: dict | None) -> list[dict]:
    qualified = meta["table"]
    schema, table = table_identity(qualified)
    identity = {"schema": schema, "table": table}
    key_columns, types = tables.get(table_id_of(None, schema, table), (None, None))
    op, op_name = meta["op"], _normalized_op(meta["op"])
    where = {"position": _position(meta), "event_time": try_timestamp(meta["time"])}

    if op_name in TRUNCATE_OPS:
        detail = None if qualified is None else f"TRUNCATE {qualified}"
        return [truncate(db=None, **identity, **where), control_entry(S.CONTROL_TRUNCATE, detail, **identity)]
    if op_name in DROP_COLUMN_OPS:
        columns = "" if data is None else _json_map(data)
        return [control_entry(S.CONTROL_DDL_KIND, f"DROP COLUMN {columns}", **identity)]
    if op_name in BEFORE_OPS:
        return [
            control_entry(
                S.CONTROL_UPDATE_BEFORE,
                "UPDATE BEFORE carries the before image only; the UPDATE AFTER message applies the change",
                **identity,
            )
        ]
    if op_name not in (*INSERT_OPS, *UPDATE_OPS, *DELETE_OPS):
        return [
            _quarantine(S.REASON_UNKNOWN_OP, f"meta.op '{op if op is not None else 'null'}' is not one of {KNOWN_OPS}")
        ]
    lossy = []
    for image in (data, before_key):
        lossy += [column for column in lossy_columns(image, types) if column not in lossy]
    if lossy:
        return [
            _quarantine(
                S.REASON_BAD_VALUE,
                "value would be rounded or truncated by its configured type in column(s): " + ", ".join(sorted(lossy)),
            )
        ]

    def row(row_op: str, after: dict | None, before: dict | None, key_image: dict) -> dict:
        return change(
            row_op, db=None, **identity, key_columns=None, after=after, before=before, key_image=key_image, **where
        )

    if op_name in INSERT_OPS:
        if data is None:
            return [_quarantine(S.REASON_MISSING_IMAGE, f"op {op} without data")]
        return [row(S.OP_INSERT, data, None, data)]
    if op_name in DELETE_OPS:
        if data is None:
            return [_quarantine(S.REASON_MISSING_IMAGE, f"op {op} without data")]
        return [row(S.OP_DELETE, None, data, data)]
    if data is None and before_key is None:
        return [_quarantine(S.REASON_MISSING_IMAGE, f"op {op} without data and key")]
    merged = {**(before_key or {}), **(data or {})}
    # A key column present in `data` with a value other than the one in `key`: the update moves the row.
    key_changed = (
        data is not None
        and before_key is not None
        and any(c in data and c in before_key and data[c] != before_key[c] for c in key_columns or ())
    )
    if not key_changed:
        return [row(S.OP_UPDATE, merged, before_key, merged)]
    if all(column in merged for column in types or {}):
        moved_row = row(S.OP_UPDATE, merged, before_key, merged)
    else:
        moved_row = _quarantine(
            S.REASON_PARTIAL_KEY_CHANGE,
            f"update moves the row to a new key but carries only the columns {', '.join(sorted(merged))}; the old "
            "key is deleted, the new row's other values are not in the message (resync the table)",
        )
    return [row(S.OP_DELETE, None, before_key, before_key), moved_row]


def _json_map(image: dict[str, str | None]) -> str:
    """A map<string,string> as Spark's to_json writes it."""
    return "{" + ",".join(f"{json_string(k)}:{'null' if v is None else json_string(v)}" for k, v in image.items()) + "}"


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    """Every record through the Python decoder (the reference the native path is held to)."""
    check_config(pipeline)
    tables = {
        table_id: (list(table.primary_key), dict(table.column_types))
        for table_id, table in pipeline.tables.items()
        if table.primary_key or table.column_types
    }
    return decode_with_python(records, partial(decode_record, tables), pipeline)


# `reader: auto` decodes natively from this many records on, sooner than the formats whose native path first samples
# the archive for its tables (native_json.NATIVE_MIN_RECORDS): Shareplex's tables come from the config. Measured in
# fresh JVMs on 2 cores (docs/benchmarks.md, thirty-first session), the decode stage: native 7.6 s against 10.0 s in
# Python at 50,017 records, 10.0 against 13.7 s at 100,016, 13.4 against 21.1 s at 199,998; smaller runs were not
# measured.
NATIVE_MIN_RECORDS = 50_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether Spark's JSON reader decodes what ``dts_shareplex_native`` vouches for, the Python decoder the rest
    (``native_json.reader_chooses_native``)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag (``native_json``), or None when no configured
    table has a native plan (then every record goes to Python without a parse for nothing)."""
    check_config(pipeline)
    plans = dts_shareplex_native.table_plans(records, pipeline, sample_rate(record_count))
    return dts_shareplex_native.native_rows(records, pipeline, plans) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
