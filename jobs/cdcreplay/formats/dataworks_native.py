"""DataWorks JSON decoded by Spark's JSON reader: the native path of ``dataworks-json`` (see ``native_json``).

Each message is parsed once with the schema the Python decoder reads it with (``MESSAGE_DDL``:
``from_json_in_python`` is Spark's reading kept in Python), so both paths see the same fields and refuse the same
messages; the images are ``map<string,string>``, which keeps an absent column apart from a null one.

A plan is one table version: the table as ``schema.source`` names it and its ``schema.dataColumn`` as written (names
and DataWorks types), found in a sample of the records (``native_json.sampled``). It knows the row's column types (the
declared ones, the config's ``column_types`` over them), the configured key, and which values to check and convert.

Taken natively: INSERT and DELETE messages of a planned table version whose values all pass their type's native form
(``dts_shareplex_native.value_form``: nothing a configured type would round), whose DATE values (epoch milliseconds)
are plain integers of years 1..9999 (turned into the wall clock of ``options.time_zone``, when it is UTC or an
offset: a region's rules are Python's ``zoneinfo``, whose data may differ from Java's), whose sequenceId is digits and
whose key has a value in every key column; and the transaction messages (TRANSACTION_BEGIN, ..., control rows). A
text that does not open an object, escapes a character Spark renders differently (``native_json.plain_escapes``) or
is not UTF-8 is Python's. So is everything else: UPDATE_BEFOR and UPDATE_AFTER (the Python decoder pairs them among the
records it reads, which must then hold both halves of every pair), TRUNCATE, DDL, heartbeats, an INSERT that carries
a before image or a DELETE an after image, and any row a check refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import KIND_CONTROL
from cdcreplay.formats.debezium_native import key_text
from cdcreplay.formats.dts_shareplex_native import COLUMN_SEPARATOR, NULL_MARK, value_form, values_ok
from cdcreplay.formats.envelopes.dataworks_message import (
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
ROW_OPS = {"INSERT": S.OP_INSERT, "DELETE": S.OP_DELETE}


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
    return TablePlan(source, data, tuple(types.items()), keys, dates)


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
        .where(message["payload"]["op"].isin(*ROW_OPS))
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


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[TablePlan], zone: str) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``)."""
    text = N.text_of(F.col("value"))
    located = records.select("topic", "partition", "offset", "timestamp", text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), MESSAGE_DDL).alias("_m"))
    message = F.col("_m")
    payload = message["payload"]
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plans))):
        plan_index = F.when(_matches(message, plan), F.lit(index)).otherwise(plan_index)
    op_name = payload["op"]
    op = F.when(op_name == "INSERT", F.lit(S.OP_INSERT)).when(op_name == "DELETE", F.lit(S.OP_DELETE))
    planned = parsed.select("*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"), op.alias("_op"))
    plan, op, is_delete = F.col("_plan"), F.col("_op"), F.col("_op") == S.OP_DELETE
    after, before = payload["after"]["dataColumn"], payload["before"]["dataColumn"]
    image = F.when(is_delete, before).otherwise(after)
    converted = [_dated(image, p, zone) for p in plans]
    dated = N.per_plan(plan, [c[0] for c in converted])
    readable = F.col("_text").startswith("{") & message[N.CORRUPT_FIELD].isNull() & N.plain_escapes(F.col("_text"))
    sequence, event_millis = payload["sequenceId"], payload["timestamp"]["eventTime"]
    time_known = event_millis.between(FIRST_MILLIS, LAST_MILLIS)
    row_ok = (
        (plan >= 0)
        & op.isNotNull()
        & F.when(is_delete, before.isNotNull() & after.isNull()).otherwise(after.isNotNull() & before.isNull())
        & N.per_plan(plan, [values_ok(image, p.forms) & c[1] for p, c in zip(plans, converted, strict=True)])
        & sequence.rlike(SEQUENCE)
        & (event_millis.isNull() | time_known)
    )
    is_transaction = op_name.isin(*TRANSACTION_OPS)
    rows = planned.select(
        *N.CARRIED,
        plan,
        op,
        F.coalesce(readable, F.lit(False)).alias("_readable"),
        F.coalesce(row_ok, F.lit(False)).alias("_row_ok"),
        F.coalesce(is_transaction, F.lit(False)).alias("_transaction"),
        F.concat_ws(" ", op_name, sequence).alias("_transaction_detail"),
        dated.alias("_image"),
        message["schema"]["primaryKey"].alias("_message_keys"),
        message["schema"]["dataColumn"]["name"].alias("_names"),
        F.array(sequence.try_cast("decimal(38,0)")).alias("position"),
        F.timestamp_millis(F.when(time_known, event_millis)).alias("event_time"),  # no overflow on other rows
    )
    image, is_delete = F.col("_image"), F.col("_op") == S.OP_DELETE
    # The message's key: schema.primaryKey, else the row id column DataWorks adds to a table without one.
    message_keys = F.when(F.size(F.col("_message_keys")) > 0, F.col("_message_keys")).when(
        F.array_contains(F.col("_names"), ROW_ID), F.array(F.lit(ROW_ID))
    )
    keys = N.per_plan(
        plan,
        [message_keys if p.key_columns is None else F.array(*[F.lit(c) for c in p.key_columns]) for p in plans],
        F.lit(None).cast("array<string>"),
    )
    key = key_text(image, keys)

    def of_plan(values: list[Column], data_type: str) -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    change = N.changelog_row(
        FORMAT_ID,
        native=F.col("_readable") & F.col("_row_ok") & key.isNotNull(),
        table_id=of_plan([F.lit(p.table_id) for p in plans], "string"),
        source_db=of_plan([F.lit(p.source[0]).cast("string") for p in plans], "string"),
        source_schema=of_plan([F.lit(p.source[1]).cast("string") for p in plans], "string"),
        source_table=of_plan([F.lit(p.source[2]) for p in plans], "string"),
        op=F.col("_op"),
        key=key,
        key_columns=keys,
        after=F.when(~is_delete, image),
        before=F.when(is_delete, image),
        column_types=of_plan([N.literal_map(dict(p.types)) for p in plans], "map<string,string>"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.lit(0),
    )
    return rows.select(*N.with_tombstones(_or_transaction(change)))


def _or_transaction(change: dict[str, Column]) -> dict[str, Column]:
    """``change`` for a row change, and for a transaction message the control row the Python decoder writes: its op
    and sequenceId as the detail, no table, key, images, types, position or time."""
    transaction = F.col("_transaction")
    instead = {
        N.NATIVE_FLAG: F.col("_readable"),
        "record_kind": F.lit(KIND_CONTROL),
        "control_kind": F.lit(S.CONTROL_TRANSACTION),
        "detail": F.col("_transaction_detail"),
        "column_types": N.literal_map({}),
        "row_index": F.lit(0),
    }
    kept = ("topic", "partition", "offset", "timestamp", "format", "reason", "raw_key", "raw_value")
    return {
        name: F.when(transaction, instead[name]).otherwise(column)
        if name in instead
        else column
        if name in kept
        else F.when(~transaction, column)
        for name, column in change.items()
    }
