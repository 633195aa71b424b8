"""Huawei DRS Avro decoded by Spark's ``from_avro``: the native path of ``drs-avro`` (see ``native_json``).

The writer schema comes from the config (the vendor's is not public: ``drs_avro``), so this path reads the records
only when that schema has the shape ``drs_avro`` reads, in types Spark and fastavro read alike (``reading_of``):
``operation`` and ``tableName`` strings, ``seqno`` an int or a long, ``updateTimestamp`` and ``columnCount`` ints or
longs (each may be absent, any may be nullable), ``fields`` an array of records holding only ``name``, a string,
``beforeImages``/``afterImages`` (nullable) arrays whose elements are null or a record holding only ``value``, a
string; any other field a primitive. With any other schema every record is decoded in Python.

Framing, as ``avro_wire.AvroWire`` decides it: natively the single-object values with the writer schema's
fingerprint, the raw values (``framing: raw``, or ``auto`` for a value that starts neither with C3 01 nor, with a
``registry_dir``, with 00) and the Confluent-framed ones read with the configured schema (``framing: confluent``
without a ``registry_dir``). A single-object value of another fingerprint, or a Confluent one whose id names a
registry schema, is Python's.

The records carry neither a key nor types: a plan is one ``tableName`` as the records write it (found in a sample,
``native_json.sampled``) of a configured table with a primary key; its types are the config's (routing puts them on
every row: the images' string values carry none).

Taken natively: the INSERT, INIT, UPDATE and DELETE records (the operation in letters, any case) of a planned table
whose field names are distinct and non-empty (as many as ``columnCount`` says, where it says), whose images hold one
element per field, with the image the operation needs, every key column among the fields with a value, every
configured column's value of its type's form (``native_forms``), an update that keeps its key, and every string of the
record valid UTF-8 (fastavro refuses any other, Java would not); and Kafka tombstones. Everything else -- the control
records (DDL, transactions, heartbeats), unknown operations, a key change (a delete and an update in Python), a
missing image or key value, a value its form does not vouch for, an ``updateTimestamp`` outside years 1-9999 -- goes
through the Python decoder (``drs_avro.record_entries``) unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdcreplay.config import PipelineConfig
from cdcreplay.formats.canal_native import MAX_MILLIS, MIN_MILLIS
from cdcreplay.formats.debezium_avro_native import AVRO_OPTIONS
from cdcreplay.formats.dts_shareplex_native import value_form, values_ok
from cdcreplay.formats.envelopes.drs_record import FORMAT_ID, ROW_OPERATIONS, split_table_name
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.wire import native_json as N
from cdcreplay.formats.wire.avro_wire import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    AvroWire,
    SchemaTypes,
    fingerprint,
    load_schema,
    standalone_schema,
)

# At most this many tables get a plan (the most frequent in the sample): each adds its checks to one generated
# projection, which must stay far below the JVM's 64 KB method limit.
MAX_NATIVE_PLANS = 16
# Avro primitives that Spark and fastavro read alike from the same bytes (a field the path does not use may hold
# any of them; its strings are checked for UTF-8).
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
INTEGERS = frozenset({"int", "long"})
SINGLE_OBJECT_HEADER = len(SINGLE_OBJECT_MAGIC) + 8  # C3 01 and the 8-byte fingerprint
CONFLUENT_HEADER = 5  # 00 and the 4-byte schema id
REST = 2**31 - 1  # substring length: the rest of the value


# --- the writer schema -------------------------------------------------------------------------------------------


class _Shapes(SchemaTypes):
    """Checks of a field's Avro type against the shape the native path reads, named references resolved."""

    def record_of_one_string(self, schema, field: str) -> bool:
        """``schema`` is a record whose only field is ``field``, a string."""
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return False
        fields = schema.get("fields") or []
        return len(fields) == 1 and fields[0].get("name") == field and fields[0].get("type") == "string"

    def array_of(self, schema, nullable_items: bool) -> object | None:
        array, _ = self.nullable(schema)
        if not isinstance(array, dict) or array.get("type") != "array":
            return None
        items, items_nullable = self.nullable(array.get("items"))
        return items if nullable_items or not items_nullable else None

    def field_ok(self, name: str, schema) -> bool:
        """Whether a field the Python decoder reads has a type the native path reads as it does."""
        if name in ("operation", "tableName"):
            return self.nullable(schema)[0] == "string"
        if name in ("seqno", "updateTimestamp", "columnCount"):
            return self.nullable(schema)[0] in INTEGERS
        if name == "fields":  # never null: the Python decoder refuses a record without its list
            return not self.nullable(schema)[1] and self.record_of_one_string(self.array_of(schema, False), "name")
        return self.record_of_one_string(self.array_of(schema, True), "value")  # beforeImages, afterImages

    def primitive(self, schema) -> str | None:
        """The primitive a field the path does not use holds (alone or with null), or None."""
        branch, _ = self.nullable(schema)
        return branch if isinstance(branch, str) and branch in PRIMITIVES else None


# The fields the Python decoder reads; the path needs the first ones, the others may be absent.
REQUIRED_FIELDS = ("operation", "tableName", "fields", "beforeImages", "afterImages")
OPTIONAL_FIELDS = ("seqno", "updateTimestamp", "columnCount")


@dataclass(frozen=True)
class Reading:
    """How the native path reads a pipeline's values: the Record schema as JSON, which optional fields it has, the
    other string fields (checked for UTF-8), and the framing (``AvroWire``'s, with the writer schema's fingerprint)."""

    read_schema: str
    present: frozenset[str]
    other_strings: tuple[str, ...]
    framing: str
    single_object_prefix: bytes
    registry: bool

    def body(self, value: Column) -> Column:
        """The Avro binary of a value the path reads with the writer schema (NULL for a value that is Python's)."""
        first_two = F.substring(value, 1, len(SINGLE_OBJECT_MAGIC))
        single_object = F.substring(value, 1, SINGLE_OBJECT_HEADER) == F.lit(bytearray(self.single_object_prefix))
        after_header = F.substring(value, SINGLE_OBJECT_HEADER + 1, REST)
        if self.framing == "raw":
            return value
        if self.framing == "single-object":
            return F.when(single_object, after_header)
        if self.framing == "confluent":
            confluent = (F.substring(value, 1, 1) == F.lit(bytearray([CONFLUENT_MAGIC]))) & (
                F.octet_length(value) >= CONFLUENT_HEADER
            )
            return F.when(confluent, F.substring(value, CONFLUENT_HEADER + 1, REST))
        # auto: single-object with the writer's fingerprint; any other C3 01 start, and a 00 start where a registry
        # folder makes it Confluent, is Python's; the rest is raw.
        python = first_two == F.lit(bytearray(SINGLE_OBJECT_MAGIC))
        if self.registry:
            python = python | (F.substring(value, 1, 1) == F.lit(bytearray([CONFLUENT_MAGIC])))
        return F.when(single_object, after_header).when(~python, value)


def reading_of(wire: AvroWire) -> Reading | None:
    """The native reading of a pipeline's wire, or None when its writer schema is not of the shape above (or its
    values are Confluent-framed with ids that name registry schemas)."""
    if not wire.writer_schema or (wire.framing == "confluent" and wire.registry_dir):
        return None
    try:
        record = standalone_schema(json.loads(Path(wire.writer_schema).read_text(encoding="utf-8")))
        fields = {field["name"]: field["type"] for field in record["fields"]}
        prefix = SINGLE_OBJECT_MAGIC + fingerprint(load_schema(str(wire.writer_schema)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if record.get("type") != "record":
        return None
    shapes, known = _Shapes(record), (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)
    if any(name not in fields for name in REQUIRED_FIELDS):
        return None
    if not all(shapes.field_ok(name, fields[name]) for name in known if name in fields):
        return None
    others = {name: shapes.primitive(schema) for name, schema in fields.items() if name not in known}
    if None in others.values():
        return None
    return Reading(
        read_schema=json.dumps(record, separators=(",", ":")),
        present=frozenset(fields),
        other_strings=tuple(name for name, kind in others.items() if kind == "string"),
        framing=wire.framing,
        single_object_prefix=prefix,
        registry=bool(wire.registry_dir),
    )


# --- plans -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TablePlan:
    """One ``tableName`` as the records write it: the table it names and the config's key and types of it."""

    table_name: str
    source: tuple[str | None, str | None, str]
    key_columns: tuple[str, ...]
    types: tuple[tuple[str, str], ...]

    @property
    def table_id(self) -> str:
        return table_id_of(*self.source)

    @property
    def forms(self) -> list[tuple[str, str]]:
        """(column, form) of every configured column, and of each key column without a configured type (a string:
        any text without the native path's separators)."""
        typed = dict(self.types)
        return [(name, value_form(spark_type)) for name, spark_type in self.types] + [
            (name, value_form("string")) for name in self.key_columns if name not in typed
        ]


def table_plan(table_name: str, pipeline: PipelineConfig) -> TablePlan | None:
    """The plan of one ``tableName``, or None when its records are left to Python (a name ``split_table_name``
    refuses, a table without a configured key, a configured type without a native form)."""
    try:
        source = split_table_name(table_name)
    except DecodeError:
        return None
    table = pipeline.tables.get(table_id_of(*source))
    if table is None or not table.primary_key:
        return None
    types = tuple(table.column_types.items())
    if any(value_form(spark_type) is None for _, spark_type in types):
        return None
    return TablePlan(table_name, source, tuple(table.primary_key), types)


def _parsed(records: DataFrame, reading: Reading) -> DataFrame:
    """The records with their Record (``_r``: NULL for a value that is Python's, a struct of nulls where
    ``from_avro`` cannot read one) and tombstone columns."""
    record = from_avro(reading.body(F.col("value")), reading.read_schema, AVRO_OPTIONS)
    return records.select("topic", "partition", "offset", "timestamp", *N.tombstone_columns(), record.alias("_r"))


def _row_operation(record: Column) -> Column:
    """The record's operation, upper case, where it is a row operation written in letters (else NULL)."""
    operation = record["operation"]
    upper = F.upper(operation)
    return F.when(operation.rlike("^[A-Za-z]+\\z") & upper.isin(*ROW_OPERATIONS), upper)


def table_plans(records: DataFrame, pipeline: PipelineConfig, reading: Reading, every: int = 1) -> list[TablePlan]:
    """The plans of the table names of the row changes in about one record in ``every``, the most frequent first."""
    record = F.col("_r")
    found = (
        _parsed(N.sampled(records, every), reading)
        .where(_row_operation(record).isNotNull() & record["tableName"].isNotNull())
        .groupBy(record["tableName"].alias("table_name"))
        .count()
        .orderBy(F.desc("count"))
        .collect()
    )
    plans = [plan for plan in (table_plan(row.table_name, pipeline) for row in found) if plan is not None]
    return plans[:MAX_NATIVE_PLANS]


# --- rows --------------------------------------------------------------------------------------------------------


def _strings_ok(record: Column, reading: Reading) -> Column:
    """Every string of the record is valid UTF-8 (the field names, the images' values and the fields the path does
    not use included)."""
    strings = [record["operation"], record["tableName"], record["fields"]["name"]]
    strings += [record[side]["value"] for side in ("beforeImages", "afterImages")]
    strings += [record[name] for name in reading.other_strings]
    return N.all_utf8(*strings)


def _optional(record: Column, reading: Reading, name: str, data_type: str) -> Column:
    return record[name] if name in reading.present else F.lit(None).cast(data_type)


def _image_columns(record: Column, reading: Reading) -> list[Column]:
    """The images as maps by the record's field names (``_after``, ``_before``; built only where ``_shape_ok``
    vouches for the names, since a duplicate name would fail the whole task) and ``_shape_ok``: a planned record of
    distinct, non-empty field names (as many as ``columnCount`` says), each image absent or one value per field."""
    names = record["fields"]["name"]
    width = F.size(names)
    count = _optional(record, reading, "columnCount", "bigint")
    shape_ok = (
        (F.col("_plan") >= 0)
        & (width > 0)
        & (F.size(F.array_distinct(names)) == width)
        & ~F.array_contains(names, "")
        & (count.isNull() | (count == width))
    )
    images = {}
    for alias, side in (("_after", "afterImages"), ("_before", "beforeImages")):
        image = record[side]
        shape_ok = shape_ok & (image.isNull() | (F.size(image) == width))
        images[alias] = image
    shape_ok = F.coalesce(shape_ok, F.lit(False))
    built = [
        F.when(shape_ok & image.isNotNull(), F.map_from_arrays(names, image["value"])).alias(alias)
        for alias, image in images.items()
    ]
    return [*built, shape_ok.alias("_shape_ok")]


def _plan_checks(operation: Column, plan: TablePlan) -> dict[str, Column]:
    """A planned record's key (``key``) and ``_values_ok``: a value in every key column of the image that names the
    row, every configured value of its form, and an update that keeps its key."""
    after, before = F.col("_after"), F.col("_before")
    is_delete = operation == "DELETE"
    # A delete names its row by its before image, every other change by its after image.
    values = [F.when(is_delete, before[name]).otherwise(after[name]) for name in plan.key_columns]
    key = N.key_text_of(values)
    moved = F.lit(False)
    for name in plan.key_columns:
        moved = moved | ~before[name].eqNullSafe(after[name])
    moved = (operation == "UPDATE") & before.isNotNull() & moved
    ok = key.isNotNull() & values_ok(after, plan.forms) & values_ok(before, plan.forms) & ~moved
    return {"key": key, "_values_ok": F.coalesce(ok, F.lit(False))}


def native_rows(records: DataFrame, pipeline: PipelineConfig, reading: Reading, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``), in projections that
    each read the one before: the record and its plan, the images and their shape, the key and the checks, the
    row."""
    record, plan = F.col("_r"), F.col("_plan")
    plan_index = F.lit(-1)
    for index, table_plan_ in reversed(list(enumerate(plans))):
        plan_index = F.when(record["tableName"] == table_plan_.table_name, F.lit(index)).otherwise(plan_index)
    located = _parsed(records, reading).select(
        "*", _row_operation(record).alias("_operation"), F.coalesce(plan_index, F.lit(-1)).alias("_plan")
    )
    imaged = located.select("*", *_image_columns(record, reading))
    operation = F.col("_operation")
    is_delete = operation == "DELETE"
    after, before = F.col("_after"), F.col("_before")
    millis = _optional(record, reading, "updateTimestamp", "bigint")
    seqno = _optional(record, reading, "seqno", "bigint")
    checks = [_plan_checks(operation, p) for p in plans]
    checked = imaged.select(
        "*",
        N.per_plan(plan, [c["key"] for c in checks], F.lit(None).cast("string")).alias("key"),
        N.per_plan(plan, [c["_values_ok"] for c in checks], F.lit(False)).alias("_values_ok"),
    )
    taken = (
        operation.isNotNull()
        & F.col("_shape_ok")
        & F.when(is_delete, before.isNotNull()).otherwise(after.isNotNull())  # the image the operation needs
        & F.col("_values_ok")
        & (millis.isNull() | millis.between(MIN_MILLIS, MAX_MILLIS))
        & _strings_ok(record, reading)
    )
    op = F.lit(None).cast("string")
    for name, row_op in ROW_OPERATIONS.items():
        op = F.when(operation == name, F.lit(row_op)).otherwise(op)

    def of_plan(values: list, data_type: str = "string") -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    change = N.changelog_row(
        FORMAT_ID,
        native=F.coalesce(taken, F.lit(False)),
        table_id=of_plan([F.lit(p.table_id) for p in plans]),
        source_db=of_plan([F.lit(p.source[0]).cast("string") for p in plans]),
        source_schema=of_plan([F.lit(p.source[1]).cast("string") for p in plans]),
        source_table=of_plan([F.lit(p.source[2]) for p in plans]),
        op=op,
        key=F.col("key"),
        key_columns=of_plan([F.array(*[F.lit(c) for c in p.key_columns]) for p in plans], "array<string>"),
        after=F.when(~is_delete, after),
        before=before,
        column_types=of_plan([N.literal_map(dict(p.types)) for p in plans], "map<string,string>"),
        # The record's sequence number is its one order key; none, no position (``drs_avro._order``).
        position=F.when(seqno.isNull(), F.array().cast("array<decimal(38,0)>")).otherwise(
            F.array(seqno.cast("decimal(38,0)"))
        ),
        event_time=F.when(millis.between(MIN_MILLIS, MAX_MILLIS), F.timestamp_millis(millis)),
        row_index=F.lit(0),
    )
    return checked.select(*N.with_tombstones(change))
