"""Value encodings decoded natively in Spark: Kafka Connect Decimal, Debezium time types, MySQL type names."""

from __future__ import annotations

import base64

import pytest

from cdcreplay.formats.values.debezium_values import canonical_value, decimal_from_base64
from cdcreplay.value_types import mysql_type_name_to_spark


def twos_complement_base64(unscaled: int) -> str:
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


# Vectors from docs/format-spec.md (computed independently there), then extremes of DECIMAL(38).
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


def test_decimal_vectors():
    assert [decimal_from_base64(b64, scale) for b64, scale, _ in VECTORS] == [text for _, _, text in VECTORS]


def test_decimal_too_long_or_empty_is_null():
    too_long = base64.b64encode(b"\x01" * 17).decode()
    assert [decimal_from_base64(text, 0) for text in (too_long, "", "not base64!")] == [None, None, None]


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
def test_debezium_semantic_types(value, name, scale, expected):
    assert canonical_value(value, name, scale) == expected


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
def test_mysql_type_mapping(mysql, spark_type):
    assert mysql_type_name_to_spark(mysql) == spark_type
