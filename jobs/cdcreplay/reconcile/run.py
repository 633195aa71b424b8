"""A run's reconciliation: read its changelog and the state it built on, write the diff, metrics, report and Data
Docs into the run's folder."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdcreplay.contracts import (
    FAILING_STATUSES,
    RECONCILE_DATA_DOCS,
    RECONCILE_DIFF,
    RECONCILE_FOLDER,
    RECONCILE_METRICS,
    RECONCILE_REPORT,
    RECONCILE_STORIES,
    STATUS_IN_FLIGHT,
    STATUS_MATCH,
    STATUSES,
    VERDICT_FAIL,
    VERDICT_PASS,
    ReconciliationResult,
)
from cdcreplay.reconcile.plans import has_snapshot_rows, plan_reconciliation, read_changelog, read_history
from cdcreplay.report import render_reconciliation_report
from cdcreplay.spark import vectorized_parquet_reads
from cdcreplay.storage import Location, local_folder

REPORT_SAMPLE_ROWS = 20


def _failing_counts(entry: dict) -> str:
    parts = [f"{entry[s]} {s}" for s in (*FAILING_STATUSES, STATUS_IN_FLIGHT) if entry.get(s)]
    return ", ".join(parts) or "no differences"


def run_reconciliation(
    spark: SparkSession,
    run_dir: Location | str,
    changelog_path: str | list[str],
    base_state: dict | None = None,
    expectations_dir: Path | None = None,
    pipeline: str | None = None,
) -> ReconciliationResult:
    """Reconcile a run's changelog (of ``pipeline``), write ``run_dir/reconcile/{diff/,metrics.json,report.md,
    data_docs/}``; the result's ``verdict`` is ``fail`` when any epoch has mismatch/missing rows or the
    ``reconciliation_diff`` suite fails.
    """
    from cdcreplay import quality
    from cdcreplay.warehouse import write_json_atomically

    quality.import_in_background()  # the diff suite needs GX: import it while Spark reconciles
    run_dir = Location(run_dir)
    out = run_dir / RECONCILE_FOLDER
    diff_path = run_dir / RECONCILE_DIFF
    data_docs = run_dir / RECONCILE_DATA_DOCS
    out.mkdir()
    # The keys' stories the view worked out (one file per key) tell of the diff this reconciliation replaces.
    (run_dir / RECONCILE_STORIES).remove_tree()

    # Nothing in the reconciliation runs Python over the rows, so Spark's faster Parquet reader can read its input.
    with vectorized_parquet_reads(spark):
        changelog = read_changelog(spark, changelog_path)
        # Epochs are made of the run's own snapshot reads (the base state's rows are history, never an epoch): a
        # night without a snapshot has nothing to compare, and reading the whole state would only say so.
        history = read_history(spark, base_state) if base_state and has_snapshot_rows(changelog) else None
        plan = plan_reconciliation(changelog, history=history)
        plan.diff.write.mode("overwrite").parquet(str(diff_path))
        # The metrics, the suite and the report's sample read the diff as written: it is computed once, and not
        # cached (at millions of keys the cache cost more than reading the few columns they need back).
        diff = spark.read.parquet(str(diff_path))
        metrics = plan.metrics(diff)
        with local_folder(data_docs) as docs_folder:  # GX writes its site to local files
            suite = quality.run_suite(
                diff,
                "reconciliation_diff",
                expectations_dir=expectations_dir,
                data_docs_dir=docs_folder,
                rows=sum(m[status] for m in metrics for status in STATUSES),  # the diff's rows: one per compared key
            ).to_dict()
        sample = [
            row.asDict(recursive=True)
            for row in diff.filter(F.col("status") != STATUS_MATCH)
            .orderBy("table_id", "epoch_no", "status", "key")
            .limit(REPORT_SAMPLE_ROWS)
            .collect()
        ]

    failing_epochs = [m for m in metrics if m["verdict"] == VERDICT_FAIL]
    verdict = VERDICT_FAIL if failing_epochs or not suite["success"] else VERDICT_PASS
    if failing_epochs:
        headline = "Reconciliation FAILED: " + "; ".join(
            f"{m['table_id']} epoch {m['epoch_no']}: {_failing_counts(m)}" for m in failing_epochs
        )
    elif not suite["success"]:
        headline = "Reconciliation FAILED: suite reconciliation_diff: " + "; ".join(suite["failed"])
    else:
        reconciled = [m for m in metrics if m["kind"] == "reconciled"]
        headline = (
            f"Reconciliation passed: {len(reconciled)} snapshot epoch(s) reconciled, "
            f"{sum(m['kind'] == 'baseline' for m in metrics)} baseline epoch(s) skipped."
        )
    result = ReconciliationResult(
        verdict=verdict,
        pipeline=pipeline,
        headline=f"{headline} Diff: {diff_path}",
        generated_at=datetime.now(UTC).isoformat(),
        tables=metrics,
        diff_path=str(diff_path),
        metrics_path=str(run_dir / RECONCILE_METRICS),
        report_path=str(run_dir / RECONCILE_REPORT),
        data_docs_path=str(data_docs / "index.html"),
        failed_expectations=suite["failed"],
    )
    write_json_atomically(run_dir / RECONCILE_METRICS, {**result.to_json(), "suite": suite})
    (run_dir / RECONCILE_REPORT).write_text(
        render_reconciliation_report(result, metrics, sample, suite, REPORT_SAMPLE_ROWS)
    )
    return result
