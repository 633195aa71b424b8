"""Encode a history as the Debezium MySQL connector writes it through Kafka Connect's JsonConverter.

What a consumer of these topics sees (Debezium 2.7, ``decimal.handling.mode=precise``, ``time.precision.mode=
adaptive_time_microseconds``, transaction metadata on):

- one topic per table, ``<server>.<db>.<table>``, partitioned by the record key (here crc32 of the key JSON);
- key = the primary-key struct, value = the change envelope ``{before, after, source, op, ts_ms, transaction}``,
  each wrapped as ``{"schema": ..., "payload": ...}`` when ``schemas.enable`` is on;
- initial snapshot rows: ``op=r``, ``source.snapshot`` first/true/last, all at the snapshot's binlog point;
- resync rows (an incremental snapshot): ``op=r``, ``source.snapshot=incremental``, at the binlog position current
  when the chunk was read;
- a delete is followed by a tombstone (same key, null value) so log compaction can drop the key;
- a primary-key change is a delete of the old key (header ``__debezium.newkey``), its tombstone, and a create of the
  new key (header ``__debezium.oldkey``), all three from the one UPDATE row in the binlog.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import EPOCH_DATE, EPOCH_NAIVE, EPOCH_UTC, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

DEBEZIUM_VERSION = "2.7.0.Final"
SERVER_ID = 1
OPS = {OP_SNAPSHOT: "r", OP_INSERT: "c", OP_UPDATE: "u", OP_DELETE: "d"}
HEADER_NEW_KEY = "__debezium.newkey"
HEADER_OLD_KEY = "__debezium.oldkey"
SNAPSHOT_ENUM = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"

ONE_MS = timedelta(milliseconds=1)


# JsonConverter writes compact JSON with non-ASCII characters as UTF-8.
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def decimal_to_base64(value: Decimal, scale: int) -> str:
    """Kafka Connect Decimal: base64 of the unscaled value as a minimal big-endian two's-complement integer."""
    unscaled = int(value.scaleb(scale))
    # Java's BigInteger.toByteArray length: bitLength() excludes the sign bit, plus one byte for it.
    bits = unscaled.bit_length() if unscaled >= 0 else (~unscaled).bit_length()
    return base64.b64encode(unscaled.to_bytes(bits // 8 + 1, "big", signed=True)).decode("ascii")


def decimal_from_base64(text: str, scale: int) -> Decimal:
    return Decimal(int.from_bytes(base64.b64decode(text), "big", signed=True)).scaleb(-scale)


def _days(value: date) -> int:
    return (value - EPOCH_DATE).days


def _epoch_ms(value: datetime) -> int:
    # io.debezium.time.Timestamp: the DATETIME wall clock read as if it were UTC, in epoch milliseconds.
    return (value - EPOCH_NAIVE) // ONE_MS


def _field_schema(sql_type: str, nullable: bool, name: str) -> tuple[dict, Callable | None]:
    """Connect schema of one column and the converter from the simulator's Python value to its JSON value."""
    base = sql_type.split("(")[0]
    optional = {"optional": nullable}
    if sql_type == "tinyint(1)":
        return {"type": "boolean", **optional, "field": name}, None
    if base == "int":
        return {"type": "int32", **optional, "field": name}, None
    if base == "bigint":
        return {"type": "int64", **optional, "field": name}, None
    if base in ("varchar", "text"):
        return {"type": "string", **optional, "field": name}, None
    if base == "double":
        return {"type": "double", **optional, "field": name}, None
    if base == "decimal":
        precision, scale = (int(part) for part in sql_type[len("decimal(") : -1].split(","))
        schema = {
            "type": "bytes",
            **optional,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
            "field": name,
        }
        return schema, lambda value: decimal_to_base64(value, scale)
    if base == "date":
        return {"type": "int32", **optional, "name": "io.debezium.time.Date", "version": 1, "field": name}, _days
    if base == "datetime":
        schema = {"type": "int64", **optional, "name": "io.debezium.time.Timestamp", "version": 1, "field": name}
        return schema, _epoch_ms
    raise ValueError(f"no Debezium mapping for MySQL type {sql_type!r}")


SOURCE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {
            "type": "string",
            "optional": True,
            "name": "io.debezium.data.Enum",
            "version": 1,
            "parameters": {"allowed": SNAPSHOT_ENUM},
            "default": "false",
            "field": "snapshot",
        },
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "table"},
        {"type": "int64", "optional": False, "field": "server_id"},
        {"type": "string", "optional": True, "field": "gtid"},
        {"type": "string", "optional": False, "field": "file"},
        {"type": "int64", "optional": False, "field": "pos"},
        {"type": "int32", "optional": False, "field": "row"},
        {"type": "int64", "optional": True, "field": "thread"},
        {"type": "string", "optional": True, "field": "query"},
    ],
    "optional": False,
    "name": "io.debezium.connector.mysql.Source",
    "field": "source",
}
TRANSACTION_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


class _TableCodec:
    """Precomputed schemas and converters of one table; turns events into key and value JSON text."""

    def __init__(self, spec: TableSpec, server: str, schemas: bool) -> None:
        self.spec = spec
        self.topic = f"{server}.{spec.db}.{spec.name}"
        self.server = server
        self.schemas = schemas
        fields, self.converters = [], []
        for column in spec.columns:
            schema, converter = _field_schema(column.sql_type, column.nullable, column.name)
            fields.append(schema)
            self.converters.append((column.name, converter))
        key_fields = [f for f in fields if f["field"] in spec.primary_key]
        self.key_columns = spec.primary_key
        key_converters = dict(self.converters)
        self.key_converters = [(name, key_converters[name]) for name in spec.primary_key]
        # Integer keys (all of this schema's keys) render without a JSON encoder call.
        integer_key = all(spec.column(name).sql_type in ("int", "bigint") for name in spec.primary_key)
        self.key_format = "{" + ",".join(f'"{name}":%d' for name in spec.primary_key) + "}" if integer_key else None
        # Row images by key: the after image of one event is usually the before image of the next on that key.
        self.images: dict[tuple, tuple[dict, str]] = {}
        key_schema = {"type": "struct", "fields": key_fields, "optional": False, "name": f"{self.topic}.Key"}
        row_schema = {"type": "struct", "fields": fields, "optional": True, "name": f"{self.topic}.Value"}
        envelope = {
            "type": "struct",
            "fields": [
                {**row_schema, "field": "before"},
                {**row_schema, "field": "after"},
                SOURCE_SCHEMA,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                TRANSACTION_SCHEMA,
            ],
            "optional": False,
            "name": f"{self.topic}.Envelope",
            "version": 1,
        }
        self.key_prefix = '{"schema":' + _compact(key_schema) + ',"payload":' if schemas else ""
        self.value_prefix = '{"schema":' + _compact(envelope) + ',"payload":' if schemas else ""
        self.suffix = "}" if schemas else ""
        self.source_prefix = (
            '{"version":"' + DEBEZIUM_VERSION + '","connector":"mysql","name":' + _compact(server) + ',"ts_ms":'
        )
        self.source_table = ',"db":' + _compact(spec.db) + ',"table":' + _compact(spec.name)

    def key_payload(self, key: tuple) -> str:
        if self.key_format is not None:
            return self.key_format % key
        return _compact(
            {
                name: (value if converter is None else converter(value))
                for (name, converter), value in zip(self.key_converters, key, strict=True)
            }
        )

    def key_bytes(self, key_payload: str) -> bytes:
        return (self.key_prefix + key_payload + self.suffix).encode("utf-8")

    def row(self, key: tuple, row: dict | None) -> str:
        if row is None:
            return "null"
        cached = self.images.get(key)
        if cached is not None and cached[0] is row:
            return cached[1]
        image = {}
        for name, converter in self.converters:
            value = row[name]
            image[name] = value if converter is None or value is None else converter(value)
        text = _compact(image)
        self.images[key] = (row, text)
        return text

    def value_bytes(self, event: Event, snapshot: str) -> bytes:
        file_seq, pos, row = event.binlog
        source = (
            f'{self.source_prefix}{event.time_ms},"snapshot":"{snapshot}"{self.source_table},'
            f'"server_id":{SERVER_ID},"gtid":null,"file":"mysql-bin.{file_seq:06d}","pos":{pos},"row":{row},'
            '"thread":null,"query":null}'
        )
        if event.tx_id is None:
            transaction = "null"
        else:
            transaction = (
                f'{{"id":{_compact(event.tx_id)},"total_order":{event.tx_order},'
                f'"data_collection_order":{event.tx_table_order}}}'
            )
        # Envelope ts_ms is when the connector processed the event: a little after the source event time.
        processed_ms = event.time_ms + 20 + event.position % 480
        payload = (
            f'{{"before":{self.row(event.key, event.before)},"after":{self.row(event.key, event.after)},'
            f'"source":{source},'
            f'"op":"{OPS[event.op]}","ts_ms":{processed_ms},"transaction":{transaction}}}'
        )
        return (self.value_prefix + payload + self.suffix).encode("utf-8")


def encode_debezium_json(
    history: History, schemas: bool = True, partitions: int = 3, server: str = "dbserver1"
) -> Iterator[KafkaRecord]:
    """Kafka records of every table topic, in the order the connector produces them (the history's order)."""
    if partitions < 1:
        raise ValueError(f"partitions={partitions} must be at least 1")
    codecs = {table_id: _TableCodec(spec, server, schemas) for table_id, spec in history.tables.items()}
    offsets: dict[tuple[str, int], int] = {}
    timestamps: tuple[int, datetime] = (-1, EPOCH_UTC)

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
        if event.time_ms != timestamps[0]:
            timestamps = (event.time_ms, EPOCH_UTC + timedelta(milliseconds=event.time_ms))
        timestamp = timestamps[1]
        key_payload = codec.key_payload(event.key)
        partition = zlib.crc32(key_payload.encode("utf-8")) % partitions
        key = codec.key_bytes(key_payload)
        if event.epoch == 0:
            # Initial snapshot markers: "first" on the very first row, "last" on the last row of the whole snapshot.
            is_last = upcoming is None or upcoming.epoch != 0
            snapshot = "first" if first_initial else ("last" if is_last else "true")
            first_initial = False
        elif event.epoch is not None:
            snapshot = "incremental"
        else:
            snapshot = "false"
        headers: list[tuple[str, bytes]] = []
        if event.new_key is not None:
            headers = [(HEADER_NEW_KEY, codec.key_bytes(codec.key_payload(event.new_key)))]
        elif event.old_key is not None:
            headers = [(HEADER_OLD_KEY, codec.key_bytes(codec.key_payload(event.old_key)))]
        yield record(codec.topic, partition, timestamp, key, codec.value_bytes(event, snapshot), headers)
        if event.op == OP_DELETE:
            codec.images.pop(event.key, None)
            # Tombstone: lets Kafka log compaction drop the key; carries no change of its own.
            yield record(codec.topic, partition, timestamp, key, None, [])
