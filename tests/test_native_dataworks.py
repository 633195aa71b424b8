"""The native (Spark JSON reader, ``options.reader: spark``) path of dataworks-json against its Python decoder.

For every record the native path takes, its decoded rows must equal the Python decoder's rows field for field; every
other record must be flagged and decoded in Python (``native_helpers.native_flags_of_messages``). Checked on a
simulated history (its inserts, deletes and transaction messages are taken; its update pairs are Python's), the
DataWorks documentation samples and hand-made corner cases: DATE values in time zones and as configured dates, values
a configured type would round, keys from the config, the message or the row id column, and the messages the native
path leaves to Python.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alibaba_helpers import DATAWORKS_COLUMNS, dataworks
from native_helpers import native_flags_of_messages

from cdcreplay.config import PipelineConfig
from cdcreplay.formats import dataworks_json
from cdcreplay.formats.envelopes.dataworks_message import ROW_ID
from cdcreplay_lab.simulator import simulate
from cdcreplay_lab.simulator.encode_dataworks import encode_dataworks_json, pipeline_settings

SAMPLES = Path(__file__).parent / "data" / "conformance" / "vendor-doc-samples" / "alibaba-dataworks-kafka-json"
# Without the BYTES column: a table with a binary column is left to Python.
COLUMNS = [column for column in DATAWORKS_COLUMNS if column["type"] != "BYTES"]
TABLES = {"shop.items": {"column_types": {"price": "decimal(6,2)", "born": "date", "id": "int"}}}


def _pipeline(tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="native",
        format="dataworks-json",
        archive={"path": "unused"},
        tables=TABLES if tables is None else tables,
        options={"reader": "spark", "time_zone": "+08:00", **options},
    )


def _message(op: str, after=None, before=None, sequence="10", keys=("id",), columns=COLUMNS, **payload) -> bytes:
    return dataworks(op, sequence, after, before, keys, columns, **payload).encode()


# 1985-03-02 00:00 and 2024-01-02 03:04:05.123 as wall clocks in UTC+8, as DataWorks in that zone writes them.
BORN, SEEN = 478569600000 - 8 * 3600 * 1000, 1704164645123 - 8 * 3600 * 1000
ROW = {"id": 1, "name": "a", "price": "1.50", "born": BORN, "seen": SEEN, "ok": True, "score": 1.5}


def _flags(spark, values: list[bytes], pipeline=None) -> list[bool]:
    return native_flags_of_messages(spark, dataworks_json, values, pipeline or _pipeline())


def test_simulated_history_is_decoded_natively_as_in_python(spark, tmp_path):
    history = simulate(seed=7, events=1500, days=2)
    records = list(encode_dataworks_json(history))
    settings = pipeline_settings(tmp_path)
    pipeline = _pipeline(settings["tables"], **settings["options"])
    flags = _flags(spark, [r.value for r in records], pipeline)
    ops = [json.loads(r.value)["payload"]["op"] for r in records]
    taken = {op for op, flag in zip(ops, flags, strict=True) if flag}
    assert taken == {"INSERT", "DELETE", "TRANSACTION_BEGIN", "TRANSACTION_END", "UPDATE_BEFOR", "UPDATE_AFTER"}
    for op in ("INSERT", "DELETE", "TRANSACTION_BEGIN"):
        assert all(flag for o, flag in zip(ops, flags, strict=True) if o == op), f"every {op} is taken natively"
    assert sum(flags) >= 0.9 * len(records)
    # The update pairs left to Python (a key change) are left whole.
    sequences = [json.loads(r.value)["payload"]["sequenceId"] for r in records]
    by_pair: dict = {}
    for op, sequence, flag in zip(ops, sequences, flags, strict=True):
        if op in ("UPDATE_BEFOR", "UPDATE_AFTER"):
            by_pair.setdefault(sequence, set()).add(flag)
    assert all(len(found) == 1 for found in by_pair.values())


def test_documentation_samples_decode_as_in_python(spark):
    """The heartbeat is Python's; the insert, the update pair, the one-message update and the delete are native."""
    names = [path.name for path in sorted(SAMPLES.glob("*.json"))]
    values = [(SAMPLES / name).read_bytes() for name in names]
    flags = dict(zip(names, _flags(spark, values, _pipeline({}, time_zone="UTC")), strict=True))
    assert flags == {name: not name.startswith("01-heartbeat") for name in names} and len(names) == 6


CORNER_CASES = [  # (message, taken natively)
    (_message("INSERT", ROW), True),
    (_message("DELETE", before=ROW), True),
    (_message("TRANSACTION_BEGIN", sequence="11"), True),
    (_message("TRANSACTION_END", sequence=None), True),
    (_message("INSERT", ROW | {"born": BORN + 1000}), False),  # born is a date: not midnight in UTC+8
    (_message("INSERT", ROW | {"born": None, "seen": None}), True),
    (_message("INSERT", {k: v for k, v in ROW.items() if k not in ("born", "seen")}), True),  # absent columns
    (_message("INSERT", ROW | {"seen": -62135596800000}), False),  # the first instant of year 1: left to Python
    (_message("INSERT", ROW | {"seen": "1704164645123"}), True),  # a DATE value as text
    (_message("INSERT", ROW | {"seen": " 1704164645123"}), False),
    (_message("INSERT", ROW | {"seen": "x"}), False),
    (_message("INSERT", ROW | {"price": "1.505"}), False),  # decimal(6,2) would round it
    (_message("INSERT", ROW | {"price": "12345.00"}), False),
    (_message("INSERT", ROW | {"id": 2**31}), False),  # id is an int
    (_message("INSERT", ROW | {"ok": "maybe"}), False),
    (_message("INSERT", ROW | {"score": 1e300}), True),
    (_message("INSERT", ROW | {"name": "caf\u00e9 \u4e2d"}), True),
    (_message("INSERT", ROW | {"name": {"nested": [1, 2.5]}}), True),
    (_message("INSERT", ROW | {"id": None}), False),  # no key value
    (_message("INSERT", ROW, keys=None), False),  # no key
    (_message("INSERT", ROW | {ROW_ID: "7"}, keys=None, columns=[*COLUMNS, {"name": ROW_ID, "type": "LONG"}]), True),
    (_message("INSERT", ROW, keys=("name", "id")), True),
    (_message("INSERT", ROW, before=ROW), False),
    (_message("DELETE", before=ROW, after=ROW), False),
    (_message("DELETE"), False),
    (_message("INSERT"), False),
    (_message("INSERT", ROW, sequence="12a"), False),
    (_message("INSERT", ROW, sequence=None), False),
    (_message("INSERT", ROW, timestamp=None), True),
    (_message("INSERT", ROW, timestamp={"eventTime": 10**17}), False),
    (_message("UPDATE_BEFOR", before=ROW), True),  # a pair (sequenceId 10)
    (_message("UPDATE_AFTER", after=ROW | {"name": "b"}, before=ROW), True),
    (_message("UPDATE_BEFOR", before=ROW, sequence="20"), True),
    (_message("UPDATE_AFTER", after=ROW | {"name": "b"}, sequence="20"), True),  # its before image is the pair's
    (_message("UPDATE_BEFOR", before=ROW, sequence="21"), False),
    (_message("UPDATE_AFTER", after=ROW | {"id": 2}, sequence="21"), False),  # a key change: the pair is Python's
    (_message("UPDATE_BEFOR", before=ROW | {"price": "1.505"}, sequence="22"), False),
    (_message("UPDATE_AFTER", after=ROW, sequence="22"), False),  # its pair's before image would be rounded
    (_message("UPDATE_BEFOR", before=ROW, sequence="23"), False),  # no UPDATE_AFTER: unpaired
    (_message("UPDATE_AFTER", after=ROW, sequence="24"), True),  # no UPDATE_BEFOR: an update without a before image
    (_message("UPDATE_BEFOR", before=ROW | {"name": "\ud800"}, sequence="25"), False),  # a surrogate: Python's ...
    (_message("UPDATE_AFTER", after=ROW, sequence="25"), False),  # ... and so its pair
    (_message("UPDATE_BEFOR", before=ROW, sequence="26"), True),  # the same UPDATE_BEFOR twice: the first one's
    (_message("UPDATE_BEFOR", before=ROW | {"name": "c"}, sequence="26"), True),  # image is the pair's
    (_message("UPDATE_AFTER", after=ROW, sequence="26"), True),
    # Another table's update of the same sequenceId is no member of that pair.
    (_message("UPDATE_AFTER", after=ROW, sequence="26").replace(b'"dbName": "shop"', b'"dbName": "other"'), True),
    (_message("MHEARTBEAT"), False),
    (_message("TRUNCATE"), False),
    (_message("insert", ROW), False),
    (_message("INSERT", ROW | {"name": "\ud800"}), False),  # a lone surrogate: Spark reads "?"
    (_message("INSERT", ROW | {"name": "a\u0001"}), False),
    (_message("INSERT", ROW, columns=[*COLUMNS, {"name": "id", "type": "STRING"}]), False),  # a column twice
    (_message("INSERT", ROW, columns=[*COLUMNS[:-1], {"name": "score", "type": "FANCY"}]), True),  # unknown: string
    (b" " + _message("INSERT", ROW), False),
    (_message("INSERT", ROW) + b" trailing", True),
    (_message("INSERT", ROW).replace(b'"', b"'"), False),
    (_message("INSERT", ROW).replace(b'"eventTime": 1620457896000', b'"eventTime": "soon"'), False),
    (b"\xff" + _message("INSERT", ROW), False),
    (b"", True),  # a Kafka tombstone
]


def test_corner_cases_are_decoded_natively_only_where_the_paths_agree(spark):
    values = [message for message, _ in CORNER_CASES]
    assert _flags(spark, values) == [taken for _, taken in CORNER_CASES]


@pytest.mark.parametrize(
    ("zone", "taken"), [("UTC", True), ("+08:00", True), ("-03:30", True), ("Asia/Shanghai", False)]
)
def test_date_values_are_converted_natively_in_utc_and_offsets(spark, zone, taken):
    """A region's rules (daylight saving in its history) come from Python's zoneinfo on one path and Java's on the
    other: its DATE values are Python's. UTC and fixed offsets are the same on both."""
    values = [_message("INSERT", ROW | {"born": None}), _message("INSERT", {"id": 1, "seen": 0})]
    pipeline = _pipeline({"shop.items": {"column_types": {"price": "decimal(6,2)"}}}, time_zone=zone)
    assert _flags(spark, values, pipeline) == [taken, taken]


def test_a_configured_key_wins_over_the_messages(spark):
    """``tables.<t>.primary_key`` names the key whatever the message says (its primaryKey, or none)."""
    tables = {"shop.items": TABLES["shop.items"] | {"primary_key": ["name"]}}
    values = [
        _message("INSERT", ROW),
        _message("DELETE", before=ROW, keys=None),
        _message("INSERT", ROW | {"name": None}),
    ]
    assert _flags(spark, values, _pipeline(tables)) == [True, True, False]
