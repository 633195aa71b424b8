"""Source types -> Spark SQL types, and the typed projection of a row image (value checks: value_checks.py).

Every decoder turns a value into *canonical text* (what ``CAST(text AS <type>)`` reads back; binary as base64) and
records the column's Spark type in ``column_types``. The table below is the one users read (the README's config
reference points here), so "which MySQL type becomes what" is answered in one place.

MySQL (Canal `mysqlType`)           Spark            Debezium schema (JsonConverter)            Spark
tinyint(1), bool, boolean           boolean          boolean                                    boolean
tinyint, smallint, mediumint, int   int              int8 / int16 / int32                       tinyint/smallint/int
int unsigned, bigint                bigint           int64                                      bigint
bigint unsigned                     decimal(20,0)    float32 / float64 (double)                 float / double
decimal(p,s), numeric(p,s)          decimal(p,s)     ...connect.data.Decimal (scale, precision)  decimal(p,s)
decimal without precision           string (exact)   io.debezium.data.VariableScaleDecimal      string (exact)
float / double, real                float / double   io.debezium.time.Date, connect Date        date
date                                date             io.debezium.time.(Micro|Nano)Timestamp     timestamp_ntz
datetime(n)                         timestamp_ntz    io.debezium.time.ZonedTimestamp            timestamp (UTC)
timestamp(n)                        timestamp        *Time types                                string HH:mm:ss.ffffff
binary, varbinary, *blob            binary           bytes                                      binary
year                                int              io.debezium.time.Year                      int
anything else (char, text, json,    string           string, Json, Enum, Uuid, structs, arrays   string
enum, set, time, bit, geometry)
"""

from __future__ import annotations

import re
from functools import lru_cache

from pyspark.sql import Column
from pyspark.sql import functions as F

from cdcreplay.formats.values.text_casts import MAX_MICROS, MIN_MICROS

# Spark's date range (years 1..9999); its timestamp range is text_casts' MIN_MICROS, MAX_MICROS. Source numbers
# outside them are bad values, never a crash: under ANSI mode an overflowing conversion would abort the whole job.
MIN_DAYS, MAX_DAYS = -719162, 2932896


def safe_binary(base64_text: Column) -> Column:
    """base64 text -> bytes; NULL for text that is not base64 (unbase64 would throw)."""
    return F.try_to_binary(base64_text, F.lit("base64"))


def safe_timestamp_micros(micros: Column) -> Column:
    return F.when(micros.between(MIN_MICROS, MAX_MICROS), F.timestamp_micros(micros))


def safe_timestamp_millis(millis: Column) -> Column:
    return safe_timestamp_micros(F.try_multiply(millis.try_cast("bigint"), F.lit(1000)))


_MYSQL_TYPE_RULES = (
    (re.compile(r"^(tinyint\(1\)|bool|boolean)( |$)"), "boolean"),
    (re.compile(r"^bigint.*unsigned"), "decimal(20,0)"),
    (re.compile(r"^(int|integer|mediumint)[^ ]* +unsigned"), "bigint"),
    (re.compile(r"^bigint"), "bigint"),
    (re.compile(r"^(tinyint|smallint|mediumint|int|integer)( |\(|$)"), "int"),
    (re.compile(r"^(decimal|numeric)\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)"), "decimal({1},{2})"),
    (re.compile(r"^(decimal|numeric)\(\s*([0-9]+)\s*\)"), "decimal({1},0)"),
    (re.compile(r"^float"), "float"),
    (re.compile(r"^(double|real)"), "double"),
    (re.compile(r"^date$"), "date"),
    (re.compile(r"^datetime"), "timestamp_ntz"),
    (re.compile(r"^timestamp"), "timestamp"),
    (re.compile(r"^year"), "int"),
    (re.compile(r"^(binary|varbinary|tinyblob|blob|mediumblob|longblob)"), "binary"),
)


@lru_cache(maxsize=1024)
def mysql_type_name_to_spark(mysql_type: str) -> str:
    """A MySQL type text as Canal/DTS/DRS print it (`INTEGER`, `varchar(64)`, `decimal(12,2)`) -> Spark type."""
    text = mysql_type.strip().lower()
    for pattern, spark_type in _MYSQL_TYPE_RULES:
        match = pattern.search(text)
        if match:
            return spark_type.format(*match.groups())
    return "string"


def typed_value(image: Column, column: str, spark_type: str) -> Column:
    """One column of a canonical-text image as its Spark type (binary decoded from base64)."""
    value = image[column]
    if spark_type == "binary":
        return safe_binary(value).alias(column)
    if spark_type == "boolean":
        lowered = F.lower(value)
        return (
            F.when(lowered.isin("true", "1", "t", "yes"), F.lit(True))
            .when(lowered.isin("false", "0", "f", "no"), F.lit(False))
            .alias(column)
        )
    return value.try_cast(spark_type).alias(column)


def typed_image(df, columns: list[tuple[str, str]], image_col: str = "after"):
    """Add one typed column per (name, spark type) read from the map column ``image_col``."""
    return df.select("*", *[typed_value(F.col(image_col), name, spark_type) for name, spark_type in columns])
