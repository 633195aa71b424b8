"""The shared layer of Python-side formats: decoding over Arrow batches, failures quarantined, and the Avro wire.

Real fastavro, real Spark over a Parquet archive (the path on which pyspark 4.2.0 hung, see environment.md), so the
module runs under a timeout.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import sys
from pathlib import Path

import fastavro
import pytest
from archive_helpers import Record, write_parquet
from pyspark import cloudpickle

from cdcreplay import schema as S
from cdcreplay.archive import read_archive
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.python_rows import DecodeError, change, decode_with_python, position
from cdcreplay.formats.wire.avro_wire import AvroWire, fingerprint, load_schema

pytestmark = pytest.mark.timeout(300)
# The toy decoder below runs in Spark's Python workers, which cannot import this test module: ship it by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FLINK_AVRO = Path(__file__).parent / "data" / "conformance" / "flink-debezium-avro-confluent"


def decode_json_row(record) -> list[dict]:
    """A toy format: {"id": .., "name": ..} is an insert into db.t; {"bad": ..} is rejected with a reason code."""
    message = json.loads(record.value)
    if "bad" in message:
        raise DecodeError("unknown_op", f"rejected: {message['bad']}")
    after = {"id": str(message["id"]), "name": message.get("name")}
    return [
        change(
            S.OP_INSERT,
            db="db",
            table="t",
            key_columns=["id"],
            after=after,
            column_types={"id": "int", "name": "string"},
            position=position(message["id"]),
        )
    ]


def test_python_decoding_routes_rows_failures_and_tombstones(spark, tmp_path):
    archive = write_parquet(
        [
            Record("t", 0, 0, '{"id": 1, "name": "Zoë"}', key="1"),
            Record("t", 0, 1, "not json at all", key="2"),
            Record("t", 0, 2, '{"bad": "op x"}'),
            Record("t", 0, 3, None, key="1"),
            Record("t", 0, 4, '{"id": 2, "name": null}', headers=[("h", "v")]),
            Record("t", 0, 5, '{"name": "no id"}'),
        ],
        tmp_path / "archive" / "part-0.parquet",
    )
    raw = read_archive(spark, [str(archive)], "parquet")
    pipeline = PipelineConfig(name="p", format="debezium-json", archive={"path": str(archive)})
    rows = {
        row.offset: row
        for row in decode_with_python(raw, decode_json_row, pipeline)
        .select("offset", "record_kind", "op", "table_id", "key", "after", "position", "reason", "detail", "raw_value")
        .collect()
    }
    assert sorted(rows) == [0, 1, 2, 3, 4, 5], "every record must give exactly one row here"
    assert (rows[0].record_kind, rows[0].op, rows[0].table_id, rows[0].key) == ("changelog", "insert", "db.t", '["1"]')
    assert rows[0].after == {"id": "1", "name": "Zoë"}
    assert [int(p) for p in rows[0].position] == [1]
    assert rows[4].after == {"id": "2", "name": None}  # a present NULL stays present
    assert (rows[1].record_kind, rows[1].reason) == ("quarantine", "decode_error")
    assert rows[1].detail.startswith("JSONDecodeError: ")
    assert rows[1].raw_value == b"not json at all"  # the bytes are kept for inspection and replay
    assert (rows[2].reason, rows[2].detail) == ("unknown_op", "rejected: op x")
    assert (rows[3].record_kind, rows[3].op) == ("control", None)
    assert (rows[5].reason, rows[5].detail) == ("decode_error", "KeyError: 'id'")


# --- the Avro wire ---------------------------------------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path) -> Path:
    """A schema folder as exported from a registry: <id>.avsc."""
    folder = tmp_path / "schemas"
    folder.mkdir()
    shutil.copy(FLINK_AVRO / "debezium-test-schema.json", folder / "81.avsc")
    return folder


def test_confluent_framed_values_decode_with_the_schema_of_their_id(registry):
    wire = AvroWire(framing="auto", registry_dir=str(registry))
    expected = [json.loads(line) for line in (FLINK_AVRO / "decoded-envelopes.jsonl").read_text().splitlines()]
    for document in expected:
        decoded = wire.decode((FLINK_AVRO / document["file"]).read_bytes())
        # fastavro names the union branch of before/after; the plain values are the second element
        images = {side: decoded[side][1] if decoded[side] else None for side in ("before", "after")}
        assert images == {"before": document["value"]["before"], "after": document["value"]["after"]}
        assert decoded["op"] == document["value"]["op"]


def test_an_unknown_schema_id_is_named(tmp_path):
    wire = AvroWire(framing="confluent", registry_dir=str(tmp_path))
    with pytest.raises(DecodeError, match=r"schema id 81 is not in the schema folder .* \(expected 81.avsc\)") as error:
        wire.decode((FLINK_AVRO / "debezium-avro-insert.avro").read_bytes())
    assert error.value.reason == "unknown_schema"


def test_truncated_avro_is_a_bad_avro_record(registry):
    value = (FLINK_AVRO / "debezium-avro-insert.avro").read_bytes()
    with pytest.raises(DecodeError, match="confluent id 81 Avro does not decode with its writer schema") as error:
        AvroWire(registry_dir=str(registry)).decode(value[:20])
    assert error.value.reason == "bad_avro"


SIMPLE = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}]}


def _avro(record: dict) -> bytes:
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, fastavro.parse_schema(SIMPLE), record)
    return stream.getvalue()


def test_raw_and_single_object_values(tmp_path):
    schema_file = tmp_path / "row.avsc"
    schema_file.write_text(json.dumps(SIMPLE))
    body = _avro({"id": 7, "s": "x"})
    wire = AvroWire(framing="auto", writer_schema=str(schema_file))
    assert wire.decode(body) == {"id": 7, "s": "x"}
    framed = b"\xc3\x01" + fingerprint(load_schema(str(schema_file))) + body
    assert wire.decode(framed) == {"id": 7, "s": "x"}
    assert wire.decode(body + b"\n") == {"id": 7, "s": "x"}  # trailing bytes are ignored, as Avro's Java readers do
    with pytest.raises(DecodeError, match="raw Avro does not decode with its writer schema"):
        wire.decode(b"\x0e\x7f")
    with pytest.raises(DecodeError, match="raw Avro needs a writer schema"):
        AvroWire(framing="raw").decode(body)


def test_single_object_fingerprint_is_avros_crc64():
    # The Avro specification's CRC-64-AVRO of the canonical form '"int"' is 0x7275d51a3f395c8f.
    assert fingerprint(fastavro.parse_schema("int")) == struct.pack("<Q", 0x7275D51A3F395C8F)


def test_only_quarantined_rows_carry_the_raw_record(spark):
    """A message of many rows is not copied onto each of its rows (DTS packs hundreds of rows into one Canal
    message: the copies overflowed Arrow's 2 GiB binary arrays at 2M events); a quarantined row keeps its record."""
    import pyarrow as pa

    from cdcreplay.formats.routing import KIND_CHANGE, KIND_QUARANTINE, decoded_arrow_schema, decoded_batch

    records = pa.RecordBatch.from_pydict(
        {
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([7, 8], pa.int64()),
            "timestamp": pa.array([None, None], pa.timestamp("us", tz="UTC")),
            "key": pa.array([b"k7", b"k8"], pa.binary()),
            "value": pa.array([b"x" * 1000, b"bad"], pa.binary()),
        }
    )
    schema = decoded_arrow_schema()
    empty = {field.name: None for field in schema}
    rows = [{**empty, "record_kind": KIND_CHANGE, "op": "insert", "row_index": i} for i in range(3)]
    rows.append({**empty, "record_kind": KIND_QUARANTINE, "reason": S.REASON_NOT_JSON, "row_index": 0})
    batch = decoded_batch(records, [0, 0, 0, 1], rows, schema).to_pydict()
    assert batch["offset"] == [7, 7, 7, 8]
    assert batch["raw_value"] == [None, None, None, b"bad"]
    assert batch["raw_key"] == [None, None, None, b"k8"]
