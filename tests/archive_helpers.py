"""Build small archives of Kafka records (Spark's Kafka-source columns) for tests, with pyarrow."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    value: bytes | str | None
    key: bytes | str | None = None
    timestamp: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    headers: list = field(default_factory=list)


def _bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else value


def records_from_lines(path: Path, topic: str = "t", key: str | None = None) -> list[Record]:
    """One record per non-empty line of a captured-messages file, consecutive offsets in partition 0."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").split("\n") if line.strip()]
    return [Record(topic, 0, i, line, key) for i, line in enumerate(lines)]


def write_parquet(records: list[Record], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(
        [
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestampType": 0,
                "key": _bytes(r.key),
                "value": _bytes(r.value),
                "headers": [{"key": k, "value": _bytes(v)} for k, v in r.headers],
            }
            for r in records
        ],
        schema=ARROW_SCHEMA,
    )
    pq.write_table(table, path)
    return path


def pipeline_config(
    tmp: Path,
    name: str,
    fmt: str,
    archive: Path,
    layout: str = "parquet",
    extra: str = "",
    settings: dict | None = None,
) -> Path:
    """A pipelines file for one pipeline; ``extra`` is YAML appended under the pipeline (indented 4 spaces) and
    ``settings`` more entries of it (the simulator's ``history.pipeline_settings``: options, tables)."""
    if settings:
        import yaml

        extra += "".join(f"    {line}\n" for line in yaml.safe_dump(settings, sort_keys=True).splitlines())
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"warehouse: {tmp / 'warehouse'}\n"
        f"pipelines:\n"
        f"  - name: {name}\n"
        f"    format: {fmt}\n"
        f"    archive: {{path: {archive}, layout: {layout}}}\n" + extra,
        encoding="utf-8",
    )
    return config


def confluent(schema_id: int, schema: dict, record: dict) -> bytes:
    """``record`` as Confluent's Avro serializers frame it: 0x00, the 4-byte big-endian schema id, the Avro body."""
    stream = io.BytesIO()
    stream.write(b"\x00" + struct.pack(">I", schema_id))
    fastavro.schemaless_writer(stream, fastavro.parse_schema(schema), record)
    return stream.getvalue()
