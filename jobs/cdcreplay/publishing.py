"""The end of a run: audit the tables it typed, publish them as one version, vacuum what no kept version reads, or
roll back what it committed when it may not publish.

Readers see a new version only when ``warehouse.publish`` replaces the pointer, after every commit and the audit. A
run that fails before leaves commits no pointer names; they are rolled back before the next run builds on the tables
(and at once when the audit fails), so every Delta reader's newest commit is again the published one.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from cdcreplay import delta_tables, quality, warehouse
from cdcreplay.contracts import AUDIT_DATA_DOCS, MANIFEST_FILE, decoded_kind_folder
from cdcreplay.formats.common import KIND_CHANGE
from cdcreplay.storage import Location, local_folder

log = logging.getLogger(__name__)


class QualityGateError(RuntimeError):
    """A table of the new version failed its latest_state suite: nothing was published."""


def audit_tables(
    spark: SparkSession, paths, versions: dict[str, int], layouts: dict, rows: dict[str, int], run_dir: Location
) -> dict:
    """Run the latest_state suite (key columns not null, unique) on the tables this run typed (``layouts``), as of
    the Delta ``versions`` it committed, of ``rows`` rows each."""
    data_docs = run_dir / AUDIT_DATA_DOCS
    results = {}
    if layouts:
        with local_folder(data_docs) as docs_folder:  # GX writes its site to local files
            runner = quality.SuiteRunner(data_docs_dir=docs_folder)
            tables = sorted(layouts)
            validations = [
                quality.latest_state_validation(
                    delta_tables.read_version(spark, str(paths.table_dir(table_id)), versions[table_id]),
                    list(layouts[table_id].key_columns),
                    table_id=table_id,
                    rows=rows.get(table_id),
                )
                for table_id in tables
            ]
            for table_id, outcome in zip(tables, runner.validate_all(validations), strict=True):
                results[table_id] = {"success": outcome.success, "failed": outcome.failed}
            runner.build_data_docs()
    failed = {table_id: r["failed"] for table_id, r in results.items() if not r["success"]}
    if failed:
        problems = "; ".join(f"{table_id}: {', '.join(f)}" for table_id, f in failed.items())
        raise QualityGateError(
            f"suite {quality.SUITE_LATEST_STATE} failed, nothing was published and the previous version stays: "
            f"{problems}. "
            f"Data Docs: {data_docs / 'index.html'}"
        )
    index = str(data_docs / "index.html") if results else None  # no table typed, none audited: no site
    return {"suite": quality.SUITE_LATEST_STATE, "tables": results, "data_docs_path": index}


def roll_back_unpublished(
    spark: SparkSession, paths: warehouse.PipelinePaths, published: dict | None, new_tables: set[str] = frozenset()
) -> None:
    """Undo what a run committed without publishing it: each Delta table of the pipeline goes back to the version
    ``published`` (the pointer; None before the first publish) names, and ``new_tables`` it does not name are
    removed. A run does this before it builds on the tables (a run that died after committing left commits no
    pointer names) and when its audit fails."""
    if published is not None:
        named = {paths.state_dir: published["state_version"]}
        named.update({paths.table_dir(t): info["delta_version"] for t, info in published["tables"].items()})
        for path, version in named.items():
            if version is not None and delta_tables.has_commits_after(path, version):
                delta_tables.roll_back_to(spark, str(path), version)
    for table_id in new_tables - set(published["tables"] if published else ()):
        paths.table_dir(table_id).remove_tree()


def vacuum(spark: SparkSession, paths: warehouse.PipelinePaths, pointer: dict, committed: set[str]) -> None:
    """Drop the files of versions the pointer no longer keeps, in the state and the tables this run committed (a
    table this run did not touch has no newer version that replaced its files), and the unkept pattern files."""
    oldest = warehouse.oldest_kept_versions(pointer)
    folders = {warehouse.STATE_FOLDER: paths.state_dir, **{t: paths.table_dir(t) for t in committed}}
    for name, folder in folders.items():
        if oldest.get(name):  # from version 0 on: the table's every version is kept
            delta_tables.vacuum_older_than(spark, str(folder), oldest[name])
    warehouse.remove_unkept_patterns(paths, pointer)


def remove_old_changelogs(paths: warehouse.PipelinePaths, keep: int, this_run: str) -> list[str]:
    """Keep the decoded changelog of the ``keep`` newest runs that have one, this run included, and remove the
    others' (newest: the later manifest, which a run writes once it has read its records); the ids of the runs
    whose changelog went. Runs without a changelog (dry runs, empty intervals, ones removed before) do not count.

    The changelog is the bulk of a run's folder (every row change the run decoded) and the published state no
    longer needs it: compaction merged it. What stays is what a person reads later: the summary and manifest, the
    quarantine (bad records are never dropped), the control records and the reports. A reconciliation of such a
    run says its changelog is gone, and ``cdcreplay explain`` decodes the run's records again from the archive."""
    others = []
    for run in paths.runs_dir.iterdir():
        changelog, manifest = run / decoded_kind_folder(KIND_CHANGE), run / MANIFEST_FILE
        if run.name != this_run and changelog.is_dir() and manifest.is_file():
            others.append((manifest.modified_at(), run.name, changelog))
    removed = []
    for _, run_id, changelog in sorted(others, reverse=True)[keep - 1 :]:  # run ids are unique: no tie reaches a path
        changelog.remove_tree()
        removed.append(run_id)
    if removed:
        log.info("removed the decoded changelog of %d older run(s) (keep_decoded_runs: %d)", len(removed), keep)
    return sorted(removed)
