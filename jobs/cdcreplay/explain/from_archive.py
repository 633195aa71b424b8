"""A run's changes of one key decoded again from the archive, when the run's decoded changelog is gone.

A run's decoded folder is about as large as the slice of the archive it read, so teams delete old ones to save space.
The run's manifest still names the archive files it read and its selection (topics, time range, offsets), so the
key's events of that run can still be told: the records are read again from those files (only the topics that carry
the table), decoded by the pipeline's decoder with the run's base state, and filtered on the table and the key as
the run's changelog would be. It costs a decode of those topics' records instead of a filtered scan: seconds for a
night, minutes for a large history. The story's sources say which runs were decoded again, and from what.

Not decoded again: a run that read a Kafka cluster (``archive.layout: kafka``; its records are in the brokers, or in
``archive.copy_to`` under another pipeline's name) and a run whose archive files are gone as well. Those stay
"missing", and the story says it is incomplete.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay import schema as S
from cdcreplay.explain.request import ExplainRequest, RunFiles
from cdcreplay.formats import decoder_module
from cdcreplay.formats.routing import KIND_CHANGE
from cdcreplay.run_spec import OffsetRange
from cdcreplay.spark import VECTORIZED_READER, session_settings
from cdcreplay.state_store import read_state, read_state_ref, table_state
from cdcreplay.storage import Location
from cdcreplay.warehouse import read_json


@dataclass(frozen=True)
class Redecoded:
    """A run's changelog rows of the key decoded again (``rows`` None when they could not be), and why or from what."""

    rows: DataFrame | None
    note: str


def topics_of_table(spark: SparkSession, table_id: str, state_ref: dict | None, known: set[str]) -> tuple[str, ...]:
    """The topics the table's rows came from: ``known`` (the key's events read from other runs) and the topics of the
    table's rows in the state the story ends with (``state_ref``). Empty when neither names one: then every topic is
    decoded."""
    topics = set(known)
    if state_ref:
        state = read_state(spark, state_ref["path"], state_ref["version"], keep_partition=True)
        topics |= {row.topic for row in table_state(state, table_id).select("topic").distinct().collect()}
    return tuple(sorted(topics))


def redecode_run(
    spark: SparkSession, request: ExplainRequest, run: RunFiles, topics: tuple[str, ...], of_key: Column
) -> Redecoded:
    """The key's changelog rows (and its table's truncates, both as ``of_key`` picks them) of ``run``, decoded again
    from the files its manifest names."""
    pipeline = request.pipeline
    if pipeline.archive.layout == "kafka":
        return Redecoded(None, "the run read Kafka brokers, whose records are not read again")
    manifest_path = run.summary.manifest_path
    if not manifest_path or not Location(manifest_path).is_file():
        return Redecoded(None, "its manifest is gone too, so the records it read are unknown")
    manifest = read_json(manifest_path)
    files = manifest.get("files") or []
    gone = [path for path in files if not Location(path).exists()]
    if gone:
        return Redecoded(None, f"{len(gone)} of the {len(files)} archive files it read are gone too, e.g. {gone[0]}")
    selection = run_selection(manifest["selection"], topics)
    # The decoders feed Python workers from the Parquet scan: the vectorized reader must be off (cdcreplay.spark).
    with session_settings(spark, {VECTORIZED_READER: "false"}):
        try:
            records = archive.select_records(archive.read_archive(spark, files, pipeline.archive.layout), selection)
            if manifest.get("duplicates"):
                records = archive.deduplicate(records)
            base_state = read_state_ref(spark, run.summary.base_state) if run.summary.base_state else None
            decoded = decoder_module(pipeline.format).decode(records, pipeline, base_state=base_state)
            rows = (
                decoded.where((F.col("record_kind") == KIND_CHANGE) & of_key)
                .select(*S.CHANGELOG_COLUMNS)
                .localCheckpoint()  # decoded once, here, where the vectorized reader is off
            )
        except PySparkException as exc:
            return Redecoded(None, f"its archive files could not be read again: {str(exc).splitlines()[0]}")
    read = f"topics {', '.join(selection.topics)}" if selection.topics else "every topic"
    return Redecoded(rows, f"decoded again from {read} of the {len(files)} archive files its manifest names")


def run_selection(recorded: dict, topics: tuple[str, ...]) -> archive.Selection:
    """The selection a manifest recorded (``archive.build_manifest``), narrowed to ``topics`` when given."""
    chosen = tuple(recorded.get("topics") or ())
    if topics:
        chosen = tuple(t for t in topics if not chosen or t in chosen)
    return archive.Selection(
        topics=chosen,
        start=datetime.fromisoformat(recorded["start"]) if recorded.get("start") else None,
        end=datetime.fromisoformat(recorded["end"]) if recorded.get("end") else None,
        offsets=tuple(OffsetRange(**r) for r in recorded.get("offsets") or ()),
    )
