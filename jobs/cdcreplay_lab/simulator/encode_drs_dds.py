"""Encode a history as Huawei DRS writes a DDS (MongoDB) source to Kafka in JSON (docs/format-spec.md c4, seed 002).

The relational history is read as a MongoDB database ``shop`` with one collection per table. Document mapping:
  customers    ``{_id: <id, int32>, name, contact: {email, birthday}, balance: NumberDecimal, vip: bool,
                updated_at: ISODate}`` -- email and birthday live in the embedded ``contact`` document (always present,
                possibly empty), so their updates are ``$set``/``$unset`` of dotted paths
  orders       ``{_id: NumberLong(order_id), customer_id: int32, amount: NumberDecimal, status, note, weight: double,
                created_at: ISODate}``
  order_items  ``{_id: {order_id: NumberLong, line_no: int32}, sku, qty: int32, price: NumberDecimal}``
A SQL NULL is an absent field (an update to NULL is ``$unset``). DATE and DATETIME values become BSON dates of the
same wall-clock digits in UTC (a DATE at midnight). Values are printed as the Java driver's shell mode prints them:
``NumberLong(5)`` (``NumberLong("...")`` past int32), ``NumberDecimal("12.50")``, doubles in Java notation,
``ISODate("...Z")`` for years 1970-9999 and ``new Date(<ms>)`` before.

Messages (one per row event, in history order; ``id`` a serial, ``clusterTime`` the event second and a counter):
snapshot rows (initial and resync) and inserts are INSERTs of the whole document (DDS has no full-sync marker);
an update is an ``update`` of ``$set``/``$unset`` of the changed fields -- except every fourth one, and every update
of ``order_items``, which is a ``replace`` with the whole new document; a delete is a DELETE ``{_id}``; a primary-key
change is a DELETE and an INSERT (an ``_id`` cannot change); the no-op DDL is an op ``DDL`` message.

``expected_rows`` is what the latest-state tables must hold, by the column rule of ``formats.drs_dds_json``, derived
here from the relational truth independently of the decoder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE
from cdcreplay_lab.simulator.history import CUSTOMERS, EPOCH_UTC, NOOP_DDL_TABLE, ORDER_ITEMS, Event, History, TableSpec
from cdcreplay_lab.simulator.records import KafkaRecord
from cdcreplay_lab.simulator.truth import _java_double

EMBEDDED = {CUSTOMERS: ("contact", ("email", "birthday"))}
INT32_MAX = 2**31 - 1
ONE_MS = timedelta(milliseconds=1)


def _instant(value: date | datetime) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def _shell_date(value: date | datetime) -> str:
    moment = _instant(value)
    if moment.year >= 1970:
        return f'ISODate("{moment.strftime("%Y-%m-%dT%H:%M:%S")}.{moment.microsecond // 1000:03d}Z")'
    return f"new Date({(moment - EPOCH_UTC) // ONE_MS})"


def shell_value(sql_type: str, value) -> str:
    """One non-NULL column value in shell syntax, by its MySQL type."""
    base = sql_type.split("(")[0]
    if sql_type == "tinyint(1)":
        return "true" if value else "false"
    if base == "int":
        return str(value)
    if base == "bigint":
        return f"NumberLong({value})" if abs(value) <= INT32_MAX else f'NumberLong("{value}")'
    if base in ("varchar", "text"):
        return json.dumps(value, ensure_ascii=False)
    if base == "decimal":
        return f'NumberDecimal("{format(value, "f")}")'
    if base == "double":
        return _java_double(value)
    if base in ("date", "datetime"):
        return _shell_date(value)
    raise ValueError(f"no shell rendering for {sql_type!r}")


def _shell_document(pairs: list[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{json.dumps(name, ensure_ascii=False)}: {text}" for name, text in pairs) + "}"


def id_text(spec: TableSpec, key: tuple) -> str:
    """The ``_id`` in shell syntax: the single key column's value, or a document of a composite key."""
    values = [shell_value(spec.column(name).sql_type, value) for name, value in zip(spec.primary_key, key, strict=True)]
    if len(values) == 1:
        return values[0]
    return _shell_document(list(zip(spec.primary_key, values, strict=True)))


def document_text(spec: TableSpec, row: dict) -> str:
    embedded_name, embedded_columns = EMBEDDED.get(spec.table_id, (None, ()))
    pairs = [("_id", id_text(spec, spec.key_of(row)))]
    for column in spec.columns:
        if column.primary_key or column.name in embedded_columns:
            continue
        if row[column.name] is not None:
            pairs.append((column.name, shell_value(column.sql_type, row[column.name])))
        if column.name == "name" and embedded_name:
            inner = [(c, shell_value(spec.column(c).sql_type, row[c])) for c in embedded_columns if row[c] is not None]
            pairs.append((embedded_name, _shell_document(inner)))
    return _shell_document(pairs)


def update_text(spec: TableSpec, event: Event) -> str:
    embedded_name, embedded_columns = EMBEDDED.get(spec.table_id, (None, ()))
    sets, unsets = [], []
    for name in event.changed:
        path = f"{embedded_name}.{name}" if name in embedded_columns else name
        value = event.after[name]
        if value is None:
            unsets.append((path, "true"))
        else:
            sets.append((path, shell_value(spec.column(name).sql_type, value)))
    operators = []
    if unsets:
        operators.append(("$unset", _shell_document(unsets)))
    if sets:
        operators.append(("$set", _shell_document(sets)))
    return _shell_document(operators)


def encode_drs_dds(history: History, topic: str = "drs.shop.dds") -> Iterator[KafkaRecord]:
    """Kafka records of the DRS DDS topic, one per row event (see the module docstring)."""
    serial = 0
    second, increment = None, 0

    def message(op: str, spec: TableSpec, time_ms: int, value: str, where: str | None, record_type: str):
        nonlocal serial, second, increment
        serial += 1
        if time_ms // 1000 != second:
            second, increment = time_ms // 1000, 0
        increment += 1
        document = {
            "id": serial,
            "op": op,
            "dbType": "MongoDB",
            "db": spec.db,
            "coll": spec.name,
            "value": value,
            "where": where,
            "recordType": record_type,
            "extra": record_type,
            "es": time_ms,
            "ts": time_ms + 5 + serial % 200,
            "clusterTime": f"{second}:{increment}",
        }
        text = json.dumps(document, ensure_ascii=False, indent=None)
        timestamp = EPOCH_UTC + timedelta(milliseconds=time_ms)
        return KafkaRecord(topic, 0, serial - 1, timestamp, spec.name.encode("utf-8"), text.encode("utf-8"), [])

    updates = 0
    for event in history.iter_events():
        spec = history.tables[event.table_id]
        if event.ddl_before:
            ddl_spec = history.tables[NOOP_DDL_TABLE]
            value = '{"collMod": ' + json.dumps(ddl_spec.name) + ', "comment": "x"}'
            yield message("DDL", ddl_spec, event.time_ms, value, None, "ddl")
        key = id_text(spec, event.key)
        if event.op in (OP_SNAPSHOT, OP_INSERT):
            yield message("INSERT", spec, event.time_ms, document_text(spec, event.after), None, "insert")
        elif event.op == OP_DELETE:
            yield message("DELETE", spec, event.time_ms, '{"_id": ' + key + "}", None, "doc")
        elif event.op == OP_UPDATE:
            updates += 1
            where = '{"_id": ' + key + "}"
            if spec.table_id == ORDER_ITEMS or updates % 4 == 0:
                yield message("UPDATE", spec, event.time_ms, document_text(spec, event.after), where, "replace")
            else:
                yield message("UPDATE", spec, event.time_ms, update_text(spec, event), where, "update")


# --- what the latest-state tables must hold ------------------------------------------------------------------------


def _relaxed_date(value: date | datetime) -> dict:
    moment = _instant(value)
    if moment.year >= 1970:
        return {"$date": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"}
    return {"$date": {"$numberLong": str((moment - EPOCH_UTC) // ONE_MS)}}


def _column(sql_type: str, value):
    """A non-NULL value as the published typed column holds it (timestamps as UTC text, ms)."""
    base = sql_type.split("(")[0]
    if base == "decimal":
        return format(value, "f")  # NumberDecimal -> exact text column
    if base in ("date", "datetime"):
        moment = _instant(value)
        return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return value  # int/bigint -> bigint, double, bool, string


def _json_value(sql_type: str, value):
    """A value inside an embedded document, as the parsed relaxed Extended JSON text holds it."""
    base = sql_type.split("(")[0]
    if base == "decimal":
        return {"$numberDecimal": format(value, "f")}
    if base in ("date", "datetime"):
        return _relaxed_date(value)
    return value


def expected_rows(history: History, table_id: str) -> list[dict]:
    """The published rows of one collection: ``_id`` first, then fields; embedded documents as parsed JSON."""
    spec = history.tables[table_id]
    embedded_name, embedded_columns = EMBEDDED.get(table_id, (None, ()))
    rows = []
    for row in history.final_state(table_id):
        if len(spec.primary_key) == 1:
            expected = {"_id": row[spec.primary_key[0]]}
        else:
            expected = {"_id": {name: row[name] for name in spec.primary_key}}
        for column in spec.columns:
            if column.primary_key or column.name in embedded_columns:
                continue
            value = row[column.name]
            expected[column.name] = None if value is None else _column(column.sql_type, value)
        if embedded_name:
            expected[embedded_name] = {
                c: _json_value(spec.column(c).sql_type, row[c]) for c in embedded_columns if row[c] is not None
            }
        rows.append(expected)
    return rows
