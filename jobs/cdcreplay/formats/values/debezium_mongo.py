"""Debezium MongoDB connector: Extended JSON documents -> canonical text + Spark type per field (docs/format-spec.md e).

``after``/``before`` are Extended JSON *strings* (canonical or relaxed): $numberLong bigint, $numberInt int,
$numberDouble double, $numberDecimal exact decimal text (string: Decimal128 has no fixed scale), $oid string, $date
timestamp (UTC), $binary binary (base64), $uuid string; plain strings and booleans as such, plain integers bigint
(beyond int64: exact digits as string), other plain numbers double; nested documents and arrays are kept as compact
JSON text with their keys sorted (string). An update without the full document carries ``updateDescription`` (2.x)
or ``patch`` (1.x, ``{$set, $unset}``): a partial image of the changed fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from cdcreplay.formats.values.debezium_values import INT64_MAX, INT64_MIN, as_long, as_text, compact, timestamp_text
from cdcreplay.formats.wire.json_reader import EXACT

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


def _member_text(value) -> str | None:
    """A wrapper's member as text (a nested document as its sorted compact JSON)."""
    kind = type(value)
    if kind is dict or kind is list:
        return compact(value, sort_keys=True)
    return as_text(value)


def _date_text(member) -> str | None:
    """``$date``: epoch milliseconds (plain or ``{"$numberLong"}``) or ISO-8601 text -> UTC timestamp text."""
    millis = None
    if type(member) is dict:
        millis = as_long(_member_text(member.get("$numberLong")))
    elif type(member) is int or type(member) is str:
        millis = as_long(str(member))
    if millis is not None:
        return timestamp_text(millis * 1000)
    if type(member) is not str:
        return None
    try:
        moment = datetime.fromisoformat(member.strip())
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return timestamp_text((moment - EPOCH_UTC.replace(tzinfo=None)) // _ONE_MICRO)


_ONE_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1) - datetime(1970, 1, 1)
_WRAPPERS = (
    ("$oid", "string"),
    ("$numberLong", "bigint"),
    ("$numberInt", "int"),
    ("$numberDouble", "double"),
    ("$numberDecimal", "string"),
)


def extended_value(value) -> tuple[str | None, str | None]:
    """One Extended JSON value -> (canonical text, Spark type); (None, None) for null."""
    kind = type(value)
    if value is None:
        return None, None
    if kind is str:
        return value, "string"
    if kind is bool:
        return ("true" if value else "false"), "boolean"
    if kind is int:
        if INT64_MIN <= value <= INT64_MAX:
            return str(value), "bigint"
        return str(value), ("string" if len(str(abs(value))) <= 38 else "double")  # beyond int64: exact digits
    if kind is Decimal or kind is float:
        return as_text(value), "double"
    if kind is list:
        return compact(value, sort_keys=True), "string"
    for wrapper, spark_type in _WRAPPERS:
        member = value.get(wrapper)
        if member is not None:
            return _member_text(member), spark_type
    if value.get("$date") is not None:
        return _date_text(value["$date"]), "timestamp"
    binary = value.get("$binary")
    if binary is not None:
        inner = binary.get("base64") if type(binary) is dict else None
        return _member_text(inner if inner is not None else binary), "binary"
    if value.get("$uuid") is not None:
        return _member_text(value["$uuid"]), "string"
    return compact(value, sort_keys=True), "string"


@dataclass(frozen=True)
class Document:
    """A document's fields as canonical text and their Spark types; ``ok`` false when it is no JSON object."""

    image: dict[str, str | None] | None
    types: dict[str, str] | None
    ok: bool


def document(raw) -> Document | None:
    """An Extended JSON document (its text, or already parsed) -> Document; None for a null document."""
    if raw is None:
        return None
    fields = raw
    if type(raw) is str:
        try:
            fields = EXACT.parse(raw)
        except ValueError:
            fields = None
    if type(fields) is not dict:
        return Document(None, None, False)
    image, types = {}, {}
    for name, value in fields.items():
        text, spark_type = extended_value(value)
        image[name] = text
        if spark_type is not None:
            types[name] = spark_type
    return Document(image, types, True)


def key_value(kafka_key: dict | None) -> tuple[str | None, str | None]:
    """The Kafka key's ``id`` (the document's _id, as Extended JSON text or plain text) -> (text, Spark type)."""
    key_id = as_text(kafka_key.get("id")) if kafka_key is not None else None
    if key_id is None:
        return None, None
    try:
        return extended_value(EXACT.parse(key_id))
    except ValueError:
        return key_id, "string"


@dataclass(frozen=True)
class Patch:
    """The change of an update without the full document: the set fields (document text) and the removed ones."""

    set: str
    unset: list[str]
    truncated: bool


def _parsed_as(text: str | None, kind: type):
    """The JSON ``text`` parsed, when it is a ``kind`` (dict, list); else None (also for text that is no JSON)."""
    if text is None:
        return None
    try:
        parsed = EXACT.parse(text)
    except ValueError:
        return None
    return parsed if type(parsed) is kind else None


def _get_member(text: str | None, name: str):
    """Member ``name`` of the JSON object ``text``, or None (also for text that is no JSON object)."""
    parsed = _parsed_as(text, dict)
    return None if parsed is None else parsed.get(name)


def patch(update_description: dict | None, patch_text: str | None) -> Patch | None:
    """Debezium 2.x ``updateDescription`` (updatedFields, removedFields, truncatedArrays), else the 1.x oplog
    ``patch`` ({$set, $unset}); None when the event carries neither."""
    if update_description is not None:
        removed = update_description.get("removedFields")
        truncated = _parsed_as(as_text(update_description.get("truncatedArrays")), list)
        updated = update_description.get("updatedFields")
        return Patch(
            "{}" if updated is None else as_text(updated),
            [as_text(c) for c in removed if c is not None] if type(removed) is list else [],
            bool(truncated),
        )
    patch_set = _get_member(patch_text, "$set")
    patch_unset = _get_member(patch_text, "$unset")
    unset = list(patch_unset) if type(patch_unset) is dict else None
    if patch_set is None and unset is None:
        return None
    set_text = "{}" if patch_set is None else as_text(patch_set)
    return Patch(set_text, unset or [], False)
