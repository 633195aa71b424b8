"""Alibaba DTS Avro decoded by Spark's ``from_avro``: the native path of ``dts-avro`` (see ``native_json``).

Every DTS message is one ``Record`` of one writer schema, so one ``from_avro`` reads them all: the Record with the
named types it uses written out at their first use (``record_read_schema``), the value unions as Spark's structs of
``member0..memberN`` (one per branch, in the union's order).

A plan is one table version: ``objectName``, the ``fields`` list (names and binlog type codes) and ``tags.pk_uk_info``
as a message writes them, found in a sample of the records (``native_json.sampled``). From them the plan knows the
table, the key (the config's, else the message's PRIMARY or first unique key) and, per column position, which union
branches its values may hold and how each becomes the Python decoder's text and type (``dts_avro_values``).

Taken natively: the INSERT, UPDATE, DELETE and INIT records of a planned table version from a MySQL source whose every
value converts as the Python decoder converts it (guards below), whose key has a value in every key column, whose
update does not move its row to another key, and that leave out (EmptyObject) only what the Python decoder keeps; and
the control records (transaction, heartbeat, DDL, DTS-internal), with the table a DDL names and the config's key and
types of it. Everything else is Python's: other sources, other type codes (TIME, YEAR, geometries), charsets other
than UTF-8 (and ASCII text in ascii or latin1), and a record whose Avro strings are not all UTF-8 (fastavro refuses
it, Java would not). When the writer schema file is the union of DTS's named types, a value that starts with
Record's union index may be framed by it: Python's.

Guards, where Java and Python would write a value differently: a Float must print alike (``as_python_writes``); a
DateTime or Timestamp must fall in years 1000-9999 (Python's ``%Y`` does not pad a shorter year) with a real calendar
date and time of day; an Integer or Decimal text must be canonical (what the Python decoder writes back unchanged) and
fit its type; a Decimal's precision at most 28 (the Python value check's context).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import DECODED_DDL, KIND_CONTROL
from cdcreplay.formats.debezium_avro_native import AVRO_OPTIONS, as_python_writes
from cdcreplay.formats.debezium_native import MAX_KEY_COLUMNS
from cdcreplay.formats.dts_shareplex_native import value_form, values_ok
from cdcreplay.formats.envelopes.dts_record import (
    CONTROL_STREAM,
    ESCAPED_DOT,
    FORMAT_ID,
    ROW_OPS,
    STREAM_OPS,
    TRANSACTION_OPS,
    key_columns_of,
    split_object_name,
    union_prefix,
)
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.values.dts_avro_values import (
    BINARY_OBJECT,
    CHARACTER,
    DATETIME,
    DECIMAL,
    EMPTY,
    FLOAT,
    INTEGER,
    MYSQL_TYPES,
    TEXT_OBJECT,
    TIMESTAMP,
)
from cdcreplay.formats.values.native_forms import CALENDAR_DATE, MAX_DECIMAL_PRECISION, VALUE_FORMS
from cdcreplay.formats.wire import native_json as N
from cdcreplay.formats.wire.avro_wire import standalone_schema

# At most this many table versions get a plan (the most frequent in the sample): each adds its conversions to one
# generated projection, which must stay far below the JVM's 64 KB method limit.
MAX_NATIVE_PLANS = 16
MYSQL = "MySQL"
# The binlog type codes whose values the native path converts, each from the branches ``dts_avro_values.MYSQL_TYPES``
# allows it. Left to Python: NULL (6), TIME (11), YEAR (13) and GEOMETRY (255).
NATIVE_CODES = frozenset(MYSQL_TYPES) - {6, 11, 13, 255}
DATE_CODES = (10, 14)  # a DateTime of these codes is a date; of DATETIME (12), a timestamp_ntz
# An Integer's text as the Python decoder writes it back (``str(int(text))``), within its type's range.
CANONICAL_INTEGER = r"^(?:0|-?[1-9][0-9]*)\z"
INTEGER_FORMS = {
    "int": f"^{VALUE_FORMS['int']}\\z",
    "bigint": f"^{VALUE_FORMS['bigint']}\\z",
    "decimal(20,0)": r"^-?[0-9]{1,20}\z",
}
CANONICAL_DECIMAL = r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?\z"  # kept as written by the Python decoder
UTF8_CHARSETS = ("utf8", "utf8mb3", "utf8mb4", "utf-8")
ASCII, LATIN1 = "ascii", "latin1"
CP1252_BYTES = "^(?:[0-9A-F]{2})*[89]"  # the hex of bytes with one in 0x80-0x9F
BINARY_CHARSET = "binary"
# Seconds since the epoch of years 1000..9999, the range whose texts Python pads as Java does.
FIRST_SECOND, LAST_SECOND = -30610224000, 253402300799


# --- the writer schema -------------------------------------------------------------------------------------------


def record_read_schema(document) -> tuple[dict, dict[str, int]]:
    """(the Record schema ``from_avro`` reads with, member index of each image value branch by short name).

    ``document``: the parsed ``.avsc``, one schema or a JSON array of named types whose last entry is the Record (as
    ``avro_wire.load_schema`` reads it)."""
    record = standalone_schema(document)
    image_type = next(f["type"] for f in record["fields"] if f["name"] == "afterImages")
    array = next(branch for branch in image_type if isinstance(branch, dict) and branch.get("type") == "array")
    branches = [b for b in array["items"] if b != "null"]
    members = {(b if isinstance(b, str) else b["name"]).rsplit(".", 1)[-1]: index for index, b in enumerate(branches)}
    return record, members


@dataclass(frozen=True)
class Reading:
    """How the native path reads a pipeline's messages: the Record schema as JSON, the image branches' member
    indexes, and the union prefix that sends a value to Python (None: the writer schema is a lone Record)."""

    read_schema: str
    members: tuple[tuple[str, int], ...]
    prefix: bytes | None

    def member(self, branch: str) -> str:
        return f"member{dict(self.members)[branch]}"


def reading_of(writer_schema: str) -> Reading | None:
    """The reading of ``options.writer_schema``, or None when its images are not the value union the path knows."""
    try:
        document = json.loads(Path(writer_schema).read_text(encoding="utf-8"))
        read_schema, members = record_read_schema(document)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    needed = {branch for code in NATIVE_CODES for branch in MYSQL_TYPES[code][1]} | {EMPTY}
    if not needed <= members.keys():
        return None
    return Reading(json.dumps(read_schema, separators=(",", ":")), tuple(members.items()), union_prefix(writer_schema))


# --- plans -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TablePlan:
    """One table version: ``objectName``, the ``fields`` (name, binlog type code) and ``tags.pk_uk_info`` as its
    messages write them; its table, the key the message names (which moves a row), the key routing uses, and the
    config's column types."""

    object_name: str
    fields: tuple[tuple[str, int], ...]
    pk_uk_info: str | None
    source: tuple[str | None, str | None, str]
    message_keys: tuple[str, ...]
    key_columns: tuple[str, ...]
    configured: tuple[tuple[str, str], ...]

    @property
    def table_id(self) -> str:
        return table_id_of(*self.source)

    @property
    def unfielded(self) -> tuple[tuple[str, str], ...]:
        """The configured types of columns the fields do not name (routing adds them to every row's types)."""
        names = {name for name, _ in self.fields}
        return tuple((name, spark_type) for name, spark_type in self.configured if name not in names)


def table_plan(object_name: str, fields: list, pk_uk_info: str | None, pipeline: PipelineConfig) -> TablePlan | None:
    """The plan of one table version seen in the records, or None when its records are left to Python."""
    if not fields or any(f is None or f["name"] is None or f["dataTypeNumber"] not in NATIVE_CODES for f in fields):
        return None
    names = [f["name"] for f in fields]
    if len(set(names)) != len(names) or any(N.NO_ENTRY_KEY in name for name in names):
        return None
    try:
        source = split_object_name(object_name)
        message_keys = key_columns_of({"pk_uk_info": pk_uk_info} if pk_uk_info is not None else None)
    except DecodeError:
        return None
    table = pipeline.tables.get(table_id_of(*source)) if source[2] else None
    configured = dict(table.column_types) if table is not None else {}
    if any(value_form(t) is None for t in configured.values()):
        return None
    keys = tuple(table.primary_key) if table is not None and table.primary_key else tuple(message_keys or ())
    if not source[2] or not keys or len(keys) > MAX_KEY_COLUMNS:
        return None
    plan_fields = tuple((f["name"], int(f["dataTypeNumber"])) for f in fields)
    return TablePlan(
        object_name, plan_fields, pk_uk_info, source, tuple(message_keys or ()), keys, tuple(configured.items())
    )


def _parsed(records: DataFrame, reading: Reading) -> DataFrame:
    """The records with their Record (``_r``; a struct of nulls where ``from_avro`` cannot read one) and tombstone
    columns."""
    record = from_avro(F.col("value"), reading.read_schema, AVRO_OPTIONS)
    framed = F.lit(False)
    if reading.prefix is not None:
        framed = F.substring(F.col("value"), 1, len(reading.prefix)) == F.lit(bytearray(reading.prefix))
    return records.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        *N.tombstone_columns(),
        F.coalesce(framed, F.lit(False)).alias("_framed"),
        record.alias("_r"),
    )


def table_plans(records: DataFrame, pipeline: PipelineConfig, reading: Reading, every: int = 1) -> list[TablePlan]:
    """The plans of the table versions of the MySQL row changes in about one record in ``every``, the most frequent
    first (at most MAX_NATIVE_PLANS)."""
    record = F.col("_r")
    found = (
        _parsed(N.sampled(records, every), reading)
        .where(record["operation"].isin(*ROW_OPS) & (record["source"]["sourceType"] == MYSQL))
        .groupBy(
            record["objectName"].alias("object_name"),
            record["fields"]["member1"].alias("fields"),
            record["tags"]["pk_uk_info"].alias("pk_uk_info"),
        )
        .count()
        .orderBy(F.desc("count"))
        .collect()
    )
    plans = []
    for row in found:
        plan = table_plan(row.object_name, row.fields, row.pk_uk_info, pipeline) if row.object_name else None
        if plan is not None and len(plans) < MAX_NATIVE_PLANS:
            plans.append(plan)
    return plans


# --- values ------------------------------------------------------------------------------------------------------


def _padded(number: Column, digits: int) -> Column:
    """``number`` with leading zeros to ``digits`` digits (for a number its checks hold to that many: Java's
    String.format, which ``format_string`` calls, costs a microsecond)."""
    return F.lpad(number.cast("string"), digits, "0")


def _fraction(micros: Column) -> Column:
    """The Python decoder's fraction of a second: ``.ffffff``, or nothing for a whole second."""
    return F.when(micros == 0, F.lit("")).otherwise(F.concat(F.lit("."), _padded(micros, 6)))


def _integer(value: Column, spark_type: str) -> tuple[Column, Column]:
    text = value["value"]
    return text, text.rlike(CANONICAL_INTEGER) & text.rlike(INTEGER_FORMS[spark_type])


def _decimal(value: Column) -> tuple[Column, Column, Column]:
    """(text, type, ok) of a Decimal: canonical text, at most its precision's whole digits and its scale's fraction
    digits (so nothing rounds), precision 1..28."""
    text, precision, scale = value["value"], value["precision"], value["scale"]
    whole = F.regexp_extract(text, r"^-?([0-9]*)", 1)
    whole_digits = F.when(whole == "0", F.lit(0)).otherwise(F.length(whole))
    fraction_digits = F.length(F.regexp_extract(text, r"\.([0-9]*)$", 1))
    ok = (
        text.rlike(CANONICAL_DECIMAL)
        & precision.between(1, MAX_DECIMAL_PRECISION)
        & scale.between(0, precision)
        & (whole_digits <= precision - scale)
        & (fraction_digits <= scale)
    )
    return text, F.concat(F.lit("decimal("), precision.cast("string"), F.lit(","), scale.cast("string"), F.lit(")")), ok


def _float(value: Column) -> tuple[Column, Column]:
    number = value["value"]
    text = number.cast("string")
    return text, ~F.isnan(number) & as_python_writes(text)


def _timestamp(value: Column) -> tuple[Column, Column]:
    """A UTC instant: seconds and microseconds (the field named ``millis``)."""
    seconds, micros = value["timestamp"], F.coalesce(value["millis"], F.lit(0))
    ok = seconds.between(FIRST_SECOND, LAST_SECOND) & micros.between(0, 999_999)
    instant = F.timestamp_seconds(F.when(ok, seconds))
    return F.concat(F.date_format(instant, "yyyy-MM-dd HH:mm:ss"), _fraction(micros)), ok


def _calendar(value: Column) -> tuple[Column, Column]:
    """(``yyyy-MM-dd`` of a DateTime, whether it is a calendar date of years 1..9999: Python's ``datetime`` refuses
    any other, a MySQL zero date included)."""
    year, month, day = value["year"], value["month"], value["day"]
    date_text = F.concat_ws("-", _padded(year, 4), _padded(month, 2), _padded(day, 2))
    ok = year.between(1, 9999) & month.between(1, 12) & day.between(1, 31) & date_text.rlike(f"^{CALENDAR_DATE}\\z")
    return date_text, F.coalesce(ok, F.lit(False))


def _datetime(value: Column) -> tuple[Column, Column]:
    date_text, ok = _calendar(value)
    hour, minute, second = (F.coalesce(value[part], F.lit(0)) for part in ("hour", "minute", "second"))
    micros = F.coalesce(value["millis"], F.lit(0))
    ok = (
        ok
        & value["year"].between(1000, 9999)
        & hour.between(0, 23)
        & minute.between(0, 59)
        & second.between(0, 59)
        & micros.between(0, 999_999)
    )
    clock = F.concat(F.lit(" "), F.concat_ws(":", _padded(hour, 2), _padded(minute, 2), _padded(second, 2)))
    return F.concat(date_text, clock, _fraction(micros)), ok


def _date(value: Column) -> tuple[Column, Column]:
    date_text, ok = _calendar(value)
    for part in ("hour", "minute", "second", "millis"):
        ok = ok & F.coalesce(value[part] == 0, F.lit(True))  # a DATE with a time of day is a bad value
    return date_text, ok


def _character(value: Column) -> tuple[Column, Column, Column]:
    """(text, type, ok) of a Character: UTF-8 text, ASCII text, latin1 text without the bytes 0x80-0x9F (where MySQL's
    latin1, cp1252's variant, differs from ISO-8859-1), or base64 of a binary charset's bytes."""
    charset, raw = value["charset"], value["value"]
    name, utf8_text = F.lower(charset), raw.cast("string")
    valid = F.coalesce(F.is_valid_utf8(utf8_text), F.lit(False))
    is_binary = (charset == "") | (name == BINARY_CHARSET)
    is_latin1 = name == LATIN1
    ok = (
        is_binary
        | (name.isin(*UTF8_CHARSETS) & valid)
        | ((name == ASCII) & valid & (F.length(utf8_text) == F.octet_length(raw)))
        | (is_latin1 & ~F.hex(raw).rlike(CP1252_BYTES))
    )
    text = F.when(is_binary, F.base64(raw)).when(is_latin1, F.decode(raw, "ISO-8859-1")).otherwise(utf8_text)
    spark_type = F.when(is_binary, F.lit("binary")).otherwise(F.lit("string"))
    return text, spark_type, ok & N.all_utf8(charset)


def _branch(value: Column, branch: str, code: int, spark_type: str | None) -> tuple[Column, Column, Column]:
    """(text, type, ok) of a value of ``branch`` in a column of binlog type ``code`` (``spark_type``: its fixed
    type)."""
    if branch == INTEGER:
        text, ok = _integer(value, spark_type)  # digits only: valid UTF-8 once they match
        return text, F.lit(spark_type), ok
    if branch == DECIMAL:
        return _decimal(value)
    if branch == FLOAT:
        text, ok = _float(value)
        return text, F.lit(spark_type), ok
    if branch == TIMESTAMP:
        text, ok = _timestamp(value)
        return text, F.lit("timestamp"), ok
    if branch == DATETIME:
        text, ok = _date(value) if code in DATE_CODES else _datetime(value)
        return text, F.lit(spark_type), ok
    if branch == CHARACTER:
        return _character(value)
    if branch == TEXT_OBJECT:
        return value["value"], F.lit("string"), N.all_utf8(value["value"], value["type"])
    if branch == BINARY_OBJECT:
        return F.base64(value["value"]), F.lit("binary"), N.all_utf8(value["type"])
    raise ValueError(f"no native conversion of {branch}")


# One image element, converted: its column's name (NULL past the plan's fields), canonical text, Spark type (NULL: none
# declared), whether the native path writes it as the Python decoder does, whether it is absent (EmptyObject), and
# whether its column has a type without a value (its code's fixed type or a configured one).
ELEMENT = "struct<name: string, text: string, type: string, ok: boolean, absent: boolean, typed: boolean>"


def _element(element: Column, name: str, code: int, configured: dict[str, str], reading: Reading) -> Column:
    """One image element of column ``name`` of binlog type ``code`` (an ``ELEMENT``), as ``dts_avro_values.convert``
    converts it: NULL (an Avro null: SQL NULL), absent (EmptyObject), or a value of one of the branches the code
    allows (another branch is a ``wrong_branch`` record: Python's)."""
    _, branches, fixed_type = MYSQL_TYPES[code]
    text, spark_type = F.lit(None).cast("string"), F.lit(fixed_type).cast("string")
    absent = F.coalesce(element[reading.member(EMPTY)].isNotNull(), F.lit(False))
    ok = element.isNull() | absent
    for branch in sorted(branches):  # a union value holds one branch: their order does not matter
        value = element[reading.member(branch)]
        value_text, value_type, value_ok = _branch(value, branch, code, fixed_type)
        present = value.isNotNull()
        text = F.when(present, value_text).otherwise(text)
        spark_type = F.when(present, value_type).otherwise(spark_type)
        ok = ok | (present & value_ok)
    if name in configured:  # routing puts the config's type over the message's
        spark_type = F.lit(configured[name])
    parts = {
        "name": F.lit(name),
        "text": text,
        "type": spark_type,
        "ok": F.coalesce(ok, F.lit(False)),
        "absent": absent,
        "typed": F.lit(fixed_type is not None or name in configured),
    }
    return F.struct(*[value.alias(key) for key, value in parts.items()])


IMAGES = (("_a", "afterImages"), ("_b", "beforeImages"))


def _element_columns(record: Column, plan: Column, plans: list[TablePlan], reading: Reading) -> list[Column]:
    """Per image and position, the element of the record's plan (``_a0``, ``_a1``, ... of the after image, ``_b0``,
    ... of the before image; NULL past the plan's fields), each its own column: converted once, and each a small
    expression (the checks of a whole image in one expression outgrow the JVM's 64 KB method limit). And ``_width``,
    the plan's number of fields, and where a plan has them ``_unfielded``, its ``TablePlan.unfielded`` types."""
    width = max((len(p.fields) for p in plans), default=0)
    columns = []
    for prefix, side in IMAGES:
        values = record[side]["member1"]
        for index in range(width):
            converted = [
                _element(F.try_element_at(values, F.lit(index + 1)), *p.fields[index], dict(p.configured), reading)
                if index < len(p.fields)
                else F.lit(None).cast(ELEMENT)
                for p in plans
            ]
            columns.append(N.per_plan(plan, converted, F.lit(None).cast(ELEMENT)).alias(f"{prefix}{index}"))
    columns.append(N.per_plan(plan, [F.lit(len(p.fields)) for p in plans], F.lit(None).cast("int")).alias("_width"))
    if any(p.unfielded for p in plans):
        unfielded = [N.literal_map(dict(p.unfielded)) for p in plans]
        columns.append(N.per_plan(plan, unfielded, N.literal_map({})).alias("_unfielded"))
    return columns


def _image_columns(record: Column, width: int, unfielded: bool) -> list[Column]:
    """From the element columns: the images as maps without their absent columns (``_after``, ``_before``), the row's
    column types (``_types``) and ``_images_ok``: every value converts, each image is a list of one value per field,
    and the images the operation needs are there. ``unfielded``: a plan has ``_unfielded`` types."""
    elements = {prefix: [F.col(f"{prefix}{index}") for index in range(width)] for prefix, _ in IMAGES}
    values = {prefix: record[side]["member1"] for prefix, side in IMAGES}
    out, ok = {}, F.col("_plan") >= 0
    for prefix, side in IMAGES:
        entries = [(e["name"].isNotNull() & ~e["absent"], e["name"], e["text"]) for e in elements[prefix]]
        out[prefix] = F.when(values[prefix].isNotNull(), N.map_of_entries(entries))
        images = record[side]
        ok = ok & (images.isNull() | (images["member0"].isNull() & (F.size(values[prefix]) == F.col("_width"))))
        for e in elements[prefix]:
            ok = ok & F.coalesce(e["ok"], F.lit(True))
    has_after, has_before = values["_a"].isNotNull(), values["_b"].isNotNull()
    # The row's column types as the Python decoder collects them: each column's from the after image, else from the
    # before image (an element's type is the config's where it names one, as routing puts it over the message's).
    types, any_absent, any_typed = [], F.lit(False), F.lit(False)
    for in_after, in_before in zip(elements["_a"], elements["_b"], strict=True):
        spark_type = F.coalesce(F.when(has_after, in_after["type"]), F.when(has_before, in_before["type"]))
        types.append((in_after["name"].isNotNull() & spark_type.isNotNull(), in_after["name"], spark_type))
        # An after image that leaves columns out is applied only when one of them has a type
        # (``dts_avro._declared_absent``: compaction then keeps their stored values).
        absent = F.coalesce(in_after["absent"], F.lit(False))
        any_absent = any_absent | absent
        any_typed = any_typed | (absent & (in_after["typed"] | (has_before & in_before["type"].isNotNull())))
    declared = N.map_of_entries(types)
    if unfielded:
        declared = F.map_concat(declared, F.col("_unfielded"))
    present = F.when(record["operation"] == "DELETE", has_before & record["afterImages"].isNull()).otherwise(
        has_after & (~any_absent | any_typed)
    )
    return [
        out["_a"].alias("_after"),
        out["_b"].alias("_before"),
        declared.alias("_types"),
        F.coalesce(ok & present, F.lit(False)).alias("_images_ok"),
    ]


def _moved(before: Column, after: Column, keys: tuple[str, ...]) -> Column:
    """An update whose images both hold every key column the message names, one of them with another value: the row
    moves to a new key (a delete and an insert in Python)."""
    both, differs = F.lit(True), F.lit(False)
    for name in keys:
        both = both & F.map_contains_key(before, name) & F.map_contains_key(after, name)
        differs = differs | ~before[name].eqNullSafe(after[name])
    return F.coalesce(before.isNotNull() & both & differs, F.lit(False))


def _matches(record: Column, plan: TablePlan) -> Column:
    fields = F.array(*[F.struct(F.lit(n).alias("name"), F.lit(c).alias("dataTypeNumber")) for n, c in plan.fields])
    return (
        (record["objectName"] == plan.object_name)
        & record["fields"]["member0"].isNull()
        & (record["fields"]["member1"] == fields)
        & record["tags"]["pk_uk_info"].eqNullSafe(F.lit(plan.pk_uk_info).cast("string"))
    )


def _plan_key(record: Column, plan: TablePlan) -> dict[str, Column]:
    """A record of ``plan`` whose images are converted (``_after``, ``_before``): its key and ``_key_ok``: the
    configured types hold its values, the key has a value in every column, and an update does not move the row."""
    operation = record["operation"]
    after, before = F.col("_after"), F.col("_before")
    # A delete names its row by its before image; a change by its after image, where a key column it leaves out (did
    # not change) by its before image.
    values = [
        F.when(operation == "DELETE", before[name])
        .when(F.map_contains_key(after, name), after[name])
        .otherwise(before[name])
        for name in plan.key_columns
    ]
    complete = F.lit(True)
    for value in values:
        complete = complete & value.isNotNull()
    key = F.when(complete, F.to_json(F.array(*values)))  # routing.key_text
    forms = [(name, value_form(spark_type)) for name, spark_type in plan.configured]
    forms += [(name, value_form("string")) for name in plan.key_columns if name not in dict(plan.configured)]
    ok = (
        values_ok(after, forms)
        & values_ok(before, forms)
        & complete
        & ~((operation == "UPDATE") & _moved(before, after, plan.message_keys))
    )
    keys = F.array(*[F.lit(name) for name in plan.key_columns])
    return {"key": key, "key_columns": keys, "_key_ok": F.coalesce(ok, F.lit(False))}


def _per_plan(plan: Column, per_plan: list[dict[str, Column]], names: tuple[str, ...], types: dict) -> list[Column]:
    """Each of ``names`` of the plans' dicts as one CASE over the record's plan (NULL, or false, without one)."""
    return [
        N.per_plan(plan, [columns[name] for columns in per_plan], F.lit(None).cast(types.get(name, "boolean"))).alias(
            name
        )
        for name in names
    ]


def _strings_ok(record: Column) -> Column:
    """The Record was read, and its strings outside the images are valid UTF-8 (a row change's objectName and field
    names are its plan's)."""
    tags = record["tags"]
    strings = (
        record["sourcePosition"],
        record["safeSourcePosition"],
        record["sourceTxid"],
        record["source"]["version"],
        record["objectName"],
        F.array_join(F.map_keys(tags), N.UTF8_SEPARATOR),
        F.array_join(F.map_values(tags), N.UTF8_SEPARATOR),
    )
    return record["operation"].isNotNull() & N.all_utf8(*strings)


def _identity(object_name: Column) -> dict[str, Column]:
    """``split_object_name`` of a control record's objectName (at most three parts, checked apart): source_db,
    source_schema, source_table and the table id routing makes of them (``routing.table_id_of``: the empty parts
    left out, none without a table)."""
    parts = F.split(object_name, r"\.")
    count = F.size(parts)

    def part(index: Column) -> Column:
        value = F.try_element_at(parts, index)
        for escaped in ESCAPED_DOT:
            value = F.replace(value, F.lit(escaped), F.lit("."))
        return value

    db = F.when(count >= 2, part(F.lit(1)))
    schema = F.when(count == 3, part(F.lit(2)))
    table = F.when(object_name != "", part(count))
    kept = [F.when(value != "", value) for value in (db, schema)]
    table_id = F.when(table != "", F.concat_ws(".", *kept, table))
    return {"source_db": db, "source_schema": schema, "source_table": table, "table_id": table_id}


def _configured_for(table_id: Column, pipeline: PipelineConfig) -> tuple[Column, Column]:
    """(the config's key columns, the config's column types) of ``table_id``, as routing adds them to a control row."""
    keys, types = F.lit(None).cast("array<string>"), N.literal_map({})
    for configured_id, table in pipeline.tables.items():
        if table.primary_key:
            keys = F.when(table_id == configured_id, F.array(*[F.lit(c) for c in table.primary_key])).otherwise(keys)
        if table.column_types:
            types = F.when(table_id == configured_id, N.literal_map(dict(table.column_types))).otherwise(types)
    return keys, types


def _controls(record: Column, event_time: Column, pipeline: PipelineConfig) -> tuple[Column, Column, dict[str, Column]]:
    """(the record is a control record, whether the native path takes it, its control row's columns), as
    ``dts_avro.decode_record`` writes them: a transaction (BEGIN, COMMIT, ROLLBACK, ABORT), a heartbeat, a DDL (its
    SQL text, the images' string branch) and a DTS-internal record (``stream``), the last two with the table their
    objectName names. The Python decoder splits the objectName of each: more than three parts is a quarantine. A
    record that also carries fields or other images is Python's (their strings would need checking for nothing)."""
    operation, object_name = record["operation"], record["objectName"]
    is_transaction, is_heartbeat = operation.isin(*TRANSACTION_OPS), operation == "HEARTBEAT"
    is_ddl, is_stream = operation == "DDL", operation.isin(*STREAM_OPS)
    ddl_text = record["afterImages"]["member0"]
    bare = record["fields"].isNull() & record["beforeImages"].isNull()
    bare = bare & (record["afterImages"].isNull() | (is_ddl & ddl_text.isNotNull() & N.all_utf8(ddl_text)))
    names_ok = object_name.isNull() | (F.size(F.split(object_name, r"\.")) <= 3)
    kind_ok = is_transaction | is_ddl | is_stream | (is_heartbeat & event_time.isNotNull())
    transaction = F.concat(operation, F.lit(" txid="), record["sourceTxid"], F.lit(" id="), record["id"].cast("string"))
    heartbeat = F.date_format(event_time, "yyyy-MM-dd'T'HH:mm:ss'+00:00'")  # the watermark's isoformat()
    stream = F.concat(operation, F.lit(" id="), record["id"].cast("string"))
    kind = F.when(is_transaction, F.lit(S.CONTROL_TRANSACTION)).when(is_heartbeat, F.lit(S.CONTROL_HEARTBEAT))
    kind = kind.when(is_ddl, F.lit(S.CONTROL_DDL_KIND)).when(is_stream, F.lit(CONTROL_STREAM))
    detail = F.when(is_transaction, transaction).when(is_heartbeat, heartbeat).when(is_ddl, ddl_text)
    # Only a DDL and a DTS-internal record name their table.
    named = is_ddl | is_stream
    identity = {name: F.when(named, value) for name, value in _identity(object_name).items()}
    keys, types = _configured_for(identity["table_id"], pipeline)
    row = {
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": kind,
        "detail": detail.otherwise(stream),
        **identity,
        "key_columns": keys,
        "column_types": types,
        "event_time": F.when(is_heartbeat, event_time),
    }
    return is_transaction | is_heartbeat | named, bare & names_ok & kind_ok, row


# A control row keeps these columns of the changelog row; every other one it sets, or leaves NULL.
_KEPT = ("topic", "partition", "offset", "timestamp", "format", "reason", "raw_key", "raw_value", "row_index")


def native_rows(records: DataFrame, pipeline: PipelineConfig, reading: Reading, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``). In projections that
    each read the one before: the record's plan, its image elements converted (``_element_columns``), the images, the
    key and its checks, the row (as one expression, Spark would convert an image again for each use of it)."""
    record, plan = F.col("_r"), F.col("_plan")
    plan_index = F.lit(-1)
    for index, table_plan in reversed(list(enumerate(plans))):
        plan_index = F.when(_matches(record, table_plan), F.lit(index)).otherwise(plan_index)
    types = {field.name: field.dataType.simpleString() for field in S.struct_type(DECODED_DDL)}
    located = _parsed(records, reading).select("*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"))
    width = max((len(p.fields) for p in plans), default=0)
    converted = located.select("*", *_element_columns(record, plan, plans, reading))
    imaged = converted.select("*", *_image_columns(record, width, any(p.unfielded for p in plans)))
    keys = [_plan_key(record, p) for p in plans]
    keyed = imaged.select("*", *_per_plan(plan, keys, ("key", "key_columns", "_key_ok"), types))

    operation = record["operation"]
    seconds = record["sourceTimestamp"]
    event_time = F.timestamp_seconds(F.when(seconds.between(FIRST_SECOND, LAST_SECOND), seconds))
    is_control, control_ok, control = _controls(record, event_time, pipeline)
    readable = ~F.col("_framed") & _strings_ok(record)
    change_ok = (record["source"]["sourceType"] == MYSQL) & F.col("_images_ok") & F.col("_key_ok")  # NULL: no plan
    taken = readable & F.when(operation.isin(*ROW_OPS), change_ok & event_time.isNotNull()).otherwise(control_ok)
    op = F.lit(None).cast("string")
    for name, row_op in ROW_OPS.items():
        op = F.when(operation == name, F.lit(row_op)).otherwise(op)

    def of_plan(values: list) -> Column:
        return N.per_plan(plan, [F.lit(v).cast("string") for v in values], F.lit(None).cast("string"))

    change = N.changelog_row(
        FORMAT_ID,
        native=F.coalesce(taken, F.lit(False)),
        table_id=of_plan([p.table_id for p in plans]),
        source_db=of_plan([p.source[0] for p in plans]),
        source_schema=of_plan([p.source[1] for p in plans]),
        source_table=of_plan([p.source[2] for p in plans]),
        op=op,
        key=F.col("key"),
        key_columns=F.col("key_columns"),
        after=F.when(operation != "DELETE", F.col("_after")),
        before=F.col("_before"),
        column_types=F.col("_types"),
        position=F.array(record["id"].cast("decimal(38,0)")),
        event_time=event_time,
        row_index=F.lit(0),
    )
    rows = {
        name: column
        if name in _KEPT or name == N.NATIVE_FLAG
        else F.when(is_control, control.get(name, F.lit(None).cast(types[name]))).otherwise(column)
        for name, column in change.items()
    }
    return keyed.select(*N.with_tombstones(rows))
