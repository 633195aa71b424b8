"""The native (``from_avro``, ``options.reader: spark``) path of qlik-avro against its fastavro decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field, and
``decode`` (native rows plus the Python decoder's for the records left to it) must equal the Python decoder on every
record (``native_helpers.native_flags_of_messages``). Checked on a simulated history (two table versions, column
masks, REFRESH rows, key changes, data messages that name their schema and some that embed it), on hand-made corner
cases of every value the path renders, and on data schemas of shapes it leaves to Python.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import random
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from native_helpers import native_flags_of_messages, records_frame, two_pass_write
from qlik_helpers import DATA_NS, HEADERS, avro, data_schema, envelope

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import debezium_avro_native, qlik_avro, qlik_avro_native, qlik_native
from cdcreplay.formats.envelopes.qlik_envelope import ENVELOPE_SCHEMA, collect_metadata
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_qlik import METADATA_SCHEMA, encode_qlik_avro

DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
MICROS = {"type": "long", "logicalType": "timestamp-micros"}
COLUMNS = [
    ("ID", "INT4", "int", 1),
    ("NAME", "STRING", "string", 0),
    ("PAY", "NUMERIC", DECIMAL, 0),
    ("HIRED", "DATETIME", MICROS, 0),
    ("BORN", "DATE", {"type": "int", "logicalType": "date"}, 0),
    ("RATE", "REAL8", "double", 0),
    ("PHOTO", "BYTES", "bytes", 0),
    ("OK", "BOOLEAN", "boolean", 0),
    ("BIG", "INT8", "long", 0),
]
SCHEMA = data_schema([(name, avro_type) for name, _, avro_type, _ in COLUMNS])
SCHEMA_TEXT = json.dumps(SCHEMA)
HIRED = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
ROW = {
    "ID": 1,
    "NAME": "Ann",
    "PAY": Decimal("1234.50"),
    "HIRED": HIRED,
    "BORN": date(1990, 5, 6),
    "RATE": 1.25,
    "PHOTO": b"\x00\xff",
    "OK": True,
    "BIG": 2**40,
}
WHOLE = b"\xff\x01"  # every one of the nine columns captured


def _pipeline(tables: dict | None = None) -> PipelineConfig:
    return PipelineConfig(
        name="native", format="qlik-avro", archive={"path": "unused"}, tables=tables or {}, options={"reader": "spark"}
    )


def _md(schema_id: str, schema_text: str = SCHEMA_TEXT) -> bytes:
    """An MD envelope of table HR.EMP with COLUMNS (NUMERIC as decimal(9,2)) and ``schema_text`` as its dataSchema."""
    structure = {
        name: {"ordinal": ordinal, "type": qlik_type, "length": 0, "precision": 9 if qlik_type == "NUMERIC" else 0,
               "scale": 2 if qlik_type == "NUMERIC" else 0, "primaryKeyPosition": pk}
        for ordinal, (name, qlik_type, _, pk) in enumerate(COLUMNS, 1)
    }  # fmt: skip
    message = {
        "schemaId": schema_id,
        "lineage": {"server": "srv", "task": "t", "schema": "HR", "table": "EMP", "tableVersion": 1,
                    "timestamp": "2026-01-01T00:00:00"},
        "tableStructure": {"tableColumns": structure},
        "dataSchema": schema_text,
    }  # fmt: skip
    return envelope("MD", avro(METADATA_SCHEMA, message), schema_text=json.dumps(METADATA_SCHEMA))


METADATA = _md("v1")


def _body(op="INSERT", data=ROW, before=None, n=1, mask=WHOLE, schema=SCHEMA, **headers) -> bytes:
    header = {"operation": op, "changeSequence": headers.pop("sequence", f"{20260101000000000 + n:035d}"),
              "columnMask": mask, "transactionEventCounter": headers.pop("counter", 1), **headers}  # fmt: skip
    return avro(schema, {"data": data, "beforeData": before, "headers": header})


def _dt(op="INSERT", data=ROW, before=None, n=1, schema_id="v1", embed=None, **fields) -> bytes:
    return envelope("DT", _body(op, data, before, n, **fields), schema_id=schema_id, schema_text=embed)


def _flags(spark, values: list[bytes], pipeline=None) -> list[bool]:
    return native_flags_of_messages(spark, qlik_avro, values, pipeline or _pipeline())


def test_simulated_history_is_decoded_natively_as_in_python(spark):
    records = list(encode_qlik_avro(simulate(seed=11, events=1500, days=2)))
    flags = _flags(spark, [r.value for r in records])
    metadata = sum(r.topic == "qlik.metadata" for r in records)
    assert metadata >= 3
    left = [r for r, native in zip(records, flags, strict=True) if not native and r.topic != "qlik.metadata"]
    # Left to Python besides the MD messages: the key changes, the REFRESH messages after one and before the next
    # change, and the change before each such run of them, which goes along.
    assert len(left) <= 0.03 * len(records), [r.value[:80] for r in left[:3]]
    embedded = sum(b"DataRecord" in r.value for r in records if r.topic != "qlik.metadata")
    assert embedded > 0.1 * len(records)  # every seventh data message embeds its schema: taken natively too


def test_the_two_pass_write_gives_the_python_decoders_rows(spark, tmp_path):
    records = list(encode_qlik_avro(simulate(seed=5, events=600, days=1)))
    frame = records_frame(spark, [(r.key, r.value, []) for r in records])
    written = two_pass_write(spark, qlik_avro, frame, _pipeline(), str(tmp_path / "decoded"))
    reference = qlik_avro.decode_in_python(frame, _pipeline())
    assert sorted(map(str, written.collect())) == sorted(map(str, reference.collect()))


CORNER_CASES = [
    (_dt(), True),
    (_dt("UPDATE", before=ROW), True),
    (_dt("UPDATE", data={**ROW, "NAME": "B"}, before=ROW), True),
    (_dt("DELETE", dict.fromkeys(ROW), before=ROW), True),
    (_dt("DELETE", ROW), True),  # the row in data, as some tasks write it
    (_dt("REFRESH", sequence=""), True),
    (_dt(mask=b"\x05"), True),  # only ID and PAY captured: the others left out of the image
    (_dt(mask=None), True),  # no mask: every column
    (_dt(mask=b""), False),  # no bytes: Python captures nothing
    (_dt(sequence=""), True),  # no sequence: no position
    (_dt(counter=None), True),
    (_dt(data=dict.fromkeys(ROW) | {"ID": 2}), True),  # every other value null
    (_dt(data={**ROW, "PAY": Decimal("-0.05")}), True),
    (_dt(data={**ROW, "PAY": Decimal("0.00")}), True),
    (_dt(data={**ROW, "RATE": 1e-3}), True),
    (_dt(data={**ROW, "RATE": -0.0}), True),
    (_dt(data={**ROW, "RATE": 1e16}), False),  # Python writes 1e+16, Java 1.0E16
    (_dt(data={**ROW, "RATE": 0.1 + 0.2}), False),  # 17 digits: Java's text may not be the shortest
    (_dt(data={**ROW, "RATE": float("nan")}), False),
    (_dt(data={**ROW, "HIRED": datetime(1000, 1, 1, tzinfo=UTC)}), True),
    (_dt(data={**ROW, "HIRED": datetime(999, 12, 31, tzinfo=UTC)}), False),  # Python writes the year as "999"
    (_dt(data={**ROW, "BORN": date(1, 1, 1)}), True),
    (_dt(data={**ROW, "PHOTO": b""}), True),
    (_dt(data={**ROW, "PHOTO": bytes(range(256)) * 2}), True),  # base64 longer than a MIME line
    (_dt(data={**ROW, "NAME": "Zoë \u2603 \U0001f600"}), True),
    (_dt(data={**ROW, "NAME": "\u0000\u0002\u0003"}), True),  # the path's own marks inside a value
    (_dt(data={**ROW, "NAME": '{"json": "text"}'}), True),
    (_dt("UPDATE", data={**ROW, "ID": 9}, before=ROW), False),  # a key change
    (_dt(data={**ROW, "ID": None}), False),  # no key value
    (_dt(schema_id=None, embed=SCHEMA_TEXT), True),  # the MD's own schema text embedded
    (_dt(schema_id="nowhere", embed=SCHEMA_TEXT), True),  # the embedded schema wins over the id
    (_dt(schema_id="v1", embed=""), True),  # an empty schema is none
    (_dt(sequence="0"), False),  # "0" and the number 0 read alike
    (_dt(sequence="12a"), False),
    (_dt(counter=2**63 - 1), False),  # 19 digits: more than the path reads
    (envelope("dt", _body(), schema_id="v1"), True),  # the envelope type in any case
    (envelope("XX", _body(), schema_id="v1"), False),
    (b"", True),  # a tombstone
    # The records below the native path cannot read, so it cannot tell whether the Python decoder finds a REFRESH
    # in them: the last change it knows before them goes to Python with them (for the REFRESH's position).
    (_dt(n=99), False),
    (_dt(schema_id="nowhere"), False),  # no such metadata: quarantined
    (_dt(schema_id=None), False),  # neither an id nor a schema: quarantined
    (_dt(schema_id=None, embed=json.dumps(SCHEMA, indent=1)), False),  # the same schema in another text
    (envelope("DT", _body()[:-3], schema_id="v1"), False),  # a truncated message
    (envelope("DT", b"\xff\xff\xff", schema_id="v1"), False),
    (_dt()[:-2], False),  # a truncated envelope
    (b"\x00\x00\x00\x00\x01" + _body(), False),  # Confluent-framed: the registry's (Python's)
    (b"not avro", False),
]


def test_corner_cases_are_decoded_natively_only_where_the_paths_agree(spark):
    values = [METADATA] + [value for value, _ in CORNER_CASES]
    flags = _flags(spark, values)
    expected = [False] + [taken for _, taken in CORNER_CASES]
    wrong = [(value[:60], taken) for (value, taken), flag in zip(CORNER_CASES, flags[1:], strict=True) if flag != taken]
    assert flags == expected, wrong


def _with_utf8_break(value: bytes, text: str) -> bytes:
    """``value`` with the UTF-8 of ``text`` replaced by as many bytes that are not UTF-8."""
    encoded = text.encode("utf-8")
    assert value.count(encoded) == 1
    return value.replace(encoded, b"\xff" * len(encoded))


def test_strings_that_are_not_utf8_are_left_to_python(spark):
    """fastavro refuses a record with any string that is not UTF-8; Java reads it."""
    schema = copy.deepcopy(SCHEMA)
    position = {"name": "streamPosition", "type": "string"}  # a header field neither decoder uses
    schema["fields"][2]["type"] = {**HEADERS, "fields": [*HEADERS["fields"], position]}
    body = _body(schema=schema, streamPosition="POS")
    with_headers = {"magic": b"atMSG", "type": "DT", "headers": {"origin": "HOST"}, "messageSchemaId": "v1",
                    "messageSchema": None, "message": body}  # fmt: skip
    values = [
        _md("v1", json.dumps(schema)),
        envelope("DT", body, schema_id="v1"),
        _with_utf8_break(envelope("DT", body, schema_id="v1"), "Ann"),  # a value
        _with_utf8_break(envelope("DT", body, schema_id="v1"), "POS"),
        _with_utf8_break(avro(ENVELOPE_SCHEMA, with_headers), "HOST"),  # the envelope's own headers
        avro(ENVELOPE_SCHEMA, with_headers),
    ]
    assert _flags(spark, values) == [False, True, False, False, False, True]


def test_a_configured_key_and_types_win_over_the_metadatas(spark):
    tables = {"HR.EMP": {"primary_key": ["NAME"], "column_types": {"BIG": "int"}}}
    values = [
        METADATA,
        _dt(data={**ROW, "BIG": 12}),
        _dt(n=2),  # BIG 2^40 is no int: quarantined
        # The metadata's key judges a key change, not the configured one.
        _dt("UPDATE", data={**ROW, "BIG": 1, "NAME": "Bo"}, before={**ROW, "BIG": 1}, n=3),
    ]
    assert _flags(spark, values, _pipeline(tables)) == [False, True, False, True]


def _schema_with(name: str, avro_type) -> str:
    columns = [(n, t) for n, _, t, _ in COLUMNS] + [(name, avro_type)]
    return json.dumps(data_schema(columns))


@pytest.mark.parametrize(
    "avro_type",
    [
        {"type": "int", "logicalType": "time-millis"},
        {"type": "long", "logicalType": "time-micros"},
        {"type": "string", "logicalType": "uuid"},
        {"type": "array", "items": "string"},
        {"type": "map", "values": "string"},
        ["null", "int", "string"],
    ],
    ids=["time-millis", "time-micros", "uuid", "array", "map", "union"],
)
def test_a_data_schema_with_a_column_the_path_does_not_render_is_left_to_python(spark, avro_type):
    """No plan: every record goes to Python (which decodes such records: test_qlik.py)."""
    records = records_frame(spark, [(b"k", _md("v1", _schema_with("EXTRA", avro_type)), [])])
    assert qlik_avro.decode_natively(records, _pipeline()) is None


@pytest.mark.parametrize(
    "change",
    [
        "headers nullable",
        "timestamp as a long",
        "no beforeData",
        "another before record",
        "BYTES as text",
        "data by reference",
    ],
)
def test_data_schemas_of_other_shapes(spark, change):
    schema = copy.deepcopy(SCHEMA)
    fields = schema["fields"]
    expect_plan = False
    if change == "headers nullable":
        fields[2]["type"] = ["null", HEADERS]
    elif change == "timestamp as a long":
        fields[2]["type"] = {**HEADERS, "fields": [*HEADERS["fields"], {"name": "timestamp", "type": "long"}]}
    elif change == "no beforeData":
        del fields[1]
        expect_plan = True
    elif change == "another before record":
        fields[1]["type"] = ["null", {"type": "record", "name": "Other", "fields": [{"name": "ID", "type": "int"}]}]
    elif change == "data by reference":  # the record written out in beforeData, named by data
        record = fields[0]["type"]
        fields[:2] = [{"name": "beforeData", "type": ["null", record]}, {"name": "data", "type": f"{DATA_NS}.Data"}]
        expect_plan = True
    else:
        photo = next(f for f in fields[0]["type"]["fields"] if f["name"] == "PHOTO")
        photo["type"] = ["null", "string"]
    text = json.dumps(schema)
    records = [_md("v1", text)]
    native = qlik_avro.decode_natively(records_frame(spark, [(b"k", v, []) for v in records]), _pipeline())
    assert (native is not None) == expect_plan
    if expect_plan:
        headers = {"operation": "INSERT", "changeSequence": "1", "columnMask": WHOLE}
        value = envelope("DT", avro(schema, {"data": ROW, "headers": headers}), schema_id="v1")
        assert _flags(spark, [records[0], value]) == [False, True]


def test_refresh_rows_take_the_position_of_the_change_before_them_across_both_paths(spark):
    refresh = [_dt("REFRESH", data={**ROW, "ID": i}, sequence="", counter=None) for i in range(2, 6)]
    values = [
        METADATA,
        refresh[0],  # before any change: no position
        _dt(n=5),  # known natively; goes along with the REFRESH at offset 5
        refresh[1],  # after a known change: native
        _dt("UPDATE", data={**ROW, "ID": 9}, before=ROW, n=6),  # Python's (a key change)
        refresh[2],  # after a record left to Python: Python's
        _dt(n=7),  # goes along with the REFRESH after the unplanned record
        envelope("DT", _body("UPDATE", n=8), schema_id="nowhere"),  # unknown to the native path: may be a REFRESH
        refresh[3],  # after an unknown record: Python's
    ]
    assert _flags(spark, values) == [False, True, False, True, False, False, False, False, False]


def test_without_spark_avro_every_record_goes_to_python(spark, monkeypatch, caplog):
    monkeypatch.setattr(debezium_avro_native, "avro_functions_loaded", lambda session: False)
    records = records_frame(spark, [(b"k", METADATA, []), (b"k", _dt(), [])])
    with caplog.at_level(logging.WARNING):
        assert qlik_avro.decode_natively(records, _pipeline()) is None
    assert "spark-avro is not on this Spark session's classpath" in caplog.text


def test_a_boolean_byte_other_than_0_and_1_reads_as_fastavro_reads_it(spark):
    """fastavro reads any byte but 0 as true, Java's reader only 1: the path reads the byte itself."""
    true, false = _dt(data={**ROW, "OK": True}), _dt(data={**ROW, "OK": False})
    [at] = [i for i, (a, b) in enumerate(zip(true, false, strict=True)) if a != b]
    values = [METADATA] + [true[:at] + bytes([byte]) + true[at + 1 :] for byte in (0, 1, 2, 0x7F, 0x80, 0xFF)]
    assert _flags(spark, values) == [False] + [True] * 6


def test_over_the_column_limit_the_most_named_table_versions_are_planned(spark):
    """Six table versions of nine columns each: more than MAX_NATIVE_COLUMNS (40). The four the data envelopes of the
    sample name most often get a plan (ties in the archive's order); the rest go to Python."""
    ids = [f"v{n}" for n in range(1, 7)]
    named = ["v5"] * 3 + ["v6"] * 2 + ["v1"]
    values = [_md(schema_id) for schema_id in ids] + [_dt(schema_id=schema_id) for schema_id in named]
    records = records_frame(spark, [(b"k", value, []) for value in values])
    pipeline = _pipeline()
    index = collect_metadata(records, pipeline, qlik_avro.metadata_candidates, qlik_avro.parse_metadata)
    plans = qlik_avro_native.table_plans(index, records, pipeline)
    assert [plan.schema_id for plan in plans] == ["v5", "v6", "v1", "v2"]
    assert sum(len(plan.columns) for plan in plans) <= qlik_native.MAX_NATIVE_COLUMNS


def _mutated(value: bytes, rng: random.Random) -> bytes:
    data = bytearray(value)
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def test_randomly_mutated_messages_are_decoded_alike_or_left_to_python(spark):
    """A byte changed anywhere: the native path takes a record only where it decodes as the Python decoder does."""
    rng = random.Random(57)
    base = [_dt(n=n, data={**ROW, "ID": n}) for n in range(1, 6)] + [_dt(schema_id=None, embed=SCHEMA_TEXT, n=9)]
    values = [METADATA] + [_mutated(rng.choice(base), rng) for _ in range(int(os.environ.get("MUTATIONS", 300)))]
    _flags(spark, values)  # the comparisons are in native_flags_of_messages
