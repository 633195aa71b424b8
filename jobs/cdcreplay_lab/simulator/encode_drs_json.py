"""Encode a history as Huawei Cloud DRS writes it to Kafka in JSON / JSON-C (docs/format-spec.md c1-c3, seed 002).

Sources (``source``):
  mysql       "JSON" of a MySQL source: ``mysqlType`` with bare type names as in the vendor sample ("int", "varchar",
              "decimal" -- no length or precision), ``sqlType`` codes as in the sample (DATETIME 94), an UPDATE's
              ``old`` is the full before image, a DELETE's row is in ``old`` (``data`` null).
  json-c      "JSON-C" of the same source: a DELETE's row is in ``data`` (``old`` null).
  oracle      "JSON" of an Oracle source: ``database`` empty, ``schema`` "shop", ``columnType`` empty (as the vendor
              documents for Oracle), NUMBER printed without trailing zeros, NUMBER(1) booleans as 1/0.
  postgresql  "JSON" of a PostgreSQL source: ``database`` "shop", ``schema`` "public", ``columnType`` type names,
              booleans "true"/"false", and ``es`` the commit time of the PREVIOUS transaction (as documented).

Common to all: one topic, one partition (DRS keeps the order), Kafka key = table name; ``id`` a monotonic event serial
over the full sync and the increments; rows of one transaction, table and type share a message; the initial load is
``INIT`` in batches of up to 50 rows, the resync one ``INIT`` row per message; a primary-key change is ONE UPDATE row
whose ``old`` holds the old key and ``data`` the new one (the vendor's MySQL sample is such an update); one no-op DDL
message (``isDdl`` true). ``order_items`` has ``pkNames`` null for the Oracle and PostgreSQL sources (the config
declares its key). JSON text is escaped as Gson does by default (``<``, ``>``, ``&``, ``=``, ``'`` as \\uXXXX).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import (
    EPOCH_UTC,
    MAX_INIT_BATCH,
    NOOP_DDL_TABLE,
    ORDER_ITEMS,
    Event,
    History,
    TableSpec,
)
from cdcreplay_lab.simulator.records import KafkaRecord
from cdcreplay_lab.simulator.truth import _java_double

SOURCES = ("mysql", "json-c", "oracle", "postgresql")
TYPES = {OP_SNAPSHOT: "INIT", OP_INSERT: "INSERT", OP_UPDATE: "UPDATE", OP_DELETE: "DELETE"}
# sqlType codes DRS reports for a MySQL source, following the vendor sample (DATETIME 94, TEXT -1).
MYSQL_SQL_TYPES = {
    "int": 4,
    "bigint": -5,
    "tinyint": -6,
    "varchar": 12,
    "text": -1,
    "decimal": 3,
    "double": 8,
    "date": 91,
    "datetime": 94,
}
POSTGRES_TYPES = {
    "int": "integer",
    "bigint": "bigint",
    "tinyint(1)": "boolean",
    "varchar": "character varying",
    "text": "text",
    "decimal": "numeric",
    "double": "double precision",
    "date": "date",
    "datetime": "timestamp without time zone",
}
JDBC_CODES = {
    "int": 4,
    "bigint": -5,
    "tinyint(1)": 16,
    "varchar": 12,
    "text": 2005,
    "decimal": 2,
    "double": 8,
    "date": 91,
    "datetime": 93,
}
GSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "=": "\\u003d", "'": "\\u0027"}


def _base(sql_type: str) -> str:
    return sql_type.split("(")[0]


def _by_type(table: dict, sql_type: str):
    """The entry for the full column type ("tinyint(1)"), else for its base name ("decimal")."""
    return table[sql_type] if sql_type in table else table[_base(sql_type)]


def _gson(document) -> str:
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    # Gson's HTML-safe escaping; outside strings JSON has none of these characters, so replacing everywhere is exact.
    for char, escaped in GSON_ESCAPES.items():
        text = text.replace(char, escaped)
    return text


def _millis_text(value: datetime) -> str:
    return value.isoformat(sep=" ", timespec="milliseconds")


def _postgres_timestamp(value: datetime) -> str:
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    fraction = f"{value.microsecond:06d}".rstrip("0")
    return text + ("." + fraction if fraction else "")


def _postgres_double(value: float) -> str:
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _oracle_number(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def value_renderer(source: str, sql_type: str) -> Callable[[object], str]:
    """How the source's DRS JSON prints a non-NULL value of one column type."""
    base = _base(sql_type)
    if sql_type == "tinyint(1)":
        if source == "postgresql":
            return lambda v: "true" if v else "false"
        return lambda v: "1" if v else "0"
    if base == "decimal":
        return _oracle_number if source == "oracle" else (lambda v: format(v, "f"))
    if base == "double":
        return _postgres_double if source == "postgresql" else _java_double
    if base == "date":
        return (lambda v: v.isoformat() + " 00:00:00") if source == "oracle" else date.isoformat
    if base == "datetime":
        return _postgres_timestamp if source == "postgresql" else _millis_text
    if base in ("varchar", "text"):
        return lambda v: v
    return str


class _TableCodec:
    def __init__(self, spec: TableSpec, source: str) -> None:
        self.spec = spec
        self.source = source
        self.renderers = [(c.name, value_renderer(source, c.sql_type)) for c in spec.columns]
        keyless = source in ("oracle", "postgresql") and spec.table_id == ORDER_ITEMS
        self.pk_names = None if keyless else list(spec.primary_key)
        if source in ("mysql", "json-c"):
            self.header = {
                "mysqlType": {c.name: _base(c.sql_type) for c in spec.columns},
            }
            self.sql_type = {c.name: MYSQL_SQL_TYPES[_base(c.sql_type)] for c in spec.columns}
            self.identity = {"database": spec.db, "table": spec.name}
        else:
            column_types = (
                {} if source == "oracle" else {c.name: _by_type(POSTGRES_TYPES, c.sql_type) for c in spec.columns}
            )
            self.header = {
                "columnType": column_types,
                "dbType": "Oracle" if source == "oracle" else "PostgreSQL",
                "schema": spec.db if source == "oracle" else "public",
            }
            self.sql_type = {c.name: _by_type(JDBC_CODES, c.sql_type) for c in spec.columns}
            self.identity = {"database": "" if source == "oracle" else spec.db, "table": spec.name}
        self.kafka_key = spec.name.encode("utf-8")

    def image(self, row: dict) -> dict:
        return {name: None if row[name] is None else render(row[name]) for name, render in self.renderers}

    def message(self, kind: str, data: list | None, old: list | None, message_id: int, es: int) -> str:
        document = dict(self.header)
        if self.source in ("oracle", "postgresql"):
            document["opType"] = kind
        document.update(
            {
                "id": message_id,
                "es": es,
                "ts": _written_ms(es, message_id),
                **self.identity,
                "type": kind,
                "isDdl": False,
                "sql": "",
                "sqlType": self.sql_type,
                "data": data,
                "old": old,
                "pkNames": self.pk_names,
            }
        )
        return _gson(document)

    def ddl(self, sql: str, message_id: int, es: int) -> str:
        document = dict(self.header)
        document.update(
            {
                "id": message_id,
                "es": es,
                "ts": _written_ms(es, message_id),
                **self.identity,
                "type": "DDL",
                "isDdl": True,
                "sql": sql,
                "sqlType": None,
                "data": None,
                "old": None,
                "pkNames": None,
            }
        )
        if self.source in ("oracle", "postgresql"):
            document["opType"] = "DDL"
        return _gson(document)


def _written_ms(es: int, message_id: int) -> int:
    return es + 5 + message_id % 300


def _rows_of(source: str, codec: _TableCodec, op: str, events: list[Event]) -> tuple[str, list | None, list | None]:
    """(type, data, old) of one message."""
    if op == "key_change":
        # One UPDATE row: the old key's full row in `old`, the new key's in `data`.
        delete, insert = events
        return "UPDATE", [codec.image(insert.after)], [codec.image(delete.before)]
    kind = TYPES[op]
    if op == OP_DELETE:
        rows = [codec.image(e.before) for e in events]
        return (kind, rows, None) if source == "json-c" else (kind, None, rows)
    data = [codec.image(e.after) for e in events]
    old = [codec.image(e.before) for e in events] if op == OP_UPDATE else None
    return kind, data, old


def _messages(history: History) -> Iterator[tuple[str, list[Event]]]:
    """(op, events) per message: runs of one transaction, table and op; a key change alone; ("ddl", [event]) for
    the no-op DDL logged just before ``event``."""
    group: list[Event] = []
    group_key = None
    events = history.iter_events()
    for event in events:
        if event.epoch == 0:
            key = ("init", event.table_id)
        elif event.epoch is not None:
            key = ("resync", event.position)
        else:
            key = (event.unit, event.table_id, event.op)
        starts_new = event.ddl_before or event.new_key is not None or key != group_key or len(group) >= MAX_INIT_BATCH
        if group and starts_new:
            yield group[0].op, group
            group = []
        if event.ddl_before:
            yield "ddl", [event]
        if event.new_key is not None:
            insert = next(events)
            assert insert.old_key == event.key and insert.op == OP_INSERT, "a key change is a delete then an insert"
            yield "key_change", [event, insert]
            group_key = None
            continue
        group.append(event)
        group_key = key
    if group:
        yield group[0].op, group


def encode_drs_json(history: History, source: str = "mysql", topic: str = "drs.shop") -> Iterator[KafkaRecord]:
    """Kafka records of a DRS JSON topic for ``source`` (see the module docstring), in the order DRS writes them."""
    if source not in SOURCES:
        raise ValueError(f"source {source!r} is not one of {', '.join(SOURCES)}")
    codecs = {table_id: _TableCodec(spec, source) for table_id, spec in history.tables.items()}
    # PostgreSQL: `es` is the commit time of the previous transaction (the first one has none: its own).
    unit, unit_commit_ms, previous_commit_ms = None, None, None

    for offset, (op, events) in enumerate(_messages(history)):
        message_id = offset + 1
        commit_ms = events[-1].time_ms
        if op == "ddl":
            codec = codecs[NOOP_DDL_TABLE]
            value = codec.ddl(events[0].ddl_before, message_id, commit_ms)
        else:
            codec = codecs[events[0].table_id]
            if events[0].unit != unit:
                unit, previous_commit_ms, unit_commit_ms = events[0].unit, unit_commit_ms, commit_ms
            es = (previous_commit_ms or commit_ms) if source == "postgresql" else commit_ms
            kind, data, old = _rows_of(source, codec, op, events)
            value = codec.message(kind, data, old, message_id, es)
        timestamp = EPOCH_UTC + timedelta(milliseconds=commit_ms)
        yield KafkaRecord(topic, 0, offset, timestamp, codec.kafka_key, value.encode("utf-8"), [])


def pipeline_settings(history_tables: dict[str, TableSpec], source: str) -> dict:
    """What a reader of the archive declares: types the messages do not carry, and keys they do not name."""
    tables: dict[str, dict] = {}
    for spec in history_tables.values():
        table_id = f"{spec.db}.public.{spec.name}" if source == "postgresql" else spec.table_id
        declared: dict[str, str] = {}
        for column in spec.columns:
            base = _base(column.sql_type)
            if source in ("mysql", "json-c"):
                # mysqlType says "decimal" and "tinyint" without precision or width.
                needed = base == "decimal" or column.sql_type == "tinyint(1)"
            elif source == "postgresql":
                needed = base == "decimal"  # columnType "numeric" carries no precision
            else:
                needed = column.spark_type != "string"  # Oracle: columnType is empty
            if needed:
                declared[column.name] = column.spark_type
        settings: dict = {}
        if declared:
            settings["column_types"] = declared
        if source in ("oracle", "postgresql") and spec.table_id == ORDER_ITEMS:
            settings["primary_key"] = list(spec.primary_key)
        if settings:
            tables[table_id] = settings
    return {"tables": tables}
