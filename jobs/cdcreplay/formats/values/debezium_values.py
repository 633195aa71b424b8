"""Kafka Connect / Debezium values -> canonical text and Spark type (docs/format-spec.md section e, "types").

A Debezium image value arrives as what JsonConverter wrote (or, from Avro, the same Connect value). Its canonical text
is what ``CAST(text AS <spark type>)`` reads back; the field's Connect schema (primitive type, semantic ``name``,
``parameters``) says which conversion applies:

  Decimal / VariableScaleDecimal  base64 of the big-endian two's-complement unscaled integer -> exact decimal text
                                  (at most 16 bytes and 38 digits: a DECIMAL(38); longer is undecodable)
  Date (days)                     yyyy-MM-dd
  Timestamp / MicroTimestamp / NanoTimestamp (ms / us / ns since the epoch)   yyyy-MM-dd HH:mm:ss.ffffff (UTC)
  Time / MicroTime / NanoTime (ms / us / ns since midnight)                   HH:mm:ss.ffffff
  IsoDate                         the date without its zone suffix (a date cannot hold one)
  anything else                   the JSON value as text: strings as such, numbers as their JSON token,
                                  booleans true/false, nested structs/arrays as compact JSON
A value its type cannot decode (bad base64, a day count beyond year 9999) converts to None: the caller quarantines it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from cdcreplay.formats.wire.json_reader import EXACT

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DATE_NAMES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
MILLI_TIMESTAMPS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
MILLI_TIMES = ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time")
TIMESTAMP_NAMES = (*MILLI_TIMESTAMPS, "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp")
TIME_NAMES = (*MILLI_TIMES, "io.debezium.time.MicroTime", "io.debezium.time.NanoTime")
NANO_NAMES = ("io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime")
ISO_DATE = "io.debezium.time.IsoDate"

# Spark's timestamp and date range (years 1..9999): numbers outside it are undecodable values, never a crash.
MIN_MICROS, MAX_MICROS = -62135596800000000, 253402300799999999
MIN_DAYS, MAX_DAYS = -719162, 2932896
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DECIMAL_BYTES, DECIMAL_LIMIT = 16, 10**38
EPOCH = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
_ISO_DATE_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")
_BASE64_CHARS = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_WHITESPACE = str.maketrans("", "", " \t\r\n")
_quote = json.encoder.encode_basestring  # JSON string literal, non-ASCII kept (as JsonConverter writes it)


# --- JSON values as text ----------------------------------------------------------------------------------------------


def number_text(value: float) -> str:
    """A float (Avro float/double) as the JSON token text the same value has on the JSON wire."""
    return str(Decimal(repr(value)))


def compact(value, sort_keys: bool = False) -> str:
    """Compact JSON text of a parsed value (numbers as their token text); MongoDB documents sort their keys."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is Decimal:
        return str(value)
    if kind is float:
        return number_text(value)
    if kind is dict:
        items = sorted(value.items()) if sort_keys else value.items()
        return "{" + ",".join(_quote(str(k)) + ":" + compact(v, sort_keys) for k, v in items) + "}"
    if kind is list:
        return "[" + ",".join(compact(v, sort_keys) for v in value) + "]"
    return _quote(str(value))


def as_text(value) -> str | None:
    """A parsed JSON value as a text column holds it: strings as such, everything else as its JSON text."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is int or kind is Decimal:
        return str(value)
    return compact(value)


def as_long(text: str | None) -> int | None:
    """Text -> int64 the way a SQL cast reads it (optional sign, digits, surrounding blanks); None otherwise."""
    if text is None:
        return None
    digits = text.strip()
    unsigned = digits[1:] if digits[:1] in ("+", "-") else digits
    if not unsigned.isascii() or not unsigned.isdigit():
        return None
    number = int(digits)
    return number if INT64_MIN <= number <= INT64_MAX else None


def as_position(text: str | None) -> Decimal | None:
    """One source-position part (number or digit text) as decimal(38,0), rounded half up; None if it is none."""
    if text is None:
        return None
    try:
        number = Decimal(text.strip())
    except (InvalidOperation, ValueError):
        return None
    if not number.is_finite():
        return None
    whole = number.quantize(Decimal(1), rounding="ROUND_HALF_UP") if number.as_tuple().exponent < 0 else number
    return whole if abs(whole) < DECIMAL_LIMIT else None


# --- Connect Decimal ------------------------------------------------------------------------------------------------


def base64_bytes(text: str | None) -> bytes | None:
    """base64 text -> bytes; None for text that is not base64 (blanks ignored, padding optional)."""
    if text is None:
        return None
    compacted = text.translate(_WHITESPACE)
    if not _BASE64_CHARS.fullmatch(compacted):
        return None
    body = compacted.rstrip("=")
    if len(body) % 4 == 1 or (len(body) != len(compacted) and len(compacted) % 4):
        return None
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def decimal_from_base64(text: str | None, scale) -> str | None:
    """Kafka Connect Decimal: base64 of the big-endian two's-complement unscaled integer -> exact decimal text.

    At most 16 bytes and 38 digits (what a DECIMAL(38) can hold); longer or empty input is undecodable (None). A scale
    that is not an integer counts as 0.
    """
    raw = base64_bytes(text)
    if not raw or len(raw) > MAX_DECIMAL_BYTES:
        return None
    unscaled = int.from_bytes(raw, "big", signed=True)
    if abs(unscaled) >= DECIMAL_LIMIT:
        return None
    digits_scale = as_long(scale if scale is None or isinstance(scale, str) else str(scale)) or 0
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled))
    if digits_scale <= 0:
        return sign + digits
    padded = digits.rjust(digits_scale + 1, "0")
    return f"{sign}{padded[:-digits_scale]}.{padded[-digits_scale:]}"


def _variable_scale_decimal(text: str) -> str | None:
    """VariableScaleDecimal is a struct {scale, value}: the Decimal encoding with the scale carried per value."""
    if not text.startswith("{"):
        return None
    try:
        struct = EXACT.parse(text)
    except ValueError:
        return None
    if not isinstance(struct, dict):
        return None
    return decimal_from_base64(as_text(struct.get("value")), as_text(struct.get("scale")))


# --- temporal types -------------------------------------------------------------------------------------------------


def _moment(micros: int | None) -> datetime | None:
    if micros is None or not MIN_MICROS <= micros <= MAX_MICROS:
        return None
    return EPOCH + timedelta(microseconds=micros)


def _micros(text: str, name: str) -> int | None:
    number = as_long(text)
    if number is None:
        return None
    if name in MILLI_TIMESTAMPS or name in MILLI_TIMES:
        return number * 1000
    if name in NANO_NAMES:
        return math.floor(float(number) / 1000.0)  # as the SQL expression did: through a double
    return number


def timestamp_text(micros: int | None) -> str | None:
    moment = _moment(micros)
    if moment is None:
        return None
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}"
    )


def _time_text(micros: int | None) -> str | None:
    moment = _moment(micros)
    if moment is None:
        return None
    return f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}.{moment.microsecond:06d}"


def _date_text(text: str) -> str | None:
    days = as_long(text)
    if days is None or not MIN_DAYS <= days <= MAX_DAYS:
        return None
    return (EPOCH_DATE + timedelta(days=days)).isoformat()


# --- per field ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One column of a Connect schema: primitive ``type``, semantic ``name``, Decimal scale and precision (text)."""

    type: str | None = None
    name: str | None = None
    scale: str | None = None
    precision: str | None = None


Converter = Callable[[str], "str | None"]


def converter(field: Field | None) -> Converter | None:
    """The text conversion of a field, or None when its value text is already canonical (most fields)."""
    name = field.name if field is not None else None
    if name is None:
        return None
    if name == DECIMAL:
        scale = field.scale
        return lambda text: decimal_from_base64(text, scale)
    if name == VARIABLE_SCALE_DECIMAL:
        return _variable_scale_decimal
    if name in DATE_NAMES:
        return _date_text
    if name in TIMESTAMP_NAMES:
        return lambda text: timestamp_text(_micros(text, name))
    if name in TIME_NAMES:
        return lambda text: _time_text(_micros(text, name))
    if name == ISO_DATE:
        return lambda text: _ISO_DATE_ZONE.sub("", text, count=1)
    return None


def canonical_value(text: str | None, name: str | None, scale=None) -> str | None:
    """One value's text -> canonical text, by the field's semantic name (None in, None out)."""
    if text is None:
        return None
    convert = converter(Field(name=name, scale=None if scale is None else str(scale)))
    return text if convert is None else convert(text)


_PRIMITIVE_TYPES = {
    "boolean": "boolean",
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float": "float",
    "float64": "double",
    "double": "double",
    "bytes": "binary",
}
_SEMANTIC_TYPES = {
    **dict.fromkeys(DATE_NAMES, "date"),
    **dict.fromkeys(TIMESTAMP_NAMES, "timestamp_ntz"),
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.IsoTimestamp": "timestamp",
    ISO_DATE: "date",
    "io.debezium.time.Year": "int",
    # Durations: an integer count of their unit (Parquet cannot hold Spark intervals).
    "io.debezium.time.MicroDuration": "bigint",
    "io.debezium.time.NanoDuration": "bigint",
    "io.debezium.data.Bits": "binary",  # BIT(n): bytes, base64 like any binary
}


def debezium_field_type(field: Field) -> str:
    """The Spark type of a Connect schema field (the type table of ``value_types``)."""
    if field.name == DECIMAL:
        precision = "38" if field.precision is None else field.precision
        return f"decimal({precision},{'0' if field.scale is None else field.scale})"
    if field.name is not None:
        # VariableScaleDecimal, *Time, Interval, Json, Enum, Uuid, Xml, ...: text.
        return _SEMANTIC_TYPES.get(field.name, "string")
    return _PRIMITIVE_TYPES.get(field.type, "string")
