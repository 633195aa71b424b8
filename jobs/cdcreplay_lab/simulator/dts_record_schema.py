"""The writer schema of the DTS Avro messages, ``com.alibaba.dts.formats.avro.Record``, as the simulator writes it.

This is the interface definition published by Alibaba Cloud (``Record.avsc`` of the subscribe_example repository, and
the identical schema of the Apache-2.0 aliyun-dts-subscribe-sdk-java), restated here as data so the simulator can
write DTS Avro without a copy of that file: a JSON array of the named types, ``Record`` last. A test checks that its
parsing canonical form equals the vendor file's.
"""

from __future__ import annotations

import json
from pathlib import Path

NAMESPACE = "com.alibaba.dts.formats.avro"


def _record(name: str, *fields: tuple[str, object]) -> dict:
    return {
        "namespace": NAMESPACE,
        "type": "record",
        "name": name,
        "fields": [{"name": field, "type": kind} for field, kind in fields],
    }


def _optional(name: str, kind: object, default=None) -> dict:
    return {"name": name, "default": default, "type": ["null", kind]}


VALUE_BRANCHES = [
    "null",
    *(
        f"{NAMESPACE}.{name}"
        for name in (
            "Integer",
            "Character",
            "Decimal",
            "Float",
            "Timestamp",
            "DateTime",
            "TimestampWithTimeZone",
            "BinaryGeometry",
            "TextGeometry",
            "BinaryObject",
            "TextObject",
            "EmptyObject",
        )
    ),
]
OPERATIONS = [
    "INSERT",
    "UPDATE",
    "DELETE",
    "DDL",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "ABORT",
    "HEARTBEAT",
    "CHECKPOINT",
    "COMMAND",
    "FILL",
    "FINISH",
    "CONTROL",
    "RDB",
    "NOOP",
    "INIT",
]
SOURCE_TYPES = [
    "MySQL",
    "Oracle",
    "SQLServer",
    "PostgreSQL",
    "MongoDB",
    "Redis",
    "DB2",
    "PPAS",
    "DRDS",
    "HBASE",
    "HDFS",
    "FILE",
    "OTHER",
]


def _image(name: str) -> dict:
    return {
        "name": name,
        "default": None,
        "type": ["null", "string", {"type": "array", "items": VALUE_BRANCHES}],
    }


DATETIME = {
    "namespace": NAMESPACE,
    "type": "record",
    "name": "DateTime",
    "fields": [_optional(part, "int") for part in ("year", "month", "day", "hour", "minute", "second", "millis")],
}

RECORD = {
    "namespace": NAMESPACE,
    "type": "record",
    "name": "Record",
    "fields": [
        {"name": "version", "type": "int"},
        {"name": "id", "type": "long"},
        {"name": "sourceTimestamp", "type": "long"},
        {"name": "sourcePosition", "type": "string"},
        {"name": "safeSourcePosition", "type": "string", "default": ""},
        {"name": "sourceTxid", "type": "string", "default": ""},
        {
            "name": "source",
            "type": {
                "namespace": NAMESPACE,
                "name": "Source",
                "type": "record",
                "fields": [
                    {
                        "name": "sourceType",
                        "type": {"namespace": NAMESPACE, "name": "SourceType", "type": "enum", "symbols": SOURCE_TYPES},
                    },
                    {"name": "version", "type": "string"},
                ],
            },
        },
        {"name": "operation", "type": {"name": "Operation", "type": "enum", "symbols": OPERATIONS}},
        _optional("objectName", "string"),
        _optional("processTimestamps", {"type": "array", "items": "long"}),
        {"name": "tags", "default": {}, "type": {"type": "map", "values": "string"}},
        {
            "name": "fields",
            "default": None,
            "type": ["null", "string", {"type": "array", "items": f"{NAMESPACE}.Field"}],
        },
        _image("beforeImages"),
        _image("afterImages"),
        {"name": "bornTimestamp", "default": 0, "type": "long"},
    ],
}

RECORD_SCHEMA: list[dict] = [
    _record("Field", ("name", "string"), ("dataTypeNumber", "int")),
    _record("Integer", ("precision", "int"), ("value", "string")),
    _record("Character", ("charset", "string"), ("value", "bytes")),
    _record("Float", ("value", "double"), ("precision", "int"), ("scale", "int")),
    _record("Decimal", ("value", "string"), ("precision", "int"), ("scale", "int")),
    _record("Timestamp", ("timestamp", "long"), ("millis", "int")),
    DATETIME,
    _record("TimestampWithTimeZone", ("value", "DateTime"), ("timezone", "string")),
    _record("BinaryGeometry", ("type", "string"), ("value", "bytes")),
    _record("TextGeometry", ("type", "string"), ("value", "string")),
    _record("BinaryObject", ("type", "string"), ("value", "bytes")),
    _record("TextObject", ("type", "string"), ("value", "string")),
    {"namespace": NAMESPACE, "type": "enum", "name": "EmptyObject", "symbols": ["NULL", "NONE"]},
    RECORD,
]


def write_record_schema(path: Path) -> Path:
    """Write the schema array as an ``.avsc`` file (what a pipeline's ``writer_schema`` option points at)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(RECORD_SCHEMA, indent=2), encoding="utf-8")
    return path


def parsed_record_schema():
    """The Record schema parsed by fastavro, its named types resolved."""
    import fastavro

    named: dict = {}
    parsed = None
    for item in RECORD_SCHEMA:
        parsed = fastavro.parse_schema(item, named_schemas=named)
    return parsed
