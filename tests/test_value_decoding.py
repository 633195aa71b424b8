"""Value encodings decoded natively in Spark: Kafka Connect Decimal, Debezium time types, MySQL type names."""

from __future__ import annotations

import base64

import pytest
from pyspark.sql import functions as F

from cdcreplay.formats.debezium_json import canonical_value, decimal_from_base64
from cdcreplay.value_types import invalid_columns, mysql_type_to_spark


def twos_complement_base64(unscaled: int) -> str:
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


# Vectors from formats.md (computed independently there), then extremes of DECIMAL(38).
VECTORS = [
    ("BNI=", 2, "12.34"),
    ("nA==", 2, "-1.00"),
    ("AA==", 2, "0.00"),
    ("ATo=", 2, "3.14"),
    ("SZYC0w==", 3, "1234567.891"),
    (twos_complement_base64(-5), 3, "-0.005"),
    (twos_complement_base64(10**38 - 1), 0, str(10**38 - 1)),
    (twos_complement_base64(-(10**38 - 1)), 10, "-" + "9" * 28 + "." + "9" * 10),
    (twos_complement_base64(2**63), 0, str(2**63)),
    (twos_complement_base64(-(2**63) - 1), 0, str(-(2**63) - 1)),
    (twos_complement_base64(-128), 0, "-128"),
    (twos_complement_base64(255), 0, "255"),
]


def test_decimal_vectors(spark):
    frame = spark.createDataFrame([(b64, scale) for b64, scale, _ in VECTORS], "b64 string, scale int")
    got = [r.text for r in frame.select(decimal_from_base64(F.col("b64"), F.col("scale")).alias("text")).collect()]
    assert got == [text for _, _, text in VECTORS]


def test_decimal_too_long_or_empty_is_null(spark):
    too_long = base64.b64encode(b"\x01" * 17).decode()
    frame = spark.createDataFrame([(too_long,), ("",), ("not base64!",)], "b64 string")
    got = [r.text for r in frame.select(decimal_from_base64(F.col("b64"), F.lit(0)).alias("text")).collect()]
    assert got == [None, None, None]


@pytest.mark.parametrize(
    ("value", "name", "scale", "expected"),
    [
        ("19358", "io.debezium.time.Date", None, "2023-01-01"),
        ("1672574645123", "io.debezium.time.Timestamp", None, "2023-01-01 12:04:05.123000"),
        ("1672574645123456", "io.debezium.time.MicroTimestamp", None, "2023-01-01 12:04:05.123456"),
        ("1672574645123456789", "io.debezium.time.NanoTimestamp", None, "2023-01-01 12:04:05.123456"),
        ("3723004", "io.debezium.time.Time", None, "01:02:03.004000"),
        ("3723004005", "io.debezium.time.MicroTime", None, "01:02:03.004005"),
        ("2023-01-01T12:04:05.123Z", "io.debezium.time.ZonedTimestamp", None, "2023-01-01T12:04:05.123Z"),
        ('{"scale":2,"value":"BNI="}', "io.debezium.data.VariableScaleDecimal", None, "12.34"),
        ("BNI=", "org.apache.kafka.connect.data.Decimal", "2", "12.34"),
        ("plain", None, None, "plain"),
        (None, "io.debezium.time.Date", None, None),
    ],
)
def test_debezium_semantic_types(spark, value, name, scale, expected):
    frame = spark.createDataFrame([(value, name, scale)], "v string, n string, s string")
    got = frame.select(canonical_value(F.col("v"), F.col("n"), F.col("s")).alias("x")).first().x
    assert got == expected


@pytest.mark.parametrize(
    ("mysql", "spark_type"),
    [
        ("INTEGER", "int"),
        ("int(11)", "int"),
        ("int unsigned", "bigint"),
        ("bigint(20)", "bigint"),
        ("bigint unsigned", "decimal(20,0)"),
        ("tinyint(1)", "boolean"),
        ("tinyint(4)", "int"),
        ("decimal(12,2)", "decimal(12,2)"),
        ("DECIMAL(10)", "decimal(10,0)"),
        ("decimal", "string"),
        ("VARCHAR(255)", "string"),
        ("FLOAT", "float"),
        ("double", "double"),
        ("date", "date"),
        ("datetime(3)", "timestamp_ntz"),
        ("timestamp", "timestamp"),
        ("longblob", "binary"),
        ("json", "string"),
    ],
)
def test_mysql_type_mapping(spark, mysql, spark_type):
    assert spark.range(1).select(mysql_type_to_spark(F.lit(mysql)).alias("t")).first().t == spark_type


def test_invalid_columns_names_the_bad_values(spark):
    frame = spark.createDataFrame(
        [({"a": "1", "b": "x1", "c": "2026-13-01", "d": "12.5", "e": None, "f": "yes"},)], "m map<string,string>"
    )
    types = F.create_map(
        *[F.lit(x) for x in ("a", "int", "b", "int", "c", "date", "d", "decimal(4,1)", "e", "int", "f", "boolean")]
    )
    got = frame.select(F.array_sort(invalid_columns(F.col("m"), types)).alias("bad")).first().bad
    assert got == ["b", "c"]
