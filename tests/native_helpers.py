"""What the tests of the one-record-one-row native paths (Debezium JSON and Avro) share: archive records from
(key, value, headers) triples, decoded rows by coordinates, and the comparison with the Python decoder."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F

from cdcreplay.formats.common import DECODED_COLUMNS
from cdcreplay.formats.wire import native_json as N

RECORD_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>"
)


def records_frame(spark, records: list[tuple]):
    """(key, value, headers) triples -> archive records of topic t, partition 0, at offsets 0.."""
    rows = [("t", 0, offset, None, key, value, headers) for offset, (key, value, headers) in enumerate(records)]
    return spark.createDataFrame(rows, RECORD_DDL)


def rows_by_coordinates(frame) -> dict:
    return {(r.topic, r.partition, r.offset, r.row_index, r.record_kind): r.asDict() for r in frame.collect()}


def two_pass_write(spark, module, records, pipeline, path: str):
    """The rows the job's two-pass write (``native_json.write_decoded``: native rows, then the flagged records in
    Python) leaves in ``path``, read back; no record is left pending between the passes."""
    N.write_decoded(
        module.decode_natively(records, pipeline),
        records,
        lambda rest: module.decode_in_python(rest, pipeline),
        path,
    )
    assert not Path(path, f"record_kind={N.PENDING}").exists()
    return spark.read.parquet(path).select(*DECODED_COLUMNS)


def native_flags(module, records, pipeline) -> list[bool]:
    """Native rows equal the Python decoder's for the records the native path takes; ``decode`` equals the Python
    decoder on every record. ``module``: a format with a native path (``decode_natively``, ``decode_in_python``,
    ``decode``). Returns each record's native flag, in offset order."""
    native = module.decode_natively(records, pipeline).cache()
    taken = native.where(F.col(N.NATIVE_FLAG)).select(*DECODED_COLUMNS)
    reference = rows_by_coordinates(module.decode_in_python(records, pipeline))
    differences = {
        key: {f: (row[f], reference.get(key, {}).get(f)) for f in row if row[f] != reference.get(key, {}).get(f)}
        for key, row in rows_by_coordinates(taken).items()
        if row != reference.get(key)
    }
    assert not differences, f"native rows differ from the Python decoder's: {list(differences.items())[:3]}"
    assert rows_by_coordinates(module.decode(records, pipeline)) == reference
    flags = {r.offset: r[N.NATIVE_FLAG] for r in native.select("offset", N.NATIVE_FLAG).collect()}
    native.unpersist()
    return [flags[offset] for offset in sorted(flags)]
