"""What a key's events say, worked out in plain Python over the few rows of one key: the image after each event,
why the winning event won, which snapshot epoch a read belongs to, and the lost changes a reconciliation found.

The events arrive in compaction order (Spark sorted them by ``compaction.event_order``); nothing here re-orders
them, except where an epoch's bounds (kept as JSON text in the run's metrics) are compared with an event's order.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation

from cdcreplay import schema as S
from cdcreplay.compaction import ORDER_FIELDS, order_key
from cdcreplay.contracts import STATUS_MISMATCH, STATUS_MISSING_IN_INCREMENTAL, STATUS_MISSING_IN_SNAPSHOT
from cdcreplay.explain.story import Epoch, Event, LostChange, NewestBefore, Reconciliation, Winner

# The fields that make one event, whichever run read it and however often it was archived.
IDENTITY = ("op", "topic", *ORDER_FIELDS)


def position_text(position) -> str | None:
    """A source position as the reconciliation's diff writes it: ``[3,154,0]``."""
    if position is None:
        return None
    return "[" + ",".join("null" if part is None else str(part) for part in position) + "]"


def value_text(value: str | None) -> str:
    return "NULL" if value is None else value


def same_value(left: str | None, right: str | None) -> bool:
    """Two canonical texts of one column hold the same value: equal texts, or equal numbers ("20" and "20.00")."""
    if left == right:
        return True
    if left is None or right is None:
        return False
    try:
        return Decimal(left) == Decimal(right)
    except InvalidOperation:
        return False


def build_events(rows: list[dict]) -> list[Event]:
    """One Event per distinct event of ``rows`` (changelog rows in compaction order, each with ``run_id``), with the
    key's image after it.

    The image is folded as compaction completes partial images: each image is laid over the one before, and a
    delete (or a truncate of the table) empties it. ``changed_columns`` are the columns the event gives a value the
    image did not hold."""
    events: list[Event] = []
    seen: dict[tuple, Event] = {}
    image: dict | None = None
    for row in rows:
        identity = _identity(row)
        if identity in seen:  # archived twice, or read by two runs (a rerun): one event
            if row["run_id"] not in seen[identity].runs:
                seen[identity].runs.append(row["run_id"])
            continue
        changed: list[str] = []
        if row["op"] in (S.OP_DELETE, S.OP_TRUNCATE):
            image = None
        else:
            before = image or {}
            after = row["after"] or {}
            changed = sorted(c for c in after if c not in before or before[c] != after[c])
            image = {**before, **after}
        seen[identity] = Event(
            seq=len(events) + 1,
            op=row["op"],
            position=position_text(row["position"]),
            topic=row["topic"],
            partition=row["partition"],
            offset=row["offset"],
            row_index=row["row_index"],
            event_time=row["event_time_text"],
            runs=[row["run_id"]],
            after=row["after"],
            before=row["before"],
            changed_columns=changed,
            image_after=None if image is None else dict(image),
        )
        events.append(seen[identity])
    return events


def _identity(row: dict) -> tuple:
    return tuple(tuple(row[name] or ()) if name == "position" else row[name] for name in IDENTITY)


def find_event(events: list[Event], topic, partition, offset, position: str | None = None) -> Event | None:
    """The row event at these Kafka coordinates (and source position, when given)."""
    for event in events:
        if event.op == S.OP_TRUNCATE:
            continue
        if (event.topic, event.partition, event.offset) == (topic, partition, offset) and (
            position is None or event.position == position
        ):
            return event
    return None


def winner_of(events: list[Event], latest: dict | None) -> Winner | None:
    """Why the event compaction kept (``latest``: the row ``compaction.latest_rows`` gave for the key) wins."""
    if latest is None:
        return None
    won = find_event(events, latest["topic"], latest["partition"], latest["offset"], position_text(latest["position"]))
    if won is None:
        return None
    won.winner = True
    rows = [event for event in events if event.op != S.OP_TRUNCATE]
    previous = rows[rows.index(won) - 1] if rows.index(won) > 0 else None
    decided_by, reason = _tie_break(won, previous)
    truncate = next((e for e in reversed(events) if e.op == S.OP_TRUNCATE and e.seq > won.seq), None)
    if latest["op"] == S.OP_DELETE and won.op != S.OP_DELETE and truncate is not None:
        effect = "truncated"
        reason += f"; the truncate of the table at #{truncate.seq} (offset {truncate.offset}) came after it: deleted"
    else:
        effect = "deleted" if won.op == S.OP_DELETE else "live"
    return Winner(
        seq=won.seq,
        effect=effect,
        decided_by=decided_by,
        compared_with=None if previous is None else previous.seq,
        reason=reason,
        truncate_seq=truncate.seq if effect == "truncated" else None,
    )


def _tie_break(won: Event, previous: Event | None) -> tuple[str, str]:
    """Which part of the order puts ``won`` after ``previous``: the source position, or the Kafka coordinates that
    break a tie of positions (rows of one snapshot, formats without a position), or the row's index in its message."""
    if previous is None:
        return "only_event", "it is the key's only row event"
    against = f"#{previous.seq} (offset {previous.offset})"
    if won.position != previous.position:
        return "position", (
            f"last in compaction order: its source position {won.position} comes after {previous.position} of "
            f"{against}; the source position decides"
        )
    same = f"it shares source position {won.position} with {against}"
    if won.partition != previous.partition:
        return "partition", f"{same}; Kafka partition {won.partition} after {previous.partition} breaks the tie"
    if won.offset != previous.offset:
        return "offset", f"{same}; Kafka offset {won.offset} after {previous.offset} breaks the tie"
    return (
        "row_index",
        f"{same} and its Kafka record; row {won.row_index} of the message comes after row {previous.row_index}",
    )


def _event_order_key(event: Event) -> tuple:
    position = None if event.position is None else json.loads(event.position)
    return order_key(position, event.partition, event.offset, event.row_index)


def _text_order_key(order_text: str) -> tuple:
    order = json.loads(order_text)
    return order_key(order.get("position"), order.get("partition"), order.get("offset"), order.get("row_index"))


def assign_epochs(events: list[Event], diffs: dict[str, list[dict]], metrics: dict[str, list[dict]]) -> None:
    """Give each snapshot read its epoch: the one the run's diff compared it in, else the run's epoch (from its
    metrics) whose first and last read enclose it -- a baseline epoch has no diff rows."""
    for event in events:
        if event.op != S.OP_SNAPSHOT:
            continue
        for run_id in event.runs:
            epoch = _epoch_of(event, run_id, diffs.get(run_id, []), metrics.get(run_id))
            if epoch is not None:
                event.epoch = epoch
                break
        else:
            event.epoch = Epoch(run_id=event.runs[0], epoch_no=None)


def _epoch_of(event: Event, run_id: str, diff_rows: list[dict], metrics: list[dict] | None) -> Epoch | None:
    if metrics is None:
        return None
    compared = next(
        (
            row["epoch_no"]
            for row in diff_rows
            if (row["snapshot_topic"], row["snapshot_partition"], row["snapshot_offset"])
            == (event.topic, event.partition, event.offset)
            and row["snapshot_position"] == event.position
        ),
        None,
    )
    order = _event_order_key(event)
    for entry in metrics:
        if compared is not None and entry["epoch_no"] != compared:
            continue
        if compared is None and not (
            _text_order_key(entry["first_order"]) <= order <= _text_order_key(entry["last_order"])
        ):
            continue
        return Epoch(
            run_id=run_id,
            epoch_no=entry["epoch_no"],
            kind=entry.get("kind"),
            verdict=entry.get("verdict"),
            first_order=entry.get("first_order"),
            last_order=entry.get("last_order"),
        )
    return None


def reconciliation_rows(events: list[Event], diffs: dict[str, list[dict]]) -> list[Reconciliation]:
    """The key's diff rows of every run read, with the events they compared."""
    found = []
    for run_id, rows in diffs.items():
        for row in sorted(rows, key=lambda r: r["epoch_no"]):
            snapshot = find_event(
                events,
                row["snapshot_topic"],
                row["snapshot_partition"],
                row["snapshot_offset"],
                row["snapshot_position"],
            )
            incremental = find_event(
                events,
                row["incremental_topic"],
                row["incremental_partition"],
                row["incremental_offset"],
                row["incremental_position"],
            )
            if row["incremental_op"] == S.OP_TRUNCATE:
                incremental = _truncate_at(events, row)
            found.append(
                Reconciliation(
                    run_id=run_id,
                    epoch_no=row["epoch_no"],
                    status=row["status"],
                    differing_columns=[dict(d) for d in row["differing_columns"] or []],
                    snapshot_seq=None if snapshot is None else snapshot.seq,
                    incremental_seq=None if incremental is None else incremental.seq,
                    incremental_op=row["incremental_op"],
                )
            )
    return found


def _truncate_at(events: list[Event], row: dict) -> Event | None:
    return next(
        (
            e
            for e in events
            if e.op == S.OP_TRUNCATE
            and (e.topic, e.partition, e.offset)
            == (row["incremental_topic"], row["incremental_partition"], row["incremental_offset"])
        ),
        None,
    )


def lost_changes(
    events: list[Event], reconciliations: list[Reconciliation], metrics: dict[str, list[dict]], table_id: str
) -> list[LostChange]:
    """For every difference a reconciliation found, what the archive holds about it, in words."""
    found = []
    by_seq = {event.seq: event for event in events}
    for compared in reconciliations:
        snapshot = by_seq.get(compared.snapshot_seq)
        if compared.status == STATUS_MISMATCH and snapshot is not None:
            for difference in compared.differing_columns:
                found.append(_lost_column(events, compared, snapshot, difference))
        elif compared.status == STATUS_MISSING_IN_INCREMENTAL and snapshot is not None:
            found.append(_lost_row(events, compared, snapshot))
        elif compared.status == STATUS_MISSING_IN_SNAPSHOT:
            found.append(_unread_row(events, compared, metrics.get(compared.run_id, []), table_id))
    return found


def _where(snapshot: Event) -> str:
    return f"the snapshot at position {snapshot.position} (offset {snapshot.offset})"


def _newest_before(events: list[Event], snapshot: Event, column: str | None) -> NewestBefore | None:
    """The newest event before ``snapshot`` that sets ``column`` (any row event when None), or deletes the key."""
    for event in reversed(events[: events.index(snapshot)]):
        removes = event.op in (S.OP_DELETE, S.OP_TRUNCATE)
        if removes or column is None or column in (event.after or {}):
            value = None if removes or column is None else event.after[column]
            return NewestBefore(event.seq, event.op, event.topic, event.partition, event.offset, event.position, value)
    return None


def _newest_words(newest: NewestBefore | None, column: str | None) -> str:
    if newest is None:
        return f"no archived event before the snapshot {'carries ' + column if column else 'names the key'}"
    head = f"the newest event before the snapshot (offset {newest.offset})"
    if newest.op == S.OP_TRUNCATE:
        return f"{head} truncates the table"
    if newest.op == S.OP_DELETE:
        return f"{head} deletes the key"
    if column is None:
        return f"{head} is {_with_article(newest.op)}: the key is live"
    return f"{head} sets {column}={value_text(newest.value)}"


def _with_article(op: str) -> str:
    return f"an {op}" if op[0] in "aeiou" else f"a {op}"


def _lost_column(events: list[Event], compared: Reconciliation, snapshot: Event, difference: dict) -> LostChange:
    """A column the snapshot shows with a value the replayed changes do not give it.

    The change is proven lost when no archived event after the newest one before the snapshot sets the value: then
    the source changed the column without an event the archive holds. An older event setting the value does not
    explain it (a newer one overwrote it); an event after the snapshot that sets it may (the snapshot may have
    read a change the stream orders after it), and then the difference is not called lost."""
    column, shown = difference["column"], difference["snapshot_value"]
    setters = [
        e
        for e in events
        if e.seq != snapshot.seq and e.after is not None and column in e.after and same_value(e.after[column], shown)
    ]
    newest = _newest_before(events, snapshot, column)
    later = [e for e in setters if newest is None or e.seq > newest.seq]
    value = f"{column}={value_text(shown)}"
    if later:
        offsets = ", ".join(str(e.offset) for e in later)
        explained = (
            f"an archived event after the snapshot (offset {offsets}) sets {value}: the snapshot may have read a "
            "change the stream orders after it"
        )
    elif setters:
        explained = f"no archived event for this key sets {value} after the one at offset {setters[-1].offset}"
    else:
        explained = f"no archived event for this key sets {value}"
    return LostChange(
        kind="column",
        run_id=compared.run_id,
        epoch_no=compared.epoch_no,
        snapshot_seq=snapshot.seq,
        snapshot_position=snapshot.position,
        snapshot_offset=snapshot.offset,
        column=column,
        snapshot_value=shown,
        incremental_value=difference["incremental_value"],
        set_by=[e.seq for e in setters],
        newest_before=newest,
        proven=not later,
        text=f"{_where(snapshot)} shows {value}; {explained}; {_newest_words(newest, column)}",
    )


def _lost_row(events: list[Event], compared: Reconciliation, snapshot: Event) -> LostChange:
    """The snapshot read the key, the changes before it never created it or deleted it."""
    newest = _newest_before(events, snapshot, None)
    text = (
        f"{_where(snapshot)} reads the key; {_newest_words(newest, None)}, and no archived event before the "
        "snapshot creates it again: an insert is missing from the archive"
    )
    return LostChange(
        kind="row",
        run_id=compared.run_id,
        epoch_no=compared.epoch_no,
        snapshot_seq=snapshot.seq,
        snapshot_position=snapshot.position,
        snapshot_offset=snapshot.offset,
        newest_before=newest,
        proven=True,
        text=text,
    )


def _unread_row(events: list[Event], compared: Reconciliation, metrics: list[dict], table_id: str) -> LostChange:
    """The changes leave the key live, the snapshot epoch did not read it."""
    entry = next((m for m in metrics if m["table_id"] == table_id and m["epoch_no"] == compared.epoch_no), None)
    last = None if entry is None else _text_order_key(entry["last_order"])
    before = [e for e in events if e.op != S.OP_SNAPSHOT and (last is None or _event_order_key(e) < last)]
    newest = before[-1] if before else None
    live = (
        None
        if newest is None
        else f"the newest event before its last read (offset {newest.offset}) is {_with_article(newest.op)}"
    )
    text = (
        f"snapshot epoch {compared.epoch_no} of run {compared.run_id} did not read the key; "
        f"{live or 'no event before its last read names the key'}, and no archived event deletes it: "
        "a delete is missing from the archive"
    )
    return LostChange(
        kind="row",
        run_id=compared.run_id,
        epoch_no=compared.epoch_no,
        newest_before=None
        if newest is None
        else NewestBefore(newest.seq, newest.op, newest.topic, newest.partition, newest.offset, newest.position, None),
        proven=True,
        text=text,
    )
