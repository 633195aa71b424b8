"""Encode a history as Alibaba DTS writes it in "DTS Avro" (a change-tracking / subscription topic).

What a consumer of the topic sees:

- one topic, one partition (DTS keeps the global order); each value is the raw Avro binary of one
  ``com.alibaba.dts.formats.avro.Record`` (SpecificDatumWriter: no framing), no Kafka key;
- ``id`` numbers every record of the stream; ``sourceTimestamp`` is the commit time in seconds, ``bornTimestamp`` in
  milliseconds; ``sourcePosition`` ``<seconds>@<binlog file>:<pos>``; ``tags.pk_uk_info`` ``{"PRIMARY": [...]}``;
- snapshot rows (initial load and resync) are ``INIT`` records; every source transaction is framed by BEGIN and
  COMMIT records; the no-op DDL is a ``DDL`` record whose ``afterImages`` is the SQL text; a HEARTBEAT record every
  ``heartbeat_every`` records;
- ``fields`` lists every column with its MySQL binlog type code; images are positional lists of value unions:
  int/bigint/tinyint(1) -> Integer (decimal text), varchar -> Character (utf8mb4; latin1 for ``order_items.sku``),
  text -> TextObject TEXT, decimal -> Decimal (text, precision, scale), double -> Float, date -> DateTime (y/m/d),
  datetime -> DateTime whose ``millis`` holds MICROseconds;
- the binlog rotates midway and the server switches to ``binlog_row_image=MINIMAL``: from then on an UPDATE's before
  image holds the key columns only and its after image the changed columns only, a DELETE's before image the key
  columns only -- every other column is ``EmptyObject.NONE`` (absent, not NULL);
- a primary-key change is a DELETE then an INSERT.
The binlog type codes carry no signedness and no TINYINT(1)-as-boolean: ``pipeline_settings`` declares the int,
bigint and boolean columns a reader would otherwise get as bigint, decimal(20,0) and int.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.dts_record_schema import NAMESPACE, parsed_record_schema, write_record_schema
from cdcreplay_lab.simulator.history import BINLOG_FIRST_FILE, NOOP_DDL_TABLE, TABLES, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord

TOPIC = "dts.shop.avro"
SCHEMA_FILE = "_dts_record.avsc"
MYSQL_VERSION = "8.0.32"
OPERATIONS = {OP_SNAPSHOT: "INIT", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}
# MySQL column type -> (binlog type code, Integer display precision)
TYPE_CODES = {
    "tinyint(1)": (1, 4),
    "int": (3, 11),
    "bigint": (8, 20),
    "varchar": (253, 0),
    "text": (252, 0),
    "decimal": (246, 0),
    "double": (5, 0),
    "date": (10, 0),
    "datetime": (12, 0),
}
LATIN1_COLUMNS = {("shop.order_items", "sku")}
NONE = (f"{NAMESPACE}.EmptyObject", "NONE")


def _type_code(sql_type: str) -> tuple[int, int]:
    return TYPE_CODES.get(sql_type) or TYPE_CODES[sql_type.split("(")[0]]


def _value(table_id: str, name: str, sql_type: str, value):
    """One column value as the union branch DTS writes for it."""
    if value is None:
        return None
    base = sql_type.split("(")[0]
    code, precision = _type_code(sql_type)
    if code in (1, 3, 8):
        return (f"{NAMESPACE}.Integer", {"precision": precision, "value": str(int(value))})
    if base == "varchar":
        charset = "latin1" if (table_id, name) in LATIN1_COLUMNS else "utf8mb4"
        encoding = "cp1252" if charset == "latin1" else "utf-8"
        return (f"{NAMESPACE}.Character", {"charset": charset, "value": value.encode(encoding)})
    if base == "text":
        return (f"{NAMESPACE}.TextObject", {"type": "TEXT", "value": value})
    if base == "decimal":
        digits, scale = (int(part) for part in sql_type[len("decimal(") : -1].split(","))
        return (f"{NAMESPACE}.Decimal", {"value": format(value, "f"), "precision": digits, "scale": scale})
    if base == "double":
        # MySQL reports a DOUBLE without (M,D) with display width 22 and NOT_FIXED_DEC (31) decimals.
        return (f"{NAMESPACE}.Float", {"value": value, "precision": 22, "scale": 31})
    if base == "date":
        assert isinstance(value, date)
        parts = {"year": value.year, "month": value.month, "day": value.day}
        return (f"{NAMESPACE}.DateTime", {**parts, "hour": None, "minute": None, "second": None, "millis": None})
    if base == "datetime":
        assert isinstance(value, datetime)
        parts = {"year": value.year, "month": value.month, "day": value.day, "hour": value.hour}
        # `millis` is named so but holds microseconds.
        parts.update({"minute": value.minute, "second": value.second, "millis": value.microsecond})
        return (f"{NAMESPACE}.DateTime", parts)
    raise ValueError(f"no DTS Avro mapping for MySQL type {sql_type!r}")


class _TableCodec:
    def __init__(self, spec: TableSpec) -> None:
        self.spec = spec
        self.fields = [{"name": c.name, "dataTypeNumber": _type_code(c.sql_type)[0]} for c in spec.columns]
        self.tags = {"pk_uk_info": json.dumps({"PRIMARY": list(spec.primary_key)}, separators=(",", ":"))}

    def image(self, row: dict | None, carried=None) -> list | None:
        """Positional values; columns not in ``carried`` (a MINIMAL row image) are EmptyObject.NONE."""
        if row is None:
            return None
        return [
            _value(self.spec.table_id, c.name, c.sql_type, row[c.name])
            if carried is None or c.name in carried
            else NONE
            for c in self.spec.columns
        ]


class _Writer:
    def __init__(self, topic: str) -> None:
        import fastavro

        self.topic = topic
        self.schema = parsed_record_schema()
        self.write = fastavro.schemaless_writer
        self.id = 0

    def record(self, event: Event, operation: str, **fields) -> KafkaRecord:
        self.id += 1
        seconds = event.time_ms // 1000
        document = {
            "version": 1,
            "id": self.id,
            "sourceTimestamp": seconds,
            "sourcePosition": f"{seconds}@{event.binlog_file}:{event.binlog[1]}",
            "safeSourcePosition": f"{seconds}@{event.binlog_file}:{event.binlog[1]}",
            "sourceTxid": str(event.unit),
            "source": {"sourceType": "MySQL", "version": MYSQL_VERSION},
            "operation": operation,
            "objectName": None,
            "processTimestamps": None,
            "tags": {},
            "fields": None,
            "beforeImages": None,
            "afterImages": None,
            "bornTimestamp": event.time_ms,
            **fields,
        }
        stream = io.BytesIO()
        self.write(stream, self.schema, document)
        return KafkaRecord(self.topic, 0, self.id - 1, event.time, None, stream.getvalue(), [])


def _minimal(event: Event) -> bool:
    """After the binlog rotation the server logs MINIMAL row images (streaming updates and deletes only)."""
    return event.epoch is None and event.binlog[0] > BINLOG_FIRST_FILE and event.op in (OP_UPDATE, OP_DELETE)


def encode_dts_avro(history: History, topic: str = TOPIC, heartbeat_every: int = 200) -> Iterator[KafkaRecord]:
    """Kafka records of the DTS Avro topic, in stream order."""
    codecs = {table_id: _TableCodec(spec) for table_id, spec in history.tables.items()}
    writer = _Writer(topic)
    open_unit: Event | None = None
    since_heartbeat = 0
    for event in history.iter_events():
        if open_unit is not None and event.unit != open_unit.unit:
            yield writer.record(open_unit, "COMMIT")
            open_unit = None
        if since_heartbeat >= heartbeat_every and open_unit is None:
            yield writer.record(event, "HEARTBEAT")
            since_heartbeat = 0
        since_heartbeat += 1
        if event.ddl_before:
            yield writer.record(event, "DDL", objectName=NOOP_DDL_TABLE, fields=None, afterImages=event.ddl_before)
        if event.epoch is None and open_unit is None:
            open_unit = event
            yield writer.record(event, "BEGIN")
        codec = codecs[event.table_id]
        spec = codec.spec
        key_columns = set(spec.primary_key)
        before_columns = after_columns = None
        if _minimal(event):
            before_columns = key_columns
            after_columns = set(event.changed)
        yield writer.record(
            event,
            OPERATIONS[event.op],
            objectName=spec.table_id,
            tags=codec.tags,
            fields=codec.fields,
            beforeImages=codec.image(event.before, before_columns),
            afterImages=codec.image(event.after, after_columns),
        )
        if event.epoch is None:
            open_unit = event
    if open_unit is not None:
        yield writer.record(open_unit, "COMMIT")


def encode(history: History, out_dir: Path, **options) -> Iterator[KafkaRecord]:
    write_record_schema(Path(out_dir) / SCHEMA_FILE)
    return encode_dts_avro(history, **options)


def pipeline_settings(out_dir: Path) -> dict:
    """The writer schema written beside the archive, and the types the binlog codes cannot tell."""
    narrowed = {"int": "int", "bigint": "bigint", "tinyint(1)": "boolean"}
    tables = {}
    for table_id, spec in TABLES.items():
        types = {c.name: narrowed[c.sql_type] for c in spec.columns if c.sql_type in narrowed}
        tables[table_id] = {"column_types": types}
    return {"options": {"writer_schema": str(Path(out_dir) / SCHEMA_FILE)}, "tables": tables}
