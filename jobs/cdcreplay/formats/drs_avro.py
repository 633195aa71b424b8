"""Huawei Cloud DRS Avro (docs/format-spec.md c5).

The vendor's record schema ships only as an attachment of its documentation (``record.rar``) and is not public, so
the writer schema comes from the pipeline config (option ``writer_schema``, an ``.avsc``). What is known of the record
-- from a third-party job that decodes ``com.huawei.hwclouds.drs.avro.Record`` -- is its field names: ``seqno``,
``updateTimestamp`` (ms), ``tableName`` (possibly with ``"`` quotes), ``operation``, ``columnCount``, ``fields``
(objects with ``name``) and ``beforeImages``/``afterImages`` (lists whose element is null or an object with
``value``). This decoder reads exactly those names from whatever record the schema decodes to, and tolerates other
fields.

Wire: values are recognised by their first bytes (:class:`cdcreplay.formats.wire.avro_wire.AvroWire`): ``C3 01`` + the
writer schema's fingerprint is single-object encoding (what the third-party job's ``Record.getDecoder()`` reads),
``00`` + a schema id is Confluent framing (option ``framing: confluent``, or a ``registry_dir`` of ``<id>.avsc``),
anything else raw Avro. With ``framing: confluent`` and no ``registry_dir`` every value decodes with ``writer_schema``.

Mapping onto the changelog:
  operation INSERT / INIT -> insert / snapshot (INIT as in DRS JSON: unverified for Avro); UPDATE -> update (a row
  whose key columns change is a delete of the old key and the update of the new one); DELETE -> delete, by
  ``beforeImages`` (none: ``missing_image``); DDL / INIT_DDL -> control ``ddl``; BEGIN / COMMIT / ROLLBACK -> control
  ``transaction``; HEARTBEAT -> control ``heartbeat``; anything else -> ``unknown_op``.
  ``tableName`` ``"db"."table"`` or ``db.schema.table``: split on dots outside quotes, quotes removed.
  ``fields[i].name`` names ``beforeImages[i]`` / ``afterImages[i]`` (positional); a length mismatch is ``bad_avro``.
  Order: ``seqno`` (the record's sequence number; assumed monotonic per task), then the Kafka coordinates.
  Event time: ``updateTimestamp`` (ms).
Types: a value's Avro type gives its Spark type where it has one (boolean, int/long -> bigint, float/double ->
double, bytes -> binary base64, decimal logical type -> exact text); a string value is a string unless
``tables.<t>.column_types`` declares the column. The record names no primary key: declare ``tables.<t>.primary_key``.
This is the reference decoder, in Python with fastavro; Spark's ``from_avro`` decodes the row changes it can render
exactly (``drs_avro_native``; ``options.reader``), this decoder the rest.
"""

from __future__ import annotations

import base64
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import drs_avro_native
from cdcreplay.formats.debezium_avro_native import planned_native_rows
from cdcreplay.formats.envelopes.drs_record import CONTROL_OPERATIONS, ROW_OPERATIONS, split_table_name
from cdcreplay.formats.python_rows import (
    DecodeError,
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    position,
)
from cdcreplay.formats.wire.avro_wire import AvroWire, check_writer_schema
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _unwrap(element):
    """An image element: null, a record with ``value`` (fastavro names union branches: (name, record)), or a bare
    value."""
    if isinstance(element, tuple) and len(element) == 2 and isinstance(element[0], str):
        element = element[1]
    if isinstance(element, dict):
        if "value" not in element:
            raise DecodeError(S.REASON_BAD_AVRO, f"an image element has no `value`: {sorted(element)}")
        element = element["value"]
        if isinstance(element, tuple) and len(element) == 2 and isinstance(element[0], str):
            element = element[1]
    return element


def typed_text(value) -> tuple[str | None, str | None]:
    """(Spark type or None for "as declared", canonical text) of one Avro value."""
    if value is None:
        return None, None
    if isinstance(value, str):
        return None, value
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, int):
        return "bigint", str(value)
    if isinstance(value, float):  # Avro float arrives as the double of its 32-bit value: exact as a double
        if math.isnan(value):
            return "double", "NaN"
        if math.isinf(value):
            return "double", "Infinity" if value > 0 else "-Infinity"
        return "double", repr(value)
    if isinstance(value, bytes):
        return "binary", base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return "string", format(value, "f")
    raise DecodeError(S.REASON_BAD_VALUE, f"an image value of Avro type {type(value).__name__} has no mapping")


def _image(record: dict, side: str, names: list[str], types: dict) -> dict | None:
    values = record.get(side)
    if values is None:
        return None
    if isinstance(values, tuple):
        values = values[1]
    if len(values) != len(names):
        raise DecodeError(S.REASON_BAD_AVRO, f"{side} has {len(values)} values for {len(names)} fields")
    image = {}
    for name, element in zip(names, values, strict=True):
        spark_type, text = typed_text(_unwrap(element))
        image[name] = text
        if spark_type is not None:
            types[name] = spark_type
    return image


def _field_names(record: dict) -> list[str]:
    fields = record.get("fields")
    if isinstance(fields, tuple):
        fields = fields[1]
    if not isinstance(fields, list):
        raise DecodeError(S.REASON_BAD_AVRO, "the record has no `fields` list")
    names = []
    for field in fields:
        if isinstance(field, tuple):
            field = field[1]
        name = field.get("name") if isinstance(field, dict) else field
        if not isinstance(name, str) or not name:
            raise DecodeError(S.REASON_BAD_AVRO, f"a field has no name: {field!r}")
        names.append(name)
    column_count = record.get("columnCount")
    if isinstance(column_count, int) and column_count != len(names):
        raise DecodeError(S.REASON_BAD_AVRO, f"columnCount {column_count} but {len(names)} fields")
    return names


def _order(record: dict) -> list:
    seqno = record.get("seqno")
    if isinstance(seqno, str) and seqno.isdigit():
        seqno = int(seqno)
    return position(seqno) if isinstance(seqno, int) and not isinstance(seqno, bool) else []


def _event_time(record: dict) -> datetime | None:
    millis = record.get("updateTimestamp")
    if isinstance(millis, int) and not isinstance(millis, bool):
        try:
            return EPOCH + timedelta(milliseconds=millis)
        except OverflowError:
            return None
    return None


def record_entries(record: dict, keys_by_table: dict[str, list[str]]) -> list[dict]:
    """One decoded DRS Avro record -> changelog / control entries (see the module docstring)."""
    operation = record.get("operation")
    if isinstance(operation, tuple):
        operation = operation[1]
    operation = str(operation or "").upper()
    table_name = record.get("tableName")
    db = schema = table = None
    if isinstance(table_name, str) and table_name:
        db, schema, table = split_table_name(table_name)
    if operation in CONTROL_OPERATIONS:
        detail = record.get("sql") if isinstance(record.get("sql"), str) else f"{operation} {table_name or ''}".strip()
        return [control_entry(CONTROL_OPERATIONS[operation], detail, db=db, schema=schema, table=table)]
    if operation not in ROW_OPERATIONS:
        raise DecodeError(S.REASON_UNKNOWN_OP, f"operation {operation!r} is not INSERT, UPDATE, DELETE, INIT or DDL")
    if table is None:
        raise DecodeError(S.REASON_MISSING_TABLE, "the record has no tableName")
    op = ROW_OPERATIONS[operation]
    names = _field_names(record)
    types: dict[str, str] = {}
    before = _image(record, "beforeImages", names, types)
    after = _image(record, "afterImages", names, types)
    table_id = ".".join(part for part in (db, schema, table) if part)
    keys = keys_by_table.get(table_id)
    common = {
        "db": db,
        "schema": schema,
        "table": table,
        "key_columns": keys,
        "column_types": types,
        "position": _order(record),
        "event_time": _event_time(record),
    }
    if op == S.OP_DELETE:
        if not before:
            raise DecodeError(S.REASON_MISSING_IMAGE, "DELETE without the deleted row (beforeImages is empty)")
        return [change(op, after=None, before=before, **common)]
    if not after:
        raise DecodeError(S.REASON_MISSING_IMAGE, f"{operation} without the new row (afterImages is empty)")
    moved = (
        op == S.OP_UPDATE
        and before is not None
        and keys
        and any(k in before and before[k] != after.get(k) for k in keys)
    )
    if moved:
        # The row moved to another key: the old key is deleted, then the new one is written.
        delete_old_key = change(S.OP_DELETE, after=None, before=before, **common)
        return [delete_old_key, change(op, after=after, before=before, **common)]
    return [change(op, after=after, before=before, **common)]


def check_config(pipeline: PipelineConfig) -> None:
    """A configured writer schema that is missing or broken stops the run before any record is read."""
    if pipeline.options.get("writer_schema"):
        check_writer_schema(pipeline)


def wire_of(pipeline: PipelineConfig) -> AvroWire:
    options = pipeline.options
    return AvroWire(
        framing=str(options.get("framing", "auto")),
        writer_schema=options.get("writer_schema"),
        registry_dir=options.get("registry_dir"),
    )


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    wire = wire_of(pipeline)
    # Confluent framing with one configured schema (no registry export): the id names the registry's copy of it.
    confluent_with_writer = wire.framing == "confluent" and not wire.registry_dir
    raw_wire = AvroWire(framing="raw", writer_schema=wire.writer_schema)
    keys_by_table = {tid: list(t.primary_key) for tid, t in pipeline.tables.items() if t.primary_key}

    def decode_record(record: RawRecord) -> list[dict]:
        if confluent_with_writer:
            if len(record.value) < 5 or record.value[0] != 0:
                raise DecodeError(S.REASON_BAD_AVRO, "value is not Confluent-framed Avro (no 0x00 magic byte and id)")
            decoded = raw_wire.decode(record.value[5:])
        else:
            decoded = wire.decode(record.value)
        if isinstance(decoded, tuple):
            decoded = decoded[1]
        if not isinstance(decoded, dict):
            raise DecodeError(S.REASON_BAD_AVRO, f"the writer schema decodes to {type(decoded).__name__}, not a record")
        return record_entries(decoded, keys_by_table)

    return decode_with_python(records, decode_record, pipeline)


# `reader: auto` decodes natively from this many records on. Measured on 2 cores (docs/benchmarks.md, fifty-sixth
# session), the decode stage of the simulator's archives: native 10.0-10.4 s against 7.9-8.7 s in Python at 99,035
# records, 14.6-14.8 s against 16.6-18.6 s at 297,233, 34.5 s against 77-83 s at 1,980,429.
NATIVE_MIN_RECORDS = 200_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether ``from_avro`` decodes what ``drs_avro_native`` vouches for, the Python decoder the rest
    (``options.reader``, as ``native_json.reader_chooses_native`` reads it)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag, or None when the session has no spark-avro or
    the writer schema is not of the shape the native path reads (then every record is decoded in Python)."""
    reading = drs_avro_native.reading_of(wire_of(pipeline))
    return planned_native_rows(drs_avro_native, records, pipeline, reading, record_count)


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
