"""Debezium change events serialized by Kafka Connect's JsonConverter, with or without schemas (docs/format-spec.md e).

The Kafka value is the JSON text itself; it is parsed in Python (``json_reader.EXACT``: numbers keep their exact
value) and handed to the shared envelope logic of ``debezium_events``: op mapping, snapshot markers, connector
positions, type conversion, MongoDB documents.

Every message of a topic repeats the same Connect schema. JsonConverter writes ``{"schema":...,"payload":...}``, so
the schema's text is cut out without parsing and its SchemaInfo is looked up by that text: only the payload is parsed
per record. Any other layout is parsed whole.

With ``options.reader: spark`` the records ``debezium_native`` vouches for (row changes of MySQL, PostgreSQL and
Oracle connectors) are decoded by Spark's JSON reader instead, and only the rest here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.debezium_native import FORMAT_ID as FORMAT_ID
from cdcreplay.formats.debezium_native import native_rows, schema_plans
from cdcreplay.formats.envelopes.debezium_events import SchemaInfo, event_entries, schema_info
from cdcreplay.formats.python_rows import RawRecord, decode_with_python
from cdcreplay.formats.wire.json_reader import EXACT, payload_text
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

JSON_READING = EXACT  # how its messages' JSON is read (``json_reader``)

MAX_CACHED_SCHEMAS = 1024
# (start of a wrapped value, separator before the payload): JsonConverter's compact text, and json.dumps' default.
LAYOUTS = (('{"schema":', ',"payload":'), ('{"schema": ', ', "payload": '))

_schemas: dict[str, SchemaInfo] = {}


def _cached_schema(schema_text: str) -> SchemaInfo | None:
    """SchemaInfo of a schema's JSON text, or None when the text is not one complete JSON value."""
    found = _schemas.get(schema_text)
    if found is None:
        try:
            schema = JSON_READING.parse(schema_text)
        except ValueError:
            return None
        if len(_schemas) >= MAX_CACHED_SCHEMAS:
            _schemas.clear()
        found = _schemas[schema_text] = schema_info(schema)
    return found


def _split_wrapped(text: str) -> tuple[dict, SchemaInfo] | None:
    """({"payload": payload}, SchemaInfo) of ``{"schema": S, "payload": P}`` text, or None for any other layout.

    Sound without parsing S each time: S is only cached once it parsed as one complete JSON value, and a complete
    value followed by the separator is exactly the schema member; P must then parse up to the closing brace.
    """
    for start, separator in LAYOUTS:
        if not text.startswith(start) or not text.endswith("}"):
            continue
        cut = text.find(separator, len(start))
        if cut < 0:
            continue
        info = _cached_schema(text[len(start) : cut])
        if info is None:
            return None
        try:
            payload = JSON_READING.parse(text[cut + len(separator) : -1])
        except ValueError:
            return None
        return {"payload": payload}, info
    return None


def _parse_key(key: bytes | None):
    if key is None:
        return None
    try:
        return JSON_READING.parse(key.decode("utf-8", errors="replace"))
    except ValueError:
        return None


def decode_record(record: RawRecord) -> list[dict]:
    text = payload_text(record.value)
    split = _split_wrapped(text)
    if split is not None:
        value, info = split
    else:
        try:
            value = JSON_READING.parse(text)
        except ValueError:
            value = None
        info = None
    return event_entries(value, _parse_key(record.key), record, lambda: text, info)


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    """Every record through the Python decoder (the reference the native path is held to)."""
    return decode_with_python(records, decode_record, pipeline)


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether Spark's JSON reader decodes what ``debezium_native`` vouches for, the Python decoder the rest
    (``native_json.reader_chooses_native``)."""
    return reader_chooses_native(pipeline, record_count)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag (``native_json``), or None when no schema of the
    input has a native plan (MongoDB, schemaless JSON): then every record would go to Python anyway, after a parse
    for nothing. ``record_count``, when known, lets the schema pass sample a large input."""
    plans = schema_plans(records, sample_rate(record_count))
    return native_rows(records, pipeline, plans) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
