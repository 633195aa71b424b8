"""Debezium Avro decoded by Spark's ``from_avro``: the native path of ``debezium-avro`` (see ``native_json``).

The Python decoder turns each Avro record into the value Kafka Connect's JsonConverter would have written and hands
it to the one Debezium envelope decoder. The native path follows it in column expressions: ``from_avro`` reads the
body of a Confluent-framed value (after the 0x00 magic byte and the 4-byte schema id) with the writer schema the id
names; each table version's plan is the JSON wire's (``debezium_native.schema_plan`` of the Connect schema the Avro
schema carries), its values converted by the same rules (a Connect ``Decimal`` from its unscaled bytes, a ``Date``
from its day count) and the envelope -- op, snapshot markers, position, event time, key, provenance -- built by the
JSON wire's own expressions (``debezium_native.change_rows``) from the same texts.

``from_avro`` reads with the writer schema stripped of its logical types, so that every value arrives as the
primitive Avro wrote (a decimal's unscaled bytes, a date's days, a timestamp's count), as the Python decoder reads it
before its conversions; and each boolean as its byte, which fastavro and Java read alike only when it is 0 or 1.
Which records it takes: a value whose schema id has a plan (a relational Debezium envelope whose image fields are
primitives), keyed by a Confluent-framed Avro key of a known record schema, whose strings are valid UTF-8 (fastavro
refuses others) and whose doubles Java prints as Python does (``as_python_writes``). A record
``from_avro`` cannot read gives a struct of nulls in PERMISSIVE mode; the envelope's ``op`` (required by the schema)
tells it apart, and it goes to Python, which quarantines it with the reason. Everything else -- other schema ids,
JSON keys, transaction metadata, heartbeats, TOAST placeholders -- is the Python decoder's, as on the JSON wire.

``spark-avro`` is not among pyspark's jars: set-up fetches it (``cdcreplay.jars``). A session without it decodes
every record in Python, and says so in the log.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdcreplay import jars
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.debezium_native import (
    CHECKS,
    MAX_KEY_COLUMNS,
    MAX_NATIVE_SCHEMAS,
    MICRO_TIMESTAMP,
    PAYLOAD,
    PLAN,
    SOURCE_FIELDS,
    SchemaPlan,
    change_rows,
    counted_key_text,
    date_of_days,
    decimal_of_hex,
    native_decimal,
    schema_plan,
    timestamp_of_micros,
)
from cdcreplay.formats.envelopes.debezium_events import UNAVAILABLE_FORMS
from cdcreplay.formats.values.avro_connect import ConnectRenderer
from cdcreplay.formats.values.debezium_values import (
    DATE_NAMES,
    DECIMAL,
    MAX_MICROS,
    MILLI_TIMESTAMPS,
    MIN_MICROS,
    Field,
)
from cdcreplay.formats.wire import native_json as N
from cdcreplay.formats.wire.avro_wire import read_as_written

log = logging.getLogger(__name__)

FORMAT_ID = "debezium-avro"
AVRO_FUNCTIONS = "org.apache.spark.sql.avro.functions"
AVRO_OPTIONS = {"mode": "PERMISSIVE"}
# How each Avro primitive becomes the JSON text JsonConverter writes for the same Connect value.
TEXT_OF = {
    "int": lambda value: value.cast("string"),
    "long": lambda value: value.cast("string"),
    "boolean": N.raw_boolean_text,  # read as its byte: booleans_as_bytes
    "string": lambda value: value,
    "enum": lambda value: value,
    "bytes": F.base64,
    "fixed": F.base64,
    "float": lambda value: value.cast("double").cast("string"),  # fastavro reads a float into a Python float
    "double": lambda value: value.cast("string"),
}
STRING_KINDS = ("string", "enum")
FLOAT_KINDS = ("float", "double")
# Java prints a double in plain notation from 10^-3 to 10^7, where Python's Decimal(repr(x)) -- the Python decoder's
# text -- is plain too.
JAVA_PLAIN_DOUBLE = r"^-?[0-9]+\.[0-9]+$"
MAX_EXACT_DIGITS = 15
ENVELOPE_FIELDS = ("before", "after", "source", "op")
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "headers")  # what change_rows reads of the record
ALSO_PYTHON_KEY_NAMES = ("payload", "schema")  # a key with such a field reads as a JsonConverter wrapper in Python
# Spark types whose values an Avro kind always holds: no check of the text is needed.
HELD_BY = {
    "int": ("tinyint", "smallint", "int", "bigint", "string"),
    "long": ("bigint", "string"),
    "boolean": ("boolean", "string"),
    "string": ("string",),
    "enum": ("string",),
    "bytes": ("binary", "string"),
    "fixed": ("binary", "string"),
}
# Connect names whose conversion needs the Avro kind written here (else the plan is the Python decoder's).
CONVERSION_KINDS = {DECIMAL: ("bytes", "fixed"), **dict.fromkeys(DATE_NAMES, ("int",))}
CONVERSION_KINDS.update(dict.fromkeys((*MILLI_TIMESTAMPS, MICRO_TIMESTAMP), ("int", "long")))


def avro_functions_loaded(spark) -> bool:
    """Whether the session's JVM has spark-avro (``from_avro``) on its classpath."""
    try:
        spark._jvm.java.lang.Class.forName(AVRO_FUNCTIONS)
    except Exception:  # py4j wraps ClassNotFoundException
        return False
    return True


def from_avro_available(spark, pipeline: PipelineConfig) -> bool:
    """``avro_functions_loaded``, and when it is not, a warning that the pipeline decodes in Python and why."""
    if avro_functions_loaded(spark):
        return True
    log.warning(
        "pipeline %s: spark-avro is not on this Spark session's classpath (%s); decoding in Python. "
        "scripts/setup.sh fetches it; spark-submit needs it in --jars",
        pipeline.name,
        jars.SPARK_AVRO.file_name,
    )
    return False


def planned_native_rows(path, records: DataFrame, pipeline: PipelineConfig, reading, record_count: int | None):
    """The rows of a native path that reads one writer schema (``path``: a module with ``table_plans`` and
    ``native_rows``, ``reading``: what its ``reading_of`` made of the pipeline's schema) over the plans of a sample
    of ``records``; None when the session has no spark-avro or ``reading`` is None (a schema of another shape): then
    every record is decoded in Python."""
    if not from_avro_available(records.sparkSession, pipeline) or reading is None:
        return None
    plans = path.table_plans(records, pipeline, reading, N.sample_rate(record_count))
    return path.native_rows(records, pipeline, reading, plans)


# --- schemas ---------------------------------------------------------------------------------------------------------


def _primitive_kind(schema) -> tuple[str, bool] | None:
    """(Avro kind, optional) of a field type the native path renders: a primitive, an enum or a fixed, alone or in a
    union with null. None for anything else (records, arrays, maps, other unions, a named type referred to by
    name)."""
    optional = False
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        if len(branches) != 1:
            return None
        optional, schema = len(branches) < len(schema), branches[0]
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(schema, dict) and kind in ("enum", "fixed"):
        return kind, optional
    return (kind, optional) if kind in TEXT_OF else None


def _record_fields(schema, needed=None) -> list[tuple[str, str, bool]] | None:
    """(name, Avro kind, optional) of every field of a record type written out in place, or None when one is not a
    primitive. ``needed``: only these names must be primitives; other fields that are not are left out."""
    if isinstance(schema, list):
        records = [branch for branch in schema if isinstance(branch, dict)]
        schema = records[0] if len(records) == 1 else None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    found = []
    for field in schema.get("fields", ()):
        kind = _primitive_kind(field.get("type"))
        if kind is not None:
            found.append((field["name"], *kind))
        elif needed is None or field.get("name") in needed:
            return None
    return found


@dataclass(frozen=True)
class AvroPlan:
    """One value schema id: the writer schema ``from_avro`` reads with, the fields of its image and source records,
    and the Connect-level plan the JSON wire would have for the same table version."""

    schema_id: int
    read_schema: str
    image: tuple[tuple[str, str, bool], ...]
    source: tuple[tuple[str, str, bool], ...]
    ts_ms_kind: str | None  # the envelope's processing time, when the schema has one
    plan: SchemaPlan


def avro_plan(schema_id: int, schema_text: str) -> AvroPlan | None:
    """The native plan of a Debezium envelope's writer schema, or None when its records are the Python decoder's."""
    import fastavro

    try:
        schema = json.loads(schema_text)
        parsed = fastavro.parse_schema(schema)
    except Exception:  # not JSON, not Avro: the Python decoder names the problem per record
        return None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = {field.get("name"): field.get("type") for field in schema.get("fields", ())}
    if not all(name in fields for name in ENVELOPE_FIELDS) or _primitive_kind(fields["op"]) != ("string", False):
        return None
    image = _record_fields(fields["before"]) or _record_fields(fields["after"])
    source = _record_fields(fields["source"], needed=SOURCE_FIELDS)
    if not image or source is None:
        return None
    connect = ConnectRenderer(parsed).connect_schema
    plan = schema_plan(json.dumps(connect, separators=(",", ":")))
    if plan is None or plan.columns != [name for name, _, _ in image]:
        return None
    for (_, kind, _), (_, field) in zip(image, plan.fields, strict=True):
        if field.name in CONVERSION_KINDS and kind not in CONVERSION_KINDS[field.name]:
            return None
    ts_ms = _primitive_kind(fields["ts_ms"]) if "ts_ms" in fields else None
    read_schema = read_as_written(schema)
    return AvroPlan(schema_id, read_schema, tuple(image), tuple(source), ts_ms[0] if ts_ms else None, plan)


@dataclass(frozen=True)
class KeyPlan:
    """One key schema id: its fields, and the schema ``from_avro`` checks the key with (the Python decoder reads the
    key too, and quarantines a record whose key does not decode)."""

    schema_id: int
    read_schema: str
    fields: tuple[tuple[str, str, bool], ...]

    @property
    def columns(self) -> list[str]:
        return [name for name, _, _ in self.fields]


def key_plan(schema_id: int, schema_text: str) -> KeyPlan | None:
    """The plan of a Confluent Avro key schema the native path reads: a record of 1 to MAX_KEY_COLUMNS primitive
    fields, one of them required (a key that does not decode reads as all nulls: a required field tells it apart)."""
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return None
    fields = _record_fields(schema)
    if not fields or len(fields) > MAX_KEY_COLUMNS or all(optional for _, _, optional in fields):
        return None
    if any(name in ALSO_PYTHON_KEY_NAMES for name, _, _ in fields):
        return None
    read_schema = read_as_written(schema)
    return KeyPlan(schema_id, read_schema, tuple(fields))


def _key_reads(key: Column, plan: KeyPlan) -> Column:
    """Whether the Kafka key decodes with its schema, with valid UTF-8 in its strings."""
    required = next(name for name, _, optional in plan.fields if not optional)
    ok = key[required].isNotNull()
    for name, kind, _ in plan.fields:
        if kind in STRING_KINDS:
            ok = ok & F.coalesce(F.is_valid_utf8(key[name]), F.lit(True))
    return ok


# --- records ---------------------------------------------------------------------------------------------------------


def _schema_id(binary: Column) -> Column:
    """The Confluent frame's schema id (bytes 2-5, big-endian), or NULL when the bytes are not Confluent-framed."""
    framed = (F.octet_length(binary) >= 5) & (F.substring(binary, 1, 1) == F.lit(bytearray(b"\x00")))
    return F.when(framed, F.conv(F.hex(F.substring(binary, 2, 4)), 16, 10).cast("bigint"))


def schema_counts(records: DataFrame, every: int = 1) -> list[tuple[int | None, int | None, int]]:
    """(value schema id, key schema id, records) of the input, most frequent first: a light pass that reads five
    bytes of each value and key, of about one record in ``every`` (``native_json.sampled``)."""
    found = (
        N.sampled(records, every)
        .groupBy(_schema_id(F.col("value")).alias("value_id"), _schema_id(F.col("key")).alias("key_id"))
        .count()
    )
    return [(row["value_id"], row["key_id"], row["count"]) for row in found.orderBy(F.desc("count")).collect()]


def as_python_writes(text: Column) -> Column:
    """Whether Java's text of a double is the Python decoder's (``debezium_values.number_text``: the shortest text
    that reads back as the value). Java 17's ``Double.toString`` is not always the shortest, but a text of at most 15
    significant digits is: no two such decimals read as the same double, so the shortest, which cannot be longer, is
    the same number. In plain notation (Java's from 10^-3 to 10^7) the two then write it alike."""
    digits = F.regexp_replace(F.regexp_replace(text, r"[-.]", ""), r"^0+|0+$", "")
    return text.rlike(JAVA_PLAIN_DOUBLE) & (F.length(digits) <= MAX_EXACT_DIGITS)


def _converted(value: Column, kind: str, field: Field, spark_type: str) -> tuple[Column, Column | None]:
    """(canonical text, whether the native path vouches for it; None: always) of one present Avro value, as the
    Python decoder converts the Connect value JsonConverter would have written for it (``debezium_native._value``
    on the JSON wire)."""
    if field.name == DECIMAL:
        return decimal_of_hex(F.hex(value), *native_decimal(field))
    if field.name in DATE_NAMES:
        return date_of_days(value)
    if field.name in MILLI_TIMESTAMPS:
        in_range = value.between(MIN_MICROS // 1000, MAX_MICROS // 1000)  # no overflow in the product below
        return timestamp_of_micros(F.when(in_range, value.cast("bigint") * 1000))
    if field.name == MICRO_TIMESTAMP:
        return timestamp_of_micros(value)
    text = TEXT_OF[kind](value)
    if kind in FLOAT_KINDS:
        return text, as_python_writes(text)
    if spark_type in HELD_BY.get(kind, ()):
        return text, None
    check = CHECKS[spark_type]
    return text, None if check is None else check(text)


def _image(envelope: Column, which: str, plan: AvroPlan) -> Column:
    """struct(image: the converted image as map<string,string>, ok: whether the native path vouches for it) of one
    image record: strings must be valid UTF-8 (fastavro refuses others), doubles must print alike, no value may be
    Debezium's placeholder for a value it did not capture (Python's to judge)."""
    image = envelope[which]
    names = F.array(*[F.lit(name) for name, _, _ in plan.image])
    texts, vouched, placeholders_possible = [], F.lit(True), []
    for (name, kind, _), (_, field) in zip(plan.image, plan.plan.fields, strict=True):
        value = image[name]
        text, ok = _converted(value, kind, field, plan.plan.types[name])
        texts.append(F.when(value.isNotNull(), text))
        if ok is not None:
            vouched = vouched & (value.isNull() | F.coalesce(ok, F.lit(False)))
        if kind in STRING_KINDS:
            vouched = vouched & F.coalesce(F.is_valid_utf8(value), F.lit(True))
        if kind in STRING_KINDS or kind in ("bytes", "fixed"):
            placeholders_possible.append(text)
    if placeholders_possible:
        placeholders = F.array(*[F.lit(form) for form in sorted(UNAVAILABLE_FORMS)])
        vouched = vouched & ~F.coalesce(F.arrays_overlap(F.array(*placeholders_possible), placeholders), F.lit(False))
    converted = F.when(image.isNotNull(), F.map_from_arrays(names, F.array(*texts)))
    return F.struct(converted.alias("image"), (image.isNull() | vouched).alias("ok"))


def _payload(envelope: Column, plan: AvroPlan) -> Column:
    """The payload struct ``change_rows`` reads, as the JSON wire's from_json would give it for this record: op,
    ts_ms and the source as JSON texts; before and after only as present (true) or not (null)."""
    source = envelope["source"]
    kinds = {name: kind for name, kind, _ in plan.source}
    source_texts = F.struct(
        *[
            (TEXT_OF[kinds[name]](source[name]) if name in kinds else F.lit(None).cast("string")).alias(name)
            for name in SOURCE_FIELDS
        ]
    )
    empty = F.lit(None).cast("map<string,string>")
    parts = {
        "op": envelope["op"],
        "ts_ms": TEXT_OF[plan.ts_ms_kind](envelope["ts_ms"]) if plan.ts_ms_kind else F.lit(None).cast("string"),
        "before": F.when(envelope["before"].isNotNull(), F.lit(True)),
        "after": F.when(envelope["after"].isNotNull(), F.lit(True)),
        "source": F.when(source.isNotNull(), source_texts),
        "message": empty,
        "updateDescription": empty,
        "patch": F.lit(None).cast("string"),
    }
    return F.struct(*[value.alias(name) for name, value in parts.items()])


def _index_of(schema_id: Column, plans) -> Column:
    """The index of the plan of ``schema_id`` (-1: none)."""
    index = F.lit(-1)
    for position, plan in reversed(list(enumerate(plans))):
        index = F.when(schema_id == plan.schema_id, F.lit(position)).otherwise(index)
    return index


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[AvroPlan], keys: list[KeyPlan]) -> DataFrame:
    """Every record with its natively decoded columns and the ``native`` flag (see ``native_json``)."""
    value_id, key_id = _schema_id(F.col("value")), _schema_id(F.col("key"))
    value_body, key_body = F.expr("substring(value, 6)"), F.expr("substring(key, 6)")
    # One from_avro per schema, each in its own column (a CASE branch that called it again would decode again).
    decoded = records.select(
        "*",
        _index_of(value_id, plans).alias(PLAN),
        _index_of(key_id, keys).alias("_key_plan"),
        *N.tombstone_columns(),
        *[
            F.when(value_id == plan.schema_id, from_avro(value_body, plan.read_schema, AVRO_OPTIONS)).alias(f"_v{i}")
            for i, plan in enumerate(plans)
        ],
        *[
            F.when(key_id == plan.schema_id, from_avro(key_body, plan.read_schema, AVRO_OPTIONS)).alias(f"_k{i}")
            for i, plan in enumerate(keys)
        ],
    )
    plan_index, key_plan_index = F.col(PLAN), F.col("_key_plan")
    values = [F.col(f"_v{i}") for i in range(len(plans))]
    with_payload = decoded.select(
        *RECORD_COLUMNS,  # not the raw key and value: every column carried is copied into each intermediate row
        PLAN,
        N.TOMBSTONE,
        N.TOMBSTONE_DETAIL,
        *values,
        N.per_plan(plan_index, [_payload(value, plan) for value, plan in zip(values, plans, strict=True)]).alias(
            PAYLOAD
        ),
        # A record from_avro could not read is a struct of nulls: its op, which the schema requires, is null.
        N.per_plan(plan_index, [value["op"].isNotNull() for value in values], F.lit(False)).alias("_value_ok"),
        N.per_plan(
            key_plan_index, [_key_reads(F.col(f"_k{i}"), plan) for i, plan in enumerate(keys)], F.lit(False)
        ).alias("_key_ok"),
        N.per_plan(key_plan_index, [F.array(*[F.lit(name) for name in plan.columns]) for plan in keys])
        .cast("array<string>")
        .alias("_key_columns"),
    )
    images = {
        which: N.per_plan(plan_index, [_image(value, which, plan) for value, plan in zip(values, plans, strict=True)])
        for which in ("after", "before")
    }
    wire_ok = F.col("_value_ok") & F.col("_key_ok")
    plan_list = [plan.plan for plan in plans]
    return change_rows(
        with_payload, pipeline, plan_list, wire_ok, F.col("_key_columns"), images, FORMAT_ID, key_of=counted_key_text
    )


def plans_for(records: DataFrame, schemas, every: int = 1) -> tuple[list[AvroPlan], list[KeyPlan]]:
    """The plans of the input's most frequent value schemas (at most MAX_NATIVE_SCHEMAS) and of the key schemas
    beside them, found in about one record in ``every``. ``schemas``: the pipeline's ``ConfluentSchemas`` (a schema
    id it does not hold has no plan)."""
    value_ids, key_ids = {}, {}
    for value_id, key_id, count in schema_counts(records, every):
        if value_id is not None:
            value_ids[value_id] = value_ids.get(value_id, 0) + count
        if key_id is not None:
            key_ids[key_id] = key_ids.get(key_id, 0) + count

    def planned(counts: dict[int, int], make) -> list:
        found = []
        for schema_id in sorted(counts, key=counts.get, reverse=True)[:MAX_NATIVE_SCHEMAS]:
            text = schemas.schema_text(schema_id)
            plan = make(schema_id, text) if text is not None else None
            if plan is not None:
                found.append(plan)
        return found

    plans = planned(value_ids, avro_plan)
    return plans, planned(key_ids, key_plan) if plans else []
