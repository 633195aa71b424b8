"""Qlik Replicate / Qlik Talend Data Integration messages: the semantics both wires share (docs/format-spec.md d).

A Qlik topic carries two kinds of message:
  MD (metadata)  per table and table version: lineage (server, task, schema, table, tableVersion), the columns with
                 their ``ordinal``, ``type``, ``precision``/``scale`` and ``primaryKeyPosition``, and ``dataSchema``
                 (the Avro schema of the table's data messages). A DDL on the source bumps ``tableVersion`` and a new
                 MD message follows; data messages of the old and the new version can sit in one replay.
  DT (data)      ``data`` (after image), ``beforeData`` (before image, UPDATE only, when enabled) and ``headers``
                 (``operation``, ``changeSequence``, ``transactionEventCounter``, ``columnMask``, ``changeMask``, ...).

Two passes. Metadata is state, like a schema registry: the first pass reads the MD messages of the WHOLE archive
(every topic and time, not only the replayed slice -- they are few) on the driver and indexes them by schema id,
by table and version, by topic and by data schema. The second pass decodes every record with that index.

Which metadata a data message uses: the schema id it names (envelope ``messageSchemaId`` or header
``externalSchemaId``) -- a named id that is not in the archive sends the message to quarantine
(``missing_metadata``); else an embedded Avro schema equal to an MD's ``dataSchema``; else the latest MD (by Kafka
timestamp, not after the message) of the one table whose MD messages share the message's topic. A message with no
metadata at all is decoded as self-describing: table from the Avro record namespace
(``com.attunity.queue.msg.<server>.<schema>.<table>``) or else the Kafka topic name, column ordinals from the Avro
field order (JSON: none, so ``columnMask`` cannot be applied and every column of ``data`` counts as captured), types
from the Avro schema (JSON: text), primary key from ``tables.<table>.primary_key``.

Semantics:
  operation      REFRESH (full-load row) -> snapshot; INSERT, UPDATE, DELETE. DELETE's row is ``beforeData`` or,
                 depending on the task settings, ``data``.
  columnMask     little-endian hex (or, in Avro, bytes) bitmask over column ordinals: bit i = ordinal i+1. A column
                 whose bit is 0 was not captured (Oracle without full supplemental logging): it is left OUT of the
                 image, so the compactor keeps its stored value instead of overwriting it with NULL.
  order          ``changeSequence`` (fixed-width digits, global to the task) then ``transactionEventCounter``.
                 REFRESH rows carry neither: a REFRESH row takes the position of the last change record before it
                 in its Kafka partition (the Kafka offset then puts it right after that change), or none when no
                 change precedes it in the replayed slice -- an initial full load, which precedes every change.
  key change     an UPDATE whose ``beforeData`` has another primary key than ``data`` is a delete of the old key
                 plus an insert of the new one; if the message did not capture every column, the new row cannot
                 be built: the delete stands and the row is quarantined (``partial_key_change``).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from functools import cached_property

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.python_rows import (
    DecodeError,
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    position,
    quarantine_entry,
)
from cdcreplay.formats.wire.json_reader import PLAIN
from cdcreplay.formats.wire.native_json import PENDING

OPERATIONS = {"REFRESH": S.OP_SNAPSHOT, "INSERT": S.OP_INSERT, "UPDATE": S.OP_UPDATE, "DELETE": S.OP_DELETE}
ENVELOPE_MAGIC = "atMSG"
# The Avro wire's envelope, transcribed from Qlik's documentation page "The Replicate envelope"
# (tests/data/conformance/qlik-replicate).
ENVELOPE_SCHEMA = {
    "type": "record",
    "name": "MessageEnvelope",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}
DATA_NAMESPACE = re.compile(r"^com\.attunity\.queue\.msg\.(?P<server>[^.]+)\.(?P<schema>[^.]+)\.(?P<table>[^.]+)$")


# --- metadata -----------------------------------------------------------------------------------------------------


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(stamp: datetime | None) -> datetime | None:
    """Record times as aware UTC datetimes (Arrow hands the workers naive UTC values)."""
    if stamp is None:
        return None
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


@dataclass(frozen=True)
class QlikColumn:
    name: str
    ordinal: int
    qlik_type: str
    precision: int | None
    scale: int | None
    key_position: int


@dataclass(frozen=True)
class QlikMetadata:
    """One MD message: a table version's columns, key and data schema, and where the message sat in Kafka."""

    schema_id: str | None
    schema: str | None
    table: str | None
    table_version: int | None
    columns: tuple[QlikColumn, ...]
    data_schema: str | None
    topic: str
    timestamp: datetime | None

    # Computed once per metadata message, not once per data message: every data message of the table version
    # shares them, and no reader changes them.
    @cached_property
    def key_columns(self) -> list[str]:
        keyed = sorted((c for c in self.columns if c.key_position > 0), key=lambda c: c.key_position)
        return [c.name for c in keyed]

    @cached_property
    def ordinals(self) -> dict[str, int]:
        return {c.name: c.ordinal for c in self.columns}

    @cached_property
    def spark_types(self) -> dict[str, str]:
        return {c.name: qlik_type_to_spark(c.qlik_type, c.precision, c.scale) for c in self.columns}

    def describe(self) -> str:
        return (
            f"table {self.schema}.{self.table} version {self.table_version} schemaId {self.schema_id} "
            f"({len(self.columns)} columns, key {', '.join(self.key_columns) or 'none'})"
        )


def _int(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def metadata_from_message(message: dict, topic: str, timestamp: datetime | None) -> QlikMetadata:
    """An MD message's body (a JSON object or the decoded Avro record) -> QlikMetadata."""
    lineage = message.get("lineage") or {}
    structure = message.get("tableStructure") or {}
    if not isinstance(lineage, dict) or not isinstance(structure, dict):
        raise DecodeError(S.REASON_BAD_VALUE, "metadata `lineage` or `tableStructure` is not an object")
    for part in ("schema", "table"):
        if not isinstance(lineage.get(part), str | None):
            raise DecodeError(S.REASON_BAD_VALUE, f"metadata lineage.{part} is not text")
    table_columns = structure.get("tableColumns") or {}
    if isinstance(table_columns, list):  # tolerate a list of {name, ...} as well as the documented name map
        table_columns = {c.get("name"): c for c in table_columns if isinstance(c, dict)}
    if not isinstance(table_columns, dict):
        raise DecodeError(S.REASON_BAD_VALUE, "metadata tableStructure.tableColumns is not an object")
    columns = []
    for name, props in table_columns.items():
        props = props or {}
        if not isinstance(name, str) or not isinstance(props, dict):
            raise DecodeError(S.REASON_BAD_VALUE, f"metadata column {name!r} is not a named object")
        ordinal = _int(props.get("ordinal"))
        if ordinal is None:
            raise DecodeError(S.REASON_BAD_VALUE, f"metadata column {name!r} has no ordinal")
        columns.append(
            QlikColumn(
                name,
                ordinal,
                str(props.get("type") or "STRING"),
                _int(props.get("precision")),
                _int(props.get("scale")),
                _int(props.get("primaryKeyPosition")) or 0,
            )
        )
    return QlikMetadata(
        schema_id=None if message.get("schemaId") is None else str(message.get("schemaId")),
        schema=lineage.get("schema"),
        table=lineage.get("table"),
        table_version=_int(lineage.get("tableVersion")),
        columns=tuple(sorted(columns, key=lambda c: c.ordinal)),
        data_schema=message.get("dataSchema"),
        topic=topic,
        timestamp=utc(timestamp),
    )


@dataclass
class MetadataIndex:
    """The MD messages of an archive, for the data-message pass (small: one entry per table version)."""

    by_id: dict[str, QlikMetadata] = field(default_factory=dict)
    by_table: dict[tuple, list[QlikMetadata]] = field(default_factory=dict)
    by_topic: dict[str, set] = field(default_factory=dict)
    by_data_schema: dict[str, QlikMetadata] = field(default_factory=dict)

    def add(self, md: QlikMetadata, canonical_data_schema: str | None = None) -> None:
        if md.schema_id is not None:
            self.by_id[md.schema_id] = md
        versions = self.by_table.setdefault((md.schema, md.table), [])
        versions.append(md)
        versions.sort(key=lambda m: (m.timestamp or EPOCH, m.table_version or 0))
        self.by_topic.setdefault(md.topic, set()).add((md.schema, md.table))
        if canonical_data_schema:
            self.by_data_schema[canonical_data_schema] = md

    def named(self, schema_id: str) -> QlikMetadata:
        found = self.by_id.get(schema_id)
        if found is None:
            raise DecodeError(
                S.REASON_MISSING_METADATA,
                f"the metadata message with schemaId {schema_id} is not in the archive; archive the topic Qlik "
                "publishes metadata messages to (or the messages' own topic from the task's start)",
            )
        return found

    def for_topic(self, topic: str, timestamp: datetime | None) -> QlikMetadata | None:
        """The latest MD (not after ``timestamp``) of the single table whose MD messages share ``topic``."""
        tables = self.by_topic.get(topic) or set()
        if len(tables) != 1:
            return None
        timestamp = utc(timestamp)
        versions = self.by_table[next(iter(tables))]
        earlier = [m for m in versions if timestamp is None or m.timestamp is None or m.timestamp <= timestamp]
        return earlier[-1] if earlier else None


def collect_metadata(
    records: DataFrame,
    pipeline: PipelineConfig,
    candidates: Callable[[Column], Column],
    parse: Callable[[RawRecord], tuple[QlikMetadata, str | None] | None],
) -> MetadataIndex:
    """First pass, on the driver: the MD messages of the whole archive behind ``records``.

    ``candidates(value)`` is a cheap Spark filter that keeps every MD message (and possibly others); ``parse`` turns
    a candidate into (metadata, canonical data schema) or None. A candidate that does not parse is left to the
    second pass, which quarantines it with its reason.
    """
    from cdcreplay import archive

    # The records a native pass left to Python are the archive's joined with the pass's pending folder
    # (``native_json.write_decoded``): its files hold no Kafka records.
    files = [name for name in records.inputFiles() if f"/record_kind={PENDING}/" not in name]
    source = archive.read_archive(records.sparkSession, files, pipeline.archive.layout) if files else records
    rows = source.where(candidates(F.col("value"))).select(
        "topic", "partition", "offset", F.unix_micros("timestamp").alias("micros"), "value"
    )
    index = MetadataIndex()
    for row in rows.collect():
        # Epoch micros, not the driver's local-time datetime: compared with the workers' UTC record times.
        stamp = None if row.micros is None else EPOCH + timedelta(microseconds=row.micros)
        raw = RawRecord(row.topic, row.partition, row.offset, stamp, None, row.value, ())
        try:
            parsed = parse(raw)
            if parsed is not None:
                index.add(*parsed)
        except Exception:  # a hostile candidate must not end the run: the second pass quarantines it
            continue
    return index


# --- types and values ---------------------------------------------------------------------------------------------

_QLIK_TYPES = {
    "INT1": "tinyint",
    "INT2": "smallint",
    "INT4": "int",
    "INT8": "bigint",
    "UINT1": "smallint",
    "UINT2": "int",
    "UINT4": "bigint",
    "UINT8": "decimal(20,0)",
    "REAL4": "float",
    "REAL8": "double",
    "BOOLEAN": "boolean",
    "DATE": "date",
    "DATETIME": "timestamp_ntz",  # Replicate's DATETIME carries the source's wall clock, no zone
    "BYTES": "binary",
    "BLOB": "binary",
}


def qlik_type_to_spark(qlik_type: str, precision: int | None, scale: int | None) -> str:
    """A Qlik Replicate data type (``INT4``, ``NUMERIC``, ``kAR_DATA_TYPE_DATETIME``...) -> Spark type."""
    name = qlik_type.upper().removeprefix("KAR_DATA_TYPE_")
    if name == "NUMERIC":
        if precision and 0 < precision <= 38 and 0 <= (scale or 0) <= precision:
            return f"decimal({precision},{scale or 0})"
        return "string"  # wider than DECIMAL(38): exact text
    return _QLIK_TYPES.get(name, "string")  # STRING, WSTRING, CLOB, NCLOB, TIME, anything else


def mask_bits(mask) -> int | None:
    """``columnMask``/``changeMask`` as an int whose bit i is ordinal i+1 (little-endian bytes); None if absent."""
    if mask is None or mask == "":
        return None
    if isinstance(mask, bytes):
        return int.from_bytes(mask, "little")
    text = str(mask).strip()
    if len(text) % 2:
        text = "0" + text
    try:
        return int.from_bytes(bytes.fromhex(text), "little")
    except ValueError:
        raise DecodeError(S.REASON_BAD_VALUE, f"column mask {mask!r} is not hexadecimal") from None


def json_text(value, spark_type: str, column: str) -> str | None:
    """A JSON data value (Replicate writes text; hand-made messages may hold numbers) -> canonical text."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    if spark_type == "binary":  # Replicate renders BYTES/BLOB as hex digits in JSON
        try:
            return base64.b64encode(bytes.fromhex(text)).decode("ascii")
        except ValueError:
            raise DecodeError(S.REASON_BAD_VALUE, f"column {column}: {text[:40]!r} is not hex-encoded bytes") from None
    return text


def avro_text(value) -> str | None:
    """A decoded Avro value -> canonical text. Timestamps are Replicate's zoneless DATETIME: rendered as UTC."""
    if value is None or type(value) is str:  # most values: text, as the column's value already
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        wall = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        return wall.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def event_time(headers: dict, fallback: datetime | None) -> datetime | None:
    """``headers.timestamp``: the change's UTC time as ISO text (CDC only); a number is taken as epoch ms."""
    stamp = headers.get("timestamp")
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=stamp)
    if isinstance(stamp, str) and stamp.strip():
        try:
            parsed = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
        except ValueError:
            return fallback
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return fallback


# --- data messages --------------------------------------------------------------------------------------------------


@dataclass
class DataMessage:
    """One DT message, wire-independent: images already canonical text, plus what the metadata says."""

    data: dict[str, str | None] | None
    before: dict[str, str | None] | None
    headers: dict
    schema: str | None
    table: str | None
    ordinals: dict[str, int]  # column -> ordinal (empty: the columnMask cannot be applied)
    column_types: dict[str, str]
    key_columns: list[str] | None


def _captured(image: dict | None, mask: int | None, ordinals: dict[str, int]) -> dict | None:
    """The columns the message actually carries: a 0 bit in ``columnMask`` means "not captured", not NULL."""
    if image is None or mask is None or not ordinals:
        return image
    return {c: v for c, v in image.items() if c not in ordinals or mask >> (ordinals[c] - 1) & 1}


def _position(headers: dict) -> list:
    sequence = str(headers.get("changeSequence") or "").strip()
    if not sequence:
        return []
    # Position parts are decimal(38,0) in the changelog: a longer number cannot be ordered, so it is not guessed at.
    if not sequence.isdigit():
        raise DecodeError(S.REASON_BAD_VALUE, f"changeSequence {sequence!r} is not a string of digits")
    if len(sequence) > 38:
        raise DecodeError(S.REASON_BAD_VALUE, f"changeSequence {sequence!r} has more than 38 digits")
    counter = _int(headers.get("transactionEventCounter")) or 0
    if abs(counter) >= 10**38:
        raise DecodeError(S.REASON_BAD_VALUE, f"transactionEventCounter {counter} has more than 38 digits")
    return position(sequence, counter)


def changes(record: RawRecord, message: DataMessage) -> list[dict]:
    """The changelog entries of one data message."""
    headers = message.headers
    operation = str(headers.get("operation") or "").upper()
    op = OPERATIONS.get(operation)
    if op is None:
        raise DecodeError(
            S.REASON_UNKNOWN_OP, f"headers.operation {operation or '(none)'!r} is not REFRESH/INSERT/UPDATE/DELETE"
        )
    mask = mask_bits(headers.get("columnMask"))
    data = _captured(message.data, mask, message.ordinals)
    before = _captured(message.before, mask, message.ordinals)
    common = {
        "db": None,
        "schema": message.schema,
        "table": message.table,
        "key_columns": message.key_columns,
        "column_types": message.column_types,
        "position": [] if op == S.OP_SNAPSHOT else _position(headers),
        "event_time": event_time(headers, record.timestamp),
    }
    if op == S.OP_DELETE:
        row = before if before is not None else data  # the deleted row sits in beforeData or in data
        if row is None:
            raise DecodeError(S.REASON_MISSING_IMAGE, "DELETE message with neither `beforeData` nor `data`")
        return [_keyed(change(S.OP_DELETE, after=None, before=row, **common), row, None)]
    keys = message.key_columns or []
    if (
        op == S.OP_UPDATE
        and keys
        and before is not None
        and data is not None
        and all(k in before and k in data for k in keys)
        and any(before[k] != data[k] for k in keys)
    ):
        # A primary-key update: the old key is deleted and the new key gets the row -- which needs every column.
        deleted = _keyed(change(S.OP_DELETE, after=None, before=before, row_index=0, **common), before, None)
        missing = sorted(set(message.column_types) - set(data))
        if missing:
            # Uncaptured columns of the old row are unknown here (they live in the old key's state): building the
            # new row without them would store NULLs. The delete stands; the new row goes to quarantine.
            return [
                deleted,
                quarantine_entry(
                    S.REASON_PARTIAL_KEY_CHANGE,
                    f"UPDATE moves the row to a new key but did not capture {', '.join(missing)}",
                ),
            ]
        return [deleted, _keyed(change(S.OP_INSERT, after=data, before=before, row_index=1, **common), data, None)]
    if data is None:
        raise DecodeError(S.REASON_MISSING_IMAGE, f"{operation} message without `data`")
    return [_keyed(change(op, after=data, before=before, **common), data, before)]


def _keyed(entry: dict, image: dict | None, before: dict | None) -> dict:
    """Key values from the image, completed from the before image (a key column is always in one of them)."""
    entry["key_image"] = {**(before or {}), **(image or {})} if image is not None or before is not None else None
    return entry


def metadata_control(md: QlikMetadata) -> list[dict]:
    """An MD message in the decoded output: a schema-change row of the control log."""
    return [control_entry(S.CONTROL_SCHEMA_CHANGE, md.describe(), schema=md.schema, table=md.table)]


# --- the run ----------------------------------------------------------------------------------------------------------


def _with_refresh_positions(decoded: DataFrame) -> DataFrame:
    """REFRESH rows (snapshot rows without a position) take the position of the last change before them in their
    Kafka partition; their later offset then orders them right after it. None before: they stay first."""
    is_change_position = (
        (F.col("record_kind") == "changelog") & (F.col("op") != S.OP_SNAPSHOT) & (F.size("position") > 0)
    )
    earlier = (
        Window.partitionBy("topic", "partition")
        .orderBy("offset", "row_index")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    previous = F.last(F.when(is_change_position, F.col("position")), ignorenulls=True).over(earlier)
    needs = (F.col("record_kind") == "changelog") & (F.col("op") == S.OP_SNAPSHOT) & (F.size("position") == 0)
    return decoded.withColumn(
        "position", F.when(needs, F.coalesce(previous, F.col("position"))).otherwise(F.col("position"))
    )


def decode_qlik(
    records: DataFrame,
    pipeline: PipelineConfig,
    candidates: Callable[[Column], Column],
    parse_metadata: Callable[[RawRecord], tuple[QlikMetadata, str | None] | None],
    make_decoder: Callable[[MetadataIndex], Callable[[RawRecord], list[dict]]],
) -> DataFrame:
    """Both passes: the archive's metadata on the driver, then every record decoded in Python with it."""
    index = collect_metadata(records, pipeline, candidates, parse_metadata)
    decoded = decode_with_python(records, make_decoder(index), pipeline)
    return _with_refresh_positions(decoded)


def message_dict(value) -> dict:
    """A message body that must be an object (JSON envelopes may also carry it as a JSON string)."""
    if isinstance(value, str):
        try:
            value = PLAIN.parse(value)
        except ValueError:
            raise DecodeError(S.REASON_NOT_JSON, "envelope `message` is text that is not a JSON object") from None
    if not isinstance(value, dict):
        raise DecodeError(S.REASON_NOT_JSON, "envelope `message` is not an object")
    return value


__all__ = [
    "DATA_NAMESPACE",
    "ENVELOPE_MAGIC",
    "ENVELOPE_SCHEMA",
    "DataMessage",
    "MetadataIndex",
    "QlikMetadata",
    "avro_text",
    "changes",
    "decode_qlik",
    "json_text",
    "mask_bits",
    "message_dict",
    "metadata_control",
    "metadata_from_message",
    "qlik_type_to_spark",
]
