"""What the tests of the one-record-one-row native paths (Debezium JSON and Avro) share: archive records from
(key, value, headers) triples, decoded rows by coordinates, and the comparison with the Python decoder."""

from __future__ import annotations

import json
from collections import Counter
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


def decoded_rows(frame) -> Counter:
    """The decoded rows as a multiset (a key change gives two rows of one record and row index)."""
    return Counter(
        json.dumps(r.asDict(), sort_keys=True, default=str) for r in frame.select(*DECODED_COLUMNS).collect()
    )


def native_flags_of_messages(spark, module, values: list[bytes], pipeline) -> list[bool]:
    """For formats whose message may hold several rows: native rows equal the Python decoder's for the records the
    native path takes, ``decode`` equals the Python decoder on every record, each record is decoded by exactly one
    path. ``values``: Kafka values at offsets 0..; returns each record's native flag (all False when no table of the
    input has a native plan)."""
    records = records_frame(spark, [(b"t", value, []) for value in values])
    reference = decoded_rows(module.decode_in_python(records, pipeline))
    assert decoded_rows(module.decode(records, pipeline)) == reference
    native = module.decode_natively(records, pipeline)
    if native is None:
        return [False] * len(values)
    native = native.cache()
    taken = decoded_rows(native.where(F.col(N.NATIVE_FLAG)))
    assert not taken - reference, f"native rows differ from the Python decoder's: {list(taken - reference)[:2]}"
    flags = native.groupBy("offset").agg(F.collect_set(N.NATIVE_FLAG).alias("flags")).collect()
    native.unpersist()
    assert all(len(r.flags) == 1 for r in flags), "a record is decoded by exactly one path"
    by_offset = {r.offset: r.flags[0] for r in flags}
    return [by_offset[offset] for offset in range(len(values))]
