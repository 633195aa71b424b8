"""Canal JSON decoded by Spark's JSON reader: the native path of ``canal-json`` (see ``native_json``).

Each message is parsed once into its envelope, with the row images `data` and `old` as arrays of
``map<string,string>``: Canal and DTS write every value as a JSON string (or null), which a string map holds exactly.
A number token where a string is expected is read by Spark through a double when it has a fraction or an exponent
(``1.50`` -> ``1.5``) while the Python decoder keeps its text: a record holding a number token anywhere but in
es, id, ts and sqlType is left to Python (counted by substring search, without a regular expression over the
message, which needs the compact JSON Canal and DTS write: other layouts go to Python too).

The tables of the input are sampled first (a light parse of a sample of the records, on the driver: database, table,
``mysqlType`` and ``pkNames``), and each becomes a :class:`TablePlan`: its columns, their Spark types, its key columns
and the native check of each type, which accepts a subset of what ``value_checks`` accepts. A record is of a plan when
its database, table, ``mysqlType`` (names, types and their order) and ``pkNames`` equal the plan's. The values of the
plan's typed columns are read a second time, column by column across all rows of the message (a struct per row), so
that each type's check is one expression per column for the whole message: a message is decoded natively as a whole
or not at all, never row by row.

The native path decodes INSERT, UPDATE, DELETE and INIT messages of the open-source layout (option
``legacy_swapped`` false or unset: `data` holds the rows, an UPDATE's before image is ``data[i]`` overlaid with
``old[i]``, an UPDATE that changes the key also deletes the old key), and Kafka tombstones. Everything else -- DDL
and TRUNCATE messages, the legacy layout (every record of a source declared ``legacy_swapped: true``), a DELETE
with its row in `old`, a table without a plan (more than MAX_NATIVE_TABLES tables, a decimal wider than Spark's,
configured column types), a missing key value, a value its check does not vouch for, a string value holding a brace
or bracket (nested JSON is rendered differently), an escape Spark renders differently, a number token where text
is read, JSON that is not compact -- goes through
the Python decoder (``canal_json.decode_record``) unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import native_json as N
from cdcreplay.formats.canal_json import FORMAT_ID, LAYOUT_LEGACY, ROW_TYPES, layout_of
from cdcreplay.formats.routing import KIND_CHANGE, table_id_of
from cdcreplay.value_types import mysql_type_name_to_spark

# At most this many tables get a native plan (the most frequent in the sample); records of others go to Python.
# Every plan adds a few expressions per column to one generated projection: bounded, so that its code stays far
# below the JVM's 64 KB method limit.
MAX_NATIVE_TABLES = 16
# The table pass samples an input larger than this many records down to about this many.
TABLE_SAMPLE = 100_000
ENVELOPE_DDL = (
    "data array<map<string,string>>, old array<map<string,string>>, database string, `table` string, es bigint, "
    "id bigint, ts bigint, isDdl boolean, mysqlType map<string,string>, pkNames array<string>, type string, "
    "sqlType string"
)
TABLE_DDL = (
    "database string, `table` string, isDdl boolean, mysqlType map<string,string>, pkNames array<string>, type string"
)
# A name a rendered number token (or nested JSON) could never equal, and a JSON key written without escapes.
PLAIN_NAME = r"^[A-Za-z_$][A-Za-z0-9_$]*$"
# How a member's value may start right after `":` when it is not a number token.
NOT_NUMBER_STARTS = ('"', "n", "{", "[", "t", "f")
# A closing quote followed by blank space: in compact JSON only inside a string (text or an escaped quote).
QUOTE_BLANKS = ('" ', '"\t', '"\n', '"\r')
# Join a column's values, and stand for NULL: no value holds them (raw, they are not JSON; escaped, native_json
# refuses them).
SEPARATOR, NULL_MARK = "\u0001", "\u0002"
# Source event time in milliseconds that the Python decoder can hold (years 1..9999); outside, both write NULL.
MIN_MILLIS, MAX_MILLIS = -62135596800000, 253402300799999
# The Python check rounds a decimal in a 28-digit context: a wider decimal type is left to it.
MAX_DECIMAL_PRECISION = 28

# Canonical text each Spark type's check accepts natively (one value; ``value_checks`` accepts a superset), and
# the type a value must also cast to (range, calendar), or None when the text alone decides.
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?"
VALUE_FORMS = {
    "boolean": (r"(0|1|true|false)", None),
    "int": (r"-?[0-9]{1,10}", "int"),
    "bigint": (r"-?[0-9]{1,19}", "bigint"),
    "decimal": (r"-?[0-9]{1,40}(\.[0-9]{1,40})?", None),  # cast to the column's own decimal type
    "float": (r"-?[0-9]{1,40}(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?", None),
    "double": (r"-?[0-9]{1,40}(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,3})?", None),
    "date": (r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "date"),
    "timestamp": (r"[0-9]{4}-[0-9]{2}-[0-9]{2}( " + _TIME + ")?", "timestamp_ntz"),
    "timestamp_ntz": (r"[0-9]{4}-[0-9]{2}-[0-9]{2}( " + _TIME + ")?", "timestamp_ntz"),
    "binary": (r"[\x00-\xff]*", None),  # Latin-1 text of the bytes: every character one byte
}


@dataclass(frozen=True)
class TablePlan:
    """One table as its messages declare it: database, table, ``mysqlType`` (in order) and ``pkNames``."""

    db: str | None
    table: str
    mysql_types: tuple[tuple[str, str], ...]
    pk_names: tuple[str, ...] | None
    key_columns: tuple[str, ...]  # the configured primary key, else pkNames

    @property
    def table_id(self) -> str:
        return table_id_of(self.db, None, self.table)

    @property
    def types(self) -> dict[str, str]:
        return {name: mysql_type_name_to_spark(mysql_type) for name, mysql_type in self.mysql_types}

    @property
    def checked(self) -> list[str]:
        """The columns read column by column: every typed column and every key column."""
        typed = [name for name, spark_type in self.types.items() if spark_type != "string"]
        return typed + [name for name in self.key_columns if name not in typed]

    @property
    def binary(self) -> list[str]:
        return [name for name, spark_type in self.types.items() if spark_type == "binary"]


def _base_type(spark_type: str) -> str:
    return "decimal" if spark_type.startswith("decimal") else spark_type


def _plain(text: str | None) -> bool:
    return text is None or not re.match(N.RENDERED_NUMBER, text)


def table_plan(db: str | None, table: str | None, names, types, pk_names, pipeline: PipelineConfig) -> TablePlan | None:
    """The plan of one sampled table declaration, or None when the native path leaves its records to Python."""
    if not table or not _plain(db) or not _plain(table):
        return None
    table_id = table_id_of(db, None, table)
    configured = pipeline.tables.get(table_id)
    if configured is not None and configured.column_types:
        return None  # routing retypes its columns: Python
    if names is None or types is None or any(t is None for t in types) or not names:
        return None
    mysql_types = tuple(zip(names, types, strict=True))
    for mysql_type in types:
        spark_type = mysql_type_name_to_spark(mysql_type)
        if spark_type.startswith("decimal"):
            precision, scale = (int(part) for part in spark_type[len("decimal(") : -1].split(","))
            if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
                return None
        elif spark_type != "string" and spark_type not in VALUE_FORMS:
            return None
    if pk_names is not None and any(name is None for name in pk_names):
        return None
    pk = None if pk_names is None else tuple(pk_names)
    keys = tuple(configured.primary_key) if configured is not None and configured.primary_key else pk
    if not keys or any(not re.match(PLAIN_NAME, name) for name in keys) or len(set(keys)) != len(keys):
        return None
    return TablePlan(db, table, mysql_types, pk, keys)


def table_plans(records: DataFrame, pipeline: PipelineConfig, every: int = 1) -> list[TablePlan]:
    """The plans of the most frequent tables of ``records`` (about one record in ``every``, chosen by a hash of the
    offset): a table the sample misses costs speed, never correctness (its records are decoded in Python)."""
    if every > 1:
        records = records.where(F.pmod(F.xxhash64("offset"), F.lit(every)) == 0)
    message = N.parse(N.text_of(F.col("value")), TABLE_DDL).alias("m")
    found = (
        records.select(message)
        .where(F.col("m").isNotNull() & F.col(f"m.{N.CORRUPT_FIELD}").isNull())
        .where(F.upper("m.type").isin(*ROW_TYPES))
        .where(~F.coalesce(F.col("m.isDdl"), F.lit(False)))
        .groupBy(
            F.col("m.database").alias("db"),
            F.col("m.table").alias("table"),
            F.map_keys("m.mysqlType").alias("names"),
            F.map_values("m.mysqlType").alias("types"),
            F.col("m.pkNames").alias("pk"),
        )
        .count()
        .orderBy(F.desc("count"))
        .limit(4 * MAX_NATIVE_TABLES)
        .collect()
    )
    plans: list[TablePlan] = []
    for row in found:
        plan = table_plan(row.db, row.table, row.names, row.types, row.pk, pipeline)
        if plan is not None and len(plans) < MAX_NATIVE_TABLES:
            plans.append(plan)
    return plans


# --- per-plan expressions ----------------------------------------------------------------------------------------


def _array_of(values) -> Column:
    return F.array(*[F.lit(v) for v in values]).cast("array<string>")


def _matches(message: Column, plan: TablePlan) -> Column:
    """The message declares the plan's table exactly (so the plan's types are the ones the Python decoder uses)."""
    names = [name for name, _ in plan.mysql_types]
    types = [mysql_type for _, mysql_type in plan.mysql_types]
    pk = message["pkNames"]
    pk_same = pk.isNull() if plan.pk_names is None else (pk == _array_of(plan.pk_names))
    return (
        message["database"].eqNullSafe(F.lit(plan.db).cast("string"))
        & (message["table"] == F.lit(plan.table))
        & (F.map_keys(message["mysqlType"]) == _array_of(names))
        & (F.map_values(message["mysqlType"]) == _array_of(types))
        & F.coalesce(pk_same, F.lit(False))
    )


def _joined(values: Column) -> Column:
    """A column's values (across the rows of a message) as one text, NULL as NULL_MARK. (Counting without the
    higher-order functions that array_compact needs: they take a whole stage out of generated code.)"""
    return F.array_join(values, SEPARATOR, NULL_MARK)


def _nulls(joined: Column) -> Column:
    return F.length(joined) - F.length(F.replace(joined, F.lit(NULL_MARK), F.lit("")))


def _values_pass(values: Column, spark_type: str) -> Column:
    """Every non-null value of one column (across the rows of a message) passes the native check of its type."""
    form, cast_type = VALUE_FORMS[_base_type(spark_type)]
    if spark_type.startswith("decimal"):
        cast_type = spark_type
    joined = _joined(values)
    value = f"({form}|{NULL_MARK})"
    shaped = (F.size(values) == 0) | joined.rlike(f"^{value}({SEPARATOR}{value})*$")
    if cast_type is None:
        return shaped
    cast = _joined(values.try_cast(f"array<{cast_type}>").cast("array<string>"))
    return shaped & (_nulls(cast) == _nulls(joined))  # the cast made no value NULL


def _plan_checks(plan: TablePlan, columns: Column, message: Column, is_update: Column) -> Column:
    """Whether every row of the message is one the native path decodes exactly as the Python decoder (``columns``:
    the plan's checked columns of `data` and `old`, row by row)."""
    types = plan.types
    ok = F.lit(True)
    for name in plan.key_columns:
        # A key value missing from a row (or a null row) would be a missing_key quarantine in Python.
        ok = ok & ~_joined(columns["data"][name]).contains(NULL_MARK)
    old_json = F.to_json(message["old"])
    for name in plan.key_columns:
        # `old` naming a key column with null says the before image had no key: Python quarantines the move.
        ok = ok & ~(is_update & F.coalesce(F.instr(old_json, f'"{name}":null') > 0, F.lit(False)))
    for name, spark_type in types.items():
        if spark_type == "string":
            continue
        ok = ok & _values_pass(columns["data"][name], spark_type)
        # `old` is read only for an UPDATE (its values become the before image's)
        old_values = columns["old"][name]
        ok = ok & (~is_update | message["old"].isNull() | _values_pass(old_values, spark_type))
    return ok


def _columns_schema(plans: list[TablePlan]) -> StructType:
    """`data` and `old` rows as structs of every plan's checked columns (a name shared by tables is one field)."""
    names = list(dict.fromkeys(name for plan in plans for name in plan.checked))
    row = StructType([StructField(name, StringType()) for name in names])
    return StructType([StructField("data", ArrayType(row)), StructField("old", ArrayType(row))])


def _as_base64(image: Column, columns: list[str]) -> Column:
    """Canal prints binary columns as ISO-8859-1 text of the bytes; canonical binary text is base64. (The session's
    LAST_WIN map-key policy makes map_concat replace a value in place.)"""
    for name in columns:
        converted = F.create_map(F.lit(name), F.base64(F.encode(image[name], "ISO-8859-1")))
        image = F.map_concat(image, F.when(F.map_contains_key(image, name), converted).otherwise(F.create_map()))
    return image


def _occurrences(text: Column, part: str) -> Column:
    """How often ``part`` occurs in ``text``: a substring replace, far cheaper than a regular expression."""
    return (F.length(text) - F.length(F.replace(text, F.lit(part), F.lit("")))) / len(part)


def _number_members(text: Column) -> Column:
    """Members written `"name":<number>` in compact JSON (an upper bound: text inside a string can only add)."""
    members = _occurrences(text, '":')
    for start in NOT_NUMBER_STARTS:
        members = members - _occurrences(text, '":' + start)
    return members


def _numbers_as_written(text: Column, message: Column) -> Column:
    """No number token is read where the Python decoder reads text, without a regular expression over the message:
    in compact JSON (no closing quote followed by blank space) every member's value follows `":` directly, and the only
    members holding a number are es, id, ts and those of sqlType (which neither path reads; without an escape, its
    text as Spark renders it counts its members as the message does). An integer token would read the same on both
    paths, but any number elsewhere is left to Python: far rarer than the regular expression's cost."""
    compact = F.lit(True)
    for part in QUOTE_BLANKS:
        compact = compact & (F.instr(text, part) == 0)
    sql_type = message["sqlType"]
    expected = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("es", "id", "ts"))
    expected = expected + F.coalesce(_number_members(sql_type), F.lit(0))
    plain_sql_type = sql_type.isNull() | (F.instr(sql_type, "\\") == 0)
    return compact & plain_sql_type & (_number_members(text) == expected)


def _count(values: Column) -> Column:
    return F.when(values.isNotNull(), F.size(values)).otherwise(F.lit(0))


def native_rows(records: DataFrame, pipeline: PipelineConfig, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded rows and the ``native`` flag (see ``native_json``): one row per row
    change of a record decoded natively, one flagged row per record left to Python."""
    plan_list = list(plans)
    text = N.text_of(F.col("value"))
    located = records.select("topic", "partition", "offset", "timestamp", text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), ENVELOPE_DDL).alias("_m"))
    message = F.col("_m")
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plan_list))):
        plan_index = F.when(_matches(message, plan), F.lit(index)).otherwise(plan_index)
    planned = parsed.select("*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"))
    columns_schema = _columns_schema(plan_list)
    with_columns = planned.select(
        "*", F.when(F.col("_plan") >= 0, F.from_json(F.col("_text"), columns_schema, N.JSON_OPTIONS)).alias("_c")
    )

    plan = F.col("_plan")
    kind = F.upper(message["type"])
    op = None
    for name, code in ROW_TYPES.items():
        op = F.when(kind == name, F.lit(code)) if op is None else op.when(kind == name, F.lit(code))
    is_update = kind == "UPDATE"
    data, old = message["data"], message["old"]
    # Every container of the text is one the envelope accounts for (so no value holds nested JSON or a brace, and
    # nothing follows the message's closing brace, which Spark ignores and Python refuses).
    text_col = F.col("_text")
    braces = (
        1
        + _count(data)
        + _count(old)
        + F.when(message["mysqlType"].isNotNull(), 1).otherwise(0)
        + F.when(message["sqlType"].startswith("{"), 1).otherwise(0)
    )
    brackets = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("data", "old", "pkNames"))
    shaped = (
        text_col.startswith("{")
        & text_col.endswith("}")
        & (_occurrences(text_col, "{") == braces)
        & (_occurrences(text_col, "}") == braces)
        & (_occurrences(text_col, "[") == brackets)
        & (_occurrences(text_col, "]") == brackets)
    )
    checks = N.per_plan(plan, [_plan_checks(p, F.col("_c"), message, is_update) for p in plan_list], F.lit(False))
    envelope_ok = (
        (plan >= 0)
        & message.isNotNull()
        & message[N.CORRUPT_FIELD].isNull()
        & ~F.coalesce(message["isDdl"], F.lit(False))
        & message["type"].rlike("^[A-Za-z]+$")
        & op.isNotNull()
        & data.isNotNull()
        & (F.size(data) > 0)
        # a null row of `old` (Python reads it as no change) is left to Python: the structure count assumes none
        & ~F.coalesce(F.to_json(old).contains("[null") | F.to_json(old).contains(",null"), F.lit(False))
        & N.plain_escapes(text_col)
        & shaped
        & _numbers_as_written(text_col, message)
        & F.coalesce(checks, F.lit(False))
    )
    es = message["es"]
    message_level = with_columns.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        N.TOMBSTONE,
        N.TOMBSTONE_DETAIL,
        F.coalesce(envelope_ok, F.lit(False)).alias("_ok"),
        plan.alias("_plan"),
        message["database"].alias("source_db"),
        message["table"].alias("source_table"),
        op.alias("op"),
        old.alias("_old"),
        F.array(es.cast("decimal(38,0)"), message["id"].cast("decimal(38,0)")).alias("position"),
        F.when(es.between(MIN_MILLIS, MAX_MILLIS), F.timestamp_millis(es)).alias("event_time"),
        data.alias("_data"),
    )
    # The verdict is computed once per message, in its own projection: the rows are exploded from it.
    no_rows = F.array(F.lit(None).cast("map<string,string>"))
    message_level = message_level.select(
        "*", F.posexplode(F.when(F.col("_ok"), F.col("_data")).otherwise(no_rows))
    ).drop("_data")

    plan = F.col("_plan")
    op = F.col("op")
    binary_plans = [index for index, p in enumerate(plan_list) if p.binary]

    def converted(image: Column) -> Column:
        if not binary_plans:
            return image
        return N.per_plan(plan, [_as_base64(image, plan_list[i].binary) for i in binary_plans], image)

    row = F.col("col")
    old_row = F.coalesce(F.try_element_at(F.col("_old"), F.col("pos") + 1), F.create_map().cast("map<string,string>"))
    after = converted(row)
    before = (
        F.when(op == S.OP_UPDATE, converted(F.map_concat(row, old_row)))
        .when(op == S.OP_DELETE, after)
        .otherwise(F.lit(None).cast("map<string,string>"))
    )
    images = message_level.select("*", after.alias("_after"), before.alias("_before"))

    def key_of(image: Column) -> Column:
        keys = [F.to_json(F.array(*[image[name] for name in p.key_columns])) for p in plan_list]
        return N.per_plan(plan, keys, F.lit(None).cast("string"))

    after, before = F.col("_after"), F.col("_before")
    after_key, before_key = key_of(after), key_of(before)
    # An UPDATE of a primary-key column moves the row: the old key is deleted, else it would stay live.
    moved = (op == S.OP_UPDATE) & F.coalesce(after_key != before_key, F.lit(False))
    keyed = images.select(
        "*",
        after_key.alias("_after_key"),
        before_key.alias("_before_key"),
        F.explode(F.when(moved, F.array(F.lit(True), F.lit(False))).otherwise(F.array(F.lit(False)))).alias(
            "_move_delete"
        ),
    )
    move_delete = F.col("_move_delete")
    is_delete = move_delete | (F.col("op") == S.OP_DELETE)
    table_id = N.per_plan(plan, [F.lit(p.table_id) for p in plan_list], F.lit(None).cast("string"))
    key_columns = N.per_plan(plan, [_array_of(p.key_columns) for p in plan_list], F.lit(None).cast("array<string>"))
    column_types = N.per_plan(plan, [N.literal_map(p.types) for p in plan_list], F.lit(None).cast("map<string,string>"))
    out = {
        **{c: F.col(c) for c in ("topic", "partition", "offset")},
        N.NATIVE_FLAG: F.col("_ok"),
        "table_id": table_id,
        "source_db": F.col("source_db"),
        "source_schema": F.lit(None).cast("string"),
        "source_table": F.col("source_table"),
        "op": F.when(move_delete, F.lit(S.OP_DELETE)).otherwise(F.col("op")),
        "key": F.when(is_delete, F.col("_before_key")).otherwise(F.col("_after_key")),
        "key_columns": key_columns,
        "after": F.when(~is_delete, F.col("_after")),
        "before": F.col("_before"),
        "column_types": column_types,
        "position": F.col("position"),
        "event_time": F.col("event_time"),
        "row_index": F.coalesce(F.col("pos"), F.lit(0)),
        "format": F.lit(FORMAT_ID),
        "record_kind": F.lit(KIND_CHANGE),
        "control_kind": F.lit(None).cast("string"),
        "reason": F.lit(None).cast("string"),
        "detail": F.lit(None).cast("string"),
        "raw_key": F.lit(None).cast("binary"),
        "raw_value": F.lit(None).cast("binary"),
        "timestamp": F.col("timestamp"),
    }
    return keyed.select(*N.with_tombstones(out))


def native_layout(pipeline: PipelineConfig) -> bool:
    """Whether the source's layout is one the native path implements (the open-source one, declared or not)."""
    return layout_of(pipeline) != LAYOUT_LEGACY
