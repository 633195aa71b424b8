"""Canal JSON decoded by Spark's JSON reader: the native path of ``canal-json`` (see ``native_json``).

Each message is parsed once into its envelope, with the row images `data` and `old` as arrays of
``map<string,string>``: Canal and DTS write every value as a JSON string (or null), which a string map holds exactly.
A number token where a string is expected is read by Spark through a double when it has a fraction or an exponent
(``1.50`` -> ``1.5``) while the Python decoder keeps its text: a record holding a number token anywhere but in
es, id, ts and sqlType is left to Python (its members are counted by what their value starts with, which needs the
compact JSON Canal and DTS write: other layouts go to Python too).

The tables of the input are sampled first (a light parse of a sample of the records, on the driver: database, table,
``mysqlType`` and ``pkNames``), and each becomes a :class:`TablePlan`: its columns, their Spark types, its key columns
and the native check of each type, which accepts a subset of what ``value_checks`` accepts. A record is of a plan when
its database, table, ``mysqlType`` (names, types and their order) and ``pkNames`` equal the plan's. The values of the
plan's typed and key columns are read a second time (a struct per row) and joined, across all rows of the message,
into one text per image that one regular expression of the plan checks: a message is decoded natively as a whole or
not at all, never row by row.

The native path decodes INSERT, UPDATE, DELETE and INIT messages of the open-source layout (option
``legacy_swapped`` false or unset: `data` holds the rows, an UPDATE's before image is ``data[i]`` overlaid with
``old[i]``, an UPDATE that changes the key also deletes the old key), and Kafka tombstones. Everything else -- DDL
and TRUNCATE messages, the legacy layout (every record of a source declared ``legacy_swapped: true``), a DELETE
with its row in `old`, a table without a plan (more than MAX_NATIVE_TABLES tables, a decimal wider than Spark's,
configured column types), a missing key value, a value its check does not vouch for, nested JSON (rendered
differently; JSON text inside a string value is taken, its content not counted: ``native_json.outside_strings``), an
escape Spark renders differently, a number token where text is read, JSON that is not compact -- goes through the
Python decoder (``canal_json.decode_record``) unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.envelopes.canal_layout import FORMAT_ID, LAYOUT_LEGACY, ROW_TYPES, layout_of
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.values.native_forms import (
    ANY_TEXT,
    MAX_DECIMAL_PRECISION,
    VALUE_FORMS,
    decimal_form,
    decimal_type,
)
from cdcreplay.formats.wire import native_json as N
from cdcreplay.value_types import mysql_type_name_to_spark

# At most this many tables get a native plan (the most frequent in the sample); records of others go to Python.
# Every plan adds a few expressions per column to one generated projection: bounded, so that its code stays far
# below the JVM's 64 KB method limit.
MAX_NATIVE_TABLES = 16
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
# A closing quote followed by blank space: in compact JSON only inside a string (text or an escaped quote).
QUOTE_BLANK = '"[ \\t\\n\\r]'
# Join a column's values, stand for NULL, and join the columns: no value holds them (raw, they are not JSON; escaped,
# native_json refuses them).
SEPARATOR, NULL_MARK, COLUMN_SEPARATOR = "\u0001", "\u0002", "\u0003"
# Source event time in milliseconds that the Python decoder can hold (years 1..9999); outside, both write NULL.
MIN_MILLIS, MAX_MILLIS = -62135596800000, 253402300799999
# Canal prints binary columns as ISO-8859-1 text of the bytes (``_as_base64`` converts it): every character one byte.
LATIN1_BYTES = "[\\x00\\x04-\\xff]*"


def value_form(spark_type: str) -> str | None:
    """The regular expression a value of ``spark_type`` must match to be decoded natively; None for a type without
    a native check (its plan is left to Python)."""
    decimal = decimal_type(spark_type)
    if decimal is not None:
        precision, scale = decimal
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
            return None
        return decimal_form(precision, scale)
    if spark_type == "string":
        return ANY_TEXT
    if spark_type == "binary":
        return LATIN1_BYTES
    return VALUE_FORMS.get(spark_type)


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
    if any(value_form(mysql_type_name_to_spark(mysql_type)) is None for mysql_type in types):
        return None
    if pk_names is not None and any(name is None for name in pk_names):
        return None
    pk = None if pk_names is None else tuple(pk_names)
    keys = tuple(configured.primary_key) if configured is not None and configured.primary_key else pk
    if not keys or any(not re.match(PLAIN_NAME, name) for name in keys) or len(set(keys)) != len(keys):
        return None
    return TablePlan(db, table, mysql_types, pk, keys)


def table_plans(records: DataFrame, pipeline: PipelineConfig, every: int = 1) -> list[TablePlan]:
    """The plans of the most frequent tables of ``records``, of about one record in ``every``
    (``native_json.sampled``)."""
    message = F.col("m")
    identity = (
        message["database"].alias("db"),
        message["table"].alias("table"),
        F.map_keys(message["mysqlType"]).alias("names"),
        F.map_values(message["mysqlType"]).alias("types"),
        message["pkNames"].alias("pk"),
    )
    found = frequent_tables(records, every, TABLE_DDL, declares_rows(message, message["type"]), identity)
    return first_plans(table_plan(row.db, row.table, row.names, row.types, row.pk, pipeline) for row in found)


def declares_rows(message: Column, kind: Column) -> Column:
    """Whether a parsed message (Canal's envelope, as DRS JSON writes it too) is a row change of one table: a plan is
    made only for the tables of such messages."""
    return (
        message.isNotNull()
        & message[N.CORRUPT_FIELD].isNull()
        & F.upper(kind).isin(*ROW_TYPES)
        & ~F.coalesce(message["isDdl"], F.lit(False))
    )


def frequent_tables(
    records: DataFrame, every: int, ddl: str, declares: Column, identity: tuple[Column, ...]
) -> list[Row]:
    """The tables (``identity``: columns of the message ``m`` parsed with ``ddl``) of the messages ``declares`` holds
    for, most frequent first, in about one record in ``every``: at most four times MAX_NATIVE_TABLES of them."""
    # Which records declare a table is a grouping key, not a filter: Spark would push a filter below the parse and
    # parse each record once more per condition.
    found = (
        N.sampled(records, every)
        .select(N.parse(N.text_of(F.col("value")), ddl).alias("m"))
        .groupBy(F.coalesce(declares, F.lit(False)).alias("declares_table"), *identity)
        .count()
        .orderBy(F.desc("declares_table"), F.desc("count"))
        .limit(4 * MAX_NATIVE_TABLES)
        .collect()
    )
    return [row for row in found if row.declares_table]


def first_plans(plans: Iterable[TablePlan | None]) -> list[TablePlan]:
    """The first MAX_NATIVE_TABLES plans made, in order (a table without a plan is decoded in Python)."""
    return list(islice((plan for plan in plans if plan is not None), MAX_NATIVE_TABLES))


# --- per-plan expressions ----------------------------------------------------------------------------------------


def array_of(values) -> Column:
    return F.array(*[F.lit(v) for v in values]).cast("array<string>")


def _matches(message: Column, plan: TablePlan) -> Column:
    """The message declares the plan's table exactly (so the plan's types are the ones the Python decoder uses)."""
    names = [name for name, _ in plan.mysql_types]
    types = [mysql_type for _, mysql_type in plan.mysql_types]
    pk = message["pkNames"]
    pk_same = pk.isNull() if plan.pk_names is None else (pk == array_of(plan.pk_names))
    return (
        message["database"].eqNullSafe(F.lit(plan.db).cast("string"))
        & (message["table"] == F.lit(plan.table))
        & (F.map_keys(message["mysqlType"]) == array_of(names))
        & (F.map_values(message["mysqlType"]) == array_of(types))
        & F.coalesce(pk_same, F.lit(False))
    )


def values_text(rows: Column, names: list[str]) -> Column:
    """The values of the columns ``names`` across ``rows`` (row by row, as structs) as one text: a column's values
    joined by SEPARATOR with NULL as NULL_MARK, the columns joined by COLUMN_SEPARATOR."""
    parts = []
    for name in names:
        parts += [F.lit(COLUMN_SEPARATOR)] * bool(parts) + [F.array_join(rows[name], SEPARATOR, NULL_MARK)]
    return F.concat(*parts)


def values_pattern(plan, key_required: bool) -> str:
    """The regular expression :func:`_values_text` of the plan's checked columns must match: each value of its type's
    form or NULL (a key column's never NULL when ``key_required``). A value must end at a separator (the lookahead),
    so the repetition of a column's values never needs to give one back: it is possessive, which keeps Java's matcher
    from stacking a backtracking state per value. ``plan``: a table plan with ``checked``, ``types`` and
    ``key_columns`` (DRS JSON's too, ``drs_native``)."""
    ends = f"(?=[{SEPARATOR}{COLUMN_SEPARATOR}]|\\z)"
    columns = []
    for name in plan.checked:
        form = value_form(plan.types.get(name, "string"))
        value = f"(?:{form}){ends}" if key_required and name in plan.key_columns else f"(?:{form}|{NULL_MARK}){ends}"
        columns.append(f"{value}(?:{SEPARATOR}{value})*+")
    return "^" + COLUMN_SEPARATOR.join(columns) + "\\z"  # \z: Java's $ also matches before a final line break


def _plan_checks(plan: TablePlan, columns: Column, message: Column, is_update: Column) -> Column:
    """Whether every row of the message is one the native path decodes exactly as the Python decoder (``columns``:
    the plan's checked columns of `data` and `old`, row by row). One regular expression over all of a message's
    values per image, so that a plan costs a few expressions, whatever its number of columns: every plan's check
    sits in one generated projection, which must stay below the JVM's 64 KB method limit."""
    # A key value missing from a row (or a null row) would be a missing_key quarantine in Python.
    ok = values_text(columns["data"], plan.checked).rlike(values_pattern(plan, key_required=True))
    old_json = F.to_json(message["old"])
    for name in plan.key_columns:
        # `old` naming a key column with null says the before image had no key: Python quarantines the move.
        ok = ok & ~(is_update & F.coalesce(old_json.contains(f'"{name}":null'), F.lit(False)))
    # `old` is read only for an UPDATE (its values become the before image's); a column it does not name is NULL.
    old_ok = values_text(columns["old"], plan.checked).rlike(values_pattern(plan, key_required=False))
    return ok & (~is_update | message["old"].isNull() | old_ok)


def columns_schema(plans: list[TablePlan]) -> StructType:
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


# A member whose value does not start as a string, null, object, array or boolean does: a number token.
NUMBER_MEMBER = '":[^"n{\\[tf]'


def number_members(text: Column) -> Column:
    """Members written `"name":<number>` in compact JSON (an upper bound: text inside a string can only add)."""
    return F.regexp_count(text, F.lit(NUMBER_MEMBER))


def _numbers_as_written(text: Column, message: Column) -> Column:
    """No number token is read where the Python decoder reads text, without reading each token's digits
    (``native_json.plain_numbers``): in compact JSON (no closing quote followed by blank space) every member's value
    follows `":` directly, and the only members holding a number are es, id, ts and those of sqlType (which neither
    path reads; without an escape, its text as Spark renders it counts its members as the message does). An integer
    token would read the same on both paths, but any number elsewhere is left to Python: rare enough."""
    # One search for the four blanks: a substring search per blank stops at every quote of the text.
    compact = ~text.rlike(QUOTE_BLANK)
    sql_type = message["sqlType"]
    expected = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("es", "id", "ts"))
    expected = expected + F.coalesce(number_members(sql_type), F.lit(0))
    plain_sql_type = sql_type.isNull() | ~sql_type.contains("\\")
    return compact & plain_sql_type & (number_members(text) == expected)


def count_of(values: Column) -> Column:
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
    rows_schema = columns_schema(plan_list)
    with_columns = planned.select(
        "*", F.when(F.col("_plan") >= 0, F.from_json(F.col("_text"), rows_schema, N.JSON_OPTIONS)).alias("_c")
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
        + count_of(data)
        + count_of(old)
        + F.when(message["mysqlType"].isNotNull(), 1).otherwise(0)
        + F.when(message["sqlType"].startswith("{"), 1).otherwise(0)
    )
    brackets = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("data", "old", "pkNames"))
    # A string value holding JSON text (a MySQL json column) is counted without its content.
    with_columns = N.with_shape_verdict(
        with_columns,
        lambda text: N.containers_accounted_for(text, braces, brackets) & _numbers_as_written(text, message),
        text_col,
    )
    shaped = F.col(N.SHAPED)
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
        & F.coalesce(checks, F.lit(False))
    )
    es = message["es"]
    message_level = with_columns.select(
        *N.CARRIED,
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
    key_columns = N.per_plan(plan, [array_of(p.key_columns) for p in plan_list], F.lit(None).cast("array<string>"))
    column_types = N.per_plan(plan, [N.literal_map(p.types) for p in plan_list], F.lit(None).cast("map<string,string>"))
    out = N.changelog_row(
        FORMAT_ID,
        native=F.col("_ok"),
        table_id=table_id,
        source_db=F.col("source_db"),
        source_schema=F.lit(None).cast("string"),
        source_table=F.col("source_table"),
        op=F.when(move_delete, F.lit(S.OP_DELETE)).otherwise(F.col("op")),
        key=F.when(is_delete, F.col("_before_key")).otherwise(F.col("_after_key")),
        key_columns=key_columns,
        after=F.when(~is_delete, F.col("_after")),
        before=F.col("_before"),
        column_types=column_types,
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.coalesce(F.col("pos"), F.lit(0)),
    )
    return keyed.select(*N.with_tombstones(out))


def native_layout(pipeline: PipelineConfig) -> bool:
    """Whether the source's layout is one the native path implements (the open-source one, declared or not)."""
    return layout_of(pipeline) != LAYOUT_LEGACY
