"""What every format does after decoding, in plain Python: one entry -> one decoded row, routed.

Per entry (a row-change, a control message, or a quarantined record): the table identity, the key columns (the
config's ``primary_key`` wins over the message's), the key text the compactor groups by, the column types (the
config's ``column_types`` win), the value check, and the route -- changelog, control, or quarantine with a reason.
A row-change that cannot be applied is quarantined here for every format alike: no table, no key value, an
insert/update without an after image, or a value its declared type cannot hold.

Python rather than Spark expressions on purpose: these steps work per map entry, which Spark can only express with
higher-order functions that it evaluates interpreted, with no common-subexpression elimination (profiled at a few
thousand records/s). ``formats.common.finish`` runs this over Arrow batches; ``python_rows`` calls it directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.value_checks import invalid_columns

KIND_CHANGE = "changelog"
KIND_CONTROL = "control"
KIND_QUARANTINE = "quarantine"
RECORD_KINDS = (KIND_CHANGE, KIND_CONTROL, KIND_QUARANTINE)  # the decoded folders, record_kind=<kind>
# A decoded row: the changelog row, and the record it came from with what the decode made of it.
DECODED_DDL = (
    S.CHANGELOG_DDL + ", timestamp timestamp, record_kind string, control_kind string, reason string, detail string, "
    "raw_key binary, raw_value binary"
)

IMAGE_OPS = (S.OP_SNAPSHOT, S.OP_INSERT, S.OP_UPDATE)

# JSON string escapes as Spark's to_json writes them (Jackson): the key text must be byte-identical to what earlier
# versions stored, or a key of the published state would not meet its own later changes.
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _json_escape(match: re.Match) -> str:
    char = match.group(0)
    return _JSON_ESCAPES.get(char) or f"\\u{ord(char):04X}"


def key_text(values: list[str]) -> str:
    """The key as a JSON array of its canonical texts, e.g. ``["42","EU"]`` (what the compactor groups by)."""
    return "[" + ",".join('"' + _NEEDS_ESCAPE.sub(_json_escape, value) + '"' for value in values) + "]"


def table_id_of(db: str | None, schema: str | None, table: str | None) -> str | None:
    """``db.schema.table`` without the empty parts (Debezium sends schema "" for MySQL); None without a table."""
    if not table:
        return None
    return ".".join(part for part in (db, schema, table) if part)


@dataclass(frozen=True)
class Routing:
    """What the pipeline config says that routing needs: format id, configured keys and types per table."""

    format: str
    keys: dict[str, list[str]]
    types: dict[str, dict[str, str]]

    @classmethod
    def of(cls, pipeline: PipelineConfig) -> Routing:
        return cls(
            format=pipeline.format,
            keys={tid: list(t.primary_key) for tid, t in pipeline.tables.items() if t.primary_key},
            types={tid: dict(t.column_types) for tid, t in pipeline.tables.items() if t.column_types},
        )


def _problem(entry: dict, table_id: str | None, key_columns, key: str | None, column_types: dict) -> tuple:
    """(reason, detail) of a row-change that cannot be applied, or (None, None)."""
    op = entry.get("op")
    if table_id is None:
        return S.REASON_MISSING_TABLE, "the message names no table"
    if op in S.ROW_OPS and key is None:
        columns = "none" if key_columns is None else ",".join("null" if c is None else c for c in key_columns)
        return S.REASON_MISSING_KEY, (
            f"no primary key value for table {table_id} (key columns: {columns}); declare "
            "tables.<table>.primary_key in the pipeline config if the message has none"
        )
    if op in IMAGE_OPS and entry.get("after") is None:
        return S.REASON_MISSING_IMAGE, f"operation {op} without an after image"
    bad = invalid_columns(entry.get("after"), column_types)
    for column in invalid_columns(entry.get("before"), column_types):
        if column not in bad:
            bad.append(column)
    if bad:
        return S.REASON_BAD_VALUE, f"value does not match its declared type in column(s): {', '.join(bad)}"
    return None, None


def route(entry: dict, routing: Routing) -> dict:
    """One entry (ENTRY fields; maps as dicts) -> the decoded row's fields except the Kafka coordinates."""
    table_id = table_id_of(entry.get("source_db"), entry.get("source_schema"), entry.get("source_table"))
    key_columns = routing.keys.get(table_id) or entry.get("key_columns")
    column_types = dict(entry.get("column_types") or {})
    if table_id in routing.types:
        column_types.update(routing.types[table_id])
    key = None
    key_image = entry.get("key_image")
    if key_columns and key_image is not None:
        values = [key_image.get(column) for column in key_columns]
        if all(value is not None for value in values):
            key = key_text(values)

    record_kind = entry.get("record_kind")
    if record_kind == KIND_CHANGE:
        reason, detail = _problem(entry, table_id, key_columns, key, column_types)
        if reason is None:
            detail = entry.get("detail")  # a change keeps its detail as provenance (Debezium key-change headers)
    else:
        reason, detail = entry.get("reason"), entry.get("detail")
    return {
        "table_id": table_id,
        "source_db": entry.get("source_db"),
        "source_schema": entry.get("source_schema"),
        "source_table": entry.get("source_table"),
        "op": entry.get("op"),
        "key": key,
        "key_columns": key_columns,
        "after": entry.get("after"),
        "before": entry.get("before"),
        "column_types": column_types,
        "position": entry.get("position"),
        "event_time": entry.get("event_time"),
        "row_index": entry.get("row_index") or 0,
        "format": routing.format,
        "record_kind": KIND_QUARANTINE if reason is not None else record_kind,
        "control_kind": entry.get("control_kind"),
        "reason": reason,
        "detail": detail,
    }


# --- Arrow: rows of decoded fields -> one record batch of DECODED_DDL -------------------------------------------------

MAP_FIELDS = ("key_image", "after", "before", "column_types")
RECORD_FIELDS = ("topic", "partition", "offset", "timestamp")


def entry_from_arrow(entry: dict | None) -> dict:
    """An ENTRY struct as pyarrow's to_pylist gives it (maps as lists of pairs) -> entry dict with dict maps."""
    if entry is None:
        return {"record_kind": KIND_QUARANTINE, "reason": S.REASON_DECODE_ERROR, "detail": "empty entry"}
    for name in MAP_FIELDS:
        pairs = entry.get(name)
        if pairs is not None:
            entry[name] = dict(pairs)
    return entry


def decoded_batch(records, record_rows: list[int], rows: list[dict], arrow_schema):
    """Record batch of DECODED_DDL: the routed ``rows``, each with the Kafka record at ``record_rows[i]``.

    ``records`` is the Arrow batch of raw records (topic, partition, offset, timestamp, key, value); the raw bytes
    are kept only on quarantined rows. A row Arrow cannot hold (a string with a lone UTF-16 surrogate that a JSON
    escape let through, a map with a null key) is quarantined on its own instead of failing the whole batch.
    """
    try:
        return _record_batch(records, record_rows, rows, arrow_schema)
    except UNWRITABLE as error:
        first_error = error
    rows = [_writable(row, arrow_schema) for row in rows]
    try:
        return _record_batch(records, record_rows, rows, arrow_schema)
    except UNWRITABLE as error:  # not a row's fault after all: report both failures
        raise error from first_error


# What building an Arrow array from Python values raises for a value its type cannot hold.
UNWRITABLE = (UnicodeError, ValueError, TypeError, OverflowError, ArithmeticError)  # pyarrow.ArrowInvalid: ValueError


def _record_batch(records, record_rows: list[int], rows: list[dict], arrow_schema):
    import pyarrow as pa

    taken = pa.array(record_rows, type=pa.int64())
    columns = {name: records.column(name).take(taken) for name in RECORD_FIELDS}
    # The raw bytes go only onto quarantined rows: taken for every row, a message of many rows (DTS packs hundreds
    # into one Canal message) would repeat its value once per row and overflow Arrow's 2 GiB binary array.
    pairs = zip(record_rows, rows, strict=True)
    raw_rows = pa.array([i if row["record_kind"] == KIND_QUARANTINE else None for i, row in pairs], type=pa.int64())
    arrays = []
    for field in arrow_schema:
        name = field.name
        if name in RECORD_FIELDS:
            arrays.append(columns[name].cast(field.type))
        elif name in ("raw_key", "raw_value"):
            arrays.append(records.column(name.removeprefix("raw_")).take(raw_rows).cast(field.type))
        else:
            arrays.append(_field_array([row[name] for row in rows], field))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _field_array(values: list, field):
    import pyarrow as pa

    # Map fields go in as Python dicts: pyarrow builds a map array from them directly, several times faster than
    # from lists of pairs, and refuses a null key or a lone surrogate with the same errors.
    return pa.array(values, type=field.type)


def _writable(row: dict, arrow_schema) -> dict:
    """``row`` if Arrow can hold each of its fields, else a quarantine row saying which field and why."""
    for field in arrow_schema:
        if field.name not in row:
            continue
        try:
            _field_array([row[field.name]], field)
        except UnicodeError:
            reason, problem = S.REASON_NOT_UTF8, "escapes a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text"
        except UNWRITABLE as error:
            reason, problem = S.REASON_DECODE_ERROR, f"cannot be stored ({type(error).__name__}: {error})"
        else:
            continue
        return {
            **{name: None for name in row},
            "row_index": row.get("row_index") or 0,
            "format": row.get("format"),
            "record_kind": KIND_QUARANTINE,
            "reason": reason,
            "detail": f"the decoded field {field.name} {problem}",
        }
    return row


def decoded_arrow_schema():
    """The Arrow schema of DECODED_DDL (on the driver: parsing the DDL needs the Spark session)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(S.struct_type(DECODED_DDL), timezone="UTC")
