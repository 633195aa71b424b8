"""Read archived Kafka records, select the slice a run asks for, and account for what was read.

Layouts (design.md "Archive input"):
  parquet -- Spark Kafka-source columns in Parquet, any folder nesting (Hive-style `topic=`/`dt=` folders are fine:
             the columns inside the files are authoritative, folder names are not parsed).
  jsonl   -- the same columns as JSON lines, key/value/header values base64, timestamp ISO-8601.
  kcat    -- `kcat -C -J` lines: topic, partition, offset, tstype, ts (ms), key, payload, headers [k, v, k, v ...].

Every run gets a manifest: files read, per partition min/max offset and counts, duplicate offsets (a record archived
twice is counted once) and offset gaps (missing offsets between min and max: compacted topics and transaction markers
leave such gaps legitimately, so they are reported, not fatal).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay.run_spec import OffsetRange
from cdcreplay.schema import RAW_COLUMNS, RAW_DDL, struct_type
from cdcreplay.storage import Location, StorageError
from cdcreplay.value_types import safe_binary, safe_timestamp_millis

MAX_LISTED_GAPS = 50
LAYOUT_SUFFIXES = {"parquet": (".parquet",), "jsonl": (".json", ".jsonl", ".ndjson"), "kcat": (".json", ".jsonl")}


class ArchiveError(ValueError):
    """The archive cannot be read as configured; the message says where and what to fix."""


def archive_files(path: str, layout: str) -> list[str]:
    """Data files under ``path`` (a local folder or an s3a:// prefix) for ``layout`` (hidden and underscore files
    skipped, as Spark does), as paths Spark reads."""
    try:
        root = Location(path)
    except StorageError as error:
        raise ArchiveError(f"archive.path {error}") from None
    if root.is_file():
        return [str(root)]
    if not root.exists():
        raise ArchiveError(f"archive path {path} does not exist; fix archive.path in the pipeline config")
    suffixes = LAYOUT_SUFFIXES[layout]
    files = [
        str(file)
        for file, relative in root.files()
        if file.name.endswith(suffixes) and not any(part.startswith((".", "_")) for part in relative.split("/"))
    ]
    if not files:
        raise ArchiveError(
            f"archive path {path} holds no {layout} files (looked for {', '.join(suffixes)}); "
            "check archive.path and archive.layout in the pipeline config"
        )
    return files


@dataclass(frozen=True)
class UnreadableFile:
    path: str
    reason: str


def unreadable_parquet_files(files: list[str]) -> list[UnreadableFile]:
    """The files that are not readable Parquet, found by reading each footer (a few KB, no data): an archiver
    killed mid-upload leaves a file without its footer, and Spark would fail deep inside the decode on it."""
    import pyarrow.parquet as pq

    unreadable = []
    for path in files:
        try:
            with Location(path).open_input_file() as file:
                pq.read_metadata(file)
        except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            unreadable.append(UnreadableFile(path, str(error).splitlines()[0]))
    return unreadable


def readable_files(files: list[str], layout: str, skip_unreadable: bool) -> tuple[list[str], list[UnreadableFile]]:
    """(the files to read, the unreadable ones left out): a parquet archive's files are checked before any work,
    and an unreadable one refuses the run unless ``skip_unreadable`` (``archive.skip_unreadable_files``)."""
    if layout != "parquet":
        return files, []
    unreadable = unreadable_parquet_files(files)
    if unreadable and not skip_unreadable:
        listed = "; ".join(f"{u.path}: {u.reason}" for u in unreadable[:10])
        more = f" (and {len(unreadable) - 10} more)" if len(unreadable) > 10 else ""
        raise ArchiveError(
            f"{len(unreadable)} archive file(s) are not readable Parquet: {listed}{more}. Replace them, or set "
            "archive.skip_unreadable_files: true to leave them out (the run's manifest lists them)"
        )
    skipped = {u.path for u in unreadable}
    kept = [path for path in files if path not in skipped]
    if not kept:
        raise ArchiveError(f"every file of the archive is unreadable ({len(files)} files); nothing to replay")
    return kept, unreadable


def read_archive(spark: SparkSession, files: list[str], layout: str) -> DataFrame:
    """Raw records with exactly the Kafka-source columns, whatever the layout."""
    if layout == "parquet":
        frame = spark.read.parquet(*files)
        missing = [c for c in RAW_COLUMNS if c not in frame.columns and c not in ("timestampType", "headers")]
        if missing:
            raise ArchiveError(
                f"parquet archive lacks column(s) {', '.join(missing)}; expected Spark's Kafka-source columns "
                f"{', '.join(RAW_COLUMNS)} (files e.g. {files[0]})"
            )
        raw_schema = struct_type(RAW_DDL)
        return frame.select(
            *[
                (F.col(f.name) if f.name in frame.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in raw_schema.fields
            ]
        )
    if layout == "jsonl":
        frame = spark.read.schema(
            "topic string, partition int, offset bigint, timestamp string, timestampType int, key string, "
            "value string, headers array<struct<key: string, value: string>>"
        ).json(files)
        return frame.select(
            "topic",
            "partition",
            "offset",
            F.to_timestamp("timestamp").alias("timestamp"),
            F.coalesce("timestampType", F.lit(0)).alias("timestampType"),
            safe_binary(F.col("key")).alias("key"),
            safe_binary(F.col("value")).alias("value"),
            F.transform(
                "headers", lambda h: F.struct(h["key"].alias("key"), safe_binary(h["value"]).alias("value"))
            ).alias("headers"),
        )
    if layout == "kcat":
        frame = spark.read.schema(
            "topic string, partition int, offset bigint, tstype string, ts bigint, key string, payload string, "
            "headers array<string>"
        ).json(files)
        pair_count = F.floor(F.size(F.coalesce("headers", F.array().cast("array<string>"))) / 2)
        return frame.select(
            "topic",
            "partition",
            "offset",
            safe_timestamp_millis(F.col("ts")).alias("timestamp"),
            F.when(F.col("tstype") == "logappend", 1).otherwise(0).alias("timestampType"),
            F.encode("key", "UTF-8").alias("key"),
            F.encode("payload", "UTF-8").alias("value"),
            F.when(
                pair_count > 0,
                F.transform(
                    F.sequence(F.lit(0), pair_count - 1),
                    lambda i: F.struct(
                        F.col("headers")[i * 2].alias("key"),
                        F.encode(F.col("headers")[i * 2 + 1], "UTF-8").alias("value"),
                    ),
                ),
            ).alias("headers"),
        )
    raise ArchiveError(f"unknown archive layout {layout!r}; use parquet, jsonl or kcat")


@dataclass(frozen=True)
class Selection:
    topics: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    offsets: tuple[OffsetRange, ...] = ()


def select_records(raw: DataFrame, selection: Selection) -> DataFrame:
    """Records of the chosen topics, time range [start, end) and offset ranges [start, until)."""
    condition = F.col("topic").isNotNull() & F.col("partition").isNotNull() & F.col("offset").isNotNull()
    if selection.topics:
        condition &= F.col("topic").isin(list(selection.topics))
    if selection.start:
        condition &= F.col("timestamp") >= F.lit(selection.start)
    if selection.end:
        condition &= F.col("timestamp") < F.lit(selection.end)
    if selection.offsets:
        # Partitions named in `offsets` are limited to their ranges; partitions and topics not named are
        # left out altogether (an explicit offset selection is an exact list of what to replay).
        condition &= in_offset_ranges(selection.offsets)
    return raw.where(condition)


def in_offset_ranges(ranges: Iterable[OffsetRange]) -> Column:
    """Whether a record lies in one of ``ranges``: an OR of balanced depth, which Spark hands to the Parquet reader
    whole (it skips the row groups whose topic and offset statistics lie outside every range)."""
    terms = [
        (F.col("topic") == r.topic)
        & (F.col("partition") == r.partition)
        & (F.col("offset") >= r.start)
        & (F.col("offset") < r.until)
        for r in ranges
    ]
    if not terms:
        return F.lit(False)
    while len(terms) > 1:
        terms = [terms[i] | terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def partition_extents(raw: DataFrame) -> list[dict]:
    """Per topic partition: min/max offset, records (with duplicates) and distinct offsets. Reads coordinates only."""
    return extents_and_splits(raw)[0]


def extents_and_splits(raw: DataFrame) -> tuple[list[dict], int]:
    """:func:`partition_extents`, and at most how many of the scan's splits hold the records
    (:func:`spread_over_cores`), from the same pass: the splits from the first to the last that hold a topic
    partition's records, counted once. (A min and a max: a set of the splits per partition doubled the pass.)"""
    rows = (
        raw.where(F.col("topic").isNotNull() & F.col("partition").isNotNull() & F.col("offset").isNotNull())
        .withColumn("split", F.spark_partition_id())
        .groupBy("topic", "partition")
        .agg(
            F.min("offset").alias("min_offset"),
            F.max("offset").alias("max_offset"),
            F.count(F.lit(1)).alias("records"),
            F.count_distinct("offset").alias("distinct_offsets"),
            F.min("timestamp").alias("min_timestamp"),
            F.max("timestamp").alias("max_timestamp"),
            F.min("split").alias("first_split"),
            F.max("split").alias("last_split"),
        )
        .collect()
    )
    rows.sort(key=lambda row: (row.topic, row.partition))  # a few rows per topic: sorted here, not by a Spark job
    extents, splits = [], set()
    for row in rows:
        extent = row.asDict()
        splits.update(range(extent.pop("first_split"), extent.pop("last_split") + 1))
        extent["duplicates"] = extent["records"] - extent["distinct_offsets"]
        extent["missing_offsets"] = extent["max_offset"] - extent["min_offset"] + 1 - extent["distinct_offsets"]
        extents.append(extent)
    return extents, len(splits)


def check_offset_ranges(requested: tuple[OffsetRange, ...], archive_extents: list[dict]) -> None:
    """An offset range that does not overlap what the archive holds is a parameter error, not an empty run."""
    held = {(e["topic"], e["partition"]): e for e in archive_extents}
    for r in requested:
        extent = held.get((r.topic, r.partition))
        where = f"parameter offsets.{r.topic}.{r.partition}"
        if extent is None:
            partitions = sorted(p for t, p in held if t == r.topic)
            raise ArchiveError(
                f"{where}: the archive holds no records of that topic partition"
                + (f"; partitions present: {partitions}" if partitions else "; the topic is not in the archive")
            )
        if r.start > extent["max_offset"] or r.until <= extent["min_offset"]:
            raise ArchiveError(
                f"{where}: requested [{r.start}, {r.until}) but the archive holds offsets "
                f"{extent['min_offset']}..{extent['max_offset']}; choose a range that overlaps them"
            )


def offset_gaps(raw: DataFrame, limit: int = MAX_LISTED_GAPS) -> list[dict]:
    """The first ``limit`` runs of missing offsets, per topic partition, in order."""
    from pyspark.sql.window import Window

    window = Window.partitionBy("topic", "partition").orderBy("offset")
    return [
        row.asDict()
        for row in raw.select("topic", "partition", "offset")
        .distinct()
        .withColumn("previous", F.lag("offset").over(window))
        .where(F.col("offset") - F.col("previous") > 1)
        .select(
            "topic", "partition", (F.col("previous") + 1).alias("from_offset"), (F.col("offset") - 1).alias("to_offset")
        )
        .orderBy("topic", "partition", "from_offset")
        .limit(limit)
        .collect()
    ]


def deduplicate(raw: DataFrame) -> DataFrame:
    """One record per (topic, partition, offset): the same Kafka record archived twice is the same change."""
    return raw.dropDuplicates(["topic", "partition", "offset"])


def spread_over_cores(records: DataFrame, cores: int, splits_with_records: int | None = None) -> DataFrame:
    """``records`` in at least ``cores`` partitions that hold them. A scan makes one task per file split, and a Parquet
    file splits no finer than its row groups: an archive of one or a few large files would be decoded by one or a
    few cores while the rest idle (decoding is CPU-bound, most of all in Python). So would a night: its records are
    the newest, in the archive's newest file or two, and the scan's other splits hold none of them (they read the
    timestamps and drop every record). ``splits_with_records``: how many splits hold ``records`` (from
    :func:`extents_and_splits`); None takes every split as holding some. Records are independent of each other
    here -- each decoded row keeps its Kafka coordinates, which give the order -- so a round-robin shuffle is safe."""
    holding = records.rdd.getNumPartitions() if splits_with_records is None else splits_with_records
    if holding >= cores:
        return records
    return records.repartition(cores)


def build_manifest(
    files: list[str],
    extents: list[dict],
    gaps: list[dict],
    selection: Selection,
    unreadable: list[UnreadableFile] = (),
    splits_with_records: int | None = None,
) -> dict:
    return {
        "files": files,
        "unreadable_files": [{"path": u.path, "reason": u.reason} for u in unreadable],  # left out of the run
        "selection": {
            "topics": list(selection.topics),
            "start": selection.start.isoformat() if selection.start else None,
            "end": selection.end.isoformat() if selection.end else None,
            "offsets": [r.__dict__ for r in selection.offsets],
        },
        "partitions": extents,
        "records": sum(e["records"] for e in extents),
        "distinct_records": sum(e["distinct_offsets"] for e in extents),
        "duplicates": sum(e["duplicates"] for e in extents),
        "missing_offsets": sum(e["missing_offsets"] for e in extents),
        "gaps": gaps,
        "splits_with_records": splits_with_records,  # of the scan's splits, those that hold selected records
    }
