"""Debezium change events serialized by Confluent's AvroConverter (formats.md section e, "Avro via Confluent wire").

Each Kafka key and value is Confluent-framed Avro: byte 0x00, the 4-byte big-endian schema id, the Avro binary. The
writer schemas come from the pipeline options: ``schema_registry_dir`` (a folder of ``<id>.avsc`` files) and/or
``schema_registry_export`` (one file exported from the registry: a JSON array, or JSON lines as the ``_schemas`` topic
holds them, of objects with ``id`` and ``schema``). A value whose schema id is in neither is quarantined
(``unknown_schema``) with the id named; bytes that do not decode are ``bad_avro``.

Design: Python (fastavro, through ``avro_wire``) decodes the Avro and renders the record as the text JsonConverter
would have written (``avro_connect``); the native envelope decoder of ``debezium_envelope`` does the rest. So op
mapping, snapshot markers, positions and type conversion exist once, for both Debezium wires.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.avro_connect import ConnectRenderer
from cdcreplay.formats.avro_wire import AvroWire
from cdcreplay.formats.debezium_envelope import decode_envelopes
from cdcreplay.formats.python_rows import DecodeError

FORMAT_ID = "debezium-avro"
OPTION_REGISTRY_DIR = "schema_registry_dir"
OPTION_REGISTRY_EXPORT = "schema_registry_export"
MAX_DETAIL = 500
PASSED_THROUGH = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
OUTPUT_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, value_json string, key_json string, "
    "wire_reason string, wire_detail string"
)


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

    def renderer(self, schema) -> ConnectRenderer:
        found = self._renderers.get(id(schema))
        if found is None or found.schema is not schema:
            found = self._renderers[id(schema)] = ConnectRenderer(schema)
        return found


def _convert(schemas: ConfluentSchemas, key: bytes | None, value: bytes | None) -> tuple:
    """(value JSON, key JSON, reason, detail) of one record; a tombstone passes through untouched."""
    if value is None or len(value) == 0:
        return None, None, None, None
    try:
        schema, record = schemas.decode(value)
        value_json = schemas.renderer(schema).envelope(record)
        key_json = None
        if key is not None and len(key) >= 5 and key[0] == 0:
            key_schema, key_record = schemas.decode(key)
            key_json = schemas.renderer(key_schema).payload(key_record)
        elif key is not None:
            key_json = key.decode("utf-8", errors="strict")  # a JSON (or string) key beside Avro values
        return value_json, key_json, None, None
    except DecodeError as error:
        return None, None, error.reason, str(error)[:MAX_DETAIL]
    except Exception as error:  # never a crashed run: the record is quarantined with what went wrong
        return None, None, S.REASON_DECODE_ERROR, f"{type(error).__name__}: {error}"[:MAX_DETAIL]


def schemas_for(pipeline: PipelineConfig) -> ConfluentSchemas:
    export_path = pipeline.options.get(OPTION_REGISTRY_EXPORT)
    return ConfluentSchemas(
        registry_dir=pipeline.options.get(OPTION_REGISTRY_DIR),
        exported=read_registry_export(export_path) if export_path else {},
        export_path=export_path,
    )


def avro_to_json(records: DataFrame, schemas: ConfluentSchemas) -> DataFrame:
    """Records plus the JsonConverter text of their value and key (or the reason they could not be read)."""

    def run(batches: Iterator) -> Iterator:
        import pyarrow as pa

        for batch in batches:
            keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
            converted = [_convert(schemas, key, value) for key, value in zip(keys, values, strict=True)]
            columns = list(zip(*converted, strict=True)) if converted else [[], [], [], []]
            yield pa.RecordBatch.from_arrays(
                [batch.column(name) for name in PASSED_THROUGH] + [pa.array(list(c), pa.string()) for c in columns],
                names=[*PASSED_THROUGH, "value_json", "key_json", "wire_reason", "wire_detail"],
            )

    return records.select(*PASSED_THROUGH).mapInArrow(run, OUTPUT_DDL)


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    converted = avro_to_json(records, schemas_for(pipeline))
    return decode_envelopes(
        converted,
        F.col("value_json"),
        F.col("key_json"),
        pipeline,
        wire_reason=F.col("wire_reason"),
        wire_detail=F.col("wire_detail"),
    )
