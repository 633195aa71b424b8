"""Alibaba DTS Avro: raw Avro binary of ``com.alibaba.dts.formats.avro.Record`` (docs/format-spec.md section a3).

The reference decoder: Python with fastavro, over Arrow batches by ``python_rows``; the writer schema is DTS's
``Record.avsc`` (option ``writer_schema``, required). Values are typed by ``dts_avro_values``. Spark's ``from_avro``
decodes what it can render exactly (``dts_avro_native``; ``options.reader``), this decoder the rest.

Framing. DTS writes the Record alone (SpecificDatumWriter: no magic byte, no union index). A file written with the
whole ``Record.avsc`` array as a union schema starts with the union branch index of Record instead (byte 0x1a for
index 13 -- the project's synthetic corpus is written that way). Both are read: the value is decoded as a Record;
when it starts with Record's branch index and the Record reading fails or leaves bytes over while reading it as the
union uses every byte, the union reading wins. A value that reads neither way is ``bad_avro``.

Envelope:
  INSERT, UPDATE, DELETE, INIT  row changes (INIT is a full-load row: ``snapshot``). ``fields[i]`` names the i-th
      element of ``beforeImages``/``afterImages`` (positional). An UPDATE's after image may leave columns out
      (EmptyObject, binlog_row_image=MINIMAL): they are absent, not NULL, and compaction keeps their stored values;
      an absent key column keeps the before image's value. An UPDATE whose before and after keys differ moves the
      row: a delete of the old key, then the new row -- which is quarantined as ``partial_key_change`` when its image
      leaves columns out (their values are not in the message).
  DDL                           control ``ddl``; ``afterImages`` is the union's string branch: the SQL text.
  BEGIN, COMMIT, ROLLBACK, ABORT control ``transaction``.
  HEARTBEAT                     control ``heartbeat`` (its event time, the watermark, is sourceTimestamp).
  CHECKPOINT, COMMAND, FILL, FINISH, CONTROL, RDB, NOOP   control ``stream`` (DTS-internal records).
Table: ``objectName`` ``db.table`` or ``db.schema.table``, split on '.', each part with ``\\u002E`` unescaped to '.'.
Key: ``tags.pk_uk_info`` (``{"PRIMARY": [...], "<unique key>": [...]}``): PRIMARY, else the first unique key listed;
``tables.<t>.primary_key`` overrides. Order: ``id`` (unique and increasing in the stream). Event time:
``sourceTimestamp`` (seconds).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats import dts_avro_native
from cdcreplay.formats.debezium_avro_native import planned_native_rows
from cdcreplay.formats.envelopes.dts_record import (
    CONTROL_STREAM,
    FORMAT_ID,
    ROW_OPS,
    STREAM_OPS,
    TRANSACTION_OPS,
    key_columns_of,
    split_object_name,
    union_prefix,
)
from cdcreplay.formats.python_rows import (
    DecodeError,
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    position,
    quarantine_entry,
)
from cdcreplay.formats.values.dts_avro_values import ABSENT, convert
from cdcreplay.formats.wire.avro_wire import AvroWire, check_writer_schema
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _read(schema, body: bytes) -> tuple[dict | None, int, Exception | None]:
    import fastavro

    stream = io.BytesIO(body)
    try:
        return fastavro.schemaless_reader(stream, schema, return_record_name=True), stream.tell(), None
    except Exception as error:
        return None, 0, error


@dataclass(frozen=True)
class DtsReader:
    """Reads one Kafka value as a DTS Record (a path, so it pickles to the Python workers)."""

    writer_schema: str

    def read(self, value: bytes) -> dict:
        schema, body, _ = AvroWire(framing="raw", writer_schema=self.writer_schema).split(value)
        record, used, error = _read(schema, body)
        if record is not None and used == len(body):
            return record
        prefix = union_prefix(self.writer_schema)
        if prefix and body.startswith(prefix):
            union_record, union_used, _ = _read(schema, body[len(prefix) :])
            if union_record is not None and union_used == len(body) - len(prefix):
                return union_record
        if record is not None:
            return record  # bytes after the record are ignored, as Avro's Java readers do
        raise DecodeError(
            S.REASON_BAD_AVRO, f"raw Avro does not decode as a DTS Record: {type(error).__name__}: {error}"
        )


def _image(
    images, fields: list[dict], side: str, is_mysql: bool, types: dict[str, str]
) -> tuple[dict[str, str | None] | None, list[str]]:
    """One image as {column: canonical text}; absent columns are left out and returned apart. Fills ``types``."""
    if images is None:
        return None, []
    if isinstance(images, str):
        raise DecodeError(S.REASON_WRONG_BRANCH, f"{side} holds the DDL text branch in a row change")
    if len(images) != len(fields):
        raise DecodeError(S.REASON_BAD_AVRO, f"{side} has {len(images)} values for {len(fields)} fields")
    image: dict[str, str | None] = {}
    absent: list[str] = []
    for field, value in zip(fields, images, strict=True):
        name = field["name"]
        text, spark_type = convert(name, field["dataTypeNumber"], value, is_mysql)
        if spark_type is not None:
            types.setdefault(name, spark_type)
        if text is ABSENT:
            absent.append(name)
        else:
            image[name] = text
    return image, absent


def _declared_absent(absent: list[str], types: dict[str, str], configured: dict[str, str]) -> bool:
    """Compaction completes an image when a declared column is missing from it: one such column is enough."""
    return not absent or any(name in types or name in configured for name in absent)


def _row_entries(record: dict, row_op: str, table: tuple, configured: dict[str, dict[str, str]]) -> list[dict]:
    db, schema, name = table
    fields = record["fields"]
    if not isinstance(fields, list):
        raise DecodeError(S.REASON_WRONG_BRANCH, f"{record['operation']} record whose fields are not a field list")
    is_mysql = (record.get("source") or {}).get("sourceType") == "MySQL"
    types: dict[str, str] = {}
    after, after_absent = _image(record["afterImages"], fields, "afterImages", is_mysql, types)
    before, _ = _image(record["beforeImages"], fields, "beforeImages", is_mysql, types)
    key_columns = key_columns_of(record.get("tags"))
    table_id = ".".join(part for part in table if part)
    configured_types = configured.get(table_id, {})
    common = {
        "db": db,
        "schema": schema,
        "table": name,
        "column_types": types,
        "position": position(record["id"]),
        "event_time": EPOCH + timedelta(seconds=record["sourceTimestamp"]),
    }
    if row_op == S.OP_DELETE:
        if before is None:
            raise DecodeError(S.REASON_MISSING_IMAGE, "DELETE record without beforeImages")
        return [change(row_op, key_columns=key_columns, after=None, before=before, **common)]
    if after is None:
        raise DecodeError(S.REASON_MISSING_IMAGE, f"{record['operation']} record without afterImages")
    if not _declared_absent(after_absent, types, configured_types):
        raise DecodeError(
            S.REASON_MISSING_IMAGE,
            f"afterImages leaves out {', '.join(after_absent)} (EmptyObject) and the record gives none of their "
            f"types; declare tables.{table_id}.column_types for them so their stored values are kept",
        )
    # An absent key column did not change: the before image names the row.
    key_image = {**(before or {}), **after}
    moved = (
        row_op == S.OP_UPDATE
        and before is not None
        and bool(key_columns)
        and all(c in before and c in after for c in key_columns)
        and any(before[c] != after[c] for c in key_columns)
    )
    if not moved:
        return [change(row_op, key_columns=key_columns, after=after, before=before, key_image=key_image, **common)]
    delete = change(S.OP_DELETE, key_columns=key_columns, after=None, before=before, **common)
    if after_absent:
        return [
            delete,
            quarantine_entry(
                S.REASON_PARTIAL_KEY_CHANGE,
                f"update moves the row to a new key but its after image leaves out {', '.join(after_absent)}; "
                "the old key is deleted, the new row's other values are not in the message (resync the table)",
            ),
        ]
    return [delete, {**change(row_op, key_columns=key_columns, after=after, before=before, **common), "row_index": 1}]


def decode_record(reader: DtsReader, configured: dict[str, dict[str, str]], raw: RawRecord) -> list[dict]:
    """One Kafka value -> entries (see the module docstring)."""
    record = reader.read(raw.value)
    operation = record["operation"]
    if operation in ROW_OPS:
        return _row_entries(record, ROW_OPS[operation], split_object_name(record["objectName"]), configured)
    db, schema, table = split_object_name(record["objectName"])
    identity = {"db": db, "schema": schema, "table": table}
    if operation == "DDL":
        ddl = record["afterImages"] if isinstance(record["afterImages"], str) else None
        return [control_entry(S.CONTROL_DDL_KIND, ddl, **identity)]
    if operation in TRANSACTION_OPS:
        return [control_entry(S.CONTROL_TRANSACTION, f"{operation} txid={record['sourceTxid']} id={record['id']}")]
    if operation == "HEARTBEAT":
        watermark = EPOCH + timedelta(seconds=record["sourceTimestamp"])
        return [{**control_entry(S.CONTROL_HEARTBEAT, watermark.isoformat()), "event_time": watermark}]
    if operation in STREAM_OPS:
        return [control_entry(CONTROL_STREAM, f"{operation} id={record['id']}", **identity)]
    raise DecodeError(S.REASON_UNKNOWN_OP, f"operation {operation!r} is not a DTS operation this decoder knows")


def check_config(pipeline: PipelineConfig) -> None:
    reader_of(pipeline)


def reader_of(pipeline: PipelineConfig) -> DtsReader:
    """The writer schema is needed before any record is read: a missing or broken one stops the run up front."""
    path = pipeline.options.get("writer_schema")
    if not path:
        raise ConfigError(
            f"pipeline {pipeline.name}: {FORMAT_ID} needs options.writer_schema, the path of DTS's Record.avsc "
            "(Alibaba's subscribe_example avro/Record.avsc)"
        )
    check_writer_schema(pipeline)
    return DtsReader(str(path))


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    configured = {table_id: dict(table.column_types) for table_id, table in pipeline.tables.items()}
    return decode_with_python(records, partial(decode_record, reader_of(pipeline), configured), pipeline)


# `reader: auto` decodes natively from this many records on. Measured on 2 cores (docs/benchmarks.md, forty-ninth
# session), the decode stage of the simulator's archives: native 40.0-43.3 s against 29.7 s in Python at 339,305
# records, 132.3 s against 180.5 s at 3,401,522: the two cross near 1,000,000 (from_avro's reading of nested records,
# the JIT's warm-up of the conversions and the sampling pass cost the native path its first ~13 s).
NATIVE_MIN_RECORDS = 1_000_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether ``from_avro`` decodes what ``dts_avro_native`` vouches for, the Python decoder the rest
    (``options.reader``, as ``native_json.reader_chooses_native`` reads it)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag, or None when the session has no spark-avro or
    the writer schema's images are not DTS's value union (then every record is decoded in Python). The control
    records are taken even when no table version of the sample has a plan."""
    reading = dts_avro_native.reading_of(str(reader_of(pipeline).writer_schema))
    return planned_native_rows(dts_avro_native, records, pipeline, reading, record_count)


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
