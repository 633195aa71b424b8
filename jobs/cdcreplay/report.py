"""Human-readable summaries of a run, for the job logs, the Airflow report task and the quick start."""

from __future__ import annotations

from cdcreplay.config import load_config
from cdcreplay.pipeline import load_summary
from cdcreplay.run_spec import RunSpec


def render_replay(summaries: list[dict]) -> str:
    lines = []
    for s in summaries:
        head = f"pipeline {s['pipeline']} ({s['format']}), run {s['run_id']}"
        if s.get("dry_run"):
            lines.append(
                f"{head}: DRY RUN, nothing decoded. Would read {s['records_read']} records from {s['files']} files."
            )
            lines.append(f"  manifest: {s['manifest_path']}")
            continue
        lines.append(
            f"{head}: read {s['records_read']} records ({s['duplicates']} duplicates, {s['missing_offsets']} missing "
            f"offsets) from {s['files']} files; the replay took {s['elapsed_s']:.1f}s"
        )
        if s.get("unreadable_files"):
            lines.append(f"  {s['unreadable_files']} unreadable archive files left out (listed in the manifest)")
        decoded = s.get("decoded")
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
        lines.append(f"  published version {s['version']}:")
        for table_id, info in sorted(s["tables"].items()):
            held_back = info.get("type_conflicts")
            lines.append(
                f"    {table_id:40} {info['rows']:>10} rows  {info['tombstones']:>8} deleted keys"
                + (f"  {held_back} rows held back (type conflict)" if held_back else "")
            )
        if decoded["quarantined"]:
            lines.append(f"  quarantine: {s['quarantine_path']}")
        if s.get("type_conflicts"):
            lines.append(f"  rows held back by a type conflict: {s['type_conflicts_path']}")
        lines.append(f"  manifest: {s['manifest_path']}")
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


def render_reconciliation(results: list[dict]) -> str:
    lines = []
    for r in results:
        verdict = r.get("verdict", "skipped")
        lines.append(f"reconciliation of {r['pipeline']}: {verdict.upper()}")
        if verdict == "skipped":
            lines.append(f"  {r.get('reason', '')}")
            continue
        for t in r.get("tables", []):
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
        if r.get("failed_expectations"):
            lines.append("  failed expectations: " + "; ".join(r["failed_expectations"]))
        for label, key in (("diff", "diff_path"), ("report", "report_path"), ("data docs", "data_docs_path")):
            if r.get(key):
                lines.append(f"  {label}: {r[key]}")
    return "\n".join(lines)


def render_run(spec_json: str) -> str:
    """End-of-run summary across pipelines, read back from each run's summary.json."""
    spec = RunSpec.from_json(spec_json)
    config = load_config(spec.config)
    names = spec.pipelines or tuple(p.name for p in config.project.pipelines)
    summaries = [s for s in (load_summary(config, name, spec.run_id) for name in names) if s]
    parts = [render_replay(summaries)]
    reconciliations = [s["reconciliation"] for s in summaries if s.get("reconciliation")]
    if reconciliations:
        parts.append(render_reconciliation(reconciliations))
    return "\n".join(parts)
