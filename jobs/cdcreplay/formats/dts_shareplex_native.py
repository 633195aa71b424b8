"""DTS Shareplex JSON decoded by Spark's JSON reader: the native path of ``dts-shareplex-json`` (see ``native_json``).

Each message is parsed once into ``meta`` (a struct of texts) and the images ``data`` and ``key`` as
``map<string,string>``: a map keeps a column the message did not carry apart from one it carried as null, which an
update needs (it carries only its changed columns). The format carries neither keys nor types: both come from the
config (``tables.<SCHEMA.TABLE>``), so the plans are known before any record is read -- one :class:`TablePlan` per
configured table, matched by ``meta.table`` written exactly as its id.

The native path decodes ins/INSERT, upd/UPDATE/UPDATE AFTER and del/DELETE messages of a planned table whose values
all pass their type's native form (a subset of what ``value_checks`` accepts that no configured type would round or
truncate: ``configured_types.lossy_columns``), whose position reads as digits (scn, the three parts of ``trans``, seq)
and whose time reads as a timestamp; and Kafka tombstones. Everything else -- UPDATE BEFORE, TRUNCATE, DROP COLUMN,
other spellings of an op, an update that moves its row to a new key, a missing image or key value, a value its form
does not vouch for, nested JSON or a number token Spark would render differently, an escape Spark renders differently
-- goes through the Python decoder (``dts_shareplex_json.decode_record``) unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.envelopes.shareplex_message import DELETE_OPS, FORMAT_ID, INSERT_OPS, UPDATE_OPS, table_identity
from cdcreplay.formats.values.native_forms import ANY_TEXT, VALUE_FORMS, decimal_type, exact_decimal_form
from cdcreplay.formats.wire import native_json as N

# At most this many configured tables get a plan (the most frequent in a sample when more are configured): each adds
# its checks to one generated projection, which must stay far below the JVM's 64 KB method limit.
MAX_NATIVE_TABLES = 16
META_DDL = "struct<time: string, op: string, scn: string, trans: string, seq: string, `table`: string>"
MESSAGE_DDL = f"meta {META_DDL}, data map<string,string>, key map<string,string>"
# The op spellings the native path takes, upper case, and what they mean; every other op is Python's.
NATIVE_OPS = {
    **{name: S.OP_INSERT for name in INSERT_OPS},
    **{name: S.OP_UPDATE for name in UPDATE_OPS},
    **{name: S.OP_DELETE for name in DELETE_OPS},
}
# A position part whose try_cast to decimal(38,0) is its plain value, as in Python. (\z, not $: Java's $ also
# matches before a final line break.)
DIGITS = r"^[0-9]{1,18}\z"
TRANSACTION = r"^[0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18}\z"
# The times the Python decoder reads with its common pattern (``text_casts.try_timestamp``): a calendar date and a
# time of day without a leap second; whatever Spark's cast then refuses is Python's too.
TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?Z?\z"
# Join the values of an image's checked columns, stand for an absent or null value: no value holds these (a string
# value holding one is refused by ANY_TEXT and goes to Python).
COLUMN_SEPARATOR, NULL_MARK = "\u0003", "\u0002"


def value_form(spark_type: str) -> str | None:
    """The regular expression a value of configured ``spark_type`` must match to be decoded natively; None for a
    type without a native form (its table is Python's). Binary is not a Shareplex type (its rendering of bytes is
    undocumented): a table that configures one is Python's."""
    decimal = decimal_type(spark_type)
    if decimal is not None:
        return exact_decimal_form(*decimal)
    if spark_type == "string":
        return ANY_TEXT
    if spark_type == "date":
        return VALUE_FORMS["date"]  # a date without a time of day: nothing for the cast to drop
    return VALUE_FORMS.get(spark_type)


@dataclass(frozen=True)
class TablePlan:
    """One configured table: its id as ``meta.table`` writes it, key columns and configured column types."""

    table_id: str
    key_columns: tuple[str, ...]
    types: tuple[tuple[str, str], ...]

    @property
    def checked(self) -> list[str]:
        """The columns whose values are checked: every typed column and every key column."""
        typed = [name for name, spark_type in self.types if spark_type != "string"]
        return typed + [name for name in self.key_columns if name not in typed]

    def form(self, name: str) -> str:
        return value_form(dict(self.types).get(name, "string"))


def table_plan(table_id: str, pipeline: PipelineConfig) -> TablePlan | None:
    """The plan of one configured table, or None when its records are left to Python."""
    table = pipeline.tables.get(table_id)
    if table is None or not table.primary_key or not table.column_types:
        return None
    if any(value_form(spark_type) is None for spark_type in table.column_types.values()):
        return None
    if any(c in (COLUMN_SEPARATOR, NULL_MARK) for name in table.column_types for c in name):
        return None
    return TablePlan(table_id, tuple(table.primary_key), tuple(table.column_types.items()))


def table_plans(records: DataFrame, pipeline: PipelineConfig, every: int = 1) -> list[TablePlan]:
    """The plans of the configured tables; when more than MAX_NATIVE_TABLES are configured, of the most frequent ones
    in about one record in ``every`` (``native_json.sampled``)."""
    plans = [plan for plan in (table_plan(t, pipeline) for t in sorted(pipeline.tables)) if plan is not None]
    if len(plans) <= MAX_NATIVE_TABLES:
        return plans
    table = N.parse(N.text_of(F.col("value")), f"meta {META_DDL}")["meta"]["table"]
    counts = N.sampled(records, every).groupBy(table.alias("table")).count().collect()
    frequency = {row.table: row["count"] for row in counts}
    return sorted(plans, key=lambda plan: -frequency.get(plan.table_id, 0))[:MAX_NATIVE_TABLES]


# --- per-plan expressions ----------------------------------------------------------------------------------------


def values_ok(image: Column, forms: list[tuple[str, str]]) -> Column:
    """Every value ``image`` holds for the named columns matches its form (a regular expression of ``native_forms``),
    or is absent or null (an absent image: nothing to check). ``forms``: (column, form) pairs. The values are joined
    by COLUMN_SEPARATOR, an absent or null one as NULL_MARK, and matched by one expression."""
    if not forms:
        return F.lit(True)
    values = F.concat_ws(COLUMN_SEPARATOR, *[F.coalesce(image[name], F.lit(NULL_MARK)) for name, _ in forms])
    # \z, not $: Java's $ also matches before a final line break.
    pattern = "^" + COLUMN_SEPARATOR.join(f"(?:{form}|{NULL_MARK})" for _, form in forms) + "\\z"
    return image.isNull() | values.rlike(pattern)


def _values_ok(image: Column, plan: TablePlan) -> Column:
    """Every value the plan checks in ``image`` is one its type holds exactly (an absent image: nothing to check)."""
    return values_ok(image, [(name, plan.form(name)) for name in plan.checked])


def _key_moved(data: Column, key: Column, plan: TablePlan) -> Column:
    """An update whose `data` gives a key column another value than its `key` image does: it moves the row."""
    moved = F.lit(False)
    for name in plan.key_columns:
        both = F.map_contains_key(data, name) & F.map_contains_key(key, name)
        moved = moved | (both & ~data[name].eqNullSafe(key[name]))
    return F.coalesce(moved, F.lit(False))


def _key_text(image: Column, plan: TablePlan) -> Column:
    """The key as ``routing.key_text`` writes it (a JSON array of texts), NULL when a key value is absent or null."""
    return N.key_text_of([image[name] for name in plan.key_columns])


def _position(meta: Column) -> tuple[Column, Column]:
    """((scn, trans a, b, c, seq) as array<decimal(38,0)>, whether every part is plain digits)."""
    trans = F.split(meta["trans"], "\\.")
    parts = [meta["scn"], *(F.try_element_at(trans, F.lit(i)) for i in (1, 2, 3)), meta["seq"]]
    known = meta["scn"].rlike(DIGITS) & meta["trans"].rlike(TRANSACTION) & meta["seq"].rlike(DIGITS)
    return F.array(*[part.try_cast("decimal(38,0)") for part in parts]), known


def _event_time(meta: Column) -> tuple[Column, Column]:
    """(meta.time as a timestamp, whether Spark's reading is the Python decoder's: a time of the common pattern that
    the cast reads, or none)."""
    time = meta["time"]
    read = F.when(time.rlike(TIME), time.try_cast("timestamp"))
    return read, time.isNull() | (read.isNotNull() & (F.year(read) >= 1))


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded row and the ``native`` flag (see ``native_json``)."""
    plan_list = list(plans)
    text = N.text_of(F.col("value"))
    located = records.select("topic", "partition", "offset", "timestamp", text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), MESSAGE_DDL).alias("_m"))
    message = F.col("_m")
    meta, data, key = message["meta"], message["data"], message["key"]
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plan_list))):
        plan_index = F.when(meta["table"] == F.lit(plan.table_id), F.lit(index)).otherwise(plan_index)
    op_name = F.upper(meta["op"])
    op = None
    for name, code in NATIVE_OPS.items():
        op = F.when(op_name == name, F.lit(code)) if op is None else op.when(op_name == name, F.lit(code))
    planned = parsed.select(
        "*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"), op.alias("_op"), op_name.isin(*UPDATE_OPS).alias("_upd")
    )

    plan, op, is_update = F.col("_plan"), F.col("_op"), F.col("_upd")
    empty = F.create_map().cast("map<string,string>")
    # An update's after image is `key` overlaid with `data` (the session's LAST_WIN map-key policy replaces a value in
    # place, as a Python dict update does); an insert's and a delete's is `data`.
    merged = F.when(is_update, F.map_concat(F.coalesce(key, empty), F.coalesce(data, empty))).otherwise(data)
    checks = N.per_plan(
        plan,
        [_values_ok(data, p) & _values_ok(key, p) & ~(is_update & _key_moved(data, key, p)) for p in plan_list],
        F.lit(False),
    )
    position, position_ok = _position(meta)
    event_time, time_ok = _event_time(meta)
    text_col = F.col("_text")
    # The message's objects: itself, meta, data and key; no array.
    braces = 1 + sum(F.when(part.isNotNull(), 1).otherwise(0) for part in (meta, data, key))
    # No array, and no number token Spark would render differently (a text without arrays holds one only as a
    # member's value); a string value holding JSON text is counted without its content.
    planned = N.with_shape_verdict(
        planned,
        lambda text: N.containers_accounted_for(text, braces, F.lit(0)) & N.plain_member_numbers(text),
        text_col,
    )
    shaped = F.col(N.SHAPED)
    envelope_ok = (
        (plan >= 0)
        & message[N.CORRUPT_FIELD].isNull()
        & meta["op"].rlike("^[A-Za-z]+( [A-Za-z]+)?\\z")
        & op.isNotNull()
        & F.when(is_update, data.isNotNull() | key.isNotNull()).otherwise(data.isNotNull())
        & position_ok
        & time_ok
        & shaped
        & N.plain_escapes(text_col)
        & F.coalesce(checks, F.lit(False))
    )
    rows = planned.select(
        *N.CARRIED,
        plan,
        op,
        F.coalesce(envelope_ok, F.lit(False)).alias("_ok"),
        merged.alias("_image"),
        F.when(is_update, key).alias("_before_key"),
        position.alias("position"),
        event_time.alias("event_time"),
    )
    image, is_delete = F.col("_image"), F.col("_op") == S.OP_DELETE
    key_text = N.per_plan(plan, [_key_text(image, p) for p in plan_list], F.lit(None).cast("string"))

    def of_plan(values: list[Column], data_type: str) -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    identities = [table_identity(p.table_id) for p in plan_list]
    out = N.changelog_row(
        FORMAT_ID,
        native=F.col("_ok") & key_text.isNotNull(),
        table_id=of_plan([F.lit(p.table_id) for p in plan_list], "string"),
        source_db=F.lit(None).cast("string"),
        source_schema=of_plan([F.lit(schema) for schema, _ in identities], "string"),
        source_table=of_plan([F.lit(table) for _, table in identities], "string"),
        op=F.col("_op"),
        key=key_text,
        key_columns=of_plan([F.array(*[F.lit(c) for c in p.key_columns]) for p in plan_list], "array<string>"),
        after=F.when(~is_delete, image),
        before=F.when(is_delete, image).otherwise(F.col("_before_key")),
        column_types=of_plan([N.literal_map(dict(p.types)) for p in plan_list], "map<string,string>"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.lit(0),
    )
    return rows.select(*N.with_tombstones(out))
