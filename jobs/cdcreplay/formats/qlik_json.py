"""Qlik Replicate / Qlik Talend Data Integration JSON messages (docs/format-spec.md section d).

A value is either a bare data message ``{data, beforeData, headers}`` or the envelope
``{magic: "atMSG", type: "DT"|"MD", headers, messageSchemaId, messageSchema, message}``. Values are JSON text
(Replicate writes even numbers as strings); their types come from the metadata message of the table version.
Semantics, metadata lookup and ordering: ``qlik_envelope``. With ``options.reader`` spark (auto: from 1,000,000
records) Spark's JSON reader decodes the data messages ``qlik_native`` vouches for, and this decoder the rest.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import qlik_native
from cdcreplay.formats.envelopes.qlik_envelope import (
    ENVELOPE_MAGIC,
    DataMessage,
    MetadataIndex,
    QlikMetadata,
    changes,
    collect_metadata,
    decode_qlik,
    json_text,
    message_dict,
    metadata_control,
    metadata_from_message,
)
from cdcreplay.formats.python_rows import DecodeError, RawRecord
from cdcreplay.formats.wire.json_reader import PLAIN, read_object
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

FORMAT_ID = "qlik-json"
JSON_READING = PLAIN  # how its messages' JSON is read (``json_reader``)


def _document(record: RawRecord) -> dict:
    return read_object(record.value, JSON_READING)


def unwrap(document: dict) -> tuple[str, str | None, dict]:
    """(message type DT/MD, the schema id the envelope names, the message body)."""
    if document.get("magic") == ENVELOPE_MAGIC:
        kind = str(document.get("type") or "").upper()
        if kind not in ("DT", "MD"):
            raise DecodeError(S.REASON_UNKNOWN_OP, f"envelope type {document.get('type')!r} is neither DT nor MD")
        schema_id = document.get("messageSchemaId")
        return kind, None if schema_id is None else str(schema_id), message_dict(document.get("message"))
    if "lineage" in document or "tableStructure" in document:
        return "MD", None, document
    if any(name in document for name in ("data", "beforeData", "headers")):
        return "DT", None, document
    raise DecodeError(S.REASON_UNKNOWN_OP, "neither a Qlik data message (data/beforeData/headers) nor an envelope")


def parse_metadata(record: RawRecord) -> tuple[QlikMetadata, None] | None:
    kind, _, message = unwrap(_document(record))
    if kind != "MD":
        return None
    return metadata_from_message(message, record.topic, record.timestamp), None


def metadata_candidates(value: Column) -> Column:
    text = value.cast("string")
    return text.contains('"MD"') | text.contains('"tableStructure"')


def _image(image, types: dict[str, str]) -> dict | None:
    if image is None:
        return None
    if not isinstance(image, dict):
        raise DecodeError(S.REASON_NOT_JSON, "`data`/`beforeData` is not an object")
    return {column: json_text(value, types.get(column, "string"), column) for column, value in image.items()}


def make_decoder(index: MetadataIndex):
    def decode_record(record: RawRecord) -> list[dict]:
        kind, schema_id, message = unwrap(_document(record))
        if kind == "MD":
            return metadata_control(metadata_from_message(message, record.topic, record.timestamp))
        headers = message.get("headers") or {}
        if not isinstance(headers, dict):
            raise DecodeError(S.REASON_NOT_JSON, "`headers` is not an object")
        named = schema_id or headers.get("externalSchemaId")
        md = index.named(str(named)) if named else index.for_topic(record.topic, record.timestamp)
        types = md.spark_types if md else {}
        return changes(
            record,
            DataMessage(
                data=_image(message.get("data"), types),
                before=_image(message.get("beforeData"), types),
                headers=headers,
                schema=md.schema if md else None,
                # Without metadata the topic names the table (Replicate's "separate topic for each table").
                table=md.table if md else record.topic,
                ordinals=md.ordinals if md else {},
                column_types=types,
                key_columns=(md.key_columns or None) if md else None,
            ),
        )

    return decode_record


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    return decode_qlik(records, pipeline, metadata_candidates, parse_metadata, make_decoder)


# `reader: auto` decodes natively from this many records on. Measured on 2 cores (docs/benchmarks.md, fiftieth
# session) at 1,980,432 records only: the decode stage 11% shorter natively. Below, the native path's fixed costs (the
# metadata read twice, the second pass over the archive for the records left to Python, compiling the projection)
# weigh more, as for DTS Avro, whose two paths cross near a million records.
NATIVE_MIN_RECORDS = 1_000_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether Spark's JSON reader decodes what ``qlik_native`` vouches for, the Python decoder the rest
    (``native_json.reader_chooses_native``)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag (``native_json``), or None when no MD message of
    the archive has a native plan (then every record goes to Python without a parse for nothing)."""
    index = collect_metadata(records, pipeline, metadata_candidates, parse_metadata)
    plans = qlik_native.table_plans(index, records, pipeline, sample_rate(record_count))
    return qlik_native.native_rows(records, plans) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
