"""Message fields read as Spark's ``from_json`` read them, in plain Python (``json_reader.AS_SPARK_READ``: the JSON
formats ported from Spark expressions, DTS Shareplex JSON, DataWorks JSON, DRS JSON).

The decoders were Spark expressions first (``from_json`` with a schema of string, map<string,string>, struct, array,
boolean and bigint fields). The readers here keep their results: a field of another JSON type than its schema's makes
the message unreadable (``not_json``, via :class:`Mismatch`); a string field takes a non-string value as the JSON text
Spark (Jackson) writes for it -- integers as numbers, other numbers as Java 17 prints a double, NaN and the
infinities quoted, objects and arrays as compact JSON with UTF-16 surrogates escaped; text after the JSON object is
ignored; a number of more than 1000 digits (sign, point and exponent not counted) or nesting deeper than 1000 levels
makes the message unreadable. Not kept: Jackson's single-quoted strings (not JSON: ``not_json`` here, as for every
JSON format); a lone UTF-16 surrogate escape (``"\\ud800"``), which Spark's UTF-8 strings held as "?" -- here the string
keeps it, so a record that writes it into its decoded row is quarantined ``not_utf8`` by ``routing`` (naming the
field, as for canal-json), and one that carries it only in a field the format does not read decodes as without it;
and a key repeated inside one object (the last value counts here, as it does in the decoded row; Spark checked the
others too).
"""

from __future__ import annotations

import json
import re
import struct as struct_module
import sys
from json.scanner import py_make_scanner


class Mismatch(ValueError):
    """A field whose JSON type its schema cannot take: from_json marked such a message corrupt."""


class _Integer(str):
    """A JSON integer, as Spark renders it in a string field (its value: "-0" is "0")."""


class _Float(str):
    """Any other JSON number, as Spark renders it in a string field (Java's Double.toString)."""


MAX_NUMBER_LENGTH = 1000  # Jackson's StreamReadConstraints: a number of more digits makes the message unreadable
MAX_NESTING = 1000


# Java 17's Double.toString (jdk.internal.math.FloatingDecimal), which Spark's JSON writer prints doubles with: not
# always the shortest digits (JDK 19 changed that), so it is ported as it is, for the text Spark wrote.

_N_5_BITS = [0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28, 31, 33, 35, 38, 40, 42, 45, 47, 49, 52, 54, 56, 59, 61]
_INSIGNIFICANT_POW2 = [
    0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 9,
    10, 10, 10, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 17, 17, 17,
    18, 18, 18, 19,
]  # fmt: skip


def _wrap(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _estimate_dec_exp(fract_bits: int, bin_exp: int) -> int:
    d2 = struct_module.unpack(">d", struct_module.pack(">Q", 0x3FF0000000000000 | (fract_bits & ((1 << 52) - 1))))[0]
    d = (d2 - 1.5) * 0.289529654 + 0.176091259 + bin_exp * 0.301029995663981
    bits = struct_module.unpack(">Q", struct_module.pack(">d", d))[0]
    exponent = ((bits >> 52) & 0x7FF) - 1023
    negative = bits >> 63 == 1
    if 0 <= exponent < 52:
        mask = ((1 << 52) - 1) >> exponent
        r = ((bits & ((1 << 52) - 1)) | (1 << 52)) >> (52 - exponent)
        return (-r if mask & bits == 0 else -r - 1) if negative else r
    if exponent < 0:
        return 0 if bits & ~(1 << 63) == 0 else (-1 if negative else 0)
    return int(d)


def _long_digits(dec_exponent: int, value: int, insignificant: int) -> tuple[list[int], int]:
    if insignificant:
        pow10 = 10**insignificant
        residue = value % pow10
        value //= pow10
        dec_exponent += insignificant
        if residue >= pow10 >> 1:
            value += 1
    digits = [int(c) for c in str(value).rstrip("0")]
    dec_exponent += len(str(value)) - 1
    return digits, dec_exponent + 1


def _dtoa(bin_exp: int, fract_bits: int, n_significant_bits: int) -> tuple[list[int], int]:
    tail_zeros = (fract_bits & -fract_bits).bit_length() - 1
    n_fract_bits = 53 - tail_zeros
    n_tiny_bits = max(0, n_fract_bits - bin_exp - 1)
    if -21 <= bin_exp <= 62 and n_tiny_bits < 27 and n_fract_bits + _N_5_BITS[n_tiny_bits] < 64 and n_tiny_bits == 0:
        insignificant = 0
        if bin_exp > n_significant_bits:
            p2 = bin_exp - n_significant_bits - 1
            insignificant = _INSIGNIFICANT_POW2[p2] if 1 < p2 < len(_INSIGNIFICANT_POW2) else 0
        value = fract_bits << (bin_exp - 52) if bin_exp >= 52 else fract_bits >> (52 - bin_exp)
        return _long_digits(0, value, insignificant)
    dec_exp = _estimate_dec_exp(fract_bits, bin_exp)
    b5 = max(0, -dec_exp)
    b2 = b5 + n_tiny_bits + bin_exp
    s5 = max(0, dec_exp)
    s2 = s5 + n_tiny_bits
    m5, m2 = b5, b2 - n_significant_bits
    fract_bits >>= tail_zeros
    b2 -= n_fract_bits - 1
    common = min(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common
    if n_fract_bits == 1:
        m2 -= 1
    if m2 < 0:
        b2, s2, m2 = b2 - m2, s2 - m2, 0
    b_bits = n_fract_bits + b2 + (_N_5_BITS[b5] if b5 < 27 else b5 * 3)
    ten_s_bits = s2 + 1 + (_N_5_BITS[s5 + 1] if s5 + 1 < 27 else (s5 + 1) * 3)
    digits = []
    if b_bits < 64 and ten_s_bits < 64:
        width = 32 if b_bits < 32 and ten_s_bits < 32 else 64
        b = _wrap((fract_bits * 5**b5) << b2, width)
        s = _wrap(5**s5 << s2, width)
        m = _wrap(5**m5 << m2, width)
        tens = _wrap(s * 10, width)
        q, b = b // s, _wrap(10 * (b % s), width)
        m = _wrap(m * 10, width)
        low, high = b < m, _wrap(b + m, width) > tens
        if q == 0 and not high:
            dec_exp -= 1
        else:
            digits.append(q)
        if dec_exp < -3 or dec_exp >= 8:
            low = high = False
        while not low and not high:
            q, b = b // s, _wrap(10 * (b % s), width)
            m = _wrap(m * 10, width)
            if m > 0:
                low, high = b < m, _wrap(b + m, width) > tens
            else:
                low = high = True
            digits.append(q)
        low_digit_difference = _wrap((b << 1) - tens, width)
    else:
        b = fract_bits * 5**b5 << b2
        s = 5**s5 << s2
        m = 5 ** (m5 + 1) << (m2 + 1)
        tens = 5 ** (s5 + 1) << (s2 + 1)
        q, b = b // s, (b % s) * 10
        low, high = b < m, b + m >= tens
        if q == 0 and not high:
            dec_exp -= 1
        else:
            digits.append(q)
        if dec_exp < -3 or dec_exp >= 8:
            low = high = False
        while not low and not high:
            q, b = b // s, (b % s) * 10
            m *= 10
            low, high = b < m, b + m >= tens
            digits.append(q)
        low_digit_difference = (2 * b - tens) if high and low else 0
    dec_exponent = dec_exp + 1
    if high and (not low or low_digit_difference > 0 or (low_digit_difference == 0 and digits[-1] % 2)):
        i = len(digits) - 1
        while digits[i] == 9 and i > 0:
            digits[i] = 0
            i -= 1
        if digits[i] == 9:
            dec_exponent += 1
            digits[0] = 1
        else:
            digits[i] += 1
    return digits, dec_exponent


def java_double(number: float) -> str:
    """``Double.toString`` of a finite double, as JDK 17 prints it."""
    bits = struct_module.unpack(">Q", struct_module.pack(">d", number))[0]
    sign = "-" if bits >> 63 else ""
    fract_bits, bin_exp = bits & ((1 << 52) - 1), (bits >> 52) & 0x7FF
    if bin_exp == 0:
        if fract_bits == 0:
            return sign + "0.0"
        leading_zeros = 64 - fract_bits.bit_length()
        shift = leading_zeros - 11
        fract_bits <<= shift
        bin_exp = 1 - shift
        n_significant_bits = 64 - leading_zeros
    else:
        fract_bits |= 1 << 52
        n_significant_bits = 53
    digits, dec_exponent = _dtoa(bin_exp - 1023, fract_bits, n_significant_bits)
    text = "".join(map(str, digits))
    if 0 < dec_exponent < 8:
        whole = text[:dec_exponent]
        if len(whole) < dec_exponent:
            return f"{sign}{whole}{'0' * (dec_exponent - len(whole))}.0"
        return f"{sign}{whole}.{text[dec_exponent:] or '0'}"
    if -3 < dec_exponent <= 0:
        return f"{sign}0.{'0' * -dec_exponent}{text}"
    exponent = dec_exponent - 1
    return f"{sign}{text[0]}.{text[1:] or '0'}E{exponent}"


def _integer(text: str) -> _Integer:
    if len(text) > MAX_NUMBER_LENGTH and len(text.lstrip("-")) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    return _Integer("0" if text == "-0" else text)  # JSON writes an integer as its value's text, but for "-0"


def _float(text: str) -> _Float:
    # Jackson counts the digits of the integer part, the fraction and the exponent: not the sign, point or "e".
    if len(text) > MAX_NUMBER_LENGTH and sum(char.isdigit() for char in text) > MAX_NUMBER_LENGTH:
        raise ValueError("number too long")
    number = float(text)
    if number != number or number in (float("inf"), float("-inf")):
        return _float_constant(text if number != number else ("Infinity" if number > 0 else "-Infinity"))
    return _Float(java_double(number))


def _float_constant(name: str) -> _Float:
    return _Float(f'"{name}"')  # Jackson writes NaN and the infinities as quoted strings


_DECODER = json.JSONDecoder(parse_int=_integer, parse_float=_float, parse_constant=_float_constant)
_DEEP_DECODER = json.JSONDecoder(parse_int=_integer, parse_float=_float, parse_constant=_float_constant)
_DEEP_DECODER.scan_once = py_make_scanner(_DEEP_DECODER)
_LEADING_SPACE = re.compile(r"[ \t\n\r]*")


def _depth(value) -> int:
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _deep(function, *args):
    """``function(*args)`` with room for MAX_NESTING levels of Python recursion (more than the default allows)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_NESTING))
    try:
        return function(*args)
    finally:
        sys.setrecursionlimit(limit)


def _parse(text: str, start: int):
    try:
        return _DECODER.raw_decode(text, start)[0]
    except RecursionError:
        pass
    # Deeper than the C parser goes, but Jackson reads up to MAX_NESTING levels: the pure-Python parser reads it.
    document = _deep(_DEEP_DECODER.raw_decode, text, start)[0]
    if _depth(document) > MAX_NESTING:
        raise ValueError("nested too deep")
    return document


def parse_as_spark_read(text: str):
    """The JSON value at the start of ``text`` (after white space), numbers as their Spark text; text after it is
    ignored, as Spark's reader ignored it. ValueError when there is none (``json_reader.AS_SPARK_READ``)."""
    return _parse(text, _LEADING_SPACE.match(text).end())


# JSON string escapes as Spark's to_json writes them (Jackson).
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
# Copying a parsed value as JSON text, Jackson escapes surrogates too: lone ones, and the pair of a character beyond
# the BMP.
_NEEDS_ESCAPE_COPIED = re.compile(r'["\\\x00-\x1f\ud800-\udfff\U00010000-\U0010ffff]')


def _escape(match: re.Match) -> str:
    char = match.group(0)
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return _JSON_ESCAPES.get(char) or f"\\u{code:04X}"


def json_string(value: str) -> str:
    """A string as Spark's to_json writes it."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, value) + '"'


def copied_json_string(value: str) -> str:
    """A string as Jackson copies a parsed value into JSON text: surrogates escaped too."""
    return '"' + _NEEDS_ESCAPE_COPIED.sub(_escape, value) + '"'


def _compact(value) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, _Integer | _Float):
        return str(value)
    if isinstance(value, str):
        return copied_json_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(copied_json_string(k) + ":" + _compact(v) for k, v in value.items()) + "}"
    return "[" + ",".join(_compact(v) for v in value) + "]"


def text(value) -> str | None:
    """A JSON value read into a string field: strings as they are, anything else as its JSON text."""
    if value is None or type(value) is str:
        return value
    if isinstance(value, _Integer | _Float):
        return str(value)
    try:
        return _compact(value)
    except RecursionError:
        return _deep(_compact, value)


def struct(value) -> dict | None:
    """A JSON value read into a struct field: an object, or null."""
    if value is None or isinstance(value, dict):
        return value
    raise Mismatch("struct")


def text_map(value) -> dict[str, str | None] | None:
    """A JSON value read into a map<string,string> field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Mismatch("map")
    return {key: text(item) for key, item in value.items()}


def text_map_array(value) -> list[dict[str, str | None] | None] | None:
    """A JSON value read into an array<map<string,string>> field: an array of objects (or nulls), or null."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Mismatch("array")
    return [text_map(item) for item in value]


def text_array(value) -> list[str | None] | None:
    """A JSON value read into an array<string> field."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Mismatch("array")
    return [text(item) for item in value]


def boolean(value) -> bool | None:
    """A JSON value read into a boolean field: true, false or null."""
    if value is None or value is True or value is False:
        return value
    raise Mismatch("boolean")


def bigint(value) -> int | None:
    """A JSON value read into a bigint field: an integer in the 64-bit range, or null."""
    if value is None:
        return None
    if not isinstance(value, _Integer) or not -(2**63) <= int(value) < 2**63:
        raise Mismatch("bigint")
    return int(value)


def texts_of(document: dict, *names: str) -> dict[str, str | None]:
    """The named string fields of a struct."""
    return {name: text(document.get(name)) for name in names}
