"""The Python decoders' one JSON reader: each JSON format declares its reading, and the three readings differ only
in what ``json_reader`` says (numbers, text after the object, a lone surrogate); every error names its reason."""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest

from cdcreplay.formats import REGISTRY
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.wire.json_reader import AS_SPARK_READ, EXACT, PLAIN, read_object

READINGS = {"exact": EXACT, "plain": PLAIN, "as Spark read it": AS_SPARK_READ}
DECLARED = {
    "debezium-json": "exact",
    "canal-json": "exact",
    "qlik-json": "plain",
    "drs-dds-json": "plain",
    "dts-shareplex-json": "as Spark read it",
    "dataworks-json": "as Spark read it",
    "drs-json-mysql": "as Spark read it",
    "drs-json-c": "as Spark read it",
    "drs-json-rdbms": "as Spark read it",
}


def test_every_json_format_declares_its_reading():
    json_formats = {name for name in REGISTRY if "-json" in name}
    assert json_formats == set(DECLARED)
    for name in sorted(json_formats):
        module = importlib.import_module(REGISTRY[name].module)
        if not hasattr(module, "JSON_READING"):  # the DRS variants share drs_json's decoder
            module = importlib.import_module("cdcreplay.formats.drs_json")
        assert module.JSON_READING.name == DECLARED[name], name


@pytest.mark.parametrize(
    ("reading", "expected"),
    [
        ("exact", {"i": 12345678901234567890123, "d": Decimal("0.1000000000000000055511151231257827"), "s": "x"}),
        ("plain", {"i": 12345678901234567890123, "d": 0.1, "s": "x"}),
        ("as Spark read it", {"i": "12345678901234567890123", "d": "0.1", "s": "x"}),
    ],
)
def test_numbers_are_read_as_the_reading_says(reading, expected):
    payload = b' {"i": 12345678901234567890123, "d": 0.1000000000000000055511151231257827, "s": "x"}'
    document = read_object(payload, READINGS[reading])
    assert document == expected
    assert all(isinstance(document[name], type(value)) for name, value in expected.items())


def test_text_after_the_object_is_ignored_only_as_spark_read_it():
    assert read_object(b'{"a": "1"} trailing', AS_SPARK_READ) == {"a": "1"}
    for reading in (EXACT, PLAIN):
        with pytest.raises(DecodeError) as error:
            read_object(b'{"a": "1"} trailing', reading)
        assert (error.value.reason, str(error.value)) == (
            "not_json",
            'payload is not a JSON object: {"a": "1"} trailing',
        )


def test_a_lone_surrogate_is_refused_whole_only_by_the_plain_reading():
    payload = b'{"a": "\\ud800", "b": "\\ud83d\\ude00"}'
    for reading in (EXACT, AS_SPARK_READ):  # kept: routing quarantines a row carrying it, naming the column
        assert read_object(payload, reading) == {"a": "\ud800", "b": "\U0001f600"}
    with pytest.raises(DecodeError) as error:
        read_object(payload, PLAIN)
    assert (error.value.reason, str(error.value)) == (
        "not_utf8",
        "payload escapes a lone UTF-16 surrogate (\\ud800-\\udfff): it is not Unicode text",
    )
    assert read_object(b'{"b": "\\ud83d\\ude00"}', PLAIN) == {"b": "\U0001f600"}  # a pair is Unicode text


@pytest.mark.parametrize("reading", sorted(READINGS))
@pytest.mark.parametrize(
    ("payload", "reason", "message"),
    [
        (b'{"a": "\xff"}', "not_utf8", "payload is not valid UTF-8 text"),
        (b"[1, 2]", "not_json", "payload is not a JSON object: [1, 2]"),
        (b'{"a": ', "not_json", 'payload is not a JSON object: {"a": '),
        (b"", "not_json", "payload is not a JSON object: "),
        (b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not_json", 'payload is not a JSON object: {"a": [[[['),
    ],
)
def test_an_unreadable_payload_names_its_reason_and_start(reading, payload, reason, message):
    with pytest.raises(DecodeError) as error:
        read_object(payload, READINGS[reading])
    assert error.value.reason == reason
    assert str(error.value).startswith(message)
    assert len(str(error.value)) <= len("payload is not a JSON object: ") + 120


def test_parse_turns_a_nesting_too_deep_into_a_value_error():
    for reading in READINGS.values():
        with pytest.raises(ValueError):
            reading.parse("[" * 100_000 + "]" * 100_000)
