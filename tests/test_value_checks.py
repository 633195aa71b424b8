"""The Python value check against Spark's own CAST: what it accepts, the typed table reads; canonical forms agree.

``value_checks.valid_value`` decides which row-changes are quarantined as ``bad_value``; ``tables.typed_table`` later
reads the survivors with CAST / try_to_binary. Accepting a value the cast cannot read would lose it silently, so
"accepted here => read by Spark" is checked over a corpus of tricky texts, and for the canonical text every decoder
produces the two must agree exactly.
"""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from cdcreplay.formats.routing import Routing, key_text, route
from cdcreplay.value_checks import invalid_columns, valid_value

TYPES = ("int", "bigint", "double", "decimal(10,2)", "boolean", "date", "timestamp", "timestamp_ntz", "binary")

# Canonical text as decoders write it: accepted by both, for its type.
CANONICAL = {
    "int": ["0", "-2147483648", "2147483647", "42"],
    "bigint": ["-9223372036854775808", "9223372036854775807", "0"],
    "double": ["1.5", "-0.0", "1.0E20", "3.141592653589793", "NaN", "Infinity", "-Infinity", "1e-7"],
    "decimal(10,2)": ["12.34", "-1.00", "0.00", "100", "99999999.99", "-0.005"],
    "boolean": ["true", "false"],
    "date": ["2024-01-31", "2024-02-29", "0001-01-01", "9999-12-31"],
    "timestamp": [
        "2024-01-31 10:00:00",
        "2024-01-31 10:00:00.123456",
        "2024-01-31T10:00:00Z",
        "2024-01-31T10:00:00+08:00",
    ],
    "timestamp_ntz": ["2024-01-31 23:59:59.999999", "1970-01-01 00:00:00"],
    "binary": ["", "AAEC", "AAE=", "AA==", "3q2+7w=="],
}

# Texts that some source could send: broken numbers, impossible dates, odd spacing, Spark's lenient corners.
TRICKY = [
    "",
    " ",
    "1",
    " 1",
    "1 ",
    "+1",
    "-0",
    "1.0",
    "1.5",
    "1e3",
    "0x10",
    "2147483648",
    "-2147483649",
    "9223372036854775808",
    "1_000",
    "١٢",
    "1d",
    "1f",
    "nan",
    "-inf",
    "+Infinity",
    "1.",
    ".5",
    "1e",
    "e5",
    "1E+5",
    "\t2\n",
    "2024-01-01",
    "2024-1-1",
    "2024",
    "2024-01",
    "2024-01-01 10:00:00",
    "2024-01-01T10:00:00",
    "2024-01-01 garbage",
    "2024-01-01T",
    "2024-02-30",
    "2023-02-29",
    "2000-02-29",
    "1900-02-29",
    "+2024-01-01",
    "2024-13-01",
    "2024-00-10",
    " 2024-01-01 ",
    "2024-01-01 10:00:00.1234567",
    "2024-01-01 25:00:00",
    "2024-01-01 10:60:00",
    "2024-01-01 10:00",
    "10:00:00",
    "2024-01-01 10:00:00 UTC",
    "2024-01-01T10:00:00.000+0800",
    "2024-01-01 10:00:00Asia/Shanghai",
    "2024-01-01T10:00:00-05",
    "AAEC",
    "AAE=",
    "AAE",
    "A",
    "====",
    "AA==AA==",
    "YWJj\n",
    "YW Jj",
    "-_8=",
    "AA=",
    "true",
    "TRUE",
    "t",
    "yes",
    "on",
    "no",
    "null",
    "None",
    "💥",
]


@pytest.fixture(scope="module")
def spark_reads(spark):
    """{(text, type): does Spark's cast read it?} for every tricky and canonical text and every type."""
    texts = sorted({*TRICKY, *(t for values in CANONICAL.values() for t in values)})
    frame = spark.createDataFrame([(t,) for t in texts], "v string")

    def reads(spark_type: str):
        if spark_type == "binary":
            return F.try_to_binary(F.col("v"), F.lit("base64")).isNotNull()
        if spark_type == "boolean":
            # tables.typed_value reads booleans from these texts, not with CAST.
            return F.lower("v").isin("true", "1", "t", "yes", "false", "0", "f", "no")
        return F.col("v").try_cast(spark_type).isNotNull()

    rows = frame.select("v", *[reads(t).alias(f"t{i}") for i, t in enumerate(TYPES)]).collect()
    return {(row.v, spark_type): row[f"t{i}"] for row in rows for i, spark_type in enumerate(TYPES)}


@pytest.mark.parametrize("spark_type", TYPES)
def test_every_accepted_value_is_read_by_spark(spark_reads, spark_type):
    accepted_but_unread = [t for t in TRICKY if valid_value(t, spark_type) and not spark_reads[(t, spark_type)]]
    assert accepted_but_unread == []


@pytest.mark.parametrize("spark_type", TYPES)
def test_canonical_text_is_accepted_by_both(spark_reads, spark_type):
    values = CANONICAL[spark_type]
    assert [v for v in values if not valid_value(v, spark_type)] == []
    assert [v for v in values if not spark_reads[(v, spark_type)]] == []


def test_the_checks_reject_what_sources_really_send_wrong():
    assert [
        valid_value(v, t)
        for v, t in [
            ("x1", "int"),
            ("2026-13-01", "date"),
            ("12.5", "decimal(4,1)"),
            (None, "int"),
            ("yes", "boolean"),
            ("2024-02-30 10:00:00", "timestamp"),
            ("not base64!", "binary"),
            ("anything", "string"),
            ("anything", "array<int>"),
        ]
    ] == [False, False, True, True, True, False, False, True, True]
    image = {"a": "1", "b": "x1", "c": "2026-13-01", "d": "12.5", "e": None, "f": "yes", "g": "free text"}
    types = {"a": "int", "b": "int", "c": "date", "d": "decimal(4,1)", "e": "int", "f": "boolean"}
    assert invalid_columns(image, types) == ["b", "c"]


def test_key_text_is_byte_identical_to_spark_to_json(spark):
    """State written by any earlier version keys rows by Spark's to_json(array): the Python key text must match."""
    keys = [["1"], ["a", "b"], ['q"uote', "back\\slash", "slash/"], ["tab\tnew\nline\rret\bbs\fff"], ["é漢字💥"]]
    keys.append(["".join(chr(c) for c in range(32)) + "\x7f\u2028"])
    frame = spark.createDataFrame([(k,) for k in keys], "k array<string>")
    assert [row.j for row in frame.select(F.to_json("k").alias("j")).collect()] == [key_text(k) for k in keys]


def test_routing_quarantines_a_change_it_cannot_apply():
    routing = Routing(format="toy", keys={"db.t": ["id"]}, types={"db.t": {"n": "int"}})
    base = {"record_kind": "changelog", "source_db": "db", "source_table": "t", "key_columns": ["other"]}
    ok = route({**base, "op": "insert", "key_image": {"id": "1", "n": "2"}, "after": {"id": "1", "n": "2"}}, routing)
    assert (ok["record_kind"], ok["key"], ok["key_columns"], ok["column_types"]) == (
        "changelog",
        '["1"]',
        ["id"],
        {"n": "int"},
    )
    cases = [
        ({**base, "source_table": None, "op": "insert", "after": {}}, "missing_table", "the message names no table"),
        (
            {**base, "source_table": "u", "op": "delete", "key_image": {"id": "1"}},
            "missing_key",
            "no primary key value for table db.u (key columns: other); declare tables.<table>.primary_key in the "
            "pipeline config if the message has none",
        ),
        (  # a key column list holding a JSON null (DRS pkNames: [null]) is named, not a crashed run
            {**base, "source_table": "u", "key_columns": ["a", None], "op": "delete", "key_image": {"a": "1"}},
            "missing_key",
            "no primary key value for table db.u (key columns: a,null); declare tables.<table>.primary_key in the "
            "pipeline config if the message has none",
        ),
        (
            {**base, "op": "update", "key_image": {"id": "1"}},
            "missing_image",
            "operation update without an after image",
        ),
        (
            {**base, "op": "update", "key_image": {"id": "1"}, "after": {"id": "1", "n": "x"}, "before": {"n": "y"}},
            "bad_value",
            "value does not match its declared type in column(s): n",
        ),
    ]
    assert [(r["record_kind"], r["reason"], r["detail"]) for r in (route(c, routing) for c, _, _ in cases)] == [
        ("quarantine", reason, detail) for _, reason, detail in cases
    ]
