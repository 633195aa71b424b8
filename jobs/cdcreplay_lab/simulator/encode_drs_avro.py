"""Encode a history as Huawei DRS Avro records of a MySQL source -- under a PROJECT-WRITTEN schema.

The vendor's schema (``record.rar``) is not public. ``DRS_RECORD_SCHEMA`` follows what docs/format-spec.md c5 records
of the record's fields (``version``, ``seqno``, ``shardId``, ``eventid``, ``updateTimestamp``, ``tableName``,
``operation``, ``columnCount``, ``fields`` of objects with ``name``, ``beforeImages``/``afterImages`` of
null-or-``{value}``), with types chosen by this project. The archive folder gets it as ``_drs-record.avsc`` (the
reader skips ``_`` files), and ``tests/data/drs-avro/drs-record.project.avsc`` holds the same schema for the tests.

Records: one per row event, single-object encoded (``C3 01`` + the schema's fingerprint), as the third-party job's
``Record.getDecoder()`` reads them; ``seqno`` a serial; ``tableName`` ``"shop"."customers"`` (quoted); values as text in
DRS JSON's MySQL rendering (``"1"``/``"0"`` booleans, exact decimals, DATETIME ``yyyy-MM-dd HH:mm:ss.SSS``); snapshot
rows ``INIT``; a primary-key change one UPDATE with the old key before and the new key after; the no-op DDL a ``DDL``
record without images. The records carry no key and no types: ``pipeline_settings`` declares both.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import fastavro

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.encode_drs_json import value_renderer
from cdcreplay_lab.simulator.history import EPOCH_UTC, NOOP_DDL_TABLE, TABLES, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

SCHEMA_FILE = "_drs-record.avsc"
DRS_RECORD_SCHEMA = {
    "type": "record",
    "name": "Record",
    "namespace": "com.huawei.hwclouds.drs.avro",
    "doc": "PROJECT-WRITTEN after format-spec.md c5 (field names seen in a third-party job); NOT the vendor's schema.",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "seqno", "type": "long"},
        {"name": "shardId", "type": "string"},
        {"name": "eventid", "type": "string"},
        {"name": "updateTimestamp", "type": "long"},
        {"name": "tableName", "type": "string"},
        {"name": "operation", "type": "string"},
        {"name": "columnCount", "type": "int"},
        {
            "name": "fields",
            "type": {
                "type": "array",
                "items": {"type": "record", "name": "Field", "fields": [{"name": "name", "type": "string"}]},
            },
        },
        {
            "name": "beforeImages",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": [
                        "null",
                        {"type": "record", "name": "Value", "fields": [{"name": "value", "type": "string"}]},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "afterImages", "type": ["null", {"type": "array", "items": ["null", "Value"]}], "default": None},
    ],
}
OPERATIONS = {OP_SNAPSHOT: "INIT", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}


def write_schema(out_dir: Path) -> Path:
    path = Path(out_dir) / SCHEMA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(DRS_RECORD_SCHEMA, indent=2) + "\n", encoding="utf-8")
    return path


def single_object(parsed_schema, record: dict) -> bytes:
    """Avro single-object encoding: C3 01, the 8-byte CRC-64-AVRO fingerprint, the binary record."""
    from cdcreplay.formats.wire.avro_wire import SINGLE_OBJECT_MAGIC, fingerprint

    body = io.BytesIO()
    fastavro.schemaless_writer(body, parsed_schema, record)
    return SINGLE_OBJECT_MAGIC + fingerprint(parsed_schema) + body.getvalue()


class _TableCodec:
    def __init__(self, spec: TableSpec):
        self.spec = spec
        self.renderers = [(c.name, value_renderer("mysql", c.sql_type)) for c in spec.columns]
        self.fields = [{"name": c.name} for c in spec.columns]
        self.table_name = f'"{spec.db}"."{spec.name}"'

    def image(self, row: dict | None) -> list | None:
        if row is None:
            return None
        return [None if row[name] is None else {"value": render(row[name])} for name, render in self.renderers]


def encode_drs_avro(history: History, out_dir: Path, topic: str = "drs.shop.avro") -> Iterator[KafkaRecord]:
    """Kafka records of a DRS Avro topic (see the module docstring); writes the schema into ``out_dir``."""
    parsed = fastavro.parse_schema(json.loads(write_schema(out_dir).read_text(encoding="utf-8")))
    codecs = {table_id: _TableCodec(spec) for table_id, spec in history.tables.items()}
    serial = 0

    def record(codec: _TableCodec, operation: str, time_ms: int, before, after) -> KafkaRecord:
        nonlocal serial
        serial += 1
        value = {
            "version": "1.0",
            "seqno": serial,
            "shardId": "0",
            "eventid": f"{time_ms}-{serial}",
            "updateTimestamp": time_ms,
            "tableName": codec.table_name,
            "operation": operation,
            "columnCount": len(codec.fields) if (before or after) else 0,
            "fields": codec.fields if (before or after) else [],
            "beforeImages": before,
            "afterImages": after,
        }
        timestamp = EPOCH_UTC + timedelta(milliseconds=time_ms)
        return KafkaRecord(topic, 0, serial - 1, timestamp, codec.spec.name.encode(), single_object(parsed, value), [])

    events = history.iter_events()
    for event in events:
        if event.ddl_before:
            yield record(codecs[NOOP_DDL_TABLE], "DDL", event.time_ms, None, None)
        codec = codecs[event.table_id]
        if event.new_key is not None:
            insert = next(events)  # the second half of the key change: one UPDATE row
            yield record(codec, "UPDATE", insert.time_ms, codec.image(event.before), codec.image(insert.after))
            continue
        before = codec.image(event.before) if event.op in (OP_UPDATE, OP_DELETE) else None
        after = codec.image(event.after) if event.op != OP_DELETE else None
        yield record(codec, OPERATIONS[event.op], event.time_ms, before, after)


def pipeline_settings(out_dir: Path) -> dict:
    """The writer schema, and what the records do not carry: every table's key and non-string column types."""
    tables = {}
    for spec in TABLES.values():
        types = {c.name: c.spark_type for c in spec.columns if c.spark_type != "string"}
        tables[spec.table_id] = {"primary_key": list(spec.primary_key), "column_types": types}
    return {"options": {"writer_schema": str(Path(out_dir) / SCHEMA_FILE)}, "tables": tables}
