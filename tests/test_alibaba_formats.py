"""Alibaba's JSON formats (issue 3): DTS Canal JSON's legacy layout, DTS Shareplex JSON and DataWorks Kafka JSON.

Every vendor doc sample decodes to the rows of its golden file (tests/data/conformance/alibaba-expected/, whole rows:
op, table, key, images, declared types, position, event time, routing, reason and message). Every bad message of
each format lands in quarantine with its reason code while the records around it decode. The simulator's truth is
checked by tests/test_truth.py (registered encoders) and, for the variants a registry entry does not select (legacy
Canal layout, Shareplex's long op spelling, DataWorks' one-message updates), by tests/test_alibaba_truth.py.
"""

from __future__ import annotations

import json
import re

import pytest
from alibaba_helpers import MIO_LOG, dataworks, decode_values, golden, pipeline, rows, sample
from archive_helpers import Record
from pyspark.sql import functions as F

from cdcreplay.compaction import latest_rows
from cdcreplay.config import ConfigError
from cdcreplay.formats.canal_json import LEGACY_DELETE_NOTE

NOT_UNICODE = "the decoded field {} escapes a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text"
CANAL = "alibaba-dts-canal-json"
SHAREPLEX = "alibaba-dts-shareplex-json"
DATAWORKS = "alibaba-dataworks-kafka-json"


def outcomes(decoded) -> list[tuple]:
    """(topic, partition, offset, record_kind, reason, detail) per decoded row, in record order."""
    columns = ("topic", "partition", "offset", "record_kind", "reason", "detail")
    return [tuple(r) for r in decoded.select(*columns).orderBy("offset", "row_index", "record_kind").collect()]


def live_state(decoded) -> dict:
    """Compacted latest state: {(table_id, key): after image} of the live keys."""
    changes = decoded.where(F.col("record_kind") == "changelog").drop("timestamp", "record_kind")
    return {(r.table_id, r.key): dict(r.after) for r in latest_rows(changes).where(~F.col("deleted")).collect()}


def only(found: list[dict], **match) -> dict:
    chosen = [row for row in found if all(row[k] == v for k, v in match.items())]
    assert len(chosen) == 1, (match, found)
    return chosen[0]


# --- DTS Canal JSON: the legacy layout -------------------------------------------------------------------------------

CANAL_SAMPLES = [
    "01-delete-legacy-instance-before-2022-03-20.json",
    "02-delete-instance-after-2022-03-20.json",
    "03-ddl.json",
]


def test_canal_doc_samples_without_the_layout_option_read_the_legacy_delete_and_say_so(spark, tmp_path):
    decoded = decode_values(spark, tmp_path, [sample(CANAL, n) for n in CANAL_SAMPLES], pipeline("canal-json"))
    found = rows(decoded)
    assert found == golden("canal-json-doc-samples-layout-undeclared.jsonl")
    note = only(found, control_kind="note")
    assert note["detail"] == LEGACY_DELETE_NOTE and note["offset"] == 0


def test_canal_legacy_shaped_delete_is_quarantined_when_the_source_declares_the_open_source_layout(spark, tmp_path):
    decoded = decode_values(
        spark, tmp_path, [sample(CANAL, CANAL_SAMPLES[0])], pipeline("canal-json", legacy_swapped=False)
    )
    (row,) = rows(decoded)
    assert (row["record_kind"], row["reason"]) == ("quarantine", "missing_image")
    assert row["detail"] == (
        "type DELETE message without rows in data (its row is in `old`: the legacy DTS layout of instances created "
        "before 2022-03-20; set options.legacy_swapped: true for this source)"
    )


def _canal(kind: str, data, old) -> str:
    return json.dumps(
        {
            "data": data,
            "old": old,
            "database": "shop",
            "table": "t",
            "type": kind,
            "isDdl": False,
            "pkNames": ["id"],
            "mysqlType": {"id": "int", "name": "varchar(20)", "qty": "int"},
            "es": 1600161894000,
            "id": 7,
            "sql": "",
        }
    )


def test_canal_legacy_layout_reads_updates_swapped(spark, tmp_path):
    values = [
        # Legacy INSERT: where the row sits is undocumented; `data`, else `old`.
        _canal("INSERT", None, [{"id": "1", "name": "a", "qty": "1"}]),
        # Legacy UPDATE: `old` is the after image (all columns), `data` the before image.
        _canal("UPDATE", [{"id": "1", "name": "a", "qty": "1"}], [{"id": "1", "name": "b", "qty": "1"}]),
        _canal("INSERT", [{"id": "2", "name": "c", "qty": "5"}], None),
        _canal("DELETE", None, [{"id": "2", "name": "c", "qty": "5"}]),
    ]
    decoded = decode_values(spark, tmp_path, values, pipeline("canal-json", legacy_swapped=True))
    found = rows(decoded)
    assert [(r["offset"], r["record_kind"], r["op"]) for r in found] == [
        (0, "changelog", "insert"),
        (1, "changelog", "update"),
        (2, "changelog", "insert"),
        (3, "changelog", "delete"),
    ]
    update = found[1]
    assert update["after"] == {"id": "1", "name": "b", "qty": "1"}
    assert update["before"] == {"id": "1", "name": "a", "qty": "1"}
    assert found[3]["before"] == {"id": "2", "name": "c", "qty": "5"} and found[3]["key"] == '["2"]'
    assert live_state(decoded) == {("shop.t", '["1"]'): {"id": "1", "name": "b", "qty": "1"}}
    assert not [r for r in found if r["control_kind"] == "note"], "a declared layout needs no note"


# --- DTS Shareplex JSON ----------------------------------------------------------------------------------------------

T_TYPES = {"ID": "bigint", "A": "string", "B": "decimal(5,2)", "C": "date"}
SHOP_T = {"SHOP.T": {"primary_key": ["ID"], "column_types": T_TYPES}}


def shareplex(op: str, data=None, key=None, scn="100", seq=1, trans="7.0.1", table="SHOP.T", **meta) -> str:
    message = {
        "meta": {"time": "2024-01-02T03:04:05", "op": op, "scn": scn, "trans": trans, "seq": seq, "table": table}
        | meta,
        "data": data,
    }
    if key is not None:
        message["key"] = key
    return json.dumps(message)


def test_shareplex_doc_samples_decode_to_their_rows(spark, tmp_path):
    values = [sample(SHAREPLEX, n) for n in ("01-ins.json", "02-upd.json", "03-del.json")]
    found = rows(decode_values(spark, tmp_path, values, pipeline("dts-shareplex-json", MIO_LOG)))
    assert found == golden("dts-shareplex-json-doc-samples.jsonl")


def test_shareplex_update_merges_key_and_data_and_keeps_uncarried_columns(spark, tmp_path):
    values = [
        shareplex("INSERT", {"ID": "1", "A": "x", "B": "1.00", "C": "2024-01-02"}, scn="100"),
        shareplex("upd", {"A": "x2"}, {"ID": "1", "A": "x"}, scn="101"),
        shareplex("UPDATE BEFORE", {"ID": "1", "B": "1.00"}, scn="102", seq=1),
        shareplex("update_after", {"B": "2.50"}, {"ID": "1", "B": "1.00"}, scn="102", seq=2),
        shareplex("Ins", {"ID": "2", "A": None, "B": None, "C": None}, scn="103"),
        shareplex("UPD", {"A": "now set"}, {"ID": "2", "A": None}, scn="104"),
    ]
    decoded = decode_values(spark, tmp_path, values, pipeline("dts-shareplex-json", SHOP_T))
    found = rows(decoded)
    assert [(r["offset"], r["record_kind"], r["op"], r["control_kind"]) for r in found] == [
        (0, "changelog", "insert", None),
        (1, "changelog", "update", None),
        (2, "control", None, "update_before"),
        (3, "changelog", "update", None),
        (4, "changelog", "insert", None),
        (5, "changelog", "update", None),
    ]
    assert found[1]["after"] == {"ID": "1", "A": "x2"}  # the merge key <- data; B and C are not carried
    assert found[1]["before"] == {"ID": "1", "A": "x"}
    assert found[1]["column_types"] == T_TYPES
    assert found[3]["position"] == [102, 7, 0, 1, 2]
    # Columns the updates did not carry keep their stored values (never NULL); a present null stays NULL.
    assert live_state(decoded) == {
        ("SHOP.T", '["1"]'): {"ID": "1", "A": "x2", "B": "2.50", "C": "2024-01-02"},
        ("SHOP.T", '["2"]'): {"ID": "2", "A": "now set", "B": None, "C": None},
    }


def test_shareplex_orders_by_scn_as_a_number_then_transaction_then_seq(spark, tmp_path):
    values = [
        shareplex("upd", {"A": "scn 1000"}, {"ID": "1"}, scn="1000"),
        shareplex("upd", {"A": "scn 999"}, {"ID": "1"}, scn="999"),  # later offset, earlier change
        shareplex("upd", {"A": "seq 2"}, {"ID": "2"}, scn="5", seq=2),
        shareplex("upd", {"A": "seq 1"}, {"ID": "2"}, scn="5", seq=1),
        shareplex("upd", {"A": "trans 10"}, {"ID": "3"}, scn="5", trans="1.0.10"),
        shareplex("upd", {"A": "trans 9"}, {"ID": "3"}, scn="5", trans="1.0.9"),
    ]
    state = live_state(decode_values(spark, tmp_path, values, pipeline("dts-shareplex-json", SHOP_T)))
    assert {key: after["A"] for (_, key), after in state.items()} == {
        '["1"]': "scn 1000",
        '["2"]': "seq 2",
        '["3"]': "trans 10",
    }


def test_shareplex_truncate_empties_the_table_and_drop_column_is_logged(spark, tmp_path):
    values = [
        shareplex("ins", {"ID": "1", "A": "a", "B": "1.00", "C": None}, scn="10"),
        shareplex("ins", {"ID": "2", "A": "b", "B": "2.00", "C": None}, scn="11"),
        shareplex("TRUNCATE", None, scn="12"),
        shareplex("DROP COLUMN", {"COLUMN": "D"}, scn="13"),
        shareplex("ins", {"ID": "3", "A": "c", "B": "3.00", "C": None}, scn="14"),
    ]
    decoded = decode_values(spark, tmp_path, values, pipeline("dts-shareplex-json", SHOP_T))
    found = rows(decoded)
    truncate = [r for r in found if r["offset"] == 2]
    assert [(r["record_kind"], r["op"], r["control_kind"], r["table_id"]) for r in truncate] == [
        ("changelog", "truncate", None, "SHOP.T"),
        ("control", None, "truncate", "SHOP.T"),
    ]
    drop = only(found, offset=3)
    assert (drop["control_kind"], drop["detail"], drop["table_id"]) == ("ddl", 'DROP COLUMN {"COLUMN":"D"}', "SHOP.T")
    assert list(live_state(decoded)) == [("SHOP.T", '["3"]')]


def test_shareplex_update_of_a_key_column_moves_the_row(spark, tmp_path):
    moving = [
        shareplex("ins", {"ID": "1", "A": "a"}, scn="1"),
        shareplex("upd", {"ID": "2"}, {"ID": "1", "A": "a"}, scn="2"),
    ]
    two_columns = {"SHOP.T": {"primary_key": ["ID"], "column_types": {"ID": "bigint", "A": "string"}}}
    decoded = decode_values(spark, tmp_path, moving, pipeline("dts-shareplex-json", two_columns), "complete")
    moved = [r for r in rows(decoded) if r["offset"] == 1]
    assert [(r["op"], r["key"], r["row_index"]) for r in moved] == [("delete", '["1"]', 0), ("update", '["2"]', 0)]
    assert live_state(decoded) == {("SHOP.T", '["2"]'): {"ID": "2", "A": "a"}}

    # With more configured columns than the message carries, the new row cannot be written: quarantined, the old
    # key still deleted.
    decoded = decode_values(spark, tmp_path, moving, pipeline("dts-shareplex-json", SHOP_T), "partial")
    moved = [r for r in rows(decoded) if r["offset"] == 1]
    assert [(r["record_kind"], r["op"], r["reason"]) for r in moved] == [
        ("changelog", "delete", None),
        ("quarantine", None, "partial_key_change"),
    ]
    assert moved[1]["detail"] == (
        "update moves the row to a new key but carries only the columns A, ID; the old key is deleted, the new "
        "row's other values are not in the message (resync the table)"
    )
    assert live_state(decoded) == {}


SHAREPLEX_BAD = [
    (
        shareplex("MERGE", {"ID": "9"}),
        "unknown_op",
        "meta.op 'MERGE' is not one of ins, upd, del, INSERT, UPDATE, DELETE, UPDATE BEFORE, UPDATE AFTER, TRUNCATE, DROP COLUMN",
    ),
    (
        json.dumps({"data": {"ID": "9"}}),
        "unknown_op",
        "meta.op 'null' is not one of ins, upd, del, INSERT, UPDATE, DELETE, UPDATE BEFORE, UPDATE AFTER, TRUNCATE, DROP COLUMN",
    ),
    ('{"meta": {"op": "ins", "table": "SHOP.T"}, "data": {"ID": ', "not_json", None),
    (shareplex("del", None), "missing_image", "op del without data"),
    (shareplex("ins", None), "missing_image", "op ins without data"),
    (shareplex("upd", None, None), "missing_image", "op upd without data and key"),
    (
        shareplex("ins", {"ID": "1", "B": "1.234"}),
        "bad_value",
        "value would be rounded or truncated by its configured type in column(s): B",
    ),
    (
        shareplex("ins", {"ID": "1", "C": "2024-01-02 10:00:00"}),
        "bad_value",
        "value would be rounded or truncated by its configured type in column(s): C",
    ),
    (
        shareplex("ins", {"ID": "1", "B": "1234.5"}),
        "bad_value",
        "value would be rounded or truncated by its configured type in column(s): B",
    ),
    (shareplex("ins", {"ID": "x1"}), "bad_value", "value does not match its declared type in column(s): ID"),
    (shareplex("ins", {"ID": "1"}, table="SHOP.UNDECLARED"), "missing_key", None),
]


def test_shareplex_bad_messages_are_quarantined_with_their_reason(spark, tmp_path):
    good = shareplex("ins", {"ID": "5", "A": "fine", "B": "0.50", "C": "2024-01-02 00:00:00"}, scn="1")
    values = [good, *[value for value, _, _ in SHAREPLEX_BAD], good]
    found = rows(decode_values(spark, tmp_path, values, pipeline("dts-shareplex-json", SHOP_T)))
    assert [r["offset"] for r in found] == list(range(len(values)))
    assert found[0]["record_kind"] == found[-1]["record_kind"] == "changelog"
    for row, (_, reason, detail) in zip(found[1:-1], SHAREPLEX_BAD, strict=True):
        assert (row["record_kind"], row["reason"]) == ("quarantine", reason), row
        if detail is not None:
            assert row["detail"] == detail
    assert found[-2]["detail"].startswith("no primary key value for table SHOP.UNDECLARED (key columns: none)")


def test_shareplex_single_quotes_are_not_json_and_a_lone_surrogate_is_not_unicode(spark, tmp_path):
    """Jackson read single-quoted strings and Spark held a lone UTF-16 surrogate escape as "?"; neither is kept, as
    for every JSON format: the message is not JSON, and a row that would hold the surrogate is quarantined
    ``not_utf8`` naming the field (as canal-json's is). A surrogate in a field Shareplex does not write changes
    nothing."""
    values = [
        shareplex("ins", {"ID": "1", "A": "a"}).replace('"', "'"),
        shareplex("ins", {"ID": "2", "A": "a\ud800"}),
        shareplex("upd", {"A": "b"}, {"ID": "3", "A": "\udfff"}),  # the old value, in the before image
        shareplex("ins", {"ID": "4", "A": "a"}, userid="\ud800"),  # meta.userid is not written
    ]
    records = [Record("sp.t", 2, 70 + index, value) for index, value in enumerate(values)]
    found = outcomes(decode_values(spark, tmp_path, records, pipeline("dts-shareplex-json", SHOP_T)))
    assert found[0][:5] == ("sp.t", 2, 70, "quarantine", "not_json")
    assert found[0][5].startswith("payload is not a JSON object: {'meta': {'time': '2024-01-02T03:04:05', 'op': 'ins'")
    assert found[1:] == [
        ("sp.t", 2, 71, "quarantine", "not_utf8", NOT_UNICODE.format("after")),
        ("sp.t", 2, 72, "quarantine", "not_utf8", NOT_UNICODE.format("before")),
        ("sp.t", 2, 73, "changelog", None, None),
    ]


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ({}, r"dts-shareplex-json messages carry no primary key; declare tables.<SCHEMA.TABLE>.primary_key"),
        ({"S.T": {"primary_key": ["ID"]}}, r"tables.S.T.column_types is missing; .* list every column"),
        (
            {"S.T": {"primary_key": ["ID"], "column_types": {"A": "string"}}},
            r"tables.S.T.column_types does not list the key column\(s\) ID; add them",
        ),
    ],
)
def test_shareplex_without_key_config_is_an_error_before_any_record_is_decoded(spark, tmp_path, tables, message):
    with pytest.raises(ConfigError, match=message):
        decode_values(spark, tmp_path, [shareplex("ins", {"ID": "1"})], pipeline("dts-shareplex-json", tables))


# --- DataWorks Kafka JSON --------------------------------------------------------------------------------------------

DATAWORKS_SAMPLES = [
    "01-heartbeat-MHEARTBEAT.json",
    "02-insert.json",
    "03-update-before-UPDATE_BEFOR.json",
    "04-update-after-UPDATE_AFTER.json",
    "05-update-single-message-UPDATE_AFTER-with-before.json",
    "06-delete.json",
]
ITEM_TYPES = {"price": "decimal(5,2)", "born": "date"}


def item(id_: int, name: str = "n", **values) -> dict:
    return {
        "id": id_,
        "name": name,
        "price": "1.00",
        "born": None,
        "seen": None,
        "blob": None,
        "ok": True,
        "score": 1.5,
    } | values


def test_dataworks_doc_samples_decode_to_their_rows(spark, tmp_path):
    values = [sample(DATAWORKS, n) for n in DATAWORKS_SAMPLES]
    found = rows(decode_values(spark, tmp_path, values, pipeline("dataworks-json")))
    assert found == golden("dataworks-json-doc-samples.jsonl")


def test_dataworks_values_are_typed_from_the_schema_and_the_time_zone(spark, tmp_path):
    # 1985-03-02 00:00 and 2024-01-02 03:04:05.123 as wall clocks in UTC+8, as DataWorks in that zone writes them.
    born, seen = 478569600000 - 8 * 3600 * 1000, 1704164645123 - 8 * 3600 * 1000
    values = [
        dataworks("INSERT", "1", item(1, price="12.30", born=born, seen=seen, blob="AP8=", ok=False, score=0.1)),
        dataworks("INSERT", "2", item(2, born=born + 3600 * 1000)),  # not midnight: the zone or the type is wrong
        dataworks("INSERT", "3", item(3, price="1.234")),  # would be rounded by decimal(5,2)
        dataworks("INSERT", "4", item(4, blob="not base64 %%")),
        dataworks("INSERT", "5", item(5, seen=10**17)),  # past year 9999
        dataworks("INSERT", "6", item(6) | {"extra": "2024"}),  # a column the schema does not list: kept as text
    ]
    cfg = pipeline("dataworks-json", {"shop.items": {"column_types": ITEM_TYPES}}, time_zone="+08:00")
    found = rows(decode_values(spark, tmp_path, values, cfg))
    first = found[0]
    assert first["after"] == {
        "id": "1",
        "name": "n",
        "price": "12.30",
        "born": "1985-03-02",
        "seen": "2024-01-02 03:04:05.123",
        "blob": "AP8=",
        "ok": "false",
        "score": "0.1",
    }
    assert first["column_types"] == {
        "id": "bigint",
        "name": "string",
        "price": "decimal(5,2)",
        "born": "date",
        "seen": "timestamp_ntz",
        "blob": "binary",
        "ok": "boolean",
        "score": "double",
    }
    extra = found[5]
    assert (extra["record_kind"], extra["after"]["extra"], "extra" in extra["column_types"]) == (
        "changelog",
        "2024",
        False,
    )
    assert [(r["reason"], r["detail"]) for r in found[1:5]] == [
        ("bad_value", "value cannot be read exactly with its type in column(s): born"),
        ("bad_value", "value cannot be read exactly with its type in column(s): price"),
        ("bad_value", "value does not match its declared type in column(s): blob"),
        ("bad_value", "value cannot be read exactly with its type in column(s): seen"),
    ]


def test_dataworks_update_pairs_single_messages_and_key_changes(spark, tmp_path):
    values = [
        dataworks("INSERT", "10", item(1, "a")),
        dataworks("UPDATE_BEFOR", "11", before=item(1, "a")),
        dataworks("UPDATE_AFTER", "11", after=item(1, "b")),
        dataworks("UPDATE_AFTER", "12", after=item(2, "moved"), before=item(1, "b")),  # the key changes: 1 -> 2
        dataworks("INSERT", "13", item(3, "c")),
        dataworks("UPDATE_AFTER", "14", after=item(3, "d")),  # its UPDATE_BEFOR is outside the replayed range
    ]
    decoded = decode_values(spark, tmp_path, values, pipeline("dataworks-json"))
    found = rows(decoded)
    assert [(r["offset"], r["record_kind"], r["op"], r["key"], r["control_kind"]) for r in found] == [
        (0, "changelog", "insert", '["1"]', None),
        (1, "control", None, None, "update_before"),
        (2, "changelog", "update", '["1"]', None),
        (3, "changelog", "delete", '["1"]', None),
        (3, "changelog", "update", '["2"]', None),
        (4, "changelog", "insert", '["3"]', None),
        (5, "changelog", "update", '["3"]', None),
    ]
    assert found[1]["detail"] == "before image of the update applied by partition 0 offset 2"
    assert found[2]["before"]["name"] == "a" and found[2]["after"]["name"] == "b"
    assert found[6]["before"] is None
    assert {key: after["name"] for (_, key), after in live_state(decoded).items()} == {'["2"]': "moved", '["3"]': "d"}


def test_dataworks_orders_by_sequence_id_as_an_integer(spark, tmp_path):
    values = [
        dataworks("UPDATE_AFTER", "1000", after=item(1, "newer"), before=item(1, "x")),
        dataworks("UPDATE_AFTER", "999", after=item(1, "older"), before=item(1, "y")),  # later offset, smaller id
    ]
    state = live_state(decode_values(spark, tmp_path, values, pipeline("dataworks-json")))
    assert state[("shop.items", '["1"]')]["name"] == "newer"


def test_dataworks_control_messages(spark, tmp_path):
    values = [
        dataworks("TRANSACTION_BEGIN", "1"),
        dataworks("ALTER", "2", ddl={"text": "ALTER TABLE items ADD COLUMN x INT", "ddlMeta": None}),
        dataworks("INSERT", "3", item(1)),
        dataworks("TRUNCATE", "4", ddl={"text": "TRUNCATE TABLE items", "ddlMeta": None}),
        dataworks("TRANSACTION_END", "5"),
        dataworks("INSERT", "6", item(2)),
    ]
    decoded = decode_values(spark, tmp_path, values, pipeline("dataworks-json"))
    found = rows(decoded)
    assert [(r["offset"], r["record_kind"], r["op"], r["control_kind"], r["detail"]) for r in found] == [
        (0, "control", None, "transaction", "TRANSACTION_BEGIN 1"),
        (1, "control", None, "ddl", "ALTER TABLE items ADD COLUMN x INT"),
        (2, "changelog", "insert", None, None),
        (3, "changelog", "truncate", None, None),
        (3, "control", None, "truncate", "TRUNCATE TABLE items"),
        (4, "control", None, "transaction", "TRANSACTION_END 5"),
        (5, "changelog", "insert", None, None),
    ]
    assert list(live_state(decoded)) == [("shop.items", '["2"]')]


DATAWORKS_BAD = [
    (
        dataworks("UPDATE_BEFOR", "77", before=item(1)),
        "unpaired_update",
        "UPDATE_BEFOR of sequenceId 77 has no UPDATE_AFTER with that sequenceId among the replayed records: the update cannot be applied (replay a range that holds both messages)",
    ),
    (
        dataworks("UPSERT", "78", item(1)),
        "unknown_op",
        "op 'UPSERT' is not a DataWorks op (INSERT, UPDATE_BEFOR, UPDATE_AFTER, DELETE, TRUNCATE, DDL, transaction or MHEARTBEAT; ops are case-sensitive)",
    ),
    (
        dataworks("insert", "79", item(1)),
        "unknown_op",
        "op 'insert' is not a DataWorks op (INSERT, UPDATE_BEFOR, UPDATE_AFTER, DELETE, TRUNCATE, DDL, transaction or MHEARTBEAT; ops are case-sensitive)",
    ),
    (dataworks("INSERT", "80"), "missing_image", "op INSERT without its after.dataColumn image"),
    (dataworks("DELETE", "81"), "missing_image", "op DELETE without its before.dataColumn image"),
    (dataworks("INSERT", "82", item(1), keys=()), "missing_key", None),
    ('{"schema": null, "payload": {"op": "INSERT", "after": ', "not_json", None),
    (b"\xff\xfe not utf-8", "not_utf8", "payload is not valid UTF-8 text"),
]


def test_dataworks_bad_messages_are_quarantined_with_their_reason(spark, tmp_path):
    values = [
        dataworks("INSERT", "1", item(100)),
        *[v for v, _, _ in DATAWORKS_BAD],
        dataworks("INSERT", "2", item(101)),
    ]
    found = rows(decode_values(spark, tmp_path, values, pipeline("dataworks-json")))
    assert [r["offset"] for r in found] == list(range(len(values)))
    assert found[0]["record_kind"] == found[-1]["record_kind"] == "changelog"
    for row, (_, reason, detail) in zip(found[1:-1], DATAWORKS_BAD, strict=True):
        assert (row["record_kind"], row["reason"]) == ("quarantine", reason), row
        if detail is not None:
            assert row["detail"] == detail


def test_dataworks_single_quotes_are_not_json_and_a_lone_surrogate_is_not_unicode(spark, tmp_path):
    """As for every JSON format: a single-quoted message is not JSON, and a row that would hold a lone UTF-16 surrogate
    (Spark held it as "?") is quarantined ``not_utf8`` naming the field -- also when the before image comes from the
    UPDATE_BEFOR of the pair. A surrogate in a field DataWorks does not write changes nothing."""
    values = [
        dataworks("INSERT", "1", item(1)).replace('"', "'"),
        dataworks("INSERT", "2", item(2, "a\ud800")),
        dataworks("UPDATE_BEFOR", "3", before=item(3, "\udfff")),
        dataworks("UPDATE_AFTER", "3", after=item(3, "b")),
        dataworks("INSERT", "4", item(4), scn="\ud800"),  # payload.scn is not written
    ]
    records = [Record("dw.items", 1, 20 + index, value) for index, value in enumerate(values)]
    found = outcomes(decode_values(spark, tmp_path, records, pipeline("dataworks-json")))
    assert found[0][:5] == ("dw.items", 1, 20, "quarantine", "not_json")
    assert found[0][5].startswith("payload is not a JSON object: {'schema': {'dataColumn': [{'name': 'id'")
    assert found[1:] == [
        ("dw.items", 1, 21, "quarantine", "not_utf8", NOT_UNICODE.format("after")),
        ("dw.items", 1, 22, "control", None, "before image of the update applied by partition 1 offset 23"),
        ("dw.items", 1, 23, "quarantine", "not_utf8", NOT_UNICODE.format("before")),
        ("dw.items", 1, 24, "changelog", None, None),
    ]


@pytest.mark.parametrize("zone", ["Mars/Olympus", "+19:00"])
def test_dataworks_unknown_time_zone_is_a_config_error(spark, tmp_path, zone):
    with pytest.raises(ConfigError, match=rf"options.time_zone '{re.escape(zone)}' is not a time zone; use an"):
        decode_values(spark, tmp_path, [dataworks("INSERT", "1", item(1))], pipeline("dataworks-json", time_zone=zone))


def test_shareplex_without_key_config_stops_the_run_before_decoding(tmp_path, capsys):
    from archive_helpers import Record, pipeline_config, write_parquet

    from cdcreplay.entrypoints import EXIT_BAD_INPUT, replay_main

    archive = tmp_path / "archive"
    write_parquet([Record("sp", 0, 0, shareplex("ins", {"ID": "1"}))], archive / "part-0.parquet")
    config = pipeline_config(tmp_path, "sp", "dts-shareplex-json", archive)
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    assert "pipeline sp: dts-shareplex-json messages carry no primary key" in capsys.readouterr().err
    assert not (tmp_path / "warehouse" / "sp" / "runs" / "r1" / "decoded").exists()
    assert not (tmp_path / "warehouse" / "sp" / "_CURRENT.json").exists()
