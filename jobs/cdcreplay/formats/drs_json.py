"""Huawei Cloud DRS JSON and JSON-C for relational sources (formats.md sections c1-c3). Native Spark throughout.

Three registered variants (each a two-line module naming its ``Variant``: drs_json_mysql, drs_json_c,
drs_json_rdbms) share one canal-like envelope (``data``/``old`` arrays of row objects whose values are JSON
strings, ``type`` INSERT/UPDATE/DELETE/DDL, full sync ``INIT``/``INIT_DDL``, ``id``, ``es``, ``pkNames``):

  drs-json-mysql   MySQL / GaussDB(for MySQL), "JSON": types from ``mysqlType`` (``sqlType``, JDBC codes, for a column
                   ``mysqlType`` lacks); an UPDATE's ``old[i]`` is the FULL before image; a DELETE's row is in ``old``.
  drs-json-c       MySQL / GaussDB(for MySQL), "JSON-C": as above, but a DELETE's row is in ``data`` and MySQL TIMESTAMP
                   values are wall-clock text (read in option ``timestamp_zone``, default UTC).
  drs-json-rdbms   Oracle / PostgreSQL / GaussDB / SQL Server: types from ``columnType`` (names without length; empty
                   for Oracle and SQL Server: declare ``tables.<t>.column_types``), ``schema`` is part of the table id,
                   ``opType`` mirrors ``type``, ``pkNames`` may be null (declare ``tables.<t>.primary_key``).

Semantics (the same for the three):
- ``INIT`` rows are snapshot rows; ``INIT_DDL`` and DDL (``isDdl``) go to the control log -- except a DDL whose SQL is
  ``TRUNCATE``, which empties the table (a changelog ``truncate``).
- An UPDATE whose before and after images differ in a key column moves the row: a delete of the old key, then the
  update of the new key (the vendor's own MySQL sample is such an update: ``id`` 103 -> 104).
- A DELETE without its row image (``old`` for JSON, ``data`` for JSON-C) is quarantined (``missing_image``).
- Order: ``id`` alone, DRS's event serial number, monotonic per task. ``es`` is never used: MySQL stamps a binlog event
  with its statement's start (a long transaction commits after shorter, later ones), and for PostgreSQL ``es`` is the
  commit time of the *previous* transaction. ``es`` is kept as the event time, for display.
- Table names are kept verbatim, trailing spaces included (the vendor sample's table is ``"test "``).

Values -> canonical text (what ``CAST(text AS <type>)`` reads back):
  MySQL binary/varbinary/blob   Java signed-byte list ``"[106, -1]"`` (``"[]"`` empty) -> base64 of the bytes
  MySQL timestamp (JSON)        epoch seconds with up to 6 fraction digits ``"1624614713.201"`` -> UTC
                                ``yyyy-MM-dd HH:mm:ss.ffffff`` (Spark ``timestamp``)
  MySQL timestamp (JSON-C)      ``yyyy-mm-dd hh:mm:ss[.f]`` in ``timestamp_zone`` -> the same UTC text
  MySQL float/double            Java notation (``"1.2510357E7"``) is read by CAST as it is
  MySQL decimal                 exact text; ``mysqlType`` carries no precision here, so it stays a string unless
                                ``column_types`` declares ``decimal(p,s)``; likewise ``tinyint`` is int, not boolean
  PostgreSQL/GaussDB bytea      hex (``"62797465..."``, an optional ``\\x`` prefix accepted) -> base64
  timestamptz                   ``"2010-01-01 14:30:00+08"`` -> UTC text (Spark ``timestamp``)
  boolean, ranges, json(b), bit kept as text (boolean reads back with CAST; the others are strings)
A value present in the message that its type cannot decode (a byte out of range, a malformed epoch, odd hex) sends the
record to quarantine (``bad_value``) naming the columns: never a silent NULL.

MySQL type names map with :func:`cdcreplay.value_types.mysql_type_to_spark`; PostgreSQL/GaussDB names with
:func:`rdbms_type_to_spark`; JDBC codes with :func:`jdbc_code_to_spark` (all documented in their docstrings).
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats.canal_json import DDL_TYPES, ROW_TYPES
from cdcreplay.formats.common import (
    KIND_CHANGE,
    TEXT_MAP,
    control,
    entry,
    finish,
    quarantine,
    single,
    text_payload,
    unreadable_json,
)
from cdcreplay.value_types import let, mysql_type_to_spark, safe_timestamp_micros, safe_timestamp_millis

FORMAT_MYSQL = "drs-json-mysql"
FORMAT_JSON_C = "drs-json-c"
FORMAT_RDBMS = "drs-json-rdbms"

VALUE_SCHEMA = (
    "data array<map<string,string>>, old array<map<string,string>>, database string, schema string, table string, "
    "type string, opType string, isDdl boolean, pkNames array<string>, mysqlType map<string,string>, "
    "columnType map<string,string>, sqlType map<string,string>, dbType string, sql string, es bigint, ts bigint, "
    "id bigint, _corrupt_record string"
)
ROWS = "array<map<string,string>>"
TIMESTAMP_TEXT = "yyyy-MM-dd HH:mm:ss.SSSSSS"


@dataclass(frozen=True)
class Variant:
    """What differs between the registered DRS JSON formats."""

    format_id: str
    delete_rows: str  # the array holding a DELETE's row: "old" (JSON) or "data" (JSON-C)
    types_from: str  # "mysql" (mysqlType, then sqlType) or "rdbms" (columnType)
    mysql_timestamp: str  # MySQL TIMESTAMP rendering: "epoch" seconds (JSON) or "wall_clock" text (JSON-C)


VARIANTS = {
    FORMAT_MYSQL: Variant(FORMAT_MYSQL, "old", "mysql", "epoch"),
    FORMAT_JSON_C: Variant(FORMAT_JSON_C, "data", "mysql", "wall_clock"),
    FORMAT_RDBMS: Variant(FORMAT_RDBMS, "old", "rdbms", "epoch"),
}


# --- types ---------------------------------------------------------------------------------------------------------


def jdbc_code_to_spark(code: Column) -> Column:
    """``sqlType`` (java.sql.Types) -> Spark type, used only for a column ``mysqlType`` does not name.

    Codes whose meaning DRS bends are strings: the vendor sample reports DATETIME as 94 and TIMESTAMP as 93, and
    DECIMAL (3) comes without precision. TINYINT(-6)/SMALLINT(5)/INTEGER(4) int, BIGINT(-5) bigint, REAL(7) float,
    FLOAT(6)/DOUBLE(8) double, BOOLEAN(16) boolean, DATE(91) date, BINARY(-2)/VARBINARY(-3)/LONGVARBINARY(-4)/BLOB(2004)
    binary, everything else string.
    """
    c = code.try_cast("int")
    return (
        F.when(c.isin(-6, 5, 4), F.lit("int"))
        .when(c == -5, F.lit("bigint"))
        .when(c == 7, F.lit("float"))
        .when(c.isin(6, 8), F.lit("double"))
        .when(c == 16, F.lit("boolean"))
        .when(c == 91, F.lit("date"))
        .when(c.isin(-2, -3, -4, 2004), F.lit("binary"))
        .otherwise(F.lit("string"))
    )


def rdbms_type_to_spark(type_name: Column) -> Column:
    """A ``columnType`` name (PostgreSQL / GaussDB spelling, no length) -> Spark type.

    boolean/bool boolean; smallint/int2/tinyint smallint; integer/int/int4/serial int; bigint/int8/bigserial bigint;
    real/float4 float; double precision/float8 double; date date; timestamp [without time zone] timestamp_ntz;
    timestamp with time zone/timestamptz timestamp; bytea binary. numeric/decimal (no precision here), money, time,
    interval, character types, json/jsonb, ranges, bit, uuid, xml and anything else: string, exact text. An empty
    name (Oracle, SQL Server) is a string too; ``tables.<t>.column_types`` declares the real type.
    """
    t = F.lower(F.trim(type_name))
    return (
        F.when(t.isin("boolean", "bool"), F.lit("boolean"))
        .when(t.isin("smallint", "int2", "tinyint", "smallserial"), F.lit("smallint"))
        .when(t.isin("integer", "int", "int4", "serial"), F.lit("int"))
        .when(t.isin("bigint", "int8", "bigserial"), F.lit("bigint"))
        .when(t.isin("real", "float4"), F.lit("float"))
        .when(t.isin("double precision", "float8"), F.lit("double"))
        .when(t == "date", F.lit("date"))
        .when(t.isin("timestamp", "timestamp without time zone"), F.lit("timestamp_ntz"))
        .when(t.isin("timestamp with time zone", "timestamptz"), F.lit("timestamp"))
        .when(t == "bytea", F.lit("binary"))
        .otherwise(F.lit("string"))
    )


def _declared_types(m: Column, variant: Variant) -> Column:
    empty = F.create_map().cast(TEXT_MAP)
    if variant.types_from == "rdbms":
        return F.transform_values(F.coalesce(m["columnType"], empty), lambda _c, t: rdbms_type_to_spark(t))
    mysql_types = F.coalesce(m["mysqlType"], empty)
    by_code = F.transform_values(
        F.map_filter(F.coalesce(m["sqlType"], empty), lambda c, _t: ~F.map_contains_key(mysql_types, c)),
        lambda _c, code: jdbc_code_to_spark(code),
    )
    return F.map_concat(by_code, F.transform_values(mysql_types, lambda _c, t: mysql_type_to_spark(t)))


# --- config lookups (finish applies the same config afterwards; the decoder needs it earlier) ----------------------


def table_id_of(db: Column, schema: Column, table: Column) -> Column:
    """The table id ``finish`` derives: the non-empty parts joined by dots; NULL without a table name."""
    parts = [F.nullif(part, F.lit("")) for part in (db, schema, table)]
    return F.when(parts[2].isNotNull(), F.concat_ws(".", *parts))


def _config_map(entries: dict[str, Column], value_type: str) -> Column:
    if not entries:
        return F.create_map().cast(f"map<string,{value_type}>")
    return F.create_map(*[x for key in sorted(entries) for x in (F.lit(key), entries[key])])


def configured_keys(pipeline: PipelineConfig) -> Column:
    """map<table id, key columns> of ``tables.<t>.primary_key``."""
    return _config_map(
        {tid: F.array(*[F.lit(c) for c in t.primary_key]) for tid, t in pipeline.tables.items() if t.primary_key},
        "array<string>",
    )


def configured_types(pipeline: PipelineConfig) -> Column:
    """map<table id, map<column, Spark type>> of ``tables.<t>.column_types``."""
    return _config_map(
        {
            tid: F.create_map(*[x for c, ty in sorted(t.column_types.items()) for x in (F.lit(c), F.lit(ty))])
            for tid, t in pipeline.tables.items()
            if t.column_types
        },
        TEXT_MAP,
    )


# --- values --------------------------------------------------------------------------------------------------------

JAVA_BYTE_LIST = r"^\[\s*(-?[0-9]{1,3}(\s*,\s*-?[0-9]{1,3})*)?\s*\]$"


def plain_base64(data: Column) -> Column:
    """Base64 in one line: Spark's base64() breaks its output every 76 characters (MIME) unless configured not to."""
    return F.regexp_replace(F.base64(data), "[\r\n]", "")


def java_bytes_to_base64(value: Column) -> Column:
    """``"[106, -1, 0]"`` (Java's Arrays.toString of a byte[]) -> base64; NULL unless every item is in -128..127."""
    inner = F.regexp_extract(value, r"^\[\s*(.*?)\s*\]$", 1)
    items = F.when(inner == "", F.array().cast("array<int>")).otherwise(
        F.transform(F.split(inner, r"\s*,\s*"), lambda item: item.try_cast("int"))
    )
    return let(
        items,
        lambda byte_values: F.when(
            value.rlike(JAVA_BYTE_LIST) & F.forall(byte_values, lambda b: b.between(-128, 127)),
            plain_base64(
                F.unhex(F.array_join(F.transform(byte_values, lambda b: F.lpad(F.hex(F.pmod(b, 256)), 2, "0")), ""))
            ),
        ),
    )


def hex_to_base64(value: Column) -> Column:
    """PostgreSQL bytea hex output (``"62797465"``, optional ``\\x``) -> base64; NULL for anything else."""
    digits = F.regexp_replace(value, r"^\\x", "")
    return F.when(digits.rlike(r"^([0-9a-fA-F]{2})*$"), plain_base64(F.unhex(digits)))


def epoch_seconds_to_text(value: Column) -> Column:
    """``"1624614713.201"`` (MySQL TIMESTAMP as DRS JSON prints it) -> UTC timestamp text; NULL if malformed."""
    micros = F.try_multiply(value.try_cast("decimal(20,6)"), F.lit(1_000_000)).try_cast("bigint")
    return F.when(
        value.rlike(r"^-?[0-9]{1,12}(\.[0-9]{1,6})?$"), F.date_format(safe_timestamp_micros(micros), TIMESTAMP_TEXT)
    )


def zoned_text_to_utc(value: Column, zone: str | None) -> Column:
    """Timestamp text -> UTC timestamp text. With ``zone``, the text is a wall clock there; else an offset in the
    text (``+08``) or UTC applies."""
    parsed = value.try_cast("timestamp")
    if zone and zone != "UTC":
        parsed = F.to_utc_timestamp(parsed, zone)
    return F.date_format(parsed, TIMESTAMP_TEXT)


def _canonical_image(image: Column, types: Column, variant: Variant, zone: str | None) -> Column:
    """A row object of the message -> canonical text by the column's (effective) Spark type."""

    def convert(column: Column, value: Column) -> Column:
        spark_type = types[column]
        if variant.types_from == "rdbms":
            return (
                F.when(value.isNull(), value)
                .when(spark_type == "binary", hex_to_base64(value))
                .when(spark_type == "timestamp", zoned_text_to_utc(value, None))
                .otherwise(value)
            )
        timestamp = (
            epoch_seconds_to_text(value) if variant.mysql_timestamp == "epoch" else zoned_text_to_utc(value, zone)
        )
        return (
            F.when(value.isNull(), value)
            .when(spark_type == "binary", java_bytes_to_base64(value))
            .when(spark_type == "timestamp", timestamp)
            .otherwise(value)
        )

    return F.transform_values(image, convert)


def _lost_columns(converted: Column, raw: Column) -> Column:
    """Columns whose value is present in the message but did not convert."""
    lost = F.map_keys(F.map_filter(converted, lambda column, value: value.isNull() & raw[column].isNotNull()))
    return F.coalesce(lost, F.array().cast("array<string>"))


# --- entries -------------------------------------------------------------------------------------------------------


def _position(m: Column) -> Column:
    """DRS's event serial ``id``, the one order key (``es`` is not: see the module docstring)."""
    return F.when(m["id"].isNotNull(), F.array(m["id"].cast("decimal(38,0)"))).otherwise(
        F.array().cast("array<decimal(38,0)>")
    )


def _row_entries(m: Column, variant: Variant, zone: str | None) -> Column:
    """Changelog entries for the rows of one INSERT/INIT/UPDATE/DELETE message (a key-moving UPDATE gives two)."""
    row_op = F.element_at(F.create_map(*[F.lit(x) for kv in ROW_TYPES.items() for x in kv]), F.col("message_type"))
    is_update, is_delete = row_op == S.OP_UPDATE, row_op == S.OP_DELETE
    rows = F.when(is_delete, m[variant.delete_rows]).otherwise(m["data"])
    count = F.size(F.coalesce(rows, F.array().cast(ROWS)))
    types, keys = F.col("effective_types"), F.col("effective_keys")
    identity = {"source_db": m["database"], "source_schema": m["schema"], "source_table": m["table"]}
    common = {
        "record_kind": F.lit(KIND_CHANGE),
        "key_columns": keys,
        "column_types": types,
        "position": _position(m),
        "event_time": safe_timestamp_millis(m["es"]),
        **identity,
    }

    def one_row(index: Column) -> Column:
        raw_row = rows[index]
        raw_old = F.when(is_update, m["old"][index])
        return let(
            F.struct(
                _canonical_image(raw_row, types, variant, zone).alias("row"),
                _canonical_image(raw_old, types, variant, zone).alias("old"),
            ),
            lambda images: let(
                F.array_distinct(
                    F.concat(_lost_columns(images["row"], raw_row), _lost_columns(images["old"], raw_old))
                ),
                lambda lost: _entries_of_row(images["row"], images["old"], lost, row_op, index, keys, common),
            ),
        )

    no_rows = F.when(
        is_delete, F.lit(f"DELETE without the deleted row: `{variant.delete_rows}` is null or empty")
    ).otherwise(F.concat(F.lit("type "), m["type"], F.lit(" message without rows in `data`")))
    return F.when(count > 0, F.flatten(F.transform(F.sequence(F.lit(0), count - 1), one_row))).otherwise(
        single(quarantine(S.REASON_MISSING_IMAGE, no_rows))
    )


def _entries_of_row(row, old, lost, row_op, index, keys, common) -> Column:
    is_update, is_delete = row_op == S.OP_UPDATE, row_op == S.OP_DELETE
    # A key column whose old value differs from its new one (null-safe) means the row moved to another key.
    moved = (
        is_update
        & old.isNotNull()
        & (F.size(F.coalesce(keys, F.array().cast("array<string>"))) > 0)
        & F.exists(
            F.coalesce(keys, F.array().cast("array<string>")),
            lambda k: F.map_contains_key(old, k) & ~old[k].eqNullSafe(row[k]),
        )
    )
    change = entry(
        op=row_op,
        key_image=row,
        after=F.when(~is_delete, row),
        before=F.when(is_delete, row).otherwise(old),
        row_index=index,
        **common,
    )
    delete_old_key = entry(op=F.lit(S.OP_DELETE), key_image=old, before=old, row_index=index, **common)
    bad = quarantine(
        S.REASON_BAD_VALUE,
        F.concat(F.lit("value cannot be decoded with its declared type in column(s): "), F.array_join(lost, ", ")),
    )
    return (
        F.when(F.size(lost) > 0, F.array(bad)).when(moved, F.array(delete_old_key, change)).otherwise(F.array(change))
    )


def timestamp_zone_of(pipeline: PipelineConfig) -> str:
    """The ``timestamp_zone`` option (JSON-C writes MySQL TIMESTAMP as wall-clock text in it), checked before work."""
    zone = str(pipeline.options.get("timestamp_zone", "UTC"))
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"pipeline {pipeline.name}: options.timestamp_zone {zone!r} is not a time zone; use a region like "
            "'Asia/Shanghai' (the zone of the source MySQL's time_zone setting)"
        ) from None
    return zone


def decode_variant(records: DataFrame, pipeline: PipelineConfig, variant: Variant) -> DataFrame:
    zone = str(pipeline.options.get("timestamp_zone", "UTC"))
    if variant.mysql_timestamp == "wall_clock":
        timestamp_zone_of(pipeline)  # an unknown zone stops the run before any record is read
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    m = F.col("m")
    table_id = table_id_of(m["database"], m["schema"], m["table"])
    declared = _declared_types(m, variant)
    # Types and key the config declares win (finish applies them again): values must convert by the same types.
    effective_types = F.map_concat(
        declared, F.coalesce(configured_types(pipeline)[table_id], F.create_map().cast(TEXT_MAP))
    )
    staged = records.select("*", text.alias("text"), parsed.alias("m")).select(
        "*",
        F.upper(F.coalesce(m["type"], m["opType"])).alias("message_type"),
        effective_types.alias("effective_types"),
        F.coalesce(configured_keys(pipeline)[table_id], m["pkNames"]).alias("effective_keys"),
    )
    message_type = F.col("message_type")
    identity = {"source_db": m["database"], "source_schema": m["schema"], "source_table": m["table"]}
    truncate = entry(
        record_kind=F.lit(KIND_CHANGE),
        op=F.lit(S.OP_TRUNCATE),
        position=_position(m),
        event_time=safe_timestamp_millis(m["es"]),
        **identity,
    )
    is_ddl = m["isDdl"] | message_type.isin(*DDL_TYPES)
    truncates = (message_type != "INIT_DDL") & F.lower(F.coalesce(m["sql"], F.lit(""))).rlike(r"^\s*truncate\s")
    entries = (
        unreadable_json(text, m)
        .when(message_type == "TRUNCATE", single(truncate))
        .when(is_ddl & truncates, single(truncate))
        # DDL is recorded, never applied: the latest-state schema follows the row images' declared types.
        .when(is_ddl, single(control(S.CONTROL_DDL_KIND, m["sql"], **identity)))
        .when(message_type.isin(*ROW_TYPES), _row_entries(m, variant, zone))
        .otherwise(
            single(
                quarantine(
                    S.REASON_UNKNOWN_OP,
                    F.concat(
                        F.lit("type '"),
                        F.coalesce(m["type"], m["opType"], F.lit("null")),
                        F.lit("' is not INSERT, UPDATE, DELETE, INIT, INIT_DDL or DDL"),
                    ),
                )
            )
        )
    )
    return finish(staged, entries, pipeline)
