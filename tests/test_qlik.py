"""Qlik Replicate JSON and Avro: captured samples, metadata and table versions, column masks, ordering, errors.

Every test decodes through Spark over a Parquet archive (the real reader and the Python decoding path) and compares
whole rows; compaction runs where the final state is what matters (column-mask gaps, REFRESH ordering, key changes).
"""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from archive_helpers import Record, write_parquet
from frame_helpers import assert_live_state
from pyspark.sql import functions as F
from qlik_helpers import V1, V2, avro, data_schema, dt, envelope, md, seq

from cdcreplay import archive
from cdcreplay.compaction import latest_rows
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder
from cdcreplay.formats.envelopes.qlik_envelope import collect_metadata, mask_bits, qlik_type_to_spark
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.qlik_avro import ENVELOPE_SCHEMA
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_qlik import METADATA_SCHEMA, QlikEncoder, encode_qlik_json

pytestmark = pytest.mark.timeout(600)
QLIK = Path(__file__).parent / "data" / "conformance" / "qlik-replicate"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pipeline(fmt: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(name="qlik", format=fmt, archive={"path": "unused"}, tables=tables or {}, options=options)


def decode(spark, tmp_path: Path, records: list[Record], cfg: PipelineConfig, name: str = "part"):
    parquet = write_parquet(records, tmp_path / "archive" / f"{name}.parquet")
    return decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)


def rows(decoded) -> list[dict]:
    """Decoded rows in Kafka order, the fields a reader checks."""
    out = []
    for r in decoded.orderBy("topic", "partition", "offset", "row_index").collect():
        row = {"offset": r.offset, "kind": r.record_kind}
        for name in ("op", "table_id", "key", "reason", "control_kind"):
            if getattr(r, name) is not None:
                row[name] = getattr(r, name)
        if r.after is not None:
            row["after"] = dict(r.after)
        if r.before is not None:
            row["before"] = dict(r.before)
        if r.record_kind == "changelog" and r.op != "truncate":
            row["position"] = [int(p) for p in r.position]
        out.append(row)
    return out


def state(decoded) -> dict[str, dict]:
    """Live rows after compaction: key -> after image, to look at one key."""
    changes = decoded.where(F.col("record_kind") == "changelog").drop("timestamp", "record_kind")
    live = latest_rows(changes).where(~F.col("deleted")).collect()
    return {r.key: dict(r.after) for r in live}


# --- masks and types ------------------------------------------------------------------------------------------------


def test_column_mask_is_little_endian_over_ordinals():
    ordinals = lambda bits: {i + 1 for i in range(64) if bits >> i & 1}  # noqa: E731
    assert ordinals(mask_bits("0B")) == {1, 2, 4}  # the seed's example: 0B = 1011 -> ordinals 1, 2 and 4
    assert ordinals(mask_bits("0B01")) == {1, 2, 4, 9}  # second byte = ordinals 9..16
    assert ordinals(mask_bits(b"\x0b\x01")) == {1, 2, 4, 9}  # Avro bytes: the same little-endian order
    assert ordinals(mask_bits("7")) == {1, 2, 3}  # an odd digit count is a left-padded byte
    assert mask_bits("") is None and mask_bits(None) is None
    with pytest.raises(DecodeError, match="column mask 'zz' is not hexadecimal") as error:
        mask_bits("zz")
    assert error.value.reason == "bad_value"


@pytest.mark.parametrize(
    ("qlik", "precision", "scale", "spark_type"),
    [
        ("INT1", None, None, "tinyint"),
        ("INT2", None, None, "smallint"),
        ("INT4", None, None, "int"),
        ("kAR_DATA_TYPE_INT8", None, None, "bigint"),
        ("UINT4", None, None, "bigint"),
        ("UINT8", None, None, "decimal(20,0)"),
        ("NUMERIC", 12, 2, "decimal(12,2)"),
        ("NUMERIC", 40, 2, "string"),
        ("REAL4", None, None, "float"),
        ("REAL8", None, None, "double"),
        ("BOOLEAN", None, None, "boolean"),
        ("DATE", None, None, "date"),
        ("DATETIME", None, None, "timestamp_ntz"),
        ("TIME", None, None, "string"),
        ("BYTES", None, None, "binary"),
        ("BLOB", None, None, "binary"),
        ("CLOB", None, None, "string"),
        ("WSTRING", None, None, "string"),
    ],
)
def test_qlik_types_map_to_spark_types(qlik, precision, scale, spark_type):
    assert qlik_type_to_spark(qlik, precision, scale) == spark_type


def test_the_envelope_schema_is_the_documented_one():
    assert json.loads((QLIK / "MessageEnvelope.avsc").read_text()) == ENVELOPE_SCHEMA


# --- the captured samples ----------------------------------------------------------------------------------------


def sample(name: str) -> str:
    return json.dumps(json.loads((QLIK / name).read_text(encoding="utf-8")))


def test_captured_json_samples_decode_to_their_rows(spark, tmp_path):
    """No metadata message comes with these samples: the topic names the table and the key is declared."""
    records = [
        Record("users", 0, 0, sample("michelin-readme-01-update.json")),
        Record("users", 0, 1, sample("michelin-readme-02-delete-beforeData-only.json")),
        Record("users", 0, 2, sample("michelin-readme-03-delete-row-in-data.json")),
        Record("users", 0, 3, sample("michelin-readme-04-envelope-update.json")),
        Record("kit", 0, 0, sample("qlik-community-05-envelope-update-real.json")),
    ]
    cfg = pipeline("qlik-json", {"users": {"primary_key": ["id"]}, "kit": {"primary_key": ["ID"]}})
    decoded = decode(spark, tmp_path, records, cfg)
    john = {"id": "1", "email": "john@doe.com"}
    foo = {"id": "1", "email": "foo@bar.com"}
    assert rows(decoded) == [
        {
            "offset": 0,
            "kind": "changelog",
            "op": "update",
            "table_id": "kit",
            "key": '["2"]',
            "after": {"ID": "2", "NAME": "test Kafka", "tableName": "kit"},
            "before": {"ID": "2", "NAME": "ok", "tableName": "kit"},
            "position": [20230911032325000000000000000000005, 1],
        },
        {"offset": 0, "kind": "changelog", "op": "update", "table_id": "users", "key": '["1"]', "after": foo,
         "before": john, "position": [100, 1]},
        # DELETE: the row in beforeData (sample 02) or in data (sample 03), depending on the task settings.
        {"offset": 1, "kind": "changelog", "op": "delete", "table_id": "users", "key": '["1"]', "before": john,
         "position": [100, 1]},
        {"offset": 2, "kind": "changelog", "op": "delete", "table_id": "users", "key": '["1"]', "before": john,
         "position": [100, 1]},
        {"offset": 3, "kind": "changelog", "op": "update", "table_id": "users", "key": '["1"]', "after": foo,
         "before": john, "position": [100, 1]},
    ]  # fmt: skip
    real = decoded.where("topic = 'kit'").first()
    # headers.timestamp is the change's UTC time; column types are text without a metadata message.
    assert real.event_time == datetime(2023, 9, 11, 3, 23, 25)
    assert dict(real.column_types) == {}


# --- metadata, table versions and column masks (JSON) -------------------------------------------------------------


def test_masks_follow_the_ordinals_of_each_table_version(spark, tmp_path):
    """Version 2 swaps the ordinals of NAME and CITY. A mask read with the wrong version's ordinals would keep the
    wrong column and NULL the other one."""
    records = [
        Record("hr", 0, 0, md("v1", 1, V1, precision=10, scale=2)),
        Record("hr", 0, 1, dt("REFRESH", {"ID": "1", "NAME": "Ann", "CITY": "Oslo", "SALARY": "10.50"}, schema_id="v1")),
        # v1, mask 0B = ordinals 1, 2, 4: ID, NAME, SALARY captured; CITY (ordinal 3) was not -- it is NOT NULL.
        Record("hr", 0, 2, dt("UPDATE", {"ID": "1", "NAME": "Anna", "CITY": None, "SALARY": "11.00"},
                              sequence=seq(1), mask="0B", schema_id="v1")),
        Record("hr", 0, 3, md("v2", 2, V2, precision=10, scale=2)),
        # v2, mask 0B = ordinals 1, 2, 4: ID, CITY, SALARY captured; NAME (now ordinal 3) was not.
        Record("hr", 0, 4, dt("UPDATE", {"ID": "1", "CITY": "Bergen", "NAME": None, "SALARY": "12.25"},
                              sequence=seq(2), mask="0B", schema_id="v2")),
        # v1 message arriving after the v2 metadata (another partition's lag): still read with v1 ordinals.
        Record("hr", 0, 5, dt("INSERT", {"ID": "2", "NAME": "Bo", "CITY": None, "SALARY": None},
                              sequence=seq(3), mask="0F", schema_id="v1")),
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records, pipeline("qlik-json"))
    got = rows(decoded)
    assert [r["kind"] for r in got] == ["control", "changelog", "changelog", "control", "changelog", "changelog"]
    assert got[2]["after"] == {"ID": "1", "NAME": "Anna", "SALARY": "11.00"}  # CITY absent, not NULL
    assert got[4]["after"] == {"ID": "1", "CITY": "Bergen", "SALARY": "12.25"}  # NAME absent, not NULL
    assert got[5]["after"] == {"ID": "2", "NAME": "Bo", "CITY": None, "SALARY": None}  # captured NULLs stay NULL
    assert all(r.get("table_id") == "HR.EMP" for r in got if r["kind"] == "changelog")
    types = decoded.where("offset = 4").first().column_types
    assert dict(types) == {"ID": "int", "NAME": "string", "CITY": "string", "SALARY": "decimal(10,2)"}
    assert_live_state(
        decoded,
        {
            '["1"]': {"ID": "1", "NAME": "Anna", "CITY": "Bergen", "SALARY": "12.25"},
            '["2"]': {"ID": "2", "NAME": "Bo", "CITY": None, "SALARY": None},
        },
    )
    control = decoded.where("record_kind = 'control'").orderBy("offset").collect()
    assert [(r.control_kind, r.table_id) for r in control] == [("schema_change", "HR.EMP")] * 2
    assert control[1].detail == "table HR.EMP version 2 schemaId v2 (4 columns, key ID)"


def test_metadata_is_found_outside_the_replayed_slice_and_topic(spark, tmp_path):
    """MD messages are state: a nightly run replays one day and one data topic, the MD sits earlier elsewhere."""
    md_file = write_parquet(
        [Record("hr.metadata", 0, 0, md("v1", 1, V1, precision=10, scale=2), timestamp=T0)],
        tmp_path / "archive" / "topic=hr.metadata" / "part-0.parquet",
    )
    data_file = write_parquet(
        [Record("hr", 0, 7, dt("INSERT", {"ID": "5", "NAME": "Cy", "CITY": "Rome", "SALARY": "1.00"},
                                sequence=seq(9), mask="0F", schema_id="v1"), timestamp=datetime(2026, 1, 9, tzinfo=UTC))],
        tmp_path / "archive" / "topic=hr" / "part-0.parquet",
    )  # fmt: skip
    raw = archive.read_archive(spark, [str(md_file), str(data_file)], "parquet")
    selected = archive.select_records(
        raw, archive.Selection(topics=("hr",), start=datetime(2026, 1, 9, tzinfo=UTC), end=datetime(2026, 1, 10, tzinfo=UTC))
    )  # fmt: skip
    cfg = pipeline("qlik-json")
    decoded = decoder("qlik-json")(selected, cfg)
    [row] = decoded.collect()
    assert (row.record_kind, row.op, row.table_id, row.key) == ("changelog", "insert", "HR.EMP", '["5"]')
    assert row.column_types["SALARY"] == "decimal(10,2)"


def test_a_named_metadata_message_missing_from_the_archive_is_quarantined(spark, tmp_path):
    records = [Record("hr", 0, 0, dt("INSERT", {"ID": "1"}, sequence=seq(1), mask="01", schema_id="nowhere"))]
    [row] = decode(spark, tmp_path, records, pipeline("qlik-json")).collect()
    assert (row.record_kind, row.reason) == ("quarantine", "missing_metadata")
    assert row.detail.startswith("the metadata message with schemaId nowhere is not in the archive")
    assert row.raw_value == records[0].value.encode("utf-8")


def test_a_bare_message_uses_the_latest_metadata_of_its_topics_table(spark, tmp_path):
    records = [
        Record("hr", 0, 0, md("v1", 1, V1), timestamp=T0),
        Record("hr", 0, 1, md("v2", 2, V2), timestamp=datetime(2026, 1, 2, tzinfo=UTC)),
        # No schema id: the MD in force at the record's time (v1 on Jan 1st 12:00, v2 after Jan 2nd).
        Record("hr", 0, 2, dt("UPDATE", {"ID": "1", "NAME": "x", "CITY": None, "SALARY": None}, sequence=seq(1),
                              mask="03", envelope=False), timestamp=datetime(2026, 1, 1, 12, tzinfo=UTC)),
        Record("hr", 0, 3, dt("UPDATE", {"ID": "1", "CITY": "y", "NAME": None, "SALARY": None}, sequence=seq(2),
                              mask="03", envelope=False), timestamp=datetime(2026, 1, 3, tzinfo=UTC)),
    ]  # fmt: skip
    got = rows(decode(spark, tmp_path, records, pipeline("qlik-json")))
    assert got[2]["after"] == {"ID": "1", "NAME": "x"}
    assert got[3]["after"] == {"ID": "1", "CITY": "y"}


def test_a_primary_key_update_is_a_delete_and_an_insert(spark, tmp_path):
    records = [
        Record("hr", 0, 0, md("v1", 1, V1)),
        Record("hr", 0, 1, dt("INSERT", {"ID": "1", "NAME": "A", "CITY": "C", "SALARY": "1"}, sequence=seq(1),
                              mask="0F", schema_id="v1")),
        Record("hr", 0, 2, dt("UPDATE", {"ID": "7", "NAME": "B", "CITY": "C", "SALARY": "1"},
                              before={"ID": "1", "NAME": "A", "CITY": "C", "SALARY": "1"},
                              sequence=seq(2), mask="0F", schema_id="v1")),
        # The key moves from 7 to 8 but CITY was not captured: the new row cannot be built without inventing it.
        Record("hr", 0, 3, dt("UPDATE", {"ID": "8", "NAME": "B", "CITY": None, "SALARY": "1"},
                              before={"ID": "7", "NAME": "B", "CITY": None, "SALARY": "1"},
                              sequence=seq(3), mask="0B", schema_id="v1")),
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records, pipeline("qlik-json"))
    got = rows(decoded)
    assert [(r["offset"], r["kind"], r.get("op"), r.get("key"), r.get("reason")) for r in got[2:]] == [
        (2, "changelog", "delete", '["1"]', None),
        (2, "changelog", "insert", '["7"]', None),
        (3, "changelog", "delete", '["7"]', None),
        (3, "quarantine", None, None, "partial_key_change"),
    ]
    assert decoded.where("reason = 'partial_key_change'").first().detail == (
        "UPDATE moves the row to a new key but did not capture CITY"
    )
    assert_live_state(decoded, {})  # key 1 moved to 7, 7 moved on; the unbuildable row 8 waits in quarantine


def test_refresh_rows_take_the_position_of_the_change_before_them(spark, tmp_path):
    """REFRESH carries no changeSequence. A reload row read after a change wins over it; the next change wins over
    the reload row; rows of the initial load precede everything."""
    records = [
        Record("hr", 0, 0, md("v1", 1, V1)),
        Record("hr", 0, 1, dt("REFRESH", {"ID": "1", "NAME": "initial", "CITY": "a", "SALARY": "1"}, mask="0F",
                              schema_id="v1")),
        Record("hr", 0, 2, dt("UPDATE", {"ID": "1", "NAME": "changed", "CITY": "a", "SALARY": "1"}, sequence=seq(5),
                              mask="0F", schema_id="v1")),
        # A resync reads the row after that change (it saw a value the stream never carried: source drift).
        Record("hr", 0, 3, dt("REFRESH", {"ID": "1", "NAME": "reloaded", "CITY": "a", "SALARY": "1"}, mask="0F",
                              schema_id="v1")),
        Record("hr", 0, 4, dt("REFRESH", {"ID": "2", "NAME": "reloaded", "CITY": "b", "SALARY": "2"}, mask="0F",
                              schema_id="v1")),
        Record("hr", 0, 5, dt("UPDATE", {"ID": "2", "NAME": "after reload", "CITY": "b", "SALARY": "2"},
                              sequence=seq(6), mask="0F", schema_id="v1")),
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records, pipeline("qlik-json"))
    positions = {r["offset"]: r["position"] for r in rows(decoded) if r["kind"] == "changelog"}
    assert positions == {
        1: [],
        2: [int(seq(5)), 1],
        3: [int(seq(5)), 1],
        4: [int(seq(5)), 1],
        5: [int(seq(6)), 1],
    }
    final = state(decoded)
    assert final['["1"]']["NAME"] == "reloaded" and final['["2"]']["NAME"] == "after reload"


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        ("not json", "not_json", "payload is not a JSON object: not json"),
        (b"\xff\xfe", "not_utf8", "payload is not valid UTF-8 text"),
        ('{"hello": 1}', "unknown_op", "neither a Qlik data message"),
        ('{"magic": "atMSG", "type": "XX", "message": {}}', "unknown_op", "envelope type 'XX' is neither DT nor MD"),
        (dt("MERGE", {"ID": "1"}, sequence="1"), "unknown_op", "headers.operation 'MERGE' is not REFRESH"),
        (dt("UPDATE", {"ID": "1"}, sequence="12a"), "bad_value", "changeSequence '12a' is not a string of digits"),
        (dt("UPDATE", {"ID": "1"}, sequence="1", mask="xyz"), "bad_value", "column mask 'xyz' is not hexadecimal"),
        (dt("INSERT", None, sequence="1"), "missing_image", "INSERT message without `data`"),
        (dt("DELETE", None, sequence="1"), "missing_image", "DELETE message with neither `beforeData` nor `data`"),
        ('{"magic": "atMSG", "type": "DT", "message": 5}', "not_json", "envelope `message` is not an object"),
        # Hostile metadata: quarantined, never the end of the run (the metadata pass reads every MD on the driver).
        (md("v1", 1, V1).replace('"schema": "HR"', '"schema": [[1]]'), "bad_value", "metadata lineage.schema is not"),
        (
            md("v1", 1, V1)
            .replace('"lineage": {', '"lineage": [{')
            .replace(', "tableStructure"', '], "tableStructure"'),
            "bad_value",
            "metadata `lineage` or `tableStructure` is not an object",
        ),
        ('{"lineage": {}, "tableStructure": {"tableColumns": "x"}}', "bad_value", "metadata tableStructure.tableCol"),
        ('{"lineage": {}, "tableStructure": {"tableColumns": {"A": 1}}}', "bad_value", "metadata column 'A' is not"),
    ],
)
def test_bad_json_messages_are_quarantined_with_their_reason(spark, tmp_path, value, reason, detail):
    [row] = decode(spark, tmp_path, [Record("hr", 0, 0, value)], pipeline("qlik-json")).collect()
    assert (row.record_kind, row.reason) == ("quarantine", reason)
    assert row.detail.startswith(detail), row.detail


def test_a_metadata_candidate_the_first_pass_cannot_index_does_not_end_the_run(spark, tmp_path):
    """The metadata pass runs on the driver before any record is decoded: whatever a candidate raises there, it is
    skipped (the second pass decodes it, and quarantines it if it must)."""
    parquet = write_parquet([Record("hr", 0, 0, md("v1", 1, V1))], tmp_path / "archive" / "part.parquet")
    records = archive.read_archive(spark, [str(parquet)], "parquet")

    def parse(record):
        raise TypeError("a decoder bug")

    index = collect_metadata(records, pipeline("qlik-json"), lambda value: F.lit(True), parse)
    assert index.by_id == {} and index.by_table == {}


# --- Avro --------------------------------------------------------------------------------------------------------------

AVRO_COLUMNS = [
    ("ID", "int"),
    ("NAME", "string"),
    ("PAY", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
    ("HIRED", {"type": "long", "logicalType": "timestamp-micros"}),
]
SCHEMA = data_schema(AVRO_COLUMNS)
SCHEMA_TEXT = json.dumps(SCHEMA)


def md_avro(schema_id: str) -> bytes:
    message = {
        "schemaId": schema_id,
        "lineage": {"server": "srv", "task": "t", "schema": "HR", "table": "EMP", "tableVersion": 1,
                    "timestamp": "2026-01-01T00:00:00"},
        "tableStructure": {"tableColumns": {
            "ID": {"ordinal": 1, "type": "INT4", "length": 4, "precision": 0, "scale": 0, "primaryKeyPosition": 1},
            "NAME": {"ordinal": 2, "type": "STRING", "length": 9, "precision": 0, "scale": 0, "primaryKeyPosition": 0},
            "PAY": {"ordinal": 3, "type": "NUMERIC", "length": 0, "precision": 9, "scale": 2, "primaryKeyPosition": 0},
            "HIRED": {"ordinal": 4, "type": "DATETIME", "length": 0, "precision": 0, "scale": 0,
                      "primaryKeyPosition": 0},
        }},
        "dataSchema": SCHEMA_TEXT,
    }  # fmt: skip
    return envelope("MD", avro(METADATA_SCHEMA, message), schema_text=json.dumps(METADATA_SCHEMA))


def data_record(op: str, data: dict, sequence: str, mask: bytes, before: dict | None = None) -> bytes:
    return avro(
        SCHEMA,
        {"data": data, "beforeData": before,
         "headers": {"operation": op, "changeSequence": sequence, "columnMask": mask, "transactionEventCounter": 1}},
    )  # fmt: skip


HIRED = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)  # a zoneless DATETIME as Replicate's Avro carries it
ROW = {"ID": 1, "NAME": "Ann", "PAY": Decimal("1234.50"), "HIRED": HIRED}


def test_avro_envelopes_decode_by_schema_id_and_by_embedded_schema(spark, tmp_path):
    records = [
        Record("qlik.metadata", 0, 0, md_avro("id-1")),
        Record("hr", 0, 0, envelope("DT", data_record("REFRESH", ROW, "", b"\x0f"), schema_id="id-1")),
        # Embedded schema, equal to the MD's dataSchema: the MD gives key, ordinals and types.
        Record("hr", 0, 1, envelope("DT", data_record("UPDATE", {**ROW, "NAME": None, "PAY": Decimal("1.00")},
                                                      seq(1), b"\x0d"), schema_text=SCHEMA_TEXT)),
        Record("hr", 0, 2, envelope("DT", data_record("DELETE", dict.fromkeys(ROW), seq(2), b"\x0f", before=ROW),
                                    schema_id="id-1")),
        Record("hr", 0, 3, envelope("DT", data_record("INSERT", ROW, seq(3), b"\x0f"), schema_id="id-unknown")),
    ]  # fmt: skip
    decoded = decode(spark, tmp_path, records, pipeline("qlik-avro"))
    got = rows(decoded)
    full = {"ID": "1", "NAME": "Ann", "PAY": "1234.50", "HIRED": "2025-03-04 05:06:07.890123"}
    assert got == [
        {"offset": 0, "kind": "changelog", "op": "snapshot", "table_id": "HR.EMP", "key": '["1"]', "after": full,
         "position": []},
        # mask 0D = ordinals 1, 3, 4: NAME (2) was not captured.
        {"offset": 1, "kind": "changelog", "op": "update", "table_id": "HR.EMP", "key": '["1"]',
         "after": {"ID": "1", "PAY": "1.00", "HIRED": "2025-03-04 05:06:07.890123"}, "position": [int(seq(1)), 1]},
        {"offset": 2, "kind": "changelog", "op": "delete", "table_id": "HR.EMP", "key": '["1"]', "before": full,
         "position": [int(seq(2)), 1]},
        {"offset": 3, "kind": "quarantine", "reason": "missing_metadata"},
        {"offset": 0, "kind": "control", "table_id": "HR.EMP", "control_kind": "schema_change"},
    ]  # fmt: skip
    types = decoded.where("offset = 1 and topic = 'hr'").first().column_types
    assert dict(types) == {"ID": "int", "NAME": "string", "PAY": "decimal(9,2)", "HIRED": "timestamp_ntz"}


def test_a_self_describing_avro_message_without_metadata(spark, tmp_path):
    """No MD message: the record namespace names the table, the field order gives the ordinals."""
    records = [Record("t", 0, 0, envelope("DT", data_record("UPDATE", {**ROW, "PAY": None}, seq(1), b"\x0b"),
                                          schema_text=SCHEMA_TEXT))]  # fmt: skip
    [row] = decode(spark, tmp_path, records, pipeline("qlik-avro", {"HR.EMP": {"primary_key": ["ID"]}})).collect()
    assert (row.record_kind, row.table_id, row.key) == ("changelog", "HR.EMP", '["1"]')
    assert dict(row.after) == {"ID": "1", "NAME": "Ann", "HIRED": "2025-03-04 05:06:07.890123"}  # PAY not captured
    assert dict(row.column_types) == {"ID": "int", "NAME": "string", "PAY": "decimal(9,2)", "HIRED": "timestamp_ntz"}


def test_self_describing_messages_of_two_tables_each_keep_their_own_layout(spark, tmp_path):
    """A schema's layout (table, ordinals, types) is worked out once per schema: messages of two schemas, interleaved
    in one batch, still get each their own table, types and column mask."""
    other = data_schema([("CODE", "string"), ("ID", "long")])  # another table, its key in the second field
    other["namespace"] = "com.attunity.queue.msg.srv.HR.DEPT"
    other["fields"][1]["type"] = ["null", f"{other['namespace']}.Data"]
    other_text = json.dumps(other)

    def dept(sequence: str, mask: bytes) -> bytes:
        headers = {"operation": "INSERT", "changeSequence": sequence, "columnMask": mask, "transactionEventCounter": 1}
        return avro(other, {"data": {"CODE": "D1", "ID": 7}, "beforeData": None, "headers": headers})

    emp = data_record("INSERT", ROW, seq(1), b"\x0d")  # ordinals 1, 3, 4: NAME not captured
    records = [
        Record("t", 0, 0, envelope("DT", emp, schema_text=SCHEMA_TEXT)),
        Record("t", 0, 1, envelope("DT", dept(seq(2), b"\x02"), schema_text=other_text)),  # ordinal 2 only: ID
        Record("t", 0, 2, envelope("DT", emp, schema_text=SCHEMA_TEXT)),
    ]
    tables = {"HR.EMP": {"primary_key": ["ID"]}, "HR.DEPT": {"primary_key": ["ID"]}}
    got = {r.offset: r for r in decode(spark, tmp_path, records, pipeline("qlik-avro", tables)).collect()}
    for offset in (0, 2):
        assert (got[offset].table_id, dict(got[offset].after)) == (
            "HR.EMP",
            {"ID": "1", "PAY": "1234.50", "HIRED": "2025-03-04 05:06:07.890123"},
        )
        assert dict(got[offset].column_types)["PAY"] == "decimal(9,2)"
    assert (got[1].table_id, got[1].key, dict(got[1].after)) == ("HR.DEPT", '["7"]', {"ID": "7"})
    assert dict(got[1].column_types) == {"CODE": "string", "ID": "bigint"}


def test_confluent_framed_data_records_and_unknown_ids(spark, tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "42.avsc").write_text(SCHEMA_TEXT)
    framed = b"\x00" + struct.pack(">I", 42) + data_record("INSERT", ROW, seq(1), b"\x0f")
    unknown = b"\x00" + struct.pack(">I", 43) + data_record("INSERT", ROW, seq(1), b"\x0f")
    records = [Record("t", 0, 0, framed), Record("t", 0, 1, unknown), Record("t", 0, 2, b"garbage")]
    cfg = pipeline("qlik-avro", {"HR.EMP": {"primary_key": ["ID"]}}, schema_registry_dir=str(registry))
    got = {r.offset: r for r in decode(spark, tmp_path, records, cfg).collect()}
    assert (got[0].record_kind, got[0].op, got[0].table_id, got[0].key) == ("changelog", "insert", "HR.EMP", '["1"]')
    assert (got[1].reason, got[2].reason) == ("unknown_schema", "bad_avro")
    assert "schema id 43 is not in the schema folder" in got[1].detail
    assert got[2].detail == "value is neither a Qlik atMSG envelope nor Confluent-framed Avro"


def test_truncated_avro_envelope_is_bad_avro(spark, tmp_path):
    value = envelope("DT", data_record("INSERT", ROW, seq(1), b"\x0f"), schema_id="x")[:12]
    [row] = decode(spark, tmp_path, [Record("t", 0, 0, value)], pipeline("qlik-avro")).collect()
    assert (row.record_kind, row.reason) == ("quarantine", "bad_avro")
    assert row.detail.startswith("Qlik envelope does not decode with its schema")


# --- the simulator's Qlik encoding exercises what the truth tests rely on ------------------------------------------


def test_the_simulated_qlik_history_has_gaps_versions_reloads_and_key_changes():
    history = simulate(seed=11, events=2500)
    items = list(QlikEncoder(history, delete_in_data=()).run())
    metadata = [m for kind, m in items if kind == "MD"]
    assert [(m.spec.table_id, m.version) for m in metadata if m.version > 1] == [("shop.customers", 2)]
    changes = [c for kind, c in items if kind == "DT"]
    # Gaps that matter: an uncaptured column whose true value is not NULL (writing NULL would be wrong).
    gaps = [
        c
        for c in changes
        if c.operation == "UPDATE"
        and any(c.data[name] is not None for name in c.version.columns if name not in c.captured)
    ]
    assert len(gaps) > 20
    assert any(c.version.version == 2 for c in gaps)
    assert sum(c.operation == "REFRESH" for c in changes) > 100
    key_changes = [
        c
        for c in changes
        if c.version.spec.table_id == "shop.customers" and c.operation == "UPDATE" and c.before["id"] != c.data["id"]
    ]
    assert key_changes


def test_the_json_encoding_names_each_version_by_its_schema_id():
    history = simulate(seed=11, events=400)
    values = [json.loads(r.value) for r in encode_qlik_json(history)]
    ids = {v["message"]["schemaId"] for v in values if v.get("type") == "MD"}
    named = {(v.get("message", v))["headers"]["externalSchemaId"] for v in values if v.get("type") != "MD"}
    assert named == ids and len(ids) == 4
