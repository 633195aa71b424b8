"""What the two DTS Shareplex JSON decoders (``dts_shareplex_json`` in Python, ``dts_shareplex_native`` in Spark's
JSON reader) share: the format id, the op spellings and what each means, and a table's identity from ``meta.table``."""

from __future__ import annotations

import re

FORMAT_ID = "dts-shareplex-json"

# Normalized op (upper case, one space between words) -> what it means.
INSERT_OPS = ("INS", "INSERT")
UPDATE_OPS = ("UPD", "UPDATE", "UPDATE AFTER")
DELETE_OPS = ("DEL", "DELETE")
BEFORE_OPS = ("UPDATE BEFORE",)
TRUNCATE_OPS = ("TRUNCATE",)
DROP_COLUMN_OPS = ("DROP COLUMN",)
KNOWN_OPS = "ins, upd, del, INSERT, UPDATE, DELETE, UPDATE BEFORE, UPDATE AFTER, TRUNCATE, DROP COLUMN"

# Java's `(.*)$` (what the table name was cut with): no line terminator inside, at most one ending the text.
_TABLE = re.compile(r"[^.]*\.([^\n\r\u0085\u2028\u2029]*)(?:\r\n|[\n\r\u0085\u2028\u2029])?\Z")


def table_identity(qualified: str | None) -> tuple[str | None, str | None]:
    """(source schema, source table) of ``meta.table`` "SCHEMA.TABLE": the schema up to the first dot, the table
    after it; a name without a dot is a table without a schema."""
    if qualified is None or "." not in qualified:
        return None, qualified
    cut = _TABLE.match(qualified)
    return qualified.split(".", 1)[0], cut.group(1) if cut else ""
