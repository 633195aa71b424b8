"""What every format shares: the entry struct a decoder emits per record, and turning entries into decoded rows.

A format module reads raw Kafka records and, for each record, builds ``entries``: an array of ENTRY structs (one per
row-change; exactly one for a control message or a quarantined record). ``finish`` then does what is the same for
every format (``formats.routing``, in Python over Arrow batches) -- table identity, key override from config, key
text, type overrides, value validation, and routing each entry to the changelog, the control log or the quarantine
with its reason.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.routing import (  # the record kinds are defined with the routing; decoders import them here
    KIND_CHANGE as KIND_CHANGE,
)
from cdcreplay.formats.routing import (
    KIND_CONTROL,
    KIND_QUARANTINE,
    Routing,
    decoded_arrow_schema,
    decoded_batch,
    entry_from_arrow,
    route,
)

RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")

TEXT_MAP = "map<string,string>"
ENTRY_DDL = (
    "record_kind string, op string, control_kind string, reason string, detail string, "
    "source_db string, source_schema string, source_table string, "
    "key_columns array<string>, key_image map<string,string>, "
    "after map<string,string>, before map<string,string>, column_types map<string,string>, "
    "position array<decimal(38,0)>, event_time timestamp, row_index int"
)
ENTRY_FIELDS = [part.strip().split(" ")[0] for part in ENTRY_DDL.split(", ")]
ENTRY_TYPES = {part.strip().split(" ")[0]: part.strip().split(" ", 1)[1] for part in ENTRY_DDL.split(", ")}

DECODED_DDL = (
    S.CHANGELOG_DDL + ", timestamp timestamp, record_kind string, control_kind string, reason string, detail string, "
    "raw_key binary, raw_value binary"
)


def entry(**fields: Column) -> Column:
    """One ENTRY struct; fields not given are NULL of their declared type."""
    unknown = set(fields) - set(ENTRY_FIELDS)
    if unknown:
        raise TypeError(f"unknown entry fields: {sorted(unknown)}")
    return F.struct(
        *[
            (fields[name] if name in fields else F.lit(None)).cast(ENTRY_TYPES[name]).alias(name)
            for name in ENTRY_FIELDS
        ]
    )


def quarantine(reason: str, detail: Column | str) -> Column:
    detail_column = F.lit(detail) if isinstance(detail, str) else detail
    return entry(record_kind=F.lit(KIND_QUARANTINE), reason=F.lit(reason), detail=detail_column)


def control(kind: str, detail: Column | str | None = None, **identity: Column) -> Column:
    detail_column = F.lit(detail) if isinstance(detail, str) or detail is None else detail
    return entry(record_kind=F.lit(KIND_CONTROL), control_kind=F.lit(kind), detail=detail_column, **identity)


def single(entry_column: Column) -> Column:
    return F.array(entry_column)


def text_payload(value: Column) -> Column:
    """Kafka value bytes as text; NULL when the bytes are not valid UTF-8 (Spark would otherwise replace them)."""
    decoded = value.cast("string")
    return F.when(F.encode(decoded, "UTF-8") == value, decoded)


def unreadable_json(text: Column, parsed: Column) -> Column:
    """The first branches of every JSON format's entries; a format goes on with ``.when(...)`` for its own messages.

    A null or empty value is a Kafka tombstone (it follows a delete so log compaction can drop the key: nothing to
    apply); bytes that are not UTF-8, or text that is not a JSON object, are quarantined with the payload's start.
    """
    return (
        F.when(
            F.col("value").isNull() | (F.length("value") == 0),
            # The detail is the key's bytes in base64 (a key need not be UTF-8), as in the Python-decoded formats.
            single(control(S.CONTROL_TOMBSTONE, F.nullif(F.base64("key"), F.lit("")))),
        )
        .when(text.isNull(), single(quarantine(S.REASON_NOT_UTF8, "payload is not valid UTF-8 text")))
        .when(
            parsed.isNull() | parsed["_corrupt_record"].isNotNull(),
            single(
                quarantine(
                    S.REASON_NOT_JSON, F.concat(F.lit("payload is not a JSON object: "), F.substring(text, 1, 120))
                )
            ),
        )
    )


def decimal_positions(*parts: Column) -> Column:
    """Source position parts (numbers or digit strings) as the changelog's array<decimal(38,0)>."""
    return F.array(*[part.try_cast("decimal(38,0)") for part in parts])


def finish(records: DataFrame, entries: Column, pipeline: PipelineConfig) -> DataFrame:
    """Records (raw columns) + their entries -> decoded rows with DECODED_DDL columns (``formats.routing``)."""
    exploded = records.select(*RECORD_COLUMNS, F.explode(entries).alias("e"))
    routing = Routing.of(pipeline)
    arrow_schema = decoded_arrow_schema()  # on the driver: parsing the DDL needs the Spark session

    def run(batches):
        for batch in batches:
            rows = [route(entry_from_arrow(e), routing) for e in batch.column("e").to_pylist()]
            yield decoded_batch(batch, list(range(batch.num_rows)), rows, arrow_schema)

    return exploded.mapInArrow(run, DECODED_DDL)
