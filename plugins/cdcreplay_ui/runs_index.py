"""What the reconciliation view shows, read from the warehouse: runs, their verdicts and counts, and their files.

No web framework here (the HTTP layer in ``app.py`` stays thin) and no Spark: run summaries are JSON, the diff table
is read with pyarrow, a bounded number of rows at a time.

A run of a pipeline is ``<warehouse>/<pipeline>/runs/<run_id>/`` (see ``cdcreplay.warehouse``): ``summary.json``
(counts per stage, the quarantine by reason, and after the reconcile job the ``reconciliation`` result),
``manifest.json`` and ``reconcile/{diff/, metrics.json, report.md, data_docs/}``. The warehouse is a local folder or
an S3 prefix: everything is read through ``cdcreplay.storage.Location``. Only configured pipelines are listed, and
every file served must be inside its run folder (on a local disk: resolved, symlinks included).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from cdcreplay.contracts import (
    FAILING_STATUSES,
    MANIFEST_FILE,
    RECONCILE_DATA_DOCS,
    RECONCILE_DIFF,
    RECONCILE_METRICS,
    RECONCILE_REPORT,
    RUN_FOLDER_NAME,
    STATUS_IN_FLIGHT,
    STATUS_MATCH,
    STATUS_MISMATCH,
    STATUS_MISSING_IN_INCREMENTAL,
    STATUS_MISSING_IN_SNAPSHOT,
    SUMMARY_FILE,
    RunSummary,
)
from cdcreplay.storage import Location, unsupported_scheme

# Diff statuses in the order the view shows them, with the short names of its columns. A key the snapshot read but
# the changes never created is "missing"; a key the changes say is live but the snapshot did not read is "extra".
STATUS_COLUMNS = (
    (STATUS_MATCH, "match"),
    (STATUS_MISSING_IN_INCREMENTAL, "missing"),
    (STATUS_MISSING_IN_SNAPSHOT, "extra"),
    (STATUS_MISMATCH, "mismatch"),
    (STATUS_IN_FLIGHT, "in flight"),
)
STATUSES = tuple(status for status, _ in STATUS_COLUMNS)
# What the diff page shows unless asked otherwise: every key that did not match.
DEFAULT_DIFF_STATUSES = (*FAILING_STATUSES, STATUS_IN_FLIGHT)
MAX_DIFF_ROWS = 2000

# The files of a run the view links to, relative to the run folder.
RUN_FILES = {
    "manifest": MANIFEST_FILE,
    "report": RECONCILE_REPORT,
    "metrics": RECONCILE_METRICS,
    "diff": RECONCILE_DIFF,
    "data_docs": f"{RECONCILE_DATA_DOCS}/index.html",
}


class NotFound(LookupError):
    """No such pipeline, run or file; the message says which."""


class Refused(ValueError):
    """A request for a path outside the run folder (``..``, an absolute path, a symlink that leads out)."""


@dataclass(frozen=True)
class TableResult:
    """One table of a run: its reconciled snapshot epochs added up (baseline epochs are only counted)."""

    table_id: str
    verdict: str  # pass | fail | baseline
    reconciled_epochs: int
    baseline_epochs: int
    snapshot_rows: int
    counts: dict[str, int]


@dataclass(frozen=True)
class RunInfo:
    pipeline: str
    format: str
    run_id: str
    time: datetime | None  # when the reconciliation ran, else when the summary was written (UTC)
    verdict: str  # pass | fail | skipped (nothing to reconcile) | not reconciled | dry run
    headline: str
    records_read: int
    quarantined: int
    quarantine_by_reason: dict[str, int]
    tables: tuple[TableResult, ...]
    files: frozenset[str]  # keys of RUN_FILES present in the run folder
    # The page the "Data Docs" link opens, relative to reconcile/data_docs/: the newest validation result (what the
    # suite found in this diff), else the site's index.
    data_docs_page: str | None = None
    epochs: tuple[dict, ...] = ()  # the reconciliation metrics per table and epoch
    failed_expectations: tuple[str, ...] = ()
    summary: RunSummary | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class DiffPage:
    """A bounded slice of a run's diff table, with the number of rows per status."""

    statuses: tuple[str, ...]
    table_id: str | None
    rows: list[dict]
    matching_rows: int  # rows of the selected statuses (and table)
    counts: dict[str, int]  # all rows per status (of the selected table)
    tables: tuple[str, ...]


class Warehouse:
    """The runs of the configured pipelines under one warehouse folder (local or ``s3a://bucket/prefix``)."""

    def __init__(self, root: str | Path | Location, pipelines: dict[str, str]):
        problem = unsupported_scheme(str(root))
        if problem:
            raise NotFound(f"the view cannot read the warehouse {problem}")
        location = Location(root)
        # A local warehouse is resolved: run_file compares resolved paths to refuse symlinks that lead out of it.
        self.root: Path | Location = Path(str(location)).resolve() if location.is_local else location
        self.location = Location(self.root)
        self.pipelines = dict(pipelines)  # name -> format

    @classmethod
    def from_config(cls, config) -> Warehouse:
        """From a ``cdcreplay.config.LoadedConfig``."""
        return cls(config.warehouse, {p.name: p.format for p in config.project.pipelines})

    # --- runs ------------------------------------------------------------------------------------------------------

    def run_dir(self, pipeline: str, run_id: str) -> Location:
        if pipeline not in self.pipelines:
            raise NotFound(f"pipeline {pipeline!r} is not in the config; configured: {', '.join(self.pipelines)}")
        if not RUN_FOLDER_NAME.match(run_id):
            raise NotFound(f"{run_id!r} is not a run id of this warehouse")
        folder = self.location / pipeline / "runs" / run_id
        if not (folder / SUMMARY_FILE).is_file():
            raise NotFound(f"pipeline {pipeline} has no run {run_id}")
        return folder

    def run(self, pipeline: str, run_id: str) -> RunInfo:
        folder = self.run_dir(pipeline, run_id)
        return _run_info(self.pipelines[pipeline], folder)

    def recent_runs(self, pipeline: str, limit: int = 10) -> list[RunInfo]:
        """The pipeline's newest runs first (by reconciliation time, else summary time)."""
        if pipeline not in self.pipelines:
            raise NotFound(f"pipeline {pipeline!r} is not in the config")
        runs_dir = self.location / pipeline / "runs"
        folders = [p for p in runs_dir.iterdir() if RUN_FOLDER_NAME.match(p.name) and (p / SUMMARY_FILE).is_file()]
        # Newest summaries first, so that only `limit` summaries are parsed however many runs there are.
        folders.sort(key=lambda p: (p / SUMMARY_FILE).modified_at(), reverse=True)
        runs = [_run_info(self.pipelines[pipeline], folder) for folder in folders[:limit]]
        oldest = datetime.min.replace(tzinfo=UTC)
        return sorted(runs, key=lambda r: (r.time or oldest, r.run_id), reverse=True)

    def runs_of_airflow_run(self, airflow_run_id: str) -> list[RunInfo]:
        """Every configured pipeline's run written by one Airflow DAG run (its folder is the sanitized run id)."""
        from cdcreplay.run_spec import safe_run_id

        try:
            run_id = safe_run_id(airflow_run_id)
        except ValueError:
            return []
        found = []
        for pipeline in self.pipelines:
            try:
                found.append(self.run(pipeline, run_id))
            except NotFound:
                continue
        return found

    # --- files -----------------------------------------------------------------------------------------------------

    def run_file(self, pipeline: str, run_id: str, relative: str) -> Location:
        """An existing file inside the run folder; refuses any path that leads out of it."""
        folder = self.run_dir(pipeline, run_id)
        path = PurePosixPath(relative)
        if not relative or path.is_absolute() or ".." in path.parts or "\\" in relative or "\x00" in relative:
            raise Refused(f"refused {relative!r}: only files inside the run folder are served")
        # Joined from the normalized parts: an S3 key with "//" or "/./" in it would name another object.
        target = folder / "/".join(path.parts)
        if target.is_local:  # only a local disk has symlinks: where the file really is must be inside the run
            resolved = Path(target).resolve()
            if not resolved.is_relative_to(Path(folder).resolve()) or not resolved.is_relative_to(self.root):
                raise Refused(f"refused {relative!r}: it resolves outside the run folder")
            target = Location(resolved)
        if not target.is_file():
            raise NotFound(f"run {run_id} of {pipeline} has no file {relative}")
        return target

    def manifest(self, pipeline: str, run_id: str) -> dict:
        return json.loads(self.run_file(pipeline, run_id, RUN_FILES["manifest"]).read_text(encoding="utf-8"))

    def suite(self, pipeline: str, run_id: str) -> dict | None:
        """The ``reconciliation_diff`` suite's results (from metrics.json), None when the run has none."""
        try:
            metrics = _read_json(self.run_file(pipeline, run_id, RUN_FILES["metrics"]))
        except NotFound:
            return None
        return metrics.get("suite") or None

    def diff(
        self,
        pipeline: str,
        run_id: str,
        statuses: tuple[str, ...] | list[str] = DEFAULT_DIFF_STATUSES,
        table_id: str | None = None,
        limit: int = 200,
    ) -> DiffPage:
        """Up to ``limit`` diff rows of the given statuses (and table), sorted by table, epoch, status and key."""
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        unknown = [s for s in statuses if s not in STATUSES]
        if unknown:
            raise Refused(f"unknown diff status {unknown[0]!r}; use one of {', '.join(STATUSES)}")
        limit = max(1, min(int(limit), MAX_DIFF_ROWS))
        folder = self.run_dir(pipeline, run_id) / RUN_FILES["diff"]
        if not folder.is_dir():
            raise NotFound(f"run {run_id} of {pipeline} has no diff table (it was not reconciled)")
        # Spark's _SUCCESS and .crc files are skipped by the dataset's default ignore prefixes.
        filesystem, path = folder.arrow_filesystem()
        dataset = ds.dataset(path, filesystem=filesystem, format="parquet")
        in_table = pc.field("table_id") == table_id if table_id else None
        columns = dataset.to_table(columns=["table_id", "status"], filter=in_table)
        counts = {status: 0 for status in STATUSES}
        for row in columns.group_by("status").aggregate([("status", "count")]).to_pylist():
            counts[row["status"]] = row["status_count"]
        tables = dataset.to_table(columns=["table_id"]).column("table_id").unique().to_pylist()
        chosen = pc.field("status").isin(list(statuses))
        selected = chosen if in_table is None else (chosen & in_table)
        # Rows of failing statuses are few; a run's matches can be many: only the first `limit` are read.
        head = dataset.scanner(filter=selected).head(limit).to_pylist()
        order = {status: i for i, status in enumerate(STATUSES)}
        head.sort(key=lambda r: (r["table_id"] or "", r["epoch_no"] or 0, order.get(r["status"], 99), r["key"] or ""))
        return DiffPage(
            statuses=tuple(statuses),
            table_id=table_id,
            rows=head,
            matching_rows=sum(counts[s] for s in statuses),
            counts=counts,
            tables=tuple(sorted(t for t in tables if t is not None)),
        )


def _read_json(path: Location) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def table_results(epochs: list[dict]) -> tuple[TableResult, ...]:
    """Per table: the counts of its reconciled epochs added up; fail if any epoch failed."""
    by_table: dict[str, list[dict]] = {}
    for epoch in epochs:
        by_table.setdefault(epoch.get("table_id") or "", []).append(epoch)
    results = []
    for table_id, rows in sorted(by_table.items()):
        reconciled = [r for r in rows if r.get("kind") != "baseline" and r.get("verdict") != "baseline"]
        verdicts = {r.get("verdict") for r in reconciled}
        verdict = "fail" if "fail" in verdicts else "pass" if reconciled else "baseline"
        results.append(
            TableResult(
                table_id=table_id,
                verdict=verdict,
                reconciled_epochs=len(reconciled),
                baseline_epochs=len(rows) - len(reconciled),
                snapshot_rows=sum(int(r.get("snapshot_rows") or 0) for r in rows),
                counts={status: sum(int(r.get(status) or 0) for r in reconciled) for status in STATUSES},
            )
        )
    return tuple(results)


def _run_info(fmt: str, folder: Location) -> RunInfo:
    summary_file = folder / SUMMARY_FILE
    # Where a summary lacks its names (a file cut short, an early release), the folders say them.
    named = {"pipeline": folder.parent.parent.name, "format": fmt, "run_id": folder.name}
    summary = RunSummary.from_json({**named, **_read_json(summary_file)})
    reconciliation = summary.reconciliation
    decoded = summary.decoded or {}
    if summary.dry_run:
        verdict = "dry run"
    elif reconciliation is not None:
        verdict = str(reconciliation.verdict or "not reconciled")
    else:
        verdict = "not reconciled"
    time = _parse_time(reconciliation.generated_at if reconciliation else None)
    if time is None:
        time = datetime.fromtimestamp(summary_file.modified_at(), UTC)
    headline = str((reconciliation.headline or reconciliation.reason or "") if reconciliation else "")
    # The headline names the diff's absolute path on the worker; the view links to it instead.
    headline = re.sub(r"\s*Diff: \S+$", "", headline)
    epochs = tuple(reconciliation.tables if reconciliation else ())
    files = frozenset(name for name, relative in RUN_FILES.items() if (folder / relative).exists())
    docs = folder / RECONCILE_DATA_DOCS
    validations = [r for _, r in (docs / "validations").files() if r.endswith(".html")] if "data_docs" in files else []
    data_docs_page = f"validations/{validations[-1]}" if validations else None
    if data_docs_page is None and "data_docs" in files:
        data_docs_page = "index.html"
    return RunInfo(
        pipeline=summary.pipeline,
        format=summary.format,
        run_id=folder.name,
        time=time,
        verdict=verdict,
        headline=headline,
        records_read=int(summary.records_read or 0),
        quarantined=int(decoded.get("quarantined") or 0),
        quarantine_by_reason=dict(sorted((decoded.get("quarantine_by_reason") or {}).items())),
        tables=table_results(list(epochs)),
        files=files,
        data_docs_page=data_docs_page,
        epochs=epochs,
        failed_expectations=tuple(reconciliation.failed_expectations if reconciliation else ()),
        summary=summary,
    )
