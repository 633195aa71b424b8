"""Huawei DRS JSON for DDS (MongoDB): the vendor's five samples, updates applied to the stored document across runs,
every error path, and the simulator's history through the documented document mapping (full rebuild, nightly
incremental runs, a rerun). DDS is not in the generic truth tests: its documents do not have the relational columns.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from archive_helpers import Record, pipeline_config, write_parquet
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay.config import PipelineConfig
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.formats import decoder
from cdcreplay.warehouse import read_table
from cdcreplay_lab.simulator import simulate, write_archive
from cdcreplay_lab.simulator.encode_drs_dds import encode_drs_dds, expected_rows

pytestmark = pytest.mark.timeout(900)

SAMPLES = Path(__file__).parent / "data" / "conformance" / "vendor-doc-samples" / "huawei-drs-json-mongodb-dds"
OID = "64650cf67dc36a464e76e583"
DOC_KEY = json.dumps([json.dumps({"$oid": OID}, separators=(",", ":"))], separators=(",", ":"))
COLUMNS = ("offset", "record_kind", "op", "table_id", "key", "after", "before", "column_types", "position", "reason",
           "detail", "control_kind")  # fmt: skip


def document_text(fields: str) -> str:
    """The `_document` text of the samples' document: its ObjectId _id, then ``fields`` (JSON members)."""
    return '{"_id":{"$oid":"' + OID + '"}' + fields + "}"


def samples() -> list[dict]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(SAMPLES.glob("*.json"))]


def records_of(messages: list) -> list[Record]:
    """Messages as records; the Kafka timestamp is the message's `es` (DRS writes right after the commit)."""
    out = []
    for offset, message in enumerate(messages):
        text = json.dumps(message, ensure_ascii=False) if isinstance(message, dict) else message
        es = message.get("es", 0) if isinstance(message, dict) else 0
        out.append(Record("dds", 0, offset, text, timestamp=datetime.fromtimestamp(es / 1000, UTC)))
    return out


def decode(spark, tmp_path: Path, messages: list, name: str = "dds") -> list[dict]:
    parquet = write_parquet(records_of(messages), tmp_path / f"{name}.parquet")
    cfg = PipelineConfig(name="dds", format="drs-dds-json", archive={"path": "unused"})
    decoded = decoder("drs-dds-json")(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)
    return [r.asDict() for r in decoded.select(*COLUMNS).orderBy("offset").collect()]


def message(op: str, value, where=None, record_type=None, message_id=1, coll="c") -> dict:
    return {
        "id": message_id,
        "op": op,
        "dbType": "MongoDB",
        "db": "d",
        "coll": coll,
        "value": value,
        "where": where,
        "recordType": record_type,
        "extra": record_type,
        "es": 1684315111439 + message_id * 1000,
        "ts": 1684315111576 + message_id * 1000,
        "clusterTime": f"{1684344064 + message_id}:1",
    }


# --- the vendor's samples -------------------------------------------------------------------------------------------


def test_vendor_samples_decode_to_whole_documents(spark, tmp_path):
    rows = decode(spark, tmp_path, samples())
    doc0 = {
        "_document": document_text(',"c1":"baz","tags":["mongodb","database","NoSQL"]'),
        "_id": OID,
        "c1": "baz",
        "tags": '["mongodb","database","NoSQL"]',
    }
    doc1 = {"_document": document_text(',"c1":"sss"'), "_id": OID, "c1": "sss"}
    doc2 = {"_document": document_text(',"c1":"aaa"'), "_id": OID, "c1": "aaa"}
    doc3 = {"_document": document_text(',"column1":"aaa"'), "_id": OID, "column1": "aaa"}
    text = {"_document": "string", "_id": "string"}
    common = {"record_kind": "changelog", "table_id": "ljx.ljx", "key": DOC_KEY, "reason": None, "detail": None,
              "control_kind": None}  # fmt: skip
    assert rows == [
        # insert: the whole document; the array is a JSON-text column
        {**common, "offset": 0, "op": "insert", "after": doc0, "before": None,
         "column_types": {**text, "c1": "string", "tags": "string"}, "position": [256, 1684344064, 1]},
        # replace (recordType replace): the new document; `tags`, which it lacks, is NULL
        {**common, "offset": 1, "op": "update", "after": {**doc1, "tags": None}, "before": doc0,
         "column_types": {**text, "c1": "string", "tags": "string"}, "position": [340, 1684344904, 9]},
        # $set c1 onto the stored document
        {**common, "offset": 2, "op": "update", "after": doc2, "before": doc1,
         "column_types": {**text, "c1": "string"}, "position": [386, 1684345365, 1]},
        # $unset c1 and $set column1
        {**common, "offset": 3, "op": "update", "after": {**doc3, "c1": None}, "before": doc2,
         "column_types": {**text, "column1": "string", "c1": "string"}, "position": [414, 1684345648, 1]},
        # delete by _id
        {**common, "offset": 4, "op": "delete", "after": None, "before": doc3,
         "column_types": {**text, "column1": "string"}, "position": [471, 1684346209, 1]},
    ]  # fmt: skip


def _replay(tmp_path: Path, run_id: str, start: str, end: str, full: bool = False) -> dict:
    config = tmp_path / "dds.yaml"
    args = ["--config", str(config), "--run-id", run_id, "--start", start, "--end", end]
    assert replay_main([*args, "--full-rebuild"] if full else args) == EXIT_OK
    return json.loads((tmp_path / "warehouse" / "dds" / "runs" / run_id / "summary.json").read_text())


def _published(spark, tmp_path: Path, table_id: str) -> list[dict]:
    frame = read_table(spark, str(tmp_path / "warehouse"), "dds", table_id)
    columns = [c for c in frame.columns if not c.startswith("_") or c in ("_id", "_document")]
    return sorted((r.asDict() for r in frame.select(*columns).collect()), key=lambda r: json.dumps(r["_id"]))


def test_vendor_samples_across_two_runs_apply_to_the_published_document(spark, tmp_path):
    """Run 1 (09:00-09:50 UTC) inserts, replaces and updates; run 2 deletes (09:54)."""
    write_parquet(records_of(samples()), tmp_path / "archive" / "a.parquet")
    pipeline_config(tmp_path, "dds", "drs-dds-json", tmp_path / "archive")
    first = _replay(tmp_path, "one", "2023-05-17T09:00:00Z", "2023-05-17T09:50:00Z", full=True)
    assert first["decoded"]["changelog_rows"] == 4 and first["decoded"]["quarantined"] == 0
    assert _published(spark, tmp_path, "ljx.ljx") == [
        {"_id": OID, "_document": document_text(',"column1":"aaa"'), "c1": None, "column1": "aaa"}
    ]
    second = _replay(tmp_path, "two", "2023-05-17T09:50:00Z", "2023-05-17T10:00:00Z")
    assert second["decoded"]["changelog_rows"] == 1 and second["tables"]["ljx.ljx"]["rows"] == 0


def test_a_dotted_set_in_a_later_run_reaches_into_the_published_document(spark, tmp_path):
    insert = message("INSERT", '{"_id": 1, "a": {"b": 1, "keep": NumberLong(2)}, "n": 1.5}', None, "insert", 1)
    update = message("UPDATE", '{"$set": {"a.b": "two", "a.new": [1]}}', '{"_id": NumberLong(1)}', "update", 9000)
    write_parquet(records_of([insert, update]), tmp_path / "archive" / "a.parquet")
    pipeline_config(tmp_path, "dds", "drs-dds-json", tmp_path / "archive")
    _replay(tmp_path, "one", "2023-05-17T00:00:00Z", "2023-05-17T10:00:00Z", full=True)
    second = _replay(tmp_path, "two", "2023-05-17T10:00:00Z", "2023-05-18T00:00:00Z")
    assert second["decoded"]["quarantined"] == 0
    (row,) = _published(spark, tmp_path, "d.c")
    assert row == {
        "_id": 1,
        "_document": '{"_id":1,"a":{"b":"two","keep":2,"new":[1]},"n":1.5}',
        "a": '{"b":"two","keep":2,"new":[1]}',
        "n": 1.5,
    }


# --- what is quarantined, and why -----------------------------------------------------------------------------------


def test_error_paths_are_quarantined_with_their_reason(spark, tmp_path):
    messages = [
        message("UPDATE", '{"$set": {"a": 1}}', '{"_id": 1}', "update", 1),  # never inserted
        message("INSERT", '{"_id": 2, "a": 1}', None, "insert", 2),
        message("DELETE", '{"_id": 2}', None, "doc", 3),
        message("UPDATE", '{"$set": {"a": 2}}', '{"_id": 2}', "update", 4),  # deleted before it
        message("INSERT", '{"_id": 3, "code": Code("function() {}")}', None, "insert", 5),
        message("INSERT", '{"_id": 4, "a": ObjectId("64650cf6")}', None, "insert", 6),
        message("UPDATE", '{"$inc": {"a": 1}}', '{"_id": 2}', "update", 7),
        message("DELETE", None, None, "doc", 8),
        message("INSERT", '{"a": 1}', None, "insert", 9),
        message("NOOP", '{"_id": 5}', None, None, 10),
        message("DDL", '{"create": "c"}', None, "ddl", 11),
        "{not json",
        message("UPDATE", '{"_id": 6, "a": 1}', '{"_id": 7}', "replace", 13),
        message("INSERT", '{"_id": 8, "_document": 1}', None, "insert", 14),
        message("INSERT", '{"_id": 9, "d": new Date(253402300800000)}', None, "insert", 15),
        message("INSERT", '{"_id": 10}', None, "insert", 16) | {"coll": ""},
        message("INSERT", '{"_id": 11, "a": {"b": 5}}', None, "insert", 17),
        message("UPDATE", '{"$set": {"a.b.c": 1}}', '{"_id": 11}', "update", 18),  # a.b is a number
        message("DELETE", '{"_id": 12}', None, "view", 19),
        message("INSERT", '{"_id": 13}', None, "insert", 20) | {"id": "20"},
    ]
    rows = decode(spark, tmp_path, messages)
    got = {r["offset"]: (r["record_kind"], r["reason"] or r["control_kind"] or r["op"], r["detail"]) for r in rows}
    assert len(rows) == len(messages)
    assert got[0] == (
        "quarantine",
        "no_document",
        'update of _id {"$number":"1"} in d.c, which was never inserted before it: $set/$unset cannot be applied '
        "without the document",
    )
    assert got[3] == (
        "quarantine",
        "no_document",
        'update of _id {"$number":"2"} in d.c, which was deleted before it: $set/$unset cannot be applied without '
        "the document",
    )
    assert got[1][:2] == ("changelog", "insert") and got[2][:2] == ("changelog", "delete")
    assert got[4][:2] == ("quarantine", "shell_syntax")
    assert got[4][2].startswith("`value`: unknown shell construct 'Code' at offset 19")
    assert got[5][:2] == ("quarantine", "shell_syntax") and "ObjectId needs 24 lowercase hex digits" in got[5][2]
    assert got[6] == ("quarantine", "unknown_op", "update operator '$inc' is not one DRS writes ($set, $unset)")
    assert got[7] == ("quarantine", "missing_image", "DELETE without `value` (the document or the filter)")
    assert got[8] == ("quarantine", "missing_key", "`value` has no _id")
    assert got[9] == ("quarantine", "unknown_op", "op 'NOOP' is not INSERT, UPDATE, DELETE or DDL")
    assert got[10] == ("control", "ddl", '{"create": "c"}')
    assert got[11][:2] == ("quarantine", "not_json")
    assert got[12] == ("quarantine", "bad_value", "a replace's document has another _id than its `where`")
    assert got[13] == ("quarantine", "bad_value", "the document has a field named _document, a reserved column")
    assert got[14] == ("quarantine", "bad_value", "date 253402300800000 ms is outside years 1..9999")
    assert got[15] == ("quarantine", "missing_table", "the message names no collection (`coll`)")
    assert got[16][:2] == ("changelog", "insert")
    assert got[17] == ("quarantine", "bad_value", "$set 'a.b.c': 'a.b' is not a document or array")
    assert got[18] == ("quarantine", "unknown_op", "DELETE of recordType 'view' (only documents: doc)")
    assert got[19] == ("quarantine", "decode_error", "`id` (DRS's event serial, the order) is not an integer: '20'")


def test_typed_columns_of_each_bson_type(spark, tmp_path):
    value = (
        '{"_id": ObjectId("64650cf67dc36a464e76e583"), "s": "x", "b": true, "i": NumberInt(3), "l": NumberLong(4), '
        '"d": 2.5, "nan": NaN, "dec": NumberDecimal("1.10"), "at": ISODate("2023-05-17T09:18:31.439Z"), '
        '"bin": BinData(0, "AQI="), "doc": {"k": 1}, "arr": [1, "a"], "ts": Timestamp(1, 2), "n": null}'
    )
    (row,) = decode(spark, tmp_path, [message("INSERT", value, None, "insert", 1)])
    assert row["column_types"] == {
        "_document": "string", "_id": "string", "s": "string", "b": "boolean", "i": "bigint", "l": "bigint",
        "d": "double", "nan": "double", "dec": "string", "at": "timestamp", "bin": "binary", "doc": "string",
        "arr": "string", "ts": "string",
    }  # fmt: skip
    after = dict(row["after"])
    assert after.pop("_document").startswith('{"_id":{"$oid":"64650cf67dc36a464e76e583"},"s":"x"')
    assert after == {
        "_id": OID, "s": "x", "b": "true", "i": "3", "l": "4", "d": "2.5", "nan": "NaN", "dec": "1.10",
        "at": "2023-05-17 09:18:31.439", "bin": "AQI=", "doc": '{"k":1}', "arr": '[1,"a"]',
        "ts": '{"$timestamp":{"t":1,"i":2}}', "n": None,
    }  # fmt: skip


# --- the simulator's history ----------------------------------------------------------------------------------------


def _published_as_expected(spark, tmp_path: Path, history) -> None:
    json_columns = {"contact"}
    for table_id in history.tables:
        frame = read_table(spark, str(tmp_path / "warehouse"), "dds", table_id)
        types = dict(frame.dtypes)
        columns = [
            F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSS").alias(c) if types[c] == "timestamp" else F.col(c)
            for c in frame.columns
            if not c.startswith("_") or c == "_id"
        ]
        got = [r.asDict() for r in frame.select(*columns).collect()]
        for row in got:
            for name in json_columns | ({"_id"} if types["_id"] == "string" else set()):
                if row.get(name) is not None:
                    row[name] = json.loads(row[name])
        expected = expected_rows(history, table_id)
        key = lambda row: json.dumps(row["_id"], sort_keys=True)  # noqa: E731
        assert sorted(got, key=key) == sorted(expected, key=key), table_id


DDS_TYPES = {
    "shop.customers": {"_id": "bigint", "name": "string", "contact": "string", "balance": "string", "vip": "boolean",
                       "updated_at": "timestamp", "_document": "string"},
    "shop.orders": {"_id": "bigint", "customer_id": "bigint", "amount": "string", "status": "string", "note": "string",
                    "weight": "double", "created_at": "timestamp", "_document": "string"},
    "shop.order_items": {"_id": "string", "sku": "string", "qty": "bigint", "price": "string", "_document": "string"},
}  # fmt: skip


def test_simulated_history_full_rebuild_nightly_runs_and_a_rerun(spark, tmp_path):
    history = simulate(seed=11, events=1500, days=2)  # two nights: the second folds its events onto the first's
    write_archive(encode_drs_dds(history), tmp_path / "archive")
    pipeline_config(tmp_path, "dds", "drs-dds-json", tmp_path / "archive")
    summary = _replay(tmp_path, "full", history.start.isoformat(), (history.end + timedelta(days=1)).isoformat(), True)
    assert summary["decoded"]["quarantined"] == 0 and summary["decoded"]["control_by_kind"] == {"ddl": 1}
    _published_as_expected(spark, tmp_path, history)
    for table_id, types in DDS_TYPES.items():
        frame = read_table(spark, str(tmp_path / "warehouse"), "dds", table_id)
        assert {c: t for c, t in frame.dtypes if not c.startswith("_") or c in types} == types, table_id

    first_day = history.start.replace(hour=0, minute=0, second=0, microsecond=0)
    day = first_day
    while day <= history.end:
        run = _replay(tmp_path, f"day_{day:%Y%m%d}", day.isoformat(), (day + timedelta(days=1)).isoformat(),
                      full=day == first_day)  # fmt: skip
        assert run["decoded"]["quarantined"] == 0, run["decoded"]
        day += timedelta(days=1)
    _published_as_expected(spark, tmp_path, history)

    # The first night replayed again after the second folds its events onto a published state already past them.
    rerun = _replay(
        tmp_path, f"rerun_{first_day:%Y%m%d}", first_day.isoformat(), (first_day + timedelta(days=1)).isoformat()
    )
    assert rerun["decoded"]["quarantined"] == 0
    _published_as_expected(spark, tmp_path, history)
