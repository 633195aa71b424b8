"""Spark's text casts in plain Python: ``try_cast`` of text to decimal(38,0) and timestamp, time-zone names, and
timestamps written as ``yyyy-MM-dd HH:mm:ss.SSSSSS`` text -- for the decoders ported from Spark expressions (DTS
Shareplex JSON, DataWorks JSON, DRS JSON), whose results must not change with the port.

Timestamp text follows Spark's ``parseTimestampString`` (session time zone UTC): trimmed ASCII blanks and controls,
a signed year of 4-6 digits, optional month/day/time, fractions cut (not rounded) at microseconds, a zone suffix (an
offset, a region, or one of java.time's short ids), and the zone rules of java.time (a wall clock in a DST gap moves
later, one in an overlap takes the earlier offset).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Spark's timestamp range (years 1..9999), in microseconds since the epoch.
MIN_MICROS, MAX_MICROS = -62135596800000000, 253402300799999999

# What Spark trims around a number it casts from text: ASCII whitespace and control characters (and DEL around a
# timestamp).
ASCII_BLANKS = "".join(chr(code) for code in range(33))
SPARK_BLANKS = ASCII_BLANKS + "\x7f"
INT64 = (-(2**63), 2**63 - 1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_DECIMAL_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_ROUNDING = Context(prec=200, rounding=ROUND_HALF_UP, Emin=-(10**9), Emax=10**9)
DECIMAL_LIMIT = Decimal(10) ** 38


def try_decimal(value: str | None) -> Decimal | None:
    """``try_cast(value AS decimal(38,0))``: the number rounded half-up to an integer, NULL if unreadable or too big."""
    if value is None:
        return None
    digits = value.strip(ASCII_BLANKS)
    if not _DECIMAL_TEXT.fullmatch(digits):
        return None
    try:
        number = Decimal(digits)
    except InvalidOperation:
        return None
    if number.is_zero():
        return Decimal(0)
    adjusted = number.adjusted()
    if adjusted >= 38:
        return None
    if adjusted <= -2:
        return Decimal(0)
    rounded = number.quantize(Decimal(1), context=_ROUNDING)
    return rounded if rounded.copy_abs() < DECIMAL_LIMIT else None


_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def try_integer(value: str, bits: int) -> int | None:
    """``try_cast(value AS int)`` (bits 32) or ``AS bigint`` (bits 64): an optional sign and digits, blanks around
    them ignored, in range; else None."""
    digits = value.strip(SPARK_BLANKS)
    if not _INTEGER_TEXT.fullmatch(digits):
        return None
    number = int(digits)
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None


_COMMON_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?Z?"
)


def try_timestamp(value: str | None) -> datetime | None:
    """``try_cast(value AS timestamp)`` in the session time zone (UTC), as Spark parses timestamp text; NULL also for
    an instant outside years 1..9999 (Python's range: Spark's would not fit the changelog)."""
    if value is None:
        return None
    common = _COMMON_TIMESTAMP.fullmatch(value)
    if common:
        year, month, day, hour, minute, second = (int(part) for part in common.groups()[:6])
        fraction = int((common.group(7) or "0").ljust(6, "0"))
        try:
            return datetime(year, month, day, hour, minute, second, fraction, tzinfo=UTC)
        except ValueError:
            return None
    micros = spark_timestamp_micros(value)
    if micros is None or not MIN_MICROS <= micros <= MAX_MICROS:
        return None
    return EPOCH + timedelta(microseconds=micros)


def zone_of(name: str):
    """A time zone name as Spark reads it (an offset, a region, a short id) -> tzinfo; ValueError if it is none."""
    zone = spark_zone(name)
    if zone is None:
        raise ValueError(f"{name!r} is not a time zone")
    return zone


# --- timestamp text -> microseconds since the epoch ------------------------------------------------------------------

_SHORT_IDS = {
    "EST": "-05:00", "HST": "-10:00", "MST": "-07:00", "ACT": "Australia/Darwin", "AET": "Australia/Sydney",
    "AGT": "America/Argentina/Buenos_Aires", "ART": "Africa/Cairo", "AST": "America/Anchorage",
    "BET": "America/Sao_Paulo", "BST": "Asia/Dhaka", "CAT": "Africa/Harare", "CNT": "America/St_Johns",
    "CST": "America/Chicago", "CTT": "Asia/Shanghai", "EAT": "Africa/Addis_Ababa", "ECT": "Europe/Paris",
    "IET": "America/Indiana/Indianapolis", "IST": "Asia/Kolkata", "JST": "Asia/Tokyo", "MIT": "Pacific/Apia",
    "NET": "Asia/Yerevan", "NST": "Pacific/Auckland", "PLT": "Asia/Karachi", "PNT": "America/Phoenix",
    "PRT": "America/Puerto_Rico", "PST": "America/Los_Angeles", "SST": "Pacific/Guadalcanal",
    "VST": "Asia/Ho_Chi_Minh",
}  # fmt: skip
_OFFSET = re.compile(r"[+-]([0-9]{1,2}|[0-9]{2}:?[0-9]{2}|[0-9]{2}:[0-9]{2}:[0-9]{2}|[0-9]{6})")
_REGION = re.compile(r"[A-Za-z][A-Za-z0-9~/._+-]+")


def _offset(text: str) -> timezone | None:
    """java.time.ZoneOffset.of: Z, +h, +hh, +hh:mm, +hhmm, +hh:mm:ss, +hhmmss (at most 18 hours)."""
    if text == "Z":
        return UTC
    if not _OFFSET.fullmatch(text) or len(text) == 8:
        return None
    digits = text[1:].replace(":", "")
    hours, minutes, seconds = int(digits[:2]), int(digits[2:4] or 0), int(digits[4:6] or 0)
    if hours > 18 or minutes > 59 or seconds > 59 or (hours == 18 and (minutes or seconds)):
        return None
    total = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    return timezone(-total if text[0] == "-" else total)


@lru_cache(maxsize=256)
def _zone(text: str):
    """java.time.ZoneId.of(text, SHORT_IDS) as a tzinfo (a fixed offset or a region's rules); None if unknown."""
    text = _SHORT_IDS.get(text, text)
    if len(text) <= 1 or text[0] in "+-":
        return _offset(text)
    prefix = 3 if text.startswith(("UTC", "GMT")) else 2 if text.startswith("UT") else 0
    if prefix and len(text) == prefix:
        return UTC
    if prefix and text[prefix] in "+-":
        return _offset(text[prefix:])
    if not _REGION.fullmatch(text):
        return None
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def spark_zone(text: str):
    """A zone as Spark reads one in timestamp text or a time-zone setting -> tzinfo; None if it is none."""
    # Spark accepts the single-digit hour (+h:mm) and minute (+hh:m) offsets it read before 3.0.
    text = re.sub(r"([+-])([0-9]):", r"\g<1>0\g<2>:", text, count=1)
    text = re.sub(r"([+-])([0-9]{2}):([0-9])$", r"\g<1>\g<2>:0\g<3>", text, count=1)
    return _zone(text)


def _valid_digits(segment: int, digits: int) -> bool:
    return (
        segment == 6
        or (segment == 0 and 4 <= digits <= 6)
        or (segment == 7 and digits <= 2)
        or (segment not in (0, 6, 7) and 0 < digits <= 2)
    )


def _timestamp_segments(text: str):
    """(segments, zone text or None, just time) of Spark's timestamp parser; None when the text is no timestamp."""
    data = text.encode("utf-8")
    j, end = 0, len(data)
    while j < end and data[j] in _TRIMMED_BYTES:
        j += 1
    while end > j and data[end - 1] in _TRIMMED_BYTES:
        end -= 1
    if j == end:
        return None
    segments = [1, 1, 1, 0, 0, 0, 0, 0, 0]
    i = value = digits = fraction_digits = 0
    zone, just_time, year_sign = None, False, None
    if data[j] in b"+-":
        year_sign = -1 if data[j] == ord("-") else 1
        j += 1
    while j < end:
        b = data[j]
        if not 48 <= b <= 57:
            if j == 0 and b == ord("T"):
                just_time = True
                i += 3
            elif i < 2:
                if b == ord("-"):
                    if not _valid_digits(i, digits):
                        return None
                    segments[i], value, digits, i = value, 0, 0, i + 1
                elif i == 0 and b == ord(":") and year_sign is None:
                    just_time = True
                    if not _valid_digits(3, digits):
                        return None
                    segments[3], value, digits, i = value, 0, 0, 4
                else:
                    return None
            elif i == 2:
                if b not in (ord(" "), ord("T")) or not _valid_digits(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i in (3, 4):
                if b != ord(":") or not _valid_digits(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
            elif i in (5, 6):
                if not _valid_digits(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
                if not (b == ord(".") and i == 6):
                    zone = data[j:end].decode("utf-8", errors="replace")
                    j = end - 1
                if i == 6 and b != ord("."):
                    i += 1
            else:
                if i >= len(segments) or b not in (ord(":"), ord(" ")) or not _valid_digits(i, digits):
                    return None
                segments[i], value, digits, i = value, 0, 0, i + 1
        else:
            if i == 6:
                fraction_digits += 1
            if i != 6 or digits < 6:  # digits past microseconds are dropped
                value = value * 10 + b - 48
            digits += 1
        j += 1
    if not _valid_digits(i, digits):
        return None
    segments[i] = value
    segments[6] *= 10 ** max(0, 6 - fraction_digits)
    segments[0] *= year_sign or 1
    return segments, zone, just_time


_TRIMMED_BYTES = frozenset(range(33)) | {0x7F}


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    mp = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * mp + 2) // 5 + 1
    month = mp + (3 if mp < 10 else -9)
    return year_of_era + era * 400 + (month <= 2), month, day


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_CYCLE_YEARS, _CYCLE_DAYS = 400, 146097  # the Gregorian calendar (and weekdays) repeat every 400 years
DAY_MICROS = 86_400_000_000


def _offset_micros(local_micros: int, zone) -> int:
    """The zone's UTC offset at a wall clock (java.time: a gap moves later, an overlap takes the earlier offset)."""
    days, micros_of_day = divmod(local_micros, DAY_MICROS)
    year, month, day = _civil_from_days(days)
    shift = 0
    while year + shift < 1:
        shift += _CYCLE_YEARS  # zone rules outside years 1..9999: those of the equivalent year in the cycle
    while year + shift > 9999:
        shift -= _CYCLE_YEARS
    wall = datetime(year + shift, month, day) + timedelta(microseconds=micros_of_day)
    return (wall.replace(tzinfo=zone).utcoffset() or timedelta(0)) // timedelta(microseconds=1)


def wall_clock_to_utc(local_micros: int, zone) -> int | None:
    if zone is None:
        return None
    return local_micros - _offset_micros(local_micros, zone)


def spark_timestamp_micros(text: str) -> int | None:
    """``try_cast(text AS timestamp)`` with the session time zone UTC, as microseconds since the epoch."""
    parsed = _timestamp_segments(text)
    if parsed is None:
        return None
    (year, month, day, hour, minute, second, micros, _, _), zone_text, just_time = parsed
    zone = UTC
    if zone_text is not None:
        zone = spark_zone(zone_text.strip(ASCII_BLANKS))
        if zone is None:
            return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    if just_time:
        today = datetime.now(zone).date()
        year, month, day = today.year, today.month, today.day
    if not 1 <= month <= 12 or not 1 <= day <= _MONTH_DAYS[month - 1] + (month == 2 and _is_leap(year)):
        return None
    local = _days_from_civil(year, month, day) * DAY_MICROS + ((hour * 60 + minute) * 60 + second) * 1_000_000
    local += micros
    instant = local if zone is UTC else wall_clock_to_utc(local, zone)
    return instant if instant is not None and INT64[0] <= instant <= INT64[1] else None


def wall_clock_micros(text: str) -> int | None:
    """Date-and-time text without a zone (a timestamp_ntz's wall clock), as microseconds since the epoch; None for
    text that names a zone, holds only a time, or is no timestamp."""
    parsed = _timestamp_segments(text)
    if parsed is None or parsed[1] is not None or parsed[2]:
        return None
    return spark_timestamp_micros(text)


def timestamp_text(micros: int) -> str:
    """Spark's ``date_format(ts, "yyyy-MM-dd HH:mm:ss.SSSSSS")`` in UTC (a year past 9999 signed, as Java does)."""
    days, micros_of_day = divmod(micros, DAY_MICROS)
    year, month, day = _civil_from_days(days)
    seconds, fraction = divmod(micros_of_day, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    year_text = f"{year:04d}" if 0 <= year <= 9999 else f"+{year}" if year > 9999 else f"-{-year:04d}"
    return f"{year_text}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def timestamp_of_millis(millis: int | None) -> datetime | None:
    """Epoch milliseconds as a timestamp; NULL outside Spark's range (years 1..9999), as ``safe_timestamp_millis``."""
    if millis is None or not MIN_MICROS <= millis * 1000 <= MAX_MICROS:
        return None
    return EPOCH + timedelta(milliseconds=millis)
