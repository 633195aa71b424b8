"""Huawei Cloud DRS JSON for DDS (MongoDB) (docs/format-spec.md c4).

A message: ``{id, op: INSERT|UPDATE|DELETE|DDL, dbType, db, coll, value, where, recordType, extra, es, ts,
clusterTime "secs:inc"}`` whose ``value``/``where`` are Mongo shell syntax (parsed by
:mod:`cdcreplay.formats.wire.mongo_shell`). Per ``_id``, in the order ``id``, then ``clusterTime``:

  INSERT  (recordType insert)   ``value`` is the whole document               -> insert
  UPDATE  (recordType replace)  ``value`` the whole new document, key from ``where._id`` -> update, that document
  UPDATE  (recordType update)   ``value`` ``$set``/``$unset`` (dotted paths)   -> update, applied to the stored one
  DELETE  (recordType doc)      ``value`` is ``{_id: ...}``                    -> delete
  DDL                                                                          -> control log (``ddl``)
(a missing ``recordType`` is inferred: an UPDATE whose ``value`` holds only ``$`` operators is an update.)

Where updates are applied, and why: a ``$set`` into an embedded document (``{"$set": {"address.city": "X"}}``) needs
the stored document, which the changelog's column-level partial images cannot express. So this decoder resolves
every change to the WHOLE new document itself: it folds each ``_id``'s events in order, starting from the document
the previous run published (``base_state``, which the pipeline hands to decoders that accept it) or from nothing on a
full rebuild. Every changelog row it emits therefore carries a full image and compaction just keeps the last one.
The same fold decides the update without a document: a ``$set``/``$unset`` whose ``_id`` has no document before it
-- never inserted, or deleted -- is quarantined (``no_document``), since what the rest of the document is cannot be
known. (An event older than the published row of its key -- a rerun of an interval already applied -- is applied
to the published document; it never wins compaction, the published row being later.)

Document -> latest-state columns (one row per ``_id``):
  ``_document``   the whole document as relaxed Extended JSON v2 text (:mod:`cdcreplay.formats.values.mongo_values`);
                  lossless, so the next run folds from it
  every top-level field, typed by its BSON value:
    string -> string      boolean -> boolean      int32, int64 -> bigint      double -> double (NaN/Infinity kept)
    date -> timestamp (UTC; a date outside years 1..9999 is a ``bad_value``)     binary -> binary (any subtype)
    ObjectId -> string (24 hex digits)    decimal128 -> string (exact decimal text: no fixed precision)
    embedded document, array, regex, timestamp, MinKey/MaxKey, undefined -> string holding relaxed Extended JSON
    null -> NULL. A field the previous document had and the new one lacks ($unset, replace) is NULL in the row.
  The table's column type is the latest declaration (tables.py): when one field holds values of different BSON types
  across documents (5 in one, "x" in another), publishing stops with a type conflict naming the column: declare
  ``tables.<db.coll>.column_types: {field: string}`` and the column holds each value's text as above.
  The key is ``_id`` by value identity (:func:`cdcreplay.formats.values.mongo_values.key_text`: NumberLong(5) and 5
  are one ``_id``, the string "5" another); ``tables.<t>.primary_key`` does not apply to DDS collections.
  DDS has no full-sync marker: every document is an insert (no snapshot epochs to reconcile).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import ENTRY_DDL, KIND_CHANGE, finish
from cdcreplay.formats.envelopes.mongo_update import UpdateError, apply_update, check_update
from cdcreplay.formats.python_rows import (
    RECORD_COLUMNS,
    DecodeError,
    RawRecord,
    _entry_arrow_type,
    control_entry,
    quarantine_entry,
    safe_decode,
)
from cdcreplay.formats.values.mongo_values import (
    Binary,
    Decimal128,
    MongoDate,
    MongoValueError,
    ObjectId,
    dumps,
    key_text,
    loads,
)
from cdcreplay.formats.wire.json_reader import PLAIN, read_object
from cdcreplay.formats.wire.mongo_shell import ShellSyntaxError, parse

FORMAT_ID = "drs-dds-json"
JSON_READING = PLAIN  # how its messages' JSON is read (``json_reader``)
DOCUMENT_COLUMN = "_document"
KEY_COLUMNS = ["_id"]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The event kinds of the first pass (carried in the entry's control_kind until the fold replaces the entry).
INSERT, REPLACE, UPDATE, DELETE = "insert", "replace", "update", "delete"
CHANGE_OPS = {INSERT: S.OP_INSERT, REPLACE: S.OP_UPDATE, UPDATE: S.OP_UPDATE, DELETE: S.OP_DELETE}


# --- first pass: one message -> one event ---------------------------------------------------------------------------


def _shell(text, field: str):
    if text is None:
        return None
    if not isinstance(text, str):
        raise DecodeError(S.REASON_SHELL_SYNTAX, f"`{field}` is not shell text but {type(text).__name__}")
    try:
        return parse(text)
    except ShellSyntaxError as error:
        raise DecodeError(S.REASON_SHELL_SYNTAX, f"`{field}`: {error}") from None


# A position part is a decimal(38,0) in the changelog: a larger serial cannot be ordered, so it is not guessed at.
MAX_POSITION_PART = 10**38 - 1


def _position(message: dict) -> list:
    serial = message.get("id")
    if isinstance(serial, bool) or not isinstance(serial, int):
        raise DecodeError(S.REASON_DECODE_ERROR, f"`id` (DRS's event serial, the order) is not an integer: {serial!r}")
    if abs(serial) > MAX_POSITION_PART:
        raise DecodeError(S.REASON_DECODE_ERROR, f"`id` {serial} has more than 38 digits: it cannot order events")
    parts = [serial]
    cluster_time = message.get("clusterTime")
    if cluster_time is not None:
        seconds, _, increment = str(cluster_time).partition(":")
        if not (seconds.isdigit() and increment.isdigit() and max(len(seconds), len(increment)) <= 38):
            raise DecodeError(S.REASON_BAD_VALUE, f"clusterTime {cluster_time!r} is not seconds:increment")
        parts += [int(seconds), int(increment)]
    return [Decimal(part) for part in parts]


def _name(message: dict, field: str) -> str | None:
    """``db`` / ``coll``: text, or absent. Anything else names no collection."""
    value = message.get(field)
    if value is not None and not isinstance(value, str):
        raise DecodeError(S.REASON_MISSING_TABLE, f"`{field}` is not a name but {type(value).__name__}")
    return value


def _event_time(message: dict) -> datetime | None:
    es = message.get("es")
    if isinstance(es, int) and not isinstance(es, bool):
        try:
            return EPOCH + timedelta(milliseconds=es)
        except OverflowError:
            return None
    return None


def _id_of(document, field: str):
    if not isinstance(document, dict):
        raise DecodeError(S.REASON_MISSING_KEY, f"`{field}` is not a document, so it names no _id")
    if "_id" not in document:
        raise DecodeError(S.REASON_MISSING_KEY, f"`{field}` has no _id")
    return document["_id"]


def parse_message(record: RawRecord) -> list[dict]:
    """First pass: one DRS DDS message -> one event (or a control / quarantine entry)."""
    message = read_object(record.value, JSON_READING)
    op = str(message.get("op") or "").upper()
    db, coll = _name(message, "db"), _name(message, "coll")
    if op == "DDL":
        statement = message.get("value")
        detail = statement if statement is None or isinstance(statement, str) else json.dumps(statement)
        return [control_entry(S.CONTROL_DDL_KIND, detail, db=db, table=coll)]
    if op not in ("INSERT", "UPDATE", "DELETE"):
        raise DecodeError(S.REASON_UNKNOWN_OP, f"op {message.get('op')!r} is not INSERT, UPDATE, DELETE or DDL")
    if not coll:
        raise DecodeError(S.REASON_MISSING_TABLE, "the message names no collection (`coll`)")
    position = _position(message)
    record_type = message.get("recordType")
    value = _shell(message.get("value"), "value")
    if value is None:
        raise DecodeError(S.REASON_MISSING_IMAGE, f"{op} without `value` (the document or the filter)")
    if op == "INSERT":
        kind, identity, payload = INSERT, _id_of(value, "value"), dumps(value)
    elif op == "DELETE":
        if record_type not in (None, "doc"):
            raise DecodeError(S.REASON_UNKNOWN_OP, f"DELETE of recordType {record_type!r} (only documents: doc)")
        kind, identity, payload = DELETE, _id_of(value, "value"), None
    else:
        identity = _id_of(_shell(message.get("where"), "where"), "where")
        if record_type is None:
            record_type = "update" if isinstance(value, dict) and all(k.startswith("$") for k in value) else "replace"
        if record_type == "update":
            try:
                check_update(value)
            except UpdateError as error:
                reason = S.REASON_UNKNOWN_OP if error.unsupported else S.REASON_BAD_VALUE
                raise DecodeError(reason, str(error)) from None
            kind, payload = UPDATE, dumps(value)
        elif record_type == "replace":
            if not isinstance(value, dict):
                raise DecodeError(S.REASON_BAD_VALUE, "a replace's `value` is not a document")
            if "_id" in value and key_text(value["_id"]) != key_text(identity):
                raise DecodeError(S.REASON_BAD_VALUE, "a replace's document has another _id than its `where`")
            kind, payload = REPLACE, dumps({"_id": identity, **value})
        else:
            raise DecodeError(S.REASON_UNKNOWN_OP, f"UPDATE of recordType {record_type!r} (not update or replace)")
    return [
        {
            "record_kind": KIND_CHANGE,
            "op": CHANGE_OPS[kind],
            "control_kind": kind,
            "detail": payload,
            "source_db": db,
            "source_table": coll,
            "key_columns": KEY_COLUMNS,
            "key_image": {"_id": key_text(identity)},
            "position": position,
            "event_time": _event_time(message),
        }
    ]


# --- documents -> columns -------------------------------------------------------------------------------------------


def _double_text(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def column_value(value) -> tuple[str | None, str | None]:
    """(Spark type, canonical text) of one top-level field's value (see the module docstring)."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return "boolean", "true" if value else "false"
    if isinstance(value, str):
        return "string", value
    if isinstance(value, int):
        return "bigint", str(value)
    if isinstance(value, float):
        return "double", _double_text(value)
    if isinstance(value, Decimal128):
        return "string", str(value.value)
    if isinstance(value, ObjectId):
        return "string", value.hex
    if isinstance(value, MongoDate):
        moment = value.as_datetime()
        if moment is None:
            raise DecodeError(S.REASON_BAD_VALUE, f"date {value.millis} ms is outside years 1..9999")
        return "timestamp", moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    if isinstance(value, Binary):
        return "binary", base64.b64encode(value.data).decode("ascii")
    return "string", dumps(value)


def document_columns(document: dict, previous: dict | None) -> tuple[dict, dict]:
    """(after image, column types) of a whole document; fields ``previous`` had and it lacks are NULL."""
    if DOCUMENT_COLUMN in document:
        raise DecodeError(S.REASON_BAD_VALUE, f"the document has a field named {DOCUMENT_COLUMN}, a reserved column")
    after: dict[str, str | None] = {DOCUMENT_COLUMN: dumps(document)}
    types: dict[str, str] = {DOCUMENT_COLUMN: "string"}
    for name, value in document.items():
        spark_type, text = column_value(value)
        after[name] = text
        if spark_type is not None:
            types[name] = spark_type
    for name, value in (previous or {}).items():
        if name not in document or document[name] is None:
            after[name] = None
            spark_type = "timestamp" if isinstance(value, MongoDate) else column_value(value)[0]
            if spark_type is not None and name not in types:
                types[name] = spark_type  # a removed field keeps its column's type
    return after, types


# --- second pass: fold each _id's events in order ------------------------------------------------------------------

UNKNOWN, ABSENT = "unknown", "absent"  # no document known / the document was deleted


def _change(event: dict, op: str, document: dict | None, previous) -> dict:
    """A changelog entry whose after image is ``document`` (None for a delete) and before image ``previous``."""
    known = previous if isinstance(previous, dict) else None
    before, before_types = document_columns(known, None) if known is not None else (None, {})
    after, types = document_columns(document, known) if document is not None else (None, before_types)
    return {
        "record_kind": KIND_CHANGE,
        "op": op,
        "source_db": event["source_db"],
        "source_table": event["source_table"],
        "key_columns": KEY_COLUMNS,
        "key_image": dict(event["key_image"]),
        "after": after,
        "before": before,
        "column_types": types,
        "position": event["position"],
        "event_time": event["event_time"],
        "row_index": 0,
    }


def fold_event(event: dict, current, superseded: bool):
    """(entry, document after the event) for one event applied to ``current`` (a document, UNKNOWN or ABSENT)."""
    kind = event["control_kind"]
    payload = loads(event["detail"]) if event["detail"] is not None else None
    if kind == INSERT:
        return _change(event, S.OP_INSERT, payload, current), payload
    if kind == REPLACE:
        return _change(event, S.OP_UPDATE, payload, current), payload
    if kind == DELETE:
        return _change(event, S.OP_DELETE, None, current), ABSENT
    if not isinstance(current, dict):
        if superseded:  # older than the published row of its key, which wins compaction: an empty image
            return _change(event, S.OP_UPDATE, {}, None), current
        state = "was deleted before it" if current == ABSENT else "was never inserted before it"
        entry = quarantine_entry(
            S.REASON_NO_DOCUMENT,
            f"update of _id {event['key_image']['_id']} in {event['source_db']}.{event['source_table']}, which "
            f"{state}: $set/$unset cannot be applied without the document",
        )
        return entry, current
    try:
        updated = apply_update(current, payload)
    except UpdateError as error:
        if superseded:
            return _change(event, S.OP_UPDATE, current, current), current
        return quarantine_entry(S.REASON_BAD_VALUE, str(error)), current
    return _change(event, S.OP_UPDATE, updated, current), updated


def _order(position, partition, offset, row_index) -> tuple:
    return (list(position or []), partition, offset, row_index)


def fold_rows(rows: Iterator[dict]) -> Iterator[tuple[dict, list[dict]]]:
    """Rows sorted by (group, base first, order) -> (row, entries) per event or pass-through row."""
    group, current, base_order = None, UNKNOWN, None
    for row in rows:
        if row["group_key"] != group:
            group, current, base_order = row["group_key"], UNKNOWN, None
        if row["is_base"]:
            base_order = _order(row["position"], row["partition"], row["offset"], row["row_index"])
            if row["base_deleted"]:
                current = ABSENT
            elif row["base_document"] is not None:
                current = loads(row["base_document"])
            continue
        entries = [_plain_entry(e) for e in row["entries"] or []]
        if not row["is_event"]:
            yield row, entries
            continue
        event = entries[0]
        order = _order(event["position"], row["partition"], row["offset"], 0)
        superseded = base_order is not None and order <= base_order
        try:
            entry, after = fold_event(event, current, superseded)
        except DecodeError as error:
            entry, after = quarantine_entry(error.reason, str(error)), current
        except (MongoValueError, ValueError, TypeError) as error:
            entry, after = quarantine_entry(S.REASON_DECODE_ERROR, f"{type(error).__name__}: {error}"), current
        if not superseded:
            current = after
        yield row, [entry]


# --- Spark wiring ---------------------------------------------------------------------------------------------------

RAW = ("topic", "partition", "offset", "timestamp", "key", "value")


def _parse_batches(arrow_entries):
    def run(batches):
        import pyarrow as pa

        for batch in batches:
            columns = batch.to_pydict()
            entries = []
            for index in range(batch.num_rows):
                record = RawRecord(
                    *(columns[name][index] for name in RECORD_COLUMNS[:-1]),
                    tuple((h["key"], h["value"]) for h in columns["headers"][index] or ()),
                )
                entries.append(safe_decode(parse_message, record))  # maps as dicts: pyarrow builds them
            yield pa.RecordBatch.from_arrays(
                [batch.column(name) for name in RAW] + [pa.array(entries, type=arrow_entries)],
                names=[*RAW, "entries"],
            )

    return run


def _fold_batches(arrow_entries):
    def run(batches):
        import pyarrow as pa

        def rows():
            for batch in batches:
                yield from batch.to_pylist()

        out = {name: [] for name in [*RAW, "entries"]}
        for row, entries in fold_rows(rows()):
            for name in RAW:
                out[name].append(row[name])
            out["entries"].append(entries)
            if len(out["offset"]) >= 2048:
                yield _batch(pa, out, arrow_entries)
                out = {name: [] for name in out}
        if out["offset"]:
            yield _batch(pa, out, arrow_entries)

    return run


def _plain_entry(entry: dict) -> dict:
    """An entry read back from Arrow (maps come as lists of pairs) as the dict ``python_rows`` entries are."""
    plain = dict(entry)
    for name in ("key_image", "after", "before", "column_types"):
        if isinstance(plain.get(name), list):
            plain[name] = dict(plain[name])
    return plain


def _batch(pa, out: dict, arrow_entries):
    types = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "key": pa.binary(),
        "value": pa.binary(),
    }
    arrays = [pa.array(out[name], type=types[name]) for name in RAW] + [pa.array(out["entries"], type=arrow_entries)]
    return pa.RecordBatch.from_arrays(arrays, names=[*RAW, "entries"])


def table_id_of(db: Column, schema: Column, table: Column) -> Column:
    """The table id routing derives (``formats.routing.table_id_of``), as a Spark column: the non-empty parts joined
    by dots; NULL without a table name."""
    parts = [F.nullif(part, F.lit("")) for part in (db, schema, table)]
    return F.when(parts[2].isNotNull(), F.concat_ws(".", *parts))


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    """Raw records (+ the previously published state) -> decoded rows (``formats.common.DECODED_DDL``)."""
    entry_struct = S.struct_type(ENTRY_DDL).simpleString()
    arrow_entries = _entry_arrow_type()
    raw_schema = (
        "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
        f"entries array<{entry_struct}>"
    )
    parsed = records.select(*RECORD_COLUMNS).mapInArrow(_parse_batches(arrow_entries), raw_schema)
    first = F.col("entries")[0]
    is_event = (F.size("entries") == 1) & (first["record_kind"] == KIND_CHANGE)
    table_id = table_id_of(first["source_db"], first["source_schema"], first["source_table"])
    # The key text exactly as finish derives it, so it meets the published state's `key`.
    doc_key = F.to_json(F.array(first["key_image"]["_id"]))
    record_group = F.concat_ws(":", F.lit("record"), "topic", "partition", "offset")
    events = parsed.select(
        *RAW,
        "entries",
        is_event.alias("is_event"),
        F.lit(False).alias("is_base"),
        F.when(is_event, F.concat_ws("\u0000", table_id, doc_key)).otherwise(record_group).alias("group_key"),
        F.coalesce(first["position"], F.array().cast("array<decimal(38,0)>")).alias("position"),
        F.lit(0).alias("row_index"),
        F.lit(None).cast("boolean").alias("base_deleted"),
        F.lit(None).cast("string").alias("base_document"),
    )
    if base_state is not None:
        base = base_state.select(
            F.lit(None).cast("string").alias("topic"),
            "partition",
            "offset",
            F.lit(None).cast("timestamp").alias("timestamp"),
            F.lit(None).cast("binary").alias("key"),
            F.lit(None).cast("binary").alias("value"),
            F.lit(None).cast(f"array<{entry_struct}>").alias("entries"),
            F.lit(False).alias("is_event"),
            F.lit(True).alias("is_base"),
            F.concat_ws("\u0000", "table_id", "key").alias("group_key"),
            "position",
            "row_index",
            F.col("deleted").alias("base_deleted"),
            F.col("after")[DOCUMENT_COLUMN].alias("base_document"),
        )
        events = events.unionByName(base)
    arranged = events.repartition("group_key").sortWithinPartitions(
        "group_key", F.col("is_base").desc(), "position", "partition", "offset", "row_index"
    )
    folded = arranged.mapInArrow(_fold_batches(arrow_entries), raw_schema)
    return finish(folded, F.col("entries"), pipeline)
