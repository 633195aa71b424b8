"""Write Kafka records the way users archive them: Spark's Kafka-source columns in Parquet, JSON lines, or kcat -J.

Every layout uses Hive-style folders ``topic=<topic>/part-NNNNN.<ext>``; the files still carry the ``topic`` column
(readers must trust the columns, not the folder names). Records are written in the order they come, in batches, so
an archive of millions of records never sits in memory as Python objects.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cdcreplay_lab.simulator.records import KafkaRecord

LAYOUTS = ("parquet", "jsonl", "kcat")
LAYOUT_EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl", "kcat": ".json"}
TIMESTAMP_TYPE_CREATE = 0  # Kafka CreateTime: the producer's timestamp, here the source event time

EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)

PARQUET_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
    ]
)
BATCH_ROWS = 20_000
BATCH_BYTES = 48 << 20


def _micros(timestamp: datetime) -> int:
    return (timestamp - EPOCH_UTC) // ONE_MICROSECOND


class _ParquetSink:
    """One topic's Parquet files. Arrow encoding and compression run on a background thread (they release the GIL),
    overlapping the Python work that produces the next batch."""

    def __init__(self, folder: Path, rows_per_file: int, jobs: queue.Queue, files: list[str]) -> None:
        self.folder, self.rows_per_file, self.jobs, self.files = folder, rows_per_file, jobs, files
        self.file_index = 0
        self.rows_in_file = 0
        self.writer: pq.ParquetWriter | None = None
        self._reset()

    def _reset(self) -> None:
        self.partition: list[int] = []
        self.offset: list[int] = []
        self.timestamp: list[int] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.headers: list[list[tuple[str, bytes]] | None] = []
        self.topic: str = ""
        self.bytes = 0

    def add(self, record: KafkaRecord, micros: int) -> None:
        self.topic = record.topic
        self.partition.append(record.partition)
        self.offset.append(record.offset)
        self.timestamp.append(micros)
        self.key.append(record.key)
        self.value.append(record.value)
        self.headers.append(record.headers)
        if record.value is not None:
            self.bytes += len(record.value)
        if (
            len(self.offset) >= BATCH_ROWS
            or self.bytes >= BATCH_BYTES
            or (self.rows_in_file + len(self.offset) >= self.rows_per_file)
        ):
            self.flush()

    def flush(self) -> None:
        count = len(self.offset)
        if not count:
            return
        table = pa.Table.from_arrays(
            [
                pa.array([self.topic] * count, pa.string()),
                pa.array(self.partition, pa.int32()),
                pa.array(self.offset, pa.int64()),
                pa.array(self.timestamp, pa.timestamp("us", tz="UTC")),
                pa.array([TIMESTAMP_TYPE_CREATE] * count, pa.int32()),
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.headers, PARQUET_SCHEMA.field("headers").type),
            ],
            schema=PARQUET_SCHEMA,
        )
        if self.writer is None:
            path = self.folder / f"part-{self.file_index:05d}.parquet"
            self.folder.mkdir(parents=True, exist_ok=True)
            # Dictionary encoding only pays for the repeated topic name; payloads are unique.
            self.writer = pq.ParquetWriter(
                path, PARQUET_SCHEMA, compression="zstd", compression_level=1, use_dictionary=["topic"]
            )
            self.files.append(str(path))
        self.jobs.put((self.writer, table))
        self.rows_in_file += count
        if self.rows_in_file >= self.rows_per_file:
            self.jobs.put((self.writer, None))
            self.writer = None
            self.file_index += 1
            self.rows_in_file = 0
        self._reset()

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.jobs.put((self.writer, None))
            self.writer = None


def _parquet_worker(jobs: queue.Queue, errors: list[BaseException]) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        writer, table = job
        try:
            if errors:
                continue
            if table is None:
                writer.close()
            else:
                writer.write_table(table)
        except BaseException as exc:  # reported by the producer thread
            errors.append(exc)


def _write_parquet(records: Iterable[KafkaRecord], out_dir: Path, rows_per_file: int) -> tuple[list[str], int, dict]:
    files: list[str] = []
    jobs: queue.Queue = queue.Queue(maxsize=4)  # bounds memory: at most a few batches wait for the writer
    errors: list[BaseException] = []
    worker = threading.Thread(target=_parquet_worker, args=(jobs, errors), daemon=True)
    worker.start()
    sinks: dict[str, _ParquetSink] = {}
    counts: dict[str, int] = {}
    total = 0
    last_timestamp, last_micros = None, 0
    try:
        for record in records:
            sink = sinks.get(record.topic)
            if sink is None:
                sink = sinks[record.topic] = _ParquetSink(
                    _topic_folder(out_dir, record.topic), rows_per_file, jobs, files
                )
                counts[record.topic] = 0
            if record.timestamp is not last_timestamp:
                last_timestamp, last_micros = record.timestamp, _micros(record.timestamp)
            sink.add(record, last_micros)
            counts[record.topic] += 1
            total += 1
            if errors:
                break
        for sink in sinks.values():
            sink.close()
    finally:
        jobs.put(None)
        worker.join()
    if errors:
        raise errors[0]
    return files, total, counts


class _TextSink:
    """One topic's JSON-lines files, rolled every ``rows_per_file`` lines."""

    def __init__(self, folder: Path, extension: str, rows_per_file: int, files: list[str]) -> None:
        self.folder, self.extension, self.rows_per_file, self.files = folder, extension, rows_per_file, files
        self.file_index = 0
        self.rows_in_file = 0
        self.handle = None
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)
        if len(self.lines) >= 5_000 or self.rows_in_file + len(self.lines) >= self.rows_per_file:
            self.flush()

    def flush(self) -> None:
        if not self.lines:
            return
        if self.handle is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"part-{self.file_index:05d}{self.extension}"
            self.handle = path.open("w", encoding="utf-8", newline="\n")
            self.files.append(str(path))
        self.handle.write("\n".join(self.lines))
        self.handle.write("\n")
        self.rows_in_file += len(self.lines)
        self.lines = []
        if self.rows_in_file >= self.rows_per_file:
            self.handle.close()
            self.handle = None
            self.file_index += 1
            self.rows_in_file = 0

    def close(self) -> None:
        self.flush()
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def _b64(data: bytes | None) -> str:
    return "null" if data is None else '"' + base64.b64encode(data).decode("ascii") + '"'


def _text(data: bytes | None) -> str:
    # kcat prints key and payload as text; binary that is not UTF-8 cannot be represented in that layout.
    return "null" if data is None else json.dumps(data.decode("utf-8"), ensure_ascii=False)


def jsonl_line(record: KafkaRecord) -> str:
    """Spark's Kafka-source columns as one JSON object: key/value/header values base64, timestamp ISO-8601 UTC."""
    timestamp = record.timestamp.astimezone(UTC)
    iso = timestamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{timestamp.microsecond // 1000:03d}Z"
    headers = ",".join(
        '{"key":' + json.dumps(k, ensure_ascii=False) + ',"value":' + _b64(v) + "}" for k, v in record.headers
    )
    return (
        '{"topic":' + json.dumps(record.topic, ensure_ascii=False)
        + f',"partition":{record.partition},"offset":{record.offset},"timestamp":"{iso}",'
        + f'"timestampType":{TIMESTAMP_TYPE_CREATE},"key":{_b64(record.key)},"value":{_b64(record.value)},'
        + '"headers":[' + headers + "]}"
    )  # fmt: skip


def kcat_line(record: KafkaRecord) -> str:
    """One line of ``kcat -C -J``: text key and payload, epoch-ms ``ts``, headers as a flat [k, v, ...] list."""
    line = (
        '{"topic":' + json.dumps(record.topic, ensure_ascii=False)
        + f',"partition":{record.partition},"offset":{record.offset},"tstype":"create",'
        + f'"ts":{_micros(record.timestamp) // 1000},"broker":0'
    )  # fmt: skip
    if record.headers:
        flat = []
        for k, v in record.headers:
            flat.append(json.dumps(k, ensure_ascii=False))
            flat.append(_text(v))
        line += ',"headers":[' + ",".join(flat) + "]"
    return line + ',"key":' + _text(record.key) + ',"payload":' + _text(record.value) + "}"


def _write_text(
    records: Iterable[KafkaRecord], out_dir: Path, layout: str, rows_per_file: int
) -> tuple[list[str], int, dict]:
    files: list[str] = []
    sinks: dict[str, _TextSink] = {}
    counts: dict[str, int] = {}
    render = jsonl_line if layout == "jsonl" else kcat_line
    total = 0
    for record in records:
        sink = sinks.get(record.topic)
        if sink is None:
            folder = _topic_folder(out_dir, record.topic)
            sink = sinks[record.topic] = _TextSink(folder, LAYOUT_EXTENSIONS[layout], rows_per_file, files)
            counts[record.topic] = 0
        sink.add(render(record))
        counts[record.topic] += 1
        total += 1
    for sink in sinks.values():
        sink.close()
    return files, total, counts


def _topic_folder(out_dir: Path, topic: str) -> Path:
    if not topic or "/" in topic or topic in (".", ".."):
        raise ValueError(f"topic {topic!r} cannot name a folder")
    return out_dir / f"topic={topic}"


def write_archive(
    records: Iterable[KafkaRecord], out_dir: Path | str, layout: str = "parquet", rows_per_file: int = 200_000
) -> dict:
    """Write ``records`` under ``out_dir`` in ``layout``; returns {"layout", "files", "records", "topics"}."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown archive layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    if rows_per_file < 1:
        raise ValueError(f"rows_per_file={rows_per_file} must be at least 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if layout == "parquet":
        files, total, counts = _write_parquet(records, out, rows_per_file)
    else:
        files, total, counts = _write_text(records, out, layout, rows_per_file)
    return {"layout": layout, "files": sorted(files), "records": total, "topics": counts}


def build_sample_archive(
    out_dir: Path | str,
    format: str,
    events: int,
    seed: int,
    layout: str = "parquet",
    schemas: bool = True,
    drift: int = 0,
    rows_per_file: int = 200_000,
    **history_options,
):
    """Simulate a history, encode it in ``format`` and archive it under ``out_dir`` in one streaming pass.

    Returns the History (its summary is already computed); ``history.archive`` holds what ``write_archive`` returned
    and ``history.pipeline_settings`` the pipeline config entries a reader of this archive needs (options, tables).
    ``history_options`` go to ``simulate`` (start, days). ``schemas`` applies to debezium-json only.
    """
    from cdcreplay_lab.simulator.encoders import encoder
    from cdcreplay_lab.simulator.history import simulate

    chosen = encoder(format)
    history = simulate(seed=seed, events=events, drift=drift, **history_options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    options = {"schemas": schemas} if format == "debezium-json" else {}
    records = chosen.encode(history, out, **options)
    history.archive = write_archive(records, out, layout=layout, rows_per_file=rows_per_file)
    history.pipeline_settings = chosen.pipeline(out)
    return history
