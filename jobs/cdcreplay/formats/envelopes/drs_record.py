"""What the two DRS Avro decoders (``drs_avro`` with fastavro, ``drs_avro_native`` with Spark's ``from_avro``) share:
the format id, the operations and the table a record names."""

from __future__ import annotations

from cdcreplay import schema as S
from cdcreplay.formats.python_rows import DecodeError

FORMAT_ID = "drs-avro"
ROW_OPERATIONS = {"INSERT": S.OP_INSERT, "INIT": S.OP_SNAPSHOT, "UPDATE": S.OP_UPDATE, "DELETE": S.OP_DELETE}
CONTROL_OPERATIONS = {
    "DDL": S.CONTROL_DDL_KIND,
    "INIT_DDL": S.CONTROL_DDL_KIND,
    "BEGIN": S.CONTROL_TRANSACTION,
    "COMMIT": S.CONTROL_TRANSACTION,
    "ROLLBACK": S.CONTROL_TRANSACTION,
    "HEARTBEAT": S.CONTROL_HEARTBEAT,
}


def split_table_name(name: str) -> tuple[str | None, str | None, str]:
    """``"db"."table"`` / ``db.schema.table`` -> (db, schema, table): dots inside double quotes belong to the name,
    a doubled quote inside quotes is one quote."""
    parts, current, quoted, at = [], [], False, 0
    while at < len(name):
        char = name[at]
        if char == '"':
            if quoted and name[at + 1 : at + 2] == '"':
                current.append('"')
                at += 2
                continue
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        at += 1
    if quoted:
        raise DecodeError(S.REASON_MISSING_TABLE, f"tableName {name!r} has an unclosed quote")
    parts.append("".join(current))
    if any(part == "" for part in parts) or len(parts) > 3:
        raise DecodeError(S.REASON_MISSING_TABLE, f"tableName {name!r} is not table, db.table or db.schema.table")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return None, None, parts[0]
