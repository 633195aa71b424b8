"""The native (Spark JSON reader, ``options.reader: spark``) path of qlik-json against its Python decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field, and
``decode`` (native rows plus the Python decoder's for the records left to it) must equal the Python decoder on every
record (``native_helpers.native_flags_of_messages``). Checked on a simulated history (reloads interleaved with changes,
column masks, two table versions, bare and enveloped messages, key changes), on hand-made corner cases, and on the
REFRESH rows whose position comes from the change before them, when that change or the REFRESH is left to Python.
"""

from __future__ import annotations

import json

import pytest
from native_helpers import native_flags_of_messages, records_frame, two_pass_write
from qlik_helpers import V1, dt, md, seq

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import qlik_json
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_qlik import encode_qlik_json

ROW = {"ID": "1", "NAME": "Ann", "CITY": "Oslo", "SALARY": "10.50"}
METADATA = md("v1", 1, V1, precision=10, scale=2).encode()


def _pipeline(tables: dict | None = None) -> PipelineConfig:
    return PipelineConfig(
        name="native", format="qlik-json", archive={"path": "unused"}, tables=tables or {}, options={"reader": "spark"}
    )


def _flags(spark, values: list, pipeline=None) -> list[bool]:
    encoded = [v.encode() if isinstance(v, str) else v for v in values]
    return native_flags_of_messages(spark, qlik_json, encoded, pipeline or _pipeline())


def _data(operation="INSERT", data=ROW, n=1, **fields) -> str:
    return dt(operation, data, sequence=fields.pop("sequence", seq(n)), mask=fields.pop("mask", "0F"), **fields)


def test_simulated_history_is_decoded_natively_as_in_python(spark):
    records = list(encode_qlik_json(simulate(seed=11, events=1500, days=2)))
    flags = _flags(spark, [r.value for r in records])
    metadata = sum(b'"type":"MD"' in r.value for r in records)
    assert metadata >= 3
    left = [r.value for r, native in zip(records, flags, strict=True) if not native and b'"type":"MD"' not in r.value]
    # Left to Python besides the MD messages (2.1%): the key changes, the REFRESH messages after one and before the
    # next change, and the change before each such run of them, which goes along.
    assert len(left) <= 0.03 * len(records), left[:3]


def test_the_two_pass_write_gives_the_python_decoders_rows(spark, tmp_path):
    """The job's write (native rows, then the records left to Python) on a history whose REFRESH rows follow
    changes, some of them left to Python."""
    records = list(encode_qlik_json(simulate(seed=5, events=600, days=1)))
    frame = records_frame(spark, [(r.key, r.value, []) for r in records])
    written = two_pass_write(spark, qlik_json, frame, _pipeline(), str(tmp_path / "decoded"))
    reference = qlik_json.decode_in_python(frame, _pipeline())
    assert sorted(map(str, written.collect())) == sorted(map(str, reference.collect()))


def _moved(n: int) -> str:
    """An update that moves its row to key 9: Python's."""
    return dt("UPDATE", {**ROW, "ID": "9"}, before=ROW, sequence=seq(n), mask="0F", schema_id="v1")


CORNER_CASES = [
    (_data(schema_id="v1"), True),
    (_data("UPDATE", before=ROW, schema_id="v1"), True),
    (_data("DELETE", None, before=ROW, schema_id="v1"), True),
    (_data("DELETE", ROW, schema_id="v1"), True),  # the row in data, as some tasks write it
    (_data("REFRESH", sequence="", schema_id="v1"), True),
    (_data(schema_id="v1", envelope=False), True),  # a bare data message
    (_data(schema_id="v1", mask="05"), True),  # NAME and SALARY not captured: left out of the image
    (_data(schema_id="v1", mask="0F00"), True),  # a second mask byte
    (_data(schema_id="v1", mask=""), True),  # no mask: every column
    (_data(schema_id="v1", sequence=""), True),  # no sequence: no position
    (_data(schema_id="v1", data={**ROW, "SALARY": None}), True),
    (_data(schema_id="v1", data={**ROW, "EXTRA": "x"}), True),  # a column the metadata lacks, every one captured
    (_data(schema_id="v1", data={**ROW, "NOTE": '{"json": "text"}'}), True),  # JSON text in a string value
    (_data(schema_id="v1", data={**ROW, "ID": 1}), True),  # a number token Spark reads as written
    (_data(schema_id="v1", counter="7"), True),
    (_data(schema_id="v1", counter=None), True),
    (_moved(2), False),  # a key change
    (_data(schema_id="v1", data={**ROW, "EXTRA": "x"}, mask="05"), True),  # a column the metadata lacks stays
    (_data(schema_id="v1", mask="7"), False),  # odd digit count
    (_data(schema_id="v1", mask="zz"), False),  # quarantined
    (_data(schema_id="v1", sequence="0"), False),  # "0" and the number 0 read alike
    (_data(schema_id="v1", sequence="12a"), False),
    (_data(schema_id="v1", sequence=" 12"), False),
    (_data(schema_id="v1", counter=1.5), False),
    (_data(schema_id="v1", counter="x"), False),
    (_data(schema_id="nowhere"), False),  # no such metadata: quarantined
    (_data(), False),  # no schema id: the topic's metadata (Python's)
    (_data("insert", schema_id="v1"), False),  # another spelling
    (_data("MERGE", schema_id="v1"), False),
    (_data(schema_id="v1", data={**ROW, "SALARY": "10.505"}), False),  # decimal(10,2) would round it
    (_data(schema_id="v1", data={**ROW, "ID": "x"}), False),
    (_data(schema_id="v1", data={**ROW, "ID": None}), False),  # no key value
    (_data(schema_id="v1", data={**ROW, "NAME": {"nested": 1}}), False),
    (_data(schema_id="v1", data={**ROW, "NAME": 1e16}), False),  # Python writes 1e+16, Java 1.0E16
    (_data(schema_id="v1", data={**ROW, "NAME": 1.10}), True),
    (_data(schema_id="v1", data={**ROW, "NAME": "\ud800"}), False),  # a lone surrogate
    (_data(schema_id="v1", data=None), False),
    (_data("DELETE", None, schema_id="v1"), False),
    (_data("UPDATE", data={**ROW, "NAME": "B"}, before=ROW, schema_id="v1"), True),
    (dt("INSERT", ROW, sequence=seq(3), mask="0F", schema_id="v1").replace('"DT"', '"dt"'), False),
    (
        json.dumps(
            {"magic": "atMSG", "type": "DT", "message": json.dumps(json.loads(_data(schema_id="v1"))["message"])}
        ),
        False,
    ),
    (_data(schema_id="v1") + " x", False),  # text after the object
    (b"\xff\xfe", False),
    (b"", True),  # a tombstone
    ("not json", False),
]


@pytest.mark.parametrize("timestamp", ["2026-01-01T00:00:04.218000", "2026-01-01 00:00:04", "2026-01-01T00:00:04Z"])
def test_change_times_read_natively_as_in_python(spark, timestamp):
    value = json.loads(_data(schema_id="v1"))
    value["message"]["headers"]["timestamp"] = timestamp
    assert _flags(spark, [METADATA, json.dumps(value)]) == [False, True]


@pytest.mark.parametrize("timestamp", ["2026-02-30T00:00:00", "2026-01-01T00:00:00+02:00", " ", 1700000000000])
def test_change_times_python_reads_otherwise_are_left_to_it(spark, timestamp):
    value = json.loads(_data(schema_id="v1"))
    value["message"]["headers"]["timestamp"] = timestamp
    assert _flags(spark, [METADATA, json.dumps(value)]) == [False, False]


def test_corner_cases_are_decoded_natively_only_where_the_paths_agree(spark):
    values = [METADATA] + [value for value, _ in CORNER_CASES]
    flags = _flags(spark, values)
    expected = [False] + [taken for _, taken in CORNER_CASES]
    wrong = [(value, taken) for (value, taken), flag in zip(CORNER_CASES, flags[1:], strict=True) if flag != taken]
    assert flags == expected, wrong


def test_binary_values_are_hex_digits_turned_into_base64(spark):
    columns = [("ID", "INT4", 1), ("PHOTO", "BYTES", 0)]
    metadata = md("b1", 1, columns)
    long_hex = "ab" * 100  # base64 longer than a MIME line: no line breaks, as Python writes it
    values = [
        metadata,
        dt("INSERT", {"ID": "1", "PHOTO": "0aff"}, sequence=seq(1), mask="03", schema_id="b1"),
        dt("INSERT", {"ID": "2", "PHOTO": long_hex}, sequence=seq(2), mask="03", schema_id="b1"),
        dt("INSERT", {"ID": "3", "PHOTO": ""}, sequence=seq(3), mask="03", schema_id="b1"),
        dt("INSERT", {"ID": "4", "PHOTO": None}, sequence=seq(4), mask="01", schema_id="b1"),
        dt("INSERT", {"ID": "5", "PHOTO": "0a 0b"}, sequence=seq(5), mask="03", schema_id="b1"),  # Python reads it
        dt("INSERT", {"ID": "6", "PHOTO": "xyz"}, sequence=seq(6), mask="03", schema_id="b1"),  # quarantined
        dt("INSERT", {"ID": "7", "PHOTO": "zz"}, sequence=seq(7), mask="01", schema_id="b1"),  # uncaptured, still read
    ]
    assert _flags(spark, values) == [False, True, True, True, True, False, False, False]


def test_a_configured_key_and_types_win_over_the_metadatas(spark):
    tables = {"HR.EMP": {"primary_key": ["NAME"], "column_types": {"CITY": "int"}}}
    values = [
        METADATA,
        _data(schema_id="v1", data={**ROW, "CITY": "12"}),
        _data(schema_id="v1", n=2),  # CITY "Oslo" is no int: quarantined
        # The metadata's key judges a key change, not the configured one.
        dt("UPDATE", {**ROW, "CITY": "1", "NAME": "Bo"}, before={**ROW, "CITY": "1"}, sequence=seq(3), mask="0F",
           schema_id="v1"),
    ]  # fmt: skip
    assert _flags(spark, values, _pipeline(tables)) == [False, True, False, True]


def _refresh(n: int, name: str = "reloaded") -> str:
    return dt("REFRESH", {**ROW, "ID": str(n), "NAME": name}, mask="0F", schema_id="v1")


def test_refresh_rows_take_the_position_of_the_last_change_before_them(spark):
    values = [
        METADATA,
        _refresh(1),  # before any change: no position
        _data(schema_id="v1", n=5),
        _refresh(2),  # the change at offset 2's position
        _data(schema_id="v1", sequence=""),  # a change without a position passes
        _refresh(3),
    ]
    assert _flags(spark, values) == [False, True, True, True, True, True]


def test_a_refresh_after_a_record_left_to_python_goes_to_python_with_the_change_before_it(spark):
    values = [
        METADATA,
        _data(schema_id="v1", n=5),  # known natively; goes along with the REFRESH at offset 4
        _refresh(2),  # after a known change: native
        _moved(6),  # Python's (a key change)
        _refresh(3),  # after a record left to Python: Python's
        _data(schema_id="v1", n=7),  # the next change: native again
        _refresh(4),
        _data(schema_id="v1", n=8, data={**ROW, "SALARY": "x"}),  # quarantined by Python: no position
        _refresh(5),  # its position is the change at offset 5's: that one goes to Python with it
    ]
    assert _flags(spark, values) == [False, False, True, False, False, False, True, False, False]


def test_a_refresh_left_to_python_takes_the_last_known_change_along(spark):
    values = [
        METADATA,
        _data(schema_id="v1", n=5),
        _refresh(2, name={"nested": 1}),  # Python's; its position is offset 1's, which goes along
        _refresh(3),  # native, with offset 1's position
    ]
    assert _flags(spark, values) == [False, False, False, True]


def test_the_plans_columns_are_bounded_the_most_frequent_table_versions_first(spark):
    """Each planned column adds to one generated method (the JVM's 64 KB limit): of six table versions of ten
    columns, the four whose messages are most frequent are decoded natively, the other two in Python."""
    columns = [("ID", "INT8", 1)] + [(f"C{i}", "INT4" if i % 2 else "STRING", 0) for i in range(9)]
    row = {"ID": "1", **{f"C{i}": str(i) for i in range(9)}}
    values, expected = [], []
    for version in range(6):
        metadata = json.loads(md(f"s{version}", 1, columns))
        metadata["message"]["lineage"]["table"] = f"T{version}"
        values.append(json.dumps(metadata))
        expected.append(False)
        for n in range(version + 1):  # version 5's messages are the most frequent
            values.append(dt("INSERT", row, sequence=seq(10 * version + n), mask="FF03", schema_id=f"s{version}"))
            expected.append(version >= 2)
    assert _flags(spark, values) == expected
