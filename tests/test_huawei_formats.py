"""Huawei Cloud DRS: JSON (MySQL), JSON-C, JSON for Oracle/PostgreSQL/GaussDB/SQL Server, and Avro.

Vendor samples (seed 002) decode to the rows the document describes, whole rows compared; every error path lands in
quarantine with its reason; a PostgreSQL-shaped DRS JSON archive from the simulator reproduces the true final state
(the generic truth tests in test_truth.py cover drs-json-mysql, drs-json-c, drs-json-rdbms as Oracle, and drs-avro).
DRS Avro is verified against a PROJECT-WRITTEN schema only (tests/data/drs-avro/PROVENANCE.md).
"""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
from functools import partial
from pathlib import Path

import fastavro
import pytest
from archive_helpers import Record, pipeline_config, write_parquet
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay.compaction import latest_rows
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.formats import dataworks_json, decoder, drs_json, dts_shareplex_json
from cdcreplay.formats.envelopes.drs_record import split_table_name
from cdcreplay.formats.envelopes.drs_variants import VARIANTS
from cdcreplay.formats.python_rows import DecodeError, RawRecord, safe_decode
from cdcreplay.formats.wire.avro_wire import fingerprint
from cdcreplay.formats.wire.from_json_in_python import text
from cdcreplay.formats.wire.json_reader import AS_SPARK_READ, read_object
from cdcreplay.warehouse import read_table
from cdcreplay_lab.simulator import simulate, write_archive
from cdcreplay_lab.simulator.encode_drs_avro import DRS_RECORD_SCHEMA
from cdcreplay_lab.simulator.encode_drs_json import encode_drs_json, pipeline_settings

pytestmark = pytest.mark.timeout(900)

SAMPLES = Path(__file__).parent / "data" / "conformance" / "vendor-doc-samples"
MYSQL_SAMPLE = SAMPLES / "huawei-drs-json-mysql" / "01-update.json"
GAUSSDB_SAMPLE = SAMPLES / "huawei-drs-json-gaussdb-pg-oracle-sqlserver" / "01-update-gaussdb.json"
PROJECT_SCHEMA = Path(__file__).parent / "data" / "drs-avro" / "drs-record.project.avsc"
COLUMNS = (
    "offset",
    "row_index",
    "record_kind",
    "op",
    "table_id",
    "key",
    "after",
    "before",
    "column_types",
    "position",
    "event_time",
    "reason",
    "detail",
    "control_kind",
)


def pipeline(fmt: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(name="drs", format=fmt, archive={"path": "unused"}, tables=tables or {}, options=options)


def decoded_frame(spark, tmp_path: Path, values: list, cfg: PipelineConfig, name: str = "records"):
    """Values (JSON documents, text or bytes) as records at offsets 0.. of a Parquet archive -> the format's decoder."""
    records = [
        Record("drs", 0, offset, json.dumps(v, ensure_ascii=False) if isinstance(v, dict) else v)
        for offset, v in enumerate(values)
    ]
    parquet = write_parquet(records, tmp_path / f"{name}.parquet")
    return decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)


def decode(spark, tmp_path: Path, values: list, cfg: PipelineConfig, name: str = "records") -> list[dict]:
    """The decoded rows, in record and row order."""
    frame = decoded_frame(spark, tmp_path, values, cfg, name)
    return [r.asDict() for r in frame.select(*COLUMNS).orderBy("offset", "row_index", "op").collect()]


def sample(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def java_bytes(text: str) -> str:
    """The base64 of a Java byte-list string, computed here independently of the decoder."""
    return base64.b64encode(bytes(int(b) & 0xFF for b in json.loads(text))).decode("ascii")


# --- DRS JSON for MySQL: the vendor's sample ------------------------------------------------------------------------

SAMPLE_TYPES = {
    "c1": "string",
    "c2": "binary",
    "c3": "int",
    "c4": "timestamp_ntz",
    "c5": "timestamp",
    "c6": "string",
    "c7": "float",
    "c8": "double",
    "c9": "string",  # mysqlType "decimal" carries no precision: exact text
    "c10": "string",
    "c11": "binary",
    "c12": "binary",
    "c13": "string",
    "c14": "binary",
    "id": "int",
}


def expected_sample_image(row: dict) -> dict:
    image = dict(row)
    for column in ("c2", "c11", "c12", "c14"):
        image[column] = java_bytes(row[column])
    image["c5"] = "2021-06-25 09:51:53.201000"  # 1624614713.201 s after the epoch, UTC
    return image


def test_mysql_sample_update_moves_id_103_to_104(spark, tmp_path):
    """The vendor's UPDATE changes `id` 103 -> 104 (and c13): a delete of 103, then the update of 104."""
    message = sample(MYSQL_SAMPLE)
    rows = decode(spark, tmp_path, [message], pipeline("drs-json-mysql"))
    old = expected_sample_image(message["old"][0])
    new = expected_sample_image(message["data"][0])
    common = {
        "offset": 0,
        "row_index": 0,
        "record_kind": "changelog",
        "table_id": "test01.test ",  # the table name keeps its trailing space
        "column_types": SAMPLE_TYPES,
        "position": [27677],
        "reason": None,
        "detail": None,
        "control_kind": None,
    }
    event_time = rows[0]["event_time"]
    assert event_time.strftime("%Y-%m-%d %H:%M:%S") == "2021-06-25 09:51:53"  # es 1624614713000 ms, UTC
    assert rows == [
        {**common, "op": "delete", "key": '["103"]', "after": None, "before": old, "event_time": event_time},
        {**common, "op": "update", "key": '["104"]', "after": new, "before": old, "event_time": event_time},
    ]
    assert old["c12"].startswith("amdvamdvaWRzamdvam9zb2c5") and new["c11"] == "" and new["c2"] == ""


def test_mysql_sample_values_read_back_as_their_types(spark, tmp_path):
    decoded = decoded_frame(spark, tmp_path, [sample(MYSQL_SAMPLE)], pipeline("drs-json-mysql"))
    changes = decoded.where("record_kind = 'changelog'").drop("timestamp", "record_kind")
    state = latest_rows(changes).collect()
    assert sorted((r.key, r.deleted) for r in state) == [('["103"]', True), ('["104"]', False)]
    after = F.col("after")
    typed = (
        latest_rows(changes)
        .where("not deleted")
        .select(
            after["c8"].cast("double").alias("c8"),
            after["c7"].cast("float").alias("c7"),
            after["c5"].cast("timestamp").alias("c5"),
            after["c4"].cast("timestamp_ntz").alias("c4"),
            F.unbase64(after["c12"]).alias("c12"),
            F.unbase64(after["c11"]).alias("c11"),
            after["c9"].alias("c9"),
        )
        .first()
    )
    assert typed.c8 == 12510357.0 and typed.c7 == 10357.0 and typed.c9 == "9874510357"
    assert typed.c5.strftime("%Y-%m-%d %H:%M:%S.%f") == "2021-06-25 09:51:53.201000"
    assert typed.c4.strftime("%Y-%m-%d %H:%M:%S") == "2021-06-25 17:51:53"
    assert bytes(typed.c12) == bytes(json.loads(sample(MYSQL_SAMPLE)["data"][0]["c12"])) and bytes(typed.c11) == b""


def _row_message(kind: str, data, old, message_id: int, mysql_types=None, table="t", sql="") -> dict:
    return {
        "mysqlType": mysql_types or {"id": "int", "v": "varchar", "b": "varbinary", "ts": "timestamp"},
        "id": message_id,
        "es": 1700000000000 + message_id,
        "ts": 1700000000100 + message_id,
        "database": "db",
        "table": table,
        "type": kind,
        "isDdl": kind in ("DDL", "INIT_DDL"),
        "sql": sql,
        "sqlType": {"id": 4, "v": 12, "b": -3, "ts": 93},
        "data": data,
        "old": old,
        "pkNames": ["id"],
    }


def test_mysql_snapshot_ddl_truncate_delete_and_multi_row_key_shift(spark, tmp_path):
    row = {"id": "1", "v": "x", "b": "[-1, 0, 127, -128]", "ts": "0.000001"}
    messages = [
        _row_message("INIT", [row, {**row, "id": "2", "v": "y"}], None, 1),
        _row_message("INIT_DDL", None, None, 2, sql="CREATE TABLE t (id int)"),
        # UPDATE t SET id = id + 1: row 1 -> 2 and row 2 -> 3 in one message, executed in array order.
        _row_message(
            "UPDATE",
            [{**row, "id": "3", "v": "y"}, {**row, "id": "2"}],
            [{**row, "id": "2", "v": "y"}, row],
            3,
        ),
        _row_message("DELETE", None, [{**row, "id": "3", "v": "y"}], 4),
        _row_message("DDL", None, None, 5, sql="ALTER TABLE t ADD c int"),
        _row_message("DDL", None, None, 6, sql="  TRUNCATE TABLE t"),
    ]
    rows = decode(spark, tmp_path, messages, pipeline("drs-json-mysql"))
    summary = [(r["offset"], r["row_index"], r["record_kind"], r["op"], r["key"], r["control_kind"]) for r in rows]
    assert summary == [
        (0, 0, "changelog", "snapshot", '["1"]', None),
        (0, 1, "changelog", "snapshot", '["2"]', None),
        (1, 0, "control", None, None, "ddl"),
        (2, 0, "changelog", "delete", '["2"]', None),
        (2, 0, "changelog", "update", '["3"]', None),
        (2, 1, "changelog", "delete", '["1"]', None),
        (2, 1, "changelog", "update", '["2"]', None),
        (3, 0, "changelog", "delete", '["3"]', None),
        (4, 0, "control", None, None, "ddl"),
        (5, 0, "changelog", "truncate", None, None),
    ]
    assert rows[0]["after"] == {"id": "1", "v": "x", "b": "/wB/gA==", "ts": "1970-01-01 00:00:00.000001"}
    assert [rows[2]["detail"], rows[8]["detail"], rows[3]["detail"]] == [
        "CREATE TABLE t (id int)",
        "ALTER TABLE t ADD c int",
        None,
    ]
    assert rows[3]["before"] == {**rows[0]["after"], "id": "2", "v": "y"}  # the key-moving row's full old image


def test_mysql_error_paths_are_quarantined_with_their_reason(spark, tmp_path):
    row = {"id": "1", "v": "x", "b": "[]", "ts": "1.5"}
    messages = [
        _row_message("DELETE", None, None, 1),  # JSON: the deleted row belongs in `old`
        _row_message("DELETE", [row], None, 2),  # ... and `data` is not relied on
        _row_message("INSERT", [{**row, "b": "[128, 1]"}], None, 3),  # a Java byte is -128..127
        _row_message("INSERT", [{**row, "b": "106, 103"}], None, 4),
        _row_message("INSERT", [{**row, "ts": "2021-06-25 17:51:53"}], None, 5),  # JSON prints epoch seconds
        _row_message("INSERT", [{**row, "ts": "1.1234567"}], None, 6),  # more than microseconds
        _row_message("MERGE", [row], None, 7),
        _row_message("INSERT", [], None, 8),
        "{not json",
        {**_row_message("INSERT", [row], None, 10), "pkNames": None},
        {**_row_message("INSERT", [row], None, 11), "table": ""},
    ]
    rows = decode(spark, tmp_path, messages, pipeline("drs-json-mysql"))
    assert all(r["record_kind"] == "quarantine" for r in rows), rows
    got = [(r["offset"], r["reason"], r["detail"]) for r in rows]
    assert got[:8] == [
        (0, "missing_image", "DELETE without the deleted row: `old` is null or empty"),
        (1, "missing_image", "DELETE without the deleted row: `old` is null or empty"),
        (2, "bad_value", "value cannot be decoded with its declared type in column(s): b"),
        (3, "bad_value", "value cannot be decoded with its declared type in column(s): b"),
        (4, "bad_value", "value cannot be decoded with its declared type in column(s): ts"),
        (5, "bad_value", "value cannot be decoded with its declared type in column(s): ts"),
        (6, "unknown_op", "type 'MERGE' is not INSERT, UPDATE, DELETE, INIT, INIT_DDL or DDL"),
        (7, "missing_image", "type INSERT message without rows in `data`"),
    ]
    assert got[8][:2] == (8, "not_json") and got[8][2].startswith("payload is not a JSON object: {not json")
    assert got[9][:2] == (9, "missing_key") and "declare tables.<table>.primary_key" in got[9][2]
    assert got[10] == (10, "missing_table", "the message names no table")


def test_mysql_type_from_sql_type_when_mysql_type_lacks_the_column(spark, tmp_path):
    message = _row_message("INSERT", [{"id": "7", "v": "x", "b": "[1]", "ts": "1"}], None, 1, mysql_types={"id": "int"})
    rows = decode(spark, tmp_path, [message], pipeline("drs-json-mysql"))
    # sqlType: v 12 VARCHAR -> string, b -3 VARBINARY -> binary (byte list), ts 93 -> string (DRS bends 93/94)
    assert rows[0]["column_types"] == {"id": "int", "v": "string", "b": "binary", "ts": "string"}
    assert rows[0]["after"] == {"id": "7", "v": "x", "b": "AQ==", "ts": "1"}


# --- DRS JSON-C ------------------------------------------------------------------------------------------------------


def _json_c(message: dict) -> dict:
    """The vendor's MySQL sample as JSON-C would carry it: TIMESTAMP as wall-clock text (seed 002, JSON-C section)."""
    converted = copy.deepcopy(message)
    for image in converted["data"] + converted["old"]:
        image["c5"] = "2021-06-25 17:51:53.201"
    return converted


def test_json_c_delete_row_in_data_and_timestamps_as_wall_clock(spark, tmp_path):
    update = _json_c(sample(MYSQL_SAMPLE))
    delete = {**copy.deepcopy(update), "type": "DELETE", "id": 27678, "data": update["data"], "old": None}
    no_row = {**copy.deepcopy(delete), "id": 27679, "data": None, "old": update["data"]}
    rows = decode(spark, tmp_path, [update, delete, no_row], pipeline("drs-json-c", timestamp_zone="Asia/Shanghai"))
    new = expected_sample_image(sample(MYSQL_SAMPLE)["data"][0])
    assert [(r["offset"], r["record_kind"], r["op"], r["key"]) for r in rows] == [
        (0, "changelog", "delete", '["103"]'),
        (0, "changelog", "update", '["104"]'),
        (1, "changelog", "delete", '["104"]'),
        (2, "quarantine", None, None),
    ]
    # 17:51:53.201 in Asia/Shanghai is 09:51:53.201 UTC: the same instant the JSON format's epoch seconds name.
    assert rows[1]["after"] == new and rows[2]["before"] == new and rows[2]["after"] is None
    assert (rows[3]["reason"], rows[3]["detail"]) == (
        "missing_image",
        "DELETE without the deleted row: `data` is null or empty",
    )
    utc = decode(spark, tmp_path, [update], pipeline("drs-json-c"), name="utc")
    assert utc[1]["after"]["c5"] == "2021-06-25 17:51:53.201000"  # default zone UTC


def test_json_c_unknown_time_zone_stops_before_reading(spark, tmp_path):
    with pytest.raises(ConfigError, match=r"options\.timestamp_zone 'Mars/Base' is not a time zone; use a region like"):
        decode(spark, tmp_path, [sample(MYSQL_SAMPLE)], pipeline("drs-json-c", timestamp_zone="Mars/Base"))


# --- DRS JSON for Oracle / PostgreSQL / GaussDB / SQL Server --------------------------------------------------------

GAUSS_TYPES = {
    "timestamp_column": "timestamp_ntz",
    "tstzrange_column": "string",
    "int4range_column": "string",
    "char_column": "string",
    "jsonb_column": "string",
    "boolean_column": "boolean",
    "bit_column": "string",
    "smallint_column": "smallint",
    "bytea_column": "binary",
}


def test_gaussdb_sample_without_a_key_is_quarantined(spark, tmp_path):
    rows = decode(spark, tmp_path, [sample(GAUSSDB_SAMPLE)], pipeline("drs-json-rdbms"))
    assert [(r["record_kind"], r["reason"], r["op"], r["table_id"]) for r in rows] == [
        ("quarantine", "missing_key", "update", "database01.schema01.table01")
    ]
    assert "declare tables.<table>.primary_key" in rows[0]["detail"]


def test_gaussdb_sample_with_a_configured_key(spark, tmp_path):
    message = sample(GAUSSDB_SAMPLE)
    cfg = pipeline("drs-json-rdbms", {"database01.schema01.table01": {"primary_key": ["smallint_column"]}})
    rows = decode(spark, tmp_path, [message], cfg)
    bytea = base64.b64encode(b"bytea_data").decode("ascii")
    assert len(rows) == 1
    row = rows[0]
    assert (row["record_kind"], row["op"], row["table_id"], row["key"], row["position"]) == (
        "changelog",
        "update",
        "database01.schema01.table01",
        '["12"]',
        [332],
    )
    assert row["column_types"] == GAUSS_TYPES
    assert row["after"] == {**message["data"][0], "bytea_column": bytea}
    assert row["before"] == {**message["old"][0], "bytea_column": bytea}
    assert row["after"]["tstzrange_column"] == '("2010-01-01 14:30:00+08","2010-01-01 15:30:00+08")'


def test_rdbms_values_and_errors(spark, tmp_path):
    def message(message_id: int, row: dict) -> dict:
        return {
            "columnType": {"id": "integer", "at": "timestamp with time zone", "raw": "bytea", "ok": "bool"},
            "dbType": "PostgreSQL",
            "schema": "public",
            "opType": "INSERT",
            "id": message_id,
            "es": 1639626187000,
            "ts": 1639629261915,
            "database": "db",
            "table": "t",
            "type": None,  # `opType` alone names the operation
            "isDdl": False,
            "sql": "",
            "sqlType": {},
            "data": [row],
            "old": None,
            "pkNames": ["id"],
        }

    good = {"id": "1", "at": "2010-01-01 14:30:00+08", "raw": "\\x0aff", "ok": "t"}
    oracle = {**message(4, {"ID": "5", "N": "12.5"}), "columnType": {}, "dbType": "Oracle", "database": ""}
    oracle["pkNames"] = ["ID"]
    rows = decode(
        spark,
        tmp_path,
        [message(1, good), message(2, {**good, "raw": "abc"}), message(3, {**good, "at": "yesterday"}), oracle],
        pipeline("drs-json-rdbms", {"public.t": {"column_types": {"N": "decimal(10,2)"}}}),
    )
    assert rows[0]["after"] == {"id": "1", "at": "2010-01-01 06:30:00.000000", "raw": "Cv8=", "ok": "t"}
    assert rows[0]["column_types"] == {"id": "int", "at": "timestamp", "raw": "binary", "ok": "boolean"}
    assert [(r["reason"], r["detail"]) for r in rows[1:3]] == [
        ("bad_value", "value cannot be decoded with its declared type in column(s): raw"),
        ("bad_value", "value cannot be decoded with its declared type in column(s): at"),
    ]
    # Oracle: no database part, no columnType; the config types the column.
    assert (rows[3]["table_id"], rows[3]["column_types"], rows[3]["after"]) == (
        "public.t",
        {"N": "decimal(10,2)"},
        {"ID": "5", "N": "12.5"},
    )


def test_postgresql_source_reproduces_the_truth(spark, tmp_path):
    """PostgreSQL-shaped DRS JSON (table ids `shop.public.*`, types from columnType, `es` = the previous
    transaction's commit time, order_items without pkNames) through the real job equals the true final state."""
    history = simulate(seed=5, events=900)
    write_archive(encode_drs_json(history, "postgresql"), tmp_path / "archive")
    settings = pipeline_settings(history.tables, "postgresql")
    config = pipeline_config(tmp_path, "pg", "drs-json-rdbms", tmp_path / "archive", settings=settings)
    assert replay_main(["--config", str(config), "--run-id", "full", "--full-rebuild"]) == EXIT_OK
    summary = json.loads((tmp_path / "warehouse" / "pg" / "runs" / "full" / "summary.json").read_text())
    assert summary["decoded"]["quarantined"] == 0
    for spec in history.tables.values():
        frame = read_table(spark, str(tmp_path / "warehouse"), "pg", f"shop.public.{spec.name}")
        types = dict(frame.dtypes)
        assert {c.name: types[c.name] for c in spec.columns} == {c.name: c.spark_type for c in spec.columns}
        rows = sorted(
            (r.asDict() for r in frame.select(*spec.column_names).collect()),
            key=lambda row: tuple(row[k] for k in spec.primary_key),
        )
        assert rows == history.final_state(spec.table_id), spec.table_id


# --- DRS JSON: what is not JSON, what is not Unicode, and the reader's limits ----------------------------------------

NOT_UNICODE = "the decoded field {} escapes a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text"


def test_single_quotes_are_not_json_and_a_lone_surrogate_is_not_unicode(spark, tmp_path):
    """Jackson read single-quoted strings and Spark held a lone UTF-16 surrogate escape as "?"; DRS JSON keeps neither,
    like every JSON format: a single-quoted message is not JSON, and a row that would hold a lone surrogate (a value,
    a column name, a before image) is quarantined ``not_utf8`` naming the field, as canal-json's is. A surrogate in a
    field DRS does not read changes nothing."""
    row = {"id": "1", "v": "x", "b": "[]", "ts": "1.5"}
    values = [
        json.dumps(_row_message("INSERT", [row], None, 1)).replace('"', "'"),
        json.dumps(_row_message("INSERT", [{**row, "v": "x\ud800"}], None, 2)),
        json.dumps(_row_message("UPDATE", [row], [{**row, "v": "\udfff"}], 3)),
        json.dumps(_row_message("INSERT", [{**row, "w\ud800": "y"}], None, 4)),
        json.dumps({**_row_message("INSERT", [row], None, 5), "extra": "\ud800"}),
    ]
    assert all(value.isascii() for value in values)  # JSON escapes (\ud800), valid UTF-8
    records = [Record("drs.t", 3, 40 + index, value) for index, value in enumerate(values)]
    parquet = write_parquet(records, tmp_path / "records.parquet")
    cfg = pipeline("drs-json-mysql")
    frame = decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)
    got = [
        (r.topic, r.partition, r.offset, r.record_kind, r.reason, r.detail, r.raw_value)
        for r in frame.orderBy("offset").collect()
    ]
    quoted = got[0]
    assert quoted[:5] == ("drs.t", 3, 40, "quarantine", "not_json")
    assert quoted[5].startswith("payload is not a JSON object: {'mysqlType': {'id': 'int'")
    assert quoted[6] == values[0].encode()
    assert [row[:6] for row in got[1:]] == [
        ("drs.t", 3, 41, "quarantine", "not_utf8", NOT_UNICODE.format("after")),
        ("drs.t", 3, 42, "quarantine", "not_utf8", NOT_UNICODE.format("before")),
        ("drs.t", 3, 43, "quarantine", "not_utf8", NOT_UNICODE.format("after")),
        ("drs.t", 3, 44, "changelog", None, None),
    ]


def test_the_json_reader_keeps_jacksons_limits():
    """As Spark 4.2's from_json reads (checked there): a number may have 1000 digits, whatever its sign, point and
    exponent add, but not 1001; nesting counts within the object read, not in text after it."""

    def read(value: str, after: str = "") -> str:
        return text(read_object(('{"v": ' + value + "}" + after).encode(), AS_SPARK_READ)["v"])

    assert read("-1." + "0" * 998 + "1") == "-1.0"  # 1000 digits in 1002 characters
    assert read("-" + "1" * 1000)[:4] == "-111"
    deep = "[" * 999 + "1" + "]" * 999  # in the object: 1000 levels
    assert read(deep, " " + "[" * 1001) == deep  # what follows the object is not read
    for too_long in ("1." + "0" * 999 + "1", "1" * 1001, "[" + deep + "]"):
        with pytest.raises(DecodeError) as error:
            read(too_long)
        assert error.value.reason == "not_json"


@pytest.mark.parametrize(
    ("decode_record", "payload"),
    [
        (
            lambda record: drs_json.decode_record(VARIANTS["drs-json-mysql"], "UTC", {}, {}, record),
            '{"type": "INSERT", "table": "t", "data": {"id": "1"}}',  # data: an array of rows
        ),
        (partial(dts_shareplex_json.decode_record, {}), '{"meta": {"op": "I"}, "data": ["1"]}'),  # data: an object
        (partial(dataworks_json.decode_record, ({}, {}, "UTC"), None, None), '{"payload": {"op": 7, "after": 1}}'),
    ],
    ids=["drs-json", "dts-shareplex-json", "dataworks-json"],
)
def test_a_field_of_another_json_type_makes_the_message_not_json(decode_record, payload):
    """from_json could not read such a message: it is quarantined not_json, with the start of the payload."""
    record = RawRecord("t", 0, 5, None, None, payload.encode(), ())
    [entry] = safe_decode(decode_record, record)
    assert (entry["reason"], entry["detail"]) == ("not_json", f"payload is not a JSON object: {payload}")


# --- DRS Avro (project-written schema) ------------------------------------------------------------------------------


def test_the_project_schema_file_is_the_simulators():
    assert json.loads(PROJECT_SCHEMA.read_text(encoding="utf-8")) == DRS_RECORD_SCHEMA
    assert "NOT the vendor's schema" in DRS_RECORD_SCHEMA["doc"]


def _avro_record(operation: str, seqno: int, before=None, after=None, table='"shop"."t"', names=("id", "v")) -> dict:
    def image(values):
        return None if values is None else [None if v is None else {"value": v} for v in values]

    return {
        "version": "1.0",
        "seqno": seqno,
        "shardId": "0",
        "eventid": str(seqno),
        "updateTimestamp": 1700000000000 + seqno,
        "tableName": table,
        "operation": operation,
        "columnCount": len(names),
        "fields": [{"name": n} for n in names],
        "beforeImages": image(before),
        "afterImages": image(after),
    }


def _avro_body(record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(copy.deepcopy(DRS_RECORD_SCHEMA)), record)
    return out.getvalue()


def _single_object(record: dict) -> bytes:
    parsed = fastavro.parse_schema(copy.deepcopy(DRS_RECORD_SCHEMA))
    return b"\xc3\x01" + fingerprint(parsed) + _avro_body(record)


AVRO_TABLES = {"shop.t": {"primary_key": ["id"], "column_types": {"id": "int"}}}


def test_avro_framings_are_recognised_by_their_first_bytes(spark, tmp_path):
    record = _avro_record("INSERT", 7, after=["1", "Zoë"])
    body = _avro_body(record)
    confluent = b"\x00" + struct.pack(">I", 42) + body
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "42.avsc").write_text(PROJECT_SCHEMA.read_text(encoding="utf-8"), encoding="utf-8")
    schema = str(PROJECT_SCHEMA)
    cases = [
        ([body, _single_object(record)], {"writer_schema": schema}),  # auto: raw, single-object
        ([confluent], {"writer_schema": schema, "framing": "confluent"}),  # the configured schema, any id
        ([confluent, _single_object(record)], {"writer_schema": schema, "registry_dir": str(registry)}),  # auto
    ]
    for index, (values, options) in enumerate(cases):
        rows = decode(spark, tmp_path, values, pipeline("drs-avro", AVRO_TABLES, **options), name=f"f{index}")
        assert [(r["record_kind"], r["op"], r["table_id"], r["key"], r["after"]) for r in rows] == [
            ("changelog", "insert", "shop.t", '["1"]', {"id": "1", "v": "Zoë"})
        ] * len(values), options
        assert rows[0]["position"] == [7] and rows[0]["column_types"] == {"id": "int"}


def test_avro_record_mapping_and_error_paths(spark, tmp_path):
    values = [
        _single_object(_avro_record("INIT", 1, after=["1", "a"])),
        _single_object(_avro_record("UPDATE", 2, before=["1", "a"], after=["2", None])),  # the key moves 1 -> 2
        _single_object(_avro_record("DELETE", 3, before=["2", None])),
        _single_object(_avro_record("DDL", 4, names=())),
        _single_object(_avro_record("COMMIT", 5, names=())),
        _single_object(_avro_record("DELETE", 6)),  # no beforeImages
        _single_object(_avro_record("MERGE", 7, after=["1", "a"])),
        _single_object({**_avro_record("INSERT", 8, after=["1", "a"]), "columnCount": 3}),
        _single_object(_avro_record("INSERT", 9, after=["1"], names=("id", "v"))),
        _single_object(_avro_record("INSERT", 10, after=["1", "a"]))[:25],  # truncated
        b"\xc3\x01" + b"\x00" * 8 + _avro_body(_avro_record("INSERT", 11, after=["1", "a"])),  # unknown fingerprint
        _single_object(_avro_record("INSERT", 12, after=["1", "a"], table='"shop"."other"')),  # no key configured
    ]
    cfg = pipeline("drs-avro", AVRO_TABLES, writer_schema=str(PROJECT_SCHEMA), framing="single-object")
    rows = decode(spark, tmp_path, values, cfg)
    got = [(r["offset"], r["record_kind"], r["op"], r["control_kind"], r["reason"], r["key"]) for r in rows]
    assert got == [
        (0, "changelog", "snapshot", None, None, '["1"]'),
        (1, "changelog", "delete", None, None, '["1"]'),
        (1, "changelog", "update", None, None, '["2"]'),
        (2, "changelog", "delete", None, None, '["2"]'),
        (3, "control", None, "ddl", None, None),
        (4, "control", None, "transaction", None, None),
        (5, "quarantine", None, None, "missing_image", None),
        (6, "quarantine", None, None, "unknown_op", None),
        (7, "quarantine", None, None, "bad_avro", None),
        (8, "quarantine", None, None, "bad_avro", None),
        (9, "quarantine", None, None, "bad_avro", None),
        (10, "quarantine", None, None, "unknown_schema", None),
        (11, "quarantine", "insert", None, "missing_key", None),
    ]
    assert rows[2]["after"] == {"id": "2", "v": None} and rows[2]["before"] == {"id": "1", "v": "a"}
    details = {r["offset"]: r["detail"] for r in rows if r["record_kind"] == "quarantine"}
    assert details[5] == "DELETE without the deleted row (beforeImages is empty)"
    assert details[6] == "operation 'MERGE' is not INSERT, UPDATE, DELETE, INIT or DDL"
    assert details[7] == "columnCount 3 but 2 fields"
    assert details[8] == "afterImages has 1 values for 2 fields"
    assert details[9].startswith("single-object Avro does not decode with its writer schema")
    assert details[10] == "no known schema has the fingerprint 0000000000000000; configure the writer schema"
    assert rows[-1]["reason"] == "missing_key" and "shop.other" in details[11]
    no_schema = decode(spark, tmp_path, values[:1], pipeline("drs-avro", AVRO_TABLES, framing="raw"), name="none")
    assert (no_schema[0]["reason"], no_schema[0]["detail"]) == (
        "unknown_schema",
        "raw Avro needs a writer schema; set it in the pipeline options",
    )


def test_avro_table_names():
    assert split_table_name('"shop"."customers"') == ("shop", None, "customers")
    assert split_table_name('"shop"."a.b"') == ("shop", None, "a.b")
    assert split_table_name("db.sch.t") == ("db", "sch", "t")
    assert split_table_name('"we""ird"') == (None, None, 'we"ird')
    with pytest.raises(ValueError, match="unclosed quote"):
        split_table_name('"shop.t')
    with pytest.raises(ValueError, match=r"is not table, db\.table or db\.schema\.table"):
        split_table_name("a..b")


def test_a_row_count_the_message_does_not_hold_is_quarantined_or_applied_without_a_before_image(spark, tmp_path):
    """Two shapes that crashed the Spark-expression decoder or left an empty detail: an RDBMS message naming its op
    only in `opType` with no rows, and an UPDATE whose `old` holds fewer before images than `data` has rows."""
    no_rows = {**_row_message("UPDATE", None, None, 1), "type": None, "opType": "UPDATE"}
    row = {"id": "1", "v": "x", "b": "[]", "ts": "1.5"}
    short_old = _row_message("UPDATE", [row, {**row, "id": "2"}], [{**row, "v": "old"}], 2)
    rows = decode(spark, tmp_path, [no_rows], pipeline("drs-json-rdbms"), name="rdbms")
    assert [(r["record_kind"], r["reason"], r["detail"]) for r in rows] == [
        ("quarantine", "missing_image", "type UPDATE message without rows in `data`")
    ]
    rows = decode(spark, tmp_path, [short_old], pipeline("drs-json-mysql"), name="mysql")
    assert [(r["record_kind"], r["op"], r["key"], (r["before"] or {}).get("v")) for r in rows] == [
        ("changelog", "update", '["1"]', "old"),
        ("changelog", "update", '["2"]', None),
    ]
