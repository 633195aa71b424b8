"""`cdcreplay archive`: copy a Kafka pipeline's topics from the brokers into a Parquet archive that a replay reads.

A pipeline with ``archive.layout: kafka`` and ``archive.copy_to`` (a folder or an s3a:// prefix) is archived there
with Spark's own Kafka-source columns (``topic, partition, offset, timestamp, timestampType, key, value, headers``):
the layout ``parquet`` that any pipeline replays, e.g. after the brokers' retention has deleted the records.

Archiving is contiguous per partition. ``_ARCHIVED.json`` at the archive's root remembers, per topic and partition,
the offset up to which it holds the log (``read_to``), with the ranges of every archiving run. Each run goes on from
there (the first one from the selection's start, offsets or the log's earliest offset) up to the log's end, or to
``--end``; an interval archived before is never written again, so re-archiving writes no duplicates. Offsets that
retention deleted before they were archived are listed as lost (``lost_to_retention``), never skipped silently.

Files go to ``kafka_topic=<topic>/day=<record date, UTC>/segment=p<partition>-from-<first offset>/``. A run that dies
after writing and before recording its progress is redone from the same offsets: its segments have the same names,
and the write replaces exactly those folders (dynamic partition overwrite), so nothing is archived twice. Only one
archiver may write one archive at a time (the DAG runs one at a time, ``max_active_runs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdcreplay import kafka_source
from cdcreplay.archive import Selection
from cdcreplay.config import ConfigError, LoadedConfig, PipelineConfig
from cdcreplay.run_spec import RunSpec
from cdcreplay.storage import Location
from cdcreplay.warehouse import read_json, write_json_atomically

PROGRESS_FILE = "_ARCHIVED.json"
FOLDER_COLUMNS = ("kafka_topic", "day", "segment")
KEPT_RUNS = 100  # the progress file lists this many archiving runs, newest last


@dataclass(frozen=True)
class ArchiveResult:
    """What one archiving run wrote: per partition its offset range, and the offsets retention had deleted first."""

    pipeline: str
    target: str
    ranges: list[dict]
    lost_to_retention: list[dict]

    @property
    def offsets(self) -> int:
        return sum(r["until"] - r["start"] for r in self.ranges)


def archive_topics(spark: SparkSession, config: LoadedConfig, pipeline: PipelineConfig, spec: RunSpec) -> ArchiveResult:
    """Copy what the pipeline's topics hold beyond what ``archive.copy_to`` already has (within ``spec``'s end)."""
    target = archive_target(config, pipeline)
    progress = _read_progress(target)
    resume_from = progress.get("read_to")
    offsets = spec.offsets_of(pipeline.topics)
    selection = Selection(
        topics=tuple(pipeline.topics or ()),
        start=spec.start_time if resume_from is None else None,
        # A scheduled night (``spec.resume``) reads on to the log's end, as its replay does; any other run stops at
        # the end it was given.
        end=None if spec.resume and resume_from is not None else spec.end_time,
        offsets=offsets if resume_from is None else (),
    )
    _, records, facts = kafka_source.read_topics(spark, pipeline, selection, resume_from)
    ranges = [r for r in facts["kafka"]["ranges"] if r["until"] > r["start"]]
    lost = facts["kafka"].get("lost_to_retention", [])  # logged by kafka_source
    if ranges:
        _write(records, ranges, target)
        runs = [*progress.get("runs", []), {"archived_at": datetime.now(UTC).isoformat(), "ranges": ranges}]
        document = {
            "read_to": kafka_source.read_to(resume_from, ranges),
            "lost_to_retention": [*progress.get("lost_to_retention", []), *lost],
            "runs": runs[-KEPT_RUNS:],
        }
        write_json_atomically(target / PROGRESS_FILE, document)
    return ArchiveResult(pipeline.name, str(target), ranges, lost)


def archive_target(config: LoadedConfig, pipeline: PipelineConfig) -> Location:
    """Where the pipeline's topics are archived; ConfigError naming the fix when it has no such place."""
    if pipeline.archive.layout != "kafka" or not pipeline.archive.copy_to:
        raise ConfigError(
            f"pipelines.{pipeline.name}: `cdcreplay archive` copies a Kafka pipeline's topics; give it "
            "archive.layout: kafka and archive.copy_to (the folder or s3a:// prefix to archive to)"
        )
    return Location(config.copy_path(pipeline))


def _read_progress(target: Location) -> dict:
    try:
        return read_json(target / PROGRESS_FILE)
    except FileNotFoundError:
        return {}


def _write(records, ranges: list[dict], target: Location) -> None:
    """The records of ``ranges`` into their segment folders, replacing only those folders (see the module doc)."""
    first_offsets = F.create_map(
        *[part for r in ranges for part in (F.lit(f"{r['topic']}\u0000{r['partition']}"), F.lit(r["start"]))]
    )
    first = F.element_at(first_offsets, F.concat_ws("\u0000", "topic", F.col("partition").cast("string")))
    folders = records.select(
        "*",
        F.col("topic").alias("kafka_topic"),
        # the record's UTC date, whatever the session's time zone: whole days since the epoch
        F.date_add(F.lit("1970-01-01").cast("date"), F.floor(F.unix_micros("timestamp") / 86_400_000_000).cast("int"))
        .cast("string")
        .alias("day"),
        F.concat(F.lit("p"), F.col("partition"), F.lit("-from-"), first).alias("segment"),
    )
    (
        folders.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(*FOLDER_COLUMNS)
        .parquet(str(target))
    )


def render_archive(result: ArchiveResult) -> str:
    """The archiving run in words, for the command's output."""
    lines = [f"{result.pipeline}: archived {result.offsets} offsets into {result.target}"]
    for r in result.ranges:
        lines.append(f"  {r['topic']}[{r['partition']}] offsets {r['start']}..{r['until'] - 1}")
    if not result.ranges:
        lines.append("  nothing new: the archive holds everything the topics have")
    for gap in result.lost_to_retention:
        lines.append(
            f"  LOST {gap['topic']}[{gap['partition']}] offsets {gap['from_offset']}..{gap['to_offset']}: deleted by "
            "retention before they were archived"
        )
    return "\n".join(lines)
