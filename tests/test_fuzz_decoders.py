"""Hostile input for every registered decoder: random bytes, random JSON-ish text and mutated valid messages.

The formats come from the registry, so a new format is fuzzed without touching this file (its valid messages come
from its simulator encoder and the conformance corpus, or from ``EXTRA_SEEDS`` when it has no encoder). Hypothesis
draws a whole batch per example -- random bytes and JSON-ish text, then mutated valid messages: flipped, cut, inserted
and repeated bytes; deleted, retyped and replaced JSON fields, huge numbers, deep nesting, odd unicode, duplicate
keys -- and the batch goes through Spark once: one job per example keeps the file fast. The search is derandomized
and keeps no example database, so CI sees the same inputs every time; ``CDCREPLAY_FUZZ_EXAMPLES=20`` searches longer
locally. There is no shrinking (shrinking a Spark batch would run hundreds of jobs): a failure names the exact
records that broke the property instead, and a crashing batch is bisected down to the record that crashes it.

Properties, checked per record against an oracle computed here (independent of the job's own accounting code):
- no exception escapes the decoder: building and collecting the decoded batch succeeds;
- every input record is in the output and no output row names a record that was not input;
- every record falls in exactly one accounting class: quarantined (any quarantine row), else changelog, else control;
- a quarantine row carries the record's raw key and value bytes, its coordinates, a known reason code and a detail;
- a record rejected as a whole (not JSON, not UTF-8, not Avro, unknown schema, decoder error) is exactly one row.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path

import pytest
from archive_helpers import Record, records_from_lines, write_parquet
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cdcreplay import archive
from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import REGISTRY, decoder
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_drs_dds import encode_drs_dds
from cdcreplay_lab.simulator.encoders import ENCODERS

pytestmark = pytest.mark.timeout(600)

# A format read another way is fuzzed as a case of its own: the name, then the format and the options it forces.
READERS = {
    "canal-json:reader=spark": ("canal-json", {"reader": "spark"}),
    "dataworks-json:reader=spark": ("dataworks-json", {"reader": "spark"}),
    "debezium-json:reader=spark": ("debezium-json", {"reader": "spark"}),
    "dts-avro:reader=spark": ("dts-avro", {"reader": "spark"}),
    "dts-shareplex-json:reader=spark": ("dts-shareplex-json", {"reader": "spark"}),
    "drs-json-mysql:reader=spark": ("drs-json-mysql", {"reader": "spark"}),
    "drs-json-rdbms:reader=spark": ("drs-json-rdbms", {"reader": "spark"}),
    "drs-avro:reader=spark": ("drs-avro", {"reader": "spark"}),
    "qlik-json:reader=spark": ("qlik-json", {"reader": "spark"}),
    "qlik-avro:reader=spark": ("qlik-avro", {"reader": "spark"}),
}
FORMATS = sorted(REGISTRY) + sorted(READERS)
CONFORMANCE = Path(__file__).parent / "data" / "conformance"
KNOWN_REASONS = frozenset(value for name, value in vars(S).items() if name.startswith("REASON_"))
# Reasons that reject a record as a whole: such a record is one quarantine row, nothing else.
WHOLE_RECORD_REASONS = frozenset(
    {S.REASON_NOT_JSON, S.REASON_NOT_UTF8, S.REASON_BAD_AVRO, S.REASON_UNKNOWN_SCHEMA, S.REASON_DECODE_ERROR}
)
KINDS = ("changelog", "control", "quarantine")
TIMESTAMP = datetime(2026, 1, 1, tzinfo=UTC)
RANDOM_BATCH = {"min_size": 20, "max_size": 50}
MUTATED_BATCH = {"min_size": 40, "max_size": 100}
# Batches per format and test. Hypothesis' first batch is its simplest one, so 2 gives one varied batch; raise it
# locally (CDCREPLAY_FUZZ_EXAMPLES=20) to search longer.
FUZZ_SETTINGS = settings(
    max_examples=int(os.environ.get("CDCREPLAY_FUZZ_EXAMPLES", "2")),
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# Captured real messages per format, one message per file or per line (the corpus under tests/data/conformance).
CORPUS_FILES = {
    "debezium-json": ["debezium/doc-examples/*-op-*.json", "debezium/doc-examples/*-txn-*.json",
                      "debezium/connector-common-json/*.json"],
    "canal-json": ["vendor-doc-samples/alibaba-dts-canal-json/*.json"],
    "dts-shareplex-json": ["vendor-doc-samples/alibaba-dts-shareplex-json/*.json"],
    "dataworks-json": ["vendor-doc-samples/alibaba-dataworks-kafka-json/*.json"],
    "drs-json-mysql": ["vendor-doc-samples/huawei-drs-json-mysql/*.json"],
    "drs-json-rdbms": ["vendor-doc-samples/huawei-drs-json-gaussdb-pg-oracle-sqlserver/*.json"],
    "drs-dds-json": ["vendor-doc-samples/huawei-drs-json-mongodb-dds/*.json"],
    "dts-avro": ["synthetic-dts-avro/*.avro"],
    "qlik-json": ["qlik-replicate/*.json"],
}  # fmt: skip
CORPUS_LINES = {
    "debezium-json": ["flink-json/debezium-data-schema-include.txt",
                      "flink-json/debezium-postgres-data-replica-identity.txt"],
    "canal-json": ["flink-json/canal-data.txt", "flink-json/canal-data-with-init.txt"],
}  # fmt: skip
# Formats without a simulator encoder: where their valid messages come from, and the pipeline settings they need.
EXTRA_SEEDS = {"drs-dds-json": lambda history: encode_drs_dds(history)}
# Options a format needs beyond what its encoder's settings give (none today; a new format adds its entry here).
EXTRA_SETTINGS: dict[str, dict] = {}


@dataclass(frozen=True)
class Message:
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    topic: str = "fuzz"


@dataclass(frozen=True)
class FormatCase:
    pipeline: PipelineConfig
    seeds: tuple[Message, ...]


# -- the valid messages and settings of each format --------------------------------------------------------------------


def _load_case(case: str, folder: Path) -> FormatCase:
    fmt, forced_options = READERS.get(case, (case, {}))
    history = simulate(seed=5, events=40, days=1)
    settings_: dict = dict(EXTRA_SETTINGS.get(fmt, {}))
    if fmt in ENCODERS:
        records = list(ENCODERS[fmt].encode(history, folder))
        settings_ = {**ENCODERS[fmt].pipeline(folder), **settings_}
    elif fmt in EXTRA_SEEDS:
        records = list(EXTRA_SEEDS[fmt](history))
    else:
        raise AssertionError(f"format {fmt} has no simulator encoder and no EXTRA_SEEDS entry: give it one")
    seeds = [Message(r.value, r.key, tuple(r.headers), r.topic) for r in records[:60]]
    for pattern in CORPUS_FILES.get(fmt, []):
        seeds += [Message(p.read_bytes()) for p in sorted(CONFORMANCE.glob(pattern))]
    for name in CORPUS_LINES.get(fmt, []):
        seeds += [Message(r.value.encode()) for r in records_from_lines(CONFORMANCE / name)]
    pipeline = PipelineConfig(
        name="fuzz",
        format=fmt,
        archive={"path": str(folder)},
        options={**settings_.get("options", {}), **forced_options},
        tables=settings_.get("tables", {}),
    )
    return FormatCase(pipeline, tuple(s for s in seeds if s.value))


_CASES: dict[str, FormatCase] = {}
# Made at import (the parameters below decode seeds at collection), so removed at exit rather than by a fixture.
_WORK = Path(tempfile.mkdtemp(prefix="cdcreplay-fuzz-"))
atexit.register(shutil.rmtree, _WORK, ignore_errors=True)


def case_of(fmt: str) -> FormatCase:
    if fmt not in _CASES:
        folder = _WORK / fmt
        folder.mkdir(parents=True, exist_ok=True)
        _CASES[fmt] = _load_case(fmt, folder)
    return _CASES[fmt]


# -- strategies --------------------------------------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\u0000",
        "\u202eevil",  # right-to-left override
        "\ufeffbom",
        "\ud800",  # a lone surrogate (JSON can escape it; UTF-8 cannot carry it)
        "𝕊𝕙𝕠𝕡",
        "ｓｈｏｐ",  # fullwidth lookalikes
        "shоp",  # Cyrillic o
        "e\u0301\u0301\u0301",
        "../../etc/passwd",
        "a" * 5000,
        "null",
        "NaN",
        "-0",
        "1e400",
        "99999999999999999999999999999999999999999",
        "{}",
        "[]",
        "0x1F",
    ]
)
HUGE_NUMBERS = st.sampled_from([10**40, -(10**40), 2**63, -(2**63) - 1, 2**31, 1e308, -1e308, 5e-324, 0.1, -0.0])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    HUGE_NUMBERS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    ODD_TEXT,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8) | ODD_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
JSON_TOKENS = st.sampled_from(
    ['{', '}', '[', ']', ':', ',', '"', '\\', '"op"', '"type"', '"data"', '"after"', '"before"', '"payload"', 'null',
     'true', '1', '-', 'e', '"c"', '"u"', '"d"', '"INSERT"', '"UPDATE"', '"DELETE"', '"INIT"', '"r"', '"ts_ms"',
     '"table"', '"database"', '"pkNames"', '"schema"', '"source"', '"id"', '0', '1e999', '\u0000', '\ud83d']
)  # fmt: skip


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


RANDOM_VALUES = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(_encode),
    JSON_VALUES.map(lambda v: _encode(json.dumps(v))),
    st.lists(JSON_TOKENS, max_size=40).map(lambda tokens: _encode("".join(tokens))),
    st.dictionaries(st.sampled_from(["op", "type", "data", "after", "before", "source", "payload", "table"]),
                    JSON_VALUES, max_size=6).map(lambda v: _encode(json.dumps(v))),
)  # fmt: skip
RANDOM_KEYS = st.one_of(st.none(), st.binary(max_size=20), JSON_VALUES.map(lambda v: _encode(json.dumps(v))))
INTERESTING_BYTES = st.sampled_from(
    [b"\x00", b"\xff", b'"', b"\\", b"{", b"}", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\x7f",
     b"\xfe\xff\xff\xff\x0f", b"\x01\x00\x00\x00\x01"]
)  # fmt: skip


@st.composite
def byte_mutation(draw, value: bytes) -> bytes:
    """Flip, truncate, insert, delete or repeat bytes (valid for every wire format: Avro and JSON alike)."""
    size = len(value)
    at = draw(st.integers(0, size))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "repeat", "prefix"]))
    if kind == "flip" and size:
        at = min(at, size - 1)
        return value[:at] + bytes([value[at] ^ draw(st.integers(1, 255))]) + value[at + 1 :]
    if kind == "truncate":
        return value[:at]
    if kind == "insert":
        return value[:at] + draw(INTERESTING_BYTES | st.binary(min_size=1, max_size=16)) + value[at:]
    if kind == "delete":
        return value[:at] + value[at + draw(st.integers(1, 16)) :]
    if kind == "repeat":
        return value[:at] + value[at : at + draw(st.integers(1, 32))] * draw(st.integers(2, 50)) + value[at:]
    return draw(INTERESTING_BYTES) + value[1:]


def _paths(document, prefix=()) -> list[tuple]:
    """Every place in a JSON document (the root included) as a path of keys and indexes."""
    found = [prefix]
    if isinstance(document, dict):
        for name, child in document.items():
            found += _paths(child, (*prefix, name))
    elif isinstance(document, list):
        for index, child in enumerate(document):
            found += _paths(child, (*prefix, index))
    return found


def _set(document, path: tuple, value):
    if not path:
        return value
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return document


def _get(document, path: tuple):
    for part in path:
        document = document[part]
    return document


def _retyped(value):
    """The same content with another JSON type: what a producer with a different converter setting would send."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        try:
            return json.loads(value)  # "12" -> 12, '{"a":1}' -> {"a": 1}
        except ValueError:
            return [value]
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    return json.dumps(value)  # an object as its JSON text (Debezium MongoDB carries documents as strings)


DEEP = "\u0000DEEP\u0000"


@st.composite
def json_mutation(draw, document) -> bytes:
    """Delete, retype or replace one field of a JSON message; huge numbers, deep nesting, odd unicode."""
    document = json.loads(json.dumps(document))
    path = draw(st.sampled_from(_paths(document)))
    kind = draw(st.sampled_from(["delete", "retype", "replace", "huge", "deep", "odd_key", "duplicate_key"]))
    if kind == "delete" and path:
        parent = _get(document, path[:-1])
        del parent[path[-1]]
    elif kind == "retype":
        document = _set(document, path, _retyped(_get(document, path)))
    elif kind == "huge":
        document = _set(document, path, draw(HUGE_NUMBERS))
    elif kind == "deep":
        document = _set(document, path, DEEP)
    elif kind in ("odd_key", "duplicate_key") and isinstance(_get(document, path), dict) and _get(document, path):
        node = _get(document, path)
        name = draw(st.sampled_from(sorted(node)))
        if kind == "odd_key":
            node[name + draw(ODD_TEXT)] = node.pop(name)
        else:  # the same key twice: JSON parsers disagree on which one wins
            text = json.dumps(document)
            twin = json.dumps({name: draw(JSON_VALUES)})[1:-1]
            return _encode(text[:-1] + ", " + twin + "}") if text.endswith("}") else _encode(text)
    else:
        document = _set(document, path, draw(JSON_VALUES))
    text = json.dumps(document, ensure_ascii=draw(st.booleans()))
    depth = draw(st.sampled_from([64, 600, 3000]))
    return _encode(text.replace(json.dumps(DEEP), "[" * depth + "1" + "]" * depth))


def _json_document(value: bytes):
    try:
        document = json.loads(value)
    except ValueError:
        return None
    return document if isinstance(document, dict | list) else None


@st.composite
def mutated_message(draw, seeds: tuple[Message, ...]) -> Message:
    seed = draw(st.sampled_from(seeds))
    if draw(st.integers(0, 7)) == 0:
        return seed
    document = _json_document(seed.value)
    if document is not None and draw(st.booleans()):
        value = draw(json_mutation(document))
    else:
        value = draw(byte_mutation(seed.value))
    if draw(st.integers(0, 9)) == 0:  # now and then a second, independent mutation
        value = draw(byte_mutation(value))
    key = seed.key
    if key and draw(st.integers(0, 4)) == 0:
        key_document = _json_document(key)
        key = draw(json_mutation(key_document)) if key_document is not None else draw(byte_mutation(key))
    return Message(value, key, seed.headers, seed.topic)


def random_message() -> st.SearchStrategy[Message]:
    return st.builds(Message, RANDOM_VALUES, RANDOM_KEYS)


# -- running a batch and checking it -----------------------------------------------------------------------------------


def _records(messages: list[Message]) -> list[Record]:
    """Messages spread over two partitions of their topic, offsets counting up per partition."""
    counters: dict[tuple[str, int], itertools.count] = {}
    records = []
    for index, m in enumerate(messages):
        partition = index % 2
        offset = next(counters.setdefault((m.topic, partition), itertools.count(100)))
        records.append(Record(m.topic, partition, offset, m.value, m.key, TIMESTAMP, list(m.headers)))
    return records


def decode_batch(spark, pipeline: PipelineConfig, records: list[Record]) -> list[dict]:
    folder = Path(tempfile.mkdtemp(dir=_WORK))
    parquet = write_parquet(records, folder / "batch.parquet")
    raw = archive.read_archive(spark, [str(parquet)], "parquet")
    decode = decoder(pipeline.format)
    decoded = decode(raw, pipeline, base_state=None)
    columns = ("topic", "partition", "offset", "record_kind", "reason", "detail", "raw_key", "raw_value")
    return [r.asDict() for r in decoded.select(*columns).collect()]


def _crashes(spark, pipeline: PipelineConfig, records: list[Record]) -> bool:
    try:
        decode_batch(spark, pipeline, records)
    except Exception:
        return True
    return False


def crashing_records(spark, pipeline: PipelineConfig, records: list[Record]) -> list[Record]:
    """Bisect a crashing batch down to the smallest part that still crashes (usually one record)."""
    while len(records) > 1:
        half = len(records) // 2
        if _crashes(spark, pipeline, records[:half]):
            records = records[:half]
        elif _crashes(spark, pipeline, records[half:]):
            records = records[half:]
        else:
            break  # only the two halves together crash: report both
    return records


def describe(record: Record) -> str:
    return f"{record.topic}/{record.partition}/{record.offset} key={record.key!r} value={record.value!r}"


def check_accounting(records: list[Record], rows: list[dict]) -> dict[str, int]:
    """The properties of the module docstring; returns how many records fell in each accounting class."""
    by_record: dict[tuple, list[dict]] = {}
    for row in rows:
        by_record.setdefault((row["topic"], row["partition"], row["offset"]), []).append(row)
    inputs = {(r.topic, r.partition, r.offset): r for r in records}
    problems = []
    for coordinates in sorted(set(by_record) - set(inputs)):
        problems.append(f"output rows for a record that was not input: {coordinates}")
    classes = dict.fromkeys(KINDS, 0)
    for coordinates, record in inputs.items():
        record_rows = by_record.get(coordinates, [])
        kinds = {row["record_kind"] for row in record_rows}
        if not record_rows:
            problems.append(f"record lost (no decoded row): {describe(record)}")
            continue
        if not kinds <= set(KINDS):
            problems.append(f"unknown record_kind {sorted(kinds - set(KINDS))}: {describe(record)}")
            continue
        classes[next(kind for kind in ("quarantine", "changelog", "control") if kind in kinds)] += 1
        for row in record_rows:
            if row["record_kind"] != "quarantine":
                continue
            wrong = []
            if row["reason"] not in KNOWN_REASONS:
                wrong.append(f"reason {row['reason']!r} is not a known reason code")
            if not row["detail"]:
                wrong.append("no detail")
            if row["raw_value"] != record.value:
                wrong.append(f"raw_value {row['raw_value']!r} is not the record's value")
            if row["raw_key"] != record.key:
                wrong.append(f"raw_key {row['raw_key']!r} is not the record's key")
            if row["reason"] in WHOLE_RECORD_REASONS and len(record_rows) != 1:
                wrong.append(f"rejected as a whole ({row['reason']}) but {len(record_rows)} rows")
            if wrong:
                problems.append(f"quarantine row of {describe(record)}: {'; '.join(wrong)}")
    assert not problems, "\n".join(problems[:10])
    assert sum(classes.values()) == len(records)
    return classes


def assert_decodes_and_accounts(spark, fmt: str, messages: list[Message]) -> dict[str, int]:
    pipeline = case_of(fmt).pipeline
    records = _records(messages)
    try:
        rows = decode_batch(spark, pipeline, records)
    except Exception as error:
        culprits = crashing_records(spark, pipeline, records)
        lines = "\n".join(describe(r) for r in culprits[:5])
        raise AssertionError(f"{fmt}: the decoder raised {type(error).__name__} on:\n{lines}") from error
    return check_accounting(records, rows)


# -- the tests ---------------------------------------------------------------------------------------------------------


@st.composite
def hostile_batch(draw, seeds: tuple[Message, ...]) -> list[Message]:
    """One batch: random bytes and JSON-ish text, then mutated valid messages (a few left intact, the context some
    formats decode against: Qlik metadata, DataWorks update pairs), in a drawn order."""
    random_part = draw(st.lists(random_message(), **RANDOM_BATCH), label="random")
    mutated_part = draw(st.lists(mutated_message(seeds), **MUTATED_BATCH), label="mutated")
    return draw(st.permutations(random_part + mutated_part), label="batch")


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_hostile_messages_are_accounted_for(spark, fmt, data):
    seeds = case_of(fmt).seeds
    assert len(seeds) >= 10, f"{fmt}: too few valid messages to mutate; give its encoder or EXTRA_SEEDS more"
    assert_decodes_and_accounts(spark, fmt, data.draw(hostile_batch(seeds)))


# -- what the fuzzing found: each case decoded once more, its rows compared whole --------------------------------------

SHAREPLEX_INSERT = (
    b'{"meta": {"time": "2026-01-01T08:38:46", "op": "ins", "scn": "14589063118768", "trans": TRANS, "seq": 1, '
    b'"table": "shop.customers"}, "data": {"id": "6", "name": "Jos\\u00e9", "email": "j@example.org", '
    b'"balance": "860.13", "vip": "0", "birthday": "1982-09-10", "updated_at": "2026-01-01 16:38:46.807"}}'
)
DDS_INSERT = b'{"id": ID, "op": "INSERT", "db": DB, "coll": COLL, "value": "{\\"_id\\": 1}", "es": 1, "ts": 1CLUSTER}'
SURROGATE = "payload escapes a lone UTF-16 surrogate (\\ud800-\\udfff): it is not Unicode text"


def dds(id_=b"1", db=b'"shop"', coll=b'"c"', cluster=b"") -> bytes:
    return DDS_INSERT.replace(b"ID", id_).replace(b"DB", db).replace(b"COLL", coll).replace(b"CLUSTER", cluster)


FOUND = {
    "dts-shareplex-json": [
        # A transaction id that is a number, not "a.b.c": the missing parts were read past the array's end.
        (SHAREPLEX_INSERT.replace(b"TRANS", b"9223372036854775808"), [("changelog", None, None)]),
        (SHAREPLEX_INSERT.replace(b"TRANS", b'"1.2"'), [("changelog", None, None)]),
    ],
    "drs-dds-json": [
        # Names that are not text, and serials past decimal(38,0), failed the whole batch when written to Arrow.
        (dds(db=b"1.5"), [("quarantine", "missing_table", "`db` is not a name but float")]),
        (dds(coll=b'["x"]'), [("quarantine", "missing_table", "`coll` is not a name but list")]),
        (
            dds(id_=b"1" + b"0" * 40),
            [("quarantine", "decode_error", f"`id` 1{'0' * 40} has more than 38 digits: it cannot order events")],
        ),
        (
            dds(cluster=b', "clusterTime": "1' + b"0" * 40 + b':1"'),
            [("quarantine", "bad_value", f"clusterTime '1{'0' * 40}:1' is not seconds:increment")],
        ),
        (
            b'{"id": 1, "op": "DDL", "db": "shop", "coll": "c", "value": {"drop": 1}}',
            [("control", None, '{"drop": 1}')],
        ),
        (dds(coll=b'"c\\ud800"'), [("quarantine", "not_utf8", SURROGATE)]),
        (
            b'{"id": 1, "op": "DDL", "db": "shop", "coll": "c", "value": "x\\udfff"}',
            [("quarantine", "not_utf8", SURROGATE)],
        ),
        (b"[" * 5000 + b"]" * 5000, [("quarantine", "not_json", "payload is not a JSON object: " + "[" * 120)]),
    ],
    "qlik-json": [
        (
            b'{"data": {"id": "\\ud800"}, "beforeData": null, "headers": {"operation": "INSERT"}}',
            [("quarantine", "not_utf8", SURROGATE)],
        ),
    ],
}


def qlik_change(**headers) -> bytes:
    """A valid Qlik JSON data message of the simulator with some headers replaced (its metadata message is in the
    same batch: ``CONTEXT``)."""
    documents = (_json_document(seed.value) or {} for seed in case_of("qlik-json").seeds)
    document = next(d for d in documents if d.get("type") == "DT" and d["message"]["headers"]["operation"] == "INSERT")
    document["message"]["headers"].update(headers)
    return json.dumps(document).encode()


# Valid messages a case needs beside it (Qlik data messages are decoded with their metadata message).
CONTEXT = {"qlik-json": lambda seeds: [s for s in seeds if (_json_document(s.value) or {}).get("type") == "MD"]}
FOUND["qlik-json"] += [
    # Position parts past decimal(38,0) failed the whole batch when written to Arrow.
    (
        lambda: qlik_change(transactionEventCounter=-(10**40)),
        [("quarantine", "bad_value", f"transactionEventCounter -1{'0' * 40} has more than 38 digits")],
    ),
    (
        lambda: qlik_change(changeSequence="1" * 40),
        [("quarantine", "bad_value", f"changeSequence '{'1' * 40}' has more than 38 digits")],
    ),
]


def _found_message(item) -> Message:
    """A case's message: bytes, a Message (a key too), or a function making either (from the format's seeds)."""
    item = item() if callable(item) else item
    item = item if isinstance(item, Message) else Message(item)
    return Message(item.value, item.key, item.headers, "found")


def assert_found_cases(spark, fmt: str, cases: list) -> None:
    """Each case decoded in one batch (after its context), its rows compared whole, the accounting checked."""
    context = CONTEXT.get(fmt, lambda seeds: [])(case_of(fmt).seeds)
    messages = [Message(m.value, m.key, m.headers, "found") for m in context]
    records = _records(messages + [_found_message(item) for item, _ in cases])
    rows = decode_batch(spark, case_of(fmt).pipeline, records)
    check_accounting(records, rows)
    got = {}
    for row in rows:
        got.setdefault((row["partition"], row["offset"]), []).append((row["record_kind"], row["reason"], row["detail"]))
    cased = records[len(context) :]
    assert {(r.partition, r.offset): got.get((r.partition, r.offset)) for r in cased} == {
        (r.partition, r.offset): expected for r, (_, expected) in zip(cased, cases, strict=True)
    }


@pytest.mark.parametrize("fmt", sorted(FOUND))
def test_messages_the_fuzzing_found_decode_as_expected(spark, fmt):
    assert_found_cases(spark, fmt, FOUND[fmt])


# -- found by the fuzzing in what every format shares (formats/common.py, formats/routing.py): each record is routed
# alone, whatever the rest of its batch holds.
ROUTING_CASES = [
    # A tombstone whose Kafka key is not UTF-8: its detail is the key in base64.
    pytest.param(fmt, Message(b"", b"\x9d\xff"), ("control", None, "nf8="), id=f"{fmt}-binary-tombstone-key")
    for fmt in ("dataworks-json", "drs-json-mysql", "dts-shareplex-json", "canal-json", "debezium-json", *READERS)
] + [
    # JSON may escape a lone UTF-16 surrogate; no UTF-8 column can hold it, so the record is quarantined alone.
    pytest.param(
        "canal-json",
        Message(
            b'{"data":[{"id":"1","v":"\\ud800"}],"database":"shop","table":"t","type":"INSERT","isDdl":false,'
            b'"pkNames":["id"],"mysqlType":{"id":"int","v":"varchar(8)"},"es":1,"id":1}'
        ),
        (
            "quarantine",
            "not_utf8",
            "the decoded field after escapes a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text",
        ),
        id="canal-json-surrogate",
    ),
    pytest.param(
        "debezium-json",
        Message(
            b'{"before":null,"after":{"id":1,"v":"\\ud800"},"op":"c","source":{"db":"shop","table":"t","file":"f",'
            b'"pos":4,"row":0}}',
            b'{"id": 1}',
        ),
        (
            "quarantine",
            "not_utf8",
            "the decoded field after escapes a lone UTF-16 surrogate (\\ud800-\\udfff): not Unicode text",
        ),
        id="debezium-json-surrogate",
    ),
    # A Debezium schema field without a "field" name would be a null column name.
    pytest.param(
        "debezium-json",
        Message(
            b'{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,'
            b'"field":"id"},{"type":"string","optional":true}],"optional":true,"field":"after"}]},"payload":'
            b'{"before":null,"after":{"id":1},"op":"c","source":{"db":"shop","table":"t","file":"f","pos":4,"row":0}}}',
            b'{"id": 1}',
        ),
        ("quarantine", "decode_error", None),
        id="debezium-json-unnamed-schema-field",
    ),
]


@pytest.mark.parametrize(("fmt", "message", "expected"), ROUTING_CASES)
def test_records_are_routed_alone(spark, fmt, message, expected):
    """The odd record sits between valid ones: it gets its own outcome, and theirs are what they are without it."""
    good = list(case_of(fmt).seeds[:4])
    coordinates = itemgetter("topic", "partition", "offset")
    alone = decode_batch(spark, case_of(fmt).pipeline, _records(good))
    records = _records([*good[:2], message, *good[2:]])
    rows = decode_batch(spark, case_of(fmt).pipeline, records)
    check_accounting(records, rows)
    odd = (records[2].topic, records[2].partition, records[2].offset)
    outcome = [(r["record_kind"], r["reason"], r["detail"]) for r in rows if coordinates(r) == odd]
    kind, reason, detail = expected
    assert [(k, r) for k, r, _ in outcome] == [(kind, reason)]
    if detail is not None:
        assert outcome[0][2] == detail
    # The odd record shifted the later records' coordinates: compare the outcomes, not where they sit.
    outcome_of_others = [(r["record_kind"], r["reason"]) for r in rows if coordinates(r) != odd]
    assert sorted(outcome_of_others) == sorted((r["record_kind"], r["reason"]) for r in alone)
