"""DTS Avro value unions -> canonical text and Spark type (docs/format-spec.md section a3).

Each element of ``beforeImages``/``afterImages`` is one branch of a union, read by fastavro as ``(type name, fields)``.
For MySQL sources the field's ``dataTypeNumber`` (the binlog type code) says which branches it may hold and which
Spark type it gets; any other branch is a ``wrong_branch`` record. Other sources are typed by the branch alone.

binlog type code (MySQL)                branch                  Spark type
1 TINY, 2 SHORT, 9 INT24                Integer                 int
3 LONG                                  Integer                 bigint         (an INT UNSIGNED fits)
8 LONGLONG, 16 BIT                      Integer                 decimal(20,0)  (a BIGINT UNSIGNED / BIT(64) fits)
0 DECIMAL, 246 NEWDECIMAL               Decimal                 decimal(p,s) of the value; string past 38 digits
4 FLOAT, 5 DOUBLE                       Float                   float, double
7 TIMESTAMP                             Timestamp               timestamp (UTC instant)
12 DATETIME                             DateTime                timestamp_ntz
10 DATE, 14 NEWDATE                     DateTime                date
11 TIME                                 DateTime                string [-]HH:MM:SS[.ffffff] (hours may pass 99)
13 YEAR                                 DateTime, Integer       int
15 VARCHAR, 253 VAR_STRING, 254 STRING  Character               string; binary when the charset is binary/empty
245 JSON, 247 ENUM, 248 SET             TextObject, Character   string
249-252 BLOB / TEXT                     BinaryObject            binary
                                        TextObject, Character   string
255 GEOMETRY                            BinaryGeometry (WKB)    binary
                                        TextGeometry (WKT)      string
(any source)                            TimestampWithTimeZone   timestamp (the local time at its zone, as UTC)
The binlog has no signedness and no TINYINT(1)-as-boolean: ``tables.<t>.column_types`` narrows int/bigint columns
or makes a flag boolean. Pitfalls handled here: ``Timestamp.millis`` and ``DateTime.millis`` hold MICROseconds; an
``Integer`` is an arbitrary-precision decimal string; ``Character`` bytes are decoded with their MySQL charset
(``latin1`` is MySQL's cp1252 variant); a value its type cannot hold exactly (a zero date, a decimal with more digits
than its precision, an integer past its type) is ``bad_value``, never rounded or clamped.

``EmptyObject`` (NONE, or the unused NULL symbol) is "column absent from this image" -- a partial image (MySQL
binlog_row_image=MINIMAL/NOBLOB) -- and is kept apart from an Avro null, which is SQL NULL.
"""

from __future__ import annotations

import base64
import codecs
import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo

from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.schema import REASON_BAD_VALUE, REASON_WRONG_BRANCH

NAMESPACE = "com.alibaba.dts.formats.avro."
INTEGER, CHARACTER, DECIMAL, FLOAT = "Integer", "Character", "Decimal", "Float"
TIMESTAMP, DATETIME, ZONED = "Timestamp", "DateTime", "TimestampWithTimeZone"
BINARY_GEOMETRY, TEXT_GEOMETRY, BINARY_OBJECT, TEXT_OBJECT, EMPTY = (
    "BinaryGeometry",
    "TextGeometry",
    "BinaryObject",
    "TextObject",
    "EmptyObject",
)


class Absent:
    """The value of a column an image does not carry (EmptyObject)."""


ABSENT = Absent()

# binlog type code -> (name, branches it may hold, Spark type when it does not depend on the value)
MYSQL_TYPES: dict[int, tuple[str, frozenset, str | None]] = {
    0: ("DECIMAL", frozenset({DECIMAL}), None),
    1: ("TINY", frozenset({INTEGER}), "int"),
    2: ("SHORT", frozenset({INTEGER}), "int"),
    3: ("LONG", frozenset({INTEGER}), "bigint"),
    4: ("FLOAT", frozenset({FLOAT}), "float"),
    5: ("DOUBLE", frozenset({FLOAT}), "double"),
    6: ("NULL", frozenset(), None),
    7: ("TIMESTAMP", frozenset({TIMESTAMP}), "timestamp"),
    8: ("LONGLONG", frozenset({INTEGER}), "decimal(20,0)"),
    9: ("INT24", frozenset({INTEGER}), "int"),
    10: ("DATE", frozenset({DATETIME}), "date"),
    11: ("TIME", frozenset({DATETIME}), "string"),
    12: ("DATETIME", frozenset({DATETIME}), "timestamp_ntz"),
    13: ("YEAR", frozenset({DATETIME, INTEGER}), "int"),
    14: ("NEWDATE", frozenset({DATETIME}), "date"),
    15: ("VARCHAR", frozenset({CHARACTER}), None),
    16: ("BIT", frozenset({INTEGER}), "decimal(20,0)"),
    245: ("JSON", frozenset({TEXT_OBJECT, CHARACTER}), "string"),
    246: ("NEWDECIMAL", frozenset({DECIMAL}), None),
    247: ("ENUM", frozenset({TEXT_OBJECT, CHARACTER}), "string"),
    248: ("SET", frozenset({TEXT_OBJECT, CHARACTER}), "string"),
    249: ("TINY_BLOB", frozenset({BINARY_OBJECT, TEXT_OBJECT, CHARACTER}), None),
    250: ("MEDIUM_BLOB", frozenset({BINARY_OBJECT, TEXT_OBJECT, CHARACTER}), None),
    251: ("LONG_BLOB", frozenset({BINARY_OBJECT, TEXT_OBJECT, CHARACTER}), None),
    252: ("BLOB", frozenset({BINARY_OBJECT, TEXT_OBJECT, CHARACTER}), None),
    253: ("VAR_STRING", frozenset({CHARACTER}), None),
    254: ("STRING", frozenset({CHARACTER}), None),
    255: ("GEOMETRY", frozenset({BINARY_GEOMETRY, TEXT_GEOMETRY}), None),
}
INTEGER_RANGES = {
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
    "decimal(20,0)": (-(10**20) + 1, 10**20 - 1),
    "decimal(38,0)": (-(10**38) + 1, 10**38 - 1),
}

# MySQL charset names -> Python codecs; other names (Java's "UTF-8", "GBK", ...) go through codecs.lookup.
MYSQL_CHARSETS = {
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "utf8mb4": "utf-8",
    "ascii": "ascii",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "gb18030": "gb18030",
    "big5": "big5",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "euckr": "euc_kr",
    "latin2": "iso8859_2",
    "latin5": "iso8859_9",
    "latin7": "iso8859_13",
    "greek": "iso8859_7",
    "hebrew": "iso8859_8",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
    "tis620": "tis_620",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
}
BINARY_CHARSETS = ("", "binary")


def _mysql_latin1_table() -> dict[int, str]:
    """MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined mapped to U+0081, U+008D, ..."""
    table = {}
    for byte in range(0x80, 0xA0):
        try:
            table[byte] = bytes([byte]).decode("cp1252")
        except UnicodeDecodeError:
            table[byte] = chr(byte)
    return table


MYSQL_LATIN1 = _mysql_latin1_table()
PLAIN_DECIMAL = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
PLAIN_INTEGER = re.compile(r"^[+-]?\d+$")
OFFSET = re.compile(r"^(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$")


def branch_of(value) -> str | None:
    """The union branch name of an image element (None for an Avro null)."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[0].removeprefix(NAMESPACE)
    raise DecodeError(REASON_WRONG_BRANCH, f"image element {value!r} is no branch of the value union")


def default_type(type_number: int, is_mysql: bool) -> str | None:
    """The Spark type of a MySQL column whose type does not depend on its value, else None.

    Only such types are declared for a NULL or absent value: a guess (string for a VARBINARY, ...) would be taken as
    the column's type by the latest-declaration rule of the published table."""
    if not is_mysql or type_number not in MYSQL_TYPES:
        return None
    return MYSQL_TYPES[type_number][2]


def convert(name: str, type_number: int, value, is_mysql: bool) -> tuple[object, str | None]:
    """(canonical text | None | ABSENT, Spark type | None) of one image element of column ``name``."""
    branch = branch_of(value)
    if branch is None:
        return None, default_type(type_number, is_mysql)
    if branch == EMPTY:
        return ABSENT, default_type(type_number, is_mysql)
    fields = value[1]
    if is_mysql and type_number in MYSQL_TYPES:
        type_name, allowed, _ = MYSQL_TYPES[type_number]
        if branch not in allowed:
            expected = " or ".join(sorted(allowed)) or "null"
            raise DecodeError(
                REASON_WRONG_BRANCH,
                f"column {name} (dataTypeNumber {type_number} {type_name}) holds a {branch} value; "
                f"its values are {expected}",
            )
    try:
        return _CONVERTERS[branch](name, type_number if is_mysql else None, fields)
    except DecodeError:
        raise
    except (TypeError, KeyError, ValueError, OverflowError, InvalidOperation) as error:
        raise DecodeError(
            REASON_BAD_VALUE, f"column {name}: {branch} value {fields!r} cannot be read ({error})"
        ) from None


def _bad(name: str, message: str) -> DecodeError:
    return DecodeError(REASON_BAD_VALUE, f"column {name}: {message}")


def _integer(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    text = fields["value"].strip()
    if not PLAIN_INTEGER.match(text):
        raise _bad(name, f"Integer value {text!r} is not an integer")
    number = int(text)
    spark_type = (MYSQL_TYPES[type_number][2] if type_number is not None else None) or "decimal(38,0)"
    if type_number == 13:
        spark_type = "int"
    low, high = INTEGER_RANGES[spark_type]
    if not low <= number <= high:
        raise _bad(name, f"integer {number} does not fit its type {spark_type}")
    return str(number), spark_type


def _decimal(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    text, precision, scale = fields["value"].strip(), fields["precision"], fields["scale"]
    number = Decimal(text)
    if not number.is_finite():
        raise _bad(name, f"Decimal value {text!r} is not a finite number")
    canonical = text if PLAIN_DECIMAL.match(text) else format(number, "f")
    if not (0 < precision <= 38 and 0 <= scale <= precision):
        return canonical, "string"  # MySQL allows 65 digits; Spark decimals stop at 38: keep the exact text
    _, digits, exponent = number.normalize().as_tuple()
    fraction_digits = max(0, -exponent)
    whole_digits = 0 if number == 0 else max(0, len(digits) + exponent)
    if fraction_digits > scale or whole_digits > precision - scale:
        raise _bad(name, f"decimal {text} does not fit decimal({precision},{scale})")
    return canonical, f"decimal({precision},{scale})"


def _float(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    number = fields["value"]
    spark_type = "float" if type_number == 4 else "double"
    if number != number:
        return "NaN", spark_type
    if number in (float("inf"), float("-inf")):
        return ("Infinity" if number > 0 else "-Infinity"), spark_type
    return repr(float(number)), spark_type


def _fraction(micros: int | None) -> str:
    return f".{micros:06d}" if micros else ""


def _timestamp(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    micros = fields["millis"] or 0  # named millis, holds microseconds
    if not 0 <= micros < 1_000_000:
        raise _bad(name, f"Timestamp micros {micros} out of range")
    instant = datetime(1970, 1, 1) + timedelta(seconds=fields["timestamp"], microseconds=micros)
    return instant.strftime("%Y-%m-%d %H:%M:%S") + _fraction(micros), "timestamp"


def _time_text(fields: dict) -> str:
    parts = [fields["hour"] or 0, fields["minute"] or 0, fields["second"] or 0, fields["millis"] or 0]
    negative = any(part < 0 for part in parts)
    hour, minute, second, micros = (abs(part) for part in parts)
    return f"{'-' if negative else ''}{hour:02d}:{minute:02d}:{second:02d}{_fraction(micros)}"


def _datetime_value(name: str, fields: dict) -> datetime:
    year, month, day = fields["year"], fields["month"], fields["day"]
    if not year or not month or not day:
        raise _bad(name, f"date {year}-{month}-{day} (a MySQL zero date?) has no calendar date")
    micros = fields["millis"] or 0  # named millis, holds microseconds
    return datetime(year, month, day, fields["hour"] or 0, fields["minute"] or 0, fields["second"] or 0, micros)


def _datetime(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    has_date = fields["year"] is not None and fields["month"] is not None and fields["day"] is not None
    has_time = fields["hour"] is not None
    if type_number == 13 or (type_number is None and fields["year"] is not None and fields["month"] is None):
        if fields["year"] is None:
            raise _bad(name, "YEAR value without a year")
        return str(fields["year"]), "int"
    if type_number == 11 or (type_number is None and has_time and not has_date):
        return _time_text(fields), "string"
    value = _datetime_value(name, fields)
    if type_number in (10, 14) or (type_number is None and not has_time):
        if value.time() != datetime.min.time():
            raise _bad(name, f"DATE value {value} has a time of day")
        return value.date().isoformat(), "date"
    return value.strftime("%Y-%m-%d %H:%M:%S") + _fraction(value.microsecond), "timestamp_ntz"


def zone_of(name: str, zone: str):
    match = OFFSET.match(zone.strip())
    if match:
        sign, hours, minutes = match.groups()
        offset = timedelta(hours=int(hours), minutes=int(minutes or 0))
        return timezone(-offset if sign == "-" else offset)
    try:
        return ZoneInfo(zone.strip())
    except Exception:
        raise _bad(name, f"time zone {zone!r} is not known") from None


def _zoned(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    local = _datetime_value(name, fields["value"])
    instant = local.replace(tzinfo=zone_of(name, fields["timezone"])).astimezone(UTC).replace(tzinfo=None)
    return instant.strftime("%Y-%m-%d %H:%M:%S") + _fraction(instant.microsecond), "timestamp"


def decode_charset(name: str, charset: str, raw: bytes) -> str:
    key = charset.strip().lower()
    try:
        if key == "latin1":
            return raw.decode("latin-1").translate(MYSQL_LATIN1)
        return raw.decode(MYSQL_CHARSETS.get(key) or codecs.lookup(charset.strip()).name)
    except LookupError:
        raise _bad(name, f"charset {charset!r} is not known") from None
    except UnicodeDecodeError as error:
        raise _bad(name, f"bytes are not {charset} text ({error.reason} at byte {error.start})") from None


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _character(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    charset, raw = fields["charset"] or "", fields["value"]
    if charset.strip().lower() in BINARY_CHARSETS:
        return _base64(raw), "binary"
    return decode_charset(name, charset, raw), "string"


def _binary(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    return _base64(fields["value"]), "binary"


def _text(name: str, type_number: int | None, fields: dict) -> tuple[str, str]:
    return fields["value"], "string"


_CONVERTERS = {
    INTEGER: _integer,
    CHARACTER: _character,
    DECIMAL: _decimal,
    FLOAT: _float,
    TIMESTAMP: _timestamp,
    DATETIME: _datetime,
    ZONED: _zoned,
    BINARY_GEOMETRY: _binary,
    TEXT_GEOMETRY: _text,
    BINARY_OBJECT: _binary,
    TEXT_OBJECT: _text,
}
