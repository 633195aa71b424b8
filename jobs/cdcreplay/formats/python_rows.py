"""Decoding in Python, for formats Spark cannot parse natively (Avro via fastavro, Mongo shell syntax, ...).

A format module writes one plain function ``decode_record(record: RawRecord) -> list[dict]`` that turns one Kafka
record into entry dicts (the fields of ``formats.common.ENTRY_DDL``; build them with :func:`change`,
:func:`control_entry` and :func:`quarantine_entry`), and hands it to :func:`decode_with_python`. That runs the function
over Arrow batches with ``mapInArrow`` (one Python call per record, no per-row JVM round trip), and in the same pass
``formats.routing`` does what every format shares (table identity, key overrides, value validation, routing).

The guarantee every format relies on: a record whose decoding raises is never lost and never crashes the run. It
becomes one quarantine entry with reason ``decode_error`` and the exception text, and the run goes on.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import partial

from pyspark.sql import DataFrame

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import DECODED_DDL, ENTRY_DDL
from cdcreplay.formats.routing import (
    KIND_CHANGE,
    KIND_CONTROL,
    KIND_QUARANTINE,
    Routing,
    decoded_arrow_schema,
    decoded_batch,
    route,
)

RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
MAX_DETAIL = 500


@dataclass(frozen=True)
class RawRecord:
    """One archived Kafka record as the Python decoder sees it."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name`` (Kafka allows repeats; the last one wins), or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found


class DecodeError(ValueError):
    """A record that cannot be decoded; ``reason`` is its quarantine reason code."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def position(*parts: int | str | Decimal | None) -> list[Decimal | None]:
    """Source position parts as the changelog's array<decimal(38,0)> (digit strings and ints alike)."""
    return [None if part is None else Decimal(int(part)) for part in parts]


def change(
    op: str,
    *,
    db: str | None,
    table: str | None,
    schema: str | None = None,
    key_columns: list[str] | None,
    after: dict[str, str | None] | None,
    before: dict[str, str | None] | None = None,
    column_types: dict[str, str] | None = None,
    position: list[Decimal | None] | None = None,
    event_time: datetime | None = None,
    row_index: int = 0,
    key_image: dict[str, str | None] | None = None,
    detail: str | None = None,
) -> dict:
    """A row change. The key is read from ``key_image``: by default the after image, else the before image (a delete
    names its row by before); a format passes its own when the key lives elsewhere (the Kafka key). ``detail`` is
    provenance kept on the changelog row (Debezium's key-change headers)."""
    return {
        "record_kind": KIND_CHANGE,
        "op": op,
        "source_db": db,
        "source_schema": schema,
        "source_table": table,
        "key_columns": key_columns,
        "key_image": key_image if key_image is not None else (after if after is not None else before),
        "after": after if op != S.OP_DELETE else None,
        "before": before,
        "column_types": column_types or {},
        "position": position or [],
        "event_time": event_time,
        "row_index": row_index,
        "detail": detail,
    }


def truncate(*, db: str | None, table: str | None, schema: str | None = None, position=None, event_time=None) -> dict:
    """A table-level truncate: every key of the table older than it is deleted."""
    return {
        "record_kind": KIND_CHANGE,
        "op": S.OP_TRUNCATE,
        "source_db": db,
        "source_schema": schema,
        "source_table": table,
        "position": position or [],
        "event_time": event_time,
    }


def control_entry(kind: str, detail: str | None = None, *, db=None, table=None, schema=None) -> dict:
    return {
        "record_kind": KIND_CONTROL,
        "control_kind": kind,
        "detail": detail,
        "source_db": db,
        "source_schema": schema,
        "source_table": table,
    }


def quarantine_entry(reason: str, detail: str) -> dict:
    return {"record_kind": KIND_QUARANTINE, "reason": reason, "detail": detail[:MAX_DETAIL]}


def safe_decode(decode_record: Callable[[RawRecord], list[dict]], record: RawRecord) -> list[dict]:
    """``decode_record(record)``, with every failure turned into one quarantine entry."""
    if record.value is None or len(record.value) == 0:
        # A Kafka tombstone (null value) follows a delete so log compaction can drop the key: nothing to apply.
        key_text = base64.b64encode(record.key).decode("ascii") if record.key else None
        return [control_entry(S.CONTROL_TOMBSTONE, key_text)]
    try:
        entries = decode_record(record)
    except DecodeError as error:
        return [quarantine_entry(error.reason, str(error))]
    except Exception as error:  # a decoder bug or input it did not foresee: quarantined, never a crashed run
        return [quarantine_entry(S.REASON_DECODE_ERROR, f"{type(error).__name__}: {error}")]
    if not entries:
        return [quarantine_entry(S.REASON_DECODE_ERROR, "the decoder produced nothing for this record")]
    return entries


def _entry_arrow_type():
    """The Arrow type of array<ENTRY>, derived from ENTRY_DDL so the two never drift apart (drs-dds-json folds
    entries in Spark before routing them)."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import ArrayType

    return to_arrow_type(ArrayType(S.struct_type(ENTRY_DDL)), timezone="UTC")


def decode_with_python(
    records: DataFrame,
    decode_record: Callable[..., list[dict]],
    pipeline: PipelineConfig,
    context_columns: tuple[str, ...] = (),
) -> DataFrame:
    """Raw records -> decoded rows (``formats.common.DECODED_DDL``), decoding each record with ``decode_record``
    and routing its entries (``formats.routing``) in the same pass over each Arrow batch.

    ``context_columns``: further columns of ``records`` a format joined to each record (DataWorks: its update pair's
    messages); their values are passed first, ``decode_record(*context, record)``.
    """
    routing = Routing.of(pipeline)
    arrow_schema = decoded_arrow_schema()  # on the driver: parsing the DDL needs the Spark session

    def run(batches: Iterator) -> Iterator:
        for batch in batches:
            columns = batch.to_pydict()
            record_rows, rows = [], []
            for index in range(batch.num_rows):
                headers = tuple((h["key"], h["value"]) for h in columns["headers"][index] or ())
                record = RawRecord(
                    columns["topic"][index],
                    columns["partition"][index],
                    columns["offset"][index],
                    columns["timestamp"][index],
                    columns["key"][index],
                    columns["value"][index],
                    headers,
                )
                decode = decode_record
                if context_columns:
                    decode = partial(decode_record, *(columns[name][index] for name in context_columns))
                for entry in safe_decode(decode, record):
                    record_rows.append(index)
                    rows.append(route(entry, routing))
            yield decoded_batch(batch, record_rows, rows, arrow_schema)

    return records.select(*RECORD_COLUMNS, *context_columns).mapInArrow(run, DECODED_DDL)
