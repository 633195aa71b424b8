"""Encode a history as Alibaba DTS writes it in "Canal Json" (the open-source layout, instances since 2022-03-20).

What a consumer of the topic sees:

- one topic for the whole database, one partition by default so DTS keeps the global order; Kafka key = table name;
- one message per run of consecutive row changes of the same transaction, table and type: ``data`` holds the
  after images (for DELETE the deleted rows), ``old`` is aligned with ``data`` and for UPDATE holds ONLY the changed
  columns with their previous values (a column that was NULL is present with JSON null); null otherwise;
- every non-null value is a JSON string ("101", "123.45", "1" for a true TINYINT(1), "2026-01-02 03:04:05.123");
  ``mysqlType``/``sqlType`` say how to read them back;
- snapshot rows (initial and resync) are ``type: INIT``: the initial load in batches of up to 50 rows of one table,
  the resync one row per message;
- a primary-key change is a DELETE message of the old row followed by an INSERT message of the new row;
- ``es`` is the source event time (ms), ``ts`` when DTS wrote the message, ``id`` a monotonic message serial;
- one no-op DDL message (``isDdl: true``) mid-stream, which a decoder must skip.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import date, timedelta

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import EPOCH_UTC, MAX_INIT_BATCH, NOOP_DDL_TABLE, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

TYPES = {OP_SNAPSHOT: "INIT", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}
# JDBC type codes DTS reports in sqlType (java.sql.Types); TINYINT(1) is reported as BIT.
SQL_TYPE_CODES = {
    "int": 4,
    "bigint": -5,
    "tinyint(1)": -7,
    "varchar": 12,
    "text": 2005,
    "decimal": 3,
    "double": 8,
    "date": 91,
    "datetime": 93,
}


_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def canal_text(value, sql_type: str) -> str | None:
    """A column value as DTS Canal JSON writes it: a string, or None for SQL NULL."""
    if value is None:
        return None
    if sql_type == "tinyint(1)":
        return "1" if value else "0"
    base = sql_type.split("(")[0]
    if base == "decimal":
        return format(value, "f")  # exact, with every scale digit ("0.00"), never exponent notation
    if base == "double":
        return repr(value)
    if base == "date":
        return value.isoformat()
    if base == "datetime":
        return value.isoformat(sep=" ", timespec="milliseconds")
    return str(value)


def _text_converter(sql_type: str):
    """The canal_text rule of one column type as a function of a non-null value (None: the value is a string)."""
    base = sql_type.split("(")[0]
    if base in ("varchar", "text"):
        return None
    if sql_type == "tinyint(1)":
        return lambda value: "1" if value else "0"
    if base == "decimal":
        return lambda value: format(value, "f")
    if base == "double":
        return repr
    if base == "date":
        return date.isoformat
    if base == "datetime":
        return lambda value: value.isoformat(sep=" ", timespec="milliseconds")
    return str


def _sql_type_code(sql_type: str) -> int:
    return SQL_TYPE_CODES.get(sql_type) or SQL_TYPE_CODES[sql_type.split("(")[0]]


class _TableCodec:
    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.columns = [(c.name, _text_converter(c.sql_type)) for c in spec.columns]
        self.converters = dict(self.columns)
        self.header = ',"database":' + _compact(spec.db)
        self.types = (
            ',"isDdl":false,"mysqlType":'
            + _compact({c.name: c.sql_type for c in spec.columns})
            + ',"old":{old}'
            + ',"pkNames":'
            + _compact(list(spec.primary_key))
            + ',"sql":"","sqlType":'
            + _compact({c.name: _sql_type_code(c.sql_type) for c in spec.columns})
            + ',"table":'
            + _compact(spec.name)
        )
        self.types_before_old, self.types_after_old = self.types.split("{old}")
        self.kafka_key = spec.name.encode("utf-8")

    def image(self, row: dict) -> dict:
        image = {}
        for name, converter in self.columns:
            value = row[name]
            image[name] = value if converter is None or value is None else converter(value)
        return image

    def old_image(self, event: Event) -> dict:
        # Only the changed columns, with their previous values; NULL stays a present key with null.
        before = event.before
        assert before is not None
        image = {}
        for name in event.changed:
            value, converter = before[name], self.converters[name]
            image[name] = value if converter is None or value is None else converter(value)
        return image

    def message(self, events: list[Event], message_id: int) -> tuple[str, int]:
        first = events[0]
        kind = TYPES[first.op]
        if first.op == OP_DELETE:
            data = [self.image(e.before) for e in events]
        else:
            data = [self.image(e.after) for e in events]
        old = _compact([self.old_image(e) for e in events]) if first.op == OP_UPDATE else "null"
        es = events[-1].time_ms
        text = (
            '{"data":' + _compact(data) + self.header
            + f',"es":{es},"gtid":null,"id":{message_id}'
            + self.types_before_old + old + self.types_after_old
            + f',"ts":{_written_ms(es, message_id)},"type":"{kind}"}}'
        )  # fmt: skip
        return text, es


def _written_ms(es: int, message_id: int) -> int:
    # DTS writes the message shortly after the source committed it.
    return es + 5 + message_id % 300


def _ddl_message(spec: TableSpec, sql: str, es: int, message_id: int) -> str:
    return _compact(
        {
            "data": None,
            "database": spec.db,
            "es": es,
            "gtid": None,
            "id": message_id,
            "isDdl": True,
            "mysqlType": None,
            "old": None,
            "pkNames": None,
            "sql": sql,
            "sqlType": None,
            "table": spec.name,
            "ts": _written_ms(es, message_id),
            "type": "ALTER",
        }
    )


def _group_key(event: Event) -> tuple:
    """Rows that share one message: same transaction (or snapshot batch), table and type."""
    if event.epoch == 0:
        return ("init", event.table_id)
    if event.epoch is not None:
        return ("resync", event.position)
    return (event.unit, event.table_id, event.op)


def encode_canal_json(history: History, topic: str = "dts.shop", partitions: int = 1) -> Iterator[KafkaRecord]:
    """Kafka records of the DTS Canal JSON topic, in the order DTS writes them."""
    if partitions < 1:
        raise ValueError(f"partitions={partitions} must be at least 1")
    codecs = {table_id: _TableCodec(spec) for table_id, spec in history.tables.items()}
    offsets = [0] * partitions
    message_id = 0
    last_timestamp: list = [None, None]

    def _timestamp(es: int):
        # Consecutive messages mostly share their commit time; reuse the datetime.
        if last_timestamp[0] != es:
            last_timestamp[0], last_timestamp[1] = es, EPOCH_UTC + timedelta(milliseconds=es)
        return last_timestamp[1]

    def record(key: bytes, value: str, es: int) -> KafkaRecord:
        partition = zlib.crc32(key) % partitions if partitions > 1 else 0
        offset = offsets[partition]
        offsets[partition] += 1
        return KafkaRecord(topic, partition, offset, _timestamp(es), key, value.encode("utf-8"), [])

    group: list[Event] = []
    group_key: tuple | None = None
    for event in history.iter_events():
        key = _group_key(event)
        if group and (key != group_key or len(group) >= MAX_INIT_BATCH or event.ddl_before):
            message_id += 1
            codec = codecs[group[0].table_id]
            text, es = codec.message(group, message_id)
            yield record(codec.kafka_key, text, es)
            group = []
        if event.ddl_before:
            # A DDL that changes nothing the decoder keeps; it must be skipped, not applied.
            message_id += 1
            spec = history.tables[NOOP_DDL_TABLE]
            yield record(
                spec.name.encode("utf-8"),
                _ddl_message(spec, event.ddl_before, event.time_ms, message_id),
                event.time_ms,
            )
        group.append(event)
        group_key = key
    if group:
        message_id += 1
        codec = codecs[group[0].table_id]
        text, es = codec.message(group, message_id)
        yield record(codec.kafka_key, text, es)
