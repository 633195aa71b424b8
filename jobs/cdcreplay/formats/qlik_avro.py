"""Qlik Replicate / Qlik Talend Data Integration Avro messages (docs/format-spec.md section d).

Two wires:
  envelope        raw Avro of ``MessageEnvelope{magic fixed(5) "atMSG", type, headers, messageSchemaId,
                  messageSchema, message bytes}``. ``message`` is the Avro binary of the metadata record (MD; its
                  schema embedded in ``messageSchema``) or of the data record (DT), read with the embedded
                  ``messageSchema`` or with the ``dataSchema`` of the MD message whose ``schemaId`` is
                  ``messageSchemaId``.
  Confluent       with a schema registry: byte 0x00, the 4-byte schema id, the Avro binary of
                  ``DataRecord{data, beforeData, headers}``; schemas from ``schema_registry_dir`` /
                  ``schema_registry_export`` (the same lookup as debezium-avro).
Masks may be hex text or bytes (both little-endian). Avro logical types give the value types when there is no MD
message; with one, its column types win. Semantics, metadata lookup and ordering: ``qlik_envelope``.

This module's decoder reads every record with fastavro; a large run's envelopes are read by Spark's ``from_avro``
first (``qlik_avro_native``, ``options.reader``), which leaves to this decoder what it cannot render exactly.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import qlik_avro_native
from cdcreplay.formats.debezium_avro import ConfluentSchemas, schemas_for
from cdcreplay.formats.debezium_avro import check_config as check_config  # the same registry options
from cdcreplay.formats.debezium_avro_native import from_avro_available
from cdcreplay.formats.envelopes.qlik_envelope import (
    DATA_NAMESPACE,
    ENVELOPE_MAGIC,
    ENVELOPE_SCHEMA,
    DataMessage,
    MetadataIndex,
    QlikMetadata,
    avro_text,
    changes,
    collect_metadata,
    decode_qlik,
    metadata_control,
    metadata_from_message,
)
from cdcreplay.formats.python_rows import DecodeError, RawRecord
from cdcreplay.formats.wire.avro_wire import canonical_form, parsed_schema_text
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

FORMAT_ID = "qlik-avro"
MD_PREFIX = ENVELOPE_MAGIC.encode("ascii") + b"\x04MD"  # fixed magic, then type "MD" (zig-zag length 2 = 0x04)


@lru_cache(maxsize=1)
def _envelope_schema():
    import fastavro

    return fastavro.parse_schema(ENVELOPE_SCHEMA)


def _read(body: bytes, schema, what: str) -> dict:
    import fastavro

    try:
        return fastavro.schemaless_reader(io.BytesIO(body), schema)
    except Exception as error:
        raise DecodeError(
            S.REASON_BAD_AVRO, f"{what} does not decode with its schema: {type(error).__name__}: {error}"
        ) from None


def read_envelope(value: bytes) -> dict:
    return _read(value, _envelope_schema(), "Qlik envelope")


def parse_metadata(record: RawRecord) -> tuple[QlikMetadata, str | None] | None:
    if not record.value.startswith(MD_PREFIX):
        return None
    return _metadata(record, read_envelope(record.value))


def _metadata(record: RawRecord, envelope: dict) -> tuple[QlikMetadata, str | None]:
    if not envelope.get("messageSchema"):
        raise DecodeError(S.REASON_UNKNOWN_SCHEMA, "metadata message without an embedded messageSchema")
    message = _read(envelope["message"], parsed_schema_text(envelope["messageSchema"]), "metadata message")
    md = metadata_from_message(message, record.topic, record.timestamp)
    return md, canonical_form(md.data_schema) if md.data_schema else None


def metadata_candidates(value: Column) -> Column:
    return F.substring(value, 1, len(MD_PREFIX)) == F.lit(bytearray(MD_PREFIX))


# --- the data record's schema: column ordinals and types when no metadata message describes it -------------------


def _record_fields(schema) -> tuple[str | None, list[dict]]:
    """(full name of the data record, the fields of its `data` record) of a parsed DataRecord schema."""
    named = {}

    def collect(node):
        if isinstance(node, list):
            for branch in node:
                collect(branch)
        elif isinstance(node, dict) and node.get("type") == "record":
            named[node["name"]] = node
            for f in node["fields"]:
                collect(f["type"])

    collect(schema)
    data_field = next((f for f in schema.get("fields", ()) if f["name"] == "data"), None)
    if data_field is None:
        raise DecodeError(S.REASON_BAD_AVRO, "the data record has no `data` field")
    data_type = data_field["type"]
    if isinstance(data_type, list):
        data_type = next(b for b in data_type if b != "null")
    if isinstance(data_type, str):
        data_type = named[data_type]
    return schema.get("name"), data_type["fields"]


def _avro_spark_type(avro_type) -> str:
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        avro_type = branches[0] if len(branches) == 1 else "string"
    logical = avro_type.get("logicalType") if isinstance(avro_type, dict) else None
    kind = avro_type.get("type") if isinstance(avro_type, dict) else avro_type
    if logical == "decimal":
        return f"decimal({avro_type.get('precision', 38)},{avro_type.get('scale', 0)})"
    if logical == "date":
        return "date"
    if logical and logical.startswith(("timestamp-", "local-timestamp-")):
        return "timestamp_ntz"  # Replicate's DATETIME is a zoneless wall clock
    if logical and logical.startswith("time-"):
        return "string"
    return {
        "int": "int",
        "long": "bigint",
        "float": "float",
        "double": "double",
        "boolean": "boolean",
        "bytes": "binary",
        "fixed": "binary",
    }.get(kind, "string")


def _plain(value):
    """fastavro with record names returns a union's record as (name, record)."""
    return value[1] if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) else value


def _image(image) -> dict | None:
    image = _plain(image)
    return None if image is None else {column: avro_text(value) for column, value in image.items()}


@dataclass(frozen=True)
class SelfDescribed:
    """What a data record's own Avro schema says when no metadata message describes it: the record's namespace
    names the table (``schema`` None when it does not follow Replicate's naming), the field order gives the ordinals,
    the Avro types give the value types."""

    schema: str | None
    table: str | None
    ordinals: dict[str, int]
    column_types: dict[str, str]


def _self_described(schema) -> SelfDescribed:
    name, fields = _record_fields(schema)
    match = DATA_NAMESPACE.match((name or "").rsplit(".", 1)[0])
    return SelfDescribed(
        match["schema"] if match else None,
        match["table"] if match else None,
        {f["name"]: i for i, f in enumerate(fields, 1)},
        {f["name"]: _avro_spark_type(f["type"]) for f in fields},
    )


# Parsed schemas are cached objects (``parsed_schema``, the registry's), so a schema's identity names it: its layout
# is worked out once per schema, not once per message. Each entry holds its schema, so no other object can take that
# id while the entry lives.
_LAYOUTS: dict[int, tuple[object, SelfDescribed]] = {}


def self_described(schema) -> SelfDescribed:
    found = _LAYOUTS.get(id(schema))
    if found is None:
        if len(_LAYOUTS) >= 1024:
            _LAYOUTS.clear()
        found = _LAYOUTS[id(schema)] = (schema, _self_described(schema))
    return found[1]


def _data_message(record: RawRecord, schema, body_record: dict, md: QlikMetadata | None) -> DataMessage:
    layout = self_described(schema)  # also checks that the record has its `data` field
    headers = _plain(body_record.get("headers")) or {}
    if md is not None:
        schema_name, table = md.schema, md.table
        ordinals, types, keys = md.ordinals, md.spark_types, md.key_columns or None
    else:
        schema_name, table = layout.schema, layout.table or record.topic
        ordinals, types, keys = layout.ordinals, layout.column_types, None
    return DataMessage(
        data=_image(body_record.get("data")),
        before=_image(body_record.get("beforeData")),
        headers=headers,
        schema=schema_name,
        table=table,
        ordinals=ordinals,
        column_types=types,
        key_columns=keys,
    )


def make_decoder(index: MetadataIndex, registry: ConfluentSchemas):
    def decode_record(record: RawRecord) -> list[dict]:
        value = record.value
        if value.startswith(ENVELOPE_MAGIC.encode("ascii")):
            envelope = read_envelope(value)
            kind = str(envelope.get("type") or "").upper()
            if kind == "MD":
                return metadata_control(_metadata(record, envelope)[0])
            if kind != "DT":
                raise DecodeError(S.REASON_UNKNOWN_OP, f"envelope type {envelope.get('type')!r} is neither DT nor MD")
            embedded, schema_id = envelope.get("messageSchema"), envelope.get("messageSchemaId")
            if embedded:
                schema = parsed_schema_text(embedded)
                body = _read(envelope["message"], schema, "data message")
                external = (_plain(body.get("headers")) or {}).get("externalSchemaId")
                md = index.by_data_schema.get(canonical_form(embedded))
                if md is None and external:
                    md = index.by_id.get(str(external))
                if md is None:
                    md = index.for_topic(record.topic, record.timestamp)
            elif schema_id:
                md = index.named(str(schema_id))
                if not md.data_schema:
                    raise DecodeError(S.REASON_MISSING_METADATA, f"metadata message {schema_id} carries no dataSchema")
                schema = parsed_schema_text(md.data_schema)
                body = _read(envelope["message"], schema, f"data message of schema {schema_id}")
            else:
                raise DecodeError(
                    S.REASON_UNKNOWN_SCHEMA, "data envelope with neither messageSchema nor messageSchemaId"
                )
            return changes(record, _data_message(record, schema, body, md))
        if value[:1] == b"\x00":
            schema, body = registry.decode(value)
            external = (_plain(body.get("headers")) or {}).get("externalSchemaId")
            md = index.by_id.get(str(external)) if external else None
            return changes(record, _data_message(record, schema, body, md))
        raise DecodeError(S.REASON_BAD_AVRO, "value is neither a Qlik atMSG envelope nor Confluent-framed Avro")

    return decode_record


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    registry = schemas_for(pipeline)
    return decode_qlik(
        records, pipeline, metadata_candidates, parse_metadata, lambda index: make_decoder(index, registry)
    )


# `reader: auto` decodes natively from this many records on. Measured on 2 cores (docs/benchmarks.md, fifty-seventh
# session), the decode stage of the simulator's archives: native 15.6-16.6 s against 11.7 s in Python at 99,038
# records, 24.3-25.4 s against 18.9-20.6 s at 297,236, 45.4 s against 47.4 s at 990,144, 53.7-55.3 s against
# 79.1-90.8 s at 1,980,432. Below, its fixed costs weigh more: the metadata read twice, the driver's planning of a
# wide projection (4.0 s at 297,236 records), the window's shuffle, the second pass for the records left to Python.
NATIVE_MIN_RECORDS = 1_000_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether ``from_avro`` decodes what ``qlik_avro_native`` vouches for, the Python decoder the rest
    (``options.reader``, as ``native_json.reader_chooses_native`` reads it)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag, or None when the session has no spark-avro or
    no MD message of the archive has a native plan (then every record is decoded in Python)."""
    if not from_avro_available(records.sparkSession, pipeline):
        return None
    index = collect_metadata(records, pipeline, metadata_candidates, parse_metadata)
    plans = qlik_avro_native.table_plans(index, records, pipeline, sample_rate(record_count))
    return qlik_avro_native.native_rows(records, plans) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
