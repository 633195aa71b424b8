"""Alibaba DTS "Canal Json" and open-source Canal messages (docs/format-spec.md section a1).

One message carries one or more row changes of one table: ``data[i]`` pairs with ``old[i]``. All values are JSON
strings (or null) and their types come from ``mysqlType``. Decoded in Python (``python_rows``): one parse per
message (``json_reader.EXACT``), no per-value Spark lambdas. With ``options.reader: spark`` (or ``auto`` on a large
run) the messages ``canal_native`` vouches for are decoded by Spark's JSON reader instead, and only the rest here.

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

import base64
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.envelopes.canal_layout import (
    DDL_TYPES,
    LAYOUT_LEGACY,
    LAYOUT_UNDECLARED,
    ROW_TYPES,
    layout_of,
)
from cdcreplay.formats.envelopes.canal_layout import FORMAT_ID as FORMAT_ID
from cdcreplay.formats.python_rows import (
    DecodeError,
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    position,
    quarantine_entry,
    truncate,
)
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.wire.json_reader import (
    EXACT,
    LONE_SURROGATE,
    escapes_surrogate,
    not_json,
    object_of,
    payload_text,
)
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate
from cdcreplay.value_types import mysql_type_name_to_spark

JSON_READING = EXACT  # how its messages' JSON is read (``json_reader``)

LEGACY_DELETE_NOTE = (
    "canal-json: DELETE with `data` null and `old` set read as the legacy DTS layout (instances created before "
    "2022-03-20); declare options.legacy_swapped for this source: true also reads its UPDATEs right, false quarantines "
    "such DELETEs"
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
INT64 = (-(2**63), 2**63 - 1)


# --- the message's fields, typed as the format defines them; a field of another type makes the message unreadable -


class _Malformed(ValueError):
    pass


def _text(value) -> str | None:
    """A JSON value as text: strings as they are, numbers as written, objects/arrays as compact JSON."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _bigint(message: dict, name: str) -> int | None:
    value = message.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not INT64[0] <= value <= INT64[1]:
        raise _Malformed(name)
    return value


def _text_map(value, name: str) -> dict[str, str | None] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Malformed(name)
    return {column: _text(v) for column, v in value.items()}


def _rows(message: dict, name: str) -> list | None:
    value = message.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Malformed(name)
    return [_text_map(row, name) for row in value]


def _event_time(millis: int | None) -> datetime | None:
    if millis is None:
        return None
    try:
        moment = EPOCH + timedelta(milliseconds=millis)
    except OverflowError:
        return None
    return moment if moment.year >= 1 else None


def _binary_as_base64(row: dict | None, spark_types: dict[str, str]) -> dict | None:
    """Canal prints binary columns as ISO-8859-1 text of the bytes; canonical binary text is base64."""
    if row is None:
        return None
    return {
        column: base64.b64encode(value.encode("latin-1", errors="replace")).decode("ascii")
        if value is not None and spark_types.get(column) == "binary"
        else value
        for column, value in row.items()
    }


def _at(rows: list | None, index: int):
    return rows[index] if rows is not None and index < len(rows) else None


def _row_entries(message: dict, row_op: str, layout: str, key_columns: list[str], common: dict) -> list[dict]:
    """One changelog entry per element of `data` (or of `old`, for legacy DTS layouts); two for a key change."""
    data, old = _rows(message, "data"), _rows(message, "old")
    spark_types = common["column_types"]
    is_update, is_delete = row_op == S.OP_UPDATE, row_op == S.OP_DELETE
    legacy_delete = is_delete and data is None and old is not None
    if layout == LAYOUT_LEGACY:
        # Legacy DTS instances swap the arrays: `old` holds the after image of an update and the deleted row of a
        # delete, `data` the update's before image. Where an INSERT's row sits is not documented: `data`, else `old`.
        rows = old if is_update or is_delete else (data if data is not None else old)
    elif layout == LAYOUT_UNDECLARED:
        # The one shape only the legacy layout produces; read it that way (a note row tells the run summary).
        rows = old if legacy_delete else data
    else:
        rows = data
    if not rows:
        detail = f"type {message.get('type')} message without rows in data"
        if legacy_delete:
            detail += (
                " (its row is in `old`: the legacy DTS layout of instances created before 2022-03-20; "
                "set options.legacy_swapped: true for this source)"
            )
        return [quarantine_entry(S.REASON_MISSING_IMAGE, detail)]

    entries = []
    for index, raw_row in enumerate(rows):
        row = _binary_as_base64(raw_row, spark_types)
        if is_delete:
            before = row
        elif not is_update:
            before = None
        elif layout == LAYOUT_LEGACY:
            before = _binary_as_base64(_at(data, index), spark_types)
        else:
            # `old[i]` holds only the changed columns' previous values: before = data[i] overlaid with old[i].
            # A column present in `old` with null means "was NULL"; absent means "unchanged".
            before = None if row is None else {**row, **(_binary_as_base64(_at(old, index), spark_types) or {})}
        entry = change(row_op, after=None if is_delete else row, before=before, row_index=index, **common)
        # An UPDATE of a primary-key column moves the row: Canal sends one UPDATE whose before image has the old
        # key. The old key is deleted, else it would stay live next to the new one.
        moved = (
            is_update
            and row is not None
            and before is not None
            and [row.get(c) for c in key_columns] != [before.get(c) for c in key_columns]
        )
        if moved:
            entries.append(change(S.OP_DELETE, after=None, before=before, row_index=index, **common))
        entries.append(entry)
    if layout == LAYOUT_UNDECLARED and legacy_delete:
        entries.append(control_entry(S.CONTROL_NOTE, LEGACY_DELETE_NOTE, db=common["db"], table=common["table"]))
    return entries


def decode_record(layout: str, configured_keys: dict[str, list[str]], record: RawRecord) -> list[dict]:
    text = payload_text(record.value)
    message = object_of(text, JSON_READING)
    try:
        entries = _message_entries(message, layout, configured_keys)
    except _Malformed:
        raise not_json(text) from None
    if len(entries) > 1 and escapes_surrogate(text) and not _unicode(entries):
        # A lone surrogate in what several rows carry (or in one of them): the message is not Unicode text, and is
        # quarantined once as a whole rather than row by row (a single row is quarantined by routing, naming its field).
        raise DecodeError(S.REASON_NOT_UTF8, LONE_SURROGATE)
    return entries


def _unicode(entries: list[dict]) -> bool:
    try:
        json.dumps(entries, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _message_entries(message: dict, layout: str, configured_keys: dict[str, list[str]]) -> list[dict]:
    db, table = _text(message.get("database")), _text(message.get("table"))
    es, message_id = _bigint(message, "es"), _bigint(message, "id")
    _bigint(message, "ts")
    is_ddl = message.get("isDdl")
    if is_ddl is not None and not isinstance(is_ddl, bool):
        raise _Malformed("isDdl")
    pk_names = message.get("pkNames")
    if pk_names is not None and not isinstance(pk_names, list):
        raise _Malformed("pkNames")
    pk_names = None if pk_names is None else [_text(c) for c in pk_names]
    mysql_types = _text_map(message.get("mysqlType"), "mysqlType") or {}
    message_type = _text(message.get("type"))
    kind = message_type.upper() if message_type is not None else None
    where = {"position": position(es, message_id), "event_time": _event_time(es)}

    if kind == "TRUNCATE":
        return [truncate(db=db, table=table, **where)]
    if is_ddl or kind in DDL_TYPES:
        # DDL is recorded, never applied: the latest-state schema follows the row images' declared types.
        return [control_entry(S.CONTROL_DDL_KIND, _text(message.get("sql")), db=db, table=table)]
    if kind not in ROW_TYPES:
        return [
            quarantine_entry(
                S.REASON_UNKNOWN_OP,
                f"type '{message_type if message_type is not None else 'null'}' is not INSERT, UPDATE, DELETE, "
                "INIT or DDL",
            )
        ]
    # The key columns as routing will settle them: the configured primary key wins over the message's pkNames.
    key_columns = configured_keys.get(table_id_of(db, None, table)) or pk_names or []
    spark_types = {column: mysql_type_name_to_spark(t) for column, t in mysql_types.items() if t is not None}
    common = {"db": db, "table": table, "key_columns": pk_names, "column_types": spark_types, **where}
    return _row_entries(message, ROW_TYPES[kind], layout, key_columns, common)


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    """Every record through the Python decoder (the reference the native path is held to)."""
    keys = {tid: list(t.primary_key) for tid, t in pipeline.tables.items() if t.primary_key}
    return decode_with_python(records, partial(decode_record, layout_of(pipeline), keys), pipeline)


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether Spark's JSON reader decodes what ``canal_native`` vouches for, the Python decoder the rest
    (``native_json.reader_chooses_native``)."""
    return reader_chooses_native(pipeline, record_count)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag (``native_json``), or None when the native
    path would take nothing (the legacy layout, or no table of the input has a plan): then every record goes to
    Python without a parse for nothing. ``record_count``, when known, lets the table pass sample a large input."""
    from cdcreplay.formats import canal_native

    if not canal_native.native_layout(pipeline):
        return None
    plans = canal_native.table_plans(records, pipeline, sample_rate(record_count))
    return canal_native.native_rows(records, pipeline, plans) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
