"""What every format shares: the entry struct a decoder emits per record, and turning entries into decoded rows.

A format module reads raw Kafka records and, for each record, builds ``entries``: an array of ENTRY structs (one per
row-change; exactly one for a control message or a quarantined record). ``finish`` then does what is the same for
every format -- explode, table identity, key override from config, key text, type overrides, value validation, and
routing each entry to the changelog, the control log or the quarantine with its reason.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.configured_types import configured_keys, configured_types, table_id_of
from cdcreplay.value_types import invalid_columns

KIND_CHANGE = "changelog"
KIND_CONTROL = "control"
KIND_QUARANTINE = "quarantine"

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
            single(control(S.CONTROL_TOMBSTONE, F.col("key").cast("string"))),
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
    """Records (raw columns) + their entries -> decoded rows with DECODED_DDL columns."""
    exploded = records.select(
        "topic", "partition", "offset", "timestamp", "key", "value", F.posexplode(entries).alias("entry_index", "e")
    )
    e = F.col("e")
    # An empty identity part (Debezium sends schema "" for MySQL-like sources, table "" for messages) is absent.
    table_id = table_id_of(e["source_db"], e["source_schema"], e["source_table"])
    key_columns = e["key_columns"]
    column_types = F.coalesce(e["column_types"], F.create_map().cast(TEXT_MAP))
    if any(t.primary_key for t in pipeline.tables.values()):
        key_columns = F.coalesce(configured_keys(pipeline)[table_id], key_columns)
    if any(t.column_types for t in pipeline.tables.values()):
        # Configured types win over what the message declares (map_concat keeps the last duplicate: LAST_WIN).
        column_types = F.map_concat(
            column_types, F.coalesce(configured_types(pipeline)[table_id], F.create_map().cast(TEXT_MAP))
        )

    key_values = F.transform(key_columns, lambda c: e["key_image"][c])
    key_text = F.when((F.size(key_columns) > 0) & F.forall(key_values, lambda v: v.isNotNull()), F.to_json(key_values))

    staged = exploded.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        e.alias("e"),
        table_id.alias("table_id"),
        key_columns.alias("key_columns"),
        column_types.alias("column_types"),
        key_text.alias("key_text"),
    )
    e = F.col("e")
    empty = F.create_map().cast(TEXT_MAP)
    staged = staged.select(
        "*",
        F.array_distinct(
            F.concat(
                invalid_columns(F.coalesce(e["after"], empty), F.col("column_types")),
                invalid_columns(F.coalesce(e["before"], empty), F.col("column_types")),
            )
        ).alias("bad_columns"),
    )
    is_change = e["record_kind"] == KIND_CHANGE
    row_op = e["op"].isin(*S.ROW_OPS)
    bad_columns = F.col("bad_columns")

    # Row-changes that cannot be applied become quarantine rows here, for every format alike.
    reason = (
        F.when(~is_change, e["reason"])
        .when(F.col("table_id").isNull(), F.lit(S.REASON_MISSING_TABLE))
        .when(row_op & F.col("key_text").isNull(), F.lit(S.REASON_MISSING_KEY))
        .when(
            e["op"].isin(S.OP_SNAPSHOT, S.OP_INSERT, S.OP_UPDATE) & e["after"].isNull(), F.lit(S.REASON_MISSING_IMAGE)
        )
        .when(F.size(bad_columns) > 0, F.lit(S.REASON_BAD_VALUE))
    )
    detail = (
        F.when(~is_change, e["detail"])
        .when(F.col("table_id").isNull(), F.lit("the message names no table"))
        .when(
            row_op & F.col("key_text").isNull(),
            F.concat(
                F.lit("no primary key value for table "),
                F.col("table_id"),
                F.lit(" (key columns: "),
                F.coalesce(F.array_join(F.col("key_columns"), ","), F.lit("none")),
                F.lit("); declare tables.<table>.primary_key in the pipeline config if the message has none"),
            ),
        )
        .when(
            e["op"].isin(S.OP_SNAPSHOT, S.OP_INSERT, S.OP_UPDATE) & e["after"].isNull(),
            F.concat(F.lit("operation "), e["op"], F.lit(" without an after image")),
        )
        .when(
            F.size(bad_columns) > 0,
            F.concat(F.lit("value does not match its declared type in column(s): "), F.array_join(bad_columns, ", ")),
        )
        # A change row keeps its entry's detail as provenance (e.g. Debezium's __debezium.newkey/oldkey headers).
        .otherwise(e["detail"])
    )
    record_kind = F.when(reason.isNotNull(), F.lit(KIND_QUARANTINE)).otherwise(e["record_kind"])
    quarantined = record_kind == KIND_QUARANTINE
    return staged.select(
        F.col("table_id"),
        e["source_db"].alias("source_db"),
        e["source_schema"].alias("source_schema"),
        e["source_table"].alias("source_table"),
        e["op"].alias("op"),
        F.col("key_text").alias("key"),
        F.col("key_columns"),
        e["after"].alias("after"),
        e["before"].alias("before"),
        F.col("column_types"),
        e["position"].alias("position"),
        e["event_time"].alias("event_time"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.coalesce(e["row_index"], F.lit(0)).alias("row_index"),
        F.lit(pipeline.format).alias("format"),
        F.col("timestamp"),
        record_kind.alias("record_kind"),
        e["control_kind"].alias("control_kind"),
        reason.alias("reason"),
        detail.alias("detail"),
        F.when(quarantined, F.col("key")).alias("raw_key"),
        F.when(quarantined, F.col("value")).alias("raw_value"),
    )
