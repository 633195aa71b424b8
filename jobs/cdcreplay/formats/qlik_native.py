"""Qlik Replicate JSON decoded by Spark's JSON reader: the native path of ``qlik-json`` (see ``native_json``).

Each record is parsed once with both wires' fields (``MESSAGE_DDL``: the atMSG envelope's ``message`` and a bare data
message's own ``data``/``beforeData``/``headers``), the images as ``map<string,string>``, which keeps an absent column
apart from a null one. A plan is one metadata (MD) message of the archive with a ``schemaId``: the table version's
columns with their ordinals and types, its key, the config's key and types over them. The MD messages are read first,
on the driver, as the Python decoder reads them (``qlik_envelope.collect_metadata``).

Taken natively: the REFRESH, INSERT, UPDATE and DELETE data messages that name a planned schema id (envelope
``messageSchemaId``, else ``headers.externalSchemaId``) whose values all pass their type's native form, whose BYTES
values are hex digits (turned into base64), whose ``columnMask`` is hex bytes (an uncaptured column is left out of the
image, as in Python), whose position and change time read as the Python decoder reads them, whose key has a value in
every key column and that do not move their row to another key; and Kafka tombstones. Everything else is Python's: MD
messages (their control rows), a message without a schema id or with one no MD has, other spellings of an operation,
nested JSON, a number token Spark would render differently, an escape Spark renders differently, a key change, any
value a check refuses.

A REFRESH row has no position of its own: it takes the position of the last change before it in its Kafka partition
(``qlik_envelope._with_refresh_positions``), which the native path finds by the same window over its own records. The
Python decoder, which decodes the records the native path leaves, sees only those; so a REFRESH record left to Python
takes with it the last change the native path decoded before it (:func:`_refresh_positions`).

The Avro wire (``qlik_avro_native``) reads its messages its own way and shares everything from the images on
(:func:`rows_of_messages`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.dts_shareplex_native import COLUMN_SEPARATOR, NULL_MARK, value_form, values_ok
from cdcreplay.formats.envelopes.qlik_envelope import ENVELOPE_MAGIC, OPERATIONS, MetadataIndex, QlikMetadata
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.wire import native_json as N

FORMAT_ID = "qlik-json"
# The plans' columns together (the most frequent table versions in a sample first): each column adds its checks to
# one generated method, which the JVM limits to 64 KB. Measured: 4 table versions of 10 columns compile, 6 do not.
MAX_NATIVE_COLUMNS = 40
HEADERS_DDL = (
    "struct<operation: string, changeSequence: string, timestamp: string, columnMask: string, "
    "transactionEventCounter: string, externalSchemaId: string>"
)
IMAGE_DDL = "map<string,string>"
# The envelope's fields, its ``message`` and a bare data message's own fields, and the two a bare MD message has.
MESSAGE_DDL = (
    "magic string, type string, messageSchemaId string, "
    f"message struct<data: {IMAGE_DDL}, beforeData: {IMAGE_DDL}, headers: {HEADERS_DDL}>, "
    f"data {IMAGE_DDL}, beforeData {IMAGE_DDL}, headers {HEADERS_DDL}, lineage string, tableStructure string"
)
HEX_BYTES = r"^(?:[0-9a-fA-F]{2})*\z"  # what bytes.fromhex reads as written (no blanks between the bytes)
MASK = r"^(?:[0-9a-fA-F]{2})+\z"
# changeSequence as the Python decoder orders it (digits, at most decimal(38,0)); a counter that fits a long.
SEQUENCE = r"^[0-9]{1,38}\z"
COUNTER = r"^-?[0-9]{1,18}\z"
# headers.timestamp as Python's fromisoformat reads it and Spark's cast reads alike: a calendar date of years 1..9999
# and a time of day, no offset but Z.
CHANGE_TIME = (
    r"^(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-[0-9]{2}-[0-9]{2}[T ]"
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?Z?\z"
)
BINARY = "binary"
# What a record is to a REFRESH row after it (``_refresh_positions``): nothing (a REFRESH, an MD message, a tombstone, a
# change without a position), a change whose position the native path knows, or a record left to Python.
_PASSES, _KNOWN, _UNKNOWN = 0, 1, 2


@dataclass(frozen=True)
class TablePlan:
    """One MD message: the schema id data messages name it by, the table, its columns (name, ordinal, the type the
    metadata gives), the metadata's key (what a key change is judged by), the row's key (configured, else the
    metadata's) and the row's column types (the metadata's, the config's over them)."""

    schema_id: str
    schema: str | None
    table: str
    columns: tuple[tuple[str, int, str], ...]
    metadata_keys: tuple[str, ...]
    key_columns: tuple[str, ...]
    types: tuple[tuple[str, str], ...]
    # The JSON wire writes BYTES values as hex digits, which the decoder turns into base64; the Avro wire's bytes
    # arrive as base64 already (``qlik_avro_native``).
    hex_binary: bool = True
    # Columns whose values the wire holds in their type's form already (an Avro int in an int column): not checked.
    held: frozenset[str] = frozenset()

    @property
    def table_id(self) -> str:
        return table_id_of(None, self.schema, self.table)

    @property
    def binary(self) -> list[str]:
        """The columns whose JSON values are hex digits the decoder turns into base64."""
        if not self.hex_binary:
            return []
        return [name for name, _, spark_type in self.columns if spark_type == BINARY]

    @property
    def whole_mask(self) -> str:
        """``columnMask`` with exactly the bits of the plan's columns set, as Replicate writes it (upper-case hex)."""
        bits = sum(1 << (ordinal - 1) for _, ordinal, _ in self.columns)
        width = max(ordinal - 1 for _, ordinal, _ in self.columns) // 8 + 1
        return bits.to_bytes(width, "little").hex().upper()

    @property
    def forms(self) -> list[tuple[str, str]]:
        """(column, form) of the values checked: every typed column but the binary ones and those the wire holds."""
        checked = [(name, t) for name, t in self.types if t not in ("string", BINARY) and name not in self.held]
        return [(name, value_form(t)) for name, t in checked]


def table_plan(md: QlikMetadata, pipeline: PipelineConfig) -> TablePlan | None:
    """The plan of one MD message, or None when the data messages naming it are left to Python."""
    if md.schema_id is None or not md.table or not md.columns:
        return None
    names = [column.name for column in md.columns]
    if any(mark in name for name in names for mark in (COLUMN_SEPARATOR, NULL_MARK, N.NO_ENTRY_KEY)):
        return None
    if any(column.ordinal < 1 for column in md.columns):
        return None  # Python's mask shift fails on it: a quarantine
    declared = md.spark_types
    configured = pipeline.tables.get(table_id_of(None, md.schema, md.table))
    types = {**declared, **(dict(configured.column_types) if configured is not None else {})}
    for name, spark_type in types.items():
        if declared.get(name) == BINARY and spark_type != BINARY:
            return None  # converted to base64 and then checked as another type: Python's
        if spark_type not in ("string", BINARY) and value_form(spark_type) is None:
            return None
        if spark_type == BINARY and declared.get(name) != BINARY:
            return None  # base64 text to check: Python's
    keys = tuple(configured.primary_key) if configured is not None and configured.primary_key else None
    keys = keys or tuple(md.key_columns)
    if not keys:
        return None
    columns = tuple((c.name, c.ordinal, declared[c.name]) for c in md.columns)
    return TablePlan(md.schema_id, md.schema, md.table, columns, tuple(md.key_columns), keys, tuple(types.items()))


def _named_schema_id(message: Column) -> Column:
    """The schema id a data message names: the envelope's ``messageSchemaId`` (when not empty), else
    ``headers.externalSchemaId``."""
    envelope_id = F.when(_is_envelope(message), message["messageSchemaId"])
    return F.when(envelope_id != "", envelope_id).otherwise(_body(message)["headers"]["externalSchemaId"])


def table_plans(index: MetadataIndex, records: DataFrame, pipeline: PipelineConfig, every: int = 1) -> list[TablePlan]:
    """The plans of the archive's MD messages, at most MAX_NATIVE_COLUMNS columns of them: when they have more, those
    the data messages of about one record in ``every`` name most often."""
    plans = [plan for plan in (table_plan(md, pipeline) for md in index.by_id.values()) if plan is not None]

    def named_counts() -> dict[str, int]:
        message = N.parse(N.text_of(F.col("value")), MESSAGE_DDL)
        counts = N.sampled(records, every).groupBy(_named_schema_id(message).alias("id")).count().collect()
        return {row.id: row["count"] for row in counts}

    return within_column_limit(plans, named_counts)


def within_column_limit(plans: list, named_counts: Callable[[], dict[str, int]]) -> list:
    """``plans`` (each with a ``schema_id`` and its ``columns``) whose columns together stay within MAX_NATIVE_COLUMNS:
    all of them when they fit, else those that ``named_counts`` (schema id -> data messages of a sample, asked only
    then) says are named most often first."""
    if sum(len(plan.columns) for plan in plans) > MAX_NATIVE_COLUMNS:
        frequency = named_counts()
        plans = sorted(plans, key=lambda plan: -frequency.get(plan.schema_id, 0))
    chosen, columns = [], 0
    for plan in plans:
        if columns + len(plan.columns) <= MAX_NATIVE_COLUMNS:
            chosen.append(plan)
            columns += len(plan.columns)
    return chosen


# --- per-record expressions ----------------------------------------------------------------------------------------


def _is_envelope(message: Column) -> Column:
    return F.coalesce(message["magic"] == ENVELOPE_MAGIC, F.lit(False))


def _body(message: Column) -> Column:
    """The data message: the envelope's ``message``, or the record itself (a bare data message)."""
    own = F.struct(message["data"].alias("data"), message["beforeData"].alias("beforeData"), message["headers"])
    return F.when(_is_envelope(message), message["message"]).otherwise(own)


def _data_message(message: Column, text: Column) -> Column:
    """The record is a data message to both readers: an envelope of type DT, or a bare message that names no
    metadata field (Python takes a record with ``lineage`` or ``tableStructure`` for metadata, even a null one)."""
    bare = ~text.contains('"lineage"') & ~text.contains('"tableStructure"')
    return F.when(_is_envelope(message), message["type"] == "DT").otherwise(bare)


def _metadata_message(message: Column) -> Column:
    """The record is an MD message to both readers (which never decode a row change from one)."""
    bare = message["lineage"].isNotNull() | message["tableStructure"].isNotNull()
    return F.when(_is_envelope(message), message["type"] == "MD").otherwise(bare)


def _shape(message: Column):
    """The containers' check of ``native_json.with_shape_verdict``: the text holds exactly the objects the parsed
    fields account for and no array (so no value is nested JSON), and every number token reads back as written."""
    body_objects = [message["message"], message["message"]["data"], message["message"]["beforeData"]]
    body_objects += [message["message"]["headers"], message["data"], message["beforeData"], message["headers"]]
    objects = F.lit(1)
    for part in body_objects:
        objects = objects + part.isNotNull().cast("int")

    def checks(text: Column) -> Column:
        return N.containers_accounted_for(text, objects, F.lit(0)) & N.plain_member_numbers(text)

    return checks


def _mask_bytes(mask: Column, plans: list[TablePlan]) -> Column:
    """``columnMask`` as the array of its bytes' values, as many as the widest plan reads (a byte the mask lacks is
    NULL: no column of it was captured)."""
    width = max((ordinal - 1) // 8 + 1 for plan in plans for _, ordinal, _ in plan.columns)
    return F.array(*[F.conv(F.substring(mask, 2 * byte + 1, 2), 16, 10).cast("int") for byte in range(width)])


def _captured(mask: Column, mask_bytes: Column, plan: TablePlan) -> dict[str, Column]:
    """{column: whether ``columnMask`` says it was captured}: bit i of the little-endian hex bytes is ordinal i + 1;
    no mask captures every column."""
    no_mask = mask.isNull() | (mask == "")
    captured = {}
    for name, ordinal, _ in plan.columns:
        byte, bit = divmod(ordinal - 1, 8)
        captured[name] = no_mask | F.coalesce(F.shiftright(mask_bytes[byte], bit) % 2 == 1, F.lit(False))
    return captured


def _uncaptured(mask: Column, mask_bytes: Column, plan: TablePlan) -> Column:
    """The plan's columns ``columnMask`` says were not captured, as an array of names. Most masks are the plan's
    whole mask, every column captured: known by one comparison."""
    captured = _captured(mask, mask_bytes, plan)
    names = [F.when(flag, F.lit(N.NO_ENTRY_KEY)).otherwise(F.lit(name)) for name, flag in captured.items()]
    whole = F.upper(mask) == plan.whole_mask
    return F.when(whole, F.array().cast("array<string>")).otherwise(F.array_remove(F.array(*names), N.NO_ENTRY_KEY))


# The value an uncaptured column is given before its entry is taken out (``_without``): any text does; whatever a
# captured column holds stays, its entry differs by its name.
_DROPPED = "\u0000"


def _without(image: Column, names: Column) -> Column:
    """``image`` without the entries of ``names`` (column names it may or may not hold): their values are set to
    _DROPPED (the session's LAST_WIN map-key policy replaces a value in place) and those entries removed. Plain
    array functions, no lambda, the same expression for every plan."""
    dropped = F.map_from_arrays(names, F.array_repeat(F.lit(_DROPPED), F.size(names)))
    marked = F.map_entries(F.map_concat(image, dropped))
    entries = F.arrays_zip(names, F.array_repeat(F.lit(_DROPPED), F.size(names)))
    removed = entries.cast("array<struct<key: string, value: string>>")
    return F.map_from_entries(F.array_except(marked, removed))


def _binary_image(image: Column, plan: TablePlan, captured: dict[str, Column]) -> tuple[Column, Column]:
    """(the image of a plan with BYTES columns as the Python decoder writes it: their hex digits as base64, the
    uncaptured columns left out; whether the native path can build it: every BYTES value hex -- even an uncaptured
    one, which Python converts too -- and no column beyond the metadata's)."""
    binary = set(plan.binary)

    def value(name: str) -> Column:
        return F.base64(F.unhex(image[name])) if name in binary else image[name]

    names = [name for name, _, _ in plan.columns]
    entries = [(captured[name] & F.map_contains_key(image, name), F.lit(name), value(name)) for name in names]
    known = F.lit(0)
    for name in names:
        known = known + F.map_contains_key(image, name).cast("int")
    ok = F.size(image) == known
    for name in binary:
        ok = ok & (image[name].isNull() | image[name].rlike(HEX_BYTES))
    return F.when(image.isNotNull(), N.map_of_entries(entries)), image.isNull() | ok


def _plan_row(data: Column, before: Column, op: Column, plan: TablePlan) -> dict[str, Column]:
    """The plan's row parts of a data message, from its images: after, before, the key, and whether they are what
    the Python decoder writes (the images the operation needs, every value in its form, no key change)."""
    is_delete = op == S.OP_DELETE
    row = F.when(before.isNotNull(), before).otherwise(data)  # a DELETE's row: beforeData, else data
    # The key of a DELETE is its row's; of any other change the data's, a column it lacks from beforeData.
    key_values = [
        F.when(is_delete, row[name]).when(F.map_contains_key(data, name), data[name]).otherwise(before[name])
        for name in plan.key_columns
    ]
    moved = F.lit(False)
    if plan.metadata_keys:
        named, differs = F.lit(True), F.lit(False)
        for name in plan.metadata_keys:
            named = named & F.map_contains_key(before, name) & F.map_contains_key(data, name)
            differs = differs | ~before[name].eqNullSafe(data[name])
        moved = (op == S.OP_UPDATE) & before.isNotNull() & data.isNotNull() & named & differs
    images = F.when(is_delete, row.isNotNull()).otherwise(data.isNotNull())
    ok = images & values_ok(data, plan.forms) & values_ok(before, plan.forms) & ~F.coalesce(moved, F.lit(False))
    return {
        "after": F.when(~is_delete, data),
        "before": F.when(is_delete, row).otherwise(before),
        "key": N.key_text_of(key_values),
        "ok": F.coalesce(ok, F.lit(False)),
    }


def _position(headers: Column, op: Column) -> tuple[Column, Column]:
    """(the position [changeSequence, transactionEventCounter] -- empty without a sequence, and for REFRESH, which
    takes one later -- whether it reads as in Python). A sequence of "0" is Python's: it tells the text "0", which
    orders, from the number 0, which Python takes for no sequence."""
    sequence, counter = headers["changeSequence"], headers["transactionEventCounter"]
    no_sequence = sequence.isNull() | (sequence == "")
    counter_ok = counter.isNull() | counter.rlike(COUNTER)
    sequence_ok = no_sequence | (sequence.rlike(SEQUENCE) & (sequence != "0"))
    parts = F.array(sequence.try_cast("decimal(38,0)"), F.coalesce(counter.try_cast("decimal(38,0)"), F.lit(0)))
    empty = F.array().cast("array<decimal(38,0)>")
    refresh = op == S.OP_SNAPSHOT
    position = F.when(refresh | no_sequence, empty).otherwise(parts.cast("array<decimal(38,0)>"))
    return position, refresh | (sequence_ok & counter_ok)


def _change_time(headers: Column) -> tuple[Column, Column]:
    """(``headers.timestamp`` as UTC, else the record's time; whether it reads as in Python: empty, or a time of
    ``CHANGE_TIME``)."""
    stamp = headers["timestamp"]
    empty = stamp.isNull() | (stamp == "")
    read = F.when(stamp.rlike(CHANGE_TIME), F.regexp_replace(stamp, "Z$", "").try_cast("timestamp"))
    return F.when(empty, F.col("timestamp")).otherwise(read), empty | read.isNotNull()


def native_rows(records: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``)."""
    return rows_of_messages(_fields(records, plans), plans, FORMAT_ID)


def rows_of_messages(fields: DataFrame, plans: list[TablePlan], format_id: str) -> DataFrame:
    """The rows of the records as either wire's reader gives their messages (``fields``: the columns ``_fields``
    makes). Built in steps, each a projection over the last one's columns, so that no expression is copied into every
    place that reads it."""
    return _rows(_refresh_positions(_checked(_images(fields, plans), plans)), plans, format_id)


def row_op(operation: Column) -> Column:
    """The changelog op of ``headers.operation`` spelled as Replicate writes it (NULL for any other spelling)."""
    op = F.lit(None).cast("string")
    for name, value in OPERATIONS.items():
        op = F.when(operation == name, F.lit(value)).otherwise(op)
    return op


def _fields(records: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """The records with what their message says: plan index (-1: none), op, whether both readers read it alike as a
    data message (``_readable``), a REFRESH (``_refresh``: NULL where the native path cannot tell, a record the Python
    decoder may find one in) or an MD message, its images as parsed (``_data_in``, ``_before_in``: map<string,string>)
    and its headers (``_headers``: HEADERS_DDL)."""
    text = N.text_of(F.col("value"))
    located = records.select(*N.CARRIED[:4], text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), MESSAGE_DDL).alias("_m"))
    message = F.col("_m")
    shaped = N.with_shape_verdict(parsed, _shape(message), F.col("_text"))
    # The body's parts once, in a projection of their own: the next reads them several times.
    body = _body(message)
    is_data = F.coalesce(_data_message(message, F.col("_text")) & message[N.CORRUPT_FIELD].isNull(), F.lit(False))
    parts = shaped.select(
        *N.CARRIED,
        body["data"].alias("_data_in"),
        body["beforeData"].alias("_before_in"),
        body["headers"].alias("_headers"),
        _named_schema_id(message).alias("_named"),
        is_data.alias("_is_data"),
        (F.col(N.SHAPED) & N.plain_escapes(F.col("_text"))).alias("_plain"),
        F.coalesce(message[N.CORRUPT_FIELD].isNull() & _metadata_message(message), F.lit(False)).alias("_metadata"),
    )
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plans))):
        plan_index = F.when(F.col("_named") == plan.schema_id, F.lit(index)).otherwise(plan_index)
    operation = F.col("_headers")["operation"]
    is_data = F.col("_is_data")
    return parts.select(
        *N.CARRIED,
        F.coalesce(plan_index, F.lit(-1)).alias("_plan"),
        row_op(operation).alias("_op"),
        (is_data & F.col("_plain")).alias("_readable"),
        F.coalesce(is_data & (operation == "REFRESH"), F.lit(False)).alias("_refresh"),
        "_metadata",
        "_data_in",
        "_before_in",
        "_headers",
    )


def _images(fields: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """``fields`` with the images as the Python decoder writes them (``_data``, ``_before_data``) and whether the
    native path can (``_images_ok``). Most plans have no BYTES column: their images lose the uncaptured columns by
    one expression for all of them (``_without``); a plan with one rebuilds its images column by column."""
    plan = F.col("_plan")
    mask = F.col("_headers")["columnMask"]
    masked = fields.select("*", _mask_bytes(mask, plans).alias("_mask_bytes"))
    uncaptured = [_uncaptured(mask, F.col("_mask_bytes"), p) for p in plans]
    empty = F.array().cast("array<string>")
    masked = masked.select("*", F.coalesce(N.per_plan(plan, uncaptured), empty).alias("_uncaptured"))
    drop = F.col("_uncaptured")
    mask_ok = mask.isNull() | (mask == "") | mask.rlike(MASK)
    images, oks = {}, {}
    for side, column in (("_data", "_data_in"), ("_before_data", "_before_in")):
        image = F.col(column)
        images[side] = F.when(image.isNotNull() & (F.size(drop) > 0), _without(image, drop)).otherwise(image)
        oks[side] = F.lit(True)
        for index, p in enumerate(plans):
            if p.binary:
                built, ok = _binary_image(image, p, _captured(mask, F.col("_mask_bytes"), p))
                images[side] = F.when(plan == index, built).otherwise(images[side])
                oks[side] = F.when(plan == index, ok).otherwise(oks[side])
    dropped = ("_data_in", "_before_in", "_mask_bytes", "_uncaptured")
    return masked.select(
        *[c for c in masked.columns if c not in dropped],
        images["_data"].alias("_data"),
        images["_before_data"].alias("_before_data"),
        F.coalesce(mask_ok & oks["_data"] & oks["_before_data"], F.lit(False)).alias("_images_ok"),
    )


def _checked(imaged: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """The row's parts of each record, and whether the native path vouches for them (``_vouched``)."""
    plan, op = F.col("_plan"), F.col("_op")
    parts = [_plan_row(F.col("_data"), F.col("_before_data"), op, p) for p in plans]
    position, position_ok = _position(F.col("_headers"), op)
    event_time, time_ok = _change_time(F.col("_headers"))
    plan_ok = N.per_plan(plan, [p["ok"] for p in parts])
    row_ok = F.col("_readable") & (plan >= 0) & op.isNotNull() & position_ok & time_ok & F.col("_images_ok") & plan_ok
    key = N.per_plan(plan, [p["key"] for p in parts])
    return imaged.select(
        *N.CARRIED,
        "_plan",
        "_op",
        "_refresh",
        "_metadata",
        N.per_plan(plan, [p["after"] for p in parts]).alias("_after"),
        N.per_plan(plan, [p["before"] for p in parts]).alias("_before"),
        key.alias("_key"),
        position.alias("position"),
        event_time.alias("event_time"),
        F.coalesce(row_ok & key.isNotNull(), F.lit(False)).alias("_vouched"),
    )


def _refresh_positions(checked: DataFrame) -> DataFrame:
    """The natively decoded REFRESH rows with the position of the last change before them in their Kafka partition,
    as ``qlik_envelope._with_refresh_positions`` gives them; and the records the Python decoder needs to do the same
    for the REFRESH records it is left.

    Records that never decode to a change with a position (REFRESH, MD, tombstones, changes without a sequence)
    pass; a natively decoded change with one is known; any other record is left to Python, which may or may not
    decode such a change from it. A REFRESH after a known change takes its position; after a record left to Python
    it is left to Python too. And the last known change before a REFRESH left to Python goes to Python with it: the
    Python decoder then sees every change that can precede the REFRESH, so that it finds the same one. A record whose
    kind the native path cannot tell (``_refresh`` NULL: a message of the Avro wire it cannot read) counts as a
    REFRESH left to Python."""
    refresh = F.coalesce(F.col("_refresh"), F.lit(False))
    passes = F.col(N.TOMBSTONE) | refresh | F.col("_metadata")
    passes = passes | (F.col("_vouched") & (F.col("_op") != S.OP_SNAPSHOT) & (F.size("position") == 0))
    role = F.when(passes, _PASSES).when(F.col("_vouched"), _KNOWN).otherwise(_UNKNOWN)
    # Both frames grow from the partition's start (in offset order, then in reverse): a frame that runs to the
    # partition's end is evaluated again for every row, quadratic in a partition of a million records.
    partition = Window.partitionBy("topic", "partition")
    earlier = partition.orderBy("offset").rowsBetween(Window.unboundedPreceding, -1)
    later = partition.orderBy(F.desc("offset")).rowsBetween(Window.unboundedPreceding, -1)
    with_role = checked.select("*", role.alias("_role"))
    governing = F.when(F.col("_role") != _PASSES, F.struct(F.col("_role").alias("role"), "position"))
    previous = with_role.select(
        "*",
        F.last(governing, ignorenulls=True).over(earlier).alias("_previous"),
    )
    refresh = F.col("_vouched") & (F.col("_op") == S.OP_SNAPSHOT)
    after_unknown = F.coalesce(F.col("_previous")["role"] == _UNKNOWN, F.lit(False))
    placed = previous.select(
        *[c for c in previous.columns if c not in ("_vouched", "position", "_previous")],
        F.when(refresh & after_unknown, F.lit(False)).otherwise(F.col("_vouched")).alias("_vouched"),
        F.when(refresh, F.coalesce(F.col("_previous")["position"], F.col("position")))
        .otherwise(F.col("position"))
        .alias("position"),
    )
    # A REFRESH the Python decoder gets, or a record it may find one in.
    left = F.coalesce(F.col("_refresh"), ~F.col(N.TOMBSTONE)) & ~F.col("_vouched")
    next_known = F.last(F.when(F.col("_role") == _KNOWN, F.col("offset")), ignorenulls=True).over(later)
    next_left = F.last(F.when(left, F.col("offset")), ignorenulls=True).over(later)
    goes_along = (F.col("_role") == _KNOWN) & next_left.isNotNull() & (next_known.isNull() | (next_left < next_known))
    return placed.withColumn("_vouched", F.col("_vouched") & ~F.coalesce(goes_along, F.lit(False)))


def _rows(checked: DataFrame, plans: list[TablePlan], format_id: str) -> DataFrame:
    """The changelog row of each record and its native flag."""
    plan = F.col("_plan")

    def of_plan(values: list[Column], data_type: str) -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    row = N.changelog_row(
        format_id,
        native=F.col("_vouched"),
        table_id=of_plan([F.lit(p.table_id) for p in plans], "string"),
        source_db=F.lit(None).cast("string"),
        source_schema=of_plan([F.lit(p.schema).cast("string") for p in plans], "string"),
        source_table=of_plan([F.lit(p.table) for p in plans], "string"),
        op=F.col("_op"),
        key=F.col("_key"),
        key_columns=of_plan([F.array(*[F.lit(c) for c in p.key_columns]) for p in plans], "array<string>"),
        after=F.col("_after"),
        before=F.col("_before"),
        column_types=of_plan([N.literal_map(dict(p.types)) for p in plans], "map<string,string>"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.lit(0),
    )
    return checked.select(*N.with_tombstones(row))
