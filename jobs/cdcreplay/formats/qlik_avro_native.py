"""Qlik Replicate Avro decoded by Spark's ``from_avro``: the native path of ``qlik-avro`` (see ``native_json``).

The atMSG envelope has one schema (``qlik_envelope.ENVELOPE_SCHEMA``), so ``from_avro`` reads every value that starts
with its magic. A data (DT) envelope's ``message`` is the Avro binary of ``DataRecord{data, beforeData, headers}``,
written with the ``dataSchema`` of the MD message the envelope names by ``messageSchemaId``, or with the schema it
embeds in ``messageSchema``. A plan is one MD message of the archive, as for Qlik JSON (``qlik_native.table_plan``:
the columns' ordinals and types, the metadata's key, the config's key and types over them), whose ``dataSchema`` has
the shape this path reads (``avro_plan``); its records are read with that schema, the logical types stripped, so that
every value arrives as the primitive Avro wrote and is rendered here as the Python decoder writes it
(``qlik_envelope.avro_text``). From the images and headers on, both wires share one way to the rows
(``qlik_native.rows_of_messages``): column masks, key, key changes, position, change time and the REFRESH rows'
positions.

Which records are taken natively: DT envelopes that name a planned schema id without embedding a schema, or that
embed exactly the text of a planned MD's ``dataSchema`` (when no other MD of the archive has that schema, so the
Python decoder finds the same metadata); whose strings are all valid UTF-8 (fastavro refuses a record with any other,
Java would not), whose values render exactly (``_rendered``), whose ``columnMask`` is not empty bytes (Python reads
those as "nothing captured"); and then whatever the JSON wire's rules take (``qlik_native``). Everything else goes
through the Python decoder unchanged: MD messages, Confluent-framed DataRecords (their schemas come from a registry,
and their metadata by ``externalSchemaId``), schema ids without a plan, values ``from_avro`` cannot read, and every
record the JSON wire's rules leave to Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import qlik_native
from cdcreplay.formats.debezium_avro_native import AVRO_OPTIONS, as_python_writes
from cdcreplay.formats.debezium_native import date_of_days, decimal_of_hex, timestamp_of_micros
from cdcreplay.formats.envelopes.qlik_envelope import ENVELOPE_MAGIC, ENVELOPE_SCHEMA, MetadataIndex, QlikMetadata
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.values.debezium_values import MAX_MICROS
from cdcreplay.formats.wire import native_json as N
from cdcreplay.formats.wire.avro_wire import SchemaTypes, canonical_form, read_as_written

FORMAT_ID = "qlik-avro"
MAGIC = ENVELOPE_MAGIC.encode("ascii")
ENVELOPE_READ_SCHEMA = json.dumps(ENVELOPE_SCHEMA, separators=(",", ":"))
# Microseconds of 1000-01-01: Python's strftime writes an earlier year without its leading zeros ("999-..."), Spark's
# pattern with them, so an earlier time is the Python decoder's.
YEAR_1000_MICROS = -30610224000000000
# Logical types of a long or an int that the path renders (as avro_text does a datetime), by microseconds per unit.
TIMESTAMP_UNITS = {
    "timestamp-micros": 1,
    "local-timestamp-micros": 1,
    "timestamp-millis": 1000,
    "local-timestamp-millis": 1000,
}
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# The header fields the Python decoder reads, and the Avro kinds in which the path reads them as it does.
HEADER_KINDS = {
    "operation": ("string", "enum"),
    "changeSequence": ("string",),
    "timestamp": ("string",),
    "columnMask": ("bytes", "string"),
    "transactionEventCounter": ("int", "long"),
    "externalSchemaId": ("string",),
}
# A columnMask of no bytes, as text: no mask reads it (the Python decoder takes it for "nothing captured").
EMPTY_MASK = "-"
# Spark types whose form a value of the Avro kind always has (its check is left out).
HELD_BY = {"int": ("int", "bigint"), "long": ("bigint",), "boolean": ("boolean",), "date": ("date",)}


@dataclass(frozen=True)
class AvroColumn:
    """One field of the data record: its name, Avro kind (``int``... ``enum``, ``fixed``), logical type and, for a
    decimal, precision and scale."""

    name: str
    kind: str
    logical: str | None = None
    precision: int = 0
    scale: int = 0

    def holds(self, spark_type: str | None) -> bool:
        """Whether every value of this field has the form of ``spark_type`` already (its check is left out)."""
        if self.logical == "decimal":
            return spark_type == f"decimal({self.precision},{self.scale})"  # decimal_of_hex vouches for the digits
        return spark_type in HELD_BY.get(self.logical or self.kind, ())


@dataclass(frozen=True)
class AvroPlan:
    """One MD message whose data schema the path reads: the JSON wire's plan of it, the schema ``from_avro`` reads its
    messages with, the text an envelope may embed instead of naming it, the data record's fields, the header fields
    the schema has (name, kind) and its other string fields (checked for UTF-8)."""

    plan: qlik_native.TablePlan
    read_schema: str
    embedded_schema: str | None
    columns: tuple[AvroColumn, ...]
    headers: tuple[tuple[str, str], ...]
    other_strings: tuple[str, ...]
    has_before: bool

    @property
    def schema_id(self) -> str:
        return self.plan.schema_id


# --- the data schema ------------------------------------------------------------------------------------------------


class _Schema(SchemaTypes):
    """A data schema's types as the path reads them."""

    def kind(self, schema) -> tuple[str, dict] | None:
        """(Avro kind, the type's own properties) of a primitive, enum or fixed type (alone or with null)."""
        branch, _ = self.nullable(schema)
        if isinstance(branch, str):
            return (branch, {}) if branch in PRIMITIVES else None
        if not isinstance(branch, dict):
            return None
        kind = branch.get("type")
        if kind in ("enum", "fixed"):
            return kind, branch
        return (kind, branch) if kind in PRIMITIVES else None

    def column(self, name: str, schema) -> AvroColumn | None:
        """The field as a column the path renders, or None (a time of day, a uuid, a nested type...: Python's)."""
        found = self.kind(schema)
        if found is None:
            return None
        kind, props = found
        logical = props.get("logicalType")
        if logical is None:
            return AvroColumn(name, kind)
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = props.get("precision"), props.get("scale", 0)
            if not isinstance(precision, int) or not isinstance(scale, int) or not 0 <= scale <= precision <= 38:
                return None
            return AvroColumn(name, kind, logical, precision, scale)
        if (logical == "date" and kind == "int") or (logical in TIMESTAMP_UNITS and kind == "long"):
            return AvroColumn(name, kind, logical)
        return None

    def record(self, schema) -> tuple[dict | None, bool]:
        branch, nullable = self.nullable(schema)
        return (branch if isinstance(branch, dict) and branch.get("type") == "record" else None), nullable


def _canonical(text: str) -> str | None:
    """The canonical form of a schema text, None when it is no schema (the Python decoder quarantines what names it)."""
    try:
        return canonical_form(text)
    except DecodeError:
        return None


def _embeddable(md: QlikMetadata, index: MetadataIndex) -> str | None:
    """The text an envelope may embed for its messages to be this MD's: its ``dataSchema``, when the Python decoder
    finds this MD by it (``index.by_data_schema``) and no other MD of the archive has the same schema."""
    canonical = _canonical(md.data_schema)
    same = [other for other in index.by_id.values() if other.data_schema and _canonical(other.data_schema) == canonical]
    return md.data_schema if index.by_data_schema.get(canonical) is md and same == [md] else None


def avro_plan(md: QlikMetadata, pipeline: PipelineConfig, index: MetadataIndex) -> AvroPlan | None:
    """The plan of one MD message, or None when its data messages are left to Python: no JSON-wire plan, no readable
    ``dataSchema``, or one of another shape than DataRecord{data: a record of columns the path renders, beforeData:
    null or the same record, headers: a record whose fields the Python decoder reads are of HEADER_KINDS and whose
    others are primitives}."""
    plan = qlik_native.table_plan(md, pipeline)
    if plan is None or not md.schema_id or not md.data_schema or _canonical(md.data_schema) is None:
        return None
    schema = json.loads(md.data_schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    shapes = _Schema(schema)
    fields = {field.get("name"): field.get("type") for field in schema.get("fields", ())}
    data, _ = shapes.record(fields.get("data"))
    headers, headers_nullable = shapes.record(fields.get("headers"))
    # A required headers record tells a message from_avro read from one it could not (a struct of nulls).
    if data is None or headers is None or headers_nullable:
        return None
    if "beforeData" in fields:
        before, _ = shapes.record(fields["beforeData"])
        if before is None or before.get("name") != data.get("name"):
            return None
    columns = [shapes.column(field.get("name"), field.get("type")) for field in data.get("fields", ())]
    if any(column is None for column in columns):
        return None
    declared = {name: spark_type for name, _, spark_type in plan.columns}
    for column in columns:
        binary = column.kind in ("bytes", "fixed") and column.logical is None
        if (declared.get(column.name) == qlik_native.BINARY) != binary and column.name in declared:
            return None  # BYTES as text, or bytes in a column of another type: Python's
    header_kinds, other_strings = [], []
    for field in headers.get("fields", ()):
        found = shapes.kind(field.get("type"))
        name = field.get("name")
        if name in HEADER_KINDS:
            if found is None or found[0] not in HEADER_KINDS[name]:
                return None
            header_kinds.append((name, found[0]))
        elif found is None:
            return None
        elif found[0] in ("string", "enum"):
            other_strings.append(name)
    types = dict(plan.types)
    held = frozenset(column.name for column in columns if column.holds(types.get(column.name)))
    return AvroPlan(
        plan=replace(plan, hex_binary=False, held=held),
        read_schema=read_as_written(schema),
        embedded_schema=_embeddable(md, index),
        columns=tuple(columns),
        headers=tuple(header_kinds),
        other_strings=tuple(other_strings),
        has_before="beforeData" in fields,
    )


def table_plans(index: MetadataIndex, records: DataFrame, pipeline: PipelineConfig, every: int = 1) -> list[AvroPlan]:
    """The plans of the archive's MD messages, at most ``qlik_native.MAX_NATIVE_COLUMNS`` columns of them: when they
    have more, those the data envelopes of about one record in ``every`` name most often (by ``messageSchemaId``)."""
    plans = [plan for plan in (avro_plan(md, pipeline, index) for md in index.by_id.values()) if plan is not None]

    def named_counts() -> dict[str, int]:
        envelope = F.col("_e")
        named = N.sampled(records, every).select(_envelope(F.col("value")).alias("_e"))
        counts = named.groupBy(envelope["messageSchemaId"].alias("id")).count().collect()
        return {row.id: row["count"] for row in counts}

    return qlik_native.within_column_limit(plans, named_counts)


# --- values ---------------------------------------------------------------------------------------------------------


def _timestamp(count: Column, per_unit: int) -> tuple[Column, Column]:
    """A timestamp's count of its unit -> (the Python decoder's text, whether the path vouches for it)."""
    in_range = count.between(YEAR_1000_MICROS // per_unit, MAX_MICROS // per_unit)
    text, ok = timestamp_of_micros(F.when(in_range, count.cast("bigint") * per_unit))
    return text, in_range & ok


def _rendered(value: Column, column: AvroColumn) -> tuple[Column, Column | None]:
    """(the text ``avro_text`` writes for a present value, whether the path vouches for it; None: always)."""
    if column.logical == "decimal":
        return decimal_of_hex(F.hex(value), column.precision, column.scale)
    if column.logical == "date":
        return date_of_days(value)
    if column.logical in TIMESTAMP_UNITS:
        return _timestamp(value, TIMESTAMP_UNITS[column.logical])
    if column.kind in ("string", "enum"):
        return value, F.is_valid_utf8(value)
    if column.kind in ("bytes", "fixed"):
        return F.base64(value), None
    if column.kind == "boolean":
        return N.raw_boolean_text(value), None
    if column.kind in ("float", "double"):
        text = value.cast("double").cast("string")  # fastavro reads a float into a Python float
        return text, as_python_writes(text)
    return value.cast("string"), None  # int, long: Python's str()


def _image(image: Column, columns: tuple[AvroColumn, ...]) -> tuple[Column, Column]:
    """(the image as map<string,string> of rendered values, whether the path vouches for every one of them)."""
    texts, vouched = [], F.lit(True)
    for column in columns:
        value = image[column.name]
        text, ok = _rendered(value, column)
        texts.append(F.when(value.isNotNull(), text))
        if ok is not None:
            vouched = vouched & (value.isNull() | F.coalesce(ok, F.lit(False)))
    names = F.array(*[F.lit(column.name) for column in columns])
    return F.when(image.isNotNull(), F.map_from_arrays(names, F.array(*texts))), image.isNull() | vouched


def _headers(headers: Column, plan: AvroPlan) -> Column:
    """The headers as the JSON wire's reader gives them (``qlik_native.HEADERS_DDL``: every field text)."""
    kinds = dict(plan.headers)

    def text(name: str) -> Column:
        if name not in kinds:
            return F.lit(None).cast("string")
        value = headers[name]
        if name == "columnMask" and kinds[name] == "bytes":
            return F.when(F.octet_length(value) > 0, F.hex(value)).when(value.isNotNull(), F.lit(EMPTY_MASK))
        return value.cast("string")

    names = ("operation", "changeSequence", "timestamp", "columnMask", "transactionEventCounter", "externalSchemaId")
    return F.struct(*[text(name).alias(name) for name in names])


def _strings(envelope: Column, body: Column, plan: AvroPlan) -> list[Column]:
    """Every string the Python decoder reads of a planned message: the envelope's and the data record's."""
    strings = [envelope["type"], envelope["messageSchemaId"], envelope["messageSchema"]]
    strings += [F.map_keys(envelope["headers"]), F.map_values(envelope["headers"])]
    strings += [body["headers"][name] for name, kind in plan.headers if kind in ("string", "enum")]
    strings += [body["headers"][name] for name in plan.other_strings]
    return strings


# --- records --------------------------------------------------------------------------------------------------------


def _envelope(value: Column) -> Column:
    """The atMSG envelope of a value that starts with its magic (NULL for any other; a struct of nulls where
    ``from_avro`` cannot read one)."""
    enveloped = F.substring(value, 1, len(MAGIC)) == F.lit(bytearray(MAGIC))
    return from_avro(F.when(enveloped, value), ENVELOPE_READ_SCHEMA, AVRO_OPTIONS)


def _plan_index(envelope: Column, plans: list[AvroPlan]) -> Column:
    """The plan of a data envelope (-1: none): by its embedded schema's text when it embeds one (the Python decoder
    then reads the message with it), else by the schema id it names."""
    embedded = envelope["messageSchema"]
    embeds = F.coalesce(embedded != "", F.lit(False))
    index = F.lit(-1)
    for position, avro in reversed(list(enumerate(plans))):
        if avro.embedded_schema is None:
            chosen = ~embeds & (envelope["messageSchemaId"] == avro.schema_id)
        else:
            chosen = F.when(embeds, embedded == avro.embedded_schema).otherwise(
                envelope["messageSchemaId"] == avro.schema_id
            )
        index = F.when(F.coalesce(chosen, F.lit(False)), F.lit(position)).otherwise(index)
    return index


def _fields(records: DataFrame, plans: list[AvroPlan]) -> DataFrame:
    """The columns ``qlik_native.rows_of_messages`` reads (see ``qlik_native._fields``), in three projections: the
    envelope and its plan; each plan's DataRecord (one ``from_avro`` per record, in its plan's column); the images
    and headers rendered as text."""
    envelope = F.col("_e")
    located = records.select(*N.CARRIED[:4], *N.tombstone_columns(), _envelope(F.col("value")).alias("_e"))
    kind = F.upper(envelope["type"])
    read = envelope["magic"].isNotNull() & (envelope["magic"] == F.lit(bytearray(MAGIC)))
    planned = located.select(
        *N.CARRIED,
        "_e",
        F.coalesce(read & (kind == "DT"), F.lit(False)).alias("_is_data"),
        F.coalesce(read & (kind == "MD"), F.lit(False)).alias("_metadata"),
        F.coalesce(read & (kind != "DT"), F.lit(False)).alias("_not_data"),
        _plan_index(envelope, plans).alias("_plan"),
    )
    plan = F.col("_plan")
    bodies = planned.select(
        "*",
        *[
            F.when(plan == index, from_avro(envelope["message"], avro.read_schema, AVRO_OPTIONS)).alias(f"_b{index}")
            for index, avro in enumerate(plans)
        ],
    )
    data, before, headers, reads, oks = [], [], [], [], []
    no_image = F.lit(None).cast(qlik_native.IMAGE_DDL)
    for index, avro in enumerate(plans):
        body = F.col(f"_b{index}")
        data_image, data_ok = _image(body["data"], avro.columns)
        before_image, before_ok = (
            _image(body["beforeData"], avro.columns) if avro.has_before else (no_image, F.lit(True))
        )
        data.append(data_image)
        before.append(before_image)
        headers.append(_headers(body["headers"], avro))
        reads.append(body["headers"].isNotNull())  # a required record: NULL only where from_avro could not read
        oks.append(data_ok & before_ok & N.all_utf8(*_strings(envelope, body, avro)))
    columns = {
        "_data_in": N.per_plan(plan, data, no_image),
        "_before_in": N.per_plan(plan, before, no_image),
        "_headers": N.per_plan(plan, headers, F.lit(None).cast(qlik_native.HEADERS_DDL)),
        "_read": N.per_plan(plan, reads, F.lit(False)),
        "_ok": N.per_plan(plan, oks, F.lit(False)),
    }
    kept = ("_plan", "_is_data", "_metadata", "_not_data")
    rendered = bodies.select(*N.CARRIED, *kept, *[c.alias(n) for n, c in columns.items()])
    operation = F.col("_headers")["operation"]
    read = F.col("_is_data") & F.coalesce(F.col("_read"), F.lit(False))
    # Known: a REFRESH or not, where the message was read, or its envelope is of another type than DT (an MD message,
    # or one the Python decoder quarantines); else NULL: an unplanned or unread message may be one.
    refresh = F.when(F.col("_not_data") | F.col(N.TOMBSTONE), F.lit(False)).when(
        read, F.coalesce(operation == "REFRESH", F.lit(False))
    )
    return rendered.select(
        *N.CARRIED,
        "_plan",
        qlik_native.row_op(operation).alias("_op"),
        (read & F.coalesce(F.col("_ok"), F.lit(False))).alias("_readable"),
        refresh.alias("_refresh"),
        "_metadata",
        "_data_in",
        "_before_in",
        "_headers",
    )


def native_rows(records: DataFrame, plans: list[AvroPlan]) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``)."""
    return qlik_native.rows_of_messages(_fields(records, plans), [avro.plan for avro in plans], FORMAT_ID)
