"""Gather a key's story from the warehouse with Spark, reading only what names the key.

- Its events: the decoded changelog of every run whose changes the state holds (``request.runs``), filtered on the
  table and the key (``names_key``: by its text, or by value for a date, timestamp, float or binary column), plus the
  table's truncates.
  Spark sorts them by ``compaction.event_order`` and ``compaction.latest_rows`` picks the winner: the order and the
  rule are compaction's own.
- Its quarantined records: each run's quarantine, by the decoded key, or by the Kafka key where the record could not
  be decoded far enough to have one.
- Its reconciliation: each run's diff rows of the key, and the run's epochs from its metrics.
- Its state row (the state's partition of the table only) and its published row, as of the run the story ends with.

A file set the story looks for and does not find is named in ``sources``. A run whose changelog is gone is decoded
again from the archive files its manifest names (``from_archive``); where that cannot be done either, the story says
it is incomplete rather than tell a shorter one.
"""

from __future__ import annotations

import json
from functools import reduce

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.compaction import event_order, latest_rows
from cdcreplay.config import ConfigError
from cdcreplay.contracts import VERDICT_SKIPPED
from cdcreplay.delta_tables import read_version
from cdcreplay.explain.analysis import (
    assign_epochs,
    build_events,
    find_event,
    lost_changes,
    position_text,
    reconciliation_rows,
    winner_of,
)
from cdcreplay.explain.from_archive import redecode_run, topics_of_table
from cdcreplay.explain.request import ExplainRequest, RunFiles, canonical_key_value
from cdcreplay.explain.story import Explanation, PublishedRow, Quarantined, Source, StateRow, Tombstone
from cdcreplay.spark import vectorized_parquet_reads
from cdcreplay.state_store import read_state, table_state
from cdcreplay.storage import Location
from cdcreplay.value_types import safe_binary
from cdcreplay.warehouse import read_json

RUN_OF_FILE = r"/runs/([^/]+)/(decoded|reconcile)/"
QUARANTINE_COLUMNS = ("topic", "partition", "offset", "reason", "detail", "table_id", "key", "raw_key")


def explain_key(spark: SparkSession, request: ExplainRequest) -> Explanation:
    """The whole story of ``request``'s key, as of its run. Nothing here feeds rows to Python workers, so Spark's
    vectorized Parquet reader may read the changelogs: about twice as fast on a run of millions of records."""
    with vectorized_parquet_reads(spark):
        return _story(spark, request)


def _story(spark: SparkSession, request: ExplainRequest) -> Explanation:
    story = Explanation(
        pipeline=request.pipeline.name,
        format=request.pipeline.format,
        table_id=request.table_id,
        key=dict(request.key),
        key_text=request.key_text,
        run_id=request.run.run_id,
        runs=[run.run_id for run in request.runs],
    )
    rows = _changelog_rows(spark, request, story)
    story.events = build_events(rows)
    story.winner = winner_of(story.events, _latest(spark, rows))
    diffs = _diff_rows(spark, request, story)
    metrics = _epochs(request)
    assign_epochs(story.events, diffs, metrics)
    story.reconciliation = reconciliation_rows(story.events, diffs)
    story.lost_changes = lost_changes(story.events, story.reconciliation, metrics, request.table_id)
    story.quarantined = _quarantined(spark, request, story)
    story.state = _state_row(spark, request, story)
    story.tombstone = _tombstone(request, story)
    story.published = _published_row(spark, request, story)
    story.notes.extend(_notes(request, story))
    return story


# -- where the story's files are --------------------------------------------------------------------------------------


def _present(story: Explanation, runs, kind: str, path_of, nothing_written=lambda run: None) -> list[str]:
    """The paths of ``kind`` of ``runs`` that exist. One that does not is named in the story's sources: as missing,
    unless ``nothing_written(run)`` says why the run wrote none (then with that note)."""
    present = []
    for run in runs:
        path = path_of(run)
        if Location(path).is_dir():
            present.append(path)
            continue
        why = nothing_written(run)
        status = "missing" if why is None else "none"
        story.sources.append(Source(kind=kind, path=path, status=status, run_id=run.run_id, note=why or ""))
    return present


def _no_row_change(run: RunFiles) -> str | None:
    return "the run decoded no row change" if run.summary.decoded.get("changelog_rows") == 0 else None


def _not_reconciled(run: RunFiles) -> str | None:
    reconciliation = run.summary.reconciliation
    if reconciliation is None:
        return "no reconciliation result (not reconciled, or still reconciling)"
    return f"reconciliation {reconciliation.verdict}" if reconciliation.verdict == VERDICT_SKIPPED else None


def names_key(request: ExplainRequest) -> Column:
    """Whether a row's key text is the request's key: the same text, or for the key columns matched by value
    (``ExplainRequest.typed_columns``) the same value of the column's type."""
    typed = request.typed_columns
    if not typed:
        return F.col("key") == request.key_text
    texts = F.from_json(F.col("key"), "array<string>")
    matches = F.size(texts) == len(request.key_columns)
    for place, name in enumerate(request.key_columns):
        given = request.key[name]
        if place in typed:
            matches = matches & (_typed(texts[place], typed[place]) == _typed(F.lit(given), typed[place]))
        else:
            matches = matches & (texts[place] == given)
    return F.coalesce(matches, F.lit(False))


def _typed(text: Column, spark_type: str) -> Column:
    return safe_binary(text) if spark_type == "binary" else text.try_cast(spark_type)


def _run_column() -> Column:
    """The run whose folder the row's file is in."""
    return F.regexp_extract(F.col("_metadata.file_path"), RUN_OF_FILE, 1).alias("run_id")


def _utc_text(column: str) -> Column:
    """A timestamp as ISO-8601 text, written by Spark in the session's time zone (UTC, see cdcreplay.spark): a
    timestamp collected to Python would be shifted to the driver's local zone."""
    return F.date_format(F.col(column), "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX")


def _count_per_run(story: Explanation, kind: str, runs: list[RunFiles], path_of, rows: list[dict]) -> None:
    for run in runs:
        path = path_of(run)
        if any(s.path == path for s in story.sources):
            continue
        found = sum(row["run_id"] == run.run_id for row in rows)
        story.sources.append(Source(kind=kind, path=path, status="read", run_id=run.run_id, rows=found))


# -- events ----------------------------------------------------------------------------------------------------------


def _changelog_rows(spark: SparkSession, request: ExplainRequest, story: Explanation) -> list[dict]:
    """The key's changelog rows (and its table's truncates) of every run, in compaction order."""

    def path_of(run: RunFiles) -> str:
        return run.changelog_path

    for run in request.skipped_runs:
        story.sources.append(
            Source(kind="changelog", path=path_of(run), status="none", run_id=run.run_id, note="decoded nothing")
        )
    paths = _present(story, request.runs, "changelog", path_of, _no_row_change)
    of_key = (F.col("table_id") == request.table_id) & (names_key(request) | (F.col("op") == S.OP_TRUNCATE))
    frames = []
    if paths:
        frames.append(spark.read.parquet(*paths).where(of_key).select(*S.CHANGELOG_COLUMNS, _run_column()))
    redecoded = _redecode_missing_runs(spark, request, story, frames, of_key)
    frames += [rows for _, rows in redecoded]
    rows: list[dict] = []
    if frames:
        frame = reduce(DataFrame.unionByName, frames)
        frame = frame.select("*", _utc_text("event_time").alias("event_time_text"))
        ordered = frame.orderBy(event_order(), "op", "topic", "run_id")
        rows = [row.asDict(recursive=True) for row in ordered.collect()]
    for source, _ in redecoded:
        source.rows = sum(row["run_id"] == source.run_id for row in rows)
    _count_per_run(story, "changelog", list(request.runs), path_of, rows)
    return rows


def _redecode_missing_runs(
    spark: SparkSession, request: ExplainRequest, story: Explanation, frames: list[DataFrame], of_key: Column
) -> list[tuple[Source, DataFrame]]:
    """For each run whose changelog is missing, its rows of the key decoded again from the archive files it read
    (``from_archive``); their sources turn from "missing" to "from_archive". ``frames``: the changelogs read."""
    missing = [s for s in story.sources if s.kind == "changelog" and s.status == "missing"]
    if not missing:
        return []
    known = set()  # the topics of the key's events in the runs that kept their changelog
    if frames:
        known = {row.topic for row in frames[0].select("topic").distinct().collect()}
    topics = topics_of_table(spark, request.table_id, _publisher(request).summary.state, known)
    by_id = {run.run_id: run for run in request.runs}
    redecoded = []
    for source in missing:
        found = redecode_run(spark, request, by_id[source.run_id], topics, of_key)
        source.note = found.note
        if found.rows is not None:
            source.status = "from_archive"
            redecoded.append((source, found.rows.select("*", F.lit(source.run_id).alias("run_id"))))
    return redecoded


def _latest(spark: SparkSession, rows: list[dict]) -> dict | None:
    """The key's row as compaction computes it from these events (truncates of the table applied)."""
    if not any(row["op"] in S.ROW_OPS for row in rows):
        return None
    contract = S.struct_type(S.CHANGELOG_DDL)
    events = spark.createDataFrame([tuple(row[c] for c in S.CHANGELOG_COLUMNS) for row in rows], contract)
    found = latest_rows(events).collect()
    return found[0].asDict(recursive=True) if found else None


# -- reconciliation ---------------------------------------------------------------------------------------------------


def _diff_rows(spark: SparkSession, request: ExplainRequest, story: Explanation) -> dict[str, list[dict]]:
    """Per run with a reconciliation: the diff rows of the key (a run without one is named in the sources)."""

    def path_of(run: RunFiles) -> str:
        return run.diff_path

    # A diff is read once its run's summary holds the result: a reconciliation under way has a diff folder already.
    reconciled = [run for run in request.runs if _not_reconciled(run) is None]
    for run in request.runs:
        if run not in reconciled:
            note = _not_reconciled(run)
            story.sources.append(
                Source(kind="reconciliation", path=path_of(run), status="none", run_id=run.run_id, note=note)
            )
    paths = _present(story, reconciled, "reconciliation", path_of)
    rows: list[dict] = []
    if paths:
        of_key = (F.col("table_id") == request.table_id) & names_key(request)
        rows = [
            r.asDict(recursive=True)
            for r in spark.read.parquet(*paths).where(of_key).select("*", _run_column()).collect()
        ]
    _count_per_run(story, "reconciliation", list(request.runs), path_of, rows)
    per_run: dict[str, list[dict]] = {}
    for row in rows:
        per_run.setdefault(row["run_id"], []).append(row)
    return per_run


def _epochs(request: ExplainRequest) -> dict[str, list[dict]]:
    """Per run with a reconciliation: its snapshot epochs of the table (metrics.json: bounds, kind, verdict)."""
    epochs = {}
    for run in request.runs:
        try:
            metrics = read_json(run.metrics_path)
        except FileNotFoundError:
            continue
        epochs[run.run_id] = [m for m in metrics.get("tables", []) if m["table_id"] == request.table_id]
    return epochs


# -- quarantine -------------------------------------------------------------------------------------------------------


def _quarantined(spark: SparkSession, request: ExplainRequest, story: Explanation) -> list[Quarantined]:
    """Quarantined records naming the key: by decoded key, or (a record decoded too little to have one) by Kafka key."""

    def path_of(run: RunFiles) -> str:
        return run.quarantine_path

    # A run without quarantined records has no quarantine folder: that is not a missing source.
    paths = [path_of(run) for run in request.runs if Location(path_of(run)).is_dir()]
    rows: list[dict] = []
    if paths:
        of_table = F.col("table_id").isNull() | (F.col("table_id") == request.table_id)
        by_key = F.col("table_id").isNotNull() & names_key(request)
        named = by_key | (F.col("key").isNull() & F.col("raw_key").isNotNull())
        frame = (
            spark.read.parquet(*paths)
            .where(of_table & named)
            .select(
                *QUARANTINE_COLUMNS, _utc_text("timestamp").alias("timestamp"), _run_column(), by_key.alias("by_key")
            )
        )
        rows = [r.asDict() for r in frame.orderBy("topic", "partition", "offset").collect()]
    found = []
    for row in rows:
        matched_by = _matched_by(row, request)
        if matched_by is not None:
            found.append(
                Quarantined(
                    run_id=row["run_id"],
                    topic=row["topic"],
                    partition=row["partition"],
                    offset=row["offset"],
                    timestamp=row["timestamp"],
                    reason=row["reason"],
                    detail=row["detail"],
                    matched_by=matched_by,
                )
            )
    for run in request.runs:
        path = path_of(run)
        status, note = ("read", "") if path in paths else _no_quarantine(run)
        count = sum(q.run_id == run.run_id for q in found)
        story.sources.append(
            Source(kind="quarantine", path=path, status=status, run_id=run.run_id, rows=count, note=note)
        )
    return found


def _no_quarantine(run: RunFiles) -> tuple[str, str]:
    """A run without a quarantine folder: it quarantined nothing, or (its summary counts some) the folder is gone."""
    counted = (run.summary.decoded or {}).get("quarantined") or 0
    if counted:
        return "missing", f"the run quarantined {counted} record(s), but its quarantine folder is gone"
    return "none", "the run quarantined no record"


def _matched_by(row: dict, request: ExplainRequest) -> str | None:
    if row["by_key"]:
        return "decoded_key"
    if row["key"] is None and _kafka_key_names(row["raw_key"], request):
        return "kafka_key"
    return None


def _kafka_key_names(raw_key: bytes | None, request: ExplainRequest) -> bool:
    """Whether a record's Kafka key is a JSON object of exactly the key's columns and values (Kafka Connect's
    JsonConverter wraps it as ``{"schema": ..., "payload": {...}}``)."""
    try:
        key = json.loads(bytes(raw_key).decode("utf-8"))
    except (TypeError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if isinstance(key, dict) and isinstance(key.get("payload"), dict) and "schema" in key:
        key = key["payload"]
    if not isinstance(key, dict) or set(key) != set(request.key_columns):
        return False
    try:
        return all(
            canonical_key_value(c, key[c], request.column_types.get(c)) == request.key[c] for c in request.key_columns
        )
    except ConfigError:
        return False


# -- state and published row ------------------------------------------------------------------------------------------


def _state_row(spark: SparkSession, request: ExplainRequest, story: Explanation) -> StateRow | None:
    """The key's row in the state as of the story's run: the table's partition only."""
    ref = _publisher(request).summary.state
    if not ref:
        return None
    source = Source(kind="state", path=f"{ref['path']}@v{ref['version']}", status="read")
    story.sources.append(source)
    try:
        state = table_state(read_state(spark, ref["path"], ref["version"], keep_partition=True), request.table_id)
        rows = state.where(names_key(request)).withColumn("event_time", _utc_text("event_time")).collect()
    except PySparkException as exc:  # vacuumed: older than the kept versions
        source.status, source.note = "not_readable", str(exc).splitlines()[0]
        return None
    source.rows = len(rows)
    if not rows:
        return None
    row = rows[0]
    event = find_event(story.events, row.topic, row.partition, row.offset, position_text(row.position))
    return StateRow(
        state_version=ref["version"],
        deleted=bool(row.deleted),
        op=row.op,
        topic=row.topic,
        partition=row.partition,
        offset=row.offset,
        position=position_text(row.position),
        event_time=row.event_time,
        seq=None if event is None else event.seq,
    )


def _tombstone(request: ExplainRequest, story: Explanation) -> Tombstone | None:
    """A deleted key's tombstone and how long the pipeline keeps it."""
    deleted = story.state.deleted if story.state else story.winner is not None and story.winner.effect != "live"
    if not deleted:
        return None
    days = request.pipeline.tombstone_retention_days
    seq = story.state.seq if story.state else story.winner.seq
    time = story.state.event_time if story.state else story.events[seq - 1].event_time
    if days is None:
        policy = (
            "kept forever (no tombstone_retention_days): no late event older than the delete can bring the key back"
        )
    else:
        policy = (
            f"kept until the state's newest event is more than {days} days after the delete ({time}); then purged, "
            "and an event older than the delete arriving later would bring the key back"
        )
    if story.state is None:
        policy = f"not in the state: purged by tombstone_retention_days={days}" if days else "not in the state"
    return Tombstone(seq=seq, event_time=time, retention_days=days, policy=policy)


def _publisher(request: ExplainRequest) -> RunFiles:
    """The run that published the version the story ends with (the story's run, or the last before it that
    decoded records: a run that decoded nothing leaves the published version as it was)."""
    return request.runs[-1] if request.runs else request.run


def _published_row(spark: SparkSession, request: ExplainRequest, story: Explanation) -> PublishedRow | None:
    """The key's row of the published table as of the story's run, found by its typed key columns."""
    publisher = _publisher(request)
    table = publisher.summary.tables.get(request.table_id)
    if table is None:
        story.notes.append(f"run {publisher.run_id} published no table {request.table_id}")
        return None
    version, delta_version = publisher.summary.version, table.get("delta_version")
    if delta_version is None:  # every key of the table deleted before it was ever typed: no columns, no rows
        return PublishedRow(version, publisher.run_id, None, None, {}, None)
    source = Source(kind="published_table", path=f"{table['path']}@v{delta_version}", status="read")
    story.sources.append(source)
    try:
        table_rows = read_version(spark, table["path"], delta_version).where(_typed_key(request))
        found = table_rows.select(*[_as_json(table_rows, name) for name in table_rows.columns]).collect()
    except PySparkException as exc:  # vacuumed: older than the kept versions
        source.status, source.note = "not_readable", str(exc).splitlines()[0]
        return None
    source.rows = len(found)
    if not found:
        return PublishedRow(version, publisher.run_id, delta_version, None, {}, None)
    row = found[0].asDict()
    provenance = {name: row.pop(name) for name in S.PROVENANCE_COLUMNS if name in row}
    event = find_event(story.events, provenance.get("_topic"), provenance.get("_partition"), provenance.get("_offset"))
    return PublishedRow(version, publisher.run_id, delta_version, row, provenance, None if event is None else event.seq)


def _typed_key(request: ExplainRequest) -> Column:
    condition = F.lit(True)
    for column, text in request.key.items():
        declared = request.column_types.get(column, "string")
        condition = condition & (F.col(column) == _typed(F.lit(text), declared))
    return condition


# Typed columns JSON holds as they are; every other type is written as text (see _as_json).
JSON_NATIVE_TYPES = ("boolean", "tinyint", "smallint", "int", "bigint", "float", "double", "string")


def _as_json(frame: DataFrame, name: str) -> Column:
    """A typed column as JSON holds it, converted by Spark: exact decimals and dates as text, timestamps as
    ISO-8601 text in the session's zone, binary as base64."""
    kind = frame.schema[name].dataType.simpleString()
    if kind in JSON_NATIVE_TYPES:
        return F.col(name)
    if kind == "binary":
        return F.base64(F.col(name)).alias(name)
    if kind == "timestamp":
        return _utc_text(name).alias(name)
    return F.col(name).cast("string").alias(name)


def _notes(request: ExplainRequest, story: Explanation) -> list[str]:
    notes = []
    if not story.events:
        notes.append(
            f"no archived event of key {request.key_text} of {request.table_id} in the changelogs of the runs read "
            f"({', '.join(story.runs) or 'none'})"
        )
    missing = [s for s in story.sources if s.kind == "changelog" and s.status == "missing"]
    if missing:
        notes.append(
            "the story is incomplete: the changelog of run(s) "
            + ", ".join(s.run_id for s in missing)
            + " is missing, so their events are not shown"
        )
    if story.state is not None and story.state.seq is None:
        notes.append(
            f"the state's row names an event (offset {story.state.offset}) that is not among the events read: "
            "its run's changelog is not among the runs read"
        )
    if story.state is not None and not story.state.deleted and story.published and story.published.row is None:
        notes.append(
            "the key is live in the state but not in the published table: held back by a type conflict (see "
            f"runs/{_publisher(request).run_id}/type_conflicts)"
        )
    return notes
