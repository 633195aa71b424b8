"""Encode a history as Alibaba DTS writes it in "Shareplex Json".

What a consumer of the topic sees:

- one topic for the database, one partition (DTS keeps the global order); Kafka key = the table name;
- one message per row change: ``meta`` {time (UTC commit time, seconds), userid, op, scn, rowid, trans, seq, size,
  table "db.table", idx "seq/size", posttime}, ``data`` and, for updates, ``key``;
- ``op`` in the short spelling of the vendor samples (ins/upd/del) or, with ``long_ops=True``, the long one
  (INSERT/UPDATE/DELETE); snapshot rows are plain inserts (the format has no full-load marker);
- an INSERT carries the whole row in ``data``; an UPDATE carries ONLY the changed columns (new values) in ``data``
  and, in ``key``, the key columns plus the changed columns' old values -- so every other column must keep its stored
  value; a DELETE carries the whole deleted row;
- every value is a string (or null), rendered as DTS renders MySQL values (see ``encode_canal.canal_text``);
- the order is (scn, trans, seq): one SCN and transaction id per source transaction (and per snapshot read), ``seq``
  the 1-based order inside it. ``time`` has whole seconds only, so it never orders anything;
- no types and no keys: a reader needs ``tables.<t>.primary_key`` and ``column_types`` (``pipeline_settings``);
- the no-op DDL of the history is not written: SharePlex replicates TRUNCATE and DROP COLUMN only.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.encode_canal import canal_text
from cdcreplay_lab.simulator.history import EPOCH_UTC, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

TOPIC = "dts.shop.shareplex"
FIRST_SCN = 14_589_063_118_712
USER_ID = 84
SHORT_OPS = {OP_SNAPSHOT: "ins", OP_INSERT: "ins", OP_UPDATE: "upd", OP_DELETE: "del"}
LONG_OPS = {OP_SNAPSHOT: "INSERT", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _image(spec: TableSpec, row: dict, columns) -> dict:
    return {name: canal_text(row[name], spec.column(name).sql_type) for name in columns}


def _time(time_ms: int) -> str:
    return (EPOCH_UTC + timedelta(milliseconds=time_ms)).strftime("%Y-%m-%dT%H:%M:%S")


def _rowid(table_index: int, key: tuple) -> str:
    # An Oracle-like ROWID: object, file, block, row in base64 digits; unique per (table, key) here.
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    number = zlib.crc32(repr((table_index, key)).encode("ascii")) * 4099
    text = ""
    for _ in range(12):
        number, digit = divmod(number, 64)
        text = digits[digit] + text
    return "AAATGp" + text


def _message(history: History, event: Event, seq: int, size: int, ops: dict) -> dict:
    spec = history.tables[event.table_id]
    scn = FIRST_SCN + 7 * event.unit
    meta = {
        "time": _time(event.time_ms),
        "userid": USER_ID,
        "op": ops[event.op],
        "scn": str(scn),
        "rowid": _rowid(list(history.tables).index(event.table_id), event.key),
        "trans": f"{event.unit % 11}.{event.unit % 32}.{event.unit}",
        "seq": seq,
        "size": size,
        "table": spec.table_id,
        "idx": f"{seq}/{size}",
        "posttime": _time(event.time_ms + 2000),
    }
    if event.op == OP_UPDATE:
        assert event.before is not None and event.after is not None
        return {
            "meta": meta,
            "data": _image(spec, event.after, event.changed),
            "key": _image(spec, event.before, [*spec.primary_key, *event.changed]),
        }
    row = event.before if event.op == OP_DELETE else event.after
    assert row is not None
    return {"meta": meta, "data": _image(spec, row, spec.column_names)}


def encode_shareplex_json(history: History, topic: str = TOPIC, long_ops: bool = False) -> Iterator[KafkaRecord]:
    """Kafka records of the DTS Shareplex JSON topic, in commit order."""
    ops = LONG_OPS if long_ops else SHORT_OPS
    offset = 0
    unit: list[Event] = []

    def flush() -> Iterator[KafkaRecord]:
        nonlocal offset
        for seq, event in enumerate(unit, 1):
            value = _compact(_message(history, event, seq, len(unit), ops)).encode("utf-8")
            key = history.tables[event.table_id].name.encode("utf-8")
            yield KafkaRecord(topic, 0, offset, event.time, key, value, [])
            offset += 1
        unit.clear()

    for event in history.iter_events():
        if unit and event.unit != unit[0].unit:
            yield from flush()
        unit.append(event)
    yield from flush()


def encode(history: History, out_dir: Path, long_ops: bool = False) -> Iterator[KafkaRecord]:
    return encode_shareplex_json(history, long_ops=long_ops)


def pipeline_settings(out_dir: Path) -> dict:
    """Shareplex carries neither keys nor types: both come from the config, as a user declares them."""
    from cdcreplay_lab.simulator.history import TABLES

    return {
        "tables": {
            table_id: {
                "primary_key": list(spec.primary_key),
                "column_types": {column.name: column.spark_type for column in spec.columns},
            }
            for table_id, spec in TABLES.items()
        }
    }
