"""The native (Spark JSON reader, ``options.reader: spark``) path of canal-json against its Python decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python. Checked on simulated histories (every row change of the
simulator is taken), the conformance corpus (DTS documentation samples, Flink's Canal captures) and hand-made corner
cases: multi-row messages, key changes, values outside their type, number tokens a double does not print back,
nested values, layouts and messages the native path leaves to Python. The pipeline's two-pass write gives the same
rows as ``decode``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from archive_helpers import records_from_lines
from frame_helpers import assert_same_frames
from pyspark.sql import functions as F

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import canal_json, canal_native
from cdcreplay.formats.common import DECODED_COLUMNS
from cdcreplay.formats.wire import native_json as N
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encoders import encode

CONFORMANCE = Path(__file__).parent / "data" / "conformance"
RECORD_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)


def _pipeline(tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="canal-json",
        archive={"path": "unused"},
        tables=tables or {},
        options={"reader": "spark", **options},
    )


def _frame(spark, records: list[tuple]):
    """(key, value) pairs -> archive records at offsets 0.."""
    rows = [("t", 0, offset, None, key, value, []) for offset, (key, value) in enumerate(records)]
    return spark.createDataFrame(rows, RECORD_DDL)


def _canonical(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _rows(frame) -> Counter:
    """The decoded rows as a multiset (a key change gives two rows of one record and row index)."""
    return Counter(_canonical(r.asDict()) for r in frame.select(*DECODED_COLUMNS).collect())


def _by_record(rows: Counter) -> dict:
    found: dict = {}
    for text, count in rows.items():
        row = json.loads(text)
        found.setdefault(row["offset"], Counter())[text] += count
    return found


def _compare(spark, records, pipeline=None) -> tuple[int, int]:
    """Native rows equal the Python decoder's for the records the native path takes; ``decode`` equals the Python
    decoder on every record. Returns (records taken natively, records flagged)."""
    pipeline = pipeline or _pipeline()
    native = canal_json.decode_natively(records, pipeline)
    assert native is not None
    native = native.cache()
    reference = _rows(canal_json.decode_in_python(records, pipeline))
    taken = _by_record(_rows(native.where(F.col(N.NATIVE_FLAG))))
    expected = _by_record(reference)
    differences = {
        offset: (rows, expected.get(offset)) for offset, rows in taken.items() if rows != expected.get(offset)
    }
    assert not differences, f"native rows differ from the Python decoder's: {list(differences.items())[:2]}"
    flags = native.groupBy("offset").agg(F.collect_set(N.NATIVE_FLAG).alias("flags")).collect()
    assert all(len(r.flags) == 1 for r in flags), "a record is decoded by exactly one path"
    assert _rows(canal_json.decode(records, pipeline)) == reference
    counts = Counter(r.flags[0] for r in flags)
    native.unpersist()
    return counts.get(True, 0), counts.get(False, 0)


def _flags(frame, pipeline=None) -> list[bool]:
    native = canal_json.decode_natively(frame, pipeline or _pipeline())
    flags = {r.offset: r[N.NATIVE_FLAG] for r in native.select("offset", N.NATIVE_FLAG).collect()}
    return [flags[i] for i in range(len(flags))]


@pytest.mark.parametrize("seed", [3, 11, 19])
def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path, seed):
    history = simulate(seed=seed, events=1500, days=2)
    records = [(r.key, r.value) for r in encode("canal-json", history, tmp_path)]
    taken, flagged = _compare(spark, _frame(spark, records))
    ddl = sum(b'"isDdl":true' in value for _, value in records)
    assert ddl > 0 and flagged >= ddl
    assert taken >= 0.9 * (len(records) - ddl), "nearly every row change of the simulator is taken natively"


def test_simulated_history_with_declared_layouts(spark, tmp_path):
    history = simulate(seed=5, events=400, days=1)
    frame = _frame(spark, [(r.key, r.value) for r in encode("canal-json", history, tmp_path)])
    taken, _ = _compare(spark, frame, _pipeline(legacy_swapped=False))
    assert taken > 0
    # The legacy layout is decoded in Python only: no native pass at all.
    assert canal_json.decode_natively(frame, _pipeline(legacy_swapped=True)) is None


def test_conformance_corpus_decodes_as_in_python(spark):
    files = sorted((CONFORMANCE / "vendor-doc-samples" / "alibaba-dts-canal-json").glob("*.json"))
    records = [(None, path.read_bytes()) for path in files]
    for name in ("flink-json/canal-data.txt", "flink-json/canal-data-with-init.txt"):
        records += [(None, r.value.encode()) for r in records_from_lines(CONFORMANCE / name)]
    taken, flagged = _compare(spark, _frame(spark, records))
    assert taken > 0 and flagged > 0


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _message(rows, old=None, kind="INSERT", types=None, pk=("id",), table="t", extra="") -> bytes:
    types = types or {"id": "int", "v": "varchar(8)"}
    data = rows if isinstance(rows, str) else json.dumps(rows, separators=(",", ":"))
    old_text = old if isinstance(old, str) else json.dumps(old, separators=(",", ":"))
    return (
        f'{{"data":{data},"database":"shop","es":1700000000000,"id":7,"isDdl":false,'
        f'"mysqlType":{_compact(types)},"old":{old_text},"pkNames":{_compact(list(pk))},"sql":"",'
        f'"sqlType":{{"id":4}},"table":"{table}","ts":1700000000005,"type":"{kind}"{extra}}}'
    ).encode()


ALL_TYPES = {
    "id": "int",
    "b": "tinyint(1)",
    "big": "bigint",
    "u": "bigint unsigned",
    "d": "decimal(5,2)",
    "f": "float",
    "x": "double",
    "day": "date",
    "at": "datetime(3)",
    "ts": "timestamp",
    "bin": "varbinary(8)",
    "y": "year",
}
TYPED_VALUES = {  # column -> [(value, taken natively)]
    "b": [("1", True), ("true", True), ("yes", False), ("2", False)],
    "big": [("-9223372036854775808", True), ("9223372036854775808", False), ("1.0", False)],
    "u": [("18446744073709551615", True), ("18446744073709551616", True), ("184467440737095516160", False)],
    "d": [
        ("123.45", True),
        ("-0.005", True),
        ("999.995", False),
        ("1e2", False),
        ("abc", False),
        ("", False),
        ("99.995", True),
        ("-999.99", True),
        ("1000", False),
        ("12.5\n", False),
    ],
    "f": [("1.5", True), ("-2E10", True), ("NaN", False), ("1.5f", False)],
    "x": [("3.14", True), ("inf", False)],
    "day": [
        ("2024-02-29", True),
        ("2023-02-29", False),
        ("2024-2-9", False),
        ("2000-02-29", True),
        ("1900-02-29", False),
        ("2023-04-31", False),
        ("2023-12-31", True),
        ("0000-01-01", False),
    ],
    "at": [("2024-01-02 03:04:05.120", True), ("2024-01-02 24:00:00", False), ("2024-01-02T03:04:05", False)],
    "ts": [("2024-01-02 03:04:05", True), ("2024-01-02", True)],
    "bin": [("ab\u00ff", True), ("\u0000", False), ("\u0100", False), ("", True)],
    "y": [("2024", True), ("2147483648", False), (" 1", False), ("2147483647", True), ("-2147483648", True)],
}


def test_typed_values_are_taken_only_when_their_check_vouches(spark):
    records, expected = [], []
    for column, cases in TYPED_VALUES.items():
        for value, native in cases:
            records.append((None, _message([{"id": "1", column: value}], types=ALL_TYPES)))
            expected.append(native)
    frame = _frame(spark, records)
    _compare(spark, frame)
    assert _flags(frame) == expected


CORNER_CASES = [  # (message, taken natively)
    (_message([{"id": "1", "v": "a"}, {"id": "2", "v": None}]), True),  # two rows, row_index 0 and 1
    (_message([{"id": "1", "v": "a"}, {"id": "2", "v": "b"}], kind="INIT"), True),
    (_message([{"id": "1", "v": "a"}], kind="DELETE"), True),
    (_message([{"id": "1", "v": "b"}], old=[{"v": "a"}], kind="UPDATE"), True),
    (_message([{"id": "1", "v": "b"}], old=[{"v": None}], kind="UPDATE"), True),  # was NULL
    (_message([{"id": "2", "v": "b"}], old=[{"id": "1"}], kind="UPDATE"), True),  # a key change: DELETE + UPDATE
    (_message([{"id": "2", "v": "b"}, {"id": "3", "v": "c"}], old=[{"id": "1"}], kind="UPDATE"), True),  # short old
    (_message([{"id": "2", "v": "b"}], old=[{"id": None}], kind="UPDATE"), False),  # old key NULL: quarantined
    (_message([{"id": "2", "v": "b"}], old=[{"zz": "q"}], kind="UPDATE"), True),  # a column mysqlType lacks
    (_message([{"id": "2", "v": "b"}], old=[None], kind="UPDATE"), False),  # a null row of old: left to Python
    (_message([{"id": "1", "v": "b"}], old=[{"id": "x"}], kind="UPDATE"), False),  # an old value its type refuses
    (_message([{"id": "1", "v": "b"}], old=[{"id": "x"}], kind="INSERT"), True),  # old is not read for an INSERT
    (_message([{"id": "1", "v": "b"}], kind="insert"), True),
    (_message([{"id": str(i), "v": "a"} for i in range(5000)], kind="INIT"), True),  # one check over 5,000 rows
    (_message([{"id": str(i), "v": "a"} for i in range(99)] + [{"id": "x", "v": "a"}], kind="INIT"), False),
    (_message([{"v": "a"}]), False),  # no key value: missing_key
    (_message([{"id": None, "v": "a"}]), False),
    (_message([{"id": "1", "v": "a"}, None]), False),  # a null row: Python quarantines it (and keeps the other)
    (_message([]), False),
    (_message("null", kind="DELETE"), False),
    (_message("null", old=[{"id": "1"}], kind="DELETE"), False),  # the legacy layout's DELETE
    (_message([{"id": "1", "v": "a"}], kind="TRUNCATE"), False),
    (_message([{"id": "1", "v": "a"}], kind="ALTER"), False),
    (_message([{"id": "1", "v": "a"}], kind="MERGE"), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"isDdl":false', b'"isDdl":true'), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"isDdl":false', b'"isDdl":"no"'), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"es":1700000000000', b'"es":"1"'), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"es":1700000000000', b'"es":-99999999999999999'), True),  # no time
    (_message([{"id": "1", "v": "a"}]).replace(b'"es":1700000000000', b'"es":999999999999999'), True),  # no time
    (_message([{"id": "1", "v": "a"}]).replace(b'"es":1700000000000,', b""), True),  # no es: NULL position part
    (_message([{"id": "1", "v": "a"}]).replace(b'"id":7', b'"id":1.5'), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"pkNames":["id"]', b'"pkNames":null'), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"pkNames":["id"]', b'"pkNames":[]'), False),
    (_message('[{"id":"1","v":1.50}]'), False),  # a number token Java prints as 1.5
    (_message('[{"id":"1","v":1.5}]'), False),  # any number token where text is read: left to Python
    (_message('[{"id":1,"v":"a"}]'), False),  # even an integer token (which would read the same)
    (_message('[{"id":"1","v":{"a":1}}]'), False),  # nested JSON
    (_message('[{"id":"1","v":["a"]}]'), False),
    (_message('[{"id":"1","v":"{x}"}]'), True),  # a brace inside a string value: counted outside strings
    (_message('[{"id":"1","v":"{\\"json\\": \\"inside\\", \\"n\\": 1.50}"}]'), True),  # JSON text in a column
    (_message('[{"id":"1","v":"[1, {2}] ]"}]'), True),
    (_message('[{"id":"1","v":"a\\\\"},{"id":"2","v":"}\\\\\\""}]'), True),  # escaped backslashes, a quote
    (_message('[{"id":"1","v":{"a":"{"}}]'), False),  # nested JSON holding a brace in its string
    (_message('[{"id":"1","v":"{"},{"id":"2","v":[1]}]'), False),  # a brace in one value, an array in the next
    (_message('[{"id":"1","v":"{","w":1.50}]'), False),  # a brace in one value, a number token in the next
    (_message([{"id": "1", "v": '{"a":"}\\' * 50_000}]), True),  # 300 KB of escapes: no recursion per character
    (_message([{"id": "1", "v": "{"}]) + b"}", False),  # text after the object
    (_message([{"id": "1", "v": "{"}]) + b'"}"}', False),
    (_message('[{"id":"1","v":"12:30:00.120"}]'), True),  # a time of day is no number token
    (_message('[{"id":"1","v":"a,1.50"}]'), True),  # inside a string: no number token
    (_message('[{"id":"1","v":"\\ud800"}]'), False),
    (_message('[{"id":"1","v":"\\udc00"}]'), False),  # a lone low surrogate
    (_message('[{"id":"1","v":"\\ud83d\\ude00"}]'), False),  # a pair: one character, left to Python too
    (_message('[{"id":"1","v":"\\ud800"},{"id":"2","v":"a"}]'), False),  # quarantined once, as a whole
    (_message('[{"id":"1","v":"caf\\u00e9 \\"q\\""}]'), True),
    (_message('[{"id":"1","v":"a","v":"b"}]'), True),  # the last of a repeated name wins on both paths
    (_message([{"id": "1", "v": "a"}]) + b" ", False),
    (_message([{"id": "1", "v": "a"}]) + b"}", False),
    (_message([{"id": "1", "v": "a"}]) + b'{"a":1}', False),
    (b"\xef\xbb\xbf" + _message([{"id": "1", "v": "a"}]), False),
    (_message([{"id": "1", "v": "a"}]).replace(b'"sqlType":{"id":4}', b'"sqlType":{"id":[4]}'), False),
    (_message([{"id": "1", "v": "a"}], extra=',"gtid":null'), True),
    (_message([{"id": "1", "v": "a"}], types={"id": "int", "v": "decimal(40,2)"}), False),  # wider than checked
    (_message([{"id": "1", "v": "a"}], types={"id": "int", "v": None}), False),
    (_message([{"id": "1", "v": "a"}], pk=("v", "id")), True),
    (_message([{"id": "1", "v": "a"}], table=""), False),
    (b'{"not json', False),
    (b"\xff\xfe", False),
]


def test_corner_cases_are_taken_only_when_exact(spark):
    records = [(None, message) for message, _ in CORNER_CASES]
    # tombstones (null or empty value; with a key, an empty key or none) are control rows on both paths
    records += [(b"t", None), (b"t", b""), (b"", None), (None, None)]
    expected = [native for _, native in CORNER_CASES] + [True] * 4
    frame = _frame(spark, records)
    _compare(spark, frame)
    assert _flags(frame) == expected


def test_configured_keys_and_types(spark):
    """A configured primary key is applied natively (a key change follows it); a table with configured column
    types goes to Python."""
    records = [(None, _message([{"id": "1", "v": "b"}], old=[{"v": "a"}], kind="UPDATE"))]
    keyed = _pipeline({"shop.t": {"primary_key": ["v"]}})
    assert _compare(spark, _frame(spark, records), keyed) == (1, 0)
    typed = _pipeline({"shop.t": {"column_types": {"v": "int"}}})
    assert canal_json.decode_natively(_frame(spark, records), typed) is None
    two = [*records, (None, _message([{"id": "1", "v": "a"}], table="u"))]
    assert _compare(spark, _frame(spark, two), typed) == (1, 1)


# Hostile edits of the fields the native path reads, applied to a simulated message: none may crash the decode, and
# each decodes as the Python decoder decodes it.
EDITS = [  # (pattern, replacement, still decoded natively)
    (r'"type":"[A-Z]+"', '"type":"TRUNCATE"', False),
    (r'"type":"[A-Z]+"', '"type":null', False),
    (r'"type":"[A-Z]+"', '"type":1', False),
    (r'"database":"[^"]*"', '"database":null', True),  # a table of its own (the sample sees it)
    (r'"table":"[^"]*"', '"table":1.50', False),
    (r'"es":\d+', '"es":null', True),
    (r'"es":\d+', '"es":1.5', False),
    (r'"ts":\d+', '"ts":"x"', False),
    (r'"id":\d+,"isDdl"', '"id":-3,"isDdl"', True),
    (r'"mysqlType":\{', '"mysqlType":{"extra":"int",', True),  # a table version of its own
    (r'"pkNames":\[[^\]]*\]', '"pkNames":"id"', False),
    (r'"old":null', '"old":{}', False),
    (r'"old":null', '"old":[1]', False),
    (r'"data":\[', '"data":[{"order_id":"1"},', False),  # a row without all of its key
    (r'"data":\[\{', '"data":[{"zz":{"a":1},', False),
    (r'"sql":""', '"sql":"{"', True),  # a brace inside a string: counted outside strings
    (r'"sql":""', '"sql":"}{"', True),
    (r'"sql":""', '"sql":"}{\\"\\\\"', True),  # an escaped quote and backslash too
    (r'"gtid":null', '"gtid":[1.50]', False),
    (r"\}$", "}}", False),
    (r'"updated_at":"[^"]*"', '"updated_at":"2024-13-01 00:00:00.000"', False),
    (r'"amount":"[^"]*"', '"amount":"%%"', False),
    (r'"amount":"[^"]*"', '"amount":"99999999999.5"', False),
    (r'"weight":"[^"]*"', '"weight":2.50', False),
    (r'"weight":"[^"]*"', '"weight" : "2.5"', False),  # not compact JSON: left to Python
    (r'"status":"[^"]*"', '"status":12', False),  # a number token where text is read: left to Python
    (r'"email":"[^"]*"', '"email":1e3', False),
    (r'"customer_id":"[^"]*"', '"customer_id":"99999999999"', False),
]


def test_hostile_edits_never_crash_and_decode_as_in_python(spark, tmp_path):
    history = simulate(seed=7, events=300, days=1)
    messages = [r for r in encode("canal-json", history, tmp_path) if r.value and b'"isDdl":false' in r.value]
    records = []
    for pattern, replacement, _ in EDITS:
        for message in messages:
            text = message.value.decode()
            edited = re.sub(pattern, lambda _, new=replacement: new, text, count=1)
            if edited != text:
                records.append((message.key, edited.encode()))
                break
        else:
            raise AssertionError(f"no simulated message has {pattern}")
    frame = _frame(spark, records)
    _compare(spark, frame)
    assert _flags(frame) == [native for _, _, native in EDITS]


def test_two_pass_write_equals_decode(spark, tmp_path):
    history = simulate(seed=5, events=600, days=1)
    records = [(r.key, r.value) for r in encode("canal-json", history, tmp_path)]
    records += [(None, b'{"not json'), (None, _message([{"id": "2", "v": "b"}], old=[{"id": "1"}], kind="UPDATE"))]
    frame = _frame(spark, records)
    pipeline = _pipeline()
    path = str(tmp_path / "decoded")
    N.write_decoded(
        canal_json.decode_natively(frame, pipeline),
        frame,
        lambda rest: canal_json.decode_in_python(rest, pipeline),
        path,
    )
    written = spark.read.parquet(path)
    assert not (tmp_path / "decoded" / f"record_kind={N.PENDING}").exists()
    assert_same_frames(written.select(*DECODED_COLUMNS), canal_json.decode(frame, pipeline).select(*DECODED_COLUMNS))


def test_the_table_pass_is_bounded_and_samples(spark, tmp_path):
    history = simulate(seed=5, events=800, days=1)
    frame = _frame(spark, [(r.key, r.value) for r in encode("canal-json", history, tmp_path)])
    every_table = set(canal_native.table_plans(frame, _pipeline()))
    sampled = set(canal_native.table_plans(frame, _pipeline(), every=7))
    assert sampled and sampled <= every_table
    many = [(None, _message([{"id": "1", "v": "a"}], table=f"t{i}")) for i in range(canal_native.MAX_NATIVE_TABLES + 4)]
    taken, flagged = _compare(spark, _frame(spark, many))
    assert (taken, flagged) == (canal_native.MAX_NATIVE_TABLES, 4)
