"""Reconciliation at size: an N-row snapshot read against an N-row incremental state, with known differences.

``cdcreplay benchmark --reconcile-rows 5000000`` builds, with Spark alone, one table's published state of N keys
(what earlier runs compacted: inserts at positions 0..N-1; kept with its patterns, as a run publishes it) and a
snapshot read of that table taken after it (Debezium ``op=r`` rows at positions N..2N-1), then times
:func:`cdcreplay.reconcile.run_reconciliation` -- the same call the reconcile task makes, with the state as its base
state -- and checks the counts it reports against the differences planted in the snapshot:

- every ``DIFFERENCE_PERIOD``-th key + ``MISMATCH_AT`` reads another amount -> ``mismatch`` (column ``amount``);
- every ``DIFFERENCE_PERIOD``-th key + ``UNREAD_AT`` is not read -> ``missing_in_snapshot``;
- N / ``DIFFERENCE_PERIOD`` keys beyond the state are read -> ``missing_in_incremental``;
- everything else -> ``match``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.state_store import read_state, save_patterns, state_ref, write_state
from cdcreplay.tables import state_patterns

TABLE_ID = "bench.items"
COLUMN_TYPES = {"id": "bigint", "name": "string", "amount": "decimal(12,2)"}
DIFFERENCE_PERIOD = 100_000
MISMATCH_AT = 7
UNREAD_AT = 11


def _rows(ids: DataFrame, op: str, position_offset: int, amount_cents: Column) -> DataFrame:
    """Changelog rows of TABLE_ID for the ``id`` column of ``ids``, at positions id + position_offset."""
    key_id = F.col("id").cast("string")
    amount = F.format_string("%d.%02d", (amount_cents / 100).cast("long"), amount_cents % 100)
    return ids.select(
        F.lit(TABLE_ID).alias("table_id"),
        F.lit("bench").alias("source_db"),
        F.lit(None).cast("string").alias("source_schema"),
        F.lit("items").alias("source_table"),
        F.lit(op).alias("op"),
        F.concat(F.lit('["'), key_id, F.lit('"]')).alias("key"),
        F.array(F.lit("id")).alias("key_columns"),
        F.create_map(
            F.lit("id"), key_id, F.lit("name"), F.concat(F.lit("item "), key_id), F.lit("amount"), amount
        ).alias("after"),
        F.lit(None).cast("map<string,string>").alias("before"),
        F.create_map(*[F.lit(part) for pair in COLUMN_TYPES.items() for part in pair]).alias("column_types"),
        F.array((F.col("id") + position_offset).cast("decimal(38,0)")).alias("position"),
        F.lit(None).cast("timestamp").alias("event_time"),
        F.lit("dbserver1.bench.items").alias("topic"),
        F.lit(0).alias("partition"),
        (F.col("id") + position_offset).alias("offset"),
        F.lit(0).alias("row_index"),
        F.lit("debezium-json").alias("format"),
    )


def expected_counts(rows: int, period: int = DIFFERENCE_PERIOD) -> dict[str, int]:
    """What the reconciliation must report for ``rows`` keys (see the module docstring)."""

    def planted(at: int) -> int:
        return 0 if rows <= at else (rows - 1 - at) // period + 1

    extra = rows // period
    return {
        "mismatch": planted(MISMATCH_AT),
        "missing_in_snapshot": planted(UNREAD_AT),
        "missing_in_incremental": extra,
        "match": rows - planted(MISMATCH_AT) - planted(UNREAD_AT),
        "in_flight": 0,
    }


def write_inputs(spark: SparkSession, work: Path, rows: int, period: int = DIFFERENCE_PERIOD) -> tuple[dict, Path]:
    """(base state as ``state_store.state_ref`` names it, snapshot changelog folder) for ``rows`` keys, rewritten
    each time."""
    state_path, changelog_path = work / "state", work / "changelog"
    shutil.rmtree(work, ignore_errors=True)
    state_ids = spark.range(rows)
    amount_cents = F.col("id") % 1_000_000 + 100
    state = _rows(state_ids, S.OP_INSERT, 0, amount_cents).withColumn("deleted", F.lit(False))
    version = write_state(state, state_path)
    # A run publishes its state with the state's patterns; the reconciliation takes the state's facts from them.
    patterns_file = work / "patterns.json"
    save_patterns(state_patterns(read_state(spark, state_path, version)), patterns_file)

    phase = F.col("id") % period
    read = spark.range(rows + rows // period).where((F.col("id") >= rows) | (phase != UNREAD_AT))
    snapshot_cents = F.when((F.col("id") < rows) & (phase == MISMATCH_AT), amount_cents + 1).otherwise(amount_cents)
    _rows(read, S.OP_SNAPSHOT, rows, snapshot_cents).write.mode("overwrite").parquet(str(changelog_path))
    return state_ref(state_path, version, patterns_file), changelog_path


def measure_reconcile(spark: SparkSession, work: Path, rows: int, period: int = DIFFERENCE_PERIOD) -> dict:
    """Time run_reconciliation on ``rows`` snapshot rows against ``rows`` state rows; check what it counted."""
    from cdcreplay.reconcile import run_reconciliation

    folder = work / f"reconcile-{rows}"
    began = time.monotonic()
    base_state, changelog_path = write_inputs(spark, folder, rows, period)
    prepared_s = time.monotonic() - began

    began = time.monotonic()
    outcome = run_reconciliation(spark, folder / "run", str(changelog_path), base_state)
    elapsed = time.monotonic() - began
    [epoch] = [m for m in outcome.tables if m["table_id"] == TABLE_ID]
    expected = expected_counts(rows, period)
    counted = {status: epoch[status] for status in expected}
    return {
        "snapshot_rows": epoch["snapshot_rows"],
        "state_rows": rows,
        "inputs_s": round(prepared_s, 2),
        "seconds": round(elapsed, 2),
        "rows_per_s": round((epoch["snapshot_rows"] + rows) / elapsed),
        "verdict": outcome.verdict,
        "counts": counted,
        "counts_as_planted": counted == expected,
        "report": outcome.report_path,
        "diff": outcome.diff_path,
    }
