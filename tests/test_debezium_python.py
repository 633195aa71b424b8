"""The Python Debezium envelope without Spark: value conversions, the schema cache of the JSON wire, and that a
wrapped message decodes the same whether its schema is cut out by the cache or parsed whole."""

from __future__ import annotations

import base64
import json

import pytest

from cdcreplay.formats.debezium_json import decode_record
from cdcreplay.formats.python_rows import RawRecord, safe_decode
from cdcreplay.formats.values.debezium_values import (
    Field,
    as_text,
    canonical_value,
    debezium_field_type,
    decimal_from_base64,
)


def b64(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)).decode()


@pytest.mark.parametrize(
    ("text", "scale", "expected"),
    [("BNI=", 2, "12.34"), ("nA==", "2", "-1.00"), (b64(-5), 3, "-0.005"), (b64(10**38 - 1), 0, str(10**38 - 1)),
     (b64(10**38), 0, None), (base64.b64encode(b"\x01" * 17).decode(), 0, None), ("", 0, None), ("%%", 0, None)],
)  # fmt: skip
def test_decimal_from_base64(text, scale, expected):
    assert decimal_from_base64(text, scale) == expected


def test_semantic_values_and_types():
    assert canonical_value("-1", "io.debezium.time.Date") == "1969-12-31"
    assert canonical_value("99999999", "io.debezium.time.Date") is None  # beyond year 9999: undecodable
    assert canonical_value("-1", "io.debezium.time.MicroTime") == "23:59:59.999999"
    assert canonical_value("2023-01-01+02:00", "io.debezium.time.IsoDate") == "2023-01-01"
    assert debezium_field_type(Field(name="org.apache.kafka.connect.data.Decimal", scale="2")) == "decimal(38,2)"
    assert debezium_field_type(Field(type="int16")) == "smallint"
    assert as_text(json.loads('{"a": [1.50, true, null]}', parse_float=__import__("decimal").Decimal)) == (
        '{"a":[1.50,true,null]}'
    )


def record(value: str, key: str | None = '{"id": 1}') -> RawRecord:
    return RawRecord("t", 0, 0, None, None if key is None else key.encode(), value.encode(), ())


SCHEMA = {"type": "struct", "fields": [{"field": "after", "fields": [
    {"field": "id", "type": "int32"},
    {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
]}]}  # fmt: skip
PAYLOAD = {"op": "c", "after": {"id": 1, "price": "BNI="}, "source": {"db": "d", "table": "t", "lsn": 5}, "ts_ms": 1}


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_cached_schema_path_equals_the_whole_parse(separators):
    compact = json.dumps({"schema": SCHEMA, "payload": PAYLOAD}, separators=separators)
    reordered = json.dumps({"payload": PAYLOAD, "schema": SCHEMA})  # not the JsonConverter layout: parsed whole
    first, second = decode_record(record(compact)), decode_record(record(reordered))
    assert first == second
    assert first[0]["after"] == {"id": "1", "price": "12.34"}
    assert first[0]["column_types"] == {"id": "int", "price": "decimal(38,2)"}


def test_bad_values_and_broken_shapes_are_quarantined():
    bad = {**PAYLOAD, "after": {"id": 1, "price": "%%"}}
    [entry] = safe_decode(decode_record, record(json.dumps({"schema": SCHEMA, "payload": bad})))
    assert (entry["reason"], entry["detail"]) == (
        "bad_value", "value cannot be decoded with its schema type in column(s): price")  # fmt: skip
    [entry] = safe_decode(decode_record, record(json.dumps({**PAYLOAD, "source": "x"})))
    assert entry["reason"] == "not_json"
