"""Debezium connectors: every documentation example of the corpus, and each connector's own semantics.

The corpus check replays every file of tests/data/conformance/debezium/doc-examples (values with their Kafka key,
keys alone as tombstone keys) and compares each decoded row with expected-outcomes.jsonl. The connector tests build
small histories whose final state is only right when the connector's rule is applied: commit order (Oracle),
event serial numbers (SQL Server), binlog files (MySQL), TOAST placeholders (PostgreSQL), Extended JSON and partial
updates (MongoDB), truncates, every Debezium time type.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from archive_helpers import Record, write_parquet
from frame_helpers import assert_live_state
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder
from cdcreplay.value_types import typed_value

DEBEZIUM = Path(__file__).parent / "data" / "conformance" / "debezium"
EXPECTED = DEBEZIUM / "expected-outcomes.jsonl"


def pipeline(tables: dict | None = None) -> PipelineConfig:
    return PipelineConfig(name="dbz", format="debezium-json", archive={"path": "unused"}, tables=tables or {})


def decode(spark, tmp_path: Path, records: list[Record], cfg: PipelineConfig | None = None, name: str = "part"):
    parquet = write_parquet(records, tmp_path / f"{name}.parquet")
    cfg = cfg or pipeline()
    return decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)


def compact_json(path: Path) -> str:
    return json.dumps(json.loads(path.read_text(encoding="utf-8")), ensure_ascii=False)


# --- the corpus --------------------------------------------------------------------------------------------------------


def test_every_documentation_example_decodes_as_documented(spark, tmp_path):
    expected = [json.loads(line) for line in EXPECTED.read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus = {f"doc-examples/{p.name}" for p in (DEBEZIUM / "doc-examples").glob("*.json")}
    assert {e["file"] for e in expected} == corpus, "every corpus file has exactly one expected outcome"
    records = []
    for offset, e in enumerate(expected):
        if e["as"] == "key":
            records.append(Record("docs", 0, offset, None, key=compact_json(DEBEZIUM / e["file"])))
        else:
            key = compact_json(DEBEZIUM / e["key_file"]) if "key_file" in e else None
            records.append(Record("docs", 0, offset, compact_json(DEBEZIUM / e["file"]), key=key))
    decoded = {r.offset: r for r in decode(spark, tmp_path, records).collect()}
    assert sorted(decoded) == list(range(len(expected)))
    for offset, e in enumerate(expected):
        row = decoded[offset]
        got = {"record_kind": row.record_kind}
        for name in ("op", "table_id", "key", "control_kind", "reason"):
            if getattr(row, name) is not None:
                got[name] = getattr(row, name)
        if row.after is not None:
            got["after"] = dict(row.after)
        if row.before is not None:
            got["before"] = dict(row.before)
        if row.record_kind == "changelog":
            got["column_types"] = dict(row.column_types)
            got["position"] = [str(p) for p in row.position]
        want = {k: v for k, v in e.items() if k not in ("file", "as", "key_file", "why")}
        assert got == want, e["file"]


def test_connector_common_serde_examples(spark, tmp_path):
    """Debezium's own serde fixtures: with and without schema, an unknown extra property, and an unwrapped row
    (ExtractNewRecordState output is not a change event: it is quarantined, never guessed)."""
    names = ["serde-with-schema.json", "serde-without-schema.json", "serde-update.json",
             "serde-unknown-property.json", "serde-unwrapped.json"]  # fmt: skip
    records = [Record("serde", 0, i, compact_json(DEBEZIUM / "connector-common-json" / n)) for i, n in enumerate(names)]
    cfg = pipeline({"inventory.customers": {"primary_key": ["id"]}})
    rows = {r.offset: r for r in decode(spark, tmp_path, records, cfg).collect()}
    anne = {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
    assert (rows[0].op, rows[0].table_id, rows[0].key, dict(rows[0].after)) == (
        "insert", "inventory.customers", '["1004"]', anne)  # fmt: skip
    assert dict(rows[0].column_types) == {"id": "int", "first_name": "string", "last_name": "string", "email": "string"}
    assert (rows[1].op, dict(rows[1].after), dict(rows[1].column_types)) == ("insert", anne, {})
    assert (rows[2].op, dict(rows[2].after), rows[2].before["first_name"]) == ("update", anne, "Anne-Marie")
    assert dict(rows[3].after) == {**anne, "middle_name": "L"}  # an unknown column rides along
    assert (rows[4].record_kind, rows[4].reason) == ("quarantine", "unknown_op")
    assert [int(p) for p in rows[0].position] == [3, 154, 0]


# --- connector semantics -----------------------------------------------------------------------------------------------


def event(op: str, source: dict, after=None, before=None, schema_fields=None, **extra) -> str:
    payload = {"op": op, "before": before, "after": after, "source": source, "ts_ms": 1, **extra}
    if schema_fields is None:
        return json.dumps(payload)
    schema = {"type": "struct", "fields": [{"field": "before", "fields": schema_fields},
                                           {"field": "after", "fields": schema_fields}]}  # fmt: skip
    return json.dumps({"schema": schema, "payload": payload})


def test_oracle_orders_by_commit_scn_then_scn(spark, tmp_path):
    """Transaction A changes the row first (scn 100) but commits last (commit_scn 300): its value wins."""
    src = {"connector": "oracle", "db": "ORCL", "schema": "HR", "table": "EMP", "ts_ms": 1}
    records = [
        Record("o", 0, 0, event("c", {**src, "scn": "50", "commit_scn": "60"}, after={"ID": 1, "V": "first"})),
        Record("o", 1, 0, event("u", {**src, "scn": "200", "commit_scn": "250"}, after={"ID": 1, "V": "B"})),
        Record("o", 2, 0, event("u", {**src, "scn": "100", "commit_scn": "300"}, after={"ID": 1, "V": "A"})),
    ]
    decoded = decode(
        spark, tmp_path, [Record(r.topic, r.partition, r.offset, r.value, key='{"ID": 1}') for r in records]
    )
    assert [[int(p) for p in r.position] for r in decoded.orderBy("partition").collect()] == [
        [60, 50], [250, 200], [300, 100]]  # fmt: skip
    assert_live_state(decoded, {'["1"]': {"ID": "1", "V": "A"}})


def test_sql_server_key_change_is_delete_and_insert_at_one_lsn(spark, tmp_path):
    src = {"connector": "sqlserver", "db": "testDB", "schema": "dbo", "table": "customers", "ts_ms": 1}
    lsn = {"commit_lsn": "00000027:00000758:0005", "change_lsn": "00000027:00000758:0003"}
    later = {"commit_lsn": "00000028:00000001:0002", "change_lsn": "00000028:00000001:0001", "event_serial_no": "1"}
    records = [
        Record("s", 0, 0, event("c", {**src, "commit_lsn": "00000026:00000001:0001",
                                      "change_lsn": "00000026:00000001:0001", "event_serial_no": "1"},
                                after={"id": 1, "v": "x"}), key='{"id": 1}'),
        # UPDATE customers SET id = 2 WHERE id = 1: the insert is in another partition, delivered FIRST.
        Record("s", 1, 0, event("c", {**src, **lsn, "event_serial_no": "2"}, after={"id": 2, "v": "x"}),
               key='{"id": 2}', headers=[("__debezium.oldkey", '{"id":1}')]),
        Record("s", 0, 1, event("d", {**src, **lsn, "event_serial_no": "1"}, before={"id": 1, "v": "x"}),
               key='{"id": 1}', headers=[("__debezium.newkey", '{"id":2}')]),
        Record("s", 0, 2, event("c", {**src, **later}, after={"id": 1, "v": "again"}), key='{"id": 1}'),
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records)
    assert_live_state(decoded, {'["1"]': {"id": "1", "v": "again"}, '["2"]': {"id": "2", "v": "x"}})
    provenance = {(r.partition, r.offset): r.detail for r in decoded.collect()}
    assert provenance[(1, 0)] == '__debezium.oldkey={"id":1}'
    assert provenance[(0, 1)] == '__debezium.newkey={"id":2}'
    assert provenance[(0, 0)] is None


def test_mysql_orders_by_binlog_file_then_position_then_row(spark, tmp_path):
    def src(file: str, pos: int, row: int) -> dict:
        return {"connector": "mysql", "db": "shop", "table": "t", "file": file, "pos": pos, "row": row,
                "gtid": "5f1c1a7e-2f3b-11f0-9c1a-0242ac120002:7", "ts_ms": 1}  # fmt: skip

    records = [
        Record("m", 0, 0, event("u", src("mysql-bin.000010", 4, 0), after={"id": 1, "v": "newest file"})),
        Record("m", 1, 0, event("u", src("mysql-bin.000009", 99999, 1), after={"id": 1, "v": "older file"})),
        Record("m", 2, 0, event("u", src("mysql-bin.000009", 99999, 0), after={"id": 1, "v": "oldest"})),
    ]
    decoded = decode(
        spark, tmp_path, [Record(r.topic, r.partition, r.offset, r.value, key='{"id": 1}') for r in records]
    )
    assert_live_state(decoded, {'["1"]': {"id": "1", "v": "newest file"}})


def test_postgres_toast_placeholder_keeps_the_stored_value(spark, tmp_path):
    """An unchanged TOASTed column arrives as __debezium_unavailable_value (bytea: its base64): it is left out of
    the image, declared all the same, and the compactor keeps the stored value."""
    src = {"connector": "postgresql", "db": "pg", "schema": "public", "table": "docs", "ts_ms": 1}
    fields = [{"field": "id", "type": "int32"}, {"field": "body", "type": "string"},
              {"field": "blob", "type": "bytes"}, {"field": "n", "type": "int32"}]  # fmt: skip
    big = "x" * 3000
    blob = base64.b64encode(b"\x00\x01binary").decode()
    records = [
        Record("p", 0, 0, event("c", {**src, "lsn": 10}, after={"id": 1, "body": big, "blob": blob, "n": 1},
                                schema_fields=fields)),
        Record("p", 0, 1, event("u", {**src, "lsn": 20}, after={"id": 1, "body": "__debezium_unavailable_value",
                                "blob": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", "n": 2}, schema_fields=fields)),
        # Without schemas the placeholder column is still declared (as text) so the image counts as partial.
        Record("p", 0, 2, event("u", {**src, "lsn": 30}, after={"id": 1, "body": "__debezium_unavailable_value",
                                "n": 3})),
    ]  # fmt: skip
    decoded = decode(
        spark, tmp_path, [Record(r.topic, r.partition, r.offset, r.value, key='{"id": 1}') for r in records]
    )
    second = decoded.where("offset = 1").first()
    assert dict(second.after) == {"id": "1", "n": "2"}
    assert dict(second.column_types) == {"id": "int", "body": "string", "blob": "binary", "n": "int"}
    assert dict(decoded.where("offset = 2").first().column_types) == {"body": "string"}
    assert_live_state(decoded, {'["1"]': {"id": "1", "body": big, "blob": blob, "n": "3"}})


def test_truncate_deletes_every_older_key_of_its_table(spark, tmp_path):
    src = {"connector": "postgresql", "db": "pg", "schema": "public", "table": "t", "ts_ms": 1}
    records = [
        Record("p", 0, 0, event("c", {**src, "lsn": 10}, after={"id": 1}), key='{"id": 1}'),
        Record("p", 1, 0, event("c", {**src, "lsn": 11}, after={"id": 2}), key='{"id": 2}'),
        Record("p", 2, 0, event("t", {**src, "lsn": 20})),
        Record("p", 0, 1, event("c", {**src, "lsn": 30}, after={"id": 3}), key='{"id": 3}'),
    ]
    assert_live_state(decode(spark, tmp_path, records), {'["3"]': {"id": "3"}})


MONGO = {"connector": "mongodb", "db": "inventory", "collection": "customers", "rs": "rs0", "ts_ms": 1000}


def mongo(op: str, ord_: int, key: str, after: dict | None = None, before: dict | None = None, **extra) -> Record:
    payload = {"op": op, "source": {**MONGO, "ord": ord_}, "ts_ms": 1,
               "after": None if after is None else json.dumps(after),
               "before": None if before is None else json.dumps(before), **extra}  # fmt: skip
    return Record("mongo", 0, ord_, json.dumps({"schema": {}, "payload": payload}), key=json.dumps({"id": key}))


def test_mongodb_documents_and_partial_updates(spark, tmp_path):
    oid = {"$oid": "5f1c1a7e2f3b11f09c1a0242"}
    doc = {
        "_id": {"$numberLong": "1004"},
        "name": "Anne",
        "age": {"$numberInt": "31"},
        "score": {"$numberDouble": "1.5"},
        "price": {"$numberDecimal": "12.3400"},
        "born": {"$date": {"$numberLong": "-86400000"}},
        "seen": {"$date": "2024-05-06T07:08:09.123Z"},
        "pic": {"$binary": {"base64": "AAEC", "subType": "00"}},
        "ref": oid,
        "vip": True,
        "tags": ["a", "b"],
        "address": {"city": "Oslo"},
        "visits": 7,
        "ratio": 0.25,
    }
    key = '{"$numberLong": "1004"}'
    records = [
        mongo("r", 1, key, after=doc),
        # change_streams capture mode: no full document, only what changed.
        mongo("u", 2, key, updateDescription={"updatedFields": json.dumps({"name": "Anne Marie", "age": {"$numberInt": "32"}}),
                                              "removedFields": ["score"], "truncatedArrays": None}),
        mongo("u", 3, key, updateDescription={"updatedFields": json.dumps({"address.city": "Bergen"}),
                                              "removedFields": [], "truncatedArrays": None}),
        mongo("c", 4, "2", after={"_id": 2, "name": "Bo"}),
        mongo("d", 5, "2"),  # a delete without pre-image: only the key names the document
        mongo("u", 6, key, patch=json.dumps({"$set": {"visits": 8}})),  # Debezium 1.x oplog patch
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records)
    rows = {r.offset: r for r in decoded.collect()}
    assert dict(rows[1].after) == {
        "_id": "1004", "name": "Anne", "age": "31", "score": "1.5", "price": "12.3400",
        "born": "1969-12-31 00:00:00.000000", "seen": "2024-05-06 07:08:09.123000", "pic": "AAEC",
        "ref": "5f1c1a7e2f3b11f09c1a0242", "vip": "true", "tags": '["a","b"]', "address": '{"city":"Oslo"}',
        "visits": "7", "ratio": "0.25",
    }  # fmt: skip
    assert dict(rows[1].column_types) == {
        "_id": "bigint", "name": "string", "age": "int", "score": "double", "price": "string", "born": "timestamp",
        "seen": "timestamp", "pic": "binary", "ref": "string", "vip": "boolean", "tags": "string",
        "address": "string", "visits": "bigint", "ratio": "double",
    }  # fmt: skip
    assert (rows[1].op, rows[1].table_id, rows[1].key) == ("snapshot", "inventory.customers", '["1004"]')
    # The partial update carries only the changed fields (a removed field is a present NULL); _id is declared
    # but absent, which makes the image partial.
    assert dict(rows[2].after) == {"name": "Anne Marie", "age": "32", "score": None}
    assert dict(rows[2].column_types) == {"_id": "bigint", "name": "string", "age": "int"}
    assert (rows[3].record_kind, rows[3].reason) == ("quarantine", "nested_update")
    assert rows[3].detail.startswith("MongoDB update of nested field(s) address.city carries no full document")
    assert (rows[5].op, rows[5].key) == ("delete", '["2"]')
    assert_live_state(
        decoded, {'["1004"]': {**dict(rows[1].after), "name": "Anne Marie", "age": "32", "score": None, "visits": "8"}}
    )


TIME_FIELDS = [
    ("d", "int32", "io.debezium.time.Date", 19358, "2023-01-01", "date", date(2023, 1, 1)),
    ("cd", "int32", "org.apache.kafka.connect.data.Date", 0, "1970-01-01", "date", date(1970, 1, 1)),
    ("ts", "int64", "io.debezium.time.Timestamp", 1672574645123, "2023-01-01 12:04:05.123000", "timestamp_ntz",
     datetime(2023, 1, 1, 12, 4, 5, 123000)),
    ("cts", "int64", "org.apache.kafka.connect.data.Timestamp", 1672574645123, "2023-01-01 12:04:05.123000",
     "timestamp_ntz", datetime(2023, 1, 1, 12, 4, 5, 123000)),
    ("mts", "int64", "io.debezium.time.MicroTimestamp", 1672574645123456, "2023-01-01 12:04:05.123456",
     "timestamp_ntz", datetime(2023, 1, 1, 12, 4, 5, 123456)),
    ("nts", "int64", "io.debezium.time.NanoTimestamp", 1672574645123456789, "2023-01-01 12:04:05.123456",
     "timestamp_ntz", datetime(2023, 1, 1, 12, 4, 5, 123456)),
    ("zts", "string", "io.debezium.time.ZonedTimestamp", "2023-01-01T12:04:05.123+02:00",
     "2023-01-01T12:04:05.123+02:00", "timestamp", datetime(2023, 1, 1, 10, 4, 5, 123000)),
    ("t", "int32", "io.debezium.time.Time", 3723004, "01:02:03.004000", "string", "01:02:03.004000"),
    ("ct", "int32", "org.apache.kafka.connect.data.Time", 3723004, "01:02:03.004000", "string", "01:02:03.004000"),
    ("mt", "int64", "io.debezium.time.MicroTime", 3723004005, "01:02:03.004005", "string", "01:02:03.004005"),
    ("nt", "int64", "io.debezium.time.NanoTime", 3723004005006, "01:02:03.004005", "string", "01:02:03.004005"),
    ("zt", "string", "io.debezium.time.ZonedTime", "01:02:03Z", "01:02:03Z", "string", "01:02:03Z"),
    ("y", "int32", "io.debezium.time.Year", 2024, "2024", "int", 2024),
    ("dur", "int64", "io.debezium.time.MicroDuration", 90061000001, "90061000001", "bigint", 90061000001),
    ("iv", "string", "io.debezium.time.Interval", "P1Y2M3DT4H5M6.78S", "P1Y2M3DT4H5M6.78S", "string",
     "P1Y2M3DT4H5M6.78S"),
    ("idate", "string", "io.debezium.time.IsoDate", "2023-01-01Z", "2023-01-01", "date", date(2023, 1, 1)),
    ("its", "string", "io.debezium.time.IsoTimestamp", "2023-01-01T12:04:05.5Z", "2023-01-01T12:04:05.5Z",
     "timestamp", datetime(2023, 1, 1, 12, 4, 5, 500000)),
    ("dec", "bytes", "org.apache.kafka.connect.data.Decimal", "BNI=", "12.34", "decimal(4,2)", Decimal("12.34")),
    ("vsd", "struct", "io.debezium.data.VariableScaleDecimal", {"scale": 3, "value": "SZYC0w=="}, "1234567.891",
     "string", "1234567.891"),
    ("bits", "bytes", "io.debezium.data.Bits", "BQ==", "BQ==", "binary", b"\x05"),
    ("raw", "bytes", None, "AAEC", "AAEC", "binary", b"\x00\x01\x02"),
    ("i8", "int8", None, -5, "-5", "tinyint", -5),
    ("i16", "int16", None, 300, "300", "smallint", 300),
    ("f32", "float32", None, 3.140000104904175, "3.140000104904175", "float", 3.140000104904175),
    ("js", "string", "io.debezium.data.Json", '{"a": 1}', '{"a": 1}', "string", '{"a": 1}'),
]  # fmt: skip


def test_every_debezium_time_and_connect_logical_type(spark, tmp_path):
    fields = [{"field": "id", "type": "int32"}]
    after = {"id": 1}
    for name, primitive, semantic, raw, _, _, _ in TIME_FIELDS:
        spec = {"field": name, "type": primitive}
        if semantic:
            spec["name"] = semantic
        if semantic == "org.apache.kafka.connect.data.Decimal":
            spec["parameters"] = {"scale": "2", "connect.decimal.precision": "4"}
        fields.append(spec)
        after[name] = raw
    src = {"connector": "postgresql", "db": "pg", "schema": "public", "table": "types", "lsn": 1, "ts_ms": 1}
    records = [Record("p", 0, 0, event("c", src, after=after, schema_fields=fields), key='{"id": 1}')]
    row = decode(spark, tmp_path, records).first()
    assert row.record_kind == "changelog", row.detail
    assert dict(row.after) == {"id": "1", **{name: text for name, _, _, _, text, _, _ in TIME_FIELDS}}
    assert dict(row.column_types) == {"id": "int", **{name: t for name, _, _, _, _, t, _ in TIME_FIELDS}}
    # The canonical text reads back as its Spark type.
    frame = spark.createDataFrame([(dict(row.after),)], "after map<string,string>")
    typed = frame.select(*[typed_value(F.col("after"), n, t) for n, _, _, _, _, t, _ in TIME_FIELDS]).first()
    assert typed.asDict() == {name: value for name, _, _, _, _, _, value in TIME_FIELDS}


MONGO_SOURCE = {"connector": "mongodb", "db": "d", "collection": "c", "ord": 1, "ts_ms": 1}


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        ("[1, 2, 3]", "not_json", "payload is not a JSON object: [1, 2, 3]"),
        # A MongoDB event flags the map-typed parse as corrupt by design; a truncated one must still be not_json.
        ('{"op": "c", "source": {"connector": "mongodb"}, "after": "{\\"_id\\": 1', "not_json", "payload is not"),
        (
            json.dumps({"op": "c", "source": MONGO_SOURCE, "after": "{not a document"}),
            "bad_value",
            "value cannot be decoded with its schema type in column(s): after",
        ),
        (
            json.dumps({"op": "u", "source": MONGO_SOURCE, "after": None,
                        "updateDescription": {"updatedFields": "{}", "removedFields": [],
                                              "truncatedArrays": '[{"field": "tags", "size": 1}]'}}),
            "nested_update",
            "MongoDB update of nested field(s) (truncated arrays) carries no full document",
        ),
    ],
)  # fmt: skip
def test_broken_envelopes_are_quarantined_with_their_reason(spark, tmp_path, value, reason, detail):
    [row] = decode(spark, tmp_path, [Record("t", 0, 0, value, key='{"id": "1"}')]).collect()
    assert (row.record_kind, row.reason) == ("quarantine", reason)
    assert row.detail.startswith(detail), row.detail
