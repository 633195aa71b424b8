"""Huawei DRS JSON and JSON-C decoded by Spark's JSON reader: the native path of ``drs-json-mysql``, ``drs-json-c`` and
``drs-json-rdbms`` (see ``native_json``).

DRS writes Canal's envelope (``data``/``old`` arrays of row objects whose values are JSON strings), so this path builds
on ``canal_native``'s row checks: each message is parsed once with its images as arrays of ``map<string,string>``, the
tables of the input are sampled first and each becomes a :class:`TablePlan` (database, schema, table, the declared
types and ``pkNames``, as the Python decoder reads them: ``mysqlType`` then ``sqlType`` for the MySQL variants,
``columnType`` for RDBMS sources, the configured ``column_types`` over them), and the values of a plan's typed and key
columns are checked by one regular expression per image. A message is decoded natively as a whole or not at all.

The native path decodes INSERT, UPDATE, DELETE and INIT messages (``type``, else ``opType``) of a planned table whose
values pass their type's form (``native_forms``; a table with a binary or MySQL TIMESTAMP column, whose values DRS
writes in forms to convert, is left to Python), an UPDATE whose `old` rows keep every key value (a key change is
Python's), and Kafka tombstones. Everything else -- DDL, TRUNCATE, a DELETE without its row, a table without a plan,
a missing key value, a value its form does not vouch for, nested JSON (JSON text inside a string value is taken),
an escape Spark renders differently, JSON that is not compact, a number token anywhere but in es, id, ts and sqlType
-- goes through the Python decoder (``drs_json.decode_record``) unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.canal_native import (
    COLUMN_SEPARATOR,
    MAX_MILLIS,
    MIN_MILLIS,
    QUOTE_BLANK,
    array_of,
    columns_schema,
    count_of,
    declares_rows,
    first_plans,
    frequent_tables,
    number_members,
    value_form,
    values_pattern,
    values_text,
)
from cdcreplay.formats.envelopes.canal_layout import ROW_TYPES
from cdcreplay.formats.envelopes.drs_variants import Variant, declared_types
from cdcreplay.formats.routing import table_id_of
from cdcreplay.formats.wire import native_json as N

ENVELOPE_DDL = (
    "data array<map<string,string>>, old array<map<string,string>>, database string, `schema` string, "
    "`table` string, es bigint, id bigint, ts bigint, isDdl boolean, mysqlType map<string,string>, "
    "sqlType map<string,string>, columnType map<string,string>, pkNames array<string>, type string, opType string"
)
TABLE_DDL = (
    "database string, `schema` string, `table` string, isDdl boolean, mysqlType map<string,string>, "
    "sqlType map<string,string>, columnType map<string,string>, pkNames array<string>, type string, opType string"
)
# Types whose values DRS writes in a form the Python decoder converts (Java byte lists, epoch seconds, hex): Python's.
CONVERTED_TYPES = ("binary", "timestamp")
TYPE_MAPS = {"mysql": ("mysqlType", "sqlType"), "rdbms": ("columnType",)}


@dataclass(frozen=True)
class TablePlan:
    """One table as its messages declare it: identity, the maps its types come from (in order) and ``pkNames``."""

    db: str | None
    schema: str | None
    table: str
    type_maps: tuple[tuple[tuple[str, str], ...] | None, ...]  # per TYPE_MAPS name of the variant, as declared
    pk_names: tuple[str, ...] | None
    key_columns: tuple[str, ...]  # the configured primary key, else pkNames
    column_types: tuple[tuple[str, str], ...]  # declared, then configured over them: what routing writes

    @property
    def table_id(self) -> str:
        return table_id_of(self.db, self.schema, self.table)

    @property
    def types(self) -> dict[str, str]:
        return dict(self.column_types)

    @property
    def checked(self) -> list[str]:
        """The columns read column by column: every typed column and every key column."""
        typed = [name for name, spark_type in self.column_types if spark_type != "string"]
        return typed + [name for name in self.key_columns if name not in typed]


def table_plan(identity: tuple, type_maps: tuple, pk_names, pipeline: PipelineConfig, variant: Variant):
    """The plan of one sampled table declaration, or None when the native path leaves its records to Python."""
    db, schema, table = identity
    if not table:
        return None
    maps = dict(zip(TYPE_MAPS[variant.types_from], type_maps, strict=True))
    if any(entries is not None and any(v is None for _, v in entries) for entries in maps.values()):
        return None
    table_id = table_id_of(db, schema, table)
    configured = pipeline.tables.get(table_id)
    declared = declared_types({name: None if e is None else dict(e) for name, e in maps.items()}, variant)
    types = {**declared, **(dict(configured.column_types) if configured is not None else {})}
    if any(t in CONVERTED_TYPES or value_form(t) is None for t in types.values()):
        return None
    if pk_names is not None and any(name is None for name in pk_names):
        return None
    pk = None if pk_names is None else tuple(pk_names)
    keys = tuple(configured.primary_key) if configured is not None and configured.primary_key else pk
    if not keys or len(set(keys)) != len(keys) or any(COLUMN_SEPARATOR in name for name in keys):
        return None
    return TablePlan(db, schema, table, tuple(maps.values()), pk, keys, tuple(types.items()))


def _entries(value_map: Column) -> Column:
    return F.when(value_map.isNotNull(), F.arrays_zip(F.map_keys(value_map), F.map_values(value_map)))


def table_plans(records: DataFrame, pipeline: PipelineConfig, variant: Variant, every: int = 1) -> list[TablePlan]:
    """The plans of the most frequent tables of ``records``, of about one record in ``every``
    (``native_json.sampled``)."""
    message = F.col("m")
    map_names = TYPE_MAPS[variant.types_from]
    identity = (
        message["database"].alias("db"),
        message["schema"].alias("schema"),
        message["table"].alias("table"),
        *[_entries(message[name]).alias(name) for name in map_names],
        message["pkNames"].alias("pk"),
    )
    kind = F.coalesce(message["type"], message["opType"])
    found = frequent_tables(records, every, TABLE_DDL, declares_rows(message, kind), identity)

    def plan_of(row: Row) -> TablePlan | None:
        type_maps = tuple(
            None if row[name] is None else tuple((entry[0], entry[1]) for entry in row[name]) for name in map_names
        )
        return table_plan((row.db, row.schema, row.table), type_maps, row.pk, pipeline, variant)

    return first_plans(plan_of(row) for row in found)


# --- per-plan expressions ----------------------------------------------------------------------------------------


def _matches(message: Column, plan: TablePlan, variant: Variant) -> Column:
    """The message declares the plan's table exactly (so the plan's types are the ones the Python decoder uses)."""
    pk = message["pkNames"]
    pk_same = pk.isNull() if plan.pk_names is None else (pk == array_of(plan.pk_names))
    same = (
        message["database"].eqNullSafe(F.lit(plan.db).cast("string"))
        & message["schema"].eqNullSafe(F.lit(plan.schema).cast("string"))
        & (message["table"] == F.lit(plan.table))
        & F.coalesce(pk_same, F.lit(False))
    )
    for name, entries in zip(TYPE_MAPS[variant.types_from], plan.type_maps, strict=True):
        declared = message[name]
        if entries is None:
            same = same & declared.isNull()
        else:
            keys, values = array_of([k for k, _ in entries]), array_of([v for _, v in entries])
            same = same & F.coalesce((F.map_keys(declared) == keys) & (F.map_values(declared) == values), F.lit(False))
    return same


def _plan_checks(plan: TablePlan, columns: Column, rows_field: str, is_update: Column) -> Column:
    """Whether every row of the message is one the native path decodes exactly as the Python decoder (``columns``:
    the plan's checked columns of `data` and `old`, row by row): each row's values of their type's form and its key
    values present; for an UPDATE, `old` (the full before image) of their forms too and with the same key values
    as `data`, row by row (a key change, or an `old` of another length, is Python's)."""
    ok = values_text(columns[rows_field], plan.checked).rlike(values_pattern(plan, key_required=True))
    old_ok = values_text(columns["old"], plan.checked).rlike(values_pattern(plan, key_required=False))
    same_keys = values_text(columns["old"], list(plan.key_columns)) == values_text(
        columns["data"], list(plan.key_columns)
    )
    return ok & (~is_update | columns["old"].isNull() | (old_ok & same_keys))


def _numbers_as_written(text: Column, message: Column) -> Column:
    """No number token is read where the Python decoder reads text: in compact JSON (no closing quote followed by
    blank space) every member's value follows `":` directly, and the members holding a number are es, id, ts and
    the JDBC codes of sqlType, each read as the message wrote it. (Both decoders render a number token read as text
    as Java 17 prints it; this keeps the native path off any other, whatever the JVM.)"""
    expected = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("es", "id", "ts"))
    expected = expected + F.coalesce(F.size(message["sqlType"]), F.lit(0))
    return ~text.rlike(QUOTE_BLANK) & (number_members(text) == expected)


def native_rows(records: DataFrame, pipeline: PipelineConfig, variant: Variant, plans: list[TablePlan]) -> DataFrame:
    """Every record with its natively decoded rows and the ``native`` flag (see ``native_json``): one row per row
    change of a record decoded natively, one flagged row per record left to Python."""
    plan_list = list(plans)
    text = N.text_of(F.col("value"))
    located = records.select("topic", "partition", "offset", "timestamp", text.alias("_text"), *N.tombstone_columns())
    parsed = located.select("*", N.parse(F.col("_text"), ENVELOPE_DDL).alias("_m"))
    message = F.col("_m")
    plan_index = F.lit(-1)
    for index, plan in reversed(list(enumerate(plan_list))):
        plan_index = F.when(_matches(message, plan, variant), F.lit(index)).otherwise(plan_index)
    planned = parsed.select("*", F.coalesce(plan_index, F.lit(-1)).alias("_plan"))
    rows_schema = columns_schema(plan_list)
    with_columns = planned.select(
        "*", F.when(F.col("_plan") >= 0, F.from_json(F.col("_text"), rows_schema, N.JSON_OPTIONS)).alias("_c")
    )

    plan = F.col("_plan")
    kind_text = F.coalesce(message["type"], message["opType"])
    kind = F.upper(kind_text)
    op = None
    for name, code in ROW_TYPES.items():
        op = F.when(kind == name, F.lit(code)) if op is None else op.when(kind == name, F.lit(code))
    is_update, is_delete = kind == "UPDATE", kind == "DELETE"
    data, old = message["data"], message["old"]
    # The rows of a message: `data`, but a DELETE's in `old` for DRS JSON (`data` for JSON-C).
    delete_rows = variant.delete_rows
    rows = F.when(is_delete, message[delete_rows]).otherwise(data) if delete_rows != "data" else data
    text_col = F.col("_text")
    # The message's objects: itself, its rows and its type maps; its arrays: data, old and pkNames.
    braces = 1 + count_of(data) + count_of(old)
    braces = braces + sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in TYPE_MAPS["mysql"])
    braces = braces + F.when(message["columnType"].isNotNull(), 1).otherwise(0)
    brackets = sum(F.when(message[name].isNotNull(), 1).otherwise(0) for name in ("data", "old", "pkNames"))
    # A string value holding JSON text is counted without its content.
    with_columns = N.with_shape_verdict(
        with_columns,
        lambda text: N.containers_accounted_for(text, braces, brackets) & _numbers_as_written(text, message),
        text_col,
    )
    shaped = F.col(N.SHAPED)

    def plan_checks(p: TablePlan) -> Column:
        on_data = _plan_checks(p, F.col("_c"), "data", is_update)
        if delete_rows == "data":
            return on_data
        return F.when(is_delete, _plan_checks(p, F.col("_c"), delete_rows, is_update)).otherwise(on_data)

    checks = N.per_plan(plan, [plan_checks(p) for p in plan_list], F.lit(False))
    envelope_ok = (
        (plan >= 0)
        & message.isNotNull()
        & message[N.CORRUPT_FIELD].isNull()
        & ~F.coalesce(message["isDdl"], F.lit(False))
        & kind_text.rlike("^[A-Za-z]+\\z")
        & op.isNotNull()
        & rows.isNotNull()
        & (F.size(rows) > 0)
        & N.plain_escapes(text_col)
        & shaped
        & F.coalesce(checks, F.lit(False))
    )
    es, serial = message["es"], message["id"]
    message_level = with_columns.select(
        *N.CARRIED,
        F.coalesce(envelope_ok, F.lit(False)).alias("_ok"),
        plan.alias("_plan"),
        message["database"].alias("source_db"),
        message["schema"].alias("source_schema"),
        message["table"].alias("source_table"),
        op.alias("op"),
        F.when(is_update, old).alias("_old"),
        # DRS's event serial `id` is the one order key; es is the event time, for display (drs_json).
        F.when(serial.isNull(), F.array().cast("array<decimal(38,0)>"))
        .otherwise(F.array(serial.cast("decimal(38,0)")))
        .alias("position"),
        F.when(es.between(MIN_MILLIS, MAX_MILLIS), F.timestamp_millis(es)).alias("event_time"),
        rows.alias("_rows"),
    )
    # The verdict is computed once per message, in its own projection: the rows are exploded from it.
    no_rows = F.array(F.lit(None).cast("map<string,string>"))
    message_level = message_level.select(
        "*", F.posexplode(F.when(F.col("_ok"), F.col("_rows")).otherwise(no_rows))
    ).drop("_rows")

    plan, op, row = F.col("_plan"), F.col("op"), F.col("col")
    is_delete = op == S.OP_DELETE
    # An UPDATE's `old[i]` is its full before image (none past the end of a shorter `old`); a DELETE names its row.
    before = F.when(op == S.OP_UPDATE, F.try_element_at(F.col("_old"), F.col("pos") + 1)).when(is_delete, row)

    def of_plan(values: list[Column], data_type: str) -> Column:
        return N.per_plan(plan, values, F.lit(None).cast(data_type))

    key = of_plan([F.to_json(F.array(*[row[name] for name in p.key_columns])) for p in plan_list], "string")
    out = N.changelog_row(
        variant.format_id,
        native=F.col("_ok"),
        table_id=of_plan([F.lit(p.table_id) for p in plan_list], "string"),
        source_db=F.col("source_db"),
        source_schema=F.col("source_schema"),
        source_table=F.col("source_table"),
        op=op,
        key=key,
        key_columns=of_plan([array_of(p.key_columns) for p in plan_list], "array<string>"),
        after=F.when(~is_delete, row),
        before=before,
        column_types=of_plan([N.literal_map(p.types) for p in plan_list], "map<string,string>"),
        position=F.col("position"),
        event_time=F.col("event_time"),
        row_index=F.coalesce(F.col("pos"), F.lit(0)),
    )
    return message_level.select(*N.with_tombstones(out))
