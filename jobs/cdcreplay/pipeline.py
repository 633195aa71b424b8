"""One pipeline run: read the archive slice, decode, compact onto the previous state, publish, account.

Storage is touched only here (and in warehouse.py); every step in between is DataFrame -> DataFrame.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay import archive, delta_tables, progress, quality, warehouse
from cdcreplay.compaction import changed_keys
from cdcreplay.config import ConfigError, LoadedConfig, PipelineConfig
from cdcreplay.formats import REGISTRY, decoder_module
from cdcreplay.formats.common import DECODED_DDL, KIND_CHANGE, KIND_CONTROL, KIND_QUARANTINE
from cdcreplay.formats.native_json import write_decoded
from cdcreplay.run_spec import RunSpec
from cdcreplay.schema import CHANGELOG_COLUMNS, CONTROL_NOTE
from cdcreplay.spark import vectorized_parquet_reads
from cdcreplay.state_store import (
    STATE_PARTITION,
    commit_state,
    read_patterns,
    read_state,
    save_patterns,
    state_ref,
    table_state,
)
from cdcreplay.storage import Location, local_folder
from cdcreplay.tables import (
    PUBLISHED,
    TYPED_TABLE_FORMAT,
    TableLayout,
    layouts_of_patterns,
    state_patterns,
    type_conflicts,
    typed_changes,
    typed_table,
)


class AccountingError(RuntimeError):
    """Records read and records accounted for (changelog + control + quarantine) disagree."""


class QualityGateError(RuntimeError):
    """A table of the new version failed its latest_state suite: nothing was published."""


def selection_for(pipeline: PipelineConfig, spec: RunSpec) -> archive.Selection:
    offsets = tuple(r for r in spec.offsets if not pipeline.topics or r.topic in pipeline.topics)
    return archive.Selection(
        topics=tuple(pipeline.topics or ()), start=spec.start_time, end=spec.end_time, offsets=offsets
    )


def decoded_path(paths: warehouse.PipelinePaths, run_id: str, kind: str) -> str:
    return str(paths.run_dir(run_id) / "decoded" / f"record_kind={kind}")


def run_pipeline(spark: SparkSession, config: LoadedConfig, pipeline: PipelineConfig, spec: RunSpec) -> dict:
    """Run one pipeline for ``spec``; return (and write) its summary."""
    started = time.time()
    if not spec.dry_run:
        quality.import_in_background()  # the audit stage needs GX: import it while Spark reads and decodes
    paths = warehouse.PipelinePaths(config.warehouse, pipeline.name)
    # The published version this run builds on (none on a full rebuild).
    current = warehouse.read_current(paths)
    if current is not None and warehouse.is_legacy(current) and not spec.full_rebuild and not spec.dry_run:
        raise ConfigError(
            f"pipeline {pipeline.name}: {paths.root} was published by an earlier release (Parquet folders under "
            "versions/); run it once with --full-rebuild to rebuild its tables as Delta tables"
        )
    run_dir = paths.run_dir(spec.run_id)
    run_dir.mkdir()
    timings: dict[str, float] = {}
    stages = progress.StageProgress(pipeline.name, spark)

    def lap(stage: str, since: float, done: int | None = None, total: int | None = None, unit: str = "") -> float:
        """End a stage: its time in the summary, a progress line with what it got through in the log."""
        now = time.time()
        timings[stage] = round(now - since, 3)
        stages.done(stage, now - since, done, total, unit)
        return now

    # -- read: which files, which records, and a manifest of both ------------------------------------------------
    t = time.time()
    files, unreadable = archive.readable_files(
        archive.archive_files(config.archive_path(pipeline), pipeline.archive.layout),
        pipeline.archive.layout,
        pipeline.archive.skip_unreadable_files,
    )
    raw = archive.read_archive(spark, files, pipeline.archive.layout)
    selection = selection_for(pipeline, spec)
    if selection.offsets:
        topics_only = archive.select_records(raw, archive.Selection(topics=selection.topics))
        archive.check_offset_ranges(selection.offsets, archive.partition_extents(topics_only))
    selected = archive.select_records(raw, selection)
    extents = archive.partition_extents(selected)
    gaps = archive.offset_gaps(selected) if any(e["missing_offsets"] for e in extents) else []
    manifest = archive.build_manifest(files, extents, gaps, selection, unreadable)
    warehouse.write_json_atomically(run_dir / "manifest.json", manifest)
    t = lap("read", t, manifest["records"], unit=f"records selected from {len(files)} files")
    if spec.dry_run or manifest["distinct_records"] == 0:
        # Nothing to decode (a dry run, or an interval with no records): the published state stays as it is.
        summary = _summary(pipeline, spec, paths, manifest, timings, started, dry_run=spec.dry_run)
        summary["version"] = current["version"] if current else None
        summary["tables"] = {}
        warehouse.write_json_atomically(run_dir / "summary.json", summary)
        return summary

    # -- decode: one pass over the archive, routed to changelog / control / quarantine -----------------------------
    if manifest["duplicates"]:
        selected = archive.deduplicate(selected)
    selected = archive.spread_over_cores(selected, spark.sparkContext.defaultParallelism)
    # The published state this run builds on, as of its published version. A decoder whose changes are patches onto
    # the stored row (DRS DDS `$set` into embedded documents) is registered with `reads_state` and reads it too.
    building_on = current if current is not None and not warehouse.is_legacy(current) else None
    if building_on is not None:
        _roll_back_unpublished(spark, paths, building_on)
    base_state = None
    if building_on is not None and not spec.full_rebuild:
        base_state = read_state(spark, paths.state_dir, building_on["state_version"])
    keep = (F.col("record_kind") != KIND_CHANGE) | F.col("table_id").isin(list(spec.tables)) if spec.tables else None
    module = decoder_module(pipeline.format)
    (run_dir / "decoded").remove_tree()  # a re-run of this run id decodes afresh
    native = None
    if hasattr(module, "decode_natively") and module.reads_natively(pipeline, manifest["distinct_records"]):
        native = module.decode_natively(selected, pipeline, manifest["distinct_records"])
    if native is not None:
        # Spark's JSON reader decodes what it can vouch for; the rest is read back and decoded in Python.
        write_decoded(
            native, selected, lambda rest: module.decode_in_python(rest, pipeline), str(run_dir / "decoded"), keep
        )
    else:
        if REGISTRY[pipeline.format].reads_state:
            decoded = module.decode(selected, pipeline, base_state=base_state)
        else:
            decoded = module.decode(selected, pipeline)
        if keep is not None:
            decoded = decoded.where(keep)
        decoded.write.mode("overwrite").partitionBy("record_kind").parquet(str(run_dir / "decoded"))
    kinds = _decoded_counts(spark, paths, spec.run_id)
    _check_accounting(kinds, manifest, spec)
    t = lap("decode", t, kinds["source_records"], manifest["distinct_records"], "records decoded")

    # -- compact onto the previous published state (base_state, read above), unless this is a full rebuild ---------
    # Compaction and typing are Spark alone (no Python reads their rows), so they may use the vectorized Parquet
    # reader: about twice as fast over the state's map columns (see cdcreplay.spark).
    with vectorized_parquet_reads(spark):
        changes = _read_decoded(spark, paths, spec.run_id, KIND_CHANGE, changelog_only=True)
        version = warehouse.new_version(spec.run_id)
        base_patterns = None
        if base_state is not None:
            base_patterns = read_patterns(spark, paths.patterns_file(building_on["state_version"]))
        committed = commit_state(
            paths.state_dir,
            base_state,
            base_patterns,
            changes,
            kinds["changelog_rows"],
            pipeline.tombstone_retention_days,
        )
        partitioned_state = read_state(spark, paths.state_dir, committed.version, keep_partition=True)
        state = partitioned_state.drop(STATE_PARTITION)
        written = "changed keys merged into the state" if committed.merged else "state written whole"
        t = lap("compact", t, kinds["changelog_rows"], unit=f"changes compacted, {written}")

        # -- typed tables, audited, then one atomic switch of the published pointer --------------------------------
        # A table this run did not change keeps its published Delta version (no commit) and its audit: a nightly
        # run costs the tables it touched, not every table of the database.
        # What the tables' columns and counts need of the whole state: updated from the merged rows where it can be
        # (see tables.changed_patterns), and kept with the state version for the next night.
        patterns = committed.patterns if committed.patterns is not None else state_patterns(state)
        layouts, counts = layouts_of_patterns(save_patterns(patterns, paths.patterns_file(committed.version)))
        unchanged = unchanged_tables(paths, current if base_state is not None else None, layouts, kinds)
        retyped = {table_id: layout for table_id, layout in layouts.items() if table_id not in unchanged}
        table_versions = {table_id: info["delta_version"] for table_id, info in unchanged.items()}
        merged_tables = _typed_merges(current if committed.merged else None, retyped, counts, kinds)
        night_keys = F.broadcast(changed_keys(changes)) if merged_tables else None

        def write_typed(table_id: str) -> None:
            rows = table_state(partitioned_state, table_id)
            path = str(paths.table_dir(table_id))
            if table_id in merged_tables:
                changed = typed_changes(rows.join(night_keys, ["table_id", "key"], "left_semi"), retyped[table_id])
                on = tuple(retyped[table_id].key_columns)
                table_versions[table_id] = delta_tables.merge_flagged(changed, path, on, PUBLISHED)
            else:
                table_versions[table_id] = delta_tables.write_whole(typed_table(rows, retyped[table_id]), path)

        # One Spark job per table: with many small tables the time goes to the driver's planning and scheduling of
        # each job, so a few run at once (Spark runs concurrent jobs from several threads; the executors' cores are
        # shared).
        with ThreadPoolExecutor(max_workers=TYPED_WRITES_AT_ONCE) as pool:
            for done in [pool.submit(write_typed, table_id) for table_id in sorted(retyped)]:
                done.result()  # the first failure ends the run, as one written in sequence would
        conflicts = _write_type_conflicts(spark, state, retyped, run_dir / TYPE_CONFLICTS_FOLDER)
        conflicts.update({table_id: info.get("type_conflicts", 0) for table_id, info in unchanged.items()})
        for table_id in sorted(merged_tables):
            # A merge matches typed keys: two keys of the state that type to one value (text "01" and "1" in an int
            # column) would be one row of the table. Such a table is written whole, and its audit names the keys.
            expected = counts[table_id].rows - conflicts.get(table_id, 0)
            path = str(paths.table_dir(table_id))
            if delta_tables.row_count(spark, path, table_versions[table_id]) != expected:
                typed = typed_table(table_state(partitioned_state, table_id), retyped[table_id])
                table_versions[table_id] = delta_tables.write_whole(typed, path)
        tables: dict[str, dict] = {}
        for table_id, layout in layouts.items():
            tables[table_id] = {
                "rows": counts[table_id].rows - conflicts.get(table_id, 0),
                "tombstones": counts[table_id].tombstones,
                "type_conflicts": conflicts.get(table_id, 0),
                "key_columns": list(layout.key_columns),
                "columns": [list(c) for c in layout.columns],
                "changes_this_run": kinds["changes_by_table"].get(table_id, 0),
                "typed_in_version": unchanged[table_id]["typed_in_version"] if table_id in unchanged else version,
                "typed_format": TYPED_TABLE_FORMAT,
            }
        for table_id, row in counts.items():  # tables whose every key is deleted still exist, empty
            if table_id not in tables:
                tables[table_id] = {"rows": 0, "tombstones": row.tombstones, "key_columns": [], "columns": []}
                table_versions[table_id] = _emptied(spark, paths, table_id)
        unit = f"tables typed, {len(unchanged)} unchanged tables kept" if unchanged else "tables typed"
        t = lap("type", t, len(retyped), unit=unit)

    # -- audit before publish: a table that fails its suite is never published; readers keep the previous version --
    try:
        audit = _audit_tables(spark, paths, table_versions, retyped, {t: i["rows"] for t, i in tables.items()}, run_dir)
    except QualityGateError:
        _roll_back_unpublished(spark, paths, building_on, new_tables=set(retyped))
        raise
    audit["unchanged_tables"] = sorted(unchanged)  # passed the suite when they were typed, in typed_in_version
    t = lap("audit", t, sum(r["success"] for r in audit["tables"].values()), len(retyped), "tables passed")
    entry = warehouse.published_entry(version, spec.run_id, committed.version, table_versions)
    built_on = building_on["history"][0] if base_state is not None else None
    pointer = warehouse.publish(paths, entry, tables, config.project.keep_versions, built_on)
    _vacuum(spark, paths, pointer, committed=set(retyped))
    lap("publish", t, len(pointer["tables"]), unit="tables published")

    summary = _summary(pipeline, spec, paths, manifest, timings, started, dry_run=False)
    summary.update(
        {
            "version": pointer["version"],
            # The state versions this run read and wrote, for the reconciliation (see state_store.state_ref).
            "base_state": state_ref(
                paths.state_dir, building_on["state_version"], paths.patterns_file(building_on["state_version"])
            )
            if base_state is not None
            else None,
            "state": state_ref(paths.state_dir, committed.version, paths.patterns_file(committed.version)),
            "state_merged": committed.merged,  # the changed keys merged (else written whole), see state_store
            "layouts_from_merge": committed.patterns is not None,  # not from an aggregation of the whole state
            "tables": {  # the folder each table's Delta version is in
                tid: {
                    **info,
                    "path": str(paths.root / pointer["tables"][tid]["path"]),
                    "delta_version": pointer["tables"][tid]["delta_version"],
                }
                for tid, info in tables.items()
            },
            "decoded": kinds,
            "quality": audit,
            "changelog_path": decoded_path(paths, spec.run_id, KIND_CHANGE),
            "quarantine_path": decoded_path(paths, spec.run_id, KIND_QUARANTINE),
            "type_conflicts": sum(conflicts.values()),
            "type_conflicts_path": str(run_dir / TYPE_CONFLICTS_FOLDER),
        }
    )
    warehouse.write_json_atomically(run_dir / "summary.json", summary)
    return summary


TYPE_CONFLICTS_FOLDER = "type_conflicts"
TYPED_WRITES_AT_ONCE = 4


def _roll_back_unpublished(
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


# A typed table is merged with its changed keys' rows, instead of written whole, from this many rows on, when a night
# changes at most TYPED_MERGE_MAX_SHARE of them: below, a rewrite costs less than a merge's join (a small table's
# merge costs ~1.5 s of Delta's own work against ~0.4 s for its rewrite).
TYPED_MERGE_MIN_ROWS = 100_000
TYPED_MERGE_MAX_SHARE = 0.5


def _typed_merges(published: dict | None, retyped: dict[str, TableLayout], counts: dict, kinds: dict) -> set[str]:
    """The tables a run merges its changed keys into (see TYPED_MERGE_MIN_ROWS): published as typed before, with
    the columns, key and typed format they have now. ``published`` is None when the run wrote the state whole."""
    if published is None:
        return set()
    merged = set()
    for table_id, layout in retyped.items():
        info = published["tables"].get(table_id)
        if (
            _typed_alike(info, layout)
            and info.get("delta_version") is not None
            and counts[table_id].rows >= TYPED_MERGE_MIN_ROWS
            and kinds["changes_by_table"].get(table_id, 0) <= counts[table_id].rows * TYPED_MERGE_MAX_SHARE
        ):
            merged.add(table_id)
    return merged


def _emptied(spark: SparkSession, paths: warehouse.PipelinePaths, table_id: str) -> int | None:
    """A table whose every key is now deleted: its typed table emptied (its columns kept); its version, or None when
    it was never typed."""
    path = str(paths.table_dir(table_id))
    if not delta_tables.is_delta_table(spark, path):
        return None
    stored = delta_tables.read_version(spark, path)
    if stored.isEmpty():
        return delta_tables.latest_version(spark, path)
    return delta_tables.write_whole(stored.limit(0), path)


def _vacuum(spark: SparkSession, paths: warehouse.PipelinePaths, pointer: dict, committed: set[str]) -> None:
    """Drop the files of versions the pointer no longer keeps, in the state and the tables this run committed (a
    table this run did not touch has no newer version that replaced its files), and the unkept pattern files."""
    oldest = warehouse.oldest_kept_versions(pointer)
    folders = {warehouse.STATE_FOLDER: paths.state_dir, **{t: paths.table_dir(t) for t in committed}}
    for name, folder in folders.items():
        if oldest.get(name):  # from version 0 on: the table's every version is kept
            delta_tables.vacuum_older_than(spark, str(folder), oldest[name])
    warehouse.remove_unkept_patterns(paths, pointer)


def unchanged_tables(
    paths: warehouse.PipelinePaths, current: dict | None, layouts: dict[str, TableLayout], kinds: dict
) -> dict[str, dict]:
    """The tables a run can publish as the previous version has them: their published info, by table id.

    A table qualifies when this run applied no change to it (no row change, no truncate), so its state rows are the
    ones the previous version was typed from, and when its columns, key and typed format are the ones the previous
    version recorded (a column type declared anew, or a release that types differently, types it again). A tombstone
    the retention purges changes only the state, never the typed rows. ``current`` is None on a full rebuild.
    """
    if current is None:
        return {}
    unchanged = {}
    for table_id, layout in layouts.items():
        info = current["tables"].get(table_id)
        if (
            not _typed_alike(info, layout)
            or kinds["changes_by_table"].get(table_id)
            or not (paths.root / info["path"]).is_dir()
        ):
            continue
        unchanged[table_id] = info
    return unchanged


def _typed_alike(info: dict | None, layout: TableLayout) -> bool:
    """Whether a table published as ``info`` (the pointer's entry) was typed with ``layout``'s columns and key, by a
    release that types as this one does."""
    return (
        info is not None
        and info.get("typed_format") == TYPED_TABLE_FORMAT
        and info.get("key_columns") == list(layout.key_columns)
        and info.get("columns") == [list(column) for column in layout.columns]
    )


def _write_type_conflicts(spark: SparkSession, state: DataFrame, layouts: dict, folder: Location) -> dict[str, int]:
    """Write the live rows held back from the typed tables (``tables.type_conflicts``); their count per table.

    They stay in the state: a later change of the key replaces them, and the next run publishes that row.
    """
    if not layouts:
        return {}
    type_conflicts(state, layouts).write.mode("overwrite").parquet(str(folder))
    written = spark.read.parquet(str(folder))
    return {row.table_id: row["count"] for row in written.groupBy("table_id").count().collect()}


def _audit_tables(
    spark: SparkSession, paths, versions: dict[str, int], layouts: dict, rows: dict[str, int], run_dir: Location
) -> dict:
    """Run the latest_state suite (key columns not null, unique) on the tables this run typed (``layouts``), as of
    the Delta ``versions`` it committed, of ``rows`` rows each."""
    data_docs = run_dir / "quality" / "data_docs"
    results = {}
    if layouts:
        with local_folder(data_docs) as docs_folder:  # GX writes its site to local files
            runner = quality.SuiteRunner(data_docs_dir=docs_folder)
            for table_id, layout in sorted(layouts.items()):
                frame = delta_tables.read_version(spark, str(paths.table_dir(table_id)), versions[table_id])
                outcome = quality.validate_latest_state(
                    frame, list(layout.key_columns), table_id=table_id, runner=runner, rows=rows.get(table_id)
                )
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


def _read_decoded(spark: SparkSession, paths, run_id: str, kind: str, changelog_only: bool = False) -> DataFrame:
    path = decoded_path(paths, run_id, kind)
    if Location(path).is_dir():
        frame = spark.read.parquet(path)
    else:  # no record of this kind in the run: an empty frame of the same shape
        frame = spark.createDataFrame([], DECODED_DDL).drop("record_kind")
    return frame.select(*CHANGELOG_COLUMNS) if changelog_only else frame


def _decoded_counts(spark: SparkSession, paths, run_id: str) -> dict:
    decoded = spark.read.parquet(str(paths.run_dir(run_id) / "decoded"))
    # Notes (how a decoder read records the config left open) are counted per text for the run summary.
    note = F.when(F.col("control_kind") == CONTROL_NOTE, F.col("detail")).alias("note")
    per_kind = (
        decoded.groupBy("record_kind", "reason", "control_kind", "table_id", note)
        .agg(F.count(F.lit(1)).alias("rows"))
        .collect()
    )
    # Each distinct record is accounted for once: quarantined when any of its rows is (a multi-row message with one
    # bad row still applies its good rows), else changelog when it has a row change, else control.
    per_record = decoded.groupBy("topic", "partition", "offset").agg(
        *[
            F.max((F.col("record_kind") == kind).cast("int")).alias(name)
            for name, kind in (("quarantined", KIND_QUARANTINE), ("change", KIND_CHANGE), ("control", KIND_CONTROL))
        ]
    )
    changelog_only = (F.col("quarantined") == 0) & (F.col("change") == 1)
    control_only = (F.col("quarantined") == 0) & (F.col("change") == 0) & (F.col("control") == 1)
    per_partition = (
        per_record.groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("decoded_records"),
            F.sum(changelog_only.cast("int")).alias("changelog_records"),
            F.sum(control_only.cast("int")).alias("control_records"),
            F.sum("quarantined").alias("quarantined_records"),
        )
        .collect()
    )
    # What was read per partition, as the run's manifest recorded it before decoding.
    manifest = warehouse.read_json(paths.run_file(run_id, "manifest.json"))
    partitions: dict[str, dict[str, dict]] = {}
    empty = {"changelog_records": 0, "control_records": 0, "quarantined_records": 0}
    for extent in manifest["partitions"]:
        partitions.setdefault(extent["topic"], {})[str(extent["partition"])] = {
            "records_read": extent["records"],
            "distinct_records": extent["distinct_offsets"],
            **empty,
        }
    for row in per_partition:
        read = {"records_read": 0, "distinct_records": 0, **empty}
        counts_of = partitions.setdefault(row.topic, {}).setdefault(str(row.partition), read)
        counts_of.update({name: row[name] for name in empty})
    records = sum(row.decoded_records for row in per_partition)
    counts = {
        "source_records": records,
        "partitions": partitions,
        "changelog_rows": 0,
        "control_rows": 0,
        "quarantined": 0,
        "quarantine_by_reason": {},
        "control_by_kind": {},
        "changes_by_table": {},
        "notes": {},
    }
    for row in per_kind:
        if row.note is not None:
            counts["notes"][row.note] = counts["notes"].get(row.note, 0) + row.rows
        if row.record_kind == KIND_CHANGE:
            counts["changelog_rows"] += row.rows
            counts["changes_by_table"][row.table_id] = counts["changes_by_table"].get(row.table_id, 0) + row.rows
        elif row.record_kind == KIND_CONTROL:
            counts["control_rows"] += row.rows
            counts["control_by_kind"][row.control_kind] = counts["control_by_kind"].get(row.control_kind, 0) + row.rows
        elif row.record_kind == KIND_QUARANTINE:
            counts["quarantined"] += row.rows
            counts["quarantine_by_reason"][row.reason] = counts["quarantine_by_reason"].get(row.reason, 0) + row.rows
    return counts


def _check_accounting(kinds: dict, manifest: dict, spec: RunSpec) -> None:
    """Per topic partition, every distinct record read is accounted for exactly once, as a changelog, control or
    quarantined record: none vanished, none was invented."""
    if spec.tables:
        return  # records of other tables are left out on purpose
    problems = []
    for topic, partitions in sorted(kinds["partitions"].items()):
        for partition, c in sorted(partitions.items(), key=lambda item: int(item[0])):
            accounted = c["changelog_records"] + c["control_records"] + c["quarantined_records"]
            if accounted != c["distinct_records"]:
                problems.append(
                    f"topic {topic} partition {partition}: read {c['distinct_records']} distinct records but "
                    f"{accounted} are accounted for (changelog {c['changelog_records']}, control "
                    f"{c['control_records']}, quarantined {c['quarantined_records']})"
                )
    if problems or kinds["source_records"] != manifest["distinct_records"]:
        problems = problems or [
            f"read {manifest['distinct_records']} distinct records but decoded rows account for "
            f"{kinds['source_records']}"
        ]
        raise AccountingError(
            "records read and records accounted for disagree: "
            + "; ".join(problems)
            + ". Nothing was published. This is a bug in the decoder: please report it with the run's manifest"
        )


def _summary(pipeline, spec, paths, manifest, timings, started, dry_run: bool) -> dict:
    return {
        "pipeline": pipeline.name,
        "format": pipeline.format,
        "run_id": spec.run_id,
        "dry_run": dry_run,
        "full_rebuild": spec.full_rebuild,
        "records_read": manifest["records"],
        "distinct_records": manifest["distinct_records"],
        "duplicates": manifest["duplicates"],
        "missing_offsets": manifest["missing_offsets"],
        "manifest_path": str(paths.run_file(spec.run_id, "manifest.json")),
        "files": len(manifest["files"]),
        "unreadable_files": len(manifest["unreadable_files"]),
        "timings_s": timings,
        "elapsed_s": round(time.time() - started, 3),
    }


def run(spark: SparkSession, config: LoadedConfig, spec: RunSpec) -> list[dict]:
    """Every pipeline the spec names (all when it names none)."""
    names = spec.pipelines or tuple(p.name for p in config.project.pipelines)
    summaries = []
    for name in names:
        pipeline = config.project.pipeline(name)
        if spec.dry_run:  # reads nothing but the coordinates and writes only its manifest: no lock needed
            summaries.append(run_pipeline(spark, config, pipeline, spec))
            continue
        with warehouse.pipeline_lock(warehouse.PipelinePaths(config.warehouse, name), spec.run_id):
            summaries.append(run_pipeline(spark, config, pipeline, spec))
    return summaries


def summary_path(config: LoadedConfig, pipeline: str, run_id: str) -> Location:
    return warehouse.PipelinePaths(config.warehouse, pipeline).run_file(run_id, "summary.json")


def load_summary(config: LoadedConfig, pipeline: str, run_id: str) -> dict | None:
    try:
        return warehouse.read_json(summary_path(config, pipeline, run_id))
    except FileNotFoundError:
        return None
