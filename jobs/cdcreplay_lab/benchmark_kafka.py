"""`cdcreplay benchmark --from-kafka`: the same archive replayed straight from a Kafka broker, beside the archive read.

A one-node broker (``kafka_broker``, from the jars ``python -m cdcreplay.jars --test-servers`` fetches) starts on
127.0.0.1 for the benchmark; each format's simulated archive is produced to it at the archive's own offsets, then
replayed as a pipeline with ``archive.layout: kafka``. The replay is the same full rebuild as the archive's, so the two
rows of the result differ only in where the records come from. Producing is set-up, not measured.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from cdcreplay_lab.kafka_broker import produce

BATCH_ROWS = 10_000


def archive_records(archive: Path) -> Iterator[SimpleNamespace]:
    """The records of a simulated Parquet archive, file by file in name order: the order the simulator wrote them,
    offset order within each partition (``produce`` checks that the broker agrees)."""
    import pyarrow.parquet as pq

    for path in sorted(archive.rglob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
            for row in batch.to_pylist():
                headers = [(h["key"], h["value"]) for h in row["headers"] or ()]
                yield SimpleNamespace(**{**row, "headers": headers})


def partitions_of(archive: Path) -> dict[str, int]:
    """Partitions per topic of the archive (the highest partition number + 1), from its coordinates alone."""
    import pyarrow.parquet as pq

    found: dict[str, int] = {}
    for path in sorted(archive.rglob("*.parquet")):
        table = pq.read_table(path, columns=["topic", "partition"]).group_by("topic").aggregate([("partition", "max")])
        for topic, highest in zip(table["topic"].to_pylist(), table["partition_max"].to_pylist(), strict=True):
            found[topic] = max(found.get(topic, 0), highest + 1)
    return found


def put_on_broker(bootstrap: str, archive: Path) -> tuple[list[str], int]:
    """Produce the archive to the broker; its topics and the number of records produced."""
    partitions = partitions_of(archive)
    return sorted(partitions), produce(bootstrap, archive_records(archive), partitions)
