"""What the DRS JSON decoders (``drs_json`` in Python, ``drs_native`` in Spark's JSON reader) share: the three
registered variants and how each declares a column's type (``mysqlType``, then ``sqlType``'s JDBC codes, for MySQL
sources; ``columnType`` for the others)."""

from __future__ import annotations

from dataclasses import dataclass

from cdcreplay.formats.values.text_casts import try_integer
from cdcreplay.value_types import mysql_type_name_to_spark

FORMAT_MYSQL = "drs-json-mysql"
FORMAT_JSON_C = "drs-json-c"
FORMAT_RDBMS = "drs-json-rdbms"


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

_JDBC_TYPES = {-6: "int", 5: "int", 4: "int", -5: "bigint", 7: "float", 6: "double", 8: "double", 16: "boolean"}
_JDBC_TYPES.update({91: "date", -2: "binary", -3: "binary", -4: "binary", 2004: "binary"})


def jdbc_code_to_spark(code: str | None) -> str:
    """``sqlType`` (java.sql.Types) -> Spark type, used only for a column ``mysqlType`` does not name.

    Codes whose meaning DRS bends are strings: the vendor sample reports DATETIME as 94 and TIMESTAMP as 93, and
    DECIMAL (3) comes without precision. TINYINT(-6)/SMALLINT(5)/INTEGER(4) int, BIGINT(-5) bigint, REAL(7) float,
    FLOAT(6)/DOUBLE(8) double, BOOLEAN(16) boolean, DATE(91) date, BINARY(-2)/VARBINARY(-3)/LONGVARBINARY(-4)/BLOB(2004)
    binary, everything else string.
    """
    return _JDBC_TYPES.get(try_integer(code, 32) if code is not None else None, "string")


_RDBMS_TYPES = {
    **dict.fromkeys(("boolean", "bool"), "boolean"),
    **dict.fromkeys(("smallint", "int2", "tinyint", "smallserial"), "smallint"),
    **dict.fromkeys(("integer", "int", "int4", "serial"), "int"),
    **dict.fromkeys(("bigint", "int8", "bigserial"), "bigint"),
    **dict.fromkeys(("real", "float4"), "float"),
    **dict.fromkeys(("double precision", "float8"), "double"),
    "date": "date",
    **dict.fromkeys(("timestamp", "timestamp without time zone"), "timestamp_ntz"),
    **dict.fromkeys(("timestamp with time zone", "timestamptz"), "timestamp"),
    "bytea": "binary",
}


def rdbms_type_to_spark(type_name: str | None) -> str:
    """A ``columnType`` name (PostgreSQL / GaussDB spelling, no length) -> Spark type.

    boolean/bool boolean; smallint/int2/tinyint smallint; integer/int/int4/serial int; bigint/int8/bigserial bigint;
    real/float4 float; double precision/float8 double; date date; timestamp [without time zone] timestamp_ntz;
    timestamp with time zone/timestamptz timestamp; bytea binary. numeric/decimal (no precision here), money, time,
    interval, character types, json/jsonb, ranges, bit, uuid, xml and anything else: string, exact text. An empty
    name (Oracle, SQL Server) is a string too; ``tables.<t>.column_types`` declares the real type.
    """
    if type_name is None:
        return "string"
    return _RDBMS_TYPES.get(type_name.strip(" ").lower(), "string")


def _mysql_type(type_name: str | None) -> str:
    return "string" if type_name is None else mysql_type_name_to_spark(type_name)


def declared_types(maps: dict, variant: Variant) -> dict[str, str]:
    """A message's declared Spark type per column, from its type maps (``maps``: name -> the map as text, or None),
    before the configured ``column_types`` are laid over them."""
    if variant.types_from == "rdbms":
        return {c: rdbms_type_to_spark(t) for c, t in (maps["columnType"] or {}).items()}
    mysql_types = maps["mysqlType"] or {}
    # sqlType's JDBC code types only a column mysqlType does not name.
    declared = {c: jdbc_code_to_spark(code) for c, code in (maps["sqlType"] or {}).items() if c not in mysql_types}
    declared.update((c, _mysql_type(t)) for c, t in mysql_types.items())
    return declared
