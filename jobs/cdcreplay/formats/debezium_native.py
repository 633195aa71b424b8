"""Debezium JSON decoded by Spark's JSON reader: the native path of ``debezium-json`` (see ``native_json``).

JsonConverter writes ``{"schema":S,"payload":P}``, and S -- about four fifths of the bytes -- is the same for every
message of one table version. S is cut out of the text without parsing it (as the Python decoder does), so only P is
parsed per record. The distinct schemas of the input are found first by a light pass over the records (a second
read of the archive: grouped by the schema's length and a hash of the first bytes, no JSON parse, no copy) and read
on the driver; each becomes a :class:`SchemaPlan`: its columns, their Spark types, the conversion of
each value (Connect ``Decimal`` from base64, ``Date`` from days, ``Timestamp``/``MicroTimestamp`` from epoch counts)
and the check that the value is one its type holds. A plan is a handful of column expressions per column of one
table, applied under a CASE on the record's schema: what depends on a table's columns stays per table.

The native path decodes ops c/u/d/r of a relational connector whose position it knows (MySQL/MariaDB binlog file,
pos and row; PostgreSQL lsn; Oracle commit_scn and scn), whose images carry exactly the schema's columns with values
that pass their checks, keyed by a JSON Kafka key (key-change headers are kept as provenance), and Kafka tombstones
(``native_json.with_tombstones``). Everything else -- transaction and schema-change messages, op m and t, MongoDB,
SQL Server, TOAST placeholders, bad values, a table with configured column types -- goes through the Python decoder
(``debezium_json.decode_record``) unchanged.

The envelope half (``change_rows``: op, position, event time, key, provenance, the verdict) and the value conversions
serve the Avro wire too (``debezium_avro_native``), which hands over the same payload fields as texts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.envelopes.debezium_events import (
    HEADER_NEW_KEY,
    HEADER_OLD_KEY,
    OPS,
    SNAPSHOT_MARKERS,
    UNAVAILABLE_FORMS,
    image_fields,
)
from cdcreplay.formats.values.debezium_values import (
    DATE_NAMES,
    DECIMAL,
    MAX_DAYS,
    MAX_MICROS,
    MILLI_TIMESTAMPS,
    MIN_DAYS,
    MIN_MICROS,
    Field,
    converter,
    debezium_field_type,
)
from cdcreplay.formats.wire import native_json as N
from cdcreplay.formats.wire.json_reader import EXACT

FORMAT_ID = "debezium-json"
WRAPPED_START, PAYLOAD_SEPARATOR = '{"schema":', ',"payload":'  # JsonConverter's compact layout
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
# At most this many table versions get a native plan (the most frequent); records of others are decoded in Python.
# Every plan adds its columns' expressions to one generated projection, whose code the driver holds as text: 64 plans
# of two columns each (a bug once made a plan per record) needed more than 600 MB of driver heap to build it.
MAX_NATIVE_SCHEMAS = 16
MAX_KEY_COLUMNS = 4
NATIVE_OPS = ("c", "u", "d", "r")  # t (truncate) and m (message) are left to Python
# The source block's fields the envelope reads, as texts (an absent field reads as null): a struct, whose fields are
# found by position, where a map of every field the connector writes was searched by name at each of ~18 reads.
SOURCE_FIELDS = (
    "connector", "db", "schema", "table", "file", "pos", "row", "lsn", "scn", "commit_scn", "commit_lsn", "ord",
    "collection", "snapshot", "ts_ms",
)  # fmt: skip
SOURCE_DDL = "struct<" + ", ".join(f"`{name}`: string" for name in SOURCE_FIELDS) + ">"
PAYLOAD_DDL = (
    f"op string, ts_ms string, before map<string,string>, after map<string,string>, source {SOURCE_DDL}, "
    "transaction map<string,string>, message map<string,string>, updateDescription map<string,string>, patch string"
)
# Canonical text each Spark type's check accepts natively: a subset of what ``value_checks`` accepts, so a value
# passed here is valid there too; a value outside it is judged by the Python decoder.
_DOUBLE = r"^-?[0-9]+(\.[0-9]+)?(E-?[0-9]+)?$"
_BASE64 = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _integer(spark_type: str):
    return lambda raw: raw.rlike(r"^-?[0-9]{1,19}$") & raw.try_cast(spark_type).isNotNull()


CHECKS = {
    "string": None,
    "boolean": lambda raw: raw.isin("true", "false"),
    # value_checks holds tinyint and smallint to int's range, as the typed table's cast does
    "tinyint": _integer("int"),
    "smallint": _integer("int"),
    "int": _integer("int"),
    "bigint": _integer("bigint"),
    "float": lambda raw: raw.rlike(_DOUBLE),
    "double": lambda raw: raw.rlike(_DOUBLE),
    "binary": lambda raw: raw.rlike(_BASE64),
}
PRIMITIVES = ("boolean", "int8", "int16", "int32", "int64", "float32", "float64", "float", "double", "string", "bytes")
FLOAT_TYPES = ("float", "double")
PLAIN_NAME = r"^[A-Za-z0-9_$]+$"  # a column name JSON writes as it is (no escape could spell it differently)
POSITION_PART = r"^[0-9]{1,18}$"
EPOCH_COUNT = r"^-?[0-9]{1,15}$"
LOOSE_INTEGER = r"^\s*[+-]?[0-9]+\s*$"  # what the Python decoder's as_long reads, where EPOCH_COUNT is stricter


# --- schemas: found on the driver, one plan each ---------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaPlan:
    """One table version's Connect schema, as column expressions."""

    text: str
    fields: tuple[tuple[str, Field], ...]
    types: dict[str, str]

    @property
    def columns(self) -> list[str]:
        return [name for name, _ in self.fields]


def _digits(text: str | None) -> bool:
    return text is not None and text.isascii() and text.isdigit()


def _native_field(field: Field, spark_type: str) -> bool:
    if field.name == DECIMAL:
        precision = "38" if field.precision is None else field.precision
        digits = _digits(precision) and _digits(field.scale)
        return digits and int(field.scale) <= min(int(precision), 17) and int(precision) <= 38
    if field.name in DATE_NAMES or field.name in MILLI_TIMESTAMPS or field.name == MICRO_TIMESTAMP:
        return True
    return converter(field) is None and field.type in PRIMITIVES and spark_type in CHECKS


def schema_plan(text: str) -> SchemaPlan | None:
    """The plan of one schema's JSON text, or None when the native path does not take its records."""
    try:
        schema = EXACT.parse(text)
    except ValueError:
        return None
    fields = image_fields(schema)
    if not fields:
        return None  # not a Connect schema, or one without row images (schema-change, MongoDB): Python
    names = [name for name, _ in fields]
    if any(name is None for name in names) or len(set(names)) != len(names):
        return None
    types = {name: debezium_field_type(field) for name, field in fields}
    if not all(_native_field(field, types[name]) for name, field in fields):
        return None
    return SchemaPlan(text, tuple(fields), types)


def _prefix_bytes(text: Column) -> Column:
    """Bytes of ``{"schema":S,"payload":`` -- found from the end, where the short payload is (0 without one)."""
    return F.octet_length(text) - F.octet_length(F.substring_index(text, PAYLOAD_SEPARATOR, -1))


def schema_plans(records: DataFrame, every: int = 1) -> list[SchemaPlan]:
    """The native plans of the schemas in ``records``: one pass that neither parses nor copies a record's schema
    (records are grouped by the schema's length and a hash of its first bytes; a plan matches a record
    only when its whole schema text does, so a record whose schema shared a group with another is decoded in
    Python, never with the other's plan). Only one schema text per group reaches the driver.

    ``every``: look at about one record in ``every`` (``native_json.sampled``)."""
    records = N.sampled(records, every)
    value = F.col("value")
    text = value.cast("string")
    prefix = _prefix_bytes(text)
    wrapped = text.startswith(WRAPPED_START) & text.endswith("}") & (prefix > len(WRAPPED_START + PAYLOAD_SEPARATOR))
    start = len(WRAPPED_START.encode())
    found = (
        records.where(wrapped)
        .groupBy(
            prefix.alias("prefix"), F.xxhash64(F.substring(value, F.lit(1), F.least(prefix, F.lit(512)))).alias("hash")
        )
        .agg(
            F.first(F.substring(value, start + 1, prefix - start - len(PAYLOAD_SEPARATOR))).alias("schema"),
            F.count(F.lit(1)).alias("records"),
        )
        .orderBy(F.desc("records"))
        .limit(MAX_NATIVE_SCHEMAS)
        .collect()
    )
    plans, seen = [], set()
    for row in found:
        try:
            text_of_schema = bytes(row.schema).decode("utf-8")
        except UnicodeDecodeError:
            continue
        plan = schema_plan(text_of_schema) if text_of_schema not in seen else None
        seen.add(text_of_schema)
        if plan is not None:
            plans.append(plan)
    return plans


# --- values ----------------------------------------------------------------------------------------------------------


def decimal_of_hex(hexed: Column, precision: int, scale: int) -> tuple[Column, Column]:
    """Connect Decimal from the hex digits of its big-endian two's-complement unscaled integer (1 to 8 bytes) ->
    (exact text, whether the native path vouches for it). The digits, sign-extended to 16, read as a signed 64-bit
    integer (``conv`` to base -10); times 10^-scale it is exact in a decimal of that scale, whose text has exactly
    ``scale`` digits after the point, as the Python decoder writes it. Longer values are left to Python."""
    sign = F.when(hexed >= F.lit("8"), F.lit("F")).otherwise(F.lit("0"))
    unscaled = F.conv(F.lpad(hexed, 16, sign), 16, -10).try_cast("decimal(20,0)")
    scaled = unscaled * F.lit(Decimal(1).scaleb(-scale)) if scale > 0 else unscaled
    fits = F.abs(unscaled) < F.lit(Decimal(10) ** min(precision, 20))  # 8 bytes never reach 10^20
    return scaled.cast("string"), F.length(hexed).between(2, 16) & fits


def _decimal(raw: Column, precision: int, scale: int) -> tuple[Column, Column]:
    """Connect Decimal on the JSON wire: base64 of the unscaled integer (``decimal_of_hex``). Each reference to the
    bytes decodes them again (no common subexpression is shared inside the per-plan CASE), so the expression refers
    to them as little as it can."""
    text, ok = decimal_of_hex(F.hex(F.try_to_binary(raw, F.lit("base64"))), precision, scale)
    return text, raw.rlike(_BASE64) & (F.length(raw) >= 4) & ok


def date_of_days(days: Column) -> tuple[Column, Column]:
    """Connect/Debezium Date: days since 1970-01-01 -> (yyyy-MM-dd, whether Spark's date range holds it)."""
    ok = days.between(MIN_DAYS, MAX_DAYS)
    return F.when(ok, F.date_add(F.lit("1970-01-01").cast("date"), days).cast("string")), ok


def timestamp_of_micros(micros: Column) -> tuple[Column, Column]:
    """Microseconds since the epoch -> (the Python decoder's timestamp text, whether Spark's range holds it)."""
    ok = micros.between(MIN_MICROS, MAX_MICROS)
    return F.when(ok, F.date_format(F.timestamp_micros(micros), "yyyy-MM-dd HH:mm:ss.SSSSSS")), ok


def native_decimal(field: Field) -> tuple[int, int]:
    """(precision, scale) of a Connect Decimal field (``_native_field`` vouched for the digits)."""
    return 38 if field.precision is None else int(field.precision), int(field.scale)


def _value(raw: Column, field: Field, spark_type: str) -> tuple[Column, Column]:
    """(canonical text, whether the native path vouches for it) of one present, non-null value."""
    if field.name == DECIMAL:
        return _decimal(raw, *native_decimal(field))
    if field.name in DATE_NAMES:
        return date_of_days(F.when(raw.rlike(r"^-?[0-9]{1,7}$"), raw.try_cast("int")))
    if field.name in MILLI_TIMESTAMPS or field.name == MICRO_TIMESTAMP:
        per_unit = 1000 if field.name in MILLI_TIMESTAMPS else 1
        pattern = EPOCH_COUNT if per_unit == 1000 else r"^-?[0-9]{1,18}$"
        return timestamp_of_micros(F.when(raw.rlike(pattern), raw.try_cast("bigint") * per_unit))
    check = CHECKS[spark_type]
    return raw, F.lit(True) if check is None else check(raw)


def _image(image: Column, plan: SchemaPlan) -> Column:
    """struct(image: the converted image, ok: whether the native path vouches for it) of an image that must carry
    exactly the plan's columns."""
    names = F.array(*[F.lit(name) for name in plan.columns])
    values = F.map_values(image)
    converted, checks, changed = [], [], False
    for index, (name, field) in enumerate(plan.fields):
        raw = F.try_element_at(values, F.lit(index + 1))
        text, ok = _value(raw, field, plan.types[name])
        changed = changed or text is not raw
        converted.append(F.when(raw.isNotNull(), text))
        checks.append(raw.isNull() | ok)
    placeholders = F.array(*[F.lit(form) for form in sorted(UNAVAILABLE_FORMS)])
    vouched = (F.map_keys(image) == names) & ~F.coalesce(F.arrays_overlap(values, placeholders), F.lit(False))
    for check in checks:
        vouched = vouched & F.coalesce(check, F.lit(False))
    out = F.map_from_arrays(names, F.array(*converted)) if changed else image
    return F.struct(F.when(image.isNotNull(), out).alias("image"), (image.isNull() | vouched).alias("ok"))


def _tokens_read_as_written(plan: SchemaPlan, payload: Column, payload_text: Column) -> Column:
    """Whether no value of the plan's images can be a number token that Spark's reader rewrote (``native_json``),
    without a regular expression over the whole payload for most records.

    Only two kinds of column can hold a rewritten token that still passes its check: a string column (any token is
    text to it) and a float or double column. A string value is suspect when it reads like a rewritten number or nested
    JSON (``native_json.reads_like_rendered_number``); a float column's token is read from the payload text by a
    search anchored on the column's name. The names that make the table's identity are checked by the caller."""
    strings = [index for index, name in enumerate(plan.columns) if plan.types[name] == "string"]
    floats = [name for name in plan.columns if plan.types[name] in FLOAT_TYPES]
    plain = F.lit(True)
    for image in (payload["after"], payload["before"]):
        values = F.map_values(image)
        for index in strings:
            plain = plain & ~N.reads_like_rendered_number(F.try_element_at(values, F.lit(index + 1)))
    if any(not re.match(PLAIN_NAME, name) for name in floats):
        return plain & N.plain_numbers(payload_text)
    for name in floats:
        plain = plain & ~payload_text.rlike(f'"{re.escape(name)}"\\s*:\\s*{N.RISKY_TOKEN}')
    return plain


# --- the envelope ----------------------------------------------------------------------------------------------------


def _epoch_count(text: Column) -> tuple[Column, Column]:
    """(the count as bigint, whether the native reading equals the Python decoder's ``as_long``)."""
    strict = text.rlike(EPOCH_COUNT)
    return F.when(strict, text.try_cast("bigint")), text.isNull() | strict | ~text.rlike(LOOSE_INTEGER)


def _event_time(source: Column, payload: Column) -> tuple[Column, Column]:
    """source.ts_ms when positive, else the envelope's ts_ms (processing time), as a timestamp."""
    source_ms, source_ok = _epoch_count(source["ts_ms"])
    envelope_ms, envelope_ok = _epoch_count(payload["ts_ms"])
    millis = F.when(source_ms > 0, source_ms).otherwise(envelope_ms)
    in_range = millis.between(MIN_MICROS // 1000, MAX_MICROS // 1000)  # the Python decoder checks millis * 1000
    in_range = in_range & (millis * 1000).between(MIN_MICROS, MAX_MICROS)
    return F.when(in_range, F.timestamp_millis(millis)), source_ok & envelope_ok


def _part(text: Column) -> Column:
    return text.try_cast("decimal(38,0)")  # computed for every record, vouched for or not: never raises


def _position(source: Column) -> tuple[Column, Column]:
    """(connector position as array<decimal(38,0)>, whether the native path knows the connector's position)."""
    file, pos, row = source["file"], source["pos"], source["row"]
    lsn, scn, commit_scn = source["lsn"], source["scn"], source["commit_scn"]
    binlog_number = F.regexp_extract(file, r"([0-9]{1,18})$", 1)
    mysql_ok = file.rlike(r"(^|[^0-9])[0-9]{1,18}$") & pos.rlike(POSITION_PART)
    mysql_ok = mysql_ok & (row.isNull() | row.rlike(POSITION_PART))
    oracle_ok = scn.rlike(POSITION_PART) & (commit_scn.isNull() | commit_scn.rlike(POSITION_PART))
    position = (
        F.when(file.isNotNull(), F.array(_part(binlog_number), _part(pos), _part(F.coalesce(row, F.lit("0")))))
        .when(lsn.isNotNull(), F.array(_part(lsn)))
        .when(scn.isNotNull(), F.array(_part(F.coalesce(commit_scn, scn)), _part(scn)))
        .otherwise(F.array().cast("array<decimal(38,0)>"))
    )
    known = (
        F.when(file.isNotNull(), mysql_ok)
        .when(lsn.isNotNull(), lsn.rlike(POSITION_PART))
        .when(source["commit_lsn"].isNotNull(), F.lit(False))  # SQL Server: LSNs in hex, left to Python
        .when(scn.isNotNull(), oracle_ok)
        .otherwise(source["ord"].isNull())  # MongoDB's (ts_ms, ord): Python
    )
    return position, known


def _key_columns(key_text: Column) -> tuple[Column, Column]:
    """(the Kafka key's field names, whether the native reading equals the Python decoder's ``kafka_key``): the
    payload of JsonConverter's ``{"schema":...,"payload":{...}}`` (its schema skipped, not read), or a bare object
    that names no schema."""
    wrapped = F.from_json(key_text, "struct<payload map<string,string>>", N.JSON_OPTIONS)["payload"]
    bare = F.from_json(key_text, "map<string,string>", N.JSON_OPTIONS)
    has_schema = key_text.startswith(WRAPPED_START)
    columns = F.when(has_schema, F.map_keys(wrapped)).when(~key_text.contains('"schema"'), F.map_keys(bare))
    ok = columns.isNotNull() & N.plain_escapes(key_text) & F.size(columns).between(1, MAX_KEY_COLUMNS)
    return columns, F.coalesce(ok, F.lit(False))


def key_text(image: Column, key_columns: Column) -> Column:
    """The key as ``routing.key_text`` writes it (a JSON array of texts), or NULL when a key value is missing or
    null, or the key has more than MAX_KEY_COLUMNS columns (then the Python decoder builds it).

    A missing value is looked up once and stands as ``NO_ENTRY_KEY`` in the array (a key value of that text is left
    to Python too): counting the values ``array_compact`` keeps would be a lambda, which Spark evaluates interpreted
    with every lookup below it (a tenth of Debezium's native pass)."""
    values = _key_values(image, key_columns, missing=F.lit(N.NO_ENTRY_KEY))
    complete = F.size(key_columns).between(1, MAX_KEY_COLUMNS) & ~F.array_contains(values, F.lit(N.NO_ENTRY_KEY))
    return F.when(complete, F.to_json(values))


def counted_key_text(image: Column, key_columns: Column) -> Column:
    """:func:`key_text` with the values counted by ``array_compact``: a lambda, which Spark evaluates interpreted
    with the look-ups below it, but whose code stays small. Where a path's projections fuse into one whole-stage
    method, the generated key pushed that method past the 8,000 bytes of bytecode HotSpot compiles (DataWorks JSON:
    9-17 KB; Debezium Avro: 11 KB), which costs more than the interpreted key (docs/benchmarks.md, 2026-12-06)."""
    values = _key_values(image, key_columns)
    return F.when(F.size(F.array_compact(values)) == F.size(key_columns), F.to_json(values))


def _key_values(image: Column, key_columns: Column, missing: Column | None = None) -> Column:
    """The image's values of the key's first MAX_KEY_COLUMNS columns, in key order; ``missing`` (NULL when None)
    stands for a column the image has no value for."""
    candidates = [F.try_element_at(image, F.try_element_at(key_columns, F.lit(i + 1))) for i in range(MAX_KEY_COLUMNS)]
    if missing is not None:
        candidates = [F.coalesce(candidate, missing) for candidate in candidates]
    return F.slice(F.array(*candidates), 1, F.size(key_columns))


def _key_change_provenance(headers: Column) -> tuple[Column, Column]:
    """(``debezium_events.key_change_provenance`` of the headers, whether they can be read natively: no header
    without a name, none named ``NO_ENTRY_KEY``). The last value of a repeated header wins, as in Kafka."""
    # A header without a name (no map can hold it), found without a lambda: array_contains is NULL for an array that
    # holds a NULL and not the value looked for.
    named = headers.isNull() | F.coalesce(~F.array_contains(headers["key"], F.lit(N.NO_ENTRY_KEY)), F.lit(False))
    by_name = F.map_from_entries(F.when(named, headers))
    parts = []
    for name in (HEADER_NEW_KEY, HEADER_OLD_KEY):
        value = F.try_element_at(by_name, F.lit(name))
        text = F.when(F.is_valid_utf8(value.cast("string")), value.cast("string")).otherwise(F.base64(value))
        parts.append(F.when(value.isNotNull(), F.concat(F.lit(f"{name}="), text)))
    detail = F.concat_ws("; ", *parts)
    return F.when(detail != "", detail), named


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[SchemaPlan]) -> DataFrame:
    """Every record with its natively decoded columns and the ``native`` flag (see ``native_json``)."""
    plan_list = list(plans)
    # A record is of plan i when its text starts with plan i's whole `{"schema":S,"payload":` (a memory compare,
    # no copy; another table's schema differs within its first bytes); only its payload, the rest of the text, is
    # copied out, checked to be UTF-8 and parsed.
    value = F.col("value")
    text = value.cast("string")
    heads = [WRAPPED_START + plan.text + PAYLOAD_SEPARATOR for plan in plan_list]
    plan_index = F.lit(-1)
    for index, head in reversed(list(enumerate(heads))):
        plan_index = F.when(text.startswith(head), F.lit(index)).otherwise(plan_index)
    located = records.select("*", plan_index.alias(PLAN))
    located = located.select(
        "*",
        N.per_plan(F.col(PLAN), [F.lit(len(head.encode())) for head in heads], F.lit(0)).alias("_prefix"),
        N.text_of(F.col("key")).alias("_key_text"),
        *N.tombstone_columns(),
    )
    payload_text = N.text_of(
        F.substring(F.col("value"), F.col("_prefix") + 1, F.octet_length("value") - F.col("_prefix") - 1)
    )
    with_payload = located.select("*", F.when(F.col(PLAN) >= 0, payload_text).alias("_payload_text"))
    parsed = with_payload.select(
        "*", N.parse(F.col("_payload_text"), PAYLOAD_DDL).alias(PAYLOAD), F.col("value").endswith("}").alias("_closed")
    )

    payload, source, plan = F.col(PAYLOAD), F.col(PAYLOAD)["source"], F.col(PLAN)
    # A rewritten number token must not reach a value: where a cheap look cannot rule it out, every number token of
    # the payload is checked (N.plain_numbers, a regular expression over the whole text: a fifth of the native pass
    # when it ran for every record).
    names_plain = F.lit(True)
    for name in (source["db"], source["schema"], source["table"]):
        names_plain = names_plain & ~N.reads_like_rendered_number(name)
    images_plain = (
        N.per_plan(plan, [_tokens_read_as_written(p, payload, F.col("_payload_text")) for p in plan_list])
        if plan_list
        else F.lit(False)
    )
    numbers_read_back = F.when(names_plain & images_plain, F.lit(True)).otherwise(
        N.plain_numbers(F.col("_payload_text"))
    )
    kafka_columns, key_ok = _key_columns(F.col("_key_text"))
    # One CASE per image, each plan's branch computing its converted image and its verdict together.
    images = {
        which: N.per_plan(plan, [_image(payload[which], p) for p in plan_list]) if plan_list else no_image()
        for which in ("after", "before")
    }
    wire_ok = (
        F.col("_closed")
        & payload.isNotNull()
        & payload[N.CORRUPT_FIELD].isNull()
        & N.one_object(F.col("_payload_text"))
        # a second `"payload"` member (JSON's last one wins in Python, the first in Spark's reader) or text after it
        & ~F.col("_payload_text").contains(PAYLOAD_SEPARATOR)
        & N.plain_escapes(F.col("_payload_text"))
        & numbers_read_back
        & key_ok
    )
    return change_rows(parsed, pipeline, plan_list, wire_ok, kafka_columns, images, FORMAT_ID)


# The columns change_rows reads besides the record's own: the index of the record's plan (-1: none), and its payload
# as the JSON wire's from_json gives it (PAYLOAD_DDL: op, ts_ms, source, ... as JSON text; before and after are read
# only for being null or not).
PLAN, PAYLOAD = "_plan", "_p"


def no_image() -> Column:
    """The images of an input without plans: none, never vouched for."""
    return F.struct(F.lit(None).cast("map<string,string>").alias("image"), F.lit(False).alias("ok"))


def change_rows(
    parsed: DataFrame,
    pipeline: PipelineConfig,
    plans: list[SchemaPlan],
    wire_ok: Column,
    kafka_columns: Column,
    images: dict[str, Column],
    format_id: str,
    key_of=key_text,
) -> DataFrame:
    """The changelog rows of Debezium payloads, whatever wire they came on: op mapping, snapshot markers, position,
    event time, key and key-change provenance, tombstones; and the ``native`` flag, false where the envelope or a
    value is one the Python decoder must judge. ``wire_ok``: the wire's own verdict on the record; ``kafka_columns``:
    the key's field names read from the Kafka key; ``images``: the after and before images, each a struct of the
    converted image (map<string,string> of canonical texts) and whether the native path vouches for it; ``key_of``:
    :func:`key_text` or :func:`counted_key_text`."""
    plan_list = list(plans)
    configured_types = sorted(t for t, table in pipeline.tables.items() if table.column_types)
    configured_keys = {t: list(table.primary_key) for t, table in pipeline.tables.items() if table.primary_key}
    payload, source = F.col(PAYLOAD), F.col(PAYLOAD)["source"]
    plan = F.col(PLAN)
    op_code = payload["op"]
    snapshot_marked = F.lower(F.coalesce(source["snapshot"], F.lit(""))).isin(*SNAPSHOT_MARKERS)
    # op=c with source.snapshot set is a snapshot read (never rely on op alone), as in debezium_events
    op = F.when((op_code == "c") & snapshot_marked, F.lit(S.OP_SNAPSHOT))
    for code in NATIVE_OPS:
        op = op.when(op_code == code, F.lit(OPS[code]))
    after, before = images["after"], images["before"]
    if plan_list:
        column_types = N.per_plan(plan, [N.literal_map(p.types) for p in plan_list])
    else:
        column_types = F.lit(None).cast("map<string,string>")

    db, schema_name, table = source["db"], source["schema"], source["table"]
    table_id = F.concat_ws(".", F.nullif(db, F.lit("")), F.nullif(schema_name, F.lit("")), F.nullif(table, F.lit("")))
    key_columns = kafka_columns
    for configured_table, columns in sorted(configured_keys.items()):
        key_columns = F.when(table_id == configured_table, F.array(*[F.lit(c) for c in columns])).otherwise(key_columns)
    is_delete = op_code == "d"
    position, position_ok = _position(source)
    event_time, time_ok = _event_time(source, payload)
    detail, headers_ok = _key_change_provenance(F.col("headers"))
    envelope_ok = (
        (plan >= 0)
        & wire_ok
        & op.isNotNull()
        & payload["message"].isNull()
        & payload["updateDescription"].isNull()
        & payload["patch"].isNull()
        & source.isNotNull()
        & F.coalesce(source["connector"], F.lit("")).__ne__("mongodb")
        & source["collection"].isNull()
        & (F.coalesce(table, F.lit("")) != "")
        & (~table_id.isin(*configured_types) if configured_types else F.lit(True))
        # A delete names its row by the before image, every other op by the after image.
        & F.when(is_delete, payload["before"].isNotNull() & payload["after"].isNull()).otherwise(
            payload["after"].isNotNull()
        )
        & position_ok
        & time_ok
        & headers_ok
    )
    # The images are converted once, in their own projection: the key reads them again (one lookup per key column).
    decoded = parsed.select(
        *N.CARRIED,
        F.coalesce(envelope_ok, F.lit(False)).alias("_envelope_ok"),
        table_id.alias("table_id"),
        db.alias("source_db"),
        schema_name.alias("source_schema"),
        table.alias("source_table"),
        op.alias("op"),
        key_columns.alias("key_columns"),
        after.alias("_after"),
        before.alias("_before"),
        is_delete.alias("_is_delete"),
        column_types.alias("column_types"),
        position.alias("position"),
        event_time.alias("event_time"),
        detail.alias("detail"),
    )
    after, before = F.col("_after.image"), F.col("_before.image")
    # The key in a projection of its own: the row reads it twice (the key, the verdict), each under the tombstone's
    # CASE, where Spark would generate its code twice (one method HotSpot then left uncompiled: over 8,000 bytes).
    keyed = decoded.select(
        "*", key_of(F.when(F.col("_is_delete"), before).otherwise(after), F.col("key_columns")).alias("_key")
    )
    key = F.col("_key")
    vouched = F.col("_envelope_ok") & F.col("_after.ok") & F.col("_before.ok") & key.isNotNull()
    row = N.changelog_row(
        format_id,
        native=F.coalesce(vouched, F.lit(False)),
        table_id=F.col("table_id"),
        source_db=F.col("source_db"),
        source_schema=F.col("source_schema"),
        source_table=F.col("source_table"),
        op=F.col("op"),
        key=key,
        key_columns=F.col("key_columns"),
        after=F.when(~F.col("_is_delete"), after),
        before=before,
        column_types=F.col("column_types"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.lit(0),
        detail=F.col("detail"),
    )
    return keyed.select(*N.with_tombstones(row))
