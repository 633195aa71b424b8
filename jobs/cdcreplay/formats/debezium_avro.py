"""Debezium change events serialized by Confluent's AvroConverter (docs/format-spec.md e, "Avro via Confluent wire").

Each Kafka key and value is Confluent-framed Avro: byte 0x00, the 4-byte big-endian schema id, the Avro binary. The
writer schemas come from the pipeline options: ``schema_registry_dir`` (a folder of ``<id>.avsc`` files) and/or
``schema_registry_export`` (one file exported from the registry: a JSON array, or JSON lines as the ``_schemas`` topic
holds them, of objects with ``id`` and ``schema``). A value whose schema id is in neither is quarantined
(``unknown_schema``) with the id named; bytes that do not decode are ``bad_avro``.

Design: Python (fastavro, through ``avro_wire``) decodes the Avro and turns the record into the Connect value
JsonConverter would have written (``avro_connect``); the envelope logic of ``debezium_events`` does the rest, on that
value directly. So op mapping, snapshot markers, positions and type conversion exist once, for both Debezium wires.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats.debezium_avro_native import from_avro_available, native_rows, plans_for
from cdcreplay.formats.envelopes.debezium_events import SchemaInfo, event_entries, schema_info
from cdcreplay.formats.python_rows import DecodeError, RawRecord, decode_with_python
from cdcreplay.formats.values.avro_connect import ConnectRenderer
from cdcreplay.formats.wire.avro_wire import AvroWire
from cdcreplay.formats.wire.json_reader import EXACT
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

FORMAT_ID = "debezium-avro"
# `reader: auto` decodes natively from this many records on. from_avro pays for its pass sooner than the JSON reader
# (docs/benchmarks.md, 2026-11-26 on 2 cores, fresh JVMs): native 57-59 s against 70-77 s in Python at 114,825
# records, 82-87 s against 99-114 s at 344,222; smaller runs were not measured.
AVRO_NATIVE_MIN_RECORDS = 100_000
OPTION_REGISTRY_DIR = "schema_registry_dir"
OPTION_REGISTRY_EXPORT = "schema_registry_export"


class RegistryExportError(ValueError):
    """A schema-registry export file that cannot be read; the message names the file and the fix."""


def read_registry_export(path: str) -> dict[int, str]:
    """{schema id: schema text} from a registry export: a JSON array or JSON lines of {"id": .., "schema": ..}."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryExportError(
            f"schema-registry export {path} does not exist; fix options.{OPTION_REGISTRY_EXPORT}"
        ) from None
    stripped = text.strip()
    try:
        documents = (
            json.loads(stripped)
            if stripped.startswith("[")
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
    except json.JSONDecodeError as error:
        raise RegistryExportError(f"schema-registry export {path} is not JSON or JSON lines ({error})") from None
    schemas: dict[int, str] = {}
    for number, document in enumerate(documents, 1):
        if not isinstance(document, dict) or "id" not in document or "schema" not in document:
            raise RegistryExportError(
                f"schema-registry export {path}: entry {number} has no `id` and `schema` "
                "(expected objects as GET /schemas/ids/<id> or the _schemas topic return them)"
            )
        if document.get("deleted"):
            continue
        schema = document["schema"]
        schemas[int(document["id"])] = schema if isinstance(schema, str) else json.dumps(schema)
    return schemas


@lru_cache(maxsize=256)
def _parse_schema_text(text: str):
    import fastavro

    return fastavro.parse_schema(json.loads(text))


@dataclass
class ConfluentSchemas:
    """Writer schemas by Confluent schema id: the exported ones first, then the ``<id>.avsc`` folder."""

    registry_dir: str | None = None
    exported: dict[int, str] = field(default_factory=dict)
    export_path: str | None = None
    _renderers: dict = field(default_factory=dict, repr=False)

    def decode(self, value: bytes) -> tuple[object, dict]:
        """(writer schema, record) of one Confluent-framed key or value."""
        import io

        import fastavro

        if len(value) < 5 or value[0] != 0:
            raise DecodeError(S.REASON_BAD_AVRO, "value is not Confluent-framed Avro (no 0x00 magic byte and id)")
        schema_id = struct.unpack(">I", value[1:5])[0]
        if schema_id in self.exported:
            schema = _parse_schema_text(self.exported[schema_id])
            try:
                record = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, return_record_name=True)
            except Exception as error:
                raise DecodeError(
                    S.REASON_BAD_AVRO,
                    f"confluent id {schema_id} Avro does not decode with its writer schema: "
                    f"{type(error).__name__}: {error}",
                ) from None
            return schema, record
        if self.registry_dir:
            wire = AvroWire(framing="confluent", registry_dir=self.registry_dir)
            schema = wire.split(value)[0]  # raises unknown_schema naming the id and the folder
            return schema, wire.decode(value)
        where = (
            f"is not in the schema-registry export {self.export_path}"
            if self.export_path
            else "cannot be looked up: no schema source is configured"
        )
        raise DecodeError(
            S.REASON_UNKNOWN_SCHEMA,
            f"schema id {schema_id} {where}; set options.{OPTION_REGISTRY_DIR} (folder of <id>.avsc) "
            f"or options.{OPTION_REGISTRY_EXPORT} to a registry export that holds it",
        )

    def schema_text(self, schema_id: int) -> str | None:
        """The writer schema's JSON text for ``schema_id`` as one self-contained schema (the export's, else the
        folder's ``<id>.avsc``), or None when neither holds it as one: an .avsc that lists named types first is
        read by the Python decoder only."""
        if schema_id in self.exported:
            return self.exported[schema_id]
        if not self.registry_dir:
            return None
        path = Path(self.registry_dir) / f"{schema_id}.avsc"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        return None if text.lstrip().startswith("[") else text

    def renderer(self, schema) -> ConnectRenderer:
        found = self._renderers.get(id(schema))
        if found is None or found.schema is not schema:
            found = self._renderers[id(schema)] = ConnectRenderer(schema)
        return found


def check_config(pipeline: PipelineConfig) -> None:
    """A configured schema-registry export that is missing or unreadable stops the run before any record is read."""
    try:
        schemas_for(pipeline)
    except RegistryExportError as error:
        raise ConfigError(f"pipeline {pipeline.name}: {error}") from None


def schemas_for(pipeline: PipelineConfig) -> ConfluentSchemas:
    export_path = pipeline.options.get(OPTION_REGISTRY_EXPORT)
    return ConfluentSchemas(
        registry_dir=pipeline.options.get(OPTION_REGISTRY_DIR),
        exported=read_registry_export(export_path) if export_path else {},
        export_path=export_path,
    )


def _renderer_info(schemas: ConfluentSchemas, schema) -> tuple[ConnectRenderer, SchemaInfo]:
    """The renderer of a writer schema and the SchemaInfo of its Connect schema, both computed once per schema."""
    renderer = schemas.renderer(schema)
    info = getattr(renderer, "envelope_info", None)
    if info is None:
        info = renderer.envelope_info = schema_info(renderer.connect_schema)
    return renderer, info


def _key_value(schemas: ConfluentSchemas, key: bytes | None):
    if key is not None and len(key) >= 5 and key[0] == 0:
        key_schema, key_record = schemas.decode(key)
        return schemas.renderer(key_schema).value(key_record)
    if key is not None:
        text = key.decode("utf-8", errors="strict")  # a JSON (or string) key beside Avro values
        try:
            return EXACT.parse(text)
        except ValueError:
            return None
    return None


def decoder(schemas: ConfluentSchemas):
    """``decode_record`` of this pipeline's schemas: a record -> entries through the shared envelope logic."""

    def decode_record(record: RawRecord) -> list[dict]:
        schema, value = schemas.decode(record.value)
        renderer, info = _renderer_info(schemas, schema)
        key = _key_value(schemas, record.key)
        envelope = {"payload": renderer.value(value)}
        return event_entries(envelope, key, record, lambda: renderer.envelope(value), info)

    return decode_record


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    """Every record through the Python decoder (the reference the native path is held to)."""
    return decode_with_python(records, decoder(schemas_for(pipeline)), pipeline)


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether ``from_avro`` decodes what ``debezium_avro_native`` vouches for, the Python decoder the rest
    (``options.reader``, as ``native_json.reader_chooses_native`` reads it)."""
    return reader_chooses_native(pipeline, record_count, AVRO_NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag, or None when the session has no spark-avro or
    no schema of the input has a native plan (then every record is decoded in Python). ``record_count``, when
    known, lets the schema-id pass sample a large input."""
    if not from_avro_available(records.sparkSession, pipeline):
        return None
    plans, keys = plans_for(records, schemas_for(pipeline), sample_rate(record_count))
    return native_rows(records, pipeline, plans, keys) if plans and keys else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
