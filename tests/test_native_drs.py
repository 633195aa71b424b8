"""The native (Spark JSON reader, ``options.reader: spark``) path of the DRS JSON formats against their Python decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python. Checked on simulated histories of every DRS source (MySQL JSON
and JSON-C, Oracle and PostgreSQL), the vendor samples and hand-made corner cases: multi-row messages, key changes,
DELETE rows in `old` or `data`, values outside their type, types DRS writes in forms to convert, number tokens,
nested values. The pipeline's two-pass write gives the same rows as ``decode``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from frame_helpers import assert_same_frames
from native_helpers import native_flags_of_messages, records_frame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder_module
from cdcreplay.formats.common import DECODED_COLUMNS
from cdcreplay.formats.wire import native_json as N
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_drs_json import encode_drs_json, pipeline_settings
from cdcreplay_lab.simulator.history import TABLES

SAMPLES = Path(__file__).parent / "data" / "conformance" / "vendor-doc-samples"
SOURCES = {
    "mysql": "drs-json-mysql",
    "json-c": "drs-json-c",
    "oracle": "drs-json-rdbms",
    "postgresql": "drs-json-rdbms",
}


def _pipeline(fmt: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format=fmt,
        archive={"path": "unused"},
        tables=tables or {},
        options={"reader": "spark", **options},
    )


def _compare(spark, values: list[bytes], pipeline: PipelineConfig) -> list[bool]:
    return native_flags_of_messages(spark, decoder_module(pipeline.format), values, pipeline)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_simulated_history_is_decoded_natively_as_in_python(spark, source):
    history = simulate(seed=13, events=1500, days=2)
    values = [r.value for r in encode_drs_json(history, source)]
    pipeline = _pipeline(SOURCES[source], pipeline_settings(TABLES, source).get("tables"))
    flags = _compare(spark, values, pipeline)
    ddl = sum(b'"isDdl":true' in value for value in values)
    assert ddl > 0 and len(flags) - sum(flags) >= ddl
    assert sum(flags) >= 0.9 * (len(values) - ddl), "nearly every row change of the simulator is taken natively"


def test_vendor_samples_decode_as_in_python(spark):
    mysql = (SAMPLES / "huawei-drs-json-mysql" / "01-update.json").read_bytes()
    gauss = (SAMPLES / "huawei-drs-json-gaussdb-pg-oracle-sqlserver" / "01-update-gaussdb.json").read_bytes()
    # Binary and MySQL TIMESTAMP columns (the MySQL sample) and pretty-printed JSON are Python's.
    assert _compare(spark, [mysql], _pipeline("drs-json-mysql")) == [False]
    assert _compare(spark, [mysql], _pipeline("drs-json-c")) == [False]
    assert _compare(spark, [gauss], _pipeline("drs-json-rdbms")) == [False]


def _message(kind="INSERT", data=None, old=None, types=None, pk=("id",), table="t", **fields) -> bytes:
    types = types if types is not None else {"id": "int", "v": "varchar", "d": "decimal", "n": "int"}
    message = {
        "mysqlType": types,
        "id": 7,
        "es": 1700000000000,
        "ts": 1700000000005,
        "database": "shop",
        "table": table,
        "type": kind,
        "isDdl": False,
        "sql": "",
        "sqlType": {name: 4 for name in types},
        "data": data,
        "old": old,
        "pkNames": list(pk) if pk is not None else None,
    } | fields
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


ROW = {"id": "1", "v": "x", "d": "1.50", "n": "7"}
CORNER_CASES = [  # (message, taken natively) for drs-json-mysql
    (_message("INSERT", [ROW]), True),
    (_message("INIT", [ROW, ROW | {"id": "2"}]), True),
    (_message("insert", [ROW]), True),
    (_message("UPDATE", [ROW | {"v": "y"}], [ROW]), True),
    (_message("UPDATE", [ROW | {"v": "y"}, ROW | {"id": "2"}], [ROW]), False),  # a shorter `old`
    (_message("UPDATE", [ROW | {"v": "y"}], None), True),
    (_message("UPDATE", [ROW | {"id": "2"}], [ROW]), False),  # moves the row: two rows
    (_message("UPDATE", [ROW], [{"v": "x"}]), False),  # `old` without the key: conservative
    (_message("DELETE", None, [ROW]), True),  # DRS JSON: the row in `old`
    (_message("DELETE", [ROW], None), False),  # missing_image in DRS JSON
    (_message("INSERT", [{"v": "x"}]), False),  # no key value
    (_message("INSERT", [ROW | {"id": None}]), False),
    (_message("INSERT", [None]), False),
    (_message("INSERT", []), False),
    (_message("INSERT", None), False),
    (_message("INSERT", [ROW | {"n": "x"}]), False),  # bad_value
    (_message("INSERT", [ROW | {"n": "2147483648"}]), False),
    (_message("INSERT", [ROW | {"v": "[1]"}]), True),  # a bracket in a string value: counted outside strings
    (_message("INSERT", [ROW | {"v": "{"}]), True),
    (_message("INSERT", [ROW | {"v": '{"a": [1.10, "}"]}'}]), True),  # JSON text in a string value
    (_message("INSERT", [ROW | {"v": {"a": "["}}]), False),  # nested JSON holding a bracket in its string
    (_message("INSERT", [ROW | {"v": "{", "n": 7}]), False),  # a brace in one value, a number token in the next
    (_message("INSERT", [ROW | {"v": "<&>'="}]), True),
    (_message("INSERT", [ROW | {"v": "\U0001f600 caf\u00e9"}]), True),
    (_message("INSERT", [ROW | {"v": 1.5}]), False),  # a number token where text is read
    (_message("INSERT", [ROW | {"v": 15}]), False),
    (_message("INSERT", [ROW], types={"id": "int", "v": "varbinary"}), False),  # converted types: Python
    (_message("INSERT", [ROW], types={"id": "int", "v": "timestamp"}), False),
    (_message("INSERT", [ROW | {"v": "2024-01-02 03:04:05.123"}], types={"id": "int", "v": "datetime"}), True),
    (_message("INSERT", [ROW | {"v": "2024-01-02"}], types={"id": "int", "v": "date"}), True),
    (_message("INSERT", [ROW | {"v": "2024-01-02 00:00:00"}], types={"id": "int", "v": "date"}), True),  # Oracle
    (_message("DDL", None, isDdl=True, sql="ALTER TABLE t ADD c int"), False),
    (_message("INSERT", [ROW], isDdl=True), False),
    (_message("TRUNCATE"), False),
    (_message("MERGE", [ROW]), False),
    (_message(None, [ROW], opType="INSERT"), True),  # the operation in `opType` alone
    (_message("INSERT", [ROW], pk=None), False),  # no key: missing_key in Python
    (_message("INSERT", [ROW], pk=("v", "id")), True),
    (_message("INSERT", [ROW], id="7"), False),  # a field of another JSON type: not_json
    (_message("INSERT", [ROW], es=99999999999999999), True),  # an event time beyond year 9999: NULL on both paths
    (_message("INSERT", [ROW], id=None), True),
    (_message("INSERT", [ROW]) + b" ", False),
    (_message("INSERT", [ROW]).replace(b'"type"', b' "type"'), True),  # a blank before a member's name
    (_message("INSERT", [ROW]).replace(b'"type":', b'"type": '), False),  # one after its colon
    (_message("INSERT", [ROW], sqlType={"id": "4"}), False),
    (_message("INSERT", [ROW], sqlType=None), True),
    (_message("INSERT", [ROW], sqlType="4"), False),
    (b"not json", False),
    (b"", True),  # a Kafka tombstone: its control row
]


def test_corner_cases_are_taken_only_when_exact(spark):
    values = [message for message, _ in CORNER_CASES]
    flags = _compare(spark, values, _pipeline("drs-json-mysql"))
    wrong = [
        (message, expected) for (message, expected), flag in zip(CORNER_CASES, flags, strict=True) if flag != expected
    ]
    assert not wrong, f"taken natively (expected, message): {[(e, m[:160]) for m, e in wrong]}"


def test_json_c_deletes_carry_their_row_in_data(spark):
    values = [_message("DELETE", [ROW], None), _message("DELETE", None, [ROW])]
    assert _compare(spark, values, _pipeline("drs-json-c")) == [True, False]


def test_configured_keys_and_types_are_the_plans(spark):
    tables = {"shop.t": {"primary_key": ["v"], "column_types": {"d": "decimal(5,2)", "n": "bigint"}}}
    values = [
        _message("INSERT", [ROW]),
        _message("INSERT", [ROW | {"d": "1234.5"}]),
        _message("INSERT", [ROW], pk=None),
    ]
    assert _compare(spark, values, _pipeline("drs-json-mysql", tables)) == [True, False, True]
    binary = {"shop.t": {"column_types": {"v": "binary"}}}
    records = records_frame(spark, [(b"t", _message("INSERT", [ROW]), [])])
    assert decoder_module("drs-json-mysql").decode_natively(records, _pipeline("drs-json-mysql", binary)) is None


def test_two_pass_write_equals_decode(spark, tmp_path):
    history = simulate(seed=5, events=600, days=1)
    values = [r.value for r in encode_drs_json(history, "postgresql")]
    values += [b'{"not json', _message("UPDATE", [ROW | {"id": "2"}], [ROW], opType="UPDATE")]
    pipeline = _pipeline("drs-json-rdbms", pipeline_settings(TABLES, "postgresql").get("tables"))
    module = decoder_module(pipeline.format)
    frame = records_frame(spark, [(b"t", value, []) for value in values])
    path = str(tmp_path / "decoded")
    N.write_decoded(
        module.decode_natively(frame, pipeline), frame, lambda rest: module.decode_in_python(rest, pipeline), path
    )
    assert not (tmp_path / "decoded" / f"record_kind={N.PENDING}").exists()
    written = spark.read.parquet(path).select(*DECODED_COLUMNS)
    assert_same_frames(written, module.decode(frame, pipeline).select(*DECODED_COLUMNS))
