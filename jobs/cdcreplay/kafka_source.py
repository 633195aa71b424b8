"""Replay straight from a Kafka cluster (``archive.layout: kafka``): the read stage's records come from the brokers
instead of archived files, with exactly the columns an archive read returns, so decode, compaction and publishing
do not know the difference.

A run's slice is fixed on the driver before any record is read, through Kafka's admin API (kafka-clients, on the
session's classpath with Spark's Kafka source, cdcreplay.jars):
- every topic the pipeline lists must exist; its partitions are the ones the cluster has at that moment;
- per partition, the log's earliest and latest offsets bound what can be read. ``latest`` is the log end offset when
  the run starts: records produced while it runs belong to the next run, so a run is a definite set of records;
- ``--offsets`` names partitions and [start, until) ranges exactly as for an archive (partitions not named are left
  out); a range that does not overlap what the log still holds is a parameter error;
- ``--start``/``--end`` are record timestamps: the brokers' time index gives, per partition, the first offset whose
  timestamp is at or after each bound (ListOffsets by timestamp), and the records read are then filtered by timestamp
  as an archive's are. With LogAppendTime topics timestamps grow with offsets and the offset range is the exact
  slice; with CreateTime (the producer's clock, what CDC connectors set) a record stamped earlier than ``end`` that
  was appended after the first record at or after ``end`` is not read, as a consumer reading by time would not.

A nightly run goes on where the published state stopped (``--resume``; the DAG's scheduled runs): the published
pointer remembers, per partition, the offset up to which the state has read (``read_to``), and the run reads from
there to the log's end, whatever its start/end say. A partition the state never read starts at the log's earliest
offset. Offsets the state never read that retention has already deleted cannot be replayed: they are reported as a
gap (``kafka.lost_to_retention`` and ``gaps`` in the manifest, and the run's output), never skipped silently. A log
that ends before the remembered offset (the topic was deleted and created again) is an error naming the partition.

Spark's batch Kafka source then reads those offset ranges (one task per partition), headers included. Records
the log no longer holds (deleted by retention after the offsets were resolved) fail the read rather than go
missing silently (``failOnDataLoss``). Offsets absent inside a range -- compacted topics, transaction markers -- are
gaps, reported in the manifest as an archive's are.

Connection settings beyond the brokers' addresses -- TLS, SASL, credentials -- never come from the pipelines file:
each ``CDCREPLAY_KAFKA_<NAME>`` variable of the environment is the Kafka client property ``<name>`` (lower case,
``_`` for ``.``), e.g. ``CDCREPLAY_KAFKA_SECURITY_PROTOCOL=SASL_SSL``, ``CDCREPLAY_KAFKA_SASL_MECHANISM=SCRAM-SHA-512``,
``CDCREPLAY_KAFKA_SASL_JAAS_CONFIG=...``, ``CDCREPLAY_KAFKA_SSL_TRUSTSTORE_LOCATION=...``. They reach both the admin
client on the driver and Spark's consumers on the executors (as ``kafka.<name>`` options); the manifest records
their names, never their values.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay.archive import ArchiveError, Selection
from cdcreplay.config import PipelineConfig
from cdcreplay.contracts import KAFKA_PROPERTIES_NOT_FROM_ENVIRONMENT, KAFKA_VARIABLE_PREFIX, kafka_property
from cdcreplay.schema import RAW_DDL, struct_type
from cdcreplay.storage import Location

# How long the driver waits for the cluster to answer (metadata, offsets) before the run fails naming the brokers.
# CDCREPLAY_KAFKA_DEFAULT_API_TIMEOUT_MS overrides it, like any client property.
ADMIN_TIMEOUT_MS = 20_000

log = logging.getLogger(__name__)


class KafkaSourceError(ArchiveError):
    """The cluster cannot serve the run as configured; the message names the field or parameter and the fix."""


class _UnknownTopic(KafkaSourceError):
    """A topic the cluster does not have (the caller names which, and the topics there are)."""


def client_settings(environment: dict[str, str] | None = None) -> dict[str, str]:
    """Kafka client properties from ``CDCREPLAY_KAFKA_*`` variables (security, credentials, timeouts)."""
    environment = os.environ if environment is None else environment
    settings = {}
    for name, value in environment.items():
        if not name.startswith(KAFKA_VARIABLE_PREFIX) or len(name) == len(KAFKA_VARIABLE_PREFIX):
            continue
        key = kafka_property(name)
        if key in KAFKA_PROPERTIES_NOT_FROM_ENVIRONMENT:
            raise KafkaSourceError(
                f"environment variable {name} sets {key}, which the pipeline config or the replay decides; unset it"
                + (" and give archive.bootstrap_servers in the pipelines file" if key == "bootstrap.servers" else "")
            )
        settings[key] = value
    return settings


@dataclass(frozen=True)
class PartitionRange:
    """What one partition's log holds ([earliest, latest)) and what the run reads of it ([start, until))."""

    topic: str
    partition: int
    earliest: int
    latest: int
    start: int
    until: int


class _Admin:
    """Kafka's admin client in the driver's JVM, through the session's py4j gateway."""

    def __init__(self, spark: SparkSession, servers: list[str], settings: dict[str, str]):
        self._jvm = spark.sparkContext._jvm
        self._servers = servers
        properties = self._jvm.java.util.Properties()
        properties.setProperty("bootstrap.servers", ",".join(servers))
        for key, value in settings.items():
            properties.setProperty(key, value)
        # The client refuses an API timeout shorter than one request's: derive the request's from the API's.
        try:
            self.timeout_ms = int(settings.get("default.api.timeout.ms", ADMIN_TIMEOUT_MS))
        except ValueError:
            raise KafkaSourceError(
                f"{KAFKA_VARIABLE_PREFIX}DEFAULT_API_TIMEOUT_MS must be a whole number of milliseconds"
            ) from None
        properties.setProperty("default.api.timeout.ms", str(self.timeout_ms))
        if "request.timeout.ms" not in settings:
            properties.setProperty("request.timeout.ms", str(max(1, self.timeout_ms // 2)))
        try:
            self._client = self._jvm.org.apache.kafka.clients.admin.AdminClient.create(properties)
        except Py4JJavaError as error:  # a setting the client rejects (ConfigException): a config problem
            raise _explained(error, "create a client", servers, self.timeout_ms) from None

    def close(self) -> None:
        self._client.close(self._jvm.java.time.Duration.ofSeconds(5))

    def _get(self, future, what: str):
        try:
            return future.get(self.timeout_ms + 5_000, self._jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
        except Py4JJavaError as error:
            raise _explained(error, what, self._servers, self.timeout_ms) from None

    def partitions(self, topics: list[str]) -> dict[str, list[int]]:
        described = self._get(self._client.describeTopics(topics).allTopicNames(), "describe topics")
        return {
            topic: sorted(info.partition() for info in described.get(topic).partitions()) for topic in sorted(topics)
        }

    def topic_names(self) -> list[str]:
        return sorted(self._get(self._client.listTopics().names(), "list topics"))

    def offsets(self, partitions: list[tuple[str, int]], spec: str, timestamp_ms: int | None = None) -> dict:
        """Per partition: the earliest or latest offset, or (``timestamp``) the first offset whose record timestamp
        is at or after ``timestamp_ms`` -- None when no record is (the bound lies past the log's end)."""
        kafka = self._jvm.org.apache.kafka
        if spec == "earliest":
            offset_spec = kafka.clients.admin.OffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = kafka.clients.admin.OffsetSpec.latest()
        else:
            offset_spec = kafka.clients.admin.OffsetSpec.forTimestamp(timestamp_ms)
        request = self._jvm.java.util.HashMap()
        handles = {}
        for topic, partition in partitions:
            handle = kafka.common.TopicPartition(topic, partition)
            handles[(topic, partition)] = handle
            request.put(handle, offset_spec)
        answered = self._get(self._client.listOffsets(request).all(), f"list {spec} offsets")
        offsets = {}
        for key, handle in handles.items():
            offset = answered.get(handle).offset()
            offsets[key] = None if offset < 0 else offset
        return offsets


def _explained(error, what: str, servers: list[str], timeout_ms: int) -> KafkaSourceError:
    """A Java exception of the admin client as a message naming the field and the fix."""
    causes = []
    throwable = error.java_exception
    while throwable is not None and len(causes) < 5:
        causes.append((throwable.getClass().getName(), str(throwable.getMessage())))
        throwable = throwable.getCause()
    names = " ".join(name for name, _ in causes)
    detail = "; ".join(f"{name.rsplit('.', 1)[-1]}: {message}" for name, message in causes[1:] or causes)
    where = ",".join(servers)
    if "UnknownTopicOrPartitionException" in names:
        return _UnknownTopic(detail)
    if "ConfigException" in names:
        return KafkaSourceError(
            f"{KAFKA_VARIABLE_PREFIX}* variables: the Kafka client rejects a setting ({detail}); "
            "fix or unset the variable"
        )
    if "TimeoutException" in names:
        return KafkaSourceError(
            f"archive.bootstrap_servers: no Kafka broker at {where} answered ({what}) within {timeout_ms // 1000} s; "
            "check the addresses in the pipelines file, that the brokers run and are reachable from here, and the "
            f"TLS/SASL settings in the {KAFKA_VARIABLE_PREFIX}* variables"
        )
    if any(word in names for word in ("Authentication", "Authorization", "Ssl", "Sasl")):
        return KafkaSourceError(
            f"archive.bootstrap_servers: the cluster at {where} refused the connection ({what}): {detail}; check the "
            f"credentials and TLS/SASL settings in the {KAFKA_VARIABLE_PREFIX}* variables"
        )
    return KafkaSourceError(f"archive.bootstrap_servers: {what} failed on the cluster at {where}: {detail}")


def _millis(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def plan_ranges(
    admin: _Admin, pipeline: PipelineConfig, selection: Selection, resume_from: dict | None = None
) -> list[PartitionRange]:
    """The offset range of every partition the run reads, fixed before any record is read. ``resume_from``: the
    offsets read up to before ({topic: {partition: offset}}, see :func:`read_to`), where a resumed run starts; the
    selection's offsets and start are then not used (its end still bounds the range)."""
    topics = list(selection.topics)
    try:
        partitions = admin.partitions(topics)
    except _UnknownTopic:
        present = set(admin.topic_names())
        missing = [topic for topic in topics if topic not in present]
        shown = ", ".join(sorted(present)[:20]) or "none"
        raise KafkaSourceError(
            f"pipelines.{pipeline.name}.topics: topic(s) {', '.join(missing) or ', '.join(topics)} do not exist on the "
            f"cluster at {','.join(pipeline.archive.bootstrap_servers)} (topics there: {shown}); fix the pipeline's "
            "topics, or archive.bootstrap_servers if this is the wrong cluster"
        ) from None
    coordinates = [(topic, partition) for topic in topics for partition in partitions[topic]]
    earliest = admin.offsets(coordinates, "earliest")
    latest = admin.offsets(coordinates, "latest")
    held = {c: (earliest[c] or 0, latest[c] or 0) for c in coordinates}

    bounds = {c: held[c] for c in coordinates}
    if resume_from is not None:
        bounds = _resumed(pipeline, held, resume_from)
    elif selection.offsets:
        bounds = {}
        for r in selection.offsets:
            where = f"parameter offsets.{r.topic}.{r.partition}"
            if (r.topic, r.partition) not in held:
                known = partitions.get(r.topic)
                raise KafkaSourceError(
                    f"{where}: the topic has no partition {r.partition} on the cluster; partitions: {known}"
                    if known is not None
                    else f"{where}: topic {r.topic} is not one of the pipeline's topics ({', '.join(topics)})"
                )
            low, high = held[(r.topic, r.partition)]
            if low >= high or r.start >= high or r.until <= low:
                raise KafkaSourceError(
                    f"{where}: requested [{r.start}, {r.until}) but the partition's log holds offsets "
                    + (f"{low}..{high - 1}" if low < high else "none (it is empty)")
                    + "; choose a range that overlaps them"
                )
            bounds[(r.topic, r.partition)] = (max(r.start, low), min(r.until, high))
    chosen = sorted(bounds)
    if selection.start is not None and resume_from is None:
        at_start = admin.offsets(chosen, "timestamp", _millis(selection.start))
        bounds = {
            c: (max(low, at_start[c] if at_start[c] is not None else held[c][1]), high)
            for c, (low, high) in bounds.items()
        }
    if selection.end is not None:
        at_end = admin.offsets(chosen, "timestamp", _millis(selection.end))
        bounds = {
            c: (low, min(high, at_end[c] if at_end[c] is not None else held[c][1])) for c, (low, high) in bounds.items()
        }
    return [
        PartitionRange(topic, partition, held[(topic, partition)][0], held[(topic, partition)][1], low, max(low, high))
        for (topic, partition), (low, high) in sorted(bounds.items())
    ]


def _resumed(pipeline: PipelineConfig, held: dict, resume_from: dict) -> dict:
    """Per partition, [the offset read up to before (a new partition: its earliest), the log's end)."""
    bounds = {}
    for (topic, partition), (earliest, latest) in sorted(held.items()):
        start = resume_from.get(topic, {}).get(str(partition), earliest)
        if start > latest:
            raise KafkaSourceError(
                f"pipelines.{pipeline.name}: partition {topic}/{partition} ends at offset {latest}, but it was read up "
                f"to offset {start} before: the topic was deleted and created again, or is another cluster's; start "
                "afresh (a replay: --full-rebuild or --offsets; an archive: a new archive.copy_to)"
            )
        bounds[(topic, partition)] = (max(start, earliest), latest)
    return bounds


def lost_to_retention(ranges: list[PartitionRange], resume_from: dict) -> list[dict]:
    """The offsets a resumed run should have read first but the log no longer holds (deleted by retention before
    any run read them), per partition, as the manifest's gaps name missing offsets."""
    lost = []
    for r in ranges:
        wanted = resume_from.get(r.topic, {}).get(str(r.partition))
        if wanted is not None and wanted < r.earliest:
            lost.append(
                {"topic": r.topic, "partition": r.partition, "from_offset": wanted, "to_offset": r.earliest - 1}
            )
    return lost


def read_to(previous: dict | None, ranges: list[dict]) -> dict:
    """The offsets a state has read up to after a run that read ``ranges`` (the manifest's ``kafka.ranges``) onto a
    state that had read up to ``previous``: per partition, the run's end (its ``until``) where it read the partition,
    else what the state had."""
    offsets = {topic: dict(partitions) for topic, partitions in (previous or {}).items()}
    for r in ranges:
        offsets.setdefault(r["topic"], {})[str(r["partition"])] = r["until"]
    return offsets


def read_ranges(
    spark: SparkSession, servers: list[str], settings: dict[str, str], ranges: list[PartitionRange]
) -> DataFrame:
    """The records of ``ranges`` through Spark's batch Kafka source, as the raw record columns (schema.RAW_DDL)."""
    raw_schema = struct_type(RAW_DDL)
    reading = [r for r in ranges if r.until > r.start]
    if not reading:
        return spark.createDataFrame([], raw_schema)
    assign, starting, ending = {}, {}, {}
    for r in reading:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.until
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", ",".join(servers))
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
    )
    for key, value in settings.items():
        reader = reader.option(f"kafka.{key}", value)
    frame = reader.load()
    return frame.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in raw_schema.fields])


def read_topics(
    spark: SparkSession, pipeline: PipelineConfig, selection: Selection, resume_from: dict | None = None
) -> tuple[list[str], DataFrame, dict]:
    """The records of ``archive.layout: kafka``'s selection, for the read stage (pipeline.read_slice): the topics
    read, as kafka:// sources; their records in the offset ranges resolved for ``selection`` (the stage still applies
    the selection itself: the archive's exact timestamp rule, a CreateTime stamped out of order inside a range left
    out); and what the manifest adds for a cluster (brokers, topics, client setting names, ranges, and for a resumed
    run where it resumed and what retention deleted before it could)."""
    servers = list(pipeline.archive.bootstrap_servers or ())
    settings = client_settings()
    admin = _Admin(spark, servers, settings)
    try:
        ranges = plan_ranges(admin, pipeline, selection, resume_from)
    finally:
        admin.close()
    sources = [f"kafka://{','.join(servers)}/{topic}" for topic in selection.topics]
    facts = {
        "kafka": {
            "bootstrap_servers": servers,
            "topics": list(selection.topics),
            "client_settings": sorted(settings),  # names only: values may be secrets
            "ranges": [asdict(r) for r in ranges],
        }
    }
    if resume_from is not None:
        lost = lost_to_retention(ranges, resume_from)
        for gap in lost:
            log.warning(
                "%s: offsets %s..%s of %s/%s were deleted by retention before they were read: they cannot be read now",
                pipeline.name, gap["from_offset"], gap["to_offset"], gap["topic"], gap["partition"],
            )  # fmt: skip
        facts["kafka"]["resumed_from"] = resume_from
        facts["kafka"]["lost_to_retention"] = lost
    return sources, read_ranges(spark, servers, settings, ranges), facts


def stage_records(spark: SparkSession, records: DataFrame, folder: Location) -> DataFrame:
    """``records`` fetched from the brokers once, kept as Parquet in ``folder`` (the run's own folder) and read from
    there by the rest of the run.

    A DataFrame over Spark's Kafka source fetches its records from the brokers again on every action, and a run makes
    several passes over them: the manifest's extents, the decoder's pass that finds table versions, the native pass,
    the records it leaves to Python. At 2.3M Debezium records each fetch took ~14 s against 1-2 s for a Parquet scan.
    The offsets are fixed before the first fetch, so every pass would read the same records anyway; the copy only
    spares the brokers and the run the repeats. The run removes it once decoded: from then on the decoded changelog is
    the run's record of them."""
    records.write.mode("overwrite").parquet(str(folder))
    return spark.read.schema(struct_type(RAW_DDL)).parquet(str(folder))
