"""The native (``from_avro``, ``options.reader: spark``) path of debezium-avro against its Python decoder.

For every record the native path takes, its decoded row must equal the Python decoder's row field for field; every
other record must be flagged and decoded in Python. Checked on simulated histories (every record is taken), Flink's
captured Confluent Avro messages, and hand-made corner cases: doubles Java 17 does not print as Python does, decimals
beyond eight bytes, dates and timestamps at Spark's range, invalid UTF-8, Avro that does not decode, keys the native
path does not read, tombstones. The pipeline's two-pass write gives the same rows as ``decode``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from archive_helpers import confluent
from frame_helpers import assert_same_frames
from native_helpers import native_flags, records_frame, two_pass_write

from cdcreplay import jars
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import debezium_avro, debezium_avro_native
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_debezium_avro import encode_debezium_avro

pytestmark = pytest.mark.timeout(600)
FLINK_AVRO = Path(__file__).parent / "data" / "conformance" / "flink-debezium-avro-confluent"


def _pipeline(registry: Path) -> PipelineConfig:
    return PipelineConfig(
        name="native-avro",
        format="debezium-avro",
        archive={"path": "unused"},
        options={"reader": "spark", "schema_registry_dir": str(registry)},
    )


def _compare(records, pipeline) -> list[bool]:
    return native_flags(debezium_avro, records, pipeline)


def test_the_session_has_spark_avro(spark):
    assert jars.jar_path(jars.SPARK_AVRO).is_file(), "scripts/setup.sh fetches the pinned jars"
    assert str(jars.jar_path(jars.SPARK_AVRO)) in spark.conf.get("spark.jars")
    assert debezium_avro_native.avro_functions_loaded(spark)


@pytest.mark.parametrize("seed", [3, 11])
def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path, seed):
    history = simulate(seed=seed, events=1500, days=2)
    records = [(r.key, r.value, list(r.headers)) for r in encode_debezium_avro(history, tmp_path)]
    flags = _compare(records_frame(spark, records), _pipeline(tmp_path / "_schemas"))
    assert any(not value for _, value, _ in records), "the history holds tombstones"
    assert all(flags), "every row change and tombstone of the simulator is taken by the native path"


def test_flink_messages_decode_as_in_python(spark, tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "81.avsc").write_text((FLINK_AVRO / "debezium-test-schema.json").read_text())
    (registry / "80.avsc").write_text(json.dumps(KEY))
    files = ["debezium-avro-insert.avro", "debezium-avro-update.avro", "debezium-avro-delete.avro"]
    values = [(FLINK_AVRO / name).read_bytes() for name in files]
    # Flink's captures carry no Kafka key (Python), and their weights are float32 values widened to double
    # (21.799999237060547: 17 digits, which Java 17 may print otherwise): Python again beside an Avro key.
    records = [(None, value, []) for value in values] + [(confluent(80, KEY, {"id": 1}), v, []) for v in values]
    assert _compare(records_frame(spark, records), _pipeline(registry)) == [False] * 6


# --- corner cases: one table version with a column of every primitive the native path renders -----------------------

DECIMAL = {"type": "bytes", "scale": 3, "precision": 38, "connect.version": 1,
           "connect.parameters": {"scale": "3", "connect.decimal.precision": "38"},
           "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}  # fmt: skip
COLUMNS = [
    {"name": "id", "type": "int"},
    {"name": "s", "type": ["null", "string"], "default": None},
    {"name": "d", "type": ["null", DECIMAL], "default": None},
    {"name": "day", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}], "default": None},
    {"name": "cdate", "type": ["null", {"type": "int", "connect.name": "org.apache.kafka.connect.data.Date",
                                         "logicalType": "date"}], "default": None},
    {"name": "ts", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.Timestamp"}], "default": None},
    {"name": "cts", "type": ["null", {"type": "long", "connect.name": "org.apache.kafka.connect.data.Timestamp",
                                       "logicalType": "timestamp-millis"}], "default": None},
    {"name": "mts", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}],
     "default": None},
    {"name": "x", "type": ["null", "double"], "default": None},
    {"name": "f", "type": ["null", "float"], "default": None},
    {"name": "b", "type": ["null", "bytes"], "default": None},
    {"name": "ok", "type": ["null", "boolean"], "default": None},
    {"name": "small", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": None},
    {"name": "e", "type": ["null", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}], "default": None},
]  # fmt: skip
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.mysql",
    "fields": [
        {"name": "connector", "type": "string"},
        {"name": "db", "type": "string"},
        {"name": "table", "type": ["null", "string"], "default": None},
        {"name": "file", "type": "string"},
        {"name": "pos", "type": "long"},
        {"name": "row", "type": "int"},
        {"name": "snapshot", "type": ["null", "string"], "default": None},
        {"name": "ts_ms", "type": "long"},
    ],
}


def _envelope(columns: list[dict]) -> dict:
    value = {"type": "record", "name": "Value", "namespace": "srv.shop.t", "fields": columns}
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "srv.shop.t",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "srv.shop.t.Value"], "default": None},
            {"name": "source", "type": SOURCE},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


ENVELOPE = _envelope(COLUMNS)
# The same layout with the string column written as bytes (Avro writes both alike): a way to write invalid UTF-8.
RAW_STRING_ENVELOPE = _envelope([c if c["name"] != "s" else {**c, "type": ["null", "bytes"]} for c in COLUMNS])
KEY = {"type": "record", "name": "Key", "namespace": "srv.shop.t", "fields": [{"name": "id", "type": "int"}]}
SCHEMAS = {1: KEY, 2: ENVELOPE}


def _event(op: str = "c", snapshot: str | None = None, table: str | None = "t", **values) -> dict:
    row = {"id": 1, **values}
    source = {"connector": "mysql", "db": "shop", "table": table, "file": "bin.000002", "pos": 7, "row": 0,
              "snapshot": snapshot, "ts_ms": 1700000000000}  # fmt: skip
    before, after = (row, None) if op == "d" else (None, row)
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1700000000001}


def _message(event: dict, schema: dict = ENVELOPE, key: bytes | None = b"") -> tuple:
    return (confluent(1, KEY, {"id": 1}) if key == b"" else key, confluent(2, schema, event), [])


def _exact_decimal(unscaled: int) -> bool:
    return (unscaled.bit_length() + 8) // 8 <= 8  # the native path reads up to 8 bytes (Python up to 16)


DOUBLES = [  # (value, taken natively: Java 17's text is Python's)
    (1.5, True), (0.1, True), (0.001, True), (123456.789012345, True), (-0.0, True), (0.0, True),
    (1e-5, False), (12345678.5, False), (0.1 + 0.2, False), (1 / 3, False), (float("nan"), False),
    (float("inf"), False),
]  # fmt: skip
CORNER_CASES = [  # (event, taken natively)
    *[(_event(x=value), native) for value, native in DOUBLES],
    (_event(f=0.5), True),
    (_event(f=0.1), False),  # a float32 0.1 is 0.10000000149011612 to Python: 17 digits
    *[(_event(d=Decimal(u).scaleb(-3)), _exact_decimal(u)) for u in (0, 1, -1, 999, -(2**63), 2**63 - 1, 2**70)],
    *[(_event(day=days), -719162 <= days <= 2932896) for days in (0, -1, -719162, 2932896, 2932897, -25000)],
    (_event(cdate=date(2023, 1, 2)), True),
    *[(_event(ts=ms), -62135596800000 <= ms <= 253402300799999) for ms in (0, -1, 1700000000123, 253402300800000)],
    (_event(cts=datetime(2023, 1, 1, 12, 4, 5, 123000, tzinfo=UTC)), True),
    (_event(mts=1672574645123456), True),
    (_event(s='café "q" \u0001'), True),
    (_event(s="__debezium_unavailable_value"), False),  # a TOAST placeholder: Python
    (_event(b=b"\x00\xff" * 50, ok=True, small=-300, e="GREEN"), True),
    (_event(op="u", snapshot=None), True),
    (_event(op="d"), True),
    (_event(op="r", snapshot="true"), True),
    (_event(op="c", snapshot="last"), True),  # a snapshot read
    (_event(op="t"), False),
    (_event(op="x"), False),
    (_event(table=None), False),
]


def _with_boolean_byte(value: bytes, byte: int) -> bytes:
    """The Confluent value of an event with ``ok`` true, its boolean's byte replaced (fastavro reads any byte but 0 as
    true, Java's reader only 1: the native path reads the byte)."""
    false = confluent(2, ENVELOPE, _event(ok=False))
    [at] = [i for i, (a, b) in enumerate(zip(value, false, strict=True)) if a != b]
    return value[:at] + bytes([byte]) + value[at + 1 :]


def test_corner_cases_are_taken_only_when_exact(spark, tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    for schema_id, schema in SCHEMAS.items():
        (registry / f"{schema_id}.avsc").write_text(json.dumps(schema))
    records = [_message(event) for event, _ in CORNER_CASES]
    expected = [native for _, native in CORNER_CASES]
    good = _message(_event(s="x"))
    records += [
        _message(_event(s=b"caf\xe9"), RAW_STRING_ENVELOPE),  # invalid UTF-8: fastavro refuses it
        (good[0], good[1][:-3], []),  # truncated: bad_avro
        (good[0], good[1][:5] + b"\xff\xff\xff", []),
        *[(g[0], _with_boolean_byte(g[1], byte), []) for g in [_message(_event(ok=True))] for byte in (0, 2, 0xFF)],
        (good[0], b"\x00\x00\x00\x00\x09" + good[1][5:], []),  # an id the registry does not hold: unknown_schema
        (good[0], b"\x01" + good[1][1:], []),  # no Confluent frame
        (b'{"id":1}', good[1], []),  # a JSON key beside an Avro value: Python
        (None, good[1], []),
        (b"\x00\x00\x00\x00\x01\xff", good[1], []),  # a key that does not decode: Python quarantines the record
        (good[0], None, []),  # tombstones: control rows on both paths
        (good[0], b"", []),
        (None, None, [("h", b"1")]),
    ]
    expected += [False, False, False, True, True, True, False, False, False, False, False, True, True, True]
    assert _compare(records_frame(spark, records), _pipeline(registry)) == expected


def test_two_pass_write_equals_decode(spark, tmp_path):
    history = simulate(seed=5, events=600, days=1)
    records = [(r.key, r.value, list(r.headers)) for r in encode_debezium_avro(history, tmp_path)]
    records.append((records[0][0], b"\x00\x00\x00\x00\x66\xff", []))  # Avro that does not decode
    frame = records_frame(spark, records)
    pipeline = _pipeline(tmp_path / "_schemas")
    path = str(tmp_path / "decoded")
    written = two_pass_write(spark, debezium_avro, frame, pipeline, path)
    assert_same_frames(written, debezium_avro.decode(frame, pipeline))
    assert spark.read.parquet(path).where("record_kind = 'quarantine'").count() == 1


def test_without_spark_avro_every_record_decodes_in_python_and_the_log_says_why(spark, tmp_path, monkeypatch, caplog):
    history = simulate(seed=5, events=50, days=1)
    frame = records_frame(spark, [(r.key, r.value, list(r.headers)) for r in encode_debezium_avro(history, tmp_path)])
    monkeypatch.setattr(debezium_avro_native, "avro_functions_loaded", lambda session: False)
    with caplog.at_level(logging.WARNING, logger=debezium_avro_native.__name__):
        assert debezium_avro.decode_natively(frame, _pipeline(tmp_path / "_schemas")) is None
    assert "spark-avro is not on this Spark session's classpath" in caplog.text
    assert jars.SPARK_AVRO.file_name in caplog.text


def test_the_native_path_reads_schemas_from_the_export_then_the_folder_and_leaves_lists_of_types(tmp_path):
    """``ConfluentSchemas.schema_text``: what the native path plans from. An .avsc that lists named types before the
    message type is read by the Python decoder only (no plan), as is an id neither source holds."""
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "1.avsc").write_text(json.dumps(KEY))
    (folder / "3.avsc").write_text(json.dumps([SOURCE, ENVELOPE]))
    schemas = debezium_avro.ConfluentSchemas(registry_dir=str(folder), exported={1: "exported", 2: json.dumps(KEY)})
    assert schemas.schema_text(1) == "exported"  # the export first
    assert schemas.schema_text(2) == json.dumps(KEY)
    assert schemas.schema_text(3) is None
    assert schemas.schema_text(4) is None
    assert debezium_avro.ConfluentSchemas().schema_text(1) is None
