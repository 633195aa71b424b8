"""Encode a history as the Debezium MySQL connector writes it through Confluent's AvroConverter.

The same events as ``encode_debezium`` (snapshot markers, incremental resync, tombstones, primary-key changes with
``__debezium.newkey``/``__debezium.oldkey`` headers), but keys and values are Confluent-framed Avro: byte 0x00, the
4-byte schema id, the Avro binary. The writer schemas carry the Connect schema the way AvroConverter maps it
(``connect.name``, ``connect.parameters``, the ``decimal`` logical type) and are written as the registry export a
consumer would use: ``<out_dir>/_schemas/<id>.avsc`` (an underscore folder, skipped by the archive reader).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from cdcreplay.schema import OP_DELETE
from cdcreplay_lab.simulator.encode_debezium import (
    DEBEZIUM_VERSION,
    HEADER_NEW_KEY,
    HEADER_OLD_KEY,
    OPS,
    SERVER_ID,
    SNAPSHOT_ENUM,
    _days,
    _epoch_ms,
)
from cdcreplay_lab.simulator.history import EPOCH_UTC, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

SCHEMA_FOLDER = "_schemas"
FIRST_SCHEMA_ID = 101


def _column_type(sql_type: str):
    """Avro type of one MySQL column as AvroConverter writes Debezium's Connect schema, and its value converter."""
    base = sql_type.split("(")[0]
    if sql_type == "tinyint(1)":
        return "boolean", None
    if base == "int":
        return "int", None
    if base == "bigint":
        return "long", None
    if base in ("varchar", "text"):
        return "string", None
    if base == "double":
        return "double", None
    if base == "decimal":
        precision, scale = (int(part) for part in sql_type[len("decimal(") : -1].split(","))
        return {
            "type": "bytes",
            "scale": scale,
            "precision": precision,
            "connect.version": 1,
            "connect.parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
            "connect.name": "org.apache.kafka.connect.data.Decimal",
            "logicalType": "decimal",
        }, None
    if base == "date":
        return {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}, _days
    if base == "datetime":
        return {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.Timestamp"}, _epoch_ms
    raise ValueError(f"no Debezium Avro mapping for MySQL type {sql_type!r}")


def _field(name: str, avro_type, nullable: bool) -> dict:
    if nullable:
        return {"name": name, "type": ["null", avro_type], "default": None}
    return {"name": name, "type": avro_type}


SOURCE_SCHEMA = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.mysql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {
            "name": "snapshot",
            "type": [
                {
                    "type": "string",
                    "connect.version": 1,
                    "connect.parameters": {"allowed": SNAPSHOT_ENUM},
                    "connect.default": "false",
                    "connect.name": "io.debezium.data.Enum",
                },
                "null",
            ],
            "default": "false",
        },
        {"name": "db", "type": "string"},
        {"name": "table", "type": ["null", "string"], "default": None},
        {"name": "server_id", "type": "long"},
        {"name": "gtid", "type": ["null", "string"], "default": None},
        {"name": "file", "type": "string"},
        {"name": "pos", "type": "long"},
        {"name": "row", "type": "int"},
        {"name": "thread", "type": ["null", "long"], "default": None},
        {"name": "query", "type": ["null", "string"], "default": None},
    ],
    "connect.name": "io.debezium.connector.mysql.Source",
}
TRANSACTION_SCHEMA = {
    "type": "record",
    "name": "block",
    "namespace": "event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ],
    "connect.version": 1,
    "connect.name": "event.block",
}


class _TableCodec:
    """Writer schemas (with their registry ids) and the Avro encoding of one table's keys and values."""

    def __init__(self, spec: TableSpec, server: str, key_id: int, value_id: int) -> None:
        import fastavro

        self.spec = spec
        self.topic = f"{server}.{spec.db}.{spec.name}"
        namespace = self.topic
        fields, self.converters = [], []
        for column in spec.columns:
            avro_type, converter = _column_type(column.sql_type)
            fields.append(_field(column.name, avro_type, column.nullable))
            self.converters.append((column.name, converter))
        self.key_schema = {
            "type": "record",
            "name": "Key",
            "namespace": namespace,
            "fields": [f for f in fields if f["name"] in spec.primary_key],
            "connect.name": f"{namespace}.Key",
        }
        value_record = {
            "type": "record",
            "name": "Value",
            "namespace": namespace,
            "fields": fields,
            "connect.name": f"{namespace}.Value",
        }
        self.value_schema = {
            "type": "record",
            "name": "Envelope",
            "namespace": namespace,
            "fields": [
                {"name": "before", "type": ["null", value_record], "default": None},
                {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
                {"name": "source", "type": SOURCE_SCHEMA},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
                {"name": "transaction", "type": ["null", TRANSACTION_SCHEMA], "default": None},
            ],
            "connect.version": 1,
            "connect.name": f"{namespace}.Envelope",
        }
        self.key_id, self.value_id = key_id, value_id
        self.parsed_key = fastavro.parse_schema(self.key_schema)
        self.parsed_value = fastavro.parse_schema(self.value_schema)
        self.server = server
        converters = dict(self.converters)
        self.key_converters = [(name, converters[name]) for name in spec.primary_key]

    def _framed(self, schema_id: int, parsed, record: dict) -> bytes:
        import fastavro

        stream = io.BytesIO()
        stream.write(b"\x00" + struct.pack(">I", schema_id))
        fastavro.schemaless_writer(stream, parsed, record)
        return stream.getvalue()

    def key_record(self, key: tuple) -> dict:
        return {
            name: value if converter is None else converter(value)
            for (name, converter), value in zip(self.key_converters, key, strict=True)
        }

    def key_bytes(self, key: tuple) -> bytes:
        return self._framed(self.key_id, self.parsed_key, self.key_record(key))

    def row(self, row: dict | None) -> dict | None:
        if row is None:
            return None
        return {
            name: row[name] if converter is None or row[name] is None else converter(row[name])
            for name, converter in self.converters
        }

    def value_bytes(self, event: Event, snapshot: str) -> bytes:
        file_seq, pos, row = event.binlog
        transaction = None
        if event.tx_id is not None:
            transaction = {
                "id": event.tx_id,
                "total_order": event.tx_order,
                "data_collection_order": event.tx_table_order,
            }
        value = {
            "before": self.row(event.before),
            "after": self.row(event.after),
            "source": {
                "version": DEBEZIUM_VERSION,
                "connector": "mysql",
                "name": self.server,
                "ts_ms": event.time_ms,
                "snapshot": snapshot,
                "db": self.spec.db,
                "table": self.spec.name,
                "server_id": SERVER_ID,
                "gtid": None,
                "file": f"mysql-bin.{file_seq:06d}",
                "pos": pos,
                "row": row,
                "thread": None,
                "query": None,
            },
            "op": OPS[event.op],
            "ts_ms": event.time_ms + 20 + event.position % 480,
            "transaction": transaction,
        }
        return self._framed(self.value_id, self.parsed_value, value)


def write_schemas(codecs: dict[str, _TableCodec], out_dir: Path) -> Path:
    """The registry export a consumer of these topics needs: ``<id>.avsc`` per key and value schema."""
    folder = Path(out_dir) / SCHEMA_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for codec in codecs.values():
        (folder / f"{codec.key_id}.avsc").write_text(json.dumps(codec.key_schema, indent=1), encoding="utf-8")
        (folder / f"{codec.value_id}.avsc").write_text(json.dumps(codec.value_schema, indent=1), encoding="utf-8")
    return folder


def encode_debezium_avro(
    history: History, out_dir: Path, partitions: int = 3, server: str = "dbserver1"
) -> Iterator[KafkaRecord]:
    """Kafka records of every table topic in the connector's order; writes the schemas under ``out_dir`` first."""
    if partitions < 1:
        raise ValueError(f"partitions={partitions} must be at least 1")
    codecs = {
        table_id: _TableCodec(spec, server, FIRST_SCHEMA_ID + 2 * i, FIRST_SCHEMA_ID + 2 * i + 1)
        for i, (table_id, spec) in enumerate(sorted(history.tables.items()))
    }
    write_schemas(codecs, out_dir)
    return _records(history, codecs, partitions)


def _records(history: History, codecs: dict[str, _TableCodec], partitions: int) -> Iterator[KafkaRecord]:
    offsets: dict[tuple[str, int], int] = {}

    def record(topic: str, partition: int, timestamp: datetime, key: bytes, value, headers) -> KafkaRecord:
        offset = offsets.get((topic, partition), 0)
        offsets[(topic, partition)] = offset + 1
        return KafkaRecord(topic, partition, offset, timestamp, key, value, headers)

    events = history.iter_events()
    upcoming = next(events, None)
    first_initial = True
    while upcoming is not None:
        event, upcoming = upcoming, next(events, None)
        codec = codecs[event.table_id]
        timestamp = EPOCH_UTC + timedelta(milliseconds=event.time_ms)
        key = codec.key_bytes(event.key)
        partition = zlib.crc32(key) % partitions
        if event.epoch == 0:
            is_last = upcoming is None or upcoming.epoch != 0
            snapshot = "first" if first_initial else ("last" if is_last else "true")
            first_initial = False
        elif event.epoch is not None:
            snapshot = "incremental"
        else:
            snapshot = "false"
        headers: list[tuple[str, bytes]] = []
        # The key-change headers name the other key as Connect's header converter renders a struct: its JSON.
        if event.new_key is not None:
            headers = [(HEADER_NEW_KEY, json.dumps(codec.key_record(event.new_key)).encode("utf-8"))]
        elif event.old_key is not None:
            headers = [(HEADER_OLD_KEY, json.dumps(codec.key_record(event.old_key)).encode("utf-8"))]
        yield record(codec.topic, partition, timestamp, key, codec.value_bytes(event, snapshot), headers)
        if event.op == OP_DELETE:
            yield record(codec.topic, partition, timestamp, key, None, [])  # tombstone
