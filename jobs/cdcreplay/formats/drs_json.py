"""Huawei Cloud DRS JSON and JSON-C for relational sources (docs/format-spec.md sections c1-c3).

Three registered variants (each a two-line module naming its ``Variant``: drs_json_mysql, drs_json_c,
drs_json_rdbms) share one canal-like envelope (``data``/``old`` arrays of row objects whose values are JSON
strings, ``type`` INSERT/UPDATE/DELETE/DDL, full sync ``INIT``/``INIT_DDL``, ``id``, ``es``, ``pkNames``):

  drs-json-mysql   MySQL / GaussDB(for MySQL), "JSON": types from ``mysqlType`` (``sqlType``, JDBC codes, for a column
                   ``mysqlType`` lacks); an UPDATE's ``old[i]`` is the FULL before image; a DELETE's row is in ``old``.
  drs-json-c       MySQL / GaussDB(for MySQL), "JSON-C": as above, but a DELETE's row is in ``data`` and MySQL TIMESTAMP
                   values are wall-clock text (read in option ``timestamp_zone``, default UTC).
  drs-json-rdbms   Oracle / PostgreSQL / GaussDB / SQL Server: types from ``columnType`` (names without length; empty
                   for Oracle and SQL Server: declare ``tables.<t>.column_types``), ``schema`` is part of the table id,
                   ``opType`` mirrors ``type``, ``pkNames`` may be null (declare ``tables.<t>.primary_key``).

Semantics (the same for the three):
- ``INIT`` rows are snapshot rows; ``INIT_DDL`` and DDL (``isDdl``) go to the control log -- except a DDL whose SQL is
  ``TRUNCATE``, which empties the table (a changelog ``truncate``).
- An UPDATE whose before and after images differ in a key column moves the row: a delete of the old key, then the
  update of the new key (the vendor's own MySQL sample is such an update: ``id`` 103 -> 104).
- A DELETE without its row image (``old`` for JSON, ``data`` for JSON-C) is quarantined (``missing_image``).
- Order: ``id`` alone, DRS's event serial number, monotonic per task. ``es`` is never used: MySQL stamps a binlog event
  with its statement's start (a long transaction commits after shorter, later ones), and for PostgreSQL ``es`` is the
  commit time of the *previous* transaction. ``es`` is kept as the event time, for display.
- Table names are kept verbatim, trailing spaces included (the vendor sample's table is ``"test "``).

Values -> canonical text (what ``CAST(text AS <type>)`` reads back):
  MySQL binary/varbinary/blob   Java signed-byte list ``"[106, -1]"`` (``"[]"`` empty) -> base64 of the bytes
  MySQL timestamp (JSON)        epoch seconds with up to 6 fraction digits ``"1624614713.201"`` -> UTC
                                ``yyyy-MM-dd HH:mm:ss.ffffff`` (Spark ``timestamp``)
  MySQL timestamp (JSON-C)      ``yyyy-mm-dd hh:mm:ss[.f]`` in ``timestamp_zone`` -> the same UTC text
  MySQL float/double            Java notation (``"1.2510357E7"``) is read by CAST as it is
  MySQL decimal                 exact text; ``mysqlType`` carries no precision here, so it stays a string unless
                                ``column_types`` declares ``decimal(p,s)``; likewise ``tinyint`` is int, not boolean
  PostgreSQL/GaussDB bytea      hex (``"62797465..."``, an optional ``\\x`` prefix accepted) -> base64
  timestamptz                   ``"2010-01-01 14:30:00+08"`` -> UTC text (Spark ``timestamp``)
  boolean, ranges, json(b), bit kept as text (boolean reads back with CAST; the others are strings)
A value present in the message that its type cannot decode (a byte out of range, a malformed epoch, odd hex) sends the
record to quarantine (``bad_value``) naming the columns: never a silent NULL.

MySQL type names map with :func:`cdcreplay.value_types.mysql_type_name_to_spark`; PostgreSQL/GaussDB names with
:func:`~cdcreplay.formats.envelopes.drs_variants.rdbms_type_to_spark`; JDBC codes with
:func:`~cdcreplay.formats.envelopes.drs_variants.jdbc_code_to_spark` (all documented in their docstrings).

Decoded in Python (``python_rows``): one JSON parse per message, no per-value Spark lambdas. The results are the
ones the earlier Spark-expression decoder gave, so the parse and the value conversions follow Spark's rules where
they matter: the message is read as Spark's ``from_json`` read it, by the reader Shareplex and DataWorks share
(``from_json_in_python``: a non-string value of a text field is its compact JSON text, numbers as Java prints them;
text after the object ignored; numbers over 1000 digits and nesting over 1000 levels unreadable; a field of the wrong
type makes the message unreadable), and timestamp text is parsed as Spark's ``CAST(text AS timestamp)`` parses it. Two
departures from Spark, as for every JSON format: single-quoted strings are not JSON (``not_json``), and a lone UTF-16
surrogate escape is not turned into "?": a record whose decoded row would hold one is quarantined ``not_utf8``.
With ``options.reader`` spark (auto: from 500,000 records) Spark's JSON reader decodes the messages ``drs_native``
vouches for, and this decoder the rest (:class:`VariantDecoder`).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats import drs_native
from cdcreplay.formats.envelopes.canal_layout import DDL_TYPES, ROW_TYPES
from cdcreplay.formats.envelopes.drs_variants import (
    Variant,
    declared_types,
)
from cdcreplay.formats.python_rows import (
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    truncate,
)
from cdcreplay.formats.routing import KIND_QUARANTINE, Routing, table_id_of
from cdcreplay.formats.values.text_casts import (
    INT64,
    MAX_MICROS,
    MIN_MICROS,
    SPARK_BLANKS,
    spark_timestamp_micros,
    spark_zone,
    timestamp_text,
    wall_clock_to_utc,
)
from cdcreplay.formats.wire.from_json_in_python import (
    Mismatch,
    bigint,
    boolean,
    text,
    text_array,
    text_map,
    text_map_array,
)
from cdcreplay.formats.wire.json_reader import AS_SPARK_READ, not_json, read_object
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

JSON_READING = AS_SPARK_READ  # how its messages' JSON is read (``json_reader``)

# --- Spark's text rules the values follow ----------------------------------------------------------------------------

# Java regex: \s is ASCII whitespace; `.` stops at any line terminator; `$` also matches before a final terminator.
JAVA_SPACE = "[ \\t\\n\\x0b\\f\\r]"
JAVA_FINAL_TERMINATORS = ("\r\n", "\n", "\r", "\u0085", "\u2028", "\u2029")


def _java_fullmatch(pattern: re.Pattern, text: str) -> re.Match | None:
    """``text`` matches Java's ``^pattern$``: at the end, or before one final line terminator."""
    match = pattern.fullmatch(text)
    if match is None:
        for terminator in JAVA_FINAL_TERMINATORS:
            if text.endswith(terminator):
                return pattern.fullmatch(text[: -len(terminator)])
    return match


# --- values --------------------------------------------------------------------------------------------------------

JAVA_BYTE_LIST = re.compile(
    rf"\[{JAVA_SPACE}*(-?[0-9]{{1,3}}({JAVA_SPACE}*,{JAVA_SPACE}*-?[0-9]{{1,3}})*)?{JAVA_SPACE}*\]"
)
_BYTE_LIST_ITEMS = re.compile(rf"\[{JAVA_SPACE}*([^\n\r\u0085\u2028\u2029]*?){JAVA_SPACE}*\]")
_BYTE_LIST_SEPARATOR = re.compile(rf"{JAVA_SPACE}*,{JAVA_SPACE}*")
_EPOCH_SECONDS = re.compile(r"-?[0-9]{1,12}(\.[0-9]{1,6})?")
_HEX = re.compile(r"([0-9a-fA-F]{2})*")


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def java_bytes_to_base64(value: str) -> str | None:
    """``"[106, -1, 0]"`` (Java's Arrays.toString of a byte[]) -> base64; None unless every item is in -128..127."""
    if _java_fullmatch(JAVA_BYTE_LIST, value) is None:
        return None
    # The items as the Spark expression read them: the text between the brackets, up to a line break.
    items = _java_fullmatch(_BYTE_LIST_ITEMS, value)
    inner = items.group(1) if items is not None else ""
    numbers = [int(item) for item in _BYTE_LIST_SEPARATOR.split(inner)] if inner else []
    if not all(-128 <= number <= 127 for number in numbers):
        return None
    return _base64(bytes(number % 256 for number in numbers))


def hex_to_base64(value: str) -> str | None:
    """PostgreSQL bytea hex output (``"62797465"``, optional ``\\x``) -> base64; None for anything else."""
    digits = value.removeprefix("\\x")
    return _base64(bytes.fromhex(digits)) if _HEX.fullmatch(digits) else None


def epoch_seconds_to_text(value: str) -> str | None:
    """``"1624614713.201"`` (MySQL TIMESTAMP as DRS JSON prints it) -> UTC timestamp text; None if malformed."""
    if _java_fullmatch(_EPOCH_SECONDS, value) is None:
        return None
    text = value.strip(SPARK_BLANKS)  # what CAST trims (a final line break the pattern allows)
    if _EPOCH_SECONDS.fullmatch(text) is None:
        return None
    seconds, _, fraction = text.lstrip("-").partition(".")
    micros = int(seconds) * 1_000_000 + int(fraction.ljust(6, "0"))
    micros = -micros if text.startswith("-") else micros
    return timestamp_text(micros) if MIN_MICROS <= micros <= MAX_MICROS else None


def zoned_text_to_utc(value: str, zone: str | None) -> str | None:
    """Timestamp text -> UTC timestamp text. With ``zone``, the text is a wall clock there; else an offset in the
    text (``+08``) or UTC applies."""
    micros = spark_timestamp_micros(value)
    if micros is not None and zone and zone != "UTC":
        # Spark's to_utc_timestamp: the UTC wall clock of the instant, read as a wall clock in `zone`.
        micros = wall_clock_to_utc(micros, spark_zone(zone))
    if micros is None or not INT64[0] <= micros <= INT64[1]:
        return None
    return timestamp_text(micros)


def _canonical_image(image: dict | None, types: dict[str, str], variant: Variant, zone: str | None):
    """A row object of the message -> (canonical text by the column's effective Spark type, columns that did not
    convert: present in the message, NULL after conversion)."""
    if image is None:
        return None, []
    converted, lost = {}, []
    for column, value in image.items():
        spark_type = types.get(column)
        if value is not None and spark_type in ("binary", "timestamp"):
            if variant.types_from == "rdbms":
                text = hex_to_base64(value) if spark_type == "binary" else zoned_text_to_utc(value, None)
            elif spark_type == "binary":
                text = java_bytes_to_base64(value)
            elif variant.mysql_timestamp == "epoch":
                text = epoch_seconds_to_text(value)
            else:
                text = zoned_text_to_utc(value, zone)
            if text is None:
                lost.append(column)
            value = text
        converted[column] = value
    return converted, lost


# --- entries -------------------------------------------------------------------------------------------------------


def _quarantine(reason: str, detail: str | None) -> dict:
    return {"record_kind": KIND_QUARANTINE, "reason": reason, "detail": detail}


def _event_time(millis: int | None) -> datetime | None:
    if millis is None:
        return None
    micros = millis * 1000
    if not INT64[0] <= micros <= INT64[1] or not MIN_MICROS <= micros <= MAX_MICROS:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


def _row_entries(
    images: dict, type_name: str, row_op: str, variant: Variant, zone: str, keys, types, common: dict
) -> list[dict]:
    """Changelog entries for the rows of one INSERT/INIT/UPDATE/DELETE message (a key-moving UPDATE gives two)."""
    is_update, is_delete = row_op == S.OP_UPDATE, row_op == S.OP_DELETE
    old = images["old"]
    rows = images[variant.delete_rows if is_delete else "data"]
    if not rows:
        if is_delete:
            detail = f"DELETE without the deleted row: `{variant.delete_rows}` is null or empty"
        else:
            detail = f"type {type_name} message without rows in `data`"
        return [_quarantine(S.REASON_MISSING_IMAGE, detail)]
    entries = []
    for index, raw_row in enumerate(rows):
        # An UPDATE's `old[i]` is its FULL before image. Past the end of a shorter `old` there is none (the
        # Spark-expression decoder before this one failed the whole run on such a message).
        raw_old = old[index] if is_update and old is not None and index < len(old) else None
        row, lost = _canonical_image(raw_row, types, variant, zone)
        before, lost_old = _canonical_image(raw_old, types, variant, zone)
        lost += [column for column in lost_old if column not in lost]
        if lost:
            detail = "value cannot be decoded with its declared type in column(s): " + ", ".join(lost)
            entries.append(_quarantine(S.REASON_BAD_VALUE, detail))
            continue
        # A key column whose old value differs from its new one (null-safe) means the row moved to another key.
        moved = (
            is_update
            and before is not None
            and any(k in before and before[k] != (row or {}).get(k) for k in keys or ())
        )
        if moved:
            entries.append(change(S.OP_DELETE, key_image=before, after=None, before=before, row_index=index, **common))
        entries.append(
            change(
                row_op,
                key_image=row,
                after=None if is_delete else row,
                before=row if is_delete else before,
                row_index=index,
                **common,
            )
        )
    return entries


def _message_entries(message: dict, variant: Variant, zone: str, config_keys: dict, config_types: dict) -> list:
    db, schema, table = (text(message.get(name)) for name in ("database", "schema", "table"))
    type_text, op_text = text(message.get("type")), text(message.get("opType"))
    is_ddl = boolean(message.get("isDdl"))
    pk_names = text_array(message.get("pkNames"))
    es, message_id = bigint(message.get("es")), bigint(message.get("id"))
    bigint(message.get("ts"))
    # Every field is read (and checked) whatever the message's type: from_json reads the whole schema.
    maps = {name: text_map(message.get(name)) for name in ("mysqlType", "sqlType", "columnType")}
    rows = {name: text_map_array(message.get(name)) for name in ("data", "old")}
    kind = type_text if type_text is not None else op_text
    kind = None if kind is None else kind.upper()
    identity = {"db": db, "schema": schema, "table": table}
    # DRS's event serial `id` is the one order key (`es` is not: see the module docstring).
    where = {"position": [] if message_id is None else [Decimal(message_id)], "event_time": _event_time(es)}
    if kind == "TRUNCATE":
        return [truncate(**identity, **where)]
    sql = text(message.get("sql"))
    if is_ddl or kind in DDL_TYPES:
        truncates = (
            kind is not None
            and kind != "INIT_DDL"
            and re.match(rf"{JAVA_SPACE}*truncate{JAVA_SPACE}", (sql or "").lower())
        )
        if truncates:
            return [truncate(**identity, **where)]
        # DDL is recorded, never applied: the latest-state schema follows the row images' declared types.
        return [control_entry(S.CONTROL_DDL_KIND, sql, **identity)]
    if kind not in ROW_TYPES:
        named = type_text if type_text is not None else op_text if op_text is not None else "null"
        return [
            _quarantine(S.REASON_UNKNOWN_OP, f"type '{named}' is not INSERT, UPDATE, DELETE, INIT, INIT_DDL or DDL")
        ]
    table_id = table_id_of(db, schema, table)
    # Types and key the config declares win (routing applies them again): values must convert by the same types.
    types = {**declared_types(maps, variant), **config_types.get(table_id, {})}
    keys = config_keys.get(table_id) or pk_names
    common = {**identity, "key_columns": keys, "column_types": types, **where}
    # JSON for RDBMS may name the operation in `opType` alone.
    type_name = type_text if type_text is not None else op_text
    return _row_entries(rows, type_name, ROW_TYPES[kind], variant, zone, keys, types, common)


def decode_record(variant: Variant, zone: str, config_keys: dict, config_types: dict, record: RawRecord) -> list[dict]:
    # not UTF-8 or not a JSON object: DecodeError, quarantined as such
    message = read_object(record.value, JSON_READING)
    try:
        return _message_entries(message, variant, zone, config_keys, config_types)
    except Mismatch:  # a field from_json could not read as its declared type: the message is unreadable
        raise not_json(record.value) from None


def timestamp_zone_of(pipeline: PipelineConfig) -> str:
    """The ``timestamp_zone`` option (JSON-C writes MySQL TIMESTAMP as wall-clock text in it), checked before work."""
    zone = str(pipeline.options.get("timestamp_zone", "UTC"))
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"pipeline {pipeline.name}: options.timestamp_zone {zone!r} is not a time zone; use a region like "
            "'Asia/Shanghai' (the zone of the source MySQL's time_zone setting)"
        ) from None
    return zone


def decode_variant(records: DataFrame, pipeline: PipelineConfig, variant: Variant) -> DataFrame:
    zone = str(pipeline.options.get("timestamp_zone", "UTC"))
    if variant.mysql_timestamp == "wall_clock":
        timestamp_zone_of(pipeline)  # an unknown zone stops the run before any record is read
    configured = Routing.of(pipeline)  # the keys and types the config declares, as routing applies them
    decode = partial(decode_record, variant, zone, configured.keys, configured.types)
    return decode_with_python(records, decode, pipeline)


@dataclass(frozen=True)
class VariantDecoder:
    """The decode functions of one registered variant (its module binds them: ``drs_json_mysql`` ...): in Python,
    and with ``options.reader`` spark (auto: from 500,000 records) natively where ``drs_native`` vouches for a
    record, in Python the rest."""

    variant: Variant

    def decode_in_python(self, records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
        return decode_variant(records, pipeline, self.variant)

    def reads_natively(self, pipeline: PipelineConfig, record_count: int | None = None) -> bool:
        return reader_chooses_native(pipeline, record_count)

    def decode_natively(
        self, records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None
    ) -> DataFrame | None:
        """Every record with its native decoding and the ``native`` flag, or None when no table of the input has a
        plan (then every record goes to Python without a parse for nothing)."""
        if self.variant.mysql_timestamp == "wall_clock":
            timestamp_zone_of(pipeline)
        plans = drs_native.table_plans(records, pipeline, self.variant, sample_rate(record_count))
        return drs_native.native_rows(records, pipeline, self.variant, plans) if plans else None

    def decode(self, records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
        return decode_by_reader(records, pipeline, self.reads_natively, self.decode_natively, self.decode_in_python)

    def functions(self) -> tuple:
        """(decode_in_python, reads_natively, decode_natively, decode): what a registered format module defines."""
        return self.decode_in_python, self.reads_natively, self.decode_natively, self.decode
