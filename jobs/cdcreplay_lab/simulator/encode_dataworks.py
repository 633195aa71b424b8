"""Encode a history as Alibaba DataWorks writes it to Kafka ("Kafka message format" of its sync-to-Kafka nodes).

What a consumer of the topic sees:

- one topic, three partitions, Kafka key = table and primary key (so one row's messages stay in one partition);
- ``{schema: {dataColumn, primaryKey, source}, payload: {before: {dataColumn}, after: {dataColumn}, sequenceId, op,
  timestamp: {eventTime, systemTime, checkpointTime}, ddl}, version}``;
- snapshot rows are INSERTs (DataWorks merges its full load into the same stream, with no marker);
- an UPDATE is two messages sharing one ``sequenceId``: UPDATE_BEFOR (before only) then UPDATE_AFTER (after only);
  with ``single_update_message=True`` ("one Kafka record per update") one UPDATE_AFTER carries both images;
- a DELETE carries the row in ``before``; a primary-key change is a DELETE then an INSERT;
- transactions of several changes are framed by TRANSACTION_BEGIN / TRANSACTION_END (partition 0); the no-op DDL of
  the history is an ALTER message; every partition gets an MHEARTBEAT every ``heartbeat_every`` messages;
- ``sequenceId`` is a 19-digit integer string, increasing in commit order across all partitions;
- types are DataWorks' six: int/bigint -> LONG, varchar/text -> STRING, tinyint(1) -> BOOLEAN, double -> DOUBLE,
  date/datetime -> DATE as epoch milliseconds of the wall clock read in DataWorks' time zone (UTC+8 here, the
  shop's own), and decimal -> STRING: DataWorks has no decimal type. ``pipeline_settings`` gives the reader what the
  format cannot carry: that time zone, and ``column_types`` for the int, decimal and date columns.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import (
    EPOCH_NAIVE,
    EPOCH_UTC,
    NOOP_DDL_TABLE,
    TABLES,
    WALL_CLOCK_OFFSET_MS,
    Event,
    History,
)
from cdcreplay_lab.simulator.records import KafkaRecord

TOPIC = "dataworks.shop"
PARTITIONS = 3
TIME_ZONE = "+08:00"  # the zone DataWorks read DATE/DATETIME wall clocks in (WALL_CLOCK_OFFSET_MS)
VERSION = "1.0.0"
ONE_MS = timedelta(milliseconds=1)
DATAWORKS_TYPES = {
    "int": "LONG",
    "bigint": "LONG",
    "tinyint(1)": "BOOLEAN",
    "varchar": "STRING",
    "text": "STRING",
    "decimal": "STRING",
    "double": "DOUBLE",
    "date": "DATE",
    "datetime": "DATE",
}

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def dataworks_type(sql_type: str) -> str:
    return DATAWORKS_TYPES.get(sql_type) or DATAWORKS_TYPES[sql_type.split("(")[0]]


def _epoch_ms(wall: datetime) -> int:
    """A wall clock read in UTC+8 as epoch milliseconds (what java.util.Date#getTime gives in that zone)."""
    return (wall - EPOCH_NAIVE) // ONE_MS - WALL_CLOCK_OFFSET_MS


def dataworks_value(value, sql_type: str):
    if value is None:
        return None
    kind = dataworks_type(sql_type)
    if kind == "DATE":
        wall = value if isinstance(value, datetime) else datetime(value.year, value.month, value.day)
        return _epoch_ms(wall)
    if kind == "BOOLEAN":
        return bool(value)
    if kind == "STRING" and not isinstance(value, str):
        return format(value, "f")  # a decimal, exactly
    return value


class _TableCodec:
    def __init__(self, table_id: str) -> None:
        spec = TABLES[table_id]
        self.spec = spec
        self.types = [(c.name, c.sql_type) for c in spec.columns]
        self.schema = {
            "dataColumn": [{"name": c.name, "type": dataworks_type(c.sql_type)} for c in spec.columns],
            "primaryKey": list(spec.primary_key),
            "source": {"dbType": "MySQL", "dbVersion": "8.0.32", "dbName": spec.db, "tableName": spec.name},
        }

    def image(self, row: dict | None) -> dict | None:
        if row is None:
            return None
        return {"dataColumn": {name: dataworks_value(row[name], sql_type) for name, sql_type in self.types}}

    def kafka_key(self, key: tuple) -> bytes:
        return (self.spec.name + ":" + _compact(list(key))).encode("utf-8")


class _Writer:
    def __init__(self, topic: str, first_sequence: int) -> None:
        self.topic = topic
        self.offsets = [0] * PARTITIONS
        self.sequence = first_sequence
        self.messages = 0

    def next_sequence(self) -> str:
        self.sequence += 1
        return str(self.sequence)

    def record(self, partition: int, key: bytes | None, document: dict, time_ms: int) -> KafkaRecord:
        offset = self.offsets[partition]
        self.offsets[partition] += 1
        self.messages += 1
        value = _compact(document).encode("utf-8")
        return KafkaRecord(self.topic, partition, offset, EPOCH_UTC + timedelta(milliseconds=time_ms), key, value, [])


def _payload(op: str, before, after, sequence: str | None, time_ms: int, ddl: dict | None = None) -> dict:
    return {
        "before": before,
        "after": after,
        "sequenceId": sequence,
        "timestamp": {"eventTime": time_ms, "systemTime": time_ms + 850, "checkpointTime": time_ms},
        "op": op,
        "ddl": ddl,
    }


EMPTY_SCHEMA = {"dataColumn": None, "primaryKey": None, "source": None}


def encode_dataworks_json(
    history: History,
    topic: str = TOPIC,
    single_update_message: bool = False,
    heartbeat_every: int = 250,
    first_sequence: int | None = None,
) -> Iterator[KafkaRecord]:
    """Kafka records of a DataWorks sync-to-Kafka topic, in the order DataWorks writes them."""
    codecs = {table_id: _TableCodec(table_id) for table_id in history.tables}
    writer = _Writer(topic, first_sequence if first_sequence is not None else _first_sequence(history))
    since_heartbeat = 0
    open_unit: int | None = None

    def partition_of(key: bytes) -> int:
        return zlib.crc32(key) % PARTITIONS

    def heartbeats(time_ms: int) -> Iterator[KafkaRecord]:
        for partition in range(PARTITIONS):
            document = {"schema": EMPTY_SCHEMA, "payload": _payload("MHEARTBEAT", None, None, None, time_ms)}
            document["payload"]["timestamp"].pop("systemTime")
            yield writer.record(partition, None, {**document, "version": "0.0.1"}, time_ms)

    def marker(op: str, event: Event) -> KafkaRecord:
        document = {"schema": EMPTY_SCHEMA, "payload": _payload(op, None, None, writer.next_sequence(), event.time_ms)}
        return writer.record(0, None, {**document, "version": VERSION}, event.time_ms)

    def row(op: str, codec: _TableCodec, event: Event, before, after, sequence: str) -> KafkaRecord:
        key = codec.kafka_key(event.key)
        document = {"schema": codec.schema, "payload": _payload(op, before, after, sequence, event.time_ms)}
        return writer.record(partition_of(key), key, {**document, "version": VERSION}, event.time_ms)

    def close_unit() -> Iterator[KafkaRecord]:
        nonlocal open_unit
        if open_unit is not None:
            yield marker("TRANSACTION_END", last_event)
            open_unit = None

    last_event: Event | None = None
    for event in history.iter_events():
        if open_unit is not None and event.unit != open_unit:
            yield from close_unit()
        if since_heartbeat >= heartbeat_every and open_unit is None:
            yield from heartbeats(event.time_ms)
            since_heartbeat = 0
        since_heartbeat += 1
        codec = codecs[event.table_id]
        if event.ddl_before:
            spec = history.tables[NOOP_DDL_TABLE]
            key = spec.name.encode("utf-8")
            ddl = {"text": event.ddl_before, "ddlMeta": None}
            document = {
                "schema": codecs[NOOP_DDL_TABLE].schema,
                "payload": _payload("ALTER", None, None, writer.next_sequence(), event.time_ms, ddl),
            }
            yield writer.record(partition_of(key), key, {**document, "version": VERSION}, event.time_ms)
        if event.tx_id is not None and open_unit is None:
            open_unit = event.unit
            yield marker("TRANSACTION_BEGIN", event)
        last_event = event
        if event.op in (OP_SNAPSHOT, OP_INSERT):
            yield row("INSERT", codec, event, None, codec.image(event.after), writer.next_sequence())
        elif event.op == OP_DELETE:
            yield row("DELETE", codec, event, codec.image(event.before), None, writer.next_sequence())
        elif event.op == OP_UPDATE:
            sequence = writer.next_sequence()
            before, after = codec.image(event.before), codec.image(event.after)
            if single_update_message:
                yield row("UPDATE_AFTER", codec, event, before, after, sequence)
            else:
                yield row("UPDATE_BEFOR", codec, event, before, None, sequence)
                yield row("UPDATE_AFTER", codec, event, None, after, sequence)
    yield from close_unit()


def _first_sequence(history: History) -> int:
    # DataWorks' ids look like <epoch ms of the task start> followed by a 6-digit counter.
    return int(history.start.timestamp() * 1000) * 1_000_000


def encode(history: History, out_dir: Path, **options) -> Iterator[KafkaRecord]:
    return encode_dataworks_json(history, **options)


def pipeline_settings(out_dir: Path) -> dict:
    """What DataWorks cannot carry: the time zone of its DATE values, the int/decimal/date column types."""
    carried = {"LONG": "bigint", "STRING": "string", "DATE": "timestamp_ntz", "DOUBLE": "double", "BOOLEAN": "boolean"}
    tables = {}
    for table_id, spec in TABLES.items():
        types = {
            column.name: column.spark_type
            for column in spec.columns
            if carried[dataworks_type(column.sql_type)] != column.spark_type
        }
        tables[table_id] = {"column_types": types}
    return {"options": {"time_zone": TIME_ZONE}, "tables": tables}
