"""What the two DTS Avro decoders (``dts_avro`` with fastavro, ``dts_avro_native`` with Spark's ``from_avro``) share:
the format id, the operations, the table and key a Record names, and the union framing of the synthetic corpus."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from cdcreplay import schema as S
from cdcreplay.formats.python_rows import DecodeError

FORMAT_ID = "dts-avro"
CONTROL_STREAM = "stream"  # DTS-internal records: CHECKPOINT, COMMAND, FILL, FINISH, CONTROL, RDB, NOOP
ROW_OPS = {"INSERT": S.OP_INSERT, "UPDATE": S.OP_UPDATE, "DELETE": S.OP_DELETE, "INIT": S.OP_SNAPSHOT}
TRANSACTION_OPS = ("BEGIN", "COMMIT", "ROLLBACK", "ABORT")
STREAM_OPS = ("CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP")
ESCAPED_DOT = ("\\u002E", "\\u002e")


@lru_cache(maxsize=16)
def union_prefix(schema_path: str) -> bytes | None:
    """The Avro encoding of Record's branch index in the schema file's array (None for a lone Record schema)."""
    document = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    if not isinstance(document, list):
        return None
    index = next(
        (i for i, item in enumerate(document) if isinstance(item, dict) and item.get("name") == "Record"), None
    )
    if index is None:
        index = len(document) - 1
    zigzag, prefix = index << 1, bytearray()  # an Avro int: zig-zag, then base-128 varint
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            prefix.append(byte | 0x80)
        else:
            prefix.append(byte)
            return bytes(prefix)


def split_object_name(object_name: str | None) -> tuple[str | None, str | None, str | None]:
    """(db, schema, table) of ``db.table`` / ``db.schema.table``; a '.' inside a name arrives escaped as \\u002E."""
    if not object_name:
        return None, None, None
    parts = object_name.split(".")
    for escaped in ESCAPED_DOT:
        parts = [part.replace(escaped, ".") for part in parts]
    if len(parts) == 1:
        return None, None, parts[0]
    if len(parts) == 2:
        return parts[0], None, parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise DecodeError(S.REASON_MISSING_TABLE, f"objectName {object_name!r} is not db.table or db.schema.table")


def key_columns_of(tags: dict | None) -> list[str] | None:
    """PRIMARY of ``tags.pk_uk_info``, else its first unique key; None when the record names none."""
    info = (tags or {}).get("pk_uk_info")
    if not info:
        return None
    try:
        keys = json.loads(info)
    except json.JSONDecodeError:
        raise DecodeError(S.REASON_MISSING_KEY, f"tags.pk_uk_info is not JSON: {info[:100]!r}") from None
    if not isinstance(keys, dict):
        return None
    chosen = keys.get("PRIMARY") or next((columns for columns in keys.values() if columns), None)
    return [str(column) for column in chosen] if chosen else None
