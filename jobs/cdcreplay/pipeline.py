"""One pipeline run, as its stages: read, decode, compact, type, audit, publish.

``run_pipeline`` is the list of the stages, one function each (``read_stage`` ... ``publish_stage``), which share a
``PipelineRun`` (settings, folders, clock) and hand each other small results; it writes the run's summary. Each
stage's rules live with it: ``archive`` (read), the format's decoder and ``accounting`` (decode), ``state_store``
(compact), ``typed_tables`` (type), ``publishing`` (audit and publish). Every step in between is DataFrame ->
DataFrame.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay import archive, kafka_source, progress, publishing, quality, warehouse
from cdcreplay.accounting import AccountingError, check_accounting, decoded_counts
from cdcreplay.config import ConfigError, LoadedConfig, PipelineConfig
from cdcreplay.contracts import (
    DECODED_FOLDER,
    KAFKA_RECORDS_FOLDER,
    MANIFEST_FILE,
    SUMMARY_FILE,
    TYPE_CONFLICTS_FOLDER,
    RunSummary,
    decoded_kind_folder,
)
from cdcreplay.formats import decoder_module
from cdcreplay.formats.common import DECODED_DDL, KIND_CHANGE, KIND_QUARANTINE, write_by_kind
from cdcreplay.formats.wire.native_json import write_decoded
from cdcreplay.publishing import QualityGateError
from cdcreplay.run_spec import RunSpec
from cdcreplay.schema import CHANGELOG_COLUMNS
from cdcreplay.spark import vectorized_parquet_reads
from cdcreplay.state_store import StateCommit, commit_state, read_patterns, read_state, state_ref
from cdcreplay.storage import Location
from cdcreplay.typed_tables import TypedTables, type_tables

log = logging.getLogger(__name__)

__all__ = ["AccountingError", "QualityGateError", "load_summary", "run", "run_pipeline", "summary_path"]


def selection_for(pipeline: PipelineConfig, spec: RunSpec, resuming: bool = False) -> archive.Selection:
    """The records ``spec`` selects of the pipeline's topics; a resumed run (``resume_point``) reads on from where
    the state stopped, so its start and end do not apply."""
    offsets = spec.offsets_of(pipeline.topics)
    if resuming:
        return archive.Selection(topics=tuple(pipeline.topics or ()))
    return archive.Selection(
        topics=tuple(pipeline.topics or ()), start=spec.start_time, end=spec.end_time, offsets=offsets
    )


def resume_point(pipeline: PipelineConfig, spec: RunSpec, current: dict | None) -> dict | None:
    """Where a resumed run of a Kafka pipeline starts: the offsets its published state has read up to; None when the
    run is not resumed (or the state has no such record yet: its first run is bounded by its start/end)."""
    if pipeline.archive.layout != "kafka" or not spec.resume or spec.full_rebuild or spec.offsets or not current:
        return None
    return current.get(warehouse.KAFKA_READ_TO)


def read_to_after(pipeline: PipelineConfig, spec: RunSpec, current: dict | None, manifest: dict) -> dict | None:
    """How far the state this run publishes has read each partition of a Kafka pipeline (None for an archive). Only
    a run that continues the state's reading (resumed) or replaces it (full rebuild), for every table, moves it; a
    run of a chosen range or of some tables leaves it where it was."""
    if pipeline.archive.layout != "kafka":
        return None
    previous = current.get(warehouse.KAFKA_READ_TO) if current else None
    if spec.tables or not (spec.resume or spec.full_rebuild):
        return previous
    return kafka_source.read_to(None if spec.full_rebuild else previous, manifest["kafka"]["ranges"])


def remove_abandoned_copies(paths: warehouse.PipelinePaths, this_run: str) -> None:
    """Remove the broker records copy that another run of the pipeline left (killed before its decode stage ended,
    which removes it): this run holds the pipeline's lock, so no other run reads a copy now, and a retry of that run
    fetches its records afresh."""
    for run in paths.runs_dir.iterdir():
        copy = run / KAFKA_RECORDS_FOLDER
        if run.name != this_run and copy.is_dir():
            log.warning("removing %s, left by a run that ended before decoding its records", copy)
            copy.remove_tree()


def decoded_path(paths: warehouse.PipelinePaths, run_id: str, kind: str) -> str:
    return str(paths.run_dir(run_id) / decoded_kind_folder(kind))


class StageClock:
    """Each stage's time for the summary, and a progress line with what it got through for the log."""

    def __init__(self, pipeline: str, spark: SparkSession):
        self.timings: dict[str, float] = {}
        self._progress = progress.StageProgress(pipeline, spark)
        self._since = time.time()

    def lap(self, stage: str, done: int | None = None, total: int | None = None, unit: str = "") -> None:
        now = time.time()
        self.timings[stage] = round(now - self._since, 3)
        self._progress.done(stage, now - self._since, done, total, unit)
        self._since = now


@dataclass(frozen=True)
class PipelineRun:
    """What the stages of one run share: its settings, the pipeline's folders, the published pointer it builds on
    (None before the first publish), its own folder and its clock."""

    spark: SparkSession
    config: LoadedConfig
    pipeline: PipelineConfig
    spec: RunSpec
    paths: warehouse.PipelinePaths
    current: dict | None
    run_dir: Location
    clock: StageClock
    started: float


@dataclass(frozen=True)
class ReadSlice:
    """What the read stage found: the selected records and the manifest of them and their files."""

    selected: DataFrame
    manifest: dict
    staging: Location | None  # a Kafka pipeline's copy of the records it read, kept until they are decoded


@dataclass(frozen=True)
class BuildBase:
    """The published version a run builds on: ``published``, the pointer whose Delta versions the run's commits
    follow (and are rolled back to when it may not publish), None for the first publish; ``state``, its compacted
    state the run's changes are merged onto, None when the run writes the state whole (a full rebuild)."""

    published: dict | None
    state: DataFrame | None

    @property
    def merged_onto(self) -> dict | None:
        """The pointer whose state and tables the run changes in place (None: the run rebuilds them)."""
        return self.published if self.state is not None else None


def run_pipeline(spark: SparkSession, config: LoadedConfig, pipeline: PipelineConfig, spec: RunSpec) -> RunSummary:
    """Run one pipeline for ``spec``; return (and write) its summary."""
    run = start_run(spark, config, pipeline, spec)
    read = read_stage(run)
    if spec.dry_run or read.manifest["distinct_records"] == 0:
        return _written(run, unchanged_summary(run, read))
    base = build_base(run)
    kinds = decode_stage(run, read, base)
    # Compaction and typing are Spark alone (no Python reads their rows), so they may use the vectorized Parquet
    # reader: about twice as fast over the state's map columns (see cdcreplay.spark).
    with vectorized_parquet_reads(spark):
        committed = compact_stage(run, base, kinds)
        version, typed = type_stage(run, base, committed, kinds)
    audit = audit_stage(run, base, typed)
    pointer, removed = publish_stage(run, read, base, committed, version, typed)
    summary = _summary(run, read.manifest)
    _add_published(summary, run, base, pointer)
    _add_outcome(summary, run, kinds, committed, typed, audit, removed)
    return _written(run, summary)


def start_run(spark: SparkSession, config: LoadedConfig, pipeline: PipelineConfig, spec: RunSpec) -> PipelineRun:
    """The run's folder and clock; the published pointer it builds on, which must be one this release reads."""
    started = time.time()
    if not spec.dry_run:
        quality.import_in_background()  # the audit stage needs GX: import it while Spark reads and decodes
    paths = warehouse.PipelinePaths(config.warehouse, pipeline.name)
    current = warehouse.read_current(paths)  # the published version, which this run builds on
    if current is not None and warehouse.is_legacy(current) and not spec.full_rebuild and not spec.dry_run:
        raise ConfigError(
            f"pipeline {pipeline.name}: {paths.root} was published by an earlier release (Parquet folders under "
            "versions/); run it once with --full-rebuild to rebuild its tables as Delta tables"
        )
    run_dir = paths.run_dir(spec.run_id)
    run_dir.mkdir()
    return PipelineRun(
        spark, config, pipeline, spec, paths, current, run_dir, StageClock(pipeline.name, spark), started
    )


def read_stage(run: PipelineRun) -> ReadSlice:
    """Read: which files, which records, and a manifest of both, written to the run's folder. Records read from
    brokers are kept in the run's folder until decoded (a dry run only counts them)."""
    pipeline, spec = run.pipeline, run.spec
    staging = run.run_dir / KAFKA_RECORDS_FOLDER if pipeline.archive.layout == "kafka" and not spec.dry_run else None
    if staging is not None:
        remove_abandoned_copies(run.paths, spec.run_id)
    resume_from = resume_point(pipeline, spec, run.current)
    files, selected, manifest = read_slice(run.spark, run.config, pipeline, spec, resume_from, staging)
    warehouse.write_json_atomically(run.run_dir / MANIFEST_FILE, manifest)
    read_from = f"{len(files)} topics" if pipeline.archive.layout == "kafka" else f"{len(files)} files"
    run.clock.lap("read", manifest["records"], unit=f"records selected from {read_from}")
    return ReadSlice(selected, manifest, staging)


def unchanged_summary(run: PipelineRun, read: ReadSlice) -> RunSummary:
    """The summary of a run with nothing to decode (a dry run, or an interval with no records): the published state
    stays as it is, and a Kafka pipeline's copy of the records read is removed."""
    if read.staging is not None:
        read.staging.remove_tree()
    summary = _summary(run, read.manifest)
    summary.version = run.current["version"] if run.current else None
    return summary


def build_base(run: PipelineRun) -> BuildBase:
    """The published version this run builds on, after what a run that died before publishing committed is rolled
    back; its state as of its published version, unless the run is a full rebuild."""
    current = run.current
    published = current if current is not None and not warehouse.is_legacy(current) else None
    if published is not None:
        publishing.roll_back_unpublished(run.spark, run.paths, published)
    state = None
    if published is not None and not run.spec.full_rebuild:
        state = read_state(run.spark, run.paths.state_dir, published["state_version"])
    return BuildBase(published, state)


def decode_stage(run: PipelineRun, read: ReadSlice, base: BuildBase) -> dict:
    """Decode: one pass over the selected records, routed to changelog / control / quarantine (``decode``); the
    counts per kind, reason and table."""
    try:
        kinds = decode(
            run.spark, run.pipeline, run.spec, read.selected, read.manifest, base.state, run.run_dir / DECODED_FOLDER
        )
    finally:
        if read.staging is not None:
            read.staging.remove_tree()  # decoded (or failed, and a retry fetches afresh): nothing reads the copy now
    run.clock.lap("decode", kinds["source_records"], read.manifest["distinct_records"], "records decoded")
    return kinds


def compact_stage(run: PipelineRun, base: BuildBase, kinds: dict) -> StateCommit:
    """Compact onto the published state: the night's changed keys merged into it, or the state written whole."""
    changes = _read_decoded(run.spark, run.paths, run.spec.run_id, KIND_CHANGE, changelog_only=True)
    base_patterns = base_version = None
    if base.state is not None:
        base_version = base.published["state_version"]
        base_patterns = read_patterns(run.spark, run.paths.patterns_file(base_version))
    retention = run.pipeline.tombstone_retention_days
    committed = commit_state(
        run.paths.state_dir, base.state, base_patterns, changes, kinds["changelog_rows"], retention, base_version
    )
    written = "changed keys merged into the state" if committed.merged else "state written whole"
    if committed.rewritten:
        written = "changed keys applied, state written whole (too many rows marked deleted)"
    run.clock.lap("compact", kinds["changelog_rows"], unit=f"changes compacted, {written}")
    return committed


def type_stage(run: PipelineRun, base: BuildBase, committed: StateCommit, kinds: dict) -> tuple[str, TypedTables]:
    """Type: the tables users read, committed for the version this run will publish (named here); a table this run
    did not change keeps its published version."""
    version = warehouse.new_version(run.spec.run_id)
    try:
        typed = type_tables(
            run.spark,
            run.paths,
            base.merged_onto,
            committed,
            read_state(run.spark, run.paths.state_dir, committed.version, keep_partition=True),
            kinds["changes_by_table"],
            version,
            run.run_dir,
            run.pipeline.deletion_vectors,
        )
    finally:
        committed.release_merged_rows()
    kept = f", {len(typed.unchanged)} unchanged tables kept" if typed.unchanged else ""
    run.clock.lap("type", len(typed.retyped), unit=f"tables typed{kept}")
    return version, typed


def audit_stage(run: PipelineRun, base: BuildBase, typed: TypedTables) -> dict:
    """Audit before publish: a table that fails its suite is never published, what the run committed is rolled back
    and readers keep the previous version."""
    rows = {table_id: info["rows"] for table_id, info in typed.tables.items()}
    try:
        audit = publishing.audit_tables(run.spark, run.paths, typed.versions, typed.retyped, rows, run.run_dir)
    except QualityGateError:
        publishing.roll_back_unpublished(run.spark, run.paths, base.published, new_tables=set(typed.retyped))
        raise
    audit["unchanged_tables"] = sorted(typed.unchanged)  # passed the suite when they were typed, in typed_in_version
    run.clock.lap("audit", sum(r["success"] for r in audit["tables"].values()), len(typed.retyped), "tables passed")
    return audit


def publish_stage(
    run: PipelineRun, read: ReadSlice, base: BuildBase, committed: StateCommit, version: str, typed: TypedTables
) -> tuple[dict, list[str]]:
    """Publish: one atomic switch of the pointer, then vacuum what no kept version reads and remove the changelogs
    past ``keep_decoded_runs``; the new pointer and the runs whose changelogs were removed."""
    entry = warehouse.published_entry(version, run.spec.run_id, committed.version, typed.versions)
    built_on = base.merged_onto["history"][0] if base.merged_onto is not None else None
    read_to = read_to_after(run.pipeline, run.spec, run.current, read.manifest)
    keep_versions = run.config.project.keep_versions
    pointer = warehouse.publish(run.paths, entry, typed.tables, keep_versions, built_on, read_to)
    publishing.vacuum(run.spark, run.paths, pointer, committed=set(typed.retyped))
    keep_decoded = run.config.project.keep_decoded_runs
    removed = publishing.remove_old_changelogs(run.paths, keep_decoded, run.spec.run_id) if keep_decoded else []
    run.clock.lap("publish", len(pointer["tables"]), unit="tables published")
    return pointer, removed


def read_slice(
    spark: SparkSession,
    config: LoadedConfig,
    pipeline: PipelineConfig,
    spec: RunSpec,
    resume_from: dict | None = None,
    kafka_staging: Location | None = None,
) -> tuple[list[str], DataFrame, dict]:
    """The read stage: the archive's readable files, the records of the run's selection, and the manifest of both
    (files, per partition extents and duplicates, offset gaps, unreadable files left out). ``archive.layout: kafka``
    reads the pipeline's topics from the cluster instead (cdcreplay.kafka_source), with the same columns and manifest;
    ``resume_from`` (``resume_point``) the offsets it goes on from, and ``kafka_staging`` (given for a Kafka pipeline
    only) the folder its selected records are kept in for the run's later passes (``kafka_source.stage_records``;
    None reads the brokers on each pass).
    """
    selection = selection_for(pipeline, spec, resuming=resume_from is not None)
    unreadable, source_facts = [], {}
    if pipeline.archive.layout == "kafka":
        # The offset ranges are resolved and checked through the brokers before the read (kafka_source).
        files, raw, source_facts = kafka_source.read_topics(spark, pipeline, selection, resume_from)
    else:
        files, unreadable = archive.readable_files(
            archive.archive_files(config.archive_path(pipeline), pipeline.archive.layout),
            pipeline.archive.layout,
            pipeline.archive.skip_unreadable_files,
        )
        raw = archive.read_archive(spark, files, pipeline.archive.layout)
        if selection.offsets:
            topics_only = archive.select_records(raw, archive.Selection(topics=selection.topics))
            archive.check_offset_ranges(selection.offsets, archive.partition_extents(topics_only))
    selected = archive.select_records(raw, selection)
    if kafka_staging is not None:
        selected = kafka_source.stage_records(spark, selected, kafka_staging)
    extents, splits_with_records = archive.extents_and_splits(selected)
    gaps = archive.offset_gaps(selected) if any(e["missing_offsets"] for e in extents) else []
    lost = source_facts.get("kafka", {}).get("lost_to_retention", [])  # logged by kafka_source
    manifest = archive.build_manifest(files, extents, [*lost, *gaps], selection, unreadable, splits_with_records)
    return files, selected, {**manifest, **source_facts}


def decode(
    spark: SparkSession,
    pipeline: PipelineConfig,
    spec: RunSpec,
    selected: DataFrame,
    manifest: dict,
    base_state: DataFrame | None,
    decoded_dir: Location,
) -> dict:
    """The decode stage: every selected record decoded into ``decoded_dir`` (``record_kind=changelog|control|
    quarantine``), each accounted for exactly once (``accounting``); the counts per kind, reason and table.

    ``base_state`` reaches every decoder (``formats``: one signature); only those whose changes are patches onto
    the stored row (DRS DDS `$set` into embedded documents) read it."""
    splits_with_records = manifest.get("splits_with_records")
    if manifest["duplicates"]:
        selected = archive.deduplicate(selected)
        splits_with_records = None  # shuffled: its partitions are no longer the scan's splits
    selected = archive.spread_over_cores(selected, spark.sparkContext.defaultParallelism, splits_with_records)
    keep = (F.col("record_kind") != KIND_CHANGE) | F.col("table_id").isin(list(spec.tables)) if spec.tables else None
    module = decoder_module(pipeline.format)
    decoded_dir.remove_tree()  # a re-run of this run id decodes afresh
    native = None
    if hasattr(module, "decode_natively") and module.reads_natively(pipeline, manifest["distinct_records"]):
        native = module.decode_natively(selected, pipeline, manifest["distinct_records"])
    if native is not None:
        # Spark's JSON reader decodes what it can vouch for; the rest is read back and decoded in Python.
        write_decoded(native, selected, lambda rest: module.decode_in_python(rest, pipeline), str(decoded_dir), keep)
    else:
        decoded = module.decode(selected, pipeline, base_state=base_state)
        if keep is not None:
            decoded = decoded.where(keep)
        write_by_kind(decoded, str(decoded_dir), "overwrite")
    kinds = decoded_counts(spark, str(decoded_dir), manifest)
    check_accounting(kinds, manifest, spec)
    return kinds


def _add_published(summary: RunSummary, run: PipelineRun, base: BuildBase, pointer: dict) -> None:
    """Where the run's results are: the published version, the state it built on (for the reconciliation, see
    state_store.state_ref), its changelog, quarantine and held-back rows."""
    paths, run_id = run.paths, run.spec.run_id
    if base.merged_onto is not None:
        version = base.merged_onto["state_version"]
        summary.base_state = state_ref(paths.state_dir, version, paths.patterns_file(version))
    summary.version = pointer["version"]
    summary.tables = {  # the folder each table's Delta version is in
        table_id: {**info, "path": str(paths.root / info["path"])} for table_id, info in pointer["tables"].items()
    }
    summary.changelog_path = decoded_path(paths, run_id, KIND_CHANGE)
    summary.quarantine_path = decoded_path(paths, run_id, KIND_QUARANTINE)
    summary.type_conflicts_path = str(paths.run_dir(run_id) / TYPE_CONFLICTS_FOLDER)


def _add_outcome(
    summary: RunSummary,
    run: PipelineRun,
    kinds: dict,
    committed: StateCommit,
    typed: TypedTables,
    audit: dict,
    removed: list[str],
) -> None:
    """What the stages did: the decoded counts, the state version committed, the audit, the rows held back."""
    summary.state = state_ref(run.paths.state_dir, committed.version, run.paths.patterns_file(committed.version))
    summary.state_merged = committed.merged
    summary.layouts_from_merge = committed.patterns is not None
    summary.decoded = kinds
    summary.quality = audit
    summary.type_conflicts = sum(typed.conflicts.values())
    summary.changelogs_removed = removed


def _read_decoded(spark: SparkSession, paths, run_id: str, kind: str, changelog_only: bool = False) -> DataFrame:
    path = decoded_path(paths, run_id, kind)
    if Location(path).is_dir():
        frame = spark.read.parquet(path)
    else:  # no record of this kind in the run: an empty frame of the same shape
        frame = spark.createDataFrame([], DECODED_DDL).drop("record_kind")
    return frame.select(*CHANGELOG_COLUMNS) if changelog_only else frame


def _summary(run: PipelineRun, manifest: dict) -> RunSummary:
    spec = run.spec
    return RunSummary(
        pipeline=run.pipeline.name,
        format=run.pipeline.format,
        run_id=spec.run_id,
        dry_run=spec.dry_run,
        full_rebuild=spec.full_rebuild,
        records_read=manifest["records"],
        distinct_records=manifest["distinct_records"],
        duplicates=manifest["duplicates"],
        missing_offsets=manifest["missing_offsets"],
        manifest_path=str(run.paths.run_file(spec.run_id, MANIFEST_FILE)),
        files=len(manifest["files"]),
        unreadable_files=len(manifest["unreadable_files"]),
        timings_s=run.clock.timings,
        elapsed_s=round(time.time() - run.started, 3),
    )


def _written(run: PipelineRun, summary: RunSummary) -> RunSummary:
    warehouse.write_json_atomically(run.run_dir / SUMMARY_FILE, summary.to_json())
    return summary


def run(spark: SparkSession, config: LoadedConfig, spec: RunSpec) -> list[RunSummary]:
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
    return warehouse.PipelinePaths(config.warehouse, pipeline).run_file(run_id, SUMMARY_FILE)


def load_summary(config: LoadedConfig, pipeline: str, run_id: str) -> RunSummary | None:
    try:
        return RunSummary.from_json(warehouse.read_json(summary_path(config, pipeline, run_id)))
    except FileNotFoundError:
        return None


def save_summary(config: LoadedConfig, summary: RunSummary) -> None:
    warehouse.write_json_atomically(summary_path(config, summary.pipeline, summary.run_id), summary.to_json())
