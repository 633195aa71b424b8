"""DataWorks JSON decoded by Spark's JSON reader: the native path of ``dataworks-json`` (see ``native_json``).

Each message is parsed once with the schema the Python decoder reads it with (``MESSAGE_DDL``:
``from_json_in_python`` is Spark's reading kept in Python), so both paths see the same fields and refuse the same
messages; the images are ``map<string,string>``, which keeps an absent column apart from a null one.

A plan is one table version: the table as ``schema.source`` names it and its ``schema.dataColumn`` as written (names
and DataWorks types), found in a sample of the records (``native_json.sampled``). It knows the row's column types (the
declared ones, the config's ``column_types`` over them), the configured key, and which values to check and convert.

Taken natively: INSERT, DELETE and UPDATE_AFTER messages of a planned table version whose values all pass their type's
native form (``dts_shareplex_native.value_form``: nothing a configured type would round), whose DATE values (epoch
milliseconds) are plain integers of years 1..9999 (turned into the wall clock of ``options.time_zone``, when it is UTC
or an offset: a region's rules are Python's ``zoneinfo``, whose data may differ from Java's), whose sequenceId is
digits, whose key has a value in every key column and that do not move their row to another key; an UPDATE_BEFOR
whose UPDATE_AFTER is among the records (its control row); and the transaction messages (control rows). The update
pairs are found as the Python decoder finds them (``dataworks_json._with_partners``), by a window over the records
that may be update messages alone, and a pair is taken only whole: the Python decoder then pairs the halves of every
pair it is left. A text that does not open an object, escapes a character Spark renders differently
(``native_json.plain_escapes``) or is not UTF-8 is Python's, and so is everything else: TRUNCATE, DDL, heartbeats, an
INSERT that carries a before image or a DELETE an after image, an update that moves its row, and any row a check
refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import DECODED_DDL, KIND_CONTROL
from cdcreplay.formats.debezium_native import MAX_KEY_COLUMNS, counted_key_text
from cdcreplay.formats.dts_shareplex_native import COLUMN_SEPARATOR, NULL_MARK, value_form, values_ok
from cdcreplay.formats.envelopes.dataworks_message import (
    AFTER_OP,
    BEFORE_OP,
    FORMAT_ID,
    MESSAGE_DDL,
    OFFSET_ZONE,
    ROW_ID,
    TRANSACTION_OPS,
    declared_type,
)
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.values.native_forms import ANY_TEXT
from cdcreplay.formats.wire import native_json as N

# At most this many table versions get a plan (the most frequent in the sample): each adds its checks to one
# generated projection, which must stay far below the JVM's 64 KB method limit.
MAX_NATIVE_PLANS = 16
DATE = "timestamp_ntz"  # what a DataWorks DATE is declared as
# A DATE value the native path converts: epoch milliseconds as plain digits, 14 hours inside years 1..9999 (so that
# any offset keeps the wall clock there).
MILLIS = r"^-?[0-9]{1,15}\z"
FIRST_MILLIS, LAST_MILLIS = -62135596800000 + 14 * 3600_000, 253402300799999 - 14 * 3600_000
SEQUENCE = r"^[0-9]{1,38}\z"  # a sequenceId whose try_cast to decimal(38,0) is its plain value, as in Python
PLANNED_OPS = ("INSERT", "DELETE", AFTER_OP, BEFORE_OP)  # the messages a plan is found for
_PAIRED = "_pair_member"  # the record is an update message of a pair: op and sequenceId set
# A pair: its topic, table and sequenceId; a record that is no member is a group of its own (its coordinates).
_GROUP = ("topic", "_group_table", "_group_sequence", "_group_partition", "_group_offset")


@dataclass(frozen=True)
class TablePlan:
    """One table version: its identity and ``schema.dataColumn`` as the message writes them, its row's column types
    (declared, then configured), its configured key (None: the message's) and its DATE columns with whether the
    config makes each a date."""

    source: tuple[str | None, str | None, str]
    data_columns: tuple[tuple[str, str | None], ...]
    types: tuple[tuple[str, str], ...]
    key_columns: tuple[str, ...] | None
    dates: tuple[tuple[str, bool], ...]
    configured: tuple[tuple[str, str], ...]  # the config's column types alone (what a control row of the table holds)

    @property
    def table_id(self) -> str:
        return table_id_of(*self.source)

    @property
    def forms(self) -> list[tuple[str, str]]:
        """(column, form) of the values checked as they arrive: every typed column but the DATE ones (converted and
        checked on their own), and the configured key columns."""
        dates = {name for name, _ in self.dates}
        typed = [(name, value_form(t)) for name, t in self.types if t != "string" and name not in dates]
        keys = [(name, ANY_TEXT) for name in self.key_columns or () if name not in dict(typed) and name not in dates]
        return typed + keys


def table_plan(
    source: tuple[str | None, str | None, str | None], data_columns: list, pipeline: PipelineConfig, zone: str
) -> TablePlan | None:
    """The plan of one table version seen in the records, or None when its records are left to Python."""
    if not source[2] or not data_columns or any(c is None or c["name"] is None for c in data_columns):
        return None
    names = [column["name"] for column in data_columns]
    if len(set(names)) != len(names):
        return None
    declared = {column["name"]: declared_type(column["type"]) for column in data_columns}
    table = pipeline.tables.get(table_id_of(*source))
    configured = dict(table.column_types) if table is not None else {}
    types = {**declared, **configured}
    if any(mark in name for name in types for mark in (COLUMN_SEPARATOR, NULL_MARK)):
        return None  # the marks values_ok joins the checked values with
    dates = tuple((name, types[name] == "date") for name, spark_type in declared.items() if spark_type == DATE)
    if dates and zone != "UTC" and not OFFSET_ZONE.match(zone):
        return None  # a region's zone: Python's
    if any(types[name] not in (DATE, "date") for name, _ in dates):
        return None
    undated = {name: t for name, t in types.items() if name not in dict(dates)}
    if any(t != "string" and value_form(t) is None for t in undated.values()):
        return None
    keys = tuple(table.primary_key) if table is not None and table.primary_key else None
    data = tuple((column["name"], column["type"]) for column in data_columns)
    return TablePlan(source, data, tuple(types.items()), keys, dates, tuple(configured.items()))


def table_plans(records: DataFrame, pipeline: PipelineConfig, zone: str, every: int = 1) -> list[TablePlan]:
    """The plans of the table versions of the row changes in about one record in ``every``, the most frequent
    first (at most MAX_NATIVE_PLANS)."""
    message = N.parse(N.text_of(F.col("value")), MESSAGE_DDL)
    source = message["schema"]["source"]
    found = (
        N.sampled(records, every)
        .select(
            source["dbName"].alias("db"),
            source["schemaName"].alias("schema"),
            source["tableName"].alias("table"),
            message["schema"]["dataColumn"].alias("columns"),
        )
        .where(message["payload"]["op"].isin(*PLANNED_OPS))
        .groupBy("db", "schema", "table", "columns")
        .count()
        .orderBy(F.desc("count"))
        .collect()
    )
    plans = []
    for row in found:
        plan = table_plan((row.db, row.schema, row.table), row.columns, pipeline, zone)
        if plan is not None and len(plans) < MAX_NATIVE_PLANS:
            plans.append(plan)
    return plans


# --- per-plan expressions ----------------------------------------------------------------------------------------


def _matches(message: Column, plan: TablePlan) -> Column:
    """The message is of the plan's table version: the same identity and ``schema.dataColumn``."""
    source = message["schema"]["source"]
    same = F.lit(True)
    for field, value in zip(("dbName", "schemaName", "tableName"), plan.source, strict=True):
        same = same & (source[field].isNull() if value is None else source[field] == F.lit(value))
    columns = [F.struct(F.lit(n).alias("name"), F.lit(t).cast("string").alias("type")) for n, t in plan.data_columns]
    written = F.array(*columns)
    return same & (message["schema"]["dataColumn"] == written)


def _wall_clock(value: Column, zone: str) -> tuple[Column, Column]:
    """(a DATE value's epoch milliseconds as the wall clock in ``zone``, whether the native path converts it)."""
    millis = value.try_cast("bigint")  # never raises, whatever Spark evaluates ahead of the check
    ok = value.rlike(MILLIS) & millis.between(FIRST_MILLIS, LAST_MILLIS)
    return F.from_utc_timestamp(F.timestamp_millis(F.when(ok, millis)), zone), ok


def _dated(image: Column, plan: TablePlan, zone: str) -> tuple[Column, Column]:
    """(``image`` with its DATE values as the Python decoder writes them -- the wall clock as ``yyyy-MM-dd
    HH:mm:ss.SSS``, or the date when configured as one and midnight -- whether every such value converts)."""
    names, texts, ok = [], [], F.lit(True)
    for name, as_date in plan.dates:
        value = image[name]
        wall, converts = _wall_clock(value, zone)
        if as_date:
            converts = converts & (F.date_format(wall, "HH:mm:ss.SSS") == "00:00:00.000")
            text = F.date_format(wall, "yyyy-MM-dd")
        else:
            text = F.date_format(wall, "yyyy-MM-dd HH:mm:ss.SSS")
        present = value.isNotNull()
        ok = ok & (~present | converts)
        names.append(F.when(present, F.lit(name)))
        texts.append(F.when(present, F.coalesce(text, F.lit(""))))  # aligned with names even where ok is false
    if not names:
        return image, ok
    # The session's LAST_WIN map-key policy replaces a value in place, as the Python decoder's dict does.
    converted = F.map_from_arrays(F.array_compact(F.array(*names)), F.array_compact(F.array(*texts)))
    replaced = F.map_concat(image, converted)
    return F.when(image.isNotNull(), replaced), ok


def pair_candidate(value: Column) -> Column:
    """A record that may be an update message, among which the update pairs are looked for: its text names UPDATE_
    or escapes an ASCII character (the op is ASCII: spelled without "UPDATE_" in the text only with \\u escapes)."""
    text = value.cast("string")
    return F.coalesce(text.contains("UPDATE_") | text.rlike(r"\\u00[0-7]"), F.lit(False))


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[TablePlan], zone: str) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``). The records that may
    be update messages are decoded apart, their pairs found by a window over them alone; a pair is taken natively
    only whole, so the Python decoder pairs the halves of every pair it is left."""
    candidate = pair_candidate(F.col("value"))
    others = _rows(_checked(_unpaired(_parsed(records.where(~candidate), plans)), plans, zone), plans)
    paired = _paired(_parsed(records.where(candidate), plans))
    updates = _rows(_whole_pairs(_checked(paired, plans, zone)), plans)
    return others.unionByName(updates)


def _parsed(records: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """The records with their text, tombstone columns, message (``_m``) and plan index (-1: none)."""
    text = N.text_of(F.col("value"))
    located = records.select("topic", "partition", "offset", "timestamp", text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), MESSAGE_DDL).alias("_m"))
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plans))):
        plan_index = F.when(_matches(F.col("_m"), plan), F.lit(index)).otherwise(plan_index)
    return parsed.select("*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"))


def _unpaired(parsed: DataFrame) -> DataFrame:
    """``parsed`` (no update message among them) with the partner columns of :func:`_paired`, empty."""
    return parsed.select(
        "*",
        F.lit(False).alias(_PAIRED),
        F.lit(None).cast("struct<image: map<string,string>, partition: int, offset: bigint>").alias("_before_partner"),
        F.lit(None).cast("struct<partition: int, offset: bigint>").alias("_after_partner"),
    )


def _paired(parsed: DataFrame) -> DataFrame:
    """``parsed`` with each update message's partners, as ``dataworks_json._with_partners`` finds them: the earliest
    UPDATE_BEFOR of its pair (same topic, table and sequenceId) with its before image, and the earliest UPDATE_AFTER.
    Every message with a pair op and a sequenceId is a member, even one neither reader reads alike (it then keeps its
    pair from the native path: ``_whole_pairs``); any other record is a group of its own."""
    payload, source = F.col("_m")["payload"], F.col("_m")["schema"]["source"]
    member = F.coalesce(payload["op"].isin(BEFORE_OP, AFTER_OP) & payload["sequenceId"].isNotNull(), F.lit(False))
    table = source["tableName"]
    parts = [F.when(source[name] != "", source[name]) for name in ("dbName", "schemaName")]
    table_id = F.when(table != "", F.concat_ws(".", *parts, table))  # routing.table_id_of
    grouped = parsed.select(
        "*",
        member.alias(_PAIRED),
        F.when(member, table_id).alias("_group_table"),
        F.when(member, payload["sequenceId"]).alias("_group_sequence"),
        F.when(~member, F.col("partition")).alias("_group_partition"),
        F.when(~member, F.col("offset")).alias("_group_offset"),
    )
    pair = Window.partitionBy(*_GROUP)
    coordinates = F.struct("partition", "offset")
    op = payload["op"]
    before_image = F.struct(payload["before"]["dataColumn"].alias("image"), "partition", "offset")
    before_partner = F.min_by(before_image, F.when(op == BEFORE_OP, coordinates)).over(pair)
    after_partner = F.min_by(coordinates, F.when(op == AFTER_OP, coordinates)).over(pair)
    return grouped.select(
        "*",
        F.when(F.col(_PAIRED), before_partner).alias("_before_partner"),
        F.when(F.col(_PAIRED), after_partner).alias("_after_partner"),
    )


def _moved(before: Column, after: Column, keys: Column) -> Column:
    """The Python decoder's key change: every key column named and in ``before``, one whose value ``after`` does not
    hold (at most MAX_KEY_COLUMNS keys: more leave the row without a key text, to Python)."""
    named, differs = F.lit(True), F.lit(False)
    for index in range(MAX_KEY_COLUMNS):
        column = F.try_element_at(keys, F.lit(index + 1))
        name = F.coalesce(column, F.lit(""))  # a map lookup by a NULL name fails
        used = F.lit(index) < F.size(keys)
        named = named & (~used | (column.isNotNull() & F.map_contains_key(before, name)))
        differs = differs | (used & ~before[name].eqNullSafe(after[name]))
    return F.coalesce(before.isNotNull() & keys.isNotNull() & named & differs, F.lit(False))


def _checked(frame: DataFrame, plans: list[TablePlan], zone: str) -> DataFrame:
    """``frame`` with what its rows need: op, the images as the Python decoder writes them, the key columns, and the
    record's own verdict (``_vouched``)."""
    message = F.col("_m")
    payload = message["payload"]
    op_name = payload["op"]
    op = (
        F.when(op_name == "INSERT", F.lit(S.OP_INSERT))
        .when(op_name == "DELETE", F.lit(S.OP_DELETE))
        .when(op_name == AFTER_OP, F.lit(S.OP_UPDATE))
    )
    plan, is_delete, is_before = F.col("_plan"), op == S.OP_DELETE, op_name == BEFORE_OP
    after, own_before = payload["after"]["dataColumn"], payload["before"]["dataColumn"]
    # An UPDATE_AFTER without a before image of its own takes its UPDATE_BEFOR's.
    before = F.coalesce(own_before, F.col("_before_partner")["image"])
    after_dated = [_dated(after, p, zone) for p in plans]
    before_dated = [_dated(before, p, zone) for p in plans]
    after_image = N.per_plan(plan, [image for image, _ in after_dated])
    before_image = N.per_plan(plan, [image for image, _ in before_dated])
    values = [
        values_ok(after, p.forms) & values_ok(before, p.forms) & a_ok & b_ok
        for p, (_, a_ok), (_, b_ok) in zip(plans, after_dated, before_dated, strict=True)
    ]
    images_present = (
        F.when(op == S.OP_INSERT, after.isNotNull() & own_before.isNull())
        .when(is_delete, before.isNotNull() & after.isNull())
        .otherwise(after.isNotNull())
    )
    readable = F.col("_text").startswith("{") & message[N.CORRUPT_FIELD].isNull() & N.plain_escapes(F.col("_text"))
    sequence, event_millis = payload["sequenceId"], payload["timestamp"]["eventTime"]
    time_known = event_millis.between(FIRST_MILLIS, LAST_MILLIS)
    row_ok = (
        (plan >= 0)
        & op.isNotNull()
        & images_present
        & N.per_plan(plan, values)
        & sequence.rlike(SEQUENCE)
        & (event_millis.isNull() | time_known)
    )
    # The message's key: schema.primaryKey, else the row id column DataWorks adds to a table without one.
    message_keys = F.when(F.size(message["schema"]["primaryKey"]) > 0, message["schema"]["primaryKey"]).when(
        F.array_contains(message["schema"]["dataColumn"]["name"], ROW_ID), F.array(F.lit(ROW_ID))
    )
    keys = N.per_plan(
        plan,
        [message_keys if p.key_columns is None else F.array(*[F.lit(c) for c in p.key_columns]) for p in plans],
        F.lit(None).cast("array<string>"),
    )
    checked = frame.select(
        *frame.columns,
        op.alias("_op"),
        after_image.alias("_after"),
        before_image.alias("_before"),
        keys.alias("_keys"),
        F.coalesce(readable & row_ok, F.lit(False)).alias("_row_ok"),
        F.coalesce(readable & op_name.isin(*TRANSACTION_OPS), F.lit(False)).alias("_transaction"),
        F.coalesce(readable & is_before, F.lit(False)).alias("_update_before"),
        F.concat_ws(" ", op_name, sequence).alias("_transaction_detail"),
        F.array(sequence.try_cast("decimal(38,0)")).alias("position"),
        F.timestamp_millis(F.when(time_known, event_millis)).alias("event_time"),  # no overflow on other rows
    )
    image = F.when(F.col("_op") == S.OP_DELETE, F.col("_before")).otherwise(F.col("_after"))
    key = counted_key_text(image, F.col("_keys"))
    moved = (F.col("_op") == S.OP_UPDATE) & _moved(F.col("_before"), F.col("_after"), F.col("_keys"))
    change_ok = F.col("_row_ok") & key.isNotNull() & ~moved
    before_ok = F.col("_update_before") & (F.col("_plan") >= 0) & F.col("_after_partner").isNotNull()
    vouched = F.coalesce(change_ok | F.col("_transaction") | before_ok, F.lit(False))
    return checked.select("*", key.alias("_key"), vouched.alias("_vouched"))


def _whole_pairs(checked: DataFrame) -> DataFrame:
    """A pair's messages are taken natively only if all of them are: the Python decoder, which decodes the rest,
    pairs them among the records it is left."""
    whole = F.min(F.col("_vouched").cast("int")).over(Window.partitionBy(*_GROUP)) == 1
    return checked.withColumn("_vouched", F.when(F.col(_PAIRED), whole).otherwise(F.col("_vouched")))


def _rows(checked: DataFrame, plans: list[TablePlan]) -> DataFrame:
    """The decoded row of each record (the changelog row of a change, the control row of a transaction or of an
    update's UPDATE_BEFOR) and its native flag."""
    plan, op = F.col("_plan"), F.col("_op")
    is_delete = op == S.OP_DELETE

    def of_plan(values: list[Column], data_type: str) -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    table = {
        "table_id": of_plan([F.lit(p.table_id) for p in plans], "string"),
        "source_db": of_plan([F.lit(p.source[0]).cast("string") for p in plans], "string"),
        "source_schema": of_plan([F.lit(p.source[1]).cast("string") for p in plans], "string"),
        "source_table": of_plan([F.lit(p.source[2]) for p in plans], "string"),
    }
    change = N.changelog_row(
        FORMAT_ID,
        native=F.col("_vouched"),
        **table,
        op=op,
        key=F.col("_key"),
        key_columns=F.col("_keys"),
        after=F.when(~is_delete, F.col("_after")),
        before=F.when(op != S.OP_INSERT, F.col("_before")),
        column_types=of_plan([N.literal_map(dict(p.types)) for p in plans], "map<string,string>"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.lit(0),
    )
    partner = F.col("_after_partner")
    update_before = {
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": F.lit(S.CONTROL_UPDATE_BEFORE),
        "detail": F.format_string(
            "before image of the update applied by partition %d offset %d", partner["partition"], partner["offset"]
        ),
        # A control row names its table, whose configured key and types routing adds.
        **table,
        "key_columns": of_plan(
            [F.array(*[F.lit(c) for c in p.key_columns]) if p.key_columns else F.lit(None) for p in plans],
            "array<string>",
        ),
        "column_types": of_plan([N.literal_map(dict(p.configured)) for p in plans], "map<string,string>"),
    }
    transaction = {
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": F.lit(S.CONTROL_TRANSACTION),
        "detail": F.col("_transaction_detail"),
        "column_types": N.literal_map({}),
    }
    types = {field.name: field.dataType for field in S.struct_type(DECODED_DDL)}
    controls = ((F.col("_transaction"), transaction), (F.col("_update_before"), update_before))
    rows = {name: _control_or(column, name, types.get(name), *controls) for name, column in change.items()}
    return checked.select(*N.with_tombstones(rows))


_KEPT = ("topic", "partition", "offset", "timestamp", "format", "reason", "raw_key", "raw_value", "row_index")


def _control_or(column: Column, name: str, data_type, *controls: tuple[Column, dict[str, Column]]) -> Column:
    """A changelog row's ``column`` (of ``data_type``), or, where a control's condition holds, that control row's value
    of it (NULL for what a control row does not set)."""
    if name in _KEPT or name == N.NATIVE_FLAG:
        return column
    for condition, values in reversed(controls):
        column = F.when(condition, values.get(name, F.lit(None).cast(data_type))).otherwise(column)
    return column
