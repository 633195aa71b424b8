"""The native (Spark JSON reader, ``options.reader: spark``) path of dts-shareplex-json against its Python decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python. Checked on simulated histories (every row change of the
simulator is taken, in both op spellings), the DTS documentation samples and hand-made corner cases: op spellings,
key changes, values a configured type would round, number tokens a double does not print back, nested values,
escapes, positions and times the native path leaves to Python. The pipeline's two-pass write gives the same rows as
``decode``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alibaba_helpers import MIO_LOG
from frame_helpers import assert_same_frames
from native_helpers import native_flags_of_messages, records_frame

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import dts_shareplex_json, dts_shareplex_native
from cdcreplay.formats.common import DECODED_COLUMNS
from cdcreplay.formats.values.native_forms import exact_decimal_form
from cdcreplay.formats.wire import native_json as N
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_shareplex import encode_shareplex_json, pipeline_settings

SAMPLES = Path(__file__).parent / "data" / "conformance" / "vendor-doc-samples" / "alibaba-dts-shareplex-json"
TYPES = {"ID": "bigint", "A": "string", "B": "decimal(5,2)", "C": "date", "N": "int", "T": "timestamp"}
SHOP_T = {"SHOP.T": {"primary_key": ["ID"], "column_types": TYPES}}


def _pipeline(tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="dts-shareplex-json",
        archive={"path": "unused"},
        tables=SHOP_T if tables is None else tables,
        options={"reader": "spark", **options},
    )


def _message(op="ins", data=None, key=None, table="SHOP.T", scn="100", trans="7.0.1", seq=1, **meta) -> bytes:
    head = {"time": "2024-01-02T03:04:05", "userid": 84, "op": op, "scn": scn, "rowid": "AAATGpAAF", "trans": trans}
    message = {"meta": head | {"seq": seq, "size": 1, "table": table} | meta, "data": data}
    if key is not None:
        message["key"] = key
    return json.dumps(message, separators=(",", ":")).encode()


ROW = {"ID": "1", "A": "x", "B": "1.50", "C": "2024-01-02", "N": "7", "T": "2024-01-02 03:04:05.123"}


def _compare(spark, values: list[bytes], pipeline=None) -> list[bool]:
    return native_flags_of_messages(spark, dts_shareplex_json, values, pipeline or _pipeline())


@pytest.mark.parametrize("long_ops", [False, True])
def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path, long_ops):
    history = simulate(seed=7, events=1500, days=2)
    values = [r.value for r in encode_shareplex_json(history, long_ops=long_ops)]
    pipeline = _pipeline(pipeline_settings(tmp_path)["tables"])
    flags = _compare(spark, values, pipeline)
    assert sum(flags) >= 0.95 * len(values), "nearly every row change of the simulator is taken natively"


def test_documentation_samples_decode_as_in_python(spark):
    values = [path.read_bytes() for path in sorted(SAMPLES.glob("*.json"))]
    # The samples name no scn, trans or seq: their position is Python's to read (every part NULL).
    assert _compare(spark, values, _pipeline(MIO_LOG)) == [False, False, False]


CORNER_CASES = [  # (message, taken natively)
    (_message("ins", ROW), True),
    (_message("INSERT", ROW), True),
    (_message("Ins", ROW), True),
    (_message("upd", {"A": "y"}, {"ID": "1", "A": "x"}), True),
    (_message("UPDATE", {"A": "y"}, {"ID": "1", "A": "x"}), True),
    (_message("update after", {"B": "2.5"}, {"ID": "1", "B": "1.50"}), True),
    (_message("upd", None, {"ID": "1", "A": "x"}), True),  # a key image alone: the row as the key says
    (_message("upd", {"A": None}, {"ID": "1"}), True),  # a column set to NULL stays apart from an absent one
    (_message("del", ROW), True),
    (_message("DELETE", {"ID": "1"}), True),
    (_message("ins", {"ID": 1, "A": "x"}), True),  # an integer token reads as its text on both paths
    (_message("UPDATE_AFTER", {"A": "y"}, {"ID": "1"}), False),  # other spellings: Python's normalization
    (_message("update  after", {"A": "y"}, {"ID": "1"}), False),
    (_message("UPDATE BEFORE", {"ID": "1", "A": "x"}), False),
    (_message("TRUNCATE"), False),
    (_message("DROP COLUMN", {"A": "varchar"}), False),
    (_message("merge", ROW), False),
    (_message("upd", {"ID": "2", "A": "y"}, {"ID": "1", "A": "x"}), False),  # moves the row: two rows
    (_message("upd", {"ID": None}, {"ID": "1"}), False),
    (_message("upd", {"A": "y"}, {"A": "x"}), False),  # no key value
    (_message("upd"), False),  # neither image
    (_message("ins", {"A": "x"}), False),
    (_message("ins", None), False),
    (_message("del", {"ID": None}), False),
    (_message("ins", ROW | {"B": "1.505"}), False),  # the cast would round: bad_value
    (_message("ins", ROW | {"B": "1.50000"}), False),  # not rounded, but beyond the native form: Python judges
    (_message("ins", ROW | {"B": "1234.5"}), False),  # too wide
    (_message("ins", ROW | {"C": "2024-01-02 10:00:00"}), False),  # the cast would drop the time
    (_message("ins", ROW | {"C": "2024-01-02 00:00:00"}), True),  # midnight: nothing to drop
    (_message("ins", ROW | {"C": "2023-02-29"}), False),
    (_message("ins", ROW | {"N": "2147483648"}), False),
    (_message("ins", ROW | {"ID": "x"}), False),
    (_message("upd", {"N": "abc"}, {"ID": "1"}), False),
    (_message("upd", {"A": "y"}, {"ID": "1", "B": "9.999"}), False),  # the key image is checked as well
    (_message("ins", ROW | {"B": 1.5}), True),  # a number token Java prints back as written
    (_message("ins", ROW | {"B": 1.50}), True),
    (_message("ins", {"ID": "1", "A": "@"}).replace(b'"@"', b"1e5"), False),  # Java prints 100000.0
    (_message("ins", {"ID": "1", "A": "@"}).replace(b'"@"', b"1.10"), False),  # Java prints 1.1
    (_message("ins", {"ID": "1", "A": "@"}).replace(b'"@"', b"-0"), False),  # read as 0
    (_message("ins", {"ID": "1", "A": "05:06.690"}), True),  # a time of day in a string is no number token
    (_message("ins", {"ID": "1", "A": {"nested": 1}}), False),
    (_message("ins", {"ID": "1", "A": [1, 2]}), False),
    (_message("ins", {"ID": "1", "A": "{braces}"}), True),  # braces in a string value: counted outside strings
    (_message("ins", {"ID": "1", "A": '{"n": 1.10, "m": [1e5]}'}), True),  # JSON text in a string value
    (_message("ins", {"ID": "1", "A": {"n": "{"}}), False),  # nested JSON holding a brace in its string
    (_message("ins", ROW | {"A": "{", "B": "@"}).replace(b'"@"', b"1.10"), False),  # and a risky number token
    (_message("ins", {"ID": "1", "A": "caf\u00e9 \u2603"}), True),
    (_message("ins", {"ID": "1", "A": "tab\there"}), True),
    (_message("ins", {"ID": "1", "A": "\ud83d\ude00"}), False),  # escaped surrogate pair
    (_message("ins", {"ID": "1", "A": "\u0001"}), False),
    (_message("ins", ROW, table="SHOP.U"), False),  # not configured: missing_key in Python
    (_message("ins", ROW, table="shop.t"), False),
    (_message("ins", ROW, scn="1e5"), False),
    (_message("ins", ROW, scn="0100"), True),
    (_message("ins", ROW, trans="7.0"), False),
    (_message("ins", ROW, trans="7.0.1.2"), False),
    (_message("ins", ROW, seq="x"), False),
    (_message("ins", ROW, time="2024-01-02 03:04:05.5"), True),
    (_message("ins", ROW, time="2024-01-02T03:04:05Z"), True),
    (_message("ins", ROW, time=None), True),
    (_message("ins", ROW, time="2024-02-30T00:00:00"), False),
    (_message("ins", ROW, time="yesterday"), False),
    (_message("ins", ROW, time="2024-01-02T24:00:00"), False),
    (_message("ins", ROW) + b" trailing", False),
    (b'{"meta":{"op":"ins","scn":"1","trans":"1.1.1","seq":"1","table":"SHOP.T"},"data":{"ID":"1"},"Data":{}}', False),
    (_message("ins", ROW, scn="100\n"), False),
    (_message("ins", ROW, time="2024-01-02T03:04:05\n"), False),
    (_message("ins\n", ROW), False),
    (_message("ins", {"ID": "1", "A": "@"}).replace(b'"A":"@"', b'"A":"x","A":"y","B":"1.00"'), True),  # last wins
    (_message("del", {"ID": "1"}).replace(b'"op":"del"', b'"op":"ins","op":"del"'), True),
    (b'{"meta":"ins","data":{"ID":"1"}}', False),
    (b'{"meta":{"op":"ins"},"data":"row"}', False),
    (b"not json", False),
    (b"\xff\xfe", False),
    (b"", True),  # a Kafka tombstone: its control row
]


def test_corner_cases_are_taken_only_when_exact(spark):
    values = [message for message, _ in CORNER_CASES]
    flags = _compare(spark, values)
    wrong = [
        (message, expected) for (message, expected), flag in zip(CORNER_CASES, flags, strict=True) if flag != expected
    ]
    assert not wrong, f"taken natively (expected, message): {[(e, m[:120]) for m, e in wrong]}"


@pytest.mark.parametrize("spark_type", ["binary", "decimal(30,2)"])
def test_a_table_configured_with_a_type_without_native_form_is_left_to_python(spark, spark_type):
    # Binary has no Shareplex rendering; the Python check reads decimals in a 28-digit context.
    tables = {"SHOP.T": {"primary_key": ["ID"], "column_types": {"ID": "bigint", "A": spark_type}}}
    records = records_frame(spark, [(b"T", _message("ins", {"ID": "1", "A": "AA=="}), [])])
    assert dts_shareplex_json.decode_natively(records, _pipeline(tables)) is None


def test_exact_decimal_forms():
    assert exact_decimal_form(5, 2) == "-?[0-9]{1,3}(?:\\.[0-9]{1,2})?"
    assert exact_decimal_form(2, 2) == "-?0(?:\\.[0-9]{1,2})?"
    assert exact_decimal_form(7, 0) == "-?[0-9]{1,7}"
    assert exact_decimal_form(29, 0) is None


def test_two_pass_write_equals_decode(spark, tmp_path):
    history = simulate(seed=5, events=600, days=1)
    values = [r.value for r in encode_shareplex_json(history)]
    values += [b'{"not json', _message("upd", {"ID": "2"}, {"ID": "1"}), _message("TRUNCATE")]
    pipeline = _pipeline(pipeline_settings(tmp_path)["tables"])
    frame = records_frame(spark, [(b"T", value, []) for value in values])
    path = str(tmp_path / "decoded")
    N.write_decoded(
        dts_shareplex_json.decode_natively(frame, pipeline),
        frame,
        lambda rest: dts_shareplex_json.decode_in_python(rest, pipeline),
        path,
    )
    assert not (tmp_path / "decoded" / f"record_kind={N.PENDING}").exists()
    written = spark.read.parquet(path).select(*DECODED_COLUMNS)
    assert_same_frames(written, dts_shareplex_json.decode(frame, pipeline).select(*DECODED_COLUMNS))


def test_the_plans_are_bounded_and_the_most_frequent_tables_get_them(spark):
    count = dts_shareplex_native.MAX_NATIVE_TABLES + 4
    tables = {f"S.T{i}": {"primary_key": ["ID"], "column_types": {"ID": "bigint"}} for i in range(count)}
    # T0..T3 appear once, every other table twice: the four rarest are left to Python.
    values = [_message("ins", {"ID": "1"}, table=f"S.T{i}") for i in range(count) for _ in range(1 if i < 4 else 2)]
    flags = _compare(spark, values, _pipeline(tables))
    assert flags == [False] * 4 + [True] * (len(values) - 4)
