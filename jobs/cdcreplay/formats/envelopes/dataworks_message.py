"""What the two DataWorks JSON decoders (``dataworks_json`` in Python, ``dataworks_native`` in Spark's JSON reader)
share: the format id, the ops, the DataWorks types and the message as Spark's JSON reader reads it."""

from __future__ import annotations

import re

FORMAT_ID = "dataworks-json"
ROW_ID = "#alibaba_rds_row_id#"  # the column DataWorks adds to a table without a primary key
BEFORE_OP, AFTER_OP = "UPDATE_BEFOR", "UPDATE_AFTER"
DDL_OPS = ("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX")
TRANSACTION_OPS = ("TRANSACTION_BEGIN", "TRANSACTION_END", "GTID", "XACOMMIT", "XAROLLBACK")
# schema.dataColumn[].type (upper case) -> Spark type; an unknown name is kept as string.
DATAWORKS_TYPES = {
    "LONG": "bigint",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "STRING": "string",
    "BYTES": "binary",
    "DATE": "timestamp_ntz",
}
OFFSET_ZONE = re.compile(r"^[+-]\d{2}:\d{2}$")
# A message as the decoder reads it: its schema from when the decoder was Spark expressions, which
# ``from_json_in_python`` keeps in Python (a field of another JSON type makes the message unreadable on both paths).
IMAGE_DDL = "struct<dataColumn: map<string,string>>"
MESSAGE_DDL = (
    "schema struct<dataColumn: array<struct<name: string, type: string>>, primaryKey: array<string>, "
    "source: struct<dbType: string, dbVersion: string, dbName: string, schemaName: string, tableName: string>>, "
    f"payload struct<before: {IMAGE_DDL}, after: {IMAGE_DDL}, sequenceId: string, scn: string, op: string, "
    "timestamp: struct<eventTime: bigint, systemTime: bigint, checkpointTime: bigint>, "
    "ddl: struct<text: string, ddlMeta: string>>, "
    "version string"
)


def declared_type(type_name: str | None) -> str:
    """The Spark type of a ``schema.dataColumn`` type name (unknown or null: string)."""
    return DATAWORKS_TYPES.get(type_name.upper() if type_name is not None else None) or "string"
