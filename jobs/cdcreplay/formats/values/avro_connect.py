"""Avro written by Confluent's AvroConverter -> the value Kafka Connect's JsonConverter writes for the same record.

AvroConverter keeps the Connect schema in the Avro schema: ``connect.name`` (the semantic type, e.g.
``io.debezium.time.Date``), ``connect.parameters`` (e.g. a Decimal's ``scale``), ``connect.type`` (int8/int16 stored
as Avro int) and Avro logical types (decimal, date, time-*, timestamp-*). Reading those back gives the Connect
schema and value; rendering them as JsonConverter does (``{"schema": ..., "payload": ...}``, Decimal as base64 of the
unscaled two's complement, Date as days, Time/Timestamp as milliseconds, bytes as base64) lets one envelope decoder
(``debezium_events``) serve both wires, with no second copy of the type rules. The values are handed over as Python
objects; the text is only rendered where a message is recorded as it was (transaction and heartbeat details).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DATE = date(1970, 1, 1)
ONE_MICROSECOND = timedelta(microseconds=1)

_PRIMITIVE_CONNECT_TYPES = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "fixed": "bytes",
    "enum": "string",
}
_LOGICAL_CONNECT_NAMES = {
    "decimal": "org.apache.kafka.connect.data.Decimal",
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
}
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode


PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


def _type_name(schema) -> str:
    return schema if isinstance(schema, str) else schema.get("type") if isinstance(schema, dict) else "union"


def named_types(schema, found: dict | None = None) -> dict:
    """Every named type (record, enum, fixed) of a parsed schema by full name: fastavro leaves later uses of a
    name as the bare name string."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum", "fixed") and "name" in schema:
            found[schema["name"]] = schema
        for field in schema.get("fields", ()):
            named_types(field["type"], found)
        for key in ("items", "values"):
            if key in schema:
                named_types(schema[key], found)
    return found


def _resolve(schema, named: dict):
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return named[schema]
    return schema


def connect_schema(schema, named: dict, field: str | None = None) -> dict:
    """The JsonConverter schema of one parsed Avro schema."""
    optional = False
    schema = _resolve(schema, named)
    if isinstance(schema, list):  # a union: Connect knows only ["null", T] (optional T)
        branches = [s for s in schema if s != "null"]
        optional = len(branches) < len(schema)
        schema = _resolve(branches[0], named) if len(branches) == 1 else {"type": "string"}
    kind = _type_name(schema)
    props = schema if isinstance(schema, dict) else {}
    out: dict = {}
    if kind == "record":
        out["type"] = "struct"
        out["fields"] = [connect_schema(f["type"], named, f["name"]) for f in props["fields"]]
    elif kind == "array":
        out["type"] = "array"
        out["items"] = connect_schema(props["items"], named)
    elif kind == "map":
        out["type"] = "map"
        out["keys"] = {"type": "string", "optional": False}
        out["values"] = connect_schema(props["values"], named)
    else:
        out["type"] = props.get("connect.type") or _PRIMITIVE_CONNECT_TYPES.get(kind, "string")
    name = props.get("connect.name") or _LOGICAL_CONNECT_NAMES.get(props.get("logicalType", ""))
    if name:
        out["name"] = name
    parameters = dict(props.get("connect.parameters") or {})
    if props.get("logicalType") == "decimal":
        parameters.setdefault("scale", str(props.get("scale", 0)))
        if "precision" in props:
            parameters.setdefault("connect.decimal.precision", str(props["precision"]))
    if parameters:
        out["parameters"] = parameters
    out["optional"] = optional
    if field is not None:
        out["field"] = field
    return out


def _branch(schema: list, value, named: dict):
    """The union branch fastavro read ``value`` with (records come as (name, value) pairs)."""
    if value is None:
        return "null", None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        name, inner = value
        if name in named:
            return named[name], inner
    branches = [_resolve(b, named) for b in schema if b != "null"]
    if len(branches) == 1:
        return branches[0], value
    for branch in branches:
        if _matches(branch, value):
            return branch, value
    raise ValueError(f"value {value!r} matches no branch of the union {[_type_name(b) for b in schema]}")


def _matches(schema, value) -> bool:
    kind, logical = _type_name(schema), schema.get("logicalType") if isinstance(schema, dict) else None
    if logical == "decimal":
        return isinstance(value, Decimal)
    if isinstance(value, bool):
        return kind == "boolean"
    if isinstance(value, int | datetime | date | time):
        return kind in ("int", "long")
    if isinstance(value, float):
        return kind in ("float", "double")
    if isinstance(value, str):
        return kind in ("string", "enum")
    if isinstance(value, bytes):
        return kind in ("bytes", "fixed")
    if isinstance(value, dict):
        return kind in ("map", "record")
    if isinstance(value, list):
        return kind == "array"
    return False


def _unscaled_base64(value: Decimal, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return base64.b64encode(unscaled.to_bytes(bits // 8 + 1, "big", signed=True)).decode("ascii")


def _temporal(value, logical: str):
    """A logical-type value fastavro decoded back to the integer Connect carries."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        micros = (aware - EPOCH_UTC) // ONE_MICROSECOND
        return micros // 1000 if logical.endswith("millis") else micros
    if isinstance(value, date):
        return (value - EPOCH_DATE).days
    if isinstance(value, time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        return micros // 1000 if logical.endswith("millis") else micros
    return value


def connect_value(schema, value, named: dict):
    """One Avro value (as fastavro returns it with ``return_record_name=True``) -> its JsonConverter JSON value."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        schema, value = _branch(schema, value, named)
    if value is None:
        return None
    kind = _type_name(schema)
    props = schema if isinstance(schema, dict) else {}
    logical = props.get("logicalType")
    if kind == "record":
        if isinstance(value, tuple):
            value = value[1]
        return {f["name"]: connect_value(f["type"], value.get(f["name"]), named) for f in props["fields"]}
    if kind == "array":
        return [connect_value(props["items"], item, named) for item in value]
    if kind == "map":
        return {key: connect_value(props["values"], item, named) for key, item in value.items()}
    if logical == "decimal":
        return _unscaled_base64(value, int(props.get("scale", 0)))
    if logical in ("date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros") or logical in (
        "local-timestamp-millis",
        "local-timestamp-micros",
    ):
        return _temporal(value, logical)
    if kind in ("bytes", "fixed"):
        return base64.b64encode(value).decode("ascii")
    if logical == "uuid":
        return str(value)
    return value


class ConnectRenderer:
    """Renders records of one writer schema; the schema part is computed once."""

    def __init__(self, schema):
        self.schema = schema
        self.named = named_types(schema)
        self.connect_schema = connect_schema(schema, self.named)
        self.schema_text = _compact(self.connect_schema)

    def value(self, record):
        """The Connect value of a decoded record, as JsonConverter's payload would parse back."""
        return connect_value(self.schema, record, self.named)

    def payload(self, record) -> str:
        """The bare payload text."""
        return _compact(self.value(record))

    def envelope(self, record) -> str:
        """``{"schema": ..., "payload": ...}`` text of a decoded record, as JsonConverter writes it."""
        return '{"schema":' + self.schema_text + ',"payload":' + self.payload(record) + "}"
