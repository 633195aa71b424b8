"""Hand-made Qlik Replicate messages for the tests: JSON MD envelopes of table HR.EMP, DT messages, sequences; Avro
data schemas, records and atMSG envelopes."""

from __future__ import annotations

import io
import json

import fastavro

from cdcreplay.formats.envelopes.qlik_envelope import ENVELOPE_SCHEMA


def md(schema_id: str, version: int, columns: list[tuple[str, str, int]], **extra) -> str:
    """A JSON MD envelope; columns are (name, type, primaryKeyPosition) in ordinal order."""
    message = {
        "schemaId": schema_id,
        "lineage": {"server": "s", "task": "t", "schema": "HR", "table": "EMP", "tableVersion": version,
                    "timestamp": "2026-01-01T00:00:00"},
        "tableStructure": {
            "tableColumns": {
                name: {"ordinal": i, "type": qlik_type, "length": 0, "precision": extra.get("precision", 0),
                       "scale": extra.get("scale", 0), "primaryKeyPosition": pk}
                for i, (name, qlik_type, pk) in enumerate(columns, 1)
            }
        },
        "dataSchema": None,
    }  # fmt: skip
    return json.dumps({"magic": "atMSG", "type": "MD", "headers": None, "messageSchemaId": None,
                       "messageSchema": None, "message": message})  # fmt: skip


def dt(operation: str, data, before=None, sequence="", mask="", schema_id=None, counter=1, envelope=True) -> str:
    headers = {"operation": operation, "changeSequence": sequence, "timestamp": "", "columnMask": mask,
               "changeMask": "", "transactionEventCounter": counter}  # fmt: skip
    if schema_id:
        headers["externalSchemaId"] = schema_id
    message = {"data": data, "beforeData": before, "headers": headers}
    if not envelope:
        return json.dumps(message)
    return json.dumps({"magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": None,
                       "messageSchema": None, "message": message})  # fmt: skip


V1 = [("ID", "INT4", 1), ("NAME", "STRING", 0), ("CITY", "STRING", 0), ("SALARY", "NUMERIC", 0)]
V2 = [("ID", "INT4", 1), ("CITY", "STRING", 0), ("NAME", "STRING", 0), ("SALARY", "NUMERIC", 0)]  # CITY moved


def seq(n: int) -> str:
    return f"{20260101000000000 + n:017d}{n:018d}"


# --- Avro ---------------------------------------------------------------------------------------------------------

DATA_NS = "com.attunity.queue.msg.srv.HR.EMP"
HEADERS = {
    "type": "record",
    "name": "Headers",
    "namespace": "com.attunity.queue.msg",
    "fields": [
        {"name": "operation", "type": {"type": "enum", "name": "op", "symbols": ["INSERT", "UPDATE", "DELETE", "REFRESH"]}},
        {"name": "changeSequence", "type": "string"},
        {"name": "columnMask", "type": ["null", "bytes"], "default": None},
        {"name": "transactionEventCounter", "type": ["null", "long"], "default": None},
    ],
}  # fmt: skip


def data_schema(columns: list[tuple[str, object]]) -> dict:
    fields = [{"name": n, "type": ["null", t], "default": None} for n, t in columns]
    return {
        "type": "record",
        "name": "DataRecord",
        "namespace": DATA_NS,
        "fields": [
            {"name": "data", "type": {"type": "record", "name": "Data", "fields": fields}},
            {"name": "beforeData", "type": ["null", f"{DATA_NS}.Data"], "default": None},
            {"name": "headers", "type": HEADERS},
        ],
    }


def avro(schema, record) -> bytes:
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(schema), record)
    return stream.getvalue()


def envelope(kind: str, body: bytes, schema_id=None, schema_text=None) -> bytes:
    return avro(
        ENVELOPE_SCHEMA,
        {"magic": b"atMSG", "type": kind, "headers": None, "messageSchemaId": schema_id,
         "messageSchema": schema_text, "message": body},
    )  # fmt: skip
