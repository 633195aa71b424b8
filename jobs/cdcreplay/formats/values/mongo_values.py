"""BSON values as Python objects, and MongoDB Extended JSON v2 (relaxed mode) to write them as text and read them back.

Python model (what :mod:`cdcreplay.formats.wire.mongo_shell` parses into):
  document -> dict (field order kept)     array -> list          string -> str      boolean -> bool   null -> None
  int32 / int64 -> int (range-checked)    double -> float        decimal128 -> Decimal128
  ObjectId -> ObjectId    date -> MongoDate (epoch milliseconds, any year)    binary -> Binary(subtype, bytes)
  timestamp -> MongoTimestamp(t, i)       regex -> Regex    MinKey / MaxKey / undefined -> MIN_KEY / MAX_KEY / UNDEFINED

Relaxed Extended JSON keeps every value exactly: numbers as JSON numbers (doubles that are not finite as
``{"$numberDouble": "NaN"}``), ``{"$oid"}``, ``{"$date": "<ISO-8601, ms, Z>"}`` for years 1970..9999 (other years
``{"$date": {"$numberLong": ...}}``), ``{"$numberDecimal"}``, ``{"$binary": {"base64", "subType"}}``,
``{"$timestamp"}``, ``{"$regularExpression"}``, ``{"$minKey": 1}``, ``{"$maxKey": 1}``, ``{"$undefined": true}``.
The only distinction it drops is int32 vs int64, which this model does not keep either (both are integers; the
changelog types them bigint).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)


class MongoValueError(ValueError):
    """A value that is not a valid BSON value (an ObjectId of 23 hex digits, an int64 out of range, ...)."""


@dataclass(frozen=True)
class ObjectId:
    hex: str

    def __post_init__(self):
        if len(self.hex) != 24 or any(c not in "0123456789abcdef" for c in self.hex):
            raise MongoValueError(f"ObjectId needs 24 lowercase hex digits, got {self.hex!r}")


@dataclass(frozen=True)
class MongoDate:
    millis: int  # milliseconds since the Unix epoch, UTC; BSON dates are int64 milliseconds

    def __post_init__(self):
        if not INT64_MIN <= self.millis <= INT64_MAX:
            raise MongoValueError(f"date {self.millis} ms is outside the int64 range")

    @classmethod
    def parse_iso(cls, text: str) -> MongoDate:
        """ISO-8601 as ISODate() takes it: a date, or a date-time with optional fraction and zone (UTC if none)."""
        try:
            moment = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise MongoValueError(f"date {text!r} is not ISO-8601") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        if moment.microsecond % 1000:
            raise MongoValueError(f"date {text!r} has more than millisecond precision (BSON dates have ms)")
        return cls((moment - EPOCH) // ONE_MS)

    def as_datetime(self) -> datetime | None:
        """UTC datetime, or None outside years 1..9999 (which Python and Spark cannot hold)."""
        try:
            return EPOCH + self.millis * ONE_MS
        except OverflowError:
            return None


@dataclass(frozen=True)
class Decimal128:
    value: Decimal  # exact, trailing zeros kept ("12.50" stays 12.50)

    @classmethod
    def parse(cls, text: str) -> Decimal128:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise MongoValueError(f"NumberDecimal({text!r}) is not a decimal number") from None
        if value.is_finite() and len(value.as_tuple().digits) > 34:
            raise MongoValueError(f"NumberDecimal({text!r}) has more than the 34 digits of decimal128")
        return cls(value)


@dataclass(frozen=True)
class Binary:
    subtype: int
    data: bytes


@dataclass(frozen=True)
class MongoTimestamp:
    t: int  # seconds
    i: int  # increment


@dataclass(frozen=True)
class Regex:
    pattern: str
    flags: str  # kept sorted: the order of regular expression options carries no meaning

    def __post_init__(self):
        object.__setattr__(self, "flags", "".join(sorted(self.flags)))


@dataclass(frozen=True)
class _Singleton:
    name: str


MIN_KEY = _Singleton("MinKey")
MAX_KEY = _Singleton("MaxKey")
UNDEFINED = _Singleton("undefined")


def check_int64(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise MongoValueError(f"integer {value} is outside the int64 range")
    return value


# --- relaxed Extended JSON -----------------------------------------------------------------------------------------


def _date_json(date: MongoDate) -> dict:
    moment = date.as_datetime()
    if moment is not None and 1970 <= moment.year <= 9999:
        return {"$date": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"}
    return {"$date": {"$numberLong": str(date.millis)}}


def to_json_value(value):
    """A BSON value as the JSON-compatible structure of its relaxed Extended JSON."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$numberDouble": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, dict):
        return {name: to_json_value(item) for name, item in value.items()}
    if isinstance(value, list):
        return [to_json_value(item) for item in value]
    if isinstance(value, ObjectId):
        return {"$oid": value.hex}
    if isinstance(value, MongoDate):
        return _date_json(value)
    if isinstance(value, Decimal128):
        return {"$numberDecimal": str(value.value)}
    if isinstance(value, Binary):
        encoded = base64.b64encode(value.data).decode("ascii")
        return {"$binary": {"base64": encoded, "subType": f"{value.subtype:02x}"}}
    if isinstance(value, MongoTimestamp):
        return {"$timestamp": {"t": value.t, "i": value.i}}
    if isinstance(value, Regex):
        return {"$regularExpression": {"pattern": value.pattern, "options": "".join(sorted(value.flags))}}
    if value is MIN_KEY:
        return {"$minKey": 1}
    if value is MAX_KEY:
        return {"$maxKey": 1}
    if value is UNDEFINED:
        return {"$undefined": True}
    raise TypeError(f"not a BSON value: {value!r}")


def dumps(value) -> str:
    """Relaxed Extended JSON text, compact, non-ASCII kept as UTF-8."""
    return json.dumps(to_json_value(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _from_wrapper(pairs: list[tuple[str, object]]):
    """One JSON object of Extended JSON -> its BSON value (a plain document when it is no type wrapper)."""
    if len(pairs) == 1:
        name, item = pairs[0]
        if name == "$oid" and isinstance(item, str):
            return ObjectId(item)
        if name == "$date":
            if isinstance(item, str):
                return MongoDate.parse_iso(item)
            if isinstance(item, dict) and set(item) == {"$numberLong"}:
                return MongoDate(int(item["$numberLong"]))
            if isinstance(item, int) and not isinstance(item, bool):
                return MongoDate(item)  # legacy relaxed form: plain milliseconds
        if name == "$numberDecimal" and isinstance(item, str):
            return Decimal128.parse(item)
        if name == "$numberLong" and isinstance(item, str):
            return check_int64(int(item))
        if name == "$numberInt" and isinstance(item, str):
            return int(item)
        if name == "$numberDouble" and isinstance(item, str):
            return float(item)
        if name == "$binary" and isinstance(item, dict) and set(item) == {"base64", "subType"}:
            return Binary(int(item["subType"], 16), base64.b64decode(item["base64"], validate=True))
        if name == "$timestamp" and isinstance(item, dict) and set(item) == {"t", "i"}:
            return MongoTimestamp(item["t"], item["i"])
        if name == "$regularExpression" and isinstance(item, dict) and set(item) == {"pattern", "options"}:
            return Regex(item["pattern"], item["options"])
        if name == "$minKey":
            return MIN_KEY
        if name == "$maxKey":
            return MAX_KEY
        if name == "$undefined":
            return UNDEFINED
    return dict(pairs)


def loads(text: str):
    """Relaxed (or canonical) Extended JSON text -> BSON value."""
    return json.loads(text, object_pairs_hook=_from_wrapper)


def key_text(value) -> str:
    """The identity of an ``_id`` as text: equal for values MongoDB's ``_id`` index treats as equal.

    Numbers compare by value in BSON whatever their type (5, NumberLong(5), 5.0 and NumberDecimal("5.00") are one
    ``_id``), so they are written as their normalized exact decimal; everything else as relaxed Extended JSON, so a
    string "5" and the number 5, or an ObjectId and its hex string, stay apart.
    """
    return json.dumps(_key_json(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _key_json(value):
    number = _as_decimal(value)
    if number is not None:
        if number.is_nan():
            return {"$number": "NaN"}
        return {"$number": "0" if number.is_zero() else format(number.normalize(), "f")}
    if isinstance(value, dict):
        return {name: _key_json(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_key_json(item) for item in value]
    return to_json_value(value)


def _as_decimal(value) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))  # exact shortest text; "nan" and "inf" read as Decimal NaN / Infinity
    if isinstance(value, Decimal128):
        return value.value
    return None
