"""Debezium Avro (Confluent wire format): Flink's captured messages, schema lookup, failures, and the promise that
both Debezium wires share one envelope decoder -- the same event in JSON and in Avro gives the same changelog row."""

from __future__ import annotations

import json
import struct
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from archive_helpers import Record, confluent, write_parquet
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder
from cdcreplay.formats.debezium_avro import RegistryExportError, read_registry_export
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_debezium_avro import encode_debezium_avro

pytestmark = pytest.mark.timeout(600)
FLINK_AVRO = Path(__file__).parent / "data" / "conformance" / "flink-debezium-avro-confluent"
FILES = ["debezium-avro-insert.avro", "debezium-avro-update.avro", "debezium-avro-delete.avro"]
# Flink's reader row type: id BIGINT, name STRING, description STRING, weight DOUBLE.
PHYSICAL = [("id", "bigint"), ("name", "string"), ("description", "string"), ("weight", "double")]


def pipeline(fmt: str = "debezium-avro", tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(name="avro", format=fmt, archive={"path": "unused"}, tables=tables or {}, options=options)


def decode(spark, tmp_path: Path, records: list[Record], cfg: PipelineConfig, name: str = "part"):
    parquet = write_parquet(records, tmp_path / f"{name}.parquet")
    return decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)


@pytest.fixture
def registry(tmp_path) -> Path:
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "81.avsc").write_text((FLINK_AVRO / "debezium-test-schema.json").read_text())
    return folder


def flink_records() -> list[Record]:
    # Flink's captures carry no Kafka key: the key column comes from the config, as a user would declare it.
    return [Record("fullfillment.test1.person", 0, i, (FLINK_AVRO / f).read_bytes()) for i, f in enumerate(FILES)]


def flink_changelog(decoded) -> list[str]:
    """Changelog rows as Flink's test asserts them: +I/-U/+U/-D(id,name,description,weight), one per line."""

    def render(image) -> str:
        values = [F.coalesce(image[n].try_cast(t).cast("string"), F.lit("null")) for n, t in PHYSICAL]
        return F.concat(F.lit("("), F.concat_ws(",", *values), F.lit(")"))

    lines = []
    rows = decoded.where("record_kind = 'changelog'").orderBy("offset")
    for r in rows.select(
        "offset", "op", render(F.col("before")).alias("b"), render(F.col("after")).alias("a")
    ).collect():
        name = FILES[r.offset]
        if r.op in ("insert", "snapshot"):
            lines.append(f"{name}\t+I{r.a}")
        elif r.op == "update":
            lines += [f"{name}\t-U{r.b}", f"{name}\t+U{r.a}"]
        elif r.op == "delete":
            lines.append(f"{name}\t-D{r.b}")
    return lines


def expected_changelog() -> list[str]:
    text = (FLINK_AVRO / "expected-changelog.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_flink_messages_decode_to_their_expected_rows(spark, tmp_path, registry):
    cfg = pipeline(tables={"test1.person": {"primary_key": ["id"]}}, schema_registry_dir=str(registry))
    decoded = decode(spark, tmp_path, flink_records(), cfg)
    assert decoded.where("record_kind != 'changelog'").count() == 0
    assert flink_changelog(decoded) == expected_changelog()
    first = decoded.where("offset = 0").first()
    assert (first.table_id, first.key, [int(p) for p in first.position]) == ("test1.person", '["1"]', [5, 213795, 0])
    assert dict(first.column_types) == {"id": "bigint", "name": "string", "description": "string", "weight": "double"}


def test_schemas_from_a_registry_export_file(spark, tmp_path):
    schema = json.loads((FLINK_AVRO / "debezium-test-schema.json").read_text())
    export = tmp_path / "schemas.jsonl"  # as the _schemas topic holds them: one JSON object per line
    export.write_text(
        json.dumps({"subject": "s-key", "version": 1, "id": 80, "schema": '"string"', "deleted": True})
        + "\n"
        + json.dumps(
            {"subject": "fullfillment.test1.person-value", "version": 1, "id": 81, "schema": json.dumps(schema)}
        )
        + "\n"
    )
    cfg = pipeline(tables={"test1.person": {"primary_key": ["id"]}}, schema_registry_export=str(export))
    assert flink_changelog(decode(spark, tmp_path, flink_records(), cfg)) == expected_changelog()
    assert sorted(read_registry_export(str(export))) == [81]  # a deleted schema is not offered


def test_registry_export_errors_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(RegistryExportError, match=r"missing.json does not exist; fix options.schema_registry_export"):
        read_registry_export(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"id": 1}]')
    with pytest.raises(RegistryExportError, match="entry 1 has no `id` and `schema`"):
        read_registry_export(str(bad))
    bad.write_text("{not json")
    with pytest.raises(RegistryExportError, match="is not JSON or JSON lines"):
        read_registry_export(str(bad))


def test_unknown_schema_ids_and_broken_avro_are_quarantined(spark, tmp_path, registry):
    insert = (FLINK_AVRO / FILES[0]).read_bytes()
    unknown = b"\x00" + struct.pack(">I", 99) + insert[5:]
    records = [
        Record("t", 0, 0, unknown),
        Record("t", 0, 1, insert[:30]),  # truncated
        Record("t", 0, 2, b"{not avro"),
        Record("t", 0, 3, None, key=b"\x00\x00\x00\x00\x51"),  # a tombstone stays a tombstone
    ]
    rows = {
        r.offset: r for r in decode(spark, tmp_path, records, pipeline(schema_registry_dir=str(registry))).collect()
    }
    assert (rows[0].record_kind, rows[0].reason) == ("quarantine", "unknown_schema")
    assert rows[0].detail.startswith("schema id 99 is not in the schema folder")
    assert rows[0].raw_value == unknown  # the Avro bytes are kept for a replay once the schema is exported
    assert (rows[1].reason, rows[2].reason) == ("bad_avro", "bad_avro")
    assert rows[1].detail.startswith("confluent id 81 Avro does not decode with its writer schema")
    assert (rows[3].record_kind, rows[3].control_kind) == ("control", "tombstone")
    no_source = decode(spark, tmp_path, records[:1], pipeline(), name="none").first()
    assert no_source.reason == "unknown_schema"
    assert no_source.detail == (
        "schema id 99 cannot be looked up: no schema source is configured; set options.schema_registry_dir "
        "(folder of <id>.avsc) or options.schema_registry_export to a registry export that holds it"
    )


# --- one envelope for both wires ----------------------------------------------------------------------------------

NS = "srv.shop.items"
VALUE = {
    "type": "record",
    "name": "Value",
    "namespace": NS,
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "small", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "price", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                                             "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                             "connect.name": "org.apache.kafka.connect.data.Decimal",
                                             "logicalType": "decimal"}], "default": None},
        {"name": "born", "type": {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}},
        {"name": "cdate", "type": {"type": "int", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Date",
                                   "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "connect.version": 1,
                                  "connect.name": "io.debezium.time.MicroTimestamp"}},
        {"name": "cts", "type": {"type": "long", "connect.version": 1,
                                 "connect.name": "org.apache.kafka.connect.data.Timestamp",
                                 "logicalType": "timestamp-millis"}},
        {"name": "zoned", "type": {"type": "string", "connect.version": 1,
                                   "connect.name": "io.debezium.time.ZonedTimestamp"}},
        {"name": "amount", "type": {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                                    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                                    "connect.name": "io.debezium.data.VariableScaleDecimal"}},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
        {"name": "ratio", "type": "float"},
        {"name": "ok", "type": "boolean"},
    ],
    "connect.name": f"{NS}.Value",
}  # fmt: skip
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": NS,
    "fields": [
        {"name": "before", "type": ["null", VALUE], "default": None},
        {"name": "after", "type": ["null", f"{NS}.Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "connector", "type": "string"}, {"name": "db", "type": "string"},
                                               {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
                                               {"name": "lsn", "type": ["null", "long"]},
                                               {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
    "connect.name": f"{NS}.Envelope",
}  # fmt: skip
KEY = {"type": "record", "name": "Key", "namespace": NS, "fields": [{"name": "id", "type": "int"}],
       "connect.name": f"{NS}.Key"}  # fmt: skip
ROW = {
    "id": 7,
    "small": 300,
    "price": Decimal("-12.34"),
    "born": 19358,
    "cdate": date(2023, 1, 2),
    "seen": 1672574645123456,
    "cts": datetime(2023, 1, 1, 12, 4, 5, 123000, tzinfo=UTC),
    "zoned": "2023-01-01T12:04:05.123+02:00",
    "amount": {"scale": 3, "value": b"\x49\x96\x02\xd3"},
    "blob": b"\x00\x01",
    "ratio": 0.5,
    "ok": True,
}
SOURCE = {"connector": "postgresql", "db": "pg", "schema": "shop", "table": "items", "lsn": 42, "ts_ms": 1000}


def json_twin() -> tuple[str, str]:
    """The same event as JsonConverter (schemas.enable=true) writes it, written by hand from the Connect docs."""
    fields = [
        {"field": "id", "type": "int32"},
        {"field": "small", "type": "int16"},
        {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        {"field": "born", "type": "int32", "name": "io.debezium.time.Date"},
        {"field": "cdate", "type": "int32", "name": "org.apache.kafka.connect.data.Date"},
        {"field": "seen", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        {"field": "cts", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
        {"field": "zoned", "type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"field": "amount", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
        {"field": "blob", "type": "bytes"},
        {"field": "ratio", "type": "float32"},
        {"field": "ok", "type": "boolean"},
    ]  # fmt: skip
    after = {"id": 7, "small": 300, "price": "+y4=", "born": 19358, "cdate": 19359, "seen": 1672574645123456,
             "cts": 1672574645123, "zoned": "2023-01-01T12:04:05.123+02:00",
             "amount": {"scale": 3, "value": "SZYC0w=="}, "blob": "AAE=", "ratio": 0.5, "ok": True}  # fmt: skip
    schema = {"type": "struct", "fields": [{"field": "before", "fields": fields}, {"field": "after", "fields": fields}]}
    value = {"schema": schema, "payload": {"before": None, "after": after, "source": SOURCE, "op": "c", "ts_ms": 5}}
    return json.dumps(value), json.dumps({"id": 7})


def test_the_same_event_in_avro_and_in_json_gives_the_same_row(spark, tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "1.avsc").write_text(json.dumps(KEY))
    (registry / "2.avsc").write_text(json.dumps(ENVELOPE))
    value = {"before": None, "after": ROW, "source": SOURCE, "op": "c", "ts_ms": 5}
    headers = [("__debezium.oldkey", '{"id":6}')]
    avro_record = Record("t", 0, 0, confluent(2, ENVELOPE, value), key=confluent(1, KEY, {"id": 7}), headers=headers)
    avro_row = decode(spark, tmp_path, [avro_record], pipeline(schema_registry_dir=str(registry)), "avro").first()
    json_value, json_key = json_twin()
    json_record = Record("t", 0, 0, json_value, key=json_key, headers=headers)
    json_row = decode(spark, tmp_path, [json_record], pipeline("debezium-json"), "json").first()
    columns = ["record_kind", "op", "table_id", "key", "key_columns", "after", "before", "column_types", "position",
               "event_time", "detail"]  # fmt: skip
    assert avro_row.record_kind == "changelog", avro_row.detail
    assert {c: avro_row[c] for c in columns} == {c: json_row[c] for c in columns}
    assert dict(avro_row.after) == {
        "id": "7", "small": "300", "price": "-12.34", "born": "2023-01-01", "cdate": "2023-01-02",
        "seen": "2023-01-01 12:04:05.123456", "cts": "2023-01-01 12:04:05.123000",
        "zoned": "2023-01-01T12:04:05.123+02:00", "amount": "1234567.891", "blob": "AAE=", "ratio": "0.5",
        "ok": "true",
    }  # fmt: skip
    assert dict(avro_row.column_types)["price"] == "decimal(10,2)"
    assert avro_row.detail == '__debezium.oldkey={"id":6}'


def test_the_simulated_avro_archive_writes_its_registry_export(tmp_path):
    history = simulate(seed=3, events=60)
    records = list(encode_debezium_avro(history, tmp_path))
    ids = sorted(int(p.stem) for p in (tmp_path / "_schemas").glob("*.avsc"))
    assert ids == [101, 102, 103, 104, 105, 106]  # key and value schema of each of the three tables
    framed = [r for r in records if r.value is not None]
    assert all(r.value[0] == 0 and r.key[0] == 0 for r in framed)
    assert {struct.unpack(">I", r.value[1:5])[0] for r in framed} <= {102, 104, 106}
