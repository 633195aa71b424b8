"""Changelog -> latest state per primary key.

Order within a key: ``(position, partition, offset, row_index)``. The source position decides; the Kafka
coordinates only break ties (rows of one snapshot share a position) and the row index orders the rows of one
message. The last event wins:
  snapshot / insert / update -> the key is live with that event's after image;
  delete                     -> the key is a tombstone (kept in the state so a late, older event cannot bring it back);
  truncate (table level)     -> every key whose last event is older than the truncate is a tombstone.
A primary-key change arrives as a delete of the old key and an insert of the new one, so it needs no special case.
The state row of a key is its last event without the ``before`` image (NULL): what a key holds is its after image
or its tombstone, and an event's before image matters only to that event (its decoder read the key from it;
``explain`` reads it from the run's changelog), so it is not carried through the shuffle nor stored.

Partial images (a column absent from ``after`` was not carried by the message, unlike a present NULL) are completed
from the key's earlier images: the image of the last event is laid over the images before it, back to the last
full image or delete.

Merging is a max over a total order, so it is idempotent and order-independent: compacting (previous state + new
changes) equals compacting the whole history, and replaying the same range twice changes nothing.

Tombstone retention (``purge_tombstones``): by default a tombstone stays in the state forever, so no late event can
ever bring its key back. With a retention of N days, a tombstone whose delete happened more than N days before the
newest event of the state is dropped; an event older than that delete arriving after the purge would then bring
the key back. The reference is the data's own newest event time, not the wall clock, so reruns stay identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import NamedTuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S

STATE_EXTRA_DDL = "deleted boolean"
ORDER_FIELDS = ("position", "partition", "offset", "row_index")


def event_order() -> Column:
    """The total order of events: the struct (position, partition, offset, row_index), compared field by field."""
    return F.struct(*[F.col(name) for name in ORDER_FIELDS])


def order_key(position, partition, offset, row_index) -> tuple:
    """An event's order (:func:`event_order`'s fields) as a Python value that compares as Spark compares the order
    struct: field by field, a NULL field first, the position element by element."""
    parts = None if position is None else [Decimal(-(10**40)) if p is None else Decimal(str(p)) for p in position]
    return (
        (parts is not None, parts or []),
        *((value is not None, value or 0) for value in (partition, offset, row_index)),
    )


def _is_partial(after: Column, column_types: Column) -> Column:
    """An image that lacks some of the columns the message declares."""
    # array_except rather than exists(... map_contains_key ...): a compiled expression, not an interpreted lambda.
    # It builds a hash set per row, so the common case -- the image lists exactly the declared columns, in the same
    # order, as a decoder writes them -- is settled first by comparing the two key arrays.
    declared, carried = F.map_keys(column_types), F.map_keys(after)
    return F.when(declared == carried, F.lit(False)).otherwise(F.size(F.array_except(declared, carried)) > 0)


def _partial_image() -> Column:
    return (F.col("op") != S.OP_DELETE) & _is_partial(F.col("after"), F.col("column_types"))


def partial_event() -> Column:
    """A row event whose image lacks some of the columns its message declares (NULL for an event without image)."""
    return F.col("op").isin(*S.ROW_OPS) & _partial_image()


def has_partial_images(changelog: DataFrame) -> bool:
    """Whether any event of ``changelog`` carries a partial image (one scan, stopping at the first found)."""
    return not changelog.where(partial_event()).isEmpty()


def latest_rows(changelog: DataFrame, partial_images: bool | None = None) -> DataFrame:
    """Per (table_id, key): the last event, partial images completed, with ``deleted``. Changelog columns + deleted.

    ``partial_images`` False says no event of ``changelog`` has a partial image (a caller that already knows);
    None finds out with :func:`has_partial_images` -- a scan of the input, not of the compacted result, which
    would compute the whole compaction twice.
    """
    rows = changelog.where(F.col("op").isin(*S.ROW_OPS) & F.col("key").isNotNull())
    if partial_images is None:
        partial_images = has_partial_images(rows)
    rows = rows.withColumn("before", F.lit(None).cast("map<string,string>"))  # not state: see the module doc
    # One shuffle and one sort by key and event order give each key its last event (rank 1) and, where it is partial,
    # every image it had to complete it. A groupBy with max_by did the first through a map-side aggregation that
    # merges nothing -- a key's rows are spread over the input's partitions -- and sorted twice (2M changes to a
    # noop sink: 14-18 s against 12-15 s for the window; docs/benchmarks.md, thirty-ninth session). The key's hash
    # leads the sort: a long that decides nearly every comparison from the sort's 8-byte prefix, where table ids
    # that share their first eight bytes (one schema's tables) sent each comparison to the whole rows: ids, key
    # texts, positions (docs/benchmarks.md, fortieth session).
    by_key = Window.partitionBy(F.xxhash64("table_id", "key"), "table_id", "key").orderBy(event_order().desc())
    rank = F.row_number().over(by_key).alias("rank")
    if partial_images:
        whole_key = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        images = F.collect_list(F.struct(event_order().alias("order"), "op", "after")).over(whole_key)
        completed = F.when(_partial_image(), _laid_over(F.col("images"))).otherwise(F.col("after"))
        ranked = rows.select(*S.CHANGELOG_COLUMNS, rank, images.alias("images"))
        latest = ranked.where(F.col("rank") == 1).withColumn("after", completed).select(*S.CHANGELOG_COLUMNS)
    else:
        latest = rows.select(*S.CHANGELOG_COLUMNS, rank).where(F.col("rank") == 1).drop("rank")
    latest = _apply_truncates(changelog, latest)
    return latest.withColumn("deleted", F.col("op") == S.OP_DELETE)


def _laid_over(images: Column) -> Column:
    """A key's images (order, op, after) laid over each other in event order, restarting at every delete: a column
    absent from an image keeps the value it last had."""
    ordered = F.array_sort(
        images,
        lambda left, right: (
            F.when(left["order"] < right["order"], -1).when(left["order"] > right["order"], 1).otherwise(0)
        ),
    )
    empty = F.create_map().cast("map<string,string>")
    return F.aggregate(
        ordered,
        empty,
        lambda image, event: F.when(event["op"] == S.OP_DELETE, empty).otherwise(
            F.map_concat(image, F.coalesce(event["after"], empty))
        ),
    )


def _apply_truncates(changelog: DataFrame, last: DataFrame) -> DataFrame:
    truncates = (
        changelog.where(F.col("op") == S.OP_TRUNCATE)
        .groupBy("table_id")
        .agg(F.max(event_order()).alias("truncated_at"))
    )
    if truncates.isEmpty():
        return last
    joined = last.join(F.broadcast(truncates), "table_id", "left")
    wiped = F.col("truncated_at").isNotNull() & (event_order() < F.col("truncated_at"))
    return joined.select(
        *[
            F.when(wiped, F.lit(S.OP_DELETE)).otherwise(F.col("op")).alias("op")
            if c == "op"
            else F.when(wiped, F.lit(None)).otherwise(F.col("after")).alias("after")
            if c == "after"
            else F.col(c)
            for c in S.CHANGELOG_COLUMNS
        ]
    )


def purge_tombstones(state: DataFrame, retention_days: int | None) -> DataFrame:
    """The state without tombstones older than ``retention_days`` before its newest event (see module docstring)."""
    if retention_days is None:
        return state
    newest = state.agg(F.max("event_time")).first()[0]
    if newest is None:
        return state
    horizon = F.lit(newest) - F.make_interval(days=F.lit(retention_days))
    # A tombstone without an event time cannot be aged: it is kept.
    expired = F.col("deleted") & F.col("event_time").isNotNull() & (F.col("event_time") < horizon)
    return state.where(~expired)


# A run's changes name at most this many keys for the untouched rest of the state to be carried over by a broadcast
# join (the driver and every executor hold the set of changed keys: ~100 bytes a key). More go the full merge.
CARRY_OVER_MAX_CHANGES = 1_000_000


def merge_with_state(
    previous_state: DataFrame | None, changes: DataFrame, change_count: int | None = None
) -> DataFrame:
    """New state from the previous state (changelog columns + deleted) and a run's changes.

    A key no change of this run names, in a table this run did not truncate, keeps its state row as it is: the
    latest event of such a key is its stored row, so only the keys the changes name (and every key of a truncated
    table) are merged. With ``change_count`` (the run's changelog rows) at most :data:`CARRY_OVER_MAX_CHANGES`, the
    rest of the state is carried over past a broadcast join instead of being shuffled and sorted with the changes
    (it is still written whole by the caller). Either way the result is the one compacting the whole history gives.
    """
    if previous_state is None:
        return latest_rows(changes)
    if change_count is None or change_count > CARRY_OVER_MAX_CHANGES:
        previous = previous_state.select(*S.CHANGELOG_COLUMNS)
        return latest_rows(previous.unionByName(changes.select(*S.CHANGELOG_COLUMNS)))
    untouched, changed = _split_by_change(previous_state, changes)
    return untouched.select(*changed.columns).unionByName(changed)


class StateChange(NamedTuple):
    stored: DataFrame  # the previous state's rows of the changed keys (cached)
    rows: DataFrame  # the keys' new rows


@contextmanager
def changed_rows(previous_state: DataFrame, changes: DataFrame) -> Iterator[StateChange]:
    """The new state rows of the keys ``changes`` names, and of every key of a table they truncate: what a run
    changed in the state (the rows a night merges, see ``state_store``), with the stored rows they replace, to be
    used inside the block. Every other key keeps its row in ``previous_state``.

    Each is the compaction of the key's stored row with its changes, so a partial image is completed from the
    stored row, and the row is the key's latest as of this run. Finding the stored rows reads the whole previous
    state; they are kept (cached) while the block runs, since the compaction reads them twice (the check for partial
    images, then the last event and the images of each key).
    """
    kept: list[DataFrame] = []

    def keep(rows: DataFrame) -> DataFrame:
        kept.append(rows.persist(StorageLevel.MEMORY_AND_DISK))
        return kept[-1]

    try:
        changed = _split_by_change(previous_state, changes, stored_rows=keep)[1]
        yield StateChange(stored=kept[0], rows=changed)
    finally:
        for rows in kept:
            rows.unpersist()


def _split_by_change(
    previous_state: DataFrame, changes: DataFrame, stored_rows=lambda rows: rows
) -> tuple[DataFrame, DataFrame]:
    """(rows of ``previous_state`` the changes leave as they are, new rows of the keys they change); ``stored_rows``
    is given the previous rows of the changed keys before they are compacted with the changes."""
    previous = previous_state.select(*S.CHANGELOG_COLUMNS, "deleted")
    named = F.broadcast(changed_keys(changes))
    truncated = truncated_tables(changes)
    in_truncated_table = F.col("table_id").isin(truncated) if truncated else F.lit(False)
    untouched = previous.where(~in_truncated_table).join(named, ["table_id", "key"], "left_anti")
    reworked = stored_rows(
        previous.where(in_truncated_table).unionByName(
            previous.where(~in_truncated_table).join(named, ["table_id", "key"], "left_semi")
        )
    )
    changed = latest_rows(reworked.drop("deleted").unionByName(changes.select(*S.CHANGELOG_COLUMNS)))
    return untouched, changed


def changed_keys(changes: DataFrame) -> DataFrame:
    """The (table_id, key) pairs a run's row changes name."""
    return changes.where(F.col("op").isin(*S.ROW_OPS) & F.col("key").isNotNull()).select("table_id", "key").distinct()


def truncated_tables(changes: DataFrame) -> list[str]:
    """The tables a run's changes truncate."""
    return [row.table_id for row in changes.where(F.col("op") == S.OP_TRUNCATE).select("table_id").distinct().collect()]
