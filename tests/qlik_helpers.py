"""Hand-made Qlik Replicate JSON messages for the tests: MD envelopes of table HR.EMP, DT messages, sequences."""

from __future__ import annotations

import json


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
