"""Reconcile snapshot loads against the state built from incremental changes.

A CDC source emits two kinds of row events: *snapshot* rows (a full read of the table: Debezium ``op=r``,
Canal/DTS/DRS ``INIT``, Qlik ``REFRESH``) and *incremental* changes (insert/update/delete, plus table-level
truncate). If the pipeline lost, duplicated or misapplied a change, the state built from the changes disagrees with
what a later snapshot read from the database. This module finds those disagreements. Everything here is
DataFrame -> DataFrame; only :func:`run_reconciliation` touches storage.

Order. Events are totally ordered by the struct ``(position, partition, offset, row_index)`` compared field by field
(``position`` is an array of decimals compared lexicographically; the Kafka coordinates only break ties). "order"
below always means that struct. A snapshot row archived twice is read once (exact duplicates: same table, key, op
and order). A duplicate of any other event changes nothing: either copy is the same latest event.

1. **Snapshot epochs.** The snapshot rows of a table, sorted by order, are split greedily into epochs: a new epoch
   starts at the first snapshot row whose key already occurred in the current epoch (a resync snapshot re-reads keys
   the initial one read). Rows that share one source position are one unit the split never cuts: a connector stamps
   a whole snapshot run with the position it started at, and the Kafka coordinates of two partitions do not order
   its rows (``epochs._read_unit``). Epochs get ``epoch_no`` 1, 2, ... and their first/last order. A key occurs at
   most once per epoch, by construction.
2. **Incremental value.** For epoch E and its snapshot row for key k read at order p, the incremental value of k is
   the latest event for k (partial images merged onto the previous image by
   :func:`cdcreplay.compaction.latest_rows`) among all the table's rows that are *not snapshot rows of E* with
   order < p. Snapshot rows of earlier epochs count as state (they are what the table looked like then). The value
   is *live* unless that event is a delete or a truncate of the table lies after it and before p.
3. **Comparison.** Column by column over the columns both images carry (a column absent from one image's map was
   not carried by that message: not comparable, skipped), typed by ``column_types`` (snapshot side first) and
   compared null-safely: equal when the canonical texts are equal, or when both read back as the same typed value
   (``"12.5"`` and ``"12.50"`` are the same ``decimal(10,2)``). Types that cannot be cast from text compare as text.
4. **Statuses.** Snapshot row with a live incremental value: ``match`` or ``mismatch`` (with the differing columns
   and both values). Snapshot row without one: ``missing_in_incremental``. A key live in the incremental state as
   of E's last order (events with order < last) that E did not read: ``missing_in_snapshot``. Any non-match key
   with an insert/update/delete at an order within [first, last] of E -- or any non-match key at all when a truncate
   of the table lies in that window -- is ``in_flight`` instead: it changed while the snapshot was being taken, so
   the snapshot's copy and the change stream legitimately disagree about it. (Debezium, for one, stamps every
   snapshot row with the position where the snapshot started, so a row updated during the snapshot is read with
   its new value but ordered before the update.)
5. **Baseline.** The first epoch of a table with no non-snapshot event (insert/update/delete/truncate) before its
   first row is the baseline: there is nothing to compare it with. It is skipped and reported in the metrics with
   ``kind="baseline"`` and its row count. Later epochs, and a first epoch preceded by changes (e.g. the base state
   of an incremental run), are reconciled.

Diff table (:data:`DIFF_DDL`): one row per compared key and epoch, all statuses (users filter), with
``differing_columns`` (column, snapshot_value, incremental_value as canonical text, sorted by column) and the
provenance of both sides (topic, partition, offset, position as JSON text; ``incremental_op`` is the op of the
winning incremental event, or ``truncate`` when a truncate killed it -- its provenance is then the truncate's).

Metrics per (table_id, epoch_no): counts per status, ``snapshot_rows``, ``incremental_rows`` (keys whose
incremental value is live), first/last order, ``verdict`` ``pass`` when mismatch + missing_in_incremental +
missing_in_snapshot == 0 else ``fail`` (``baseline`` for skipped baseline epochs).

Implementation note: a table whose snapshot never reads a key twice has one epoch, found with one narrow
aggregation; the epochs of the other tables are found with window functions and a driver loop that runs one small
aggregation per epoch boundary (epochs are few). A table with one reconciled epoch and only complete images (the
common case: an initial load or one resync per run) is then reconciled from one sort of its events by key and
order: a read row's incremental value is the key's previous event, an unread key's is its last event before the
epoch's last read. The other tables take the general plan: the history is replicated per epoch and
:func:`cdcreplay.compaction.latest_rows` runs once, on a per-epoch scope of the table id; both plans feed the same
status and comparison step. Column comparison uses higher-order functions over the two maps, typed with
:func:`cdcreplay.value_types.typed_value`, for the rows whose two images differ (their key or value arrays).
Nothing collects changelog rows to the driver; only one row per epoch is. A run's base state is its history
(:class:`History`): where the epochs are found, its facts per table -- kept with the state in its patterns file --
stand in for its rows, so only the diff reads them.
"""

from cdcreplay.reconcile.model import DIFF_COLUMNS, DIFF_DDL, History, ReconcileResult, ReconciliationPlan
from cdcreplay.reconcile.plans import (
    has_snapshot_rows,
    plan_reconciliation,
    prepare_changelog,
    read_changelog,
    read_history,
    reconcile,
)
from cdcreplay.reconcile.run import run_reconciliation

__all__ = [
    "DIFF_COLUMNS",
    "DIFF_DDL",
    "History",
    "ReconcileResult",
    "ReconciliationPlan",
    "has_snapshot_rows",
    "plan_reconciliation",
    "prepare_changelog",
    "read_changelog",
    "read_history",
    "reconcile",
    "run_reconciliation",
]
