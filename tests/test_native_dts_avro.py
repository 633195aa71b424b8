"""The native (``from_avro``, ``options.reader: spark``) path of dts-avro against its fastavro decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python (``native_helpers.native_flags_of_messages``). Checked on a
simulated history (every record is taken: MINIMAL row images, latin1 text and a DDL record included) and hand-made
corner cases: each binlog type's values at the edges where Java and Python would write them differently, partial images,
keys from the config, the tags or none, and the records the native path leaves to Python.
"""

from __future__ import annotations

import io
import json
import logging

import fastavro
from alibaba_helpers import DTS_FIELDS, DTS_RECORD_AVSC, NONE, dts, row, value
from native_helpers import native_flags_of_messages, records_frame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import debezium_avro_native, dts_avro, dts_avro_native
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.dts_record_schema import RECORD_SCHEMA, parsed_record_schema, write_record_schema
from cdcreplay_lab.simulator.encode_dts_avro import SCHEMA_FILE, encode_dts_avro, pipeline_settings


def _pipeline(tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="dts-avro",
        archive={"path": "unused"},
        tables=tables or {},
        options={"reader": "spark", "writer_schema": str(DTS_RECORD_AVSC), **options},
    )


def _flags(spark, values: list[bytes], pipeline=None) -> list[bool]:
    return native_flags_of_messages(spark, dts_avro, values, pipeline or _pipeline())


def test_the_read_schema_writes_each_named_type_out_once_where_it_is_first_used():
    read_schema, members = dts_avro_native.record_read_schema(RECORD_SCHEMA)
    text = str(read_schema)
    for name in ("Integer", "DateTime", "EmptyObject", "Field", "Source"):
        assert text.count(f"'name': '{name}'") == 1, name
    assert members == {
        name: index
        for index, name in enumerate(
            (
                *("Integer", "Character", "Decimal", "Float", "Timestamp", "DateTime", "TimestampWithTimeZone"),
                *("BinaryGeometry", "TextGeometry", "BinaryObject", "TextObject", "EmptyObject"),
            )
        )
    }
    fastavro.parse_schema(read_schema)  # a schema on its own


def test_a_writer_schema_without_dts_value_union_leaves_every_record_to_python(spark, tmp_path):
    """A Record.avsc whose images lack a branch the native path converts (here EmptyObject) has no native reading:
    ``decode_natively`` gives None and ``decode`` is the Python decoder's."""
    document = json.loads(DTS_RECORD_AVSC.read_text())
    record = document[-1]
    for field in record["fields"]:
        if field["name"] in ("beforeImages", "afterImages"):
            array = next(branch for branch in field["type"] if isinstance(branch, dict))
            array["items"] = [b for b in array["items"] if not str(b).endswith("EmptyObject")]
    path = tmp_path / "Record.avsc"
    path.write_text(json.dumps(document))
    assert dts_avro_native.reading_of(str(DTS_RECORD_AVSC)) is not None
    assert dts_avro_native.reading_of(str(path)) is None
    pipeline = _pipeline(writer_schema=str(path))
    records = records_frame(spark, [(None, dts("INSERT", 1, after=_row(note=None)), [])])
    assert dts_avro.decode_natively(records, pipeline) is None
    assert [r.op for r in dts_avro.decode(records, pipeline).collect()] == ["insert"]


def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path):
    history = simulate(seed=7, events=1500, days=2)
    records = list(encode_dts_avro(history))
    settings = pipeline_settings(tmp_path)
    write_record_schema(tmp_path / SCHEMA_FILE)
    pipeline = _pipeline(settings["tables"], **settings["options"])
    flags = _flags(spark, [r.value for r in records], pipeline)
    schema = parsed_record_schema()
    operations = [fastavro.schemaless_reader(io.BytesIO(r.value), schema)["operation"] for r in records]
    assert all(flags), "every record of the simulated history is taken natively"
    assert {"INIT", "INSERT", "UPDATE", "DELETE", "BEGIN", "COMMIT", "HEARTBEAT", "DDL"} <= set(operations)


FIELDS = [
    {"name": "id", "dataTypeNumber": 3},
    {"name": "flag", "dataTypeNumber": 1},
    {"name": "big", "dataTypeNumber": 8},
    {"name": "dt", "dataTypeNumber": 12},
    {"name": "ts", "dataTypeNumber": 7},
    {"name": "f", "dataTypeNumber": 5},
    {"name": "blob", "dataTypeNumber": 252},
    {"name": "js", "dataTypeNumber": 245},
]


def _typed(**changes) -> list:
    values = {
        "id": value("Integer", precision=11, value="1"),
        "flag": value("Integer", precision=4, value="1"),
        "big": value("Integer", precision=20, value="18446744073709551615"),
        "dt": value("DateTime", year=2024, month=1, day=2, hour=3, minute=4, second=5, millis=6),
        "ts": value("Timestamp", timestamp=1704164645, millis=123),
        "f": value("Float", value=1.5, precision=22, scale=31),
        "blob": value("BinaryObject", type="BLOB", value=b"\x00\xff"),
        "js": value("TextObject", type="JSON", value='{"a": 1}'),
    } | changes
    return [values[field["name"]] for field in FIELDS]


def _row(**changes) -> list:
    """``alibaba_helpers.row`` (id, name, price, note, d) with some of its values replaced."""
    values = dict(zip(("id", "name", "price", "note", "d"), row(1), strict=True)) | changes
    return list(values.values())


def _character(charset: str, raw: bytes) -> tuple:
    return value("Character", charset=charset, value=raw)


def _date(year, month, day, **time) -> tuple:
    parts = {"hour": None, "minute": None, "second": None, "millis": None} | time
    return value("DateTime", year=year, month=month, day=day, **parts)


def _decimal(text: str, precision: int = 5, scale: int = 2) -> tuple:
    return value("Decimal", value=text, precision=precision, scale=scale)


KEY_ONLY = [row(1)[0], NONE, NONE, NONE, NONE]
CORNER_CASES = [  # (value, taken natively)
    (dts("INSERT", 1, after=row(1)), True),
    (dts("INIT", 2, after=row(2)), True),
    (dts("UPDATE", 3, before=row(1), after=row(1, name="m")), True),
    (dts("UPDATE", 4, before=KEY_ONLY, after=[row(1)[0], NONE, _decimal("9.99"), NONE, NONE]), True),  # MINIMAL
    (dts("UPDATE", 5, before=KEY_ONLY, after=[NONE, _character("utf8mb4", b"m"), NONE, NONE, NONE]), True),
    # Leaves out only columns no type is known for (its before image holds the key alone): Python quarantines it.
    (dts("UPDATE", 6, before=KEY_ONLY, after=[row(1)[0], NONE, NONE, NONE, row(1)[4]]), False),
    (dts("UPDATE", 7, before=KEY_ONLY, after=[row(1)[0], _character("utf8mb4", b"m"), NONE, NONE, NONE]), True),
    (dts("UPDATE", 8, before=row(2), after=row(3)), False),  # the row moves to a new key
    (dts("DELETE", 9, before=row(1)), True),
    (dts("DELETE", 10, before=KEY_ONLY), True),
    (dts("DELETE", 11, before=row(1), after=row(1)), False),
    (dts("DELETE", 12), False),
    (dts("INSERT", 13), False),
    (dts("INSERT", 14, after=row(1, note=None)), True),
    (dts("INSERT", 15, after=row(1)[:4]), False),  # 4 values for 5 fields
    (dts("INSERT", 16, after="INSERT is no DDL"), False),
    (dts("INSERT", 17, after=_row(id=value("Integer", precision=11, value="007"))), False),
    (dts("INSERT", 18, after=_row(id=value("Integer", precision=11, value="-0"))), False),
    (dts("INSERT", 19, after=_row(id=value("Integer", precision=11, value=" 1"))), False),
    (dts("INSERT", 20, after=_row(id=value("Integer", precision=11, value=str(2**63)))), False),
    (dts("INSERT", 21, after=_row(id=value("Integer", precision=11, value=str(-(2**63))))), True),
    (dts("INSERT", 22, after=_row(id=_decimal("1"))), False),  # a wrong branch
    (dts("INSERT", 23, after=_row(price=_decimal("1.005"))), False),
    (dts("INSERT", 24, after=_row(price=_decimal("123.45"))), True),
    (dts("INSERT", 25, after=_row(price=_decimal("1234.5"))), False),
    (dts("INSERT", 26, after=_row(price=_decimal("-0.5"))), True),
    (dts("INSERT", 27, after=_row(price=_decimal("1e2"))), False),
    (dts("INSERT", 28, after=_row(price=_decimal("1.5", 30, 2))), False),  # wider than the value check reads
    (dts("INSERT", 29, after=_row(price=_decimal("12345678901234567890123456789", 40, 0))), False),  # a string
    (dts("INSERT", 30, after=_row(name=_character("latin1", b"\xc4\xd6"))), True),
    (dts("INSERT", 31, after=_row(name=_character("latin1", b"\x80"))), False),  # cp1252's euro sign
    (dts("INSERT", 32, after=_row(name=_character("ascii", b"abc"))), True),
    (dts("INSERT", 33, after=_row(name=_character("gbk", b"abc"))), False),
    (dts("INSERT", 34, after=_row(name=_character("binary", b"\x00\xff"))), True),
    (dts("INSERT", 35, after=_row(name=_character("", b"\x00"))), True),
    (dts("INSERT", 36, after=_row(name=_character("utf8mb4", b"\xff"))), False),
    (dts("INSERT", 37, after=_row(name=_character("UTF8MB4", "caf\u00e9 \u4e2d".encode()))), True),
    (dts("INSERT", 38, after=_row(name=_character(" utf8", b"a"))), False),
    (dts("INSERT", 89, after=_row(name=_character("utf8", b"\xed\xa0\x80"))), False),  # a surrogate's UTF-8 form
    (dts("INSERT", 90, after=_row(name=_character("utf8", b"\xc0\x80"))), False),  # an overlong NUL
    (dts("INSERT", 91, after=_row(name=_character("latin1", b"\xa0\xff\x00"))), True),
    (dts("INSERT", 39, after=_row(d=_date(2024, 2, 30))), False),
    (dts("INSERT", 40, after=_row(d=_date(0, 0, 0))), False),  # a MySQL zero date
    (dts("INSERT", 41, after=_row(d=_date(2024, 2, 29, hour=0))), True),
    (dts("INSERT", 42, after=_row(d=_date(2023, 2, 29))), False),
    (dts("INSERT", 43, after=_row(d=_date(2024, 1, 2, hour=1))), False),  # a DATE with a time of day
    (dts("INSERT", 44, after=_row(d=_date(5, 1, 2))), True),
    (dts("INSERT", 45, after=_row(note=value("BinaryObject", type="BLOB", value=b"\x01"))), True),
    (dts("INSERT", 46, after=_row(note=_character("utf8mb4", b"t"))), True),
    (dts("INSERT", 47, after=_row(note=value("Integer", precision=11, value="1"))), False),
    (dts("INSERT", 48, after=_typed(), fields=FIELDS), True),
    (dts("INSERT", 49, after=_typed(dt=_date(999, 1, 2, hour=3)), fields=FIELDS), False),
    (dts("INSERT", 50, after=_typed(dt=_date(2024, 1, 2, second=60)), fields=FIELDS), False),
    (dts("INSERT", 51, after=_typed(dt=_date(2024, 1, 2)), fields=FIELDS), True),  # midnight
    (dts("INSERT", 52, after=_typed(ts=value("Timestamp", timestamp=0, millis=0)), fields=FIELDS), True),
    (dts("INSERT", 53, after=_typed(ts=value("Timestamp", timestamp=0, millis=10**6)), fields=FIELDS), False),
    (dts("INSERT", 54, after=_typed(ts=value("Timestamp", timestamp=-(10**11), millis=0)), fields=FIELDS), False),
    (dts("INSERT", 55, after=_typed(f=value("Float", value=1e20, precision=22, scale=31)), fields=FIELDS), False),
    (dts("INSERT", 56, after=_typed(f=value("Float", value=float("nan"), precision=0, scale=0)), fields=FIELDS), False),
    (dts("INSERT", 57, after=_typed(f=value("Float", value=-0.0, precision=0, scale=0)), fields=FIELDS), True),
    (dts("INSERT", 58, after=_typed(flag=value("Integer", precision=4, value="2")), fields=FIELDS), True),
    (dts("INSERT", 59, after=_typed(big=value("Integer", precision=20, value="1" * 21)), fields=FIELDS), False),
    (dts("INSERT", 60, after=_typed(js=_character("utf8mb4", b"[]")), fields=FIELDS), True),
    (dts("INSERT", 61, after=_typed(dt=value("Integer", precision=4, value="1")), fields=FIELDS), False),
    (dts("INSERT", 62, after=row(1), object_name="shop.s.t"), True),
    (dts("INSERT", 63, after=row(1), object_name="shop.a\\u002Eb"), True),
    (dts("INSERT", 64, after=row(1), object_name="a.b.c.d"), False),
    (dts("INSERT", 65, after=row(1), object_name=None), False),
    (dts("INSERT", 66, after=row(1), tags={}), False),  # no key
    (dts("INSERT", 67, after=row(1), tags={"pk_uk_info": '{"uk_name":["name"]}'}), True),
    (dts("INSERT", 68, after=row(1), tags={"pk_uk_info": "not json"}), False),
    (dts("INSERT", 69, after=row(1), source={"sourceType": "Oracle", "version": "19"}), False),
    (
        dts("INSERT", 70, after=row(1, d=(2024, 1, 2)), fields=[*DTS_FIELDS[:4], {"name": "d", "dataTypeNumber": 11}]),
        False,
    ),
    (dts("INSERT", 71, after=_row(id=None)), False),  # no key value
    (dts("BEGIN", 72, object_name=None, fields=None), True),
    (dts("COMMIT", 73, object_name=None, fields=None), True),
    (dts("ROLLBACK", 74, object_name="shop.t", fields=None), True),
    (dts("COMMIT", 75, object_name="a.b.c.d", fields=None), False),
    (dts("HEARTBEAT", 76, object_name=None, fields=None), True),
    (dts("HEARTBEAT", 77, object_name=None, fields=None, sourceTimestamp=10**12), False),
    (dts("DDL", 78, fields=None, after="ALTER TABLE t ADD COLUMN x INT"), True),
    (dts("CHECKPOINT", 79, object_name=None, fields=None), True),
    (dts("INSERT", 80, after=row(1)).replace(b"mysql-bin", b"\xffysql-bin"), False),  # fastavro refuses it
    (dts("INSERT", 81, after=row(1))[:-5], False),  # truncated
    (b"\x1a" + dts("INSERT", 82, after=row(1)), False),  # framed by Record's union index
    (dts("INSERT", 83, after=row(1)) + b"\x00", True),  # a byte after the record: ignored on both paths
    (dts("DDL", 84, fields=None, after="DROP TABLE x", object_name="a.b.c.d"), False),
    (dts("DDL", 85, fields=None, after=row(1)), False),  # a DDL whose afterImages are values
    (dts("DDL", 86, fields=None, after=None, object_name="shop.s.a\\u002eb"), True),
    (dts("DDL", 87, fields=None, after="ALTER", object_name="shop."), True),  # no table: no table id
    (dts("NOOP", 88, object_name="", fields=None), True),
    (b"", True),  # a Kafka tombstone
]


def test_corner_cases_are_decoded_natively_only_where_the_paths_agree(spark):
    values = [message for message, _ in CORNER_CASES]
    flags = _flags(spark, values)
    wrong = [
        (offset, taken)
        for offset, ((_, taken), flag) in enumerate(zip(CORNER_CASES, flags, strict=True))
        if taken != flag
    ]
    assert not wrong, f"(offset, expected native flag) of the cases the native path judged otherwise: {wrong}"


def test_a_configured_key_and_configured_types_are_applied_as_routing_applies_them(spark):
    """``tables.<t>.primary_key`` names the key whatever the tags say; a value its configured type cannot hold is
    Python's (routing quarantines it)."""
    # ``dropped`` is no field of the records: routing adds its type to every row all the same.
    tables = {"shop.t": {"primary_key": ["name"], "column_types": {"id": "int", "note": "string", "dropped": "int"}}}
    values = [
        dts("INSERT", 1, after=row(1)),
        dts("INSERT", 2, after=row(2), tags={}),
        dts("INSERT", 3, after=_row(id=value("Integer", precision=11, value=str(2**31)))),
        dts("DELETE", 4, before=KEY_ONLY),  # no value of the configured key column
        dts("DDL", 5, fields=None, after="ALTER TABLE t ADD COLUMN x INT"),  # its row names the key and types
    ]
    assert _flags(spark, values, _pipeline(tables)) == [True, True, False, False, True]


def test_without_spark_avro_every_record_decodes_in_python_and_the_log_says_why(spark, monkeypatch, caplog):
    records = records_frame(spark, [(None, dts("INSERT", 1, after=row(1)), [])])
    monkeypatch.setattr(debezium_avro_native, "avro_functions_loaded", lambda session: False)
    with caplog.at_level(logging.WARNING, logger=debezium_avro_native.__name__):
        assert dts_avro.decode_natively(records, _pipeline()) is None
    assert "spark-avro is not on this Spark session's classpath" in caplog.text
    assert [row.op for row in dts_avro.decode(records, _pipeline()).collect()] == ["insert"]
