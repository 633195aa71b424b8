"""Encode a history as Qlik Replicate's Kafka target writes it, in JSON and in Avro (docs/format-spec.md section d).

What a consumer of these topics sees:

- one topic per table (``qlik.<db>.<table>``); JSON: one partition, Avro: two partitions by the message key (the
  primary key); metadata (MD) messages: JSON in the table's own topic, Avro in a dedicated ``qlik.metadata`` topic;
- an MD message per table before its first data message, and a second one for ``shop.customers`` at the history's
  mid-stream DDL: table version 2 moves column ``email`` to the end, so every ordinal after it shifts -- data messages
  of version 1 and version 2 must each be read with their own ordinals (and, in Avro, their own data schema);
- data messages: snapshot rows (initial load and resync) as ``REFRESH`` without changeSequence; ``INSERT``,
  ``UPDATE`` (with ``beforeData``), ``DELETE`` (row in ``beforeData`` or, for some tables, in ``data``); a
  primary-key change is ONE ``UPDATE`` whose ``beforeData`` holds the old key;
- ``changeSequence``: 35 digits (commit time yyyyMMddHHmmssSSS + an 18-digit serial), then
  ``transactionEventCounter``; ``columnMask``/``changeMask`` little-endian over the version's ordinals (JSON: hex
  text, Avro: bytes); LOB columns (``note``, a TEXT) are never in ``changeMask``;
- column gaps: one update in three comes from a source without full supplemental logging: its unchanged non-key
  columns with an even ordinal are not captured (NULL in ``data``/``beforeData``, bit 0 in ``columnMask``). A
  decoder that wrote those NULLs would lose the stored values;
- JSON: values are text; most messages in the ``atMSG`` envelope, ``shop.order_items`` bare; ``headers.
  externalSchemaId`` names the table version's schemaId. Avro: the ``MessageEnvelope``; data messages reference
  their MD by ``messageSchemaId``, every seventh embeds its schema in ``messageSchema`` instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from cdcreplay.formats.envelopes.qlik_envelope import ENVELOPE_SCHEMA  # the vendor-documented envelope
from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import EPOCH_NAIVE, EPOCH_UTC, NOOP_DDL_TABLE, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

SERVER = "replicate1"
TASK = "shop_to_kafka"
METADATA_TOPIC = "qlik.metadata"
OPERATIONS = {OP_SNAPSHOT: "REFRESH", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}
MOVED_COLUMN = "email"  # version 2 of shop.customers puts it last
ONE_MICROSECOND = timedelta(microseconds=1)
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _qlik_type(sql_type: str) -> tuple[str, int, int, int]:
    """(Qlik type, length, precision, scale) of a MySQL column type."""
    base = sql_type.split("(")[0]
    if sql_type == "tinyint(1)":
        return "BOOLEAN", 1, 0, 0
    if base == "int":
        return "INT4", 4, 0, 0
    if base == "bigint":
        return "INT8", 8, 0, 0
    if base == "varchar":
        return "STRING", int(sql_type[len("varchar(") : -1]), 0, 0
    if base == "text":
        return "CLOB", 0, 0, 0
    if base == "double":
        return "REAL8", 8, 0, 0
    if base == "decimal":
        precision, scale = (int(part) for part in sql_type[len("decimal(") : -1].split(","))
        return "NUMERIC", 0, precision, scale
    if base == "date":
        return "DATE", 0, 0, 0
    if base == "datetime":
        return "DATETIME", 0, 0, 0
    raise ValueError(f"no Qlik type for MySQL type {sql_type!r}")


def _avro_type(qlik_type: str, precision: int, scale: int):
    return {
        "BOOLEAN": "boolean",
        "INT4": "int",
        "INT8": "long",
        "STRING": "string",
        "CLOB": "string",
        "REAL8": "double",
        "DATE": {"type": "int", "logicalType": "date"},
        "DATETIME": {"type": "long", "logicalType": "timestamp-micros"},
        "NUMERIC": {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale},
    }[qlik_type]


HEADERS_SCHEMA = {
    "type": "record",
    "name": "Headers",
    "namespace": "com.attunity.queue.msg",
    "fields": [
        {
            "name": "operation",
            "type": {"type": "enum", "name": "operation", "symbols": ["INSERT", "UPDATE", "DELETE", "REFRESH"]},
        },
        {"name": "changeSequence", "type": "string"},
        {"name": "timestamp", "type": "string"},
        {"name": "streamPosition", "type": "string"},
        {"name": "transactionId", "type": "string"},
        {"name": "changeMask", "type": ["null", "bytes"], "default": None},
        {"name": "columnMask", "type": ["null", "bytes"], "default": None},
        {"name": "transactionEventCounter", "type": ["null", "long"], "default": None},
        {"name": "transactionLastEvent", "type": ["null", "boolean"], "default": None},
        {"name": "externalSchemaId", "type": ["null", "string"], "default": None},
    ],
}
# The metadata record as docs/format-spec.md section d lists its fields (Qlik publishes no Avro schema text for it).
METADATA_SCHEMA = {
    "type": "record",
    "name": "MetadataRecord",
    "namespace": "com.attunity.queue.msg",
    "fields": [
        {"name": "schemaId", "type": "string"},
        {
            "name": "lineage",
            "type": {
                "type": "record",
                "name": "Lineage",
                "fields": [
                    {"name": "server", "type": "string"},
                    {"name": "task", "type": "string"},
                    {"name": "schema", "type": "string"},
                    {"name": "table", "type": "string"},
                    {"name": "tableVersion", "type": "int"},
                    {"name": "timestamp", "type": "string"},
                ],
            },
        },
        {
            "name": "tableStructure",
            "type": {
                "type": "record",
                "name": "TableStructure",
                "fields": [
                    {
                        "name": "tableColumns",
                        "type": {
                            "type": "map",
                            "values": {
                                "type": "record",
                                "name": "Column",
                                "fields": [
                                    {"name": "ordinal", "type": "int"},
                                    {"name": "type", "type": "string"},
                                    {"name": "length", "type": "int"},
                                    {"name": "precision", "type": "int"},
                                    {"name": "scale", "type": "int"},
                                    {"name": "primaryKeyPosition", "type": "int"},
                                ],
                            },
                        },
                    }
                ],
            },
        },
        {"name": "dataSchema", "type": "string"},
    ],
}


@dataclass
class TableVersion:
    """One table version as Qlik describes it: columns in ordinal order, its data schema and schema id."""

    spec: TableSpec
    version: int
    columns: list[str]  # in ordinal order
    time_ms: int  # when its MD message is published

    def __post_init__(self) -> None:
        self.ordinals = {name: i for i, name in enumerate(self.columns, 1)}
        self.types = {c.name: _qlik_type(c.sql_type) for c in self.spec.columns}
        namespace = f"com.attunity.queue.msg.{SERVER}.{self.spec.db}.{self.spec.name}"
        data_fields = [
            {"name": name, "type": ["null", _avro_type(t[0], t[2], t[3])], "default": None}
            for name in self.columns
            for t in [self.types[name]]
        ]
        self.data_schema = {
            "type": "record",
            "name": "DataRecord",
            "namespace": namespace,
            "fields": [
                {"name": "data", "type": {"type": "record", "name": "Data", "fields": data_fields}},
                {"name": "beforeData", "type": ["null", f"{namespace}.Data"], "default": None},
                {"name": "headers", "type": HEADERS_SCHEMA},
            ],
        }
        self.data_schema_text = json.dumps(self.data_schema, separators=(",", ":"))
        self.schema_id = hashlib.md5(self.data_schema_text.encode("utf-8")).hexdigest()

    def metadata(self) -> dict:
        stamp = (EPOCH_UTC + timedelta(milliseconds=self.time_ms)).strftime("%Y-%m-%dT%H:%M:%S.%f")
        return {
            "schemaId": self.schema_id,
            "lineage": {
                "server": SERVER,
                "task": TASK,
                "schema": self.spec.db,
                "table": self.spec.name,
                "tableVersion": self.version,
                "timestamp": stamp,
            },
            "tableStructure": {
                "tableColumns": {
                    name: {
                        "ordinal": self.ordinals[name],
                        "type": self.types[name][0],
                        "length": self.types[name][1],
                        "precision": self.types[name][2],
                        "scale": self.types[name][3],
                        "primaryKeyPosition": (
                            self.spec.primary_key.index(name) + 1 if name in self.spec.primary_key else 0
                        ),
                    }
                    for name in self.columns
                }
            },
            "dataSchema": self.data_schema_text,
        }

    def mask(self, columns) -> int:
        bits = 0
        for name in columns:
            bits |= 1 << (self.ordinals[name] - 1)
        return bits


def mask_hex(bits: int, width: int) -> str:
    return mask_bytes(bits, width).hex().upper()


def mask_bytes(bits: int, width: int) -> bytes:
    return bits.to_bytes((width + 7) // 8, "little")


def _json_value(value, sql_type: str) -> str | None:
    if value is None:
        return None
    if sql_type == "tinyint(1)":
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "as_tuple"):  # Decimal: every scale digit, never exponent notation
        return format(value, "f")
    return str(value)


def _avro_value(value, sql_type: str):
    if value is None:
        return None
    if sql_type.startswith("datetime"):
        return (value - EPOCH_NAIVE) // ONE_MICROSECOND  # the wall clock as Replicate's zoneless DATETIME
    return value


@dataclass
class _Change:
    """One Qlik data message: what the encoders of both wires render."""

    event: Event
    operation: str
    version: TableVersion
    data: dict | None
    before: dict | None
    captured: list[str]
    changed: list[str]
    sequence: str
    counter: int


class QlikEncoder:
    """Turns the history into Qlik data messages (wire-independent) with table versions and column gaps."""

    def __init__(self, history: History, delete_in_data: tuple[str, ...]) -> None:
        self.history = history
        self.delete_in_data = delete_in_data
        self.serial = 0

    def _sequence(self, time_ms: int) -> str:
        self.serial += 1
        moment = EPOCH_UTC + timedelta(milliseconds=time_ms)
        return f"{moment:%Y%m%d%H%M%S}{moment.microsecond // 1000:03d}{self.serial:018d}"

    def run(self) -> Iterator[tuple[str, object]]:
        """("MD", TableVersion) and ("DT", _Change) items in the order Replicate publishes them."""
        versions: dict[str, TableVersion] = {}
        held: Event | None = None
        for event in self.history.iter_events():
            if event.table_id not in versions:
                spec = self.history.tables[event.table_id]
                versions[event.table_id] = TableVersion(spec, 1, list(spec.column_names), event.time_ms)
                yield "MD", versions[event.table_id]
            if event.ddl_before:
                # The DDL bumps the table version: Qlik publishes the new structure before the next change.
                spec = self.history.tables[NOOP_DDL_TABLE]
                current = versions[NOOP_DDL_TABLE]
                order = [c for c in current.columns if c != MOVED_COLUMN] + [MOVED_COLUMN]
                versions[NOOP_DDL_TABLE] = TableVersion(spec, current.version + 1, order, event.time_ms)
                yield "MD", versions[NOOP_DDL_TABLE]
            if held is not None:
                first, held = held, None
                if event.old_key == first.key and event.table_id == first.table_id:
                    yield "DT", self._key_change(first, event, versions[event.table_id])
                    continue
                yield "DT", self._change(first, versions[first.table_id])
            if event.new_key is not None:
                held = event  # the delete half of a primary-key change: one UPDATE together with its insert
                continue
            yield "DT", self._change(event, versions[event.table_id])
        if held is not None:
            yield "DT", self._change(held, versions[held.table_id])

    def _change(self, event: Event, version: TableVersion) -> _Change:
        spec = version.spec
        columns = version.columns
        sequence, counter = "", 0
        if event.op != OP_SNAPSHOT:
            sequence, counter = self._sequence(event.time_ms), event.tx_order or 1
        changed: list[str] = list(event.changed)
        captured = list(columns)
        if event.op == OP_UPDATE and event.position % 3 == 0:
            # No full supplemental logging: unchanged non-key columns with an even ordinal are not captured.
            captured = [
                c for c in columns if c in spec.primary_key or c in event.changed or version.ordinals[c] % 2 == 1
            ]
        data = before = None
        if event.op == OP_DELETE:
            if spec.table_id in self.delete_in_data:
                data = event.before
            else:
                before = event.before
        else:
            data = event.after
            before = event.before if event.op == OP_UPDATE else None
        return _Change(event, OPERATIONS[event.op], version, data, before, captured, changed, sequence, counter)

    def _key_change(self, deleted: Event, inserted: Event, version: TableVersion) -> _Change:
        changed = [c for c in version.columns if deleted.before[c] != inserted.after[c]]
        return _Change(
            inserted,
            "UPDATE",
            version,
            inserted.after,
            deleted.before,
            list(version.columns),
            changed,
            self._sequence(inserted.time_ms),
            inserted.tx_order or 1,
        )


def _headers(change: _Change, lob: set, mask) -> dict:
    event = change.event
    cdc = change.operation != "REFRESH"
    stamp = (EPOCH_UTC + timedelta(milliseconds=event.time_ms)).strftime("%Y-%m-%dT%H:%M:%S.%f") if cdc else ""
    width = len(change.version.columns)
    return {
        "operation": change.operation,
        "changeSequence": change.sequence,
        "timestamp": stamp,
        "streamPosition": f"{event.binlog[0]:08d}.{event.binlog[1]:08x}.{event.binlog[2]:04d}" if cdc else "",
        "transactionId": f"{event.unit:032X}" if cdc else "",
        "changeMask": mask(change.version.mask(c for c in change.changed if c not in lob), width) if cdc else None,
        "columnMask": mask(change.version.mask(change.captured), width),
        "transactionEventCounter": change.counter if cdc else None,
        "transactionLastEvent": None,  # the simulator's events do not say which one ends their transaction
        "externalSchemaId": change.version.schema_id,
    }


def _image(row: dict | None, change: _Change, render) -> dict | None:
    if row is None:
        return None
    spec = change.version.spec
    return {
        name: render(row[name], spec.column(name).sql_type) if name in change.captured else None
        for name in change.version.columns
    }


def _lob_columns(spec: TableSpec) -> set:
    return {c.name for c in spec.columns if c.sql_type.startswith("text")}


class _Offsets:
    def __init__(self) -> None:
        self.next: dict[tuple[str, int], int] = {}

    def record(self, topic: str, partition: int, time_ms: int, key, value: bytes) -> KafkaRecord:
        offset = self.next.get((topic, partition), 0)
        self.next[(topic, partition)] = offset + 1
        return KafkaRecord(topic, partition, offset, EPOCH_UTC + timedelta(milliseconds=time_ms), key, value, [])


def _topic(spec: TableSpec) -> str:
    return f"qlik.{spec.db}.{spec.name}"


def _key(change: _Change) -> bytes:
    row = change.data if change.data is not None else change.before
    return "+".join(str(row[name]) for name in change.version.spec.primary_key).encode("utf-8")


def encode_qlik_json(history: History) -> Iterator[KafkaRecord]:
    """Qlik JSON messages: MD in each table's topic; DT enveloped (``shop.order_items`` bare)."""
    offsets = _Offsets()
    for kind, item in QlikEncoder(history, delete_in_data=("shop.orders",)).run():
        if kind == "MD":
            envelope = {
                "magic": "atMSG",
                "type": "MD",
                "headers": None,
                "messageSchemaId": None,
                "messageSchema": None,
                "message": item.metadata(),
            }
            yield offsets.record(_topic(item.spec), 0, item.time_ms, None, _compact(envelope).encode("utf-8"))
            continue
        change: _Change = item
        spec = change.version.spec
        message = {
            "data": _image(change.data, change, _json_value),
            "beforeData": _image(change.before, change, _json_value),
            "headers": _headers(change, _lob_columns(spec), mask_hex),
        }
        if spec.table_id != "shop.order_items":
            message = {
                "magic": "atMSG",
                "type": "DT",
                "headers": None,
                "messageSchemaId": None,
                "messageSchema": None,
                "message": message,
            }
        value = _compact(message).encode("utf-8")
        yield offsets.record(_topic(spec), 0, change.event.time_ms, _key(change), value)


def encode_qlik_avro(history: History, partitions: int = 2) -> Iterator[KafkaRecord]:
    """Qlik Avro envelopes: MD in ``qlik.metadata``; DT by messageSchemaId (every seventh with messageSchema)."""
    import fastavro

    envelope_schema = fastavro.parse_schema(ENVELOPE_SCHEMA)
    metadata_schema = fastavro.parse_schema(METADATA_SCHEMA)
    metadata_text = json.dumps(METADATA_SCHEMA, separators=(",", ":"))
    parsed: dict[str, object] = {}
    offsets = _Offsets()
    count = 0

    def avro(schema, record) -> bytes:
        stream = io.BytesIO()
        fastavro.schemaless_writer(stream, schema, record)
        return stream.getvalue()

    def envelope(kind: str, schema_id: str | None, schema_text: str | None, body: bytes) -> bytes:
        return avro(
            envelope_schema,
            {
                "magic": b"atMSG",
                "type": kind,
                "headers": None,
                "messageSchemaId": schema_id,
                "messageSchema": schema_text,
                "message": body,
            },
        )

    for kind, item in QlikEncoder(history, delete_in_data=("shop.customers",)).run():
        if kind == "MD":
            parsed[item.schema_id] = fastavro.parse_schema(item.data_schema)
            value = envelope("MD", None, metadata_text, avro(metadata_schema, item.metadata()))
            yield offsets.record(METADATA_TOPIC, 0, item.time_ms, None, value)
            continue
        change: _Change = item
        spec, version = change.version.spec, change.version
        body = avro(
            parsed[version.schema_id],
            {
                # `data` is not nullable in the Avro record: a DELETE with its row in beforeData sends NULLs.
                "data": _image(change.data, change, _avro_value) or dict.fromkeys(version.columns),
                "beforeData": _image(change.before, change, _avro_value),
                "headers": _headers(change, _lob_columns(spec), mask_bytes),
            },
        )
        count += 1
        if count % 7 == 0:
            value = envelope("DT", None, version.data_schema_text, body)  # self-describing
        else:
            value = envelope("DT", version.schema_id, None, body)
        key = _key(change)
        yield offsets.record(_topic(spec), zlib.crc32(key) % partitions, change.event.time_ms, key, value)
