"""What the reconciliation produces and reads: the diff table's columns, the plan and its metrics per epoch, and
the history a run built on (see the package's doc for the rules)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema
from cdcreplay.contracts import (
    FAILING_STATUSES,
    STATUSES,
    VERDICT_BASELINE,
    VERDICT_FAIL,
    VERDICT_PASS,
)

DIFFERING_COLUMNS_DDL = "array<struct<column: string, snapshot_value: string, incremental_value: string>>"
DIFF_DDL = (
    "table_id string, epoch_no int, key string, status string, "
    f"differing_columns {DIFFERING_COLUMNS_DDL}, "
    "snapshot_topic string, snapshot_partition int, snapshot_offset bigint, snapshot_position string, "
    "incremental_op string, incremental_topic string, incremental_partition int, incremental_offset bigint, "
    "incremental_position string"
)
DIFF_COLUMNS = (
    "table_id",
    "epoch_no",
    "key",
    "status",
    "differing_columns",
    "snapshot_topic",
    "snapshot_partition",
    "snapshot_offset",
    "snapshot_position",
    "incremental_op",
    "incremental_topic",
    "incremental_partition",
    "incremental_offset",
    "incremental_position",
)


# Spark types whose canonical text is compared as the typed value ("12.5" = "12.50" as decimal(10,2), "1" = "true"
# as boolean); anything else (string, or a type that cannot be cast from text) is compared as text, which is exact
# for canonical text. A bare "decimal" is left out on purpose: Spark reads it as decimal(10,0) and would round.
_TYPED_COMPARISON = re.compile(
    r"^(boolean|tinyint|smallint|int|integer|bigint|long|float|real|double|date|timestamp|timestamp_ntz|"
    r"timestamp_ltz|binary|decimal\(\s*\d+\s*,\s*\d+\s*\))$"
)


@dataclass
class ReconcileResult:
    """The diff (cached: the metrics computed it; the caller writes it, then calls ``release``) and the metrics."""

    diff: DataFrame
    metrics: list[dict] = field(default_factory=list)
    one_pass_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_in_one_pass
    _cached: DataFrame | None = field(default=None, repr=False)

    def release(self) -> None:
        """Drop the cached diff once it has been written."""
        if self._cached is not None:
            self._cached.unpersist()


@dataclass
class ReconciliationPlan:
    """The diff as a plan not yet computed, and the epochs found on the way (one row each)."""

    diff: DataFrame
    epoch_rows: list = field(default_factory=list)
    one_pass_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_in_one_pass
    joined_tables: list[str] = field(default_factory=list)  # the tables reconciled by _pairs_of_reads_and_state

    def metrics(self, diff: DataFrame) -> list[dict]:
        """Metrics per epoch (module docstring), counted on ``diff``: this plan's diff, computed (cached or written).

        A key's incremental value is live exactly when its winning event is neither a delete nor emptied by a
        truncate, which the diff's ``incremental_op`` says (NULL: no event at all).
        """
        live = F.col("incremental_op").isNotNull() & ~F.col("incremental_op").isin(schema.OP_DELETE, schema.OP_TRUNCATE)
        counts = {
            (row.table_id, row.epoch_no): row.asDict()
            for row in diff.groupBy("table_id", "epoch_no")
            .agg(
                *[F.sum((F.col("status") == status).cast("long")).alias(status) for status in STATUSES],
                F.sum(live.cast("long")).alias("incremental_rows"),
            )
            .collect()
        }
        metrics = []
        for epoch in self.epoch_rows:
            row = counts.get((epoch.table_id, epoch._epoch_no), {})
            entry = {
                "table_id": epoch.table_id,
                "epoch_no": epoch._epoch_no,
                "kind": "baseline" if epoch._baseline else "reconciled",
                "first_order": epoch._first_text,
                "last_order": epoch._last_text,
                "snapshot_rows": int(epoch._rows),
                "incremental_rows": int(row.get("incremental_rows") or 0),
                **{status: int(row.get(status) or 0) for status in STATUSES},
            }
            if epoch._baseline:
                entry["verdict"] = VERDICT_BASELINE
            else:
                failing = sum(entry[status] for status in FAILING_STATUSES)
                entry["verdict"] = VERDICT_PASS if failing == 0 else VERDICT_FAIL
            metrics.append(entry)
        return metrics


@dataclass(frozen=True)
class History:
    """What came before a run's own changes: the published state it built on (earlier runs' compacted result), as
    events, and per table what the epochs need to know of those events (:func:`history_facts`): how many, their
    declared types, whether any image is partial, and their oldest or newest order. A table's epochs are decided by
    these facts and the run's changes, so the state's rows are read only by the diff itself."""

    events: DataFrame  # changelog contract
    facts: DataFrame  # one row per table: table_id, _h_rows, _h_types, _h_partial, _h_oldest, _h_newest


def _order_text(order: Column) -> Column:
    return F.to_json(order)


def _position_text(position: Column) -> Column:
    # array<decimal(38,0)> -> '[12,345]' (the text to_json gives, without its JSON writer per row); NULL stays NULL.
    return F.concat(F.lit("["), F.array_join(position.cast("array<string>"), ",", "null"), F.lit("]"))
