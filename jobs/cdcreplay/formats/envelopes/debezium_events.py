"""Debezium change-event envelope semantics, once for every wire (docs/format-spec.md section e).

Both Debezium formats end here with one parsed event: ``debezium-json`` parses the Kafka value's JSON text,
``debezium-avro`` hands over the Connect value its Avro record stands for (the same dict JsonConverter would have
written). From that dict on everything is shared: op mapping, snapshot markers, connector positions, Connect/Debezium
type conversion (``debezium_values``), MongoDB documents (``debezium_mongo``).

With ``schemas.enable=true`` a value is ``{"schema": <Envelope schema>, "payload": <event>}``; without, it is the bare
event. A value whose fields do not have the shape of an event (``after`` that is no object, ...) is not JSON of an
event and is quarantined -- except a MongoDB event, whose ``after``/``before`` are Extended JSON strings.

Connector specifics handled here:
  MySQL/MariaDB  position (binlog file number, pos, row); ``gtid`` is kept in the message but not ordered on: a GTID
                 is only ordered within one server uuid, while file/pos/row is total for the binlog read.
  PostgreSQL     position (lsn); REPLICA IDENTITY DEFAULT sends before = null (or key columns only): the Kafka key
                 names the row; a TOASTed column that did not change arrives as ``__debezium_unavailable_value`` and
                 is left out of the image, so the compactor keeps its stored value.
  SQL Server     position (commit_lsn, change_lsn, event_serial_no): a primary-key update is a delete (serial 1) and
                 an insert (serial 2) at the same LSNs.
  Oracle         position (commit_scn, scn): commit order first, then change order inside the transaction.
  MongoDB        ``after``/``before`` are Extended JSON strings; an update without the full document carries
                 ``updateDescription`` (``patch`` in 1.x): a partial image of the changed fields.
Headers ``__debezium.newkey`` (on the delete of a primary-key change) and ``__debezium.oldkey`` (on the insert) are
recorded in the changelog row's ``detail``, the provenance of the run's decoded changelog.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from cdcreplay import schema as S
from cdcreplay.formats.python_rows import DecodeError, RawRecord, change, control_entry
from cdcreplay.formats.values import debezium_mongo as mongo
from cdcreplay.formats.values.debezium_values import (
    MAX_MICROS,
    MIN_MICROS,
    Converter,
    Field,
    as_long,
    as_position,
    as_text,
    compact,
    converter,
    debezium_field_type,
)
from cdcreplay.formats.wire.json_reader import EXACT, not_json

# source.snapshot values that mark a row read by a snapshot (string in 1.x+, boolean in old versions).
SNAPSHOT_MARKERS = frozenset(
    ("true", "first", "last", "first_in_data_collection", "last_in_data_collection", "incremental")
)
OPS = {"c": S.OP_INSERT, "u": S.OP_UPDATE, "d": S.OP_DELETE, "t": S.OP_TRUNCATE, "r": S.OP_SNAPSHOT}

# PostgreSQL (and Oracle LOB) columns whose value the connector could not read -- a TOASTed value that did not
# change. The placeholder is the text itself, its UTF-8 bytes in base64 for bytea columns, or a one-element array.
UNAVAILABLE = "__debezium_unavailable_value"
UNAVAILABLE_FORMS = frozenset((UNAVAILABLE, "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", f'["{UNAVAILABLE}"]'))

HEADER_NEW_KEY = "__debezium.newkey"
HEADER_OLD_KEY = "__debezium.oldkey"
MONGO_KEY_COLUMN = "_id"

# Event fields that must be JSON objects (or null); the others are read as text whatever their JSON type.
OBJECT_FIELDS = ("before", "after", "source", "transaction", "message", "updateDescription")
_BINLOG_NUMBER = re.compile(r"(\d+)$")
EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


# --- the envelope schema -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaInfo:
    """What a message's Connect schema says about its image columns; computed once per schema, not per record."""

    ok: bool = True  # false: the schema has not the shape of a Connect schema (the message is not an event)
    converters: dict[str, Converter] = field(default_factory=dict)  # only the columns whose text needs converting
    types: dict[str, str] = field(default_factory=dict)  # column -> Spark type


NO_SCHEMA = SchemaInfo()
BAD_SCHEMA = SchemaInfo(ok=False)


def _parameters_ok(spec) -> bool:
    return type(spec) is dict and (spec.get("parameters") is None or type(spec.get("parameters")) is dict)


def image_fields(schema) -> list[tuple[str | None, Field]] | None:
    """The envelope schema's ``after`` (else ``before``) struct as (column, Field) in schema order; [] for a schema
    without them (schema-change, MongoDB) or no schema; None when it has not the shape of a Connect schema."""
    if schema is None:
        return []
    fields = schema.get("fields") if type(schema) is dict else False
    if fields is None:
        return []
    if type(fields) is not list:
        return None
    image = None
    for struct in fields:
        if struct is None:
            continue
        if type(struct) is not dict:
            return None
        columns = struct.get("fields")
        if columns is not None and (
            type(columns) is not list or not all(c is None or _parameters_ok(c) for c in columns)
        ):
            return None
        if image is None and as_text(struct.get("field")) in ("after", "before"):
            image = columns or []
    found = []
    for spec in image or ():
        if spec is None:
            continue
        parameters = spec.get("parameters") or {}
        column = Field(
            type=as_text(spec.get("type")),
            name=as_text(spec.get("name")),
            scale=as_text(parameters.get("scale")),
            precision=as_text(parameters.get("connect.decimal.precision")),
        )
        found.append((as_text(spec.get("field")), column))
    return found


def schema_info(schema) -> SchemaInfo:
    """The envelope schema's ``after`` (else ``before``) struct -> SchemaInfo; a schema without them (schema-change,
    MongoDB) declares nothing."""
    fields = image_fields(schema)
    if fields is None:
        return BAD_SCHEMA
    if not fields:
        return NO_SCHEMA
    converters, types = {}, {}
    for name, column in fields:
        convert = converter(column)
        if convert is not None:
            converters[name] = convert
        else:
            converters.pop(name, None)
        types[name] = debezium_field_type(column)
    return SchemaInfo(True, converters, types)


# --- pieces of an event ------------------------------------------------------------------------------------------


def kafka_key(parsed) -> dict | None:
    """The Kafka key's fields, with or without the JsonConverter schema wrapper (None when it is no JSON object)."""
    if type(parsed) is not dict:
        return None
    payload = parsed.get("payload")
    if payload is not None and "schema" in parsed:
        if type(payload) is dict:
            return payload
        try:
            inner = EXACT.parse(as_text(payload))
        except ValueError:
            return None
        return inner if type(inner) is dict else None
    return parsed


def _event_time(millis: int | None) -> datetime | None:
    if millis is None or not MIN_MICROS <= millis * 1000 <= MAX_MICROS:
        return None
    return EPOCH_UTC + timedelta(milliseconds=millis)


def _hex_number(part: str | None) -> Decimal | None:
    if part is None:
        return None
    try:
        return Decimal(int(part, 16))
    except ValueError:
        return None


def _lsn_parts(lsn: str | None) -> list[Decimal | None]:
    parts = lsn.split(":") if lsn is not None else []
    return [_hex_number(parts[i]) if i < len(parts) else None for i in range(3)]


def source_position(source: dict) -> list[Decimal | None]:
    """Connector-specific source position; events of one connector share a shape, so arrays compare correctly."""

    def text(name: str) -> str | None:
        return as_text(source.get(name))

    binlog = text("file")
    if binlog is not None:  # MySQL / MariaDB: binlog file sequence number, offset in the file, row within the event
        number = _BINLOG_NUMBER.search(binlog)
        row = text("row")
        return [
            as_position(number.group(1) if number else None),
            as_position(text("pos")),
            as_position("0" if row is None else row),
        ]
    if text("lsn") is not None:  # PostgreSQL
        return [as_position(text("lsn"))]
    if text("commit_lsn") is not None:
        # SQL Server: commit LSN, change LSN, then the order of a PK change's delete (1) and insert (2)
        serial = text("event_serial_no")
        return [
            *_lsn_parts(text("commit_lsn")),
            *_lsn_parts(text("change_lsn")),
            as_position("0" if serial is None else serial),
        ]
    scn = text("scn")
    if scn is not None:
        # Oracle: transactions in commit order, changes in SCN order inside one; a snapshot row has only `scn`
        # (the snapshot SCN), which then stands for its commit point too.
        commit_scn = text("commit_scn")
        return [as_position(scn if commit_scn is None else commit_scn), as_position(scn)]
    if text("ord") is not None:  # MongoDB
        return [as_position(text("ts_ms")), as_position(text("ord"))]
    return []


def key_change_provenance(record: RawRecord) -> str | None:
    """The __debezium.newkey/oldkey headers as text (base64 when the bytes are not UTF-8), or None."""
    parts = []
    for name in (HEADER_NEW_KEY, HEADER_OLD_KEY):
        value = record.header(name)
        if value is None:
            continue
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            text = base64.b64encode(value).decode("ascii")
        parts.append(f"{name}={text}")
    return "; ".join(parts) or None


# --- relational images -------------------------------------------------------------------------------------------


def _convert(image: dict, converters: dict, lost: list, unavailable: list, keep_unavailable: bool = False) -> dict:
    """Canonical text per column; columns that do not convert go to ``lost``, TOAST placeholders to ``unavailable``
    (and out of the image: those columns were not read, so they are absent, not NULL)."""
    out = {}
    for column, raw in image.items():
        kind = type(raw)
        text = raw if kind is str or raw is None else (str(raw) if kind is int or kind is Decimal else as_text(raw))
        if text is None:
            out[column] = None
            continue
        convert = converters.get(column)
        value = text
        if convert is not None:
            value = convert(text)
            if value is None:
                lost.append(column)
        if text in UNAVAILABLE_FORMS:
            unavailable.append(column)
        if value in UNAVAILABLE_FORMS and not keep_unavailable:
            continue
        out[column] = value
    return out


def _distinct(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass
class Images:
    after: dict | None
    before: dict | None
    key_columns: list[str] | None
    key_image: dict | None
    types: dict | None
    undecodable: list[str]
    nested: list[str] | None = None  # MongoDB: changed nested fields of an update without the full document


def relational_images(after_raw, before_raw, key: dict | None, info: SchemaInfo) -> Images:
    converters = info.converters
    lost, unavailable = [], []
    after = None if after_raw is None else _convert(after_raw, converters, lost, unavailable)
    before = None if before_raw is None else _convert(before_raw, converters, lost, unavailable)
    key_text = None if key is None else _convert(key, converters, [], [], keep_unavailable=True)
    types = info.types
    # A schemaless message declares no types; an unavailable column is still declared (as text), which is what
    # marks the image as partial for the compactor.
    undeclared = [c for c in _distinct(unavailable) if c not in types]
    if undeclared:
        types = {**types, **dict.fromkeys(undeclared, "string")}
    # Postgres REPLICA IDENTITY DEFAULT sends update/delete with before = null: the Kafka key still names the row.
    key_image = after if after is not None else before if before is not None else key_text
    return Images(
        after, before, None if key is None else list(key), key_image, types, _distinct(lost) if lost else lost
    )


# --- MongoDB images ----------------------------------------------------------------------------------------------


def _merged(key_types: dict, document_types: dict | None) -> dict | None:
    return None if document_types is None else {**key_types, **document_types}


def mongo_images(op: str, after_raw, before_raw, key: dict | None, update_description, patch_text) -> Images:
    """MongoDB images: the full document when the event has it, else the changed fields of the update."""
    doc_after, doc_before = mongo.document(after_raw), mongo.document(before_raw)
    change_patch = mongo.patch(update_description, patch_text)
    patch_set = mongo.document(change_patch.set) if change_patch is not None else None
    key_text, key_type = mongo.key_value(key)
    key_map = {MONGO_KEY_COLUMN: key_text} if key_text is not None else None
    key_types = {MONGO_KEY_COLUMN: key_type} if key_type is not None else {}
    set_image = (patch_set.image if patch_set is not None else None) or {}
    unset = change_patch.unset if change_patch is not None else []

    partial = doc_after is None and op == "u" and change_patch is not None
    after, types = None, key_types
    if doc_after is not None:
        after, types = doc_after.image, _merged(key_types, doc_after.types)
    elif partial:
        # The changed fields only; a removed field is a present NULL. The key column is declared but not carried,
        # so the compactor completes the image from the document's earlier state.
        after = {c: v for c, v in {**set_image, **dict.fromkeys(unset)}.items() if c != MONGO_KEY_COLUMN}
        types = _merged(key_types, (patch_set.types if patch_set is not None else None) or {})
    elif doc_before is not None:
        types = _merged(key_types, doc_before.types)
    before = doc_before.image if doc_before is not None else None

    nested = None
    if partial:
        nested_fields = [c for c in [*set_image, *unset] if "." in c]
        if nested_fields or change_patch.truncated:
            nested = nested_fields or ["(truncated arrays)"]
    bad_documents = [
        name
        for name, found in (("after", doc_after), ("before", doc_before), ("updateDescription", patch_set))
        if found is not None and not found.ok
    ]
    if after is not None and MONGO_KEY_COLUMN in after:
        key_image = after
    elif before is not None and MONGO_KEY_COLUMN in before:
        key_image = before
    else:
        key_image = key_map
    return Images(after, before, [MONGO_KEY_COLUMN], key_image, types, bad_documents, nested)


# --- the envelope ------------------------------------------------------------------------------------------------


def _object(event: dict, name: str) -> dict | None:
    value = event.get(name)
    return value if type(value) is dict else None


def _shape_ok(event: dict) -> bool:
    for name in OBJECT_FIELDS:
        value = event.get(name)
        if value is not None and type(value) is not dict:
            return False
    update = event.get("updateDescription")
    if update is not None:
        removed = update.get("removedFields")
        if removed is not None and type(removed) is not list:
            return False
    return True


def _is_document_string(*events) -> bool:
    return any(type(e.get(name)) is str for e in events if e is not None for name in ("after", "before"))


def event_entries(value, key, record: RawRecord, text: Callable[[], str], info: SchemaInfo | None = None) -> list[dict]:
    """One parsed Kafka value (+ its parsed key) -> entries.

    ``text`` gives the value's JSON text, only needed for control messages and errors. ``info``: the schema's
    SchemaInfo when the caller knows it already (a cache per schema); else it is read from ``value["schema"]``.
    """
    if type(value) is not dict:
        raise not_json(text())
    payload = value.get("payload")
    ok = payload is None or type(payload) is dict
    event = payload if type(payload) is dict else value
    if info is None:
        info = schema_info(value.get("schema"))
    ok = ok and info.ok and _shape_ok(value) and (event is value or _shape_ok(event))
    source = _object(event, "source") or {}
    mongodb = (
        as_text(source.get("connector")) == "mongodb"
        or source.get("collection") is not None
        # Recognised by its source block, or -- when that is missing -- by images that are strings.
        or (not ok and _is_document_string(value, payload if type(payload) is dict else None))
    )
    if not ok and not mongodb:
        raise not_json(text())
    op = as_text(event.get("op"))
    table = as_text(source.get("table"))
    identity = {
        "db": as_text(source.get("db")),
        "schema": as_text(source.get("schema")),
        "table": as_text(source.get("collection")) if table is None else table,
    }
    if op == "m":
        message = _object(event, "message")
        detail = None if message is None else compact({k: as_text(v) for k, v in message.items()})
        return [control_entry(S.CONTROL_MESSAGE, detail, **identity)]
    change_op = OPS.get(op)
    if op == "c" and (as_text(source.get("snapshot")) or "").lower() in SNAPSHOT_MARKERS:
        change_op = S.OP_SNAPSHOT
    if change_op is not None:
        return [_change(event, change_op, op, key, mongodb, record, info, source, identity)]
    if op is not None:
        raise DecodeError(S.REASON_UNKNOWN_OP, f"op '{op}' is not one of c, u, d, r, t, m")
    # Messages without op: the transaction topic (BEGIN/END), the schema-change topic (ddl), heartbeats.
    status = as_text(event.get("status"))
    if status in ("BEGIN", "END"):
        return [control_entry(S.CONTROL_TRANSACTION, f"{status} {text()}")]
    ddl = as_text(event.get("ddl"))
    if ddl is not None or event.get("tableChanges") is not None:
        return [control_entry(S.CONTROL_SCHEMA_CHANGE, ddl)]
    if event.get("ts_ms") is not None and _object(event, "source") is None and _object(event, "after") is None:
        return [control_entry(S.CONTROL_HEARTBEAT, text())]
    raise DecodeError(S.REASON_UNKNOWN_OP, "message has no op field and is no known control message")


def _change(event, change_op, op, key, mongodb, record, info, source, identity) -> dict:
    key = kafka_key(key)
    if mongodb:
        images = mongo_images(
            op,
            event.get("after"),
            event.get("before"),
            key,
            _object(event, "updateDescription"),
            as_text(event.get("patch")),
        )
        if images.nested is not None:
            raise DecodeError(
                S.REASON_NESTED_UPDATE,
                f"MongoDB update of nested field(s) {', '.join(images.nested)} carries no full document; "
                "set capture.mode=change_streams_update_full",
            )
    else:
        images = relational_images(_object(event, "after"), _object(event, "before"), key, info)
    if images.undecodable:
        # A value present in the message that its declared type cannot decode (bad base64, out-of-range date) must
        # not turn into a silent NULL: the record is quarantined naming the columns.
        raise DecodeError(
            S.REASON_BAD_VALUE,
            "value cannot be decoded with its schema type in column(s): " + ", ".join(images.undecodable),
        )
    source_ts = as_long(as_text(source.get("ts_ms")))
    event_ts = source_ts if source_ts is not None and source_ts > 0 else as_long(as_text(event.get("ts_ms")))
    return change(
        change_op,
        db=identity["db"],
        schema=identity["schema"],
        table=identity["table"],
        key_columns=images.key_columns,
        after=images.after,
        before=images.before,
        column_types=images.types,
        position=source_position(source),
        event_time=_event_time(event_ts),
        key_image=images.key_image,
        detail=key_change_provenance(record),
    )
