"""The native (Spark JSON reader, ``options.reader: spark``) path of debezium-json against its Python decoder.

For every record the native path takes, its decoded row must equal the Python decoder's row field for field; every
other record must be flagged and decoded in Python. Checked on simulated histories (every record of a relational
table is taken), the conformance corpus (captured Debezium and Flink messages) and hand-made corner cases: number
tokens a double does not print back, values outside a type's range, placeholders, key-change headers, layouts the
native path leaves to Python. The pipeline's two-pass write gives the same rows as ``decode``.
"""

from __future__ import annotations

import base64
import json
import random
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from archive_helpers import records_from_lines
from frame_helpers import assert_same_frames
from native_helpers import native_flags, records_frame, two_pass_write
from pyspark.sql import Row
from pyspark.sql import functions as F

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import (
    canal_json,
    dataworks_json,
    debezium_avro,
    debezium_json,
    debezium_native,
    drs_json_mysql,
    dts_avro,
    dts_shareplex_json,
    qlik_json,
)
from cdcreplay.formats.common import UNIQUE_VALUED_COLUMNS
from cdcreplay.formats.wire import native_json as N
from cdcreplay.schema import RAW_DDL
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encoders import encode

CONFORMANCE = Path(__file__).parent / "data" / "conformance"


def _pipeline(tables: dict | None = None) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="debezium-json",
        archive={"path": "unused"},
        tables=tables or {},
        options={"reader": "spark"},
    )


def _compare(spark, records, pipeline=None) -> tuple[int, int]:
    """``native_helpers.native_flags`` of debezium-json: (records taken natively, records flagged)."""
    flags = native_flags(debezium_json, records, pipeline or _pipeline())
    return sum(flags), len(flags) - sum(flags)


@pytest.mark.parametrize("seed", [3, 11])
def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path, seed):
    history = simulate(seed=seed, events=1500, days=2)
    records = [(r.key, r.value, list(r.headers)) for r in encode("debezium-json", history, tmp_path)]
    taken, flagged = _compare(spark, records_frame(spark, records))
    assert any(not value for _, value, _ in records), "the history holds tombstones"
    assert flagged == 0, "every row change and tombstone of the simulator is taken by the native path"
    assert taken == len(records)


def test_conformance_corpus_decodes_as_in_python(spark):
    files = sorted((CONFORMANCE / "debezium").glob("**/*.json"))
    records = [(None, path.read_bytes(), []) for path in files]
    for name in (
        "flink-json/debezium-data-schema-include.txt",
        "flink-json/debezium-postgres-data-replica-identity.txt",
    ):
        records += [(None, r.value.encode(), []) for r in records_from_lines(CONFORMANCE / name)]
    key = b'{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":1}}'
    keyed = [(key, value, headers) for _, value, headers in records]
    _compare(spark, records_frame(spark, records + keyed))


def _wrapped(after: dict | str, fields: list[dict], op: str = "c", extra_source: str = "") -> bytes:
    """A JsonConverter message of table shop.t with the given image text and schema fields."""
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "fields": fields, "optional": True, "field": "before"},
            {"type": "struct", "fields": fields, "optional": True, "field": "after"},
        ],
    }
    image = after if isinstance(after, str) else json.dumps(after, separators=(",", ":"))
    source = f'{{"connector":"mysql","db":"shop","table":"t","file":"bin.000002","pos":7,"row":0{extra_source}}}'
    payload = f'{{"before":null,"after":{image},"source":{source},"op":"{op}","ts_ms":1700000000000}}'
    return ('{"schema":' + json.dumps(schema, separators=(",", ":")) + ',"payload":' + payload + "}").encode()


ID = {"type": "int32", "field": "id"}
KEY = b'{"schema":{"type":"struct","fields":[{"type":"int32","field":"id"}]},"payload":{"id":1}}'


def _b64(unscaled: int) -> str:
    return base64.b64encode(unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)).decode()


CORNER_CASES = [
    # (image text, extra schema fields, taken natively)
    ('{"id":1,"x":1.5}', [{"type": "double", "field": "x"}], True),
    ('{"id":1,"x":1.50}', [{"type": "double", "field": "x"}], False),  # Java prints 1.5
    ('{"id":1,"x":1e5}', [{"type": "double", "field": "x"}], False),
    ('{"id":1,"x":12345678.5}', [{"type": "double", "field": "x"}], False),  # Java prints 1.23456785E7
    ('{"id":1,"x":0.001}', [{"type": "double", "field": "x"}], False),
    ('{"id":1,"x":0.0099}', [{"type": "double", "field": "x"}], False),  # below 10^-2: left to Python
    ('{"id":1,"x":0.08}', [{"type": "double", "field": "x"}], True),  # Java prints 0.08 and 0.066 as written
    ('{"id":1,"x":-0.066}', [{"type": "double", "field": "x"}], True),
    ('{"id":1,"x":0.05}', [{"type": "string", "field": "x"}], True),
    ('{"id":1,"x":-0}', [{"type": "int32", "field": "x"}], True),  # 0 on both paths
    ('{"id":1,"x":-0}', [{"type": "double", "field": "x"}], False),
    ('{"id":1,"x":-0}', [{"type": "string", "field": "x"}], True),
    ('{"id":1,"x":1.50}', [{"type": "string", "field": "x"}], False),  # a number token where a string is read
    ('{"id":1,"x":"1.50"}', [{"type": "string", "field": "x"}], True),  # a string token that looks like one
    ('{"id":1,"x":"NaN","y":1.50}', [{"type": "string", "field": "x"}, {"type": "float", "field": "y"}], False),
    ('{"id":1,"x":{"a":1.50}}', [{"type": "string", "field": "x"}], False),
    ('{"id":1,"x":12345678901234567890.123456789}', [{"type": "string", "field": "x"}], False),
    ('{"id":1,"x":9007199254740993}', [{"type": "int64", "field": "x"}], True),  # integers stay exact
    ('{"id":1,"x":2147483648}', [{"type": "int32", "field": "x"}], False),  # out of int: Python quarantines
    ('{"id":1,"x":"abc"}', [{"type": "int64", "field": "x"}], False),
    ('{"id":1,"x":{"a":[1,true]}}', [{"type": "string", "field": "x"}], True),
    ('{"id":1,"x":"__debezium_unavailable_value"}', [{"type": "string", "field": "x"}], False),
    ('{"id":1}', [{"type": "string", "field": "x"}], False),  # a column the schema declares is absent
    ('{"x":"a","id":1}', [{"type": "string", "field": "x"}], False),  # not in schema order
    ('{"id":1,"x":"\\ud800"}', [{"type": "string", "field": "x"}], False),
    ('{"id":1,"x":"caf\\u00e9 \\"q\\""}', [{"type": "string", "field": "x"}], True),
]
DECIMAL = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "3"}}
DECIMALS = [0, 1, -1, 5, -5, 999, -1000, 123456789, -(2**63), 2**63 - 1, 10**18, 2**70]
DATES = [0, -1, -719162, 2932896, 2932897, 19000, -25000]
MILLIS = [0, -1, 1700000000123, -62135596800000, 253402300799999, 253402300800000]


def test_corner_cases_are_taken_only_when_exact(spark):
    records, expected = [], []
    for image, fields, native in CORNER_CASES:
        records.append((KEY, _wrapped(image, [ID, *fields]), []))
        expected.append(native)
    for unscaled in DECIMALS:
        records.append((KEY, _wrapped({"id": 1, "d": _b64(unscaled)}, [ID, {**DECIMAL, "field": "d"}]), []))
        expected.append(len(base64.b64decode(_b64(unscaled))) <= 8)  # the native path takes up to 8 bytes
    for days in DATES:
        fields = [ID, {"type": "int32", "name": "io.debezium.time.Date", "field": "d"}]
        records.append((KEY, _wrapped({"id": 1, "d": days}, fields), []))
        expected.append(-719162 <= days <= 2932896)
    for millis in MILLIS:
        fields = [ID, {"type": "int64", "name": "io.debezium.time.Timestamp", "field": "d"}]
        records.append((KEY, _wrapped({"id": 1, "d": millis}, fields), []))
        expected.append(-62135596800000 <= millis <= 253402300799999)
    # a key change keeps its headers as provenance; an unknown op, a truncate and a keyless change go to Python
    records.append((KEY, _wrapped({"id": 1}, [ID]), [("__debezium.newkey", b'{"id":2}'), ("other", None)]))
    expected.append(True)
    # a header without a name (no map holds one), and one named as the native path's placeholder: Python
    records.append((KEY, _wrapped({"id": 1}, [ID]), [("__debezium.newkey", b'{"id":2}'), (None, b"x")]))
    records.append((KEY, _wrapped({"id": 1}, [ID]), [(N.NO_ENTRY_KEY, b"x")]))
    expected += [False, False]
    records += [(KEY, _wrapped({"id": 1}, [ID], op="x"), []), (KEY, _wrapped({"id": 1}, [ID], op="t"), [])]
    records += [(None, _wrapped({"id": 1}, [ID]), [])]
    expected += [False, False, False]
    # tombstones (null or empty value; with a key, an empty key or none) are control rows on both paths
    records += [(KEY, None, []), (KEY, b"", []), (b"", None, []), (None, None, [("h", b"1")])]
    expected += [True, True, True, True]
    frame = records_frame(spark, records)
    _compare(spark, frame)
    flags = {r.offset: r[N.NATIVE_FLAG] for r in debezium_json.decode_natively(frame, _pipeline()).collect()}
    assert [flags[i] for i in range(len(records))] == expected


# Hostile edits of the fields the native path reads, applied to a simulated message's payload (the schema is kept, so
# the record still matches its plan): none may crash the decode, and each decodes as the Python decoder decodes it.
PAYLOAD_EDITS = [  # (pattern, replacement, still decoded natively)
    (r'"pos":\d+', '"pos":"1x"', False),
    (r'"pos":\d+', '"pos":-5', False),
    (r'"file":"[^"]*"', '"file":"mysql-bin"', False),
    (r'"file":"[^"]*"', '"lsn":"0/16B3748","binlog":"x"', False),
    (r'"file":"[^"]*"', '"scn":"12a","binlog":"x"', False),
    (r'"file":"[^"]*"', '"commit_lsn":"00000025:00000d98:0002","binlog":"x"', False),
    (r'"row":\d+', '"row":1.5', False),
    (r'"ts_ms":\d+', '"ts_ms":" 12"', False),  # Python reads 12; the native path leaves it
    (r'"ts_ms":\d+', '"ts_ms":99999999999999999', False),
    (r'"snapshot":"[^"]*"', '"snapshot":"TRUE"', True),
    (r'"op":"[cur]"', '"op":"t"', False),
    (r'"connector":"[^"]*"', '"connector":"mongodb"', False),
    (r'"db":"[^"]*"', '"db":""', True),
    (r'"table":"[^"]*"', '"table":""', False),
    (r'"source":\{', '"source":{"ord":3,', True),  # a binlog file comes first, as in Python
    (r'"transaction":null', '"transaction":"x"', False),
    (r'"status":"[^"]*"', '"status":12', True),
    (r'"status":"[^"]*"', '"status":{"a":[1,"\\u0001"]}', False),
    (r'"amount":"[^"]*"', '"amount":"%%"', False),
    (r'"amount":"[^"]*"', '"amount":"AAAAAAAAAAAAAAAAAAAAAAAA"', False),  # 18 bytes: Python decodes it
    (r'"created_at":\d+', '"created_at":"soon"', False),
    (r'"customer_id":\d+', '"customer_id":99999999999', False),
    (r"\}$", "}}", False),
    (r"\}$", ',"payload":{"op":"x"}}', False),  # a second payload member: the last wins in Python, not in Spark
    (r'"table":"[^"]*"', '"table":1.50', False),  # the reader would name the table 1.5
    (r'"weight":[0-9.]+', '"weight":2.50', False),  # a double token Java prints as 2.5
    (r'"weight":[0-9.]+', '"weight" : 2.5', True),
    (r'"email":"[^"]*"', '"email":1e3', False),
]


def test_hostile_edits_never_crash_and_decode_as_in_python(spark, tmp_path):
    history = simulate(seed=7, events=200, days=1)
    messages = [r for r in encode("debezium-json", history, tmp_path) if r.value][:60]
    records = []
    for pattern, replacement, _ in PAYLOAD_EDITS:
        for message in messages:
            schema, payload = message.value.decode().split(',"payload":', 1)
            edited = re.sub(pattern, lambda _, text=replacement: text, payload, count=1)
            if edited != payload:
                records.append((message.key, f'{schema},"payload":{edited}'.encode(), list(message.headers)))
                break
        else:
            raise AssertionError(f"no simulated message has {pattern}")
    frame = records_frame(spark, records)
    _compare(spark, frame)
    flags = {r.offset: r[N.NATIVE_FLAG] for r in debezium_json.decode_natively(frame, _pipeline()).collect()}
    assert [flags[i] for i in range(len(records))] == [native for _, _, native in PAYLOAD_EDITS]


def test_configured_keys_and_types(spark):
    """A configured primary key is applied natively; a table with configured column types goes to Python."""
    fields = [ID, {"type": "string", "field": "code"}]
    records = [(KEY, _wrapped({"id": 1, "code": "7"}, fields), [])]
    keyed = _pipeline({"shop.t": {"primary_key": ["code"]}})
    assert _compare(spark, records_frame(spark, records), keyed) == (1, 0)
    typed = _pipeline({"shop.t": {"column_types": {"code": "int"}}})
    assert _compare(spark, records_frame(spark, records), typed) == (0, 1)
    # up to four key columns natively, more in Python (the native key is built from at most four values)
    image = {"id": 1, "a": "1", "b": "2", "c": "3", "d": "4"}
    fields = [ID, *({"type": "string", "field": name} for name in "abcd")]
    wide = records_frame(spark, [(KEY, _wrapped(image, fields), [])])
    assert _compare(spark, wide, _pipeline({"shop.t": {"primary_key": list("abcd")}})) == (1, 0)
    assert _compare(spark, wide, _pipeline({"shop.t": {"primary_key": ["id", *"abcd"]}})) == (0, 1)


def test_number_tokens_that_pass_the_guard_read_back_as_written(spark):
    """What the guard lets through, Spark's reader prints exactly as written (Java's Double.toString)."""
    generator = random.Random(7)
    tokens = [f"{generator.choice(['', '-'])}{generator.randint(0, 9999999)}.{generator.randint(1, 10**9)}"
              for _ in range(3000)] + [repr(generator.uniform(-1e6, 1e6)) for _ in range(3000)]  # fmt: skip
    messages = [(token, f'{{"m":{{"x":{token}}}}}') for token in tokens]
    frame = spark.createDataFrame(messages, "token string, text string")
    read = frame.select(
        "token",
        N.plain_numbers(F.col("text")).alias("plain"),
        F.from_json("text", "struct<m map<string,string>>")["m"]["x"].alias("read"),
    )
    passed = read.where("plain").collect()
    assert len(passed) > 500
    assert [r.token for r in passed if r.read != r.token] == []


def test_the_shape_verdict_counts_a_refused_text_again_without_its_strings_stripping_it_once(spark):
    """``with_shape_verdict``: the raw counts, then, for a text they refuse, the same counts over the text without its
    strings' contents; the stripped text is one projection's column, not an expression repeated in every count (as
    one CASE expression, the optimized plan held it six times and Spark computed it six times)."""
    texts = ['{"a":"x"}', '{"a":"{\\"b\\":1}"}', '{"a":{"b":1}}', '{"a":"x"}}', None]
    frame = spark.createDataFrame([(text,) for text in texts], "text string")
    verdict = N.with_shape_verdict(
        frame, lambda text: N.containers_accounted_for(text, F.lit(1), F.lit(0)), F.col("text")
    )
    assert verdict.columns == ["text", N.SHAPED]
    # plain; JSON text inside a string; nested JSON; a brace after the object; no text (not UTF-8)
    assert [row[N.SHAPED] for row in verdict.collect()] == [True, True, False, False, None]
    optimized = verdict._jdf.queryExecution().optimizedPlan().toString()
    assert optimized.count("regexp_replace(regexp_replace(") == 1


def test_two_pass_write_equals_decode(spark, tmp_path):
    history = simulate(seed=5, events=600, days=1)
    records = [(r.key, r.value, list(r.headers)) for r in encode("debezium-json", history, tmp_path)]
    records.append((KEY, b'{"not json', []))
    frame = records_frame(spark, records)
    pipeline = _pipeline()
    path = str(tmp_path / "decoded")
    written = two_pass_write(spark, debezium_json, frame, pipeline, path)
    assert_same_frames(written, debezium_json.decode(frame, pipeline))
    # Columns of unique values are written without a dictionary, the names and few-valued columns with one.
    change_files = list(Path(path, "record_kind=changelog").glob("*.parquet"))
    assert change_files
    for changes in change_files:
        dictionaries = _dictionary_encoded(changes)
        assert set(UNIQUE_VALUED_COLUMNS) <= dictionaries.keys(), "a listed column is not in the decoded files"
        assert {column for column in UNIQUE_VALUED_COLUMNS if dictionaries.get(column)} == set(), changes
        assert all(dictionaries[column] for column in ("table_id", "op", "after.key_value.key")), dictionaries


def _dictionary_encoded(parquet_file: Path) -> dict[str, bool]:
    """Per column of the file's first row group, whether it has a dictionary page."""
    row_group = pq.ParquetFile(parquet_file).metadata.row_group(0)
    chunks = (row_group.column(i) for i in range(row_group.num_columns))
    return {chunk.path_in_schema: chunk.dictionary_page_offset is not None for chunk in chunks}


READER_CASES = [  # (options.reader, the run's records (or where they stand to the format's threshold), decoded natively)
    (None, None, False),  # auto, size unknown (``decode`` outside a run): Python
    (None, "below", False),
    (None, "at", True),
    ("auto", "at", True),
    ("spark", 1, True),
    ("spark", None, True),
    ("python", 10**9, False),
]


# Where `reader: auto` goes native, per format: from_avro's pass pays for itself sooner than the JSON reader's, and
# Shareplex's, which needs no pass to find its tables, sooner than the others'.
THRESHOLDS = {
    debezium_json: N.NATIVE_MIN_RECORDS,
    canal_json: N.NATIVE_MIN_RECORDS,
    dataworks_json: dataworks_json.NATIVE_MIN_RECORDS,
    drs_json_mysql: N.NATIVE_MIN_RECORDS,
    dts_shareplex_json: dts_shareplex_json.NATIVE_MIN_RECORDS,
    debezium_avro: debezium_avro.AVRO_NATIVE_MIN_RECORDS,
    dts_avro: dts_avro.NATIVE_MIN_RECORDS,
    qlik_json: qlik_json.NATIVE_MIN_RECORDS,
}


@pytest.mark.parametrize("module", THRESHOLDS, ids=lambda module: module.FORMAT_ID)
@pytest.mark.parametrize("reader, records, native", READER_CASES)
def test_the_reader_option_and_the_run_size_choose_the_path(module, reader, records, native):
    threshold = THRESHOLDS[module]
    records = {"below": threshold - 1, "at": threshold}.get(records, records)
    options = {} if reader is None else {"reader": reader}
    pipeline = PipelineConfig(name="p", format=module.FORMAT_ID, archive={"path": "unused"}, options=options)
    assert module.reads_natively(pipeline, records) is native


def test_the_schema_pass_samples_a_large_input_and_finds_nothing_it_cannot_vouch_for(spark, tmp_path):
    history = simulate(seed=5, events=800, days=1)
    frame = records_frame(
        spark, [(r.key, r.value, list(r.headers)) for r in encode("debezium-json", history, tmp_path)]
    )
    every_schema = {plan.text for plan in debezium_native.schema_plans(frame)}
    sampled = {plan.text for plan in debezium_native.schema_plans(frame, every=7)}
    assert sampled and sampled <= every_schema
    # A sample too thin to meet any schema leaves the whole input to the Python decoder: no native pass at all.
    thin = N.SCHEMA_SAMPLE * 10**7
    assert debezium_json.decode_natively(frame, _pipeline(), record_count=thin) is None
    native = debezium_json.decode_natively(frame, _pipeline(), record_count=N.SCHEMA_SAMPLE * 7)
    assert native.where(F.col(N.NATIVE_FLAG)).count() > 0


def test_offset_ranges_join_neighbours_then_the_nearest():
    offsets = {("t", 0): [3, 4, 5, 9, 40], ("t", 1): [7]}
    assert N.offset_ranges(offsets, 64) == [(("t", 0), 3, 5), (("t", 0), 9, 9), (("t", 0), 40, 40), (("t", 1), 7, 7)]
    # Over the limit, the smallest gap goes first (5 -> 9), then the next (9 -> 40); a partition keeps its range.
    assert N.offset_ranges(offsets, 3) == [(("t", 0), 3, 9), (("t", 0), 40, 40), (("t", 1), 7, 7)]
    assert N.offset_ranges(offsets, 1) == [(("t", 0), 3, 40), (("t", 1), 7, 7)]


def test_the_second_pass_reads_only_around_the_flagged_records(spark, tmp_path):
    """The filter keeps every flagged record, and reaches the Parquet reader (which skips row groups by it)."""
    rows = [("a", p, o, None, 0, b"k", b"v", []) for p in (0, 1) for o in range(100)] + [
        ("b", 0, 5, None, 0, b"k", b"v", [])
    ]
    archive = str(tmp_path / "archive")
    spark.createDataFrame(rows, RAW_DDL).write.parquet(archive)
    records = spark.read.parquet(archive)
    pending = [Row(topic="a", partition=1, offset=o) for o in (10, 11, 50)] + [Row(topic="b", partition=0, offset=5)]
    near = N.around(pending)
    kept = sorted((r.topic, r.partition, r.offset) for r in records.where(near).collect())
    assert kept == [("a", 1, 10), ("a", 1, 11), ("a", 1, 50), ("b", 0, 5)]
    plan = records.where(near)._jdf.queryExecution().executedPlan().toString()
    assert (
        "PushedFilters: [Or(And(And(EqualTo(topic,a),EqualTo(partition,1)),Or(And(GreaterThanOrEqual(offset,10)" in plan
    )
    assert N.around([]) is None
    assert N.around([Row(topic="a", partition=0, offset=o) for o in range(N.FEW_PENDING + 1)]) is None
