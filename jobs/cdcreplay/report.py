"""Human-readable summaries of a run, for the job logs, the Airflow report task and the quick start."""

from __future__ import annotations

from cdcreplay.config import load_config
from cdcreplay.contracts import VERDICT_SKIPPED, ReconciliationResult, RunSummary
from cdcreplay.pipeline import load_summary
from cdcreplay.run_spec import RunSpec
from cdcreplay.warehouse import PipelinePaths, latest_run_id


def render_replay(summaries: list[RunSummary]) -> str:
    lines = []
    for s in summaries:
        head = f"pipeline {s.pipeline} ({s.format}), run {s.run_id}"
        if s.dry_run:
            lines.append(f"{head}: DRY RUN, nothing decoded. Would read {s.records_read} records from {s.files} files.")
            lines.append(f"  manifest: {s.manifest_path}")
            continue
        lines.append(
            f"{head}: read {s.records_read} records ({s.duplicates} duplicates, {s.missing_offsets} missing "
            f"offsets) from {s.files} files; the replay took {s.elapsed_s:.1f}s"
        )
        if s.unreadable_files:
            lines.append(f"  {s.unreadable_files} unreadable archive files left out (listed in the manifest)")
        decoded = s.decoded
        if not decoded:
            lines.append("  no records in the selected range: the published state is unchanged")
            continue
        lines.append(
            f"  changelog rows {decoded['changelog_rows']}, control rows {decoded['control_rows']}, "
            f"quarantined {decoded['quarantined']}"
            + (f" {decoded['quarantine_by_reason']}" if decoded["quarantined"] else "")
        )
        lines.extend(_partition_lines(decoded.get("partitions", {})))
        for note, count in sorted(decoded.get("notes", {}).items()):
            lines.append(f"  note ({count} records): {note}")
        lines.append(f"  published version {s.version}:")
        for table_id, info in sorted(s.tables.items()):
            held_back = info.get("type_conflicts")
            lines.append(
                f"    {table_id:40} {info['rows']:>10} rows  {info['tombstones']:>8} deleted keys"
                + (f"  {held_back} rows held back (type conflict)" if held_back else "")
            )
        if decoded["quarantined"]:
            lines.append(f"  quarantine: {s.quarantine_path}")
        if s.type_conflicts:
            lines.append(f"  rows held back by a type conflict: {s.type_conflicts_path}")
        if s.changelogs_removed:
            lines.append(
                f"  decoded changelog removed from {len(s.changelogs_removed)} older run(s) (keep_decoded_runs): "
                + ", ".join(s.changelogs_removed[:5])
                + (", ..." if len(s.changelogs_removed) > 5 else "")
            )
        lines.append(f"  manifest: {s.manifest_path}")
    return "\n".join(lines)


MAX_PARTITION_LINES = 20


def _partition_lines(partitions: dict[str, dict[str, dict]]) -> list[str]:
    """Per topic partition: the distinct records read, each accounted for once (the job checked the sums)."""
    rows = [
        (topic, int(partition), counts)
        for topic, by_partition in partitions.items()
        for partition, counts in by_partition.items()
    ]
    if not rows:
        return []
    lines = ["  records per partition (distinct read = changelog + control + quarantined):"]
    for topic, partition, c in sorted(rows, key=lambda row: row[:2])[:MAX_PARTITION_LINES]:
        duplicates = c["records_read"] - c["distinct_records"]
        lines.append(
            f"    {topic}/{partition}: {c['distinct_records']} = {c['changelog_records']} + {c['control_records']} + "
            f"{c['quarantined_records']}" + (f" ({duplicates} duplicate records skipped)" if duplicates else "")
        )
    if len(rows) > MAX_PARTITION_LINES:
        lines.append(f"    ... and {len(rows) - MAX_PARTITION_LINES} more partitions: see the run's summary.json")
    return lines


def render_reconciliation(results: list[ReconciliationResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"reconciliation of {r.pipeline}: {r.verdict.upper()}")
        if r.verdict == VERDICT_SKIPPED:
            lines.append(f"  {r.reason or ''}")
            continue
        for t in r.tables:
            if t.get("verdict") == "baseline":
                lines.append(
                    f"  {t['table_id']} epoch {t.get('epoch_no')}: baseline, {t.get('snapshot_rows')} snapshot rows "
                    "(the first load: no earlier changes to compare with)"
                )
                continue
            counts = ", ".join(
                f"{k} {t[k]}"
                for k in ("match", "in_flight", "mismatch", "missing_in_incremental", "missing_in_snapshot")
                if k in t
            )
            lines.append(f"  {t['table_id']} epoch {t.get('epoch_no')}: {t.get('verdict')} ({counts})")
        if r.failed_expectations:
            lines.append("  failed expectations: " + "; ".join(r.failed_expectations))
        for label, path in (("diff", r.diff_path), ("report", r.report_path), ("data docs", r.data_docs_path)):
            if path:
                lines.append(f"  {label}: {path}")
    return "\n".join(lines)


def render_run(spec_json: str) -> str:
    """End-of-run summary across pipelines, read back from each run's summary.json."""
    spec = RunSpec.from_json(spec_json)
    config = load_config(spec.config)
    names = spec.pipelines or tuple(p.name for p in config.project.pipelines)
    summaries = [s for s in (load_summary(config, name, spec.run_id) for name in names) if s]
    parts = [render_replay(summaries)]
    reconciliations = [s.reconciliation for s in summaries if s.reconciliation]
    if reconciliations:
        parts.append(render_reconciliation(reconciliations))
    return "\n".join(parts)


def render_runs(config_path: str, run_id: str | None = None) -> str:
    """Every pipeline's run ``run_id`` (by default each one's latest), as :func:`render_run` tells it."""
    config = load_config(config_path)
    parts = []
    for pipeline in config.project.pipelines:
        chosen = run_id or latest_run_id(PipelinePaths(config.warehouse, pipeline.name))
        if chosen is None:
            parts.append(f"pipeline {pipeline.name}: no runs yet")
            continue
        spec = RunSpec(config=str(config.path), run_id=chosen, pipelines=(pipeline.name,))
        parts.append(render_run(spec.to_json()))
    return "\n".join(parts)


def _markdown_cell(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_reconciliation_report(
    result: ReconciliationResult, metrics: list[dict], sample: list[dict], suite: dict, sample_rows: int
) -> str:
    """The reconciliation's report.md: the verdict, counts per table and epoch, the first ``sample_rows`` keys that
    differ, the GX suite's result, and where the diff, metrics and Data Docs are."""
    lines = [
        "# Reconciliation report",
        "",
        f"**Verdict: {result.verdict.upper()}**  ",
        f"Generated {result.generated_at}.",
        "",
        result.headline,
        "",
        "## Counts per table and snapshot epoch",
        "",
        "| table | epoch | kind | verdict | snapshot rows | incremental rows | match | mismatch "
        "| missing_in_incremental | missing_in_snapshot | in_flight |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in metrics:
        lines.append(
            f"| {_markdown_cell(m['table_id'])} | {m['epoch_no']} | {m['kind']} | {m['verdict']} "
            f"| {m['snapshot_rows']} | {m['incremental_rows']} | {m['match']} | {m['mismatch']} "
            f"| {m['missing_in_incremental']} | {m['missing_in_snapshot']} | {m['in_flight']} |"
        )
    if not metrics:
        lines.append("| (no snapshot epochs in this run) | | | | | | | | | | |")
    lines += ["", f"## First {sample_rows} non-matching rows", ""]
    if sample:
        lines += [
            "| table | epoch | key | status | differing columns (snapshot / incremental) | snapshot at "
            "| incremental at |",
            "|---|---:|---|---|---|---|---|",
        ]
        for row in sample:
            diffs = "; ".join(
                f"{d['column']}: {d['snapshot_value']!r} / {d['incremental_value']!r}"
                for d in row["differing_columns"] or []
            )
            snap = (
                f"{row['snapshot_topic']}[{row['snapshot_partition']}]@{row['snapshot_offset']}"
                if row["snapshot_topic"] is not None or row["snapshot_offset"] is not None
                else ""
            )
            inc = (
                f"{row['incremental_op']} {row['incremental_topic']}[{row['incremental_partition']}]"
                f"@{row['incremental_offset']}"
                if row["incremental_op"] is not None
                else ""
            )
            lines.append(
                f"| {_markdown_cell(row['table_id'])} | {row['epoch_no']} | {_markdown_cell(row['key'])} "
                f"| {row['status']} | {_markdown_cell(diffs)} | {_markdown_cell(snap)} | {_markdown_cell(inc)} |"
            )
    else:
        lines.append("None: no compared key differs.")
    lines += ["", "## Great Expectations", ""]
    lines.append(f"Suite `{suite['suite_name']}`: {'passed' if suite['success'] else 'FAILED'}.")
    for failure in suite["failed"]:
        lines.append(f"- {failure}")
    lines += [
        "",
        "## Where things are",
        "",
        f"- Diff table (Parquet, all statuses): `{result.diff_path}`",
        f"- Metrics: `{result.metrics_path}`",
        f"- Data Docs: `{result.data_docs_path}`",
        "",
    ]
    return "\n".join(lines)
