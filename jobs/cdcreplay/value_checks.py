"""Does a canonical-text value read back as its declared Spark type? -- in plain Python, per value.

Every decoded row-change is checked before it may enter the changelog: a value that its declared type cannot hold
(text in an int column, an impossible date, broken base64) sends the record to quarantine naming the column, instead
of turning into a silent NULL when the typed table CASTs it.

The rules follow Spark's own CAST / try_to_binary (what ``tables.typed_table`` applies), so a value accepted here is
read by the cast. Where Spark is more lenient than any decoder's canonical text needs -- a date followed by arbitrary
text, a time of day without a date, hexadecimal floats, region-named zones in odd spellings -- the rule here is
stricter: such a value is quarantined rather than guessed at. ``tests/test_value_checks.py`` holds both directions
against the real cast.
"""

from __future__ import annotations

import calendar
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache

# Spark trims ASCII whitespace and control characters (<= U+0020) around numbers, dates and timestamps.
_SPARK_BLANKS = "".join(chr(code) for code in range(33))

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")
_DOUBLE_SPECIALS = frozenset({"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"})
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_DECIMAL_TYPE = re.compile(r"decimal\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)")
_BOOLEAN_TEXTS = frozenset({"true", "false", "1", "0", "t", "f", "yes", "no"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]*(={0,2})")
_ASCII_SPACE = re.compile(r"[\t\n\r\f\v ]+")

_DATE = r"(?P<sign>[+-]?)(?P<year>[0-9]{4,6})(-(?P<month>[0-9]{1,2})(-(?P<day>[0-9]{1,2}))?)?"
_TIME = r"(?P<hour>[0-9]{1,2}):(?P<minute>[0-9]{1,2})(:(?P<second>[0-9]{1,2})(\.[0-9]+)?)?"
_ZONE = r"\s?(Z|UTC|GMT|UT|(UTC|GMT|UT)?[+-][0-9]{1,2}(:?[0-9]{2}){0,2}|[A-Za-z_]+(/[A-Za-z0-9_+-]+)+)"
_DATE_ONLY = re.compile(_DATE + r"([ T].*)?")
_TIMESTAMP = re.compile(_DATE + r"([ T]" + _TIME + r"(" + _ZONE + r")?)?")

INT_RANGE = (-(2**31), 2**31 - 1)
BIGINT_RANGE = (-(2**63), 2**63 - 1)


def _calendar_ok(match: re.Match) -> bool:
    year = int(match["year"]) * (-1 if match["sign"] == "-" else 1)
    month = int(match["month"] or 1)
    day = int(match["day"] or 1)
    if not 1 <= month <= 12 or day < 1:
        return False
    # Proleptic Gregorian calendar, as Spark's; calendar.monthrange wants years 1..9999, and leap years repeat.
    leap = calendar.isleap(year % 400 or 400)
    days = calendar.mdays[month] + (1 if month == 2 and leap else 0)
    return day <= days


def _integer_in(text: str, bounds: tuple[int, int]) -> bool:
    text = text.strip(_SPARK_BLANKS)
    return _INTEGER.fullmatch(text) is not None and bounds[0] <= int(text) <= bounds[1]


def _double(text: str) -> bool:
    text = text.strip(_SPARK_BLANKS)
    return text.lower() in _DOUBLE_SPECIALS or _DOUBLE.fullmatch(text) is not None


def _date(text: str) -> bool:
    match = _DATE_ONLY.fullmatch(text.strip(_SPARK_BLANKS))
    return match is not None and _calendar_ok(match)


def _timestamp(text: str) -> bool:
    match = _TIMESTAMP.fullmatch(text.strip(_SPARK_BLANKS))
    if match is None or not _calendar_ok(match):
        return False
    if match["hour"] is None:
        return True
    return int(match["hour"]) <= 23 and int(match["minute"]) <= 59 and int(match["second"] or 0) <= 59


@lru_cache(maxsize=256)
def _precision_scale(spark_type: str) -> tuple[int, int]:
    match = _DECIMAL_TYPE.fullmatch(spark_type)
    return (int(match.group(1)), int(match.group(2))) if match else (38, 0)


def _decimal(text: str, spark_type: str) -> bool:
    """Decimal text that fits decimal(p,s) once rounded half-up to s digits (more would be a NULL, not a value)."""
    if _DECIMAL.fullmatch(text) is None:
        return False
    precision, scale = _precision_scale(spark_type)
    try:
        rounded = Decimal(text).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    except InvalidOperation:  # an exponent far beyond any precision
        return False
    whole = abs(int(rounded))
    return (len(str(whole)) if whole else 0) <= precision - scale


def _base64(text: str) -> bool:
    compact = _ASCII_SPACE.sub("", text)
    match = _BASE64.fullmatch(compact)
    if match is None:
        return False
    padding = len(match.group(1))
    return (len(compact) - padding) % 4 != 1 and (padding == 0 or len(compact) % 4 == 0)


# Values repeat a lot in CDC streams (statuses, flags, small ids, dates): checked results are remembered per worker.
_CHECKED: dict[tuple[str, str], bool] = {}
_CHECKED_LIMIT = 200_000


def valid_value(value: str | None, spark_type: str) -> bool:
    """True when canonical text ``value`` reads back as ``spark_type`` (NULL is always valid)."""
    if value is None or spark_type == "string":
        return True
    found = _CHECKED.get((value, spark_type))
    if found is None:
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        found = _CHECKED[(value, spark_type)] = _check(value, spark_type)
    return found


def _check(value: str, spark_type: str) -> bool:
    if spark_type in ("int", "smallint", "tinyint"):
        return _integer_in(value, INT_RANGE)
    if spark_type == "bigint":
        return _integer_in(value, BIGINT_RANGE)
    if spark_type in ("double", "float"):
        return _double(value)
    if spark_type.startswith("decimal"):
        return _decimal(value, spark_type)
    if spark_type == "boolean":
        return value.lower() in _BOOLEAN_TEXTS
    if spark_type == "date":
        return _date(value)
    if spark_type.startswith("timestamp"):
        return _timestamp(value)
    if spark_type == "binary":
        return _base64(value)
    return True


def invalid_columns(image: dict[str, str | None] | None, column_types: dict[str, str]) -> list[str]:
    """Names of the columns of ``image`` whose value does not read back as its declared type (string if undeclared)."""
    if not image:
        return []
    return [column for column, value in image.items() if not valid_value(value, column_types.get(column, "string"))]
