"""Alibaba DTS Avro (issue 3): raw Avro Records decoded with fastavro, every value union typed, partial images kept
apart from NULL, both framings (Record alone as DTS writes it, and the union-framed synthetic corpus), and every bad
record quarantined with its reason while the run goes on."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import fastavro
import pytest
from alibaba_helpers import CONFORMANCE, NONE, decode_values, dts, golden, pipeline, row, rows, value
from pyspark import cloudpickle
from pyspark.sql import functions as F

from cdcreplay.compaction import latest_rows
from cdcreplay.config import ConfigError
from cdcreplay.formats.dts_avro import DtsReader, key_columns_of, split_object_name
from cdcreplay.formats.python_rows import DecodeError
from cdcreplay.formats.values.dts_avro_values import ABSENT, convert
from cdcreplay.formats.wire.avro_wire import load_schema

pytestmark = pytest.mark.timeout(600)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SYNTHETIC = CONFORMANCE / "synthetic-dts-avro"
RECORD_AVSC = CONFORMANCE / "alibaba-dts-avro" / "Record.avsc"
NS = "com.alibaba.dts.formats.avro."
SCHEMA = load_schema(str(RECORD_AVSC))
SYNTHETIC_FILES = sorted(p.name for p in SYNTHETIC.glob("*.avro"))


@pytest.fixture(scope="module")
def schema_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dts-schema")
    shutil.copy(RECORD_AVSC, folder / "Record.avsc")
    return folder


def avro_pipeline(schema_dir: Path, tables: dict | None = None):
    return pipeline("dts-avro", tables, writer_schema=str(schema_dir / "Record.avsc"))


def live_state(decoded) -> dict:
    changes = decoded.where(F.col("record_kind") == "changelog").drop("timestamp", "record_kind")
    return {(r.table_id, r.key): dict(r.after) for r in latest_rows(changes).where(~F.col("deleted")).collect()}


# --- the writer schema and the framings ------------------------------------------------------------------------------


def test_the_simulators_writer_schema_is_the_vendor_record_schema():
    from fastavro.schema import to_parsing_canonical_form

    from cdcreplay_lab.simulator.dts_record_schema import parsed_record_schema

    assert to_parsing_canonical_form(parsed_record_schema()) == to_parsing_canonical_form(SCHEMA)


def test_union_framed_and_record_framed_values_read_alike():
    reader = DtsReader(str(RECORD_AVSC))
    expected = [json.loads(line) for line in (SYNTHETIC / "expected-decoded.jsonl").read_text().splitlines()]
    for document in expected:
        union_framed = (SYNTHETIC / document["file"]).read_bytes()
        assert union_framed[:1] == b"\x1a"  # union branch 13: Record
        record = reader.read(union_framed)
        assert (record["id"], record["operation"], record["objectName"]) == (
            document["decoded"][1]["id"],
            document["decoded"][1]["operation"],
            document["decoded"][1]["objectName"],
        )
        # As DTS writes it: the Record alone, no branch index.
        stream = io.BytesIO()
        fastavro.schemaless_writer(stream, SCHEMA, record)
        assert stream.getvalue() == union_framed[1:]
        assert reader.read(stream.getvalue()) == record


def test_truncated_and_garbage_values_are_bad_avro():
    reader = DtsReader(str(RECORD_AVSC))
    whole = (SYNTHETIC / "01-insert.avro").read_bytes()
    for broken in (whole[:40], whole[1:40], b"\x02\x04garbage"):
        with pytest.raises(DecodeError, match="raw Avro does not decode as a DTS Record") as error:
            reader.read(broken)
        assert error.value.reason == "bad_avro"


def test_object_names_and_keys():
    assert split_object_name("shop.my\\u002Etable") == ("shop", None, "my.table")
    assert split_object_name("db.public.t") == ("db", "public", "t")
    assert split_object_name("t") == (None, None, "t")
    with pytest.raises(DecodeError, match=r"objectName 'a.b.c.d' is not db.table or db.schema.table"):
        split_object_name("a.b.c.d")
    assert key_columns_of({"pk_uk_info": '{"PRIMARY":["id","line"]}'}) == ["id", "line"]
    assert key_columns_of({"pk_uk_info": '{"uk_email":["email"]}'}) == ["email"]
    assert key_columns_of({}) is None


# --- the value unions ------------------------------------------------------------------------------------------------

VALUES = [
    (8, value("Integer", precision=20, value="18446744073709551615"), "18446744073709551615", "decimal(20,0)"),
    (3, value("Integer", precision=10, value="4294967295"), "4294967295", "bigint"),
    (1, value("Integer", precision=4, value="-128"), "-128", "int"),
    (16, value("Integer", precision=1, value="5"), "5", "decimal(20,0)"),
    (
        13,
        value("DateTime", year=2024, month=None, day=None, hour=None, minute=None, second=None, millis=None),
        "2024",
        "int",
    ),
    (246, value("Decimal", value="-0.05", precision=10, scale=2), "-0.05", "decimal(10,2)"),
    (
        246,
        value("Decimal", value="123456789012345678901234567890123456789.5", precision=65, scale=1),
        "123456789012345678901234567890123456789.5",
        "string",
    ),
    (4, value("Float", value=3.140000104904175, precision=12, scale=-1), "3.140000104904175", "float"),
    (5, value("Float", value=float("nan"), precision=22, scale=31), "NaN", "double"),
    (5, value("Float", value=1e300, precision=22, scale=31), "1e+300", "double"),
    (7, value("Timestamp", timestamp=1704164645, millis=123000), "2024-01-02 03:04:05.123000", "timestamp"),
    (7, value("Timestamp", timestamp=-1, millis=5), "1969-12-31 23:59:59.000005", "timestamp"),
    (
        12,
        value("DateTime", year=2024, month=1, day=2, hour=3, minute=4, second=5, millis=123456),
        "2024-01-02 03:04:05.123456",
        "timestamp_ntz",
    ),
    (
        12,
        value("DateTime", year=2024, month=1, day=2, hour=3, minute=4, second=5, millis=None),
        "2024-01-02 03:04:05",
        "timestamp_ntz",
    ),
    (
        10,
        value("DateTime", year=1969, month=12, day=31, hour=None, minute=None, second=None, millis=None),
        "1969-12-31",
        "date",
    ),
    (
        11,
        value("DateTime", year=None, month=None, day=None, hour=-838, minute=-59, second=-59, millis=None),
        "-838:59:59",
        "string",
    ),
    (
        11,
        value("DateTime", year=None, month=None, day=None, hour=1, minute=2, second=3, millis=4),
        "01:02:03.000004",
        "string",
    ),
    (253, value("Character", charset="utf8mb4", value="王 Zoë 📦".encode()), "王 Zoë 📦", "string"),
    (254, value("Character", charset="latin1", value=b"\xc4\x80\x81"), "Ä€\x81", "string"),
    (253, value("Character", charset="gbk", value="中文".encode("gbk")), "中文", "string"),
    (253, value("Character", charset="binary", value=b"\x00\xff"), "AP8=", "binary"),
    (254, value("Character", charset="", value=b"\x01"), "AQ==", "binary"),
    (252, value("BinaryObject", type="BLOB", value=b"\x00\xff"), "AP8=", "binary"),
    (252, value("TextObject", type="TEXT", value="long text"), "long text", "string"),
    (245, value("TextObject", type="JSON", value='{"a": 1}'), '{"a": 1}', "string"),
    (255, value("BinaryGeometry", type="POINT", value=b"\x01\x01"), "AQE=", "binary"),
    (255, value("TextGeometry", type="POINT", value="POINT(1 2)"), "POINT(1 2)", "string"),
    (
        12,
        value(
            "TimestampWithTimeZone",
            value={"year": 2024, "month": 1, "day": 2, "hour": 11, "minute": 4, "second": 5, "millis": 0},
            timezone="+08:00",
        ),
        "2024-01-02 03:04:05",
        "timestamp",
    ),
    (3, None, None, "bigint"),
    (246, None, None, None),  # a NULL decimal declares no type: its precision is in the values only
    (3, NONE, ABSENT, "bigint"),
    (252, NONE, ABSENT, None),
]


@pytest.mark.parametrize(("type_number", "element", "text", "spark_type"), VALUES)
def test_value_unions_become_canonical_text_of_their_type(type_number, element, text, spark_type):
    mysql = not (element and element[0].endswith("TimestampWithTimeZone"))
    assert convert("c", type_number, element, mysql) == (text, spark_type)


BAD_VALUES = [
    (
        3,
        value("Timestamp", timestamp=1, millis=0),
        "wrong_branch",
        r"column c \(dataTypeNumber 3 LONG\) holds a Timestamp value; its values are Integer",
    ),
    (
        253,
        value("Integer", precision=1, value="1"),
        "wrong_branch",
        r"column c \(dataTypeNumber 253 VAR_STRING\) holds a Integer value; its values are Character",
    ),
    (
        246,
        value("Float", value=1.5, precision=1, scale=1),
        "wrong_branch",
        r"holds a Float value; its values are Decimal",
    ),
    (
        6,
        value("Integer", precision=1, value="1"),
        "wrong_branch",
        r"\(dataTypeNumber 6 NULL\) holds a Integer value; its values are null",
    ),
    (
        3,
        value("Integer", precision=1, value="9223372036854775808"),
        "bad_value",
        r"integer 9223372036854775808 does not fit its type bigint",
    ),
    (3, value("Integer", precision=1, value="12x"), "bad_value", r"Integer value '12x' is not an integer"),
    (
        246,
        value("Decimal", value="1.234", precision=5, scale=2),
        "bad_value",
        r"decimal 1.234 does not fit decimal\(5,2\)",
    ),
    (
        246,
        value("Decimal", value="1234.5", precision=5, scale=2),
        "bad_value",
        r"decimal 1234.5 does not fit decimal\(5,2\)",
    ),
    (246, value("Decimal", value="abc", precision=5, scale=2), "bad_value", r"Decimal value .* cannot be read"),
    (
        10,
        value("DateTime", year=0, month=0, day=0, hour=None, minute=None, second=None, millis=None),
        "bad_value",
        r"date 0-0-0 \(a MySQL zero date\?\) has no calendar date",
    ),
    (7, value("Timestamp", timestamp=1, millis=1_000_000), "bad_value", r"Timestamp micros 1000000 out of range"),
    (253, value("Character", charset="klingon", value=b"x"), "bad_value", r"charset 'klingon' is not known"),
    (253, value("Character", charset="utf8mb4", value=b"\xff\xfe"), "bad_value", r"bytes are not utf8mb4 text"),
]


@pytest.mark.parametrize(("type_number", "element", "reason", "message"), BAD_VALUES)
def test_values_that_do_not_fit_their_field_are_rejected(type_number, element, reason, message):
    with pytest.raises(DecodeError, match=message) as error:
        convert("c", type_number, element, True)
    assert error.value.reason == reason


# --- records through Spark -------------------------------------------------------------------------------------------


def test_synthetic_corpus_decodes_to_its_expected_rows(spark, tmp_path, schema_dir):
    values = [(SYNTHETIC / name).read_bytes() for name in SYNTHETIC_FILES]
    decoded = decode_values(spark, tmp_path, values, avro_pipeline(schema_dir))
    assert rows(decoded) == golden("synthetic-dts-avro-rows.jsonl")
    dotted = decoded.where("offset = 5").select("source_db", "source_schema", "source_table").first()
    assert tuple(dotted) == ("shop", None, "my.table")  # objectName 'shop.my\u002Etable'


def _expected_rows_txt() -> list[tuple[str, str, list[str]]]:
    """(file, side, leading values) of every `before:`/`after:` image in synthetic-dts-avro/expected-rows.txt; an
    image elided with '...' gives the values before the ellipsis."""
    images = []
    for line in (SYNTHETIC / "expected-rows.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or "|" not in line:
            continue
        file, _op, _table, _pk, described = (part.strip() for part in line.split("|"))
        for image in described.split(";"):
            side, _, values = image.partition(":")
            if side.strip() not in ("after", "before"):
                continue
            leading = []
            for item in values.split(","):
                if item.strip().startswith("..."):
                    break
                leading.append(item.strip())
            images.append((file, side.strip(), leading))
    return images


def test_decoded_rows_agree_with_the_corpus_expected_rows_txt():
    """The golden rows restate expected-rows.txt in canonical text; check the restatement value by value."""
    import base64

    golden_rows = {r["offset"]: r for r in golden("synthetic-dts-avro-rows.jsonl") if r["record_kind"] != "control"}
    columns = ["id", "name", "price", "created", "updated", "d", "blob"]
    checked = 0
    for file, side, values in _expected_rows_txt():
        image = golden_rows[SYNTHETIC_FILES.index(file)][side]
        for column, expected in zip(columns, values, strict=False):
            got = image[column]
            if expected == "NULL":
                assert got is None
            elif column == "blob":
                assert base64.b64decode(got).hex() == expected
            elif column == "updated":  # the corpus shows the UTC instant as ISO with Z
                assert got.replace(" ", "T") + "Z" == expected
            else:
                assert got == expected, (file, column)
            checked += 1
    assert checked == 7 + 3 + 7 + 7 + 3  # 01 after, 02 before (elided) and after, 03 before, 06 after (elided)


def test_partial_images_keep_stored_values_and_key_changes_move_rows(spark, tmp_path, schema_dir):
    partial_after = [NONE, NONE, value("Decimal", value="9.99", precision=5, scale=2), NONE, NONE]
    key_only = [value("Integer", precision=11, value="1"), NONE, NONE, NONE, NONE]
    moved_partial = [value("Integer", precision=11, value="7"), NONE, NONE, NONE, NONE]
    values = [
        dts("INIT", 1, after=row(1, "init", note=None)),
        dts("INIT", 2, after=row(2, "two")),
        # binlog_row_image=MINIMAL: the before image has the key only, the after image the changed column only.
        dts("UPDATE", 3, before=key_only, after=partial_after),
        dts("UPDATE", 4, before=row(2, "two"), after=row(3, "three")),  # a key change with full images
        dts("INSERT", 5, after=row(6, "six")),
        dts(
            "UPDATE", 6, before=[value("Integer", precision=11, value="6"), NONE, NONE, NONE, NONE], after=moved_partial
        ),
        dts("DELETE", 7, before=key_only),
    ]
    decoded = decode_values(spark, tmp_path, values, avro_pipeline(schema_dir))
    found = rows(decoded)
    assert [(r["offset"], r["record_kind"], r["op"], r["key"], r["reason"]) for r in found] == [
        (0, "changelog", "snapshot", '["1"]', None),
        (1, "changelog", "snapshot", '["2"]', None),
        (2, "changelog", "update", '["1"]', None),
        (3, "changelog", "delete", '["2"]', None),
        (3, "changelog", "update", '["3"]', None),
        (4, "changelog", "insert", '["6"]', None),
        (5, "changelog", "delete", '["6"]', None),
        (5, "quarantine", None, None, "partial_key_change"),
        (6, "changelog", "delete", '["1"]', None),
    ]
    partial = found[2]
    assert partial["after"] == {"price": "9.99"}  # absent columns are left out, never NULL
    assert partial["before"] == {"id": "1"}
    assert partial["column_types"] == {"id": "bigint", "price": "decimal(5,2)", "d": "date"}
    # Compaction completes the partial image from the key's history (checked before the delete at offset 6).
    before_delete = decoded.where("offset < 6")
    assert live_state(before_delete)[("shop.t", '["1"]')] == {
        "id": "1",
        "name": "init",
        "price": "9.99",
        "note": None,
        "d": "2024-01-02",
    }
    assert sorted(live_state(decoded)) == [("shop.t", '["3"]')]


def test_control_records(spark, tmp_path, schema_dir):
    values = [
        dts("BEGIN", 1, object_name=None, fields=None),
        dts("DDL", 2, fields=None, after="ALTER TABLE t ADD COLUMN x INT"),
        dts("COMMIT", 3, object_name=None, fields=None),
        dts("HEARTBEAT", 4, object_name=None, fields=None),
        dts("CHECKPOINT", 5, object_name=None, fields=None),
        dts("ROLLBACK", 6, object_name=None, fields=None),
    ]
    found = rows(decode_values(spark, tmp_path, values, avro_pipeline(schema_dir)))
    assert [(r["control_kind"], r["table_id"], r["detail"]) for r in found] == [
        ("transaction", None, "BEGIN txid=9 id=1"),
        ("ddl", "shop.t", "ALTER TABLE t ADD COLUMN x INT"),
        ("transaction", None, "COMMIT txid=9 id=3"),
        ("heartbeat", None, "2024-01-02T03:04:09+00:00"),
        ("stream", None, "CHECKPOINT id=5"),
        ("transaction", None, "ROLLBACK txid=9 id=6"),
    ]
    assert found[3]["event_time"] == "2024-01-02T03:04:09.000000"


def _wrong_branch_index() -> bytes:
    """An INSERT whose second value names union branch 14 -- past the 13 branches of the value union."""
    good = dts("INSERT", 8, after=row(8, "eight"))
    marker = b"\x04\x0eutf8mb4"  # branch 2 (Character), then the charset string
    assert good.count(marker) == 1
    return good.replace(marker, b"\x1c\x0eutf8mb4")


BAD_RECORDS = [
    ((SYNTHETIC / "01-insert.avro").read_bytes()[:60], "bad_avro", "raw Avro does not decode as a DTS Record"),
    (_wrong_branch_index(), "bad_avro", "raw Avro does not decode as a DTS Record"),
    (dts("INSERT", 9, after=row(9)[:4]), "bad_avro", "afterImages has 4 values for 5 fields"),
    (
        dts("INSERT", 10, after="INSERT is no DDL"),
        "wrong_branch",
        "afterImages holds the DDL text branch in a row change",
    ),
    (
        dts("INSERT", 11, fields="id,name", after=row(11)),
        "wrong_branch",
        "INSERT record whose fields are not a field list",
    ),
    (
        dts("INSERT", 12, after=[value("Timestamp", timestamp=1, millis=0), *row(12)[1:]]),
        "wrong_branch",
        "column id (dataTypeNumber 3 LONG) holds a Timestamp value; its values are Integer",
    ),
    (
        dts("INSERT", 13, after=row(13, price="123.456")),
        "bad_value",
        "column price: decimal 123.456 does not fit decimal(5,2)",
    ),
    (dts("INSERT", 14), "missing_image", "INSERT record without afterImages"),
    (dts("DELETE", 15), "missing_image", "DELETE record without beforeImages"),
    (dts("INSERT", 16, after=row(16), tags={}), "missing_key", None),
    (dts("INSERT", 17, after=row(17), object_name=None), "missing_table", None),
    (
        dts(
            "UPDATE", 18, before=[row(18)[0], NONE, NONE, NONE, NONE], after=[row(18)[0], NONE, NONE, NONE, row(18)[4]]
        ),
        "missing_image",
        "afterImages leaves out name, price, note (EmptyObject) and the record gives none of their types; declare tables.shop.t.column_types for them so their stored values are kept",
    ),
]


def test_bad_records_are_quarantined_and_the_run_goes_on(spark, tmp_path, schema_dir):
    values = [dts("INSERT", 1, after=row(1)), *[v for v, _, _ in BAD_RECORDS], dts("INSERT", 99, after=row(99))]
    found = rows(decode_values(spark, tmp_path, values, avro_pipeline(schema_dir)))
    assert [r["offset"] for r in found] == list(range(len(values)))
    assert found[0]["record_kind"] == found[-1]["record_kind"] == "changelog"
    for got, (_, reason, message) in zip(found[1:-1], BAD_RECORDS, strict=True):
        assert (got["record_kind"], got["reason"]) == ("quarantine", reason), got
        if message is not None:
            assert message in got["detail"], got["detail"]


def test_a_missing_writer_schema_is_a_config_error(spark, tmp_path):
    with pytest.raises(ConfigError, match=r"dts-avro needs options.writer_schema, the path of DTS's Record.avsc"):
        decode_values(spark, tmp_path, [b"\x00"], pipeline("dts-avro"))
    with pytest.raises(ConfigError, match=r"options.writer_schema: Avro schema file .*nope.avsc does not exist"):
        decode_values(spark, tmp_path, [b"\x00"], pipeline("dts-avro", writer_schema=str(tmp_path / "nope.avsc")))
