"""Source types -> Spark SQL types, value validation, and the typed projection of a row image.

Every decoder turns a value into *canonical text* (what ``CAST(text AS <type>)`` reads back; binary as base64) and
records the column's Spark type in ``column_types``. This module holds the mappings users read in the README's
type table, so "which MySQL type becomes what" is answered in one place.

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

from pyspark.sql import Column
from pyspark.sql import functions as F


def let(value: Column, body) -> Column:
    """Evaluate ``value`` once and hand it to ``body`` as a lambda variable (Spark SQL has no `let`).

    Inside higher-order functions the plan has no common-subexpression elimination, so an expression used three
    times is built three times; nested uses grow exponentially. Binding it to a variable keeps the tree small.
    """
    return F.transform(F.array(value), body)[0]


# Spark's timestamp range (years 1..9999). Source numbers outside it are bad values, never a crash: under ANSI
# mode an overflowing conversion would abort the whole job.
MIN_MICROS, MAX_MICROS = -62135596800000000, 253402300799999999
MIN_DAYS, MAX_DAYS = -719162, 2932896


def safe_binary(base64_text: Column) -> Column:
    """base64 text -> bytes; NULL for text that is not base64 (unbase64 would throw)."""
    return F.try_to_binary(base64_text, F.lit("base64"))


def safe_timestamp_micros(micros: Column) -> Column:
    return F.when(micros.between(MIN_MICROS, MAX_MICROS), F.timestamp_micros(micros))


def safe_timestamp_millis(millis: Column) -> Column:
    return safe_timestamp_micros(F.try_multiply(millis.try_cast("bigint"), F.lit(1000)))


def safe_date_from_days(days: Column) -> Column:
    days = days.try_cast("bigint")
    return F.when(days.between(MIN_DAYS, MAX_DAYS), F.date_add(F.lit("1970-01-01").cast("date"), days.cast("int")))


def mysql_type_to_spark(mysql_type: Column) -> Column:
    """A MySQL type text as Canal/DTS/DRS print it (`INTEGER`, `varchar(64)`, `decimal(12,2)`) -> Spark type."""
    t = F.lower(F.trim(mysql_type))
    precision = F.regexp_extract(t, r"\(\s*([0-9]+)", 1)
    scale = F.regexp_extract(t, r",\s*([0-9]+)", 1)
    return (
        F.when(t.rlike(r"^(tinyint\(1\)|bool|boolean)( |$)"), F.lit("boolean"))
        .when(t.rlike(r"^bigint.*unsigned"), F.lit("decimal(20,0)"))
        .when(t.rlike(r"^(int|integer|mediumint)[^ ]* +unsigned"), F.lit("bigint"))
        .when(t.rlike(r"^bigint"), F.lit("bigint"))
        .when(t.rlike(r"^(tinyint|smallint|mediumint|int|integer)( |\(|$)"), F.lit("int"))
        .when(
            t.rlike(r"^(decimal|numeric)\(\s*[0-9]+\s*,\s*[0-9]+\s*\)"),
            F.concat(F.lit("decimal("), precision, F.lit(","), scale, F.lit(")")),
        )
        .when(t.rlike(r"^(decimal|numeric)\(\s*[0-9]+\s*\)"), F.concat(F.lit("decimal("), precision, F.lit(",0)")))
        .when(t.rlike(r"^float"), F.lit("float"))
        .when(t.rlike(r"^(double|real)"), F.lit("double"))
        .when(t == "date", F.lit("date"))
        .when(t.rlike(r"^datetime"), F.lit("timestamp_ntz"))
        .when(t.rlike(r"^timestamp"), F.lit("timestamp"))
        .when(t.rlike(r"^year"), F.lit("int"))
        .when(t.rlike(r"^(binary|varbinary|tinyblob|blob|mediumblob|longblob)"), F.lit("binary"))
        .otherwise(F.lit("string"))
    )


# Debezium / Kafka Connect schema field -> Spark type. Input: semantic name, primitive type, scale, precision.
def debezium_field_type(name: Column, primitive: Column, scale: Column, precision: Column) -> Column:
    return (
        F.when(
            name == "org.apache.kafka.connect.data.Decimal",
            F.concat(
                F.lit("decimal("),
                F.coalesce(precision, F.lit("38")),
                F.lit(","),
                F.coalesce(scale, F.lit("0")),
                F.lit(")"),
            ),
        )
        .when(name.isin("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"), F.lit("date"))
        .when(
            name.isin(
                "io.debezium.time.Timestamp",
                "io.debezium.time.MicroTimestamp",
                "io.debezium.time.NanoTimestamp",
                "org.apache.kafka.connect.data.Timestamp",
            ),
            F.lit("timestamp_ntz"),
        )
        .when(name.isin("io.debezium.time.ZonedTimestamp", "io.debezium.time.IsoTimestamp"), F.lit("timestamp"))
        .when(name == "io.debezium.time.IsoDate", F.lit("date"))
        .when(name == "io.debezium.time.Year", F.lit("int"))
        # Durations: an integer count of their unit (Parquet cannot hold Spark intervals).
        .when(name.isin("io.debezium.time.MicroDuration", "io.debezium.time.NanoDuration"), F.lit("bigint"))
        .when(name == "io.debezium.data.Bits", F.lit("binary"))  # BIT(n): bytes, base64 like any binary
        .when(name.isNotNull(), F.lit("string"))  # VariableScaleDecimal, *Time, Interval, Json, Enum, Uuid, Xml, ...
        .when(primitive == "boolean", F.lit("boolean"))
        .when(primitive == "int8", F.lit("tinyint"))
        .when(primitive == "int16", F.lit("smallint"))
        .when(primitive == "int32", F.lit("int"))
        .when(primitive == "int64", F.lit("bigint"))
        .when(primitive == "float32", F.lit("float"))
        .when(primitive.isin("float64", "double"), F.lit("double"))
        .when(primitive == "float", F.lit("float"))
        .when(primitive == "bytes", F.lit("binary"))
        .otherwise(F.lit("string"))
    )


def valid_value(value: Column, spark_type: Column) -> Column:
    """True when canonical text ``value`` reads back as ``spark_type`` (NULL is always valid)."""
    decimal_text = value.rlike(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")
    return (
        F.when(value.isNull(), F.lit(True))
        .when(spark_type == "string", F.lit(True))
        .when(spark_type == "boolean", F.lower(value).isin("true", "false", "1", "0", "t", "f", "yes", "no"))
        .when(spark_type.isin("tinyint", "smallint", "int"), value.try_cast("int").isNotNull())
        .when(spark_type == "bigint", value.try_cast("bigint").isNotNull())
        .when(spark_type.isin("float", "double"), value.try_cast("double").isNotNull())
        .when(spark_type.startswith("decimal"), decimal_text)
        .when(spark_type == "date", value.try_cast("date").isNotNull())
        .when(spark_type.startswith("timestamp"), value.try_cast("timestamp").isNotNull())
        .when(spark_type == "binary", safe_binary(value).isNotNull())
        .otherwise(F.lit(True))
    )


def invalid_columns(image: Column, column_types: Column) -> Column:
    """Names of the columns of ``image`` whose value does not read back as its declared type."""
    return F.map_keys(
        F.map_filter(
            image,
            lambda column, value: ~valid_value(value, F.coalesce(column_types[column], F.lit("string"))),
        )
    )


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
