"""The native (``from_avro``, ``options.reader: spark``) path of drs-avro against its fastavro decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python (``native_helpers.native_flags_of_messages``). Checked on a
simulated history (every row change taken, its DDL record left to Python) and hand-made corner cases under the
PROJECT-WRITTEN schema (tests/data/drs-avro/PROVENANCE.md): each framing, configured keys and types, images of the
wrong length, key changes, strings that are not UTF-8, and writer schemas of another shape.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import random
import struct
from collections import Counter

import fastavro
import pytest
from native_helpers import native_flags_of_messages, records_frame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import debezium_avro_native, drs_avro, drs_avro_native
from cdcreplay.formats.wire.avro_wire import AvroWire, fingerprint
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_drs_avro import DRS_RECORD_SCHEMA, encode_drs_avro, pipeline_settings

TABLES = {"shop.t": {"primary_key": ["id"], "column_types": {"id": "int", "d": "decimal(5,2)"}}}
NAMES = ("id", "v", "d")


def _schema_file(tmp_path, schema=DRS_RECORD_SCHEMA, name="drs.avsc") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(schema), encoding="utf-8")
    return str(path)


def _pipeline(writer_schema: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="drs-avro",
        archive={"path": "unused"},
        tables=TABLES if tables is None else tables,
        options={"reader": "spark", "writer_schema": writer_schema, **options},
    )


def _record(operation: str, seqno: int, before=None, after=None, names=NAMES, **fields) -> dict:
    def image(values):
        return None if values is None else [None if v is None else {"value": v} for v in values]

    record = {
        "version": "1.0",
        "seqno": seqno,
        "shardId": "0",
        "eventid": str(seqno),
        "updateTimestamp": 1700000000000 + seqno,
        "tableName": '"shop"."t"',
        "operation": operation,
        "columnCount": len(names),
        "fields": [{"name": n} for n in names],
        "beforeImages": image(before),
        "afterImages": image(after),
    }
    return record | fields


def _body(record: dict, schema=DRS_RECORD_SCHEMA) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(copy.deepcopy(schema)), record)
    return out.getvalue()


def _single_object(record: dict) -> bytes:
    return b"\xc3\x01" + fingerprint(fastavro.parse_schema(copy.deepcopy(DRS_RECORD_SCHEMA))) + _body(record)


def _flags(spark, values: list[bytes], pipeline: PipelineConfig) -> list[bool]:
    return native_flags_of_messages(spark, drs_avro, values, pipeline)


def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path):
    history = simulate(seed=7, events=1500, days=2)
    records = list(encode_drs_avro(history, tmp_path))
    settings = pipeline_settings(tmp_path)
    pipeline = _pipeline(settings["options"]["writer_schema"], settings["tables"])
    flags = _flags(spark, [r.value for r in records], pipeline)
    operations = [
        fastavro.schemaless_reader(io.BytesIO(r.value[10:]), fastavro.parse_schema(copy.deepcopy(DRS_RECORD_SCHEMA)))[
            "operation"
        ]
        for r in records
    ]
    assert {"INIT", "INSERT", "UPDATE", "DELETE", "DDL"} <= set(operations)
    untaken = Counter(operation for operation, flag in zip(operations, flags, strict=True) if not flag)
    # A primary-key change is one UPDATE whose images hold the old and the new key: a delete and an update, Python's.
    key_changes = sum(1 for event in history.iter_events() if event.new_key is not None)
    assert key_changes > 0
    assert untaken == Counter({"DDL": operations.count("DDL"), "UPDATE": key_changes})


ROW = ["1", "a", "1.50"]
CORNER_CASES = [  # (record, taken natively)
    (_record("INSERT", 1, after=ROW), True),
    (_record("INIT", 2, after=ROW), True),
    (_record("insert", 3, after=ROW), True),  # any case, as the Python decoder upper-cases it
    (_record("UPDATE", 4, before=ROW, after=["1", "b", None]), True),
    (_record("UPDATE", 5, before=ROW, after=["2", "a", "1.50"]), False),  # the row moves to a new key
    (_record("UPDATE", 6, before=[None, "a", "1.50"], after=ROW), False),  # the before image lacks the key value
    (_record("UPDATE", 7, after=ROW), True),  # no before image
    (_record("DELETE", 8, before=ROW), True),
    (_record("DELETE", 9, before=ROW, after=ROW), True),  # its after image is ignored on both paths
    (_record("DELETE", 10), False),  # no before image: missing_image in Python
    (_record("INSERT", 11), False),
    (_record("INSERT", 12, after=[None, "a", "1.50"]), False),  # no key value
    (_record("INSERT", 13, after=["1", "a"]), False),  # 2 values for 3 fields
    (_record("INSERT", 14, before=["1"], after=ROW), False),  # a before image of another length
    (_record("INSERT", 15, after=ROW, columnCount=4), False),
    (_record("INSERT", 16, after=["x", "a", "1.50"]), False),  # not an int: bad_value in Python
    (_record("INSERT", 17, after=["1", "a", "1.505"]), False),  # more scale than decimal(5,2)
    (_record("INSERT", 18, after=["1", "a", "1234.5"]), False),  # more integer digits than it holds
    (_record("INSERT", 19, after=[str(2**31), "a", None]), False),  # beyond int
    (_record("INSERT", 20, after=["1", "a\u0002", None]), True),  # an untyped column holds any text
    (_record("INSERT", 21, after=["1", "x", "1"], names=("id", "id", "d")), False),  # a name twice
    (_record("INSERT", 22, after=["1", "x", "1"], names=("id", "", "d")), False),
    (_record("INSERT", 23, after=["1"], names=("id",)), True),  # fewer fields than configured types
    (_record("INSERT", 24, after=["a", "1"], names=("v", "id")), True),  # the fields in another order
    (_record("INSERT", 25, after=["a", "1.50"], names=("v", "d")), False),  # no key column among the fields
    (_record("INSERT", 26, after=ROW, tableName='"shop"."other"'), False),  # no configured key: missing_key
    (_record("INSERT", 27, after=ROW, tableName="shop.t"), True),  # another spelling of the same table
    (_record("INSERT", 28, after=ROW, tableName='"shop.t'), False),  # an unclosed quote: missing_table
    (_record("MERGE", 29, after=ROW), False),
    (_record("INSERT ", 30, after=ROW), False),
    (_record("DDL", 31, names=(), columnCount=0), False),  # control records are Python's
    (_record("COMMIT", 32, names=(), columnCount=0), False),
    (_record("INSERT", 33, after=ROW, updateTimestamp=-(10**15)), False),  # before year 1
    (_record("INSERT", 34, after=ROW, updateTimestamp=0), True),
    (_record("INSERT", 2**62, after=ROW, updateTimestamp=0), True),  # a seqno beyond a double's exact integers
]
RAW_CASES = [  # (value, taken natively): bytes the records above cannot say
    (_single_object(_record("INSERT", 40, after=ROW)).replace(b"shop", b"sh\xffp"), False),  # fastavro refuses it
    (_single_object(_record("INSERT", 41, after=["1", "\u00e9", None])).replace(b"\xc3\xa9", b"\xc3\xc3"), False),
    (_single_object(_record("INSERT", 42, after=ROW)).replace(b"1.0", b"1\xff0"), False),  # an unused string
    (_single_object(_record("INSERT", 43, after=ROW))[:-6], False),  # truncated
    (_single_object(_record("INSERT", 44, after=ROW)) + b"\x00", True),  # a byte after the record: ignored by both
    (b"\xc3\x01" + b"\x00" * 8 + _body(_record("INSERT", 45, after=ROW)), False),  # unknown fingerprint
    (b"", True),  # a Kafka tombstone
]


def test_corner_cases_are_decoded_natively_only_where_the_paths_agree(spark, tmp_path):
    cases = [(_single_object(record), taken) for record, taken in CORNER_CASES] + RAW_CASES
    flags = _flags(spark, [value for value, _ in cases], _pipeline(_schema_file(tmp_path)))
    wrong = [
        (offset, taken) for offset, ((_, taken), flag) in enumerate(zip(cases, flags, strict=True)) if taken != flag
    ]
    assert not wrong, f"(offset, expected native flag) of the cases the native path judged otherwise: {wrong}"


def test_each_framing_is_read_as_the_python_decoder_frames_it(spark, tmp_path):
    record = _record("INSERT", 1, after=ROW)
    body, framed = _body(record), _single_object(record)
    confluent = b"\x00" + struct.pack(">I", 42) + body
    schema = _schema_file(tmp_path)
    registry = tmp_path / "registry"
    registry.mkdir()
    _schema_file(registry, name="42.avsc")
    cases = [
        ([body, framed, confluent], {}, [True, True, False]),  # auto: raw, single-object, raw (no table read)
        ([body, framed], {"framing": "raw"}, [True, False]),  # single-object bytes read raw: Python decides
        ([framed, body], {"framing": "single-object"}, [True, False]),
        ([confluent, body], {"framing": "confluent"}, [True, False]),  # the configured schema, any id
        ([confluent, framed, body], {"registry_dir": str(registry)}, [False, True, True]),  # auto with a registry
    ]
    for values, options, expected in cases:
        assert _flags(spark, values, _pipeline(schema, **options)) == expected, options
    with_registry = _pipeline(schema, framing="confluent", registry_dir=str(registry))
    assert drs_avro_native.reading_of(drs_avro.wire_of(with_registry)) is None
    records = records_frame(spark, [(None, confluent, [])])
    assert drs_avro.decode_natively(records, with_registry) is None
    assert [row.op for row in drs_avro.decode(records, with_registry).collect()] == ["insert"]


def _fields_changed(change) -> dict:
    schema = copy.deepcopy(DRS_RECORD_SCHEMA)
    change({field["name"]: field for field in schema["fields"]})
    return schema


@pytest.mark.parametrize(
    "change",
    [
        lambda fields: fields["operation"].update(type="bytes"),
        lambda fields: fields["seqno"].update(type="string"),
        lambda fields: fields["fields"]["type"]["items"]["fields"].append({"name": "type", "type": "string"}),
        lambda fields: fields["afterImages"]["type"][1].update(items=["null", "string"]),
        lambda fields: fields["version"].update(type={"type": "bytes", "logicalType": "decimal", "precision": 40}),
        lambda fields: fields.pop("tableName").update(name="table"),
    ],
    ids=["operation-bytes", "seqno-string", "field-type", "bare-values", "logical-type", "no-tableName"],
)
def test_a_writer_schema_of_another_shape_leaves_every_record_to_python(tmp_path, change):
    schema = _fields_changed(change)
    assert drs_avro_native.reading_of(AvroWire(writer_schema=_schema_file(tmp_path))) is not None
    assert drs_avro_native.reading_of(AvroWire(writer_schema=_schema_file(tmp_path, schema, "other.avsc"))) is None


def test_a_schema_without_the_optional_fields_is_read_natively(spark, tmp_path):
    """No seqno, updateTimestamp or columnCount: no position, no event time and no count check, on both paths."""
    schema = copy.deepcopy(DRS_RECORD_SCHEMA)
    optional = ("seqno", "updateTimestamp", "columnCount")
    schema["fields"] = [field for field in schema["fields"] if field["name"] not in optional]
    records = [
        {k: v for k, v in _record("INSERT", 1, after=ROW).items() if k not in optional},
        {k: v for k, v in _record("DELETE", 2, before=ROW).items() if k not in optional},
    ]
    pipeline = _pipeline(_schema_file(tmp_path, schema), framing="raw")
    assert _flags(spark, [_body(record, schema) for record in records], pipeline) == [True, True]


def test_mutated_records_are_taken_only_where_both_readers_read_them_alike(spark, tmp_path):
    """Bytes changed, dropped or added at random in valid records: whatever Java's Avro reader makes of a mutated
    value, a record the native path takes decodes to the Python decoder's rows (``native_flags_of_messages``)."""
    rng = random.Random(20261207)
    valid = [_single_object(record) for record, taken in CORNER_CASES if taken]
    mutated = []
    for _ in range(300):
        value = bytearray(rng.choice(valid))
        at = rng.randrange(len(value))
        kind = rng.randrange(3)
        if kind == 0:
            value[at] = rng.randrange(256)
        elif kind == 1:
            del value[at : at + rng.randrange(1, 4)]
        else:
            value[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        mutated.append(bytes(value))
    flags = _flags(spark, mutated, _pipeline(_schema_file(tmp_path)))
    assert 0 < sum(flags) < len(flags), "some mutated records are still read natively, and some are Python's"


def test_without_spark_avro_every_record_decodes_in_python_and_the_log_says_why(spark, tmp_path, monkeypatch, caplog):
    records = records_frame(spark, [(None, _single_object(_record("INSERT", 1, after=ROW)), [])])
    pipeline = _pipeline(_schema_file(tmp_path))
    monkeypatch.setattr(debezium_avro_native, "avro_functions_loaded", lambda session: False)
    with caplog.at_level(logging.WARNING, logger=debezium_avro_native.__name__):
        assert drs_avro.decode_natively(records, pipeline) is None
    assert "spark-avro is not on this Spark session's classpath" in caplog.text
    assert [row.op for row in drs_avro.decode(records, pipeline).collect()] == ["insert"]
