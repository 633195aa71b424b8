"""Canonical texts a native decoder vouches for, per Spark type, as Java regular expressions.

A native decoder (``canal_native``, ``dts_shareplex_native``) decodes a value in Spark only when its text matches its
type's form here; whatever a form refuses goes to the Python decoder, whose ``value_checks`` and
``configured_types.lossy_columns`` judge it. So each form accepts a subset of what those accept: the text alone decides
(ranges and the calendar are in the expression), and no form leaves a value for which the two paths could differ.
"""

from __future__ import annotations

# The Python check rounds a decimal in a 28-digit context: a wider decimal type is left to it.
MAX_DECIMAL_PRECISION = 28


def integers_up_to(limit: int) -> str:
    """A regular expression for the unsigned decimal texts of the integers 0..``limit`` (leading zeros allowed up to
    ``limit``'s number of digits): every shorter text, and at ``limit``'s length a digit-by-digit comparison."""
    digits = str(limit)
    forms = [f"[0-9]{{1,{len(digits) - 1}}}"] if len(digits) > 1 else []
    for index, digit in enumerate(digits):
        if digit != "0":
            rest = len(digits) - index - 1
            forms.append(digits[:index] + f"[0-{int(digit) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    forms.append(digits)
    return "(?:" + "|".join(forms) + ")"


def _signed_range(bits: int) -> str:
    return f"(?:{integers_up_to(2 ** (bits - 1) - 1)}|-{integers_up_to(2 ** (bits - 1))})"


# A calendar date of years 1..9999: February 29 only of a leap year (divisible by 4, and by 400 at a century).
CALENDAR_DATE = (
    r"(?:(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-"
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
    r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
_REAL = r"-?[0-9]{1,40}(?:\.[0-9]{1,40})?(?:[eE][+-]?[0-9]{1,3})?"
# Canonical text each Spark type's check accepts natively: the text alone decides (ranges and the calendar are in
# the expression), and it accepts a subset of what ``value_checks`` accepts, so whatever it refuses is Python's.
VALUE_FORMS = {
    "boolean": "(?:0|1|true|false)",
    "int": _signed_range(32),
    "bigint": _signed_range(64),
    # value_checks holds tinyint and smallint to int's range, as the typed table's cast does
    "tinyint": _signed_range(32),
    "smallint": _signed_range(32),
    "float": _REAL,
    "double": _REAL,
    # A time of day of midnight is allowed (Oracle's DATE as DRS prints it): the cast drops it and loses nothing.
    "date": f"{CALENDAR_DATE}(?: 00:00:00)?",
    "timestamp": f"{CALENDAR_DATE}(?: {_TIME})?",
    "timestamp_ntz": f"{CALENDAR_DATE}(?: {_TIME})?",
}
# Any text without the characters U+0001..U+0003, which a native decoder joins and marks values with (a key column of
# type string).
ANY_TEXT = "[^\\x01-\\x03]*"


def decimal_form(precision: int, scale: int) -> str:
    """The texts of decimal(precision, scale) that fit it after rounding to its scale: with fewer integer digits than
    it holds, any fraction (rounding cannot carry into a digit it lacks); with all of them, at most ``scale``."""
    whole = precision - scale
    if whole == 0:
        return f"-?0(?:\\.[0-9]{{1,{scale}}})?"
    fraction = f"(?:\\.[0-9]{{1,{scale}}})?" if scale else ""
    shorter = f"[0-9]{{1,{whole - 1}}}(?:\\.[0-9]{{1,40}})?|" if whole > 1 else ""
    return f"-?(?:{shorter}[0-9]{{{whole}}}{fraction})"


def exact_decimal_form(precision: int, scale: int) -> str | None:
    """The texts of decimal(precision, scale) that its CAST keeps exactly -- at most the type's integer digits and at
    most ``scale`` fraction digits -- for a format whose decoder quarantines a value the cast would round
    (``configured_types``); None for a type wider than the Python check reads."""
    if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
        return None
    whole = precision - scale
    integer = f"[0-9]{{1,{whole}}}" if whole else "0"
    fraction = f"(?:\\.[0-9]{{1,{scale}}})?" if scale else ""
    return f"-?{integer}{fraction}"


def decimal_type(spark_type: str) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(p,s)`` type name, else None."""
    if not spark_type.startswith("decimal(") or not spark_type.endswith(")"):
        return None
    try:
        precision, scale = (int(part) for part in spark_type[len("decimal(") : -1].split(","))
    except ValueError:
        return None
    return precision, scale
