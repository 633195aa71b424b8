"""For formats whose messages lack types or keys (DTS Shareplex JSON, DataWorks JSON): the values a configured type
would change -- in plain Python, per record.

Shareplex JSON carries neither types nor keys, DataWorks JSON has no decimal type: for them the config's
``tables.<table>.column_types`` / ``primary_key`` are the source of truth, and a decoder must know them while it
decodes (to render a DataWorks DATE as a date, to tell a key change, to see a partial image).

A configured type is applied with CAST, which rounds a decimal with more fraction digits than the scale and drops the
time of day from a date: ``lossy_columns`` names the values a cast would change, so a decoder quarantines them instead
of letting the cast alter a value silently.

The messages' fields are read with ``from_json_in_python`` and cast with ``text_casts``, as the Spark expressions these
decoders were first did.
"""

from __future__ import annotations

import re
from functools import lru_cache

# --- values a configured type would change ----------------------------------------------------------------------------

# Java's `$` (no MULTILINE): the end of the text, or before a line terminator that ends it. Spark's regexes are Java's,
# and so are `\d` and `\s` (ASCII only) and `.` (no line terminator): spelled out below.
_END = r"(?=(?:\r\n|[\n\r\u0085\u2028\u2029])?\Z)"
_ANY = r"[^\n\r\u0085\u2028\u2029]"
_PRECISION = re.compile(r"decimal\([ \t\n\x0b\f\r]*([0-9]+)[ \t\n\x0b\f\r]*,")
_SCALE = re.compile(r",[ \t\n\x0b\f\r]*([0-9]+)[ \t\n\x0b\f\r]*\)" + _END)
_FRACTION = re.compile(r"\.([0-9]*)" + _END)
_PLAIN = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)" + _END)
_WHOLE = re.compile(r"[0-9]*")
_TIME_OF_DAY = re.compile(r"[+-]?[0-9]+-[0-9]+-[0-9]+[T ](" + _ANY + r"*)" + _END)
_MIDNIGHT = re.compile(r"00:00(:00(\.0*)?)?" + _END)


@lru_cache(maxsize=256)
def _precision_scale(spark_type: str) -> tuple[int | None, int | None]:
    precision, scale = _PRECISION.match(spark_type), _SCALE.search(spark_type)
    return (int(precision.group(1)) if precision else None, int(scale.group(1)) if scale else None)


def _decimal_lossy(value: str, spark_type: str) -> bool:
    """True when CAST(value AS decimal(p,s)) would round the value or overflow (exponent notation counts as lossy)."""
    precision, scale = _precision_scale(spark_type)
    digits = value.strip(" ")
    if digits[:1] in ("+", "-"):
        digits = digits[1:]
    if not _PLAIN.match(digits):
        return True
    if precision is None or scale is None:
        return False
    whole = _WHOLE.match(digits).group(0).lstrip("0")
    fraction = _FRACTION.search(digits)
    return len(whole) > precision - scale or len(fraction.group(1).rstrip("0") if fraction else "") > scale


def _date_lossy(value: str) -> bool:
    """True when the text carries a time of day other than midnight (CAST AS date would drop it)."""
    found = _TIME_OF_DAY.match(value.strip(" "))
    time_part = found.group(1) if found else ""
    return time_part != "" and not _MIDNIGHT.match(time_part)


def lossy_columns(image: dict[str, str | None] | None, types: dict[str, str] | None) -> list[str]:
    """Columns of a canonical-text image whose value CAST to its (configured) type would change."""
    lossy = []
    for column, value in (image or {}).items():
        if value is None:
            continue
        spark_type = (types or {}).get(column) or "string"
        if spark_type.startswith("decimal"):
            if _decimal_lossy(value, spark_type):
                lossy.append(column)
        elif spark_type == "date" and _date_lossy(value):
            lossy.append(column)
    return lossy
