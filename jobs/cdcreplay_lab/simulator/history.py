"""Ground-truth DML history: what happened in the source database, independent of any wire format.

A history is a deterministic (per seed) sequence of row-level events over three MySQL tables of database ``shop``:

1. an initial snapshot (epoch 0) of every row existing at ``start`` -- about 20% of the events;
2. streaming changes spread over ``days`` days: inserts, updates of 1-3 columns (to and from NULL), deletes,
   primary-key changes on ``customers`` (an UPDATE of ``id``, emitted as delete of the old key + insert of the new
   key, as Debezium and DTS both do), re-inserts of previously deleted keys, multi-row statements and
   multi-statement transactions of 2-5 changes;
3. one resync snapshot (epoch 1) about 2/3 of the way through, read table after table and row by row in key order
   WHILE streaming goes on, so some keys change during the read ("in-flight"). Keys inserted after a table's read
   began are not read (an incremental snapshot stops at the highest key it saw when it started).

Every event has a strictly increasing global ``position`` (the total order of the source log) and a UTC event time
that never decreases. A snapshot row's position is the moment it was read and its values are the live row then.

``drift=N`` silently changes one non-key column of N rows just before the resync reads them, as if the source had
been written without a binlog event (a lost change). The resync row then carries the source's value, which differs
from what the change stream implies; ``drift_rows`` records both. Replaying the events (snapshot rows included) in
position order is the definition of the final state, so a drifted value stays in the final state until a later
streaming change overwrites it -- exactly what a compactor that upserts snapshot rows produces.

The generator is streaming: ``History.iter_events()`` re-runs it from the seed, so a 2M-event history never has to
sit in memory. The summary (final state, epochs, drift, expected reconciliation) is collected on the first full run.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from cdcreplay.schema import OP_DELETE, OP_INSERT, OP_SNAPSHOT, OP_UPDATE

DB = "shop"
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)
EPOCH_DATE = date(1970, 1, 1)
# DATETIME columns hold the shop's local wall clock (UTC+8, no zone stored): decoders must keep them as
# timestamp_ntz and never shift them, whatever their session time zone.
WALL_CLOCK_OFFSET_MS = 8 * 3600 * 1000

INITIAL_SNAPSHOT_SHARE = 0.2
RESYNC_TIME_FRACTION = 2 / 3
# Expected net growth of live rows per streaming event; used only to place the resync so that it ends well
# before the event budget runs out.
EXPECTED_NET_GROWTH = 0.08
# Share of the streaming budget left at the resync that commits while the resync reads (the rest follows it).
RESYNC_STREAM_SHARE = 0.4
AVERAGE_UNIT_EVENTS = 1.5
MAX_INIT_BATCH = 50

# MySQL binlog layout used for Debezium source coordinates (file seq, pos, row).
BINLOG_FIRST_FILE = 3
BINLOG_FIRST_POS = 154
SERVER_UUID = "5f1c1a7e-2f3b-11f0-9c1a-0242ac120002"
# A DDL logged once, midway, that changes nothing a decoder keeps (formats that carry DDL must skip it).
NOOP_DDL_TABLE = "shop.customers"
NOOP_DDL = "ALTER TABLE customers COMMENT 'x'"

CUSTOMERS = "shop.customers"
ORDERS = "shop.orders"
ORDER_ITEMS = "shop.order_items"
TABLE_ORDER = (CUSTOMERS, ORDERS, ORDER_ITEMS)


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # the MySQL column type as declared, e.g. "decimal(12,2)", "tinyint(1)"
    spark_type: str  # the Spark SQL type a decoder must produce for it
    nullable: bool
    primary_key: bool = False


@dataclass(frozen=True)
class TableSpec:
    db: str
    name: str
    columns: tuple[Column, ...]

    @property
    def table_id(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def primary_key(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.primary_key)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.table_id} has no column {name!r}")

    def key_of(self, row: dict) -> tuple:
        return tuple(row[name] for name in self.primary_key)


TABLES: dict[str, TableSpec] = {
    CUSTOMERS: TableSpec(
        DB,
        "customers",
        (
            Column("id", "int", "int", False, True),
            Column("name", "varchar(64)", "string", False),
            Column("email", "varchar(128)", "string", True),
            Column("balance", "decimal(12,2)", "decimal(12,2)", True),
            Column("vip", "tinyint(1)", "boolean", False),
            Column("birthday", "date", "date", True),
            Column("updated_at", "datetime(3)", "timestamp_ntz", False),
        ),
    ),
    ORDERS: TableSpec(
        DB,
        "orders",
        (
            Column("order_id", "bigint", "bigint", False, True),
            Column("customer_id", "int", "int", False),
            Column("amount", "decimal(10,2)", "decimal(10,2)", False),
            Column("status", "varchar(16)", "string", False),
            Column("note", "text", "string", True),
            Column("weight", "double", "double", True),
            Column("created_at", "datetime(3)", "timestamp_ntz", False),
        ),
    ),
    ORDER_ITEMS: TableSpec(
        DB,
        "order_items",
        (
            Column("order_id", "bigint", "bigint", False, True),
            Column("line_no", "int", "int", False, True),
            Column("sku", "varchar(32)", "string", False),
            Column("qty", "int", "int", False),
            Column("price", "decimal(10,2)", "decimal(10,2)", False),
        ),
    ),
}

# Columns an UPDATE may change (never key columns: a key change is its own operation) and the ones drift may hit.
UPDATABLE = {
    CUSTOMERS: ("name", "email", "balance", "vip", "birthday", "updated_at"),
    ORDERS: ("customer_id", "amount", "status", "note", "weight"),
    ORDER_ITEMS: ("sku", "qty", "price"),
}
DRIFTABLE = {
    CUSTOMERS: ("name", "email", "balance", "vip", "birthday"),
    ORDERS: ("amount", "status", "note", "weight"),
    ORDER_ITEMS: ("sku", "qty", "price"),
}

FIRST_NAMES = ("Anne", "José", "Zoë", "Li", "Sam", "Priya", "Olav", "Chloé", "Kenji", "Fatima", "Émile", "Noor")
LAST_NAMES = ("Kretchmar", "Müller", "O'Brien", "王", "Smith", "Nguyễn", "D'Amico", "Sørensen", "Kowalski", "García")
NOTES = (
    "café 注文",
    'customer said "leave at door"',
    "path C:\\orders\\new",
    "it's a gift",
    "tab\there and\nnewline",
    "📦 fragile",
    "",
    "NULL",
    "null",
    'back\\slash and "quote" mix',
    '{"json": "inside"}',
    "  padded  ",
    "ünïcödé ßtraße",
    "お急ぎ便",
)
DOMAINS = ("example.com", "shop.test", "exämple.org")
SPECIAL_DATES = (date(1969, 12, 31), date(1970, 1, 1), date(2000, 2, 29))
BIRTHDAY_FLOOR = date(1940, 1, 1)
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "cancelled", "refunded")


@dataclass(slots=True)
class Event:
    """One row-level event of the source, in the vocabulary of ``cdcreplay.schema`` (snapshot/insert/update/delete)."""

    position: int  # global, strictly increasing source position
    time_ms: int  # event (commit) time, epoch milliseconds UTC; never decreases with position
    table_id: str
    op: str
    key: tuple
    before: dict | None  # full row before the change (update, delete)
    after: dict | None  # full row after the change (snapshot, insert, update)
    epoch: int | None  # snapshot epoch (0 initial, 1 resync); None for streaming changes
    unit: int  # serial of the source transaction, or of the snapshot read, this event belongs to
    tx_id: str | None  # transaction id when the transaction holds 2+ events
    tx_order: int  # 1-based order inside the transaction (0 outside one)
    tx_table_order: int  # 1-based order among the transaction's events of the same table
    binlog: tuple[int, int, int]  # MySQL (file seq, pos, row); shared by the rows of one statement
    changed: tuple[str, ...] = ()  # update: columns whose value changed
    new_key: tuple | None = None  # delete that is the first half of a primary-key change: the key it becomes
    old_key: tuple | None = None  # insert that is the second half of a primary-key change: the key it was
    ddl_before: str | None = None  # a no-op DDL statement the source logged just before this event

    @property
    def time(self) -> datetime:
        return EPOCH_UTC + timedelta(milliseconds=self.time_ms)

    @property
    def binlog_file(self) -> str:
        return f"mysql-bin.{self.binlog[0]:06d}"


@dataclass(frozen=True)
class DriftRow:
    """A resync snapshot row that disagrees with the change stream in one column (a change lost by the binlog)."""

    table_id: str
    key: tuple
    column: str
    snapshot_value: object  # what the resync row carries (and what the source really holds)
    true_value: object  # what the change stream implies: the incremental state at the row's position
    position: int  # position of the resync row


@dataclass
class SnapshotEpoch:
    table_id: str
    epoch: int  # 0 initial snapshot, 1 resync
    kind: str  # "initial" or "resync"
    first_position: int
    last_position: int
    row_count: int
    history: History | None = field(default=None, repr=False, compare=False)

    @property
    def rows(self) -> list[Event]:
        """The snapshot events of this epoch, in position order (re-generates the history if needed)."""
        assert self.history is not None
        return [
            e
            for e in self.history.events
            if e.epoch == self.epoch and e.table_id == self.table_id and e.op == OP_SNAPSHOT
        ]


@dataclass(frozen=True)
class ResyncExpectation:
    """What reconciling the resync epoch of one table against the incremental state must report.

    ``in_flight``: keys changed by a streaming event strictly between the epoch's first and last snapshot row
    (inserted, updated, deleted or re-keyed while the table was being read) -- reported as in-flight, never as
    mismatches. ``drift``: keys whose snapshot row disagrees with the change stream; none is in flight, so each must
    be reported as a mismatch in ``drift_columns[key]``. Every other key read by the snapshot matches.
    """

    table_id: str
    epoch: int
    first_position: int
    last_position: int
    snapshot_rows: int
    in_flight: frozenset
    drift: frozenset
    drift_columns: dict


@dataclass
class _Summary:
    final_rows: dict[str, dict[tuple, dict]]
    epochs: dict[str, list[tuple[int, str, int, int, int]]]
    drift_rows: list[DriftRow]
    in_flight: dict[str, frozenset]
    event_count: int
    last_time_ms: int


class _Live:
    """Live rows of one table with O(1) random choice of a key and a pool of deleted keys for re-inserts."""

    __slots__ = ("deleted", "deleted_index", "index", "keys", "rows")

    def __init__(self) -> None:
        self.rows: dict[tuple, dict] = {}
        self.keys: list[tuple] = []
        self.index: dict[tuple, int] = {}
        self.deleted: list[tuple] = []
        self.deleted_index: dict[tuple, int] = {}

    def add(self, key: tuple, row: dict) -> None:
        self.rows[key] = row
        self.index[key] = len(self.keys)
        self.keys.append(key)
        self._forget_deleted(key)

    def remove(self, key: tuple) -> dict:
        row = self.rows.pop(key)
        at = self.index.pop(key)
        last = self.keys.pop()
        if at < len(self.keys):
            self.keys[at] = last
            self.index[last] = at
        self.deleted_index[key] = len(self.deleted)
        self.deleted.append(key)
        return row

    def take_deleted(self, random_float) -> tuple | None:
        if not self.deleted:
            return None
        key = self.deleted[int(random_float() * len(self.deleted))]
        self._forget_deleted(key)
        return key

    def _forget_deleted(self, key: tuple) -> None:
        at = self.deleted_index.pop(key, None)
        if at is None:
            return
        last = self.deleted.pop()
        if at < len(self.deleted):
            self.deleted[at] = last
            self.deleted_index[last] = at


class _Simulation:
    """One deterministic run of the generator. ``run()`` yields events; ``summary()`` is valid once it is exhausted."""

    def __init__(self, seed: int, events: int, start: datetime, days: int, drift: int) -> None:
        self.rng = random.Random(seed)
        self.random = self.rng.random
        self.generators = self._build_generators()
        self.target = events
        self.start_ms = (start - EPOCH_UTC) // timedelta(milliseconds=1)
        self.span_ms = days * 86_400_000
        self.drift = drift
        self.live = {table_id: _Live() for table_id in TABLE_ORDER}
        self.protected: set[tuple[str, tuple]] = set()

        self.position = 0
        self.emitted = 0
        self.stream_count = 0
        self.unit_serial = 0
        self.last_time_ms = self.start_ms

        self.initial_rows = max(3, round(events * INITIAL_SNAPSHOT_SHARE))
        self.resync_at = max(1, round((events - 2 * self.initial_rows) / (1.5 + EXPECTED_NET_GROWTH)))
        self.rotate_at = self.resync_at * 3 // 4
        # Streaming time runs over [0, 2/3] of the span until the resync starts; after it, the rest of the span is
        # spread over the streaming events still to come.
        self.time_anchor = (0, 0.0)  # (stream_count, fraction of span) at the start of the current phase
        self.time_phase_end = (self.resync_at, RESYNC_TIME_FRACTION)
        self.resynced = False

        self.binlog_file = BINLOG_FIRST_FILE
        self.binlog_end = BINLOG_FIRST_POS
        self.rotated = False
        self.pending_ddl: str | None = None

        self.next_customer_id = 1
        self.next_order_id = 2**31 + 1_000
        self.next_line: dict[int, int] = {}

        self.epochs: dict[str, list[tuple[int, str, int, int, int]]] = {t: [] for t in TABLE_ORDER}
        self.drift_rows: list[DriftRow] = []
        self.in_flight: dict[str, frozenset] = {t: frozenset() for t in TABLE_ORDER}
        self.window_table: str | None = None
        self.window_changes: list[tuple[int, tuple]] = []

        # the unit being built: list of [table_id, op, key, before, after, changed, stmt, row, new_key, old_key]
        self.unit: list[list] = []
        self.stmt = -1
        self.row = 0
        self.now_ms = self.start_ms

    # ------------------------------------------------------------------ driver
    def run(self) -> Iterator[Event]:
        yield from self._initial_snapshot()
        while self.emitted < self.target:
            if not self.resynced and self.stream_count >= self.resync_at:
                yield from self._resync()
                continue
            yield from self._stream_unit(self.target - self.emitted)

    def summary(self) -> _Summary:
        return _Summary(
            final_rows={t: self.live[t].rows for t in TABLE_ORDER},
            epochs=self.epochs,
            drift_rows=self.drift_rows,
            in_flight=self.in_flight,
            event_count=self.emitted,
            last_time_ms=self.last_time_ms,
        )

    # ------------------------------------------------------------------ time and positions
    def _unit_time(self) -> int:
        """Commit time of the next streaming transaction, from how far the stream has progressed."""
        anchor_count, anchor_fraction = self.time_anchor
        end_count, end_fraction = self.time_phase_end
        progress = (self.stream_count + 1 - anchor_count) / max(1, end_count - anchor_count)
        fraction = anchor_fraction + (end_fraction - anchor_fraction) * min(1.0, progress)
        gap_ms = self.span_ms / max(1, self.target)
        candidate = self.start_ms + int(fraction * self.span_ms + (self.rng.random() - 0.5) * gap_ms)
        return min(max(candidate, self.last_time_ms), self.start_ms + self.span_ms)

    def _time_fraction(self) -> float:
        return (self.last_time_ms - self.start_ms) / max(1, self.span_ms)

    def _snapshot_event(self, table_id, key, row, epoch, unit, binlog, time_ms) -> Event:
        self.position += 1
        self.emitted += 1
        self.last_time_ms = time_ms
        return Event(self.position, time_ms, table_id, OP_SNAPSHOT, key, None, row, epoch, unit, None, 0, 0, binlog)

    # ------------------------------------------------------------------ snapshots
    def _initial_snapshot(self) -> Iterator[Event]:
        counts = _split(self.initial_rows, (0.3, 0.4, 0.3))
        customers, orders = self.live[CUSTOMERS], self.live[ORDERS]
        for _ in range(counts[0]):
            customer_id = self._take_customer_id()
            row = self._customer_row(customer_id, self.start_ms - 1 - int(self.random() * 400 * 86_400_000))
            customers.add((customer_id,), row)
        for _ in range(counts[1]):
            row = self._order_row(self._take_order_id(), self.start_ms - 1 - int(self.random() * 400 * 86_400_000))
            orders.add((row["order_id"],), row)
        items = self.live[ORDER_ITEMS]
        order_keys = list(orders.keys) or [(self._take_order_id(),)]
        for _ in range(counts[2]):
            order_id = order_keys[int(self.random() * len(order_keys))][0]
            row = self._item_row(order_id, self._take_line(order_id))
            items.add((order_id, row["line_no"]), row)
        # The initial snapshot reads every table in key order at one consistent binlog point.
        self.unit_serial += 1
        for table_id in TABLE_ORDER:
            live = self.live[table_id]
            first = self.position + 1
            for key in sorted(live.keys):
                yield self._snapshot_event(
                    table_id,
                    key,
                    live.rows[key],
                    0,
                    self.unit_serial,
                    (self.binlog_file, self.binlog_end, 0),
                    self.start_ms,
                )
            if self.position >= first:
                self.epochs[table_id].append((0, "initial", first, self.position, self.position - first + 1))

    def _resync(self) -> Iterator[Event]:
        """The resync snapshot: every table read key by key while transactions keep committing in between."""
        self.resynced = True
        self.time_anchor = (self.stream_count, self._time_fraction())
        estimated = {t: len(self.live[t].keys) for t in TABLE_ORDER}
        planned_reads = sum(estimated.values())
        self.time_phase_end = (self.stream_count + max(1, self.target - self.emitted - planned_reads), 1.0)
        # Part of the remaining streaming budget commits while the snapshot reads; the rest comes after it.
        during = (self.target - self.emitted - planned_reads) * RESYNC_STREAM_SHARE
        interleave = min(0.6, during / max(1, planned_reads) / AVERAGE_UNIT_EVENTS)
        reserve = (self.target - self.emitted - planned_reads) - during
        drift_per_table = _split_evenly(self.drift, len(TABLE_ORDER))
        rng = self.rng
        for table_index, table_id in enumerate(TABLE_ORDER):
            live = self.live[table_id]
            candidates = sorted(live.keys)
            planned_reads += len(candidates) - estimated[table_id]
            drifting = {}
            if drift_per_table[table_index] and candidates:
                for key in rng.sample(candidates, min(drift_per_table[table_index], len(candidates))):
                    drifting[key] = rng.choice(DRIFTABLE[table_id])
                    # A drifted key must not be touched while its table is read, so it is a clean mismatch.
                    self.protected.add((table_id, key))
            self.window_table, self.window_changes = table_id, []
            first = last = None
            reads = 0
            for key in candidates:
                room = self.target - self.emitted - planned_reads - reserve
                if room >= 1 and rng.random() < interleave:
                    yield from self._stream_unit(min(int(room), 5))
                planned_reads -= 1
                row = live.rows.get(key)
                if row is None:
                    continue  # deleted after the read began: an incremental snapshot simply does not find it
                true_value = None
                if key in drifting:
                    true_value = row[drifting[key]]
                    row = self._drift(table_id, key, row, drifting[key])
                event = self._snapshot_event(
                    table_id, key, row, 1, self._next_unit(), (self.binlog_file, self.binlog_end, 0), self.last_time_ms
                )
                if key in drifting:
                    column = drifting[key]
                    self.drift_rows.append(DriftRow(table_id, key, column, row[column], true_value, event.position))
                first = event.position if first is None else first
                last = event.position
                reads += 1
                yield event
            if first is not None:
                self.epochs[table_id].append((1, "resync", first, last, reads))
                self.in_flight[table_id] = frozenset(k for p, k in self.window_changes if first < p < last)
            self.window_table, self.window_changes = None, []
            for key in drifting:
                self.protected.discard((table_id, key))
        self.time_anchor = (self.stream_count, self._time_fraction())
        self.time_phase_end = (self.stream_count + max(1, self.target - self.emitted), 1.0)

    def _drift(self, table_id: str, key: tuple, row: dict, column: str) -> dict:
        """Change the source row without a binlog event (a lost change); the resync row carries the new value."""
        true_value = row[column]
        snapshot_value = true_value
        while snapshot_value == true_value or snapshot_value is None:
            snapshot_value = self.generators[column](row)
        drifted = dict(row)
        drifted[column] = snapshot_value
        self.live[table_id].rows[key] = drifted
        return drifted

    def _next_unit(self) -> int:
        self.unit_serial += 1
        return self.unit_serial

    # ------------------------------------------------------------------ streaming transactions
    def _stream_unit(self, limit: int) -> Iterator[Event]:
        """Build one source transaction of at most ``limit`` row events, apply it to the live state, emit it."""
        if not self.rotated and self.stream_count >= self.rotate_at:
            # The binlog rotates midway: positions restart low in the next file, so the file part of the
            # position is what keeps the order.
            self.rotated = True
            self.binlog_file += 1
            self.binlog_end = BINLOG_FIRST_POS
            self.pending_ddl = NOOP_DDL
        self.now_ms = self._unit_time()
        self.unit, self.stmt, self.row = [], -1, 0
        self._build_unit(limit)
        if not self.unit:
            self._stmt()
            self._insert(CUSTOMERS, self._customer_row(self._take_customer_id(), self.now_ms))
        yield from self._emit_unit()

    def _build_unit(self, limit: int) -> None:
        roll = self.random()
        if limit >= 2 and roll < 0.30:
            kind = self.random()
            if kind < 0.35:
                self._tx_place_order(limit)
            elif kind < 0.50:
                self._tx_bulk_status(limit)
            elif kind < 0.62:
                self._tx_cancel_order(limit)
            else:
                self._tx_mixed(limit)
            if self.unit:
                return
        roll = self.random()
        if roll < 0.07:
            self._stmt()
            self._insert(CUSTOMERS, self._customer_row(self._take_customer_id(), self.now_ms))
        elif roll < 0.10:
            self._stmt()
            self._insert(ORDERS, self._new_order())
        elif roll < 0.14:
            self._insert_items(min(limit, 1 + int(self.random() * 3)))
        elif roll < 0.56:
            self._single_update()
        elif roll < 0.90:
            self._single_delete()
        elif roll < 0.94 and limit >= 2:
            self._pk_change()
        else:
            self._reinsert()

    def _tx_place_order(self, limit: int) -> None:
        # INSERT order; INSERT its lines in one multi-row statement; maybe UPDATE the customer's balance.
        self._stmt()
        order = self._new_order()
        self._insert(ORDERS, order)
        lines = min(limit - 1, 1 + int(self.random() * 2))
        if lines:
            self._stmt()
            for _ in range(lines):
                self._insert(ORDER_ITEMS, self._item_row(order["order_id"], self._take_line(order["order_id"])))
        if len(self.unit) < limit and self.random() < 0.6:
            key = self._pick(CUSTOMERS)
            if key is not None:
                self._stmt()
                self._update(CUSTOMERS, key, ("balance",))

    def _tx_bulk_status(self, limit: int) -> None:
        # UPDATE orders SET status = ? WHERE order_id IN (...): one statement, several rows.
        keys = self._pick_many(ORDERS, min(limit, 2 + int(self.random() * 3)))
        if len(keys) < 2:
            return
        status = STATUSES[int(self.random() * len(STATUSES))]
        # MySQL logs no row image for a matched row whose value does not change.
        keys = [k for k in keys if self.live[ORDERS].rows[k]["status"] != status]
        if not keys:
            return
        self._stmt()
        for key in keys:
            self._update(ORDERS, key, ("status",), forced={"status": status})

    def _tx_cancel_order(self, limit: int) -> None:
        # UPDATE the order to cancelled, then DELETE FROM order_items WHERE order_id = ? (one statement).
        key = self._pick(ORDERS)
        if key is None:
            return
        self._stmt()
        current = self.live[ORDERS].rows[key]["status"]
        if current == "cancelled":
            self._update(ORDERS, key, ("note",))
        else:
            self._update(ORDERS, key, ("status",), forced={"status": "cancelled"})
        items = self.live[ORDER_ITEMS]
        lines = []
        for line_no in range(1, self.next_line.get(key[0], 1)):
            item_key = (key[0], line_no)
            if item_key in items.rows and (ORDER_ITEMS, item_key) not in self.protected:
                lines.append(item_key)
        lines = lines[: max(0, limit - 1)]
        if lines:
            self._stmt()
            for item_key in lines:
                self._delete(ORDER_ITEMS, item_key)

    def _tx_mixed(self, limit: int) -> None:
        # 2-5 single-row statements across tables, sometimes touching the same key twice in one transaction.
        size = min(limit, 2 + int(self.random() * 4))
        previous = None
        for _ in range(size * 4):
            if len(self.unit) >= size:
                break
            roll = self.random()
            if previous is not None and roll < 0.2 and previous[1] in self.live[previous[0]].rows:
                self._stmt()
                self._update(previous[0], previous[1])
            elif roll < 0.5:
                previous = self._single_update()
            elif roll < 0.62:
                self._stmt()
                row = self._customer_row(self._take_customer_id(), self.now_ms)
                self._insert(CUSTOMERS, row)
                previous = (CUSTOMERS, (row["id"],))
            elif roll < 0.95:
                self._single_delete()
                previous = None
            else:
                self._insert_items(1)

    def _single_update(self) -> tuple[str, tuple] | None:
        roll = self.random()
        table_id = CUSTOMERS if roll < 0.35 else ORDERS if roll < 0.8 else ORDER_ITEMS
        key = self._pick(table_id)
        if key is None:
            return None
        self._stmt()
        self._update(table_id, key)
        return table_id, key

    def _single_delete(self) -> None:
        roll = self.random()
        table_id = CUSTOMERS if roll < 0.3 else ORDERS if roll < 0.6 else ORDER_ITEMS
        key = self._pick(table_id)
        if key is not None:
            self._stmt()
            self._delete(table_id, key)

    def _insert_items(self, count: int) -> None:
        order_key = self._pick(ORDERS, allow_protected=True)
        if order_key is None:
            return
        self._stmt()
        for _ in range(max(1, count)):
            order_id = order_key[0]
            self._insert(ORDER_ITEMS, self._item_row(order_id, self._take_line(order_id)))

    def _pk_change(self) -> None:
        # UPDATE customers SET id = ? WHERE id = ?: both tools emit delete(old key) + insert(new key).
        key = self._pick(CUSTOMERS)
        if key is None:
            return
        live = self.live[CUSTOMERS]
        new_key = live.take_deleted(self.random) if self.random() < 0.3 else None
        if new_key is None:
            new_key = (self._take_customer_id(),)
        old = live.rows[key]
        new = dict(old)
        new["id"] = new_key[0]
        if self.random() < 0.5:
            new["updated_at"] = self._wall(self.now_ms)
        self._stmt()
        live.remove(key)
        live.add(new_key, new)
        self.unit.append([CUSTOMERS, OP_DELETE, key, old, None, (), self.stmt, self.row, new_key, None])
        self.unit.append([CUSTOMERS, OP_INSERT, new_key, None, new, (), self.stmt, self.row, None, key])
        self.row += 1

    def _reinsert(self) -> None:
        table_id = TABLE_ORDER[int(self.random() * len(TABLE_ORDER))]
        key = self.live[table_id].take_deleted(self.random)
        if key is None:
            self._stmt()
            self._insert(CUSTOMERS, self._customer_row(self._take_customer_id(), self.now_ms))
            return
        if table_id == CUSTOMERS:
            row = self._customer_row(key[0], self.now_ms)
        elif table_id == ORDERS:
            row = self._order_row(key[0], self.now_ms)
        else:
            row = self._item_row(key[0], key[1])
        self._stmt()
        self._insert(table_id, row)

    # ------------------------------------------------------------------ unit primitives
    def _stmt(self) -> None:
        self.stmt += 1
        self.row = 0

    def _insert(self, table_id: str, row: dict) -> None:
        key = TABLES[table_id].key_of(row)
        self.live[table_id].add(key, row)
        self.unit.append([table_id, OP_INSERT, key, None, row, (), self.stmt, self.row, None, None])
        self.row += 1

    def _update(self, table_id: str, key: tuple, columns=None, forced: dict | None = None) -> None:
        live = self.live[table_id]
        old = live.rows[key]
        if columns is None:
            candidates = UPDATABLE[table_id]
            wanted = 1 + int(self.random() * 3)
            columns = []
            while len(columns) < wanted:
                column = candidates[int(self.random() * len(candidates))]
                if column not in columns:
                    columns.append(column)
        new = dict(old)
        for column in columns:
            if forced and column in forced and forced[column] != old[column]:
                new[column] = forced[column]
            else:
                new[column] = self._changed_value(column, old)
        changed = tuple(c for c in TABLES[table_id].column_names if c in columns and new[c] != old[c])
        live.rows[key] = new
        self.unit.append([table_id, OP_UPDATE, key, old, new, changed, self.stmt, self.row, None, None])
        self.row += 1

    def _delete(self, table_id: str, key: tuple) -> None:
        old = self.live[table_id].remove(key)
        self.unit.append([table_id, OP_DELETE, key, old, None, (), self.stmt, self.row, None, None])
        self.row += 1

    def _pick(self, table_id: str, allow_protected: bool = False) -> tuple | None:
        keys = self.live[table_id].keys
        if not keys:
            return None
        for _ in range(8):
            key = keys[int(self.random() * len(keys))]
            if allow_protected or (table_id, key) not in self.protected:
                return key
        return None

    def _pick_many(self, table_id: str, count: int) -> list[tuple]:
        picked: list[tuple] = []
        for _ in range(count * 2):
            key = self._pick(table_id)
            if key is not None and key not in picked:
                picked.append(key)
            if len(picked) == count:
                break
        return picked

    def _emit_unit(self) -> Iterator[Event]:
        unit = self.unit
        unit_id = self._next_unit()
        tx_id = f"{SERVER_UUID}:{unit_id}" if len(unit) >= 2 else None
        # Binlog layout of a transaction: GTID + BEGIN, then per statement TABLE_MAP + ROWS, then XID.
        cursor = self.binlog_end + 65
        statement_pos: dict[int, int] = {}
        for change in unit:
            if change[6] not in statement_pos:
                statement_pos[change[6]] = cursor
                cursor += 40
            cursor += 90
        self.binlog_end = cursor + 31
        per_table: dict[str, int] = {}
        ddl, self.pending_ddl = self.pending_ddl, None
        for order, (table_id, op, key, before, after, changed, stmt, row, new_key, old_key) in enumerate(unit, 1):
            per_table[table_id] = per_table.get(table_id, 0) + 1
            self.position += 1
            event = Event(
                self.position,
                self.now_ms,
                table_id,
                op,
                key,
                before,
                after,
                None,
                unit_id,
                tx_id,
                order if tx_id else 0,
                per_table[table_id] if tx_id else 0,
                (self.binlog_file, statement_pos[stmt], row),
                changed,
                new_key,
                old_key,
                ddl if order == 1 else None,
            )
            if table_id == self.window_table:
                self.window_changes.append((event.position, key))
            yield event
        self.emitted += len(unit)
        self.last_time_ms = self.now_ms
        self.stream_count += len(unit)

    # ------------------------------------------------------------------ ids and values
    def _take_customer_id(self) -> int:
        customer_id = self.next_customer_id
        self.next_customer_id += 1 if self.random() < 0.75 else 2
        return customer_id

    def _take_order_id(self) -> int:
        order_id = self.next_order_id
        self.next_order_id += 1 + int(self.random() * 9)
        return order_id

    def _take_line(self, order_id: int) -> int:
        line = self.next_line.get(order_id, 1)
        self.next_line[order_id] = line + 1
        return line

    def _new_order(self) -> dict:
        return self._order_row(self._take_order_id(), self.now_ms)

    @staticmethod
    def _wall(time_ms: int) -> datetime:
        return EPOCH_NAIVE + timedelta(milliseconds=time_ms + WALL_CLOCK_OFFSET_MS)

    def _customer_row(self, customer_id: int, time_ms: int) -> dict:
        row = {"id": customer_id}
        for column in ("name", "email", "balance", "vip", "birthday"):
            row[column] = self._initial_value(column, row)
        row["updated_at"] = self._wall(time_ms)
        return row

    def _order_row(self, order_id: int, time_ms: int) -> dict:
        row = {"order_id": order_id}
        for column in ("customer_id", "amount", "status", "note", "weight"):
            row[column] = self._initial_value(column, row)
        row["created_at"] = self._wall(time_ms)
        return row

    def _item_row(self, order_id: int, line_no: int) -> dict:
        row = {"order_id": order_id, "line_no": line_no}
        for column in ("sku", "qty", "price"):
            row[column] = self.generators[column](row)
        return row

    def _initial_value(self, column: str, row: dict):
        null_share = _NULL_SHARE.get(column)
        if null_share is not None and self.random() < null_share:
            return None
        return self.generators[column](row)

    def _changed_value(self, column: str, old: dict):
        """A new value for an UPDATE: always different from the old one; nullable columns go to/from NULL."""
        current = old[column]
        if column in _NULL_SHARE:
            if current is None:
                return self.generators[column](old)
            if self.random() < 0.2:
                return None
        if column == "updated_at":
            candidate = self._wall(self.now_ms)
            return candidate if candidate != current else current + timedelta(milliseconds=1)
        generate = self.generators[column]
        for _ in range(50):
            candidate = generate(old)
            if candidate != current:
                return candidate
        raise AssertionError(f"could not find a new value for column {column}")

    # Value generators: each returns a fresh non-NULL value for its column (``row`` is the row being built/changed).
    def _build_generators(self) -> dict:
        r = self.random

        def name(row):
            return FIRST_NAMES[int(r() * len(FIRST_NAMES))] + " " + LAST_NAMES[int(r() * len(LAST_NAMES))]

        def email(row):
            return f"user{int(r() * 1_000_000)}@{DOMAINS[int(r() * len(DOMAINS))]}"

        def balance(row):
            return _money(r, 999_999_999_999, negative=True)

        def vip(row):
            return (not row["vip"]) if "vip" in row else r() < 0.2

        def birthday(row):
            if r() < 0.03:
                return SPECIAL_DATES[int(r() * len(SPECIAL_DATES))]
            return BIRTHDAY_FLOOR + timedelta(days=int(r() * 25_000))

        def updated_at(row):
            return self._wall(self.now_ms)

        def customer_id(row):
            keys = self.live[CUSTOMERS].keys
            if keys and r() < 0.95:
                return keys[int(r() * len(keys))][0]
            return 1 + int(r() * (2**31 - 2))

        def money(row):
            return _money(r, 9_999_999_999, negative=False)

        def status(row):
            return STATUSES[int(r() * len(STATUSES))]

        def note(row):
            return NOTES[int(r() * len(NOTES))] if r() < 0.7 else f"note {int(r() * 1_000_000)}"

        def weight(row):
            roll = r()
            if roll < 0.1:
                return float(1 + int(r() * 50))
            if roll < 0.15:
                return 0.1
            return round(0.01 + r() * 998.99, 3)

        def sku(row):
            return f"SKU-{int(r() * 100_000):05d}" if r() < 0.95 else f"SKU-ÄÖ-{int(r() * 100)}"

        def qty(row):
            return 1 + int(r() * 20) if r() < 0.95 else (0, -1, 2**31 - 1)[int(r() * 3)]

        return {
            "name": name,
            "email": email,
            "balance": balance,
            "vip": vip,
            "birthday": birthday,
            "updated_at": updated_at,
            "customer_id": customer_id,
            "amount": money,
            "price": money,
            "status": status,
            "note": note,
            "weight": weight,
            "sku": sku,
            "qty": qty,
        }


_NULL_SHARE = {"email": 0.12, "balance": 0.1, "birthday": 0.15, "note": 0.4, "weight": 0.2}


def _money(random_float, max_unscaled: int, negative: bool) -> Decimal:
    """A DECIMAL(p,2) value: zeros, negatives, cents, extremes at the precision limit, typical amounts."""
    roll = random_float()
    if roll < 0.06:
        unscaled = 0
    elif roll < 0.08:
        unscaled = max_unscaled
    elif roll < 0.12:
        unscaled = 1 + int(random_float() * 99)
    else:
        unscaled = 100 + int(random_float() * 500_000)
    if negative and random_float() < 0.2:
        unscaled = -unscaled
    return Decimal(unscaled).scaleb(-2)


def _split(total: int, shares: tuple[float, ...]) -> list[int]:
    counts = [int(total * share) for share in shares]
    counts[0] += total - sum(counts)
    return counts


def _split_evenly(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class History:
    """A simulated source history (see the module docstring). Cheap to create; the generator runs on demand."""

    def __init__(
        self, seed: int = 7, events: int = 2000, start: datetime = DEFAULT_START, days: int = 3, drift: int = 0
    ) -> None:
        if events < 30:
            raise ValueError(f"events={events} is too few for a snapshot, changes and a resync; use at least 30")
        if days < 1:
            raise ValueError(f"days={days} must be at least 1")
        if drift < 0:
            raise ValueError(f"drift={drift} must be 0 or more")
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware (UTC)")
        self.seed, self.target_events, self.start, self.days, self.drift = (
            seed,
            events,
            start.astimezone(UTC),
            days,
            drift,
        )
        self.tables: dict[str, TableSpec] = dict(TABLES)
        self._summary: _Summary | None = None
        self._events: list[Event] | None = None
        self.archive: dict | None = None  # set by build_sample_archive: what write_archive returned
        self.pipeline_settings: dict = {}  # set by build_sample_archive: config entries a reader of it needs

    def __repr__(self) -> str:
        return f"History(seed={self.seed}, events={self.target_events}, days={self.days}, drift={self.drift})"

    def iter_events(self) -> Iterator[Event]:
        """Generate the events in position order (re-runs the deterministic generator)."""
        simulation = _Simulation(self.seed, self.target_events, self.start, self.days, self.drift)
        yield from simulation.run()
        if self._summary is None:
            self._summary = simulation.summary()

    @property
    def events(self) -> list[Event]:
        """All events in position order, kept in memory (fine for tests; large runs should use iter_events)."""
        if self._events is None:
            self._events = list(self.iter_events())
        return self._events

    @property
    def summary(self) -> _Summary:
        if self._summary is None:
            for _ in self.iter_events():
                pass
        assert self._summary is not None
        return self._summary

    @property
    def event_count(self) -> int:
        return self.summary.event_count

    @property
    def end(self) -> datetime:
        return EPOCH_UTC + timedelta(milliseconds=self.summary.last_time_ms)

    def final_state(self, table_id: str) -> list[dict]:
        """Live rows at the end of the history, sorted by primary key, columns in table order."""
        spec = self.tables[table_id]
        rows = self.summary.final_rows[table_id]
        return [{c: rows[k][c] for c in spec.column_names} for k in sorted(rows)]

    @property
    def snapshot_epochs(self) -> dict[str, list[SnapshotEpoch]]:
        return {
            table_id: [SnapshotEpoch(table_id, *epoch, history=self) for epoch in epochs]
            for table_id, epochs in self.summary.epochs.items()
        }

    @property
    def drift_rows(self) -> list[DriftRow]:
        return list(self.summary.drift_rows)

    @property
    def expected_reconciliation(self) -> dict[str, ResyncExpectation]:
        """Per table, what reconciling the resync epoch (epoch 1) must report."""
        result = {}
        for table_id, epochs in self.summary.epochs.items():
            for epoch, _kind, first, last, count in epochs:
                if epoch != 1:
                    continue
                drift = [d for d in self.summary.drift_rows if d.table_id == table_id]
                result[table_id] = ResyncExpectation(
                    table_id,
                    epoch,
                    first,
                    last,
                    count,
                    self.summary.in_flight[table_id],
                    frozenset(d.key for d in drift),
                    {d.key: d.column for d in drift},
                )
        return result


def simulate(
    seed: int = 7, events: int = 2000, start: datetime = DEFAULT_START, days: int = 3, drift: int = 0
) -> History:
    """A deterministic simulated history of ``events`` row events over ``days`` days (see the module docstring)."""
    return History(seed=seed, events=events, start=start, days=days, drift=drift)
