"""Alibaba DataWorks "Kafka message format" (formats.md section b). Native Spark throughout.

A message is ``{schema: {dataColumn: [{name, type}], primaryKey, source: {dbName, schemaName, tableName}},
payload: {before: {dataColumn: {...}}, after: {dataColumn: {...}}, sequenceId, op, timestamp: {eventTime, ...},
ddl: {text}}}``. Ops are case-sensitive:
  INSERT          the new row in `after` (DataWorks merges its full load into the same INSERT stream: there is no
                  snapshot marker).
  UPDATE_BEFOR    (sic) the before image alone. Paired with the UPDATE_AFTER of the same ``sequenceId``, it becomes a
                  control row ``update_before`` and the pair's update is applied by the UPDATE_AFTER. With no
                  UPDATE_AFTER of that sequenceId among the replayed records it is quarantined (``unpaired_update``).
  UPDATE_AFTER    the after image; its before image is its own `before` (the "one Kafka record per update" option)
                  or the paired UPDATE_BEFOR's. An update whose before and after keys differ moves the row: a delete
                  of the old key, then the new row.
  DELETE          the deleted row in `before`.
  TRUNCATE        empties the table, plus a control row ``truncate``.
  CREATE, ALTER, ERASE, QUERY, RENAME, CINDEX, DINDEX -> control ``ddl`` (``ddl.text``);
  TRANSACTION_BEGIN, TRANSACTION_END, GTID, XACOMMIT, XAROLLBACK -> control ``transaction``;
  MHEARTBEAT      control ``heartbeat`` whose event_time and detail carry the progress watermark of its topic
                  partition (``timestamp.eventTime``).
Anything else is quarantined (``unknown_op``).

Key: ``schema.primaryKey``; when it is null, the ``#alibaba_rds_row_id#`` column DataWorks adds to keyless tables;
``tables.<t>.primary_key`` overrides both. Order: ``sequenceId`` compared as an integer (the update pair shares it),
then the Kafka coordinates. Event time: ``timestamp.eventTime`` (epoch ms).

Types (``schema.dataColumn``): LONG -> bigint, DOUBLE -> double, BOOLEAN -> boolean, STRING -> string, BYTES (base64
text) -> binary, DATE (epoch milliseconds, for every date/time type) -> timestamp_ntz, the wall clock in the time
zone DataWorks used to turn the source's DATE/DATETIME into epoch ms (option ``time_zone``, default UTC). A DATE value
of a column configured as ``date`` becomes that date when it is midnight there, else it is quarantined
(``bad_value``: the time zone is wrong or the column is no date). Unknown type names are kept as string.
DataWorks has no decimal type: a DECIMAL arrives as STRING (or DOUBLE), and ``tables.<t>.column_types`` restores it
(``decimal(p,s)``); a value that type would round is quarantined, never rounded. Configured types win over the
declared ones, as for every format.
"""

from __future__ import annotations

import re
import zoneinfo

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats.common import (
    KIND_CHANGE,
    KIND_CONTROL,
    TEXT_MAP,
    control,
    decimal_positions,
    entry,
    finish,
    quarantine,
    single,
    text_payload,
    unreadable_json,
)
from cdcreplay.formats.configured_types import configured_keys, configured_types, lossy_columns, table_id_of
from cdcreplay.value_types import safe_timestamp_millis

FORMAT_ID = "dataworks-json"
ROW_ID = "#alibaba_rds_row_id#"
IMAGE = "struct<dataColumn: map<string,string>>"
VALUE_SCHEMA = (
    "schema struct<dataColumn: array<struct<name: string, type: string>>, primaryKey: array<string>, "
    "source: struct<dbType: string, dbVersion: string, dbName: string, schemaName: string, tableName: string>>, "
    f"payload struct<before: {IMAGE}, after: {IMAGE}, sequenceId: string, scn: string, op: string, "
    "timestamp: struct<eventTime: bigint, systemTime: bigint, checkpointTime: bigint>, "
    "ddl: struct<text: string, ddlMeta: string>>, "
    "version string, _corrupt_record string"
)
BEFORE_OP, AFTER_OP = "UPDATE_BEFOR", "UPDATE_AFTER"
DDL_OPS = ("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX")
TRANSACTION_OPS = ("TRANSACTION_BEGIN", "TRANSACTION_END", "GTID", "XACOMMIT", "XAROLLBACK")
DATAWORKS_TYPES = {
    "LONG": "bigint",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "STRING": "string",
    "BYTES": "binary",
    "DATE": "timestamp_ntz",
}
PARTNER = "struct<image: map<string,string>, partition: int, offset: bigint>"
OFFSET_ZONE = re.compile(r"^[+-]\d{2}:\d{2}$")


def check_config(pipeline: PipelineConfig) -> None:
    time_zone_of(pipeline)


def time_zone_of(pipeline: PipelineConfig) -> str:
    """The ``time_zone`` option, checked before work: Spark would fail on an unknown zone mid-run."""
    zone = str(pipeline.options.get("time_zone", "UTC"))
    if zone != "UTC" and not OFFSET_ZONE.match(zone):
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"pipeline {pipeline.name}: options.time_zone {zone!r} is not a time zone; use an offset like "
                "'+08:00' or a region like 'Asia/Shanghai' (the zone DataWorks ran in)"
            ) from None
    return zone


def _declared_types(schema: Column) -> Column:
    columns = F.coalesce(schema["dataColumn"], F.array().cast("array<struct<name: string, type: string>>"))
    lookup = F.create_map(*[F.lit(x) for kv in DATAWORKS_TYPES.items() for x in kv])
    return F.map_from_entries(
        F.transform(
            F.filter(columns, lambda c: c["name"].isNotNull()),
            lambda c: F.struct(
                c["name"].alias("key"), F.coalesce(lookup[F.upper(c["type"])], F.lit("string")).alias("value")
            ),
        )
    )


def _canonical_image(image: Column, declared: Column, effective: Column, zone: str) -> Column:
    """DataWorks values -> canonical text. DATE epoch ms become the wall clock in ``zone`` (a date when configured)."""

    def convert(column: Column, value: Column) -> Column:
        wall = F.from_utc_timestamp(safe_timestamp_millis(value), zone)
        midnight = F.date_format(wall, "HH:mm:ss.SSS") == "00:00:00.000"
        return (
            F.when(value.isNull() | ~F.coalesce(declared[column] == "timestamp_ntz", F.lit(False)), value)
            .when(effective[column] == "date", F.when(midnight, F.date_format(wall, "yyyy-MM-dd")))
            .otherwise(F.date_format(wall, "yyyy-MM-dd HH:mm:ss.SSS"))
        )

    return F.transform_values(image, convert)


def _lost_values(converted: Column, raw: Column) -> Column:
    lost = F.map_keys(F.map_filter(converted, lambda column, value: value.isNull() & raw[column].isNotNull()))
    return F.coalesce(lost, F.array().cast("array<string>"))


def _with_partners(staged: DataFrame) -> DataFrame:
    """Each UPDATE_BEFOR/UPDATE_AFTER gets its pair's before image and coordinates (same topic, table, sequenceId).

    Only the update messages are shuffled; every other record passes by with empty partner columns."""
    p = F.col("m")["payload"]
    paired = F.coalesce(p["op"].isin(BEFORE_OP, AFTER_OP) & p["sequenceId"].isNotNull(), F.lit(False))
    window = Window.partitionBy("topic", "table_id", p["sequenceId"])

    coordinates = F.struct("partition", "offset")

    def partner(op: str, image: Column | None) -> Column:
        # The earliest message of that op in the pair: deterministic even if the archive holds it twice.
        fields = F.struct(
            (image if image is not None else F.lit(None).cast(TEXT_MAP)).alias("image"), "partition", "offset"
        )
        return F.min_by(fields, F.when(p["op"] == op, coordinates)).over(window)

    updates = staged.where(paired).select(
        "*",
        partner(BEFORE_OP, p["before"]["dataColumn"]).alias("before_partner"),
        partner(AFTER_OP, None).alias("after_partner"),
    )
    others = staged.where(~paired).select(
        "*", F.lit(None).cast(PARTNER).alias("before_partner"), F.lit(None).cast(PARTNER).alias("after_partner")
    )
    return updates.unionByName(others)


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    zone = time_zone_of(pipeline)
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    source = parsed["schema"]["source"]
    staged = records.select(
        "*",
        text.alias("text"),
        parsed.alias("m"),
        table_id_of(source["dbName"], source["schemaName"], source["tableName"]).alias("table_id"),
    )
    staged = _with_partners(staged)
    m = F.col("m")
    schema, p = m["schema"], m["payload"]
    source = schema["source"]
    identity = {
        "source_db": source["dbName"],
        "source_schema": source["schemaName"],
        "source_table": source["tableName"],
    }

    declared = _declared_types(schema)
    effective = F.map_concat(
        declared, F.coalesce(configured_types(pipeline)[F.col("table_id")], F.create_map().cast(TEXT_MAP))
    )
    after_raw = p["after"]["dataColumn"]
    before_raw = F.coalesce(p["before"]["dataColumn"], F.col("before_partner")["image"])
    staged = staged.select(
        "*",
        declared.alias("declared"),
        effective.alias("effective"),
        _canonical_image(after_raw, declared, effective, zone).alias("after_text"),
        _canonical_image(before_raw, declared, effective, zone).alias("before_text"),
    )
    after, before, declared, effective = (F.col(c) for c in ("after_text", "before_text", "declared", "effective"))
    bad = F.array_distinct(
        F.concat(
            _lost_values(after, after_raw),
            _lost_values(before, before_raw),
            lossy_columns(after, effective),
            lossy_columns(before, effective),
        )
    )
    message_keys = F.when(F.size(schema["primaryKey"]) > 0, schema["primaryKey"]).when(
        F.map_contains_key(declared, ROW_ID), F.array(F.lit(ROW_ID))
    )
    key_columns = F.coalesce(configured_keys(pipeline)[F.col("table_id")], message_keys)
    op = p["op"]
    position = decimal_positions(p["sequenceId"])
    event_time = safe_timestamp_millis(p["timestamp"]["eventTime"])

    def change(row_op: str, after_image: Column | None, before_image: Column | None, key_image: Column) -> Column:
        return entry(
            record_kind=F.lit(KIND_CHANGE),
            op=F.lit(row_op),
            key_columns=message_keys,
            key_image=key_image,
            **{name: image for name, image in (("after", after_image), ("before", before_image)) if image is not None},
            column_types=declared,
            position=position,
            event_time=event_time,
            **identity,
        )

    # Before and after name different keys: the update moved the row (delete the old key, then write the new one).
    moved = (
        before.isNotNull()
        & F.forall(key_columns, lambda c: F.map_contains_key(before, c))
        & F.exists(key_columns, lambda c: ~before[c].eqNullSafe(after[c]))
    )
    update = F.when(
        moved, F.array(change(S.OP_DELETE, None, before, before), change(S.OP_UPDATE, after, before, after))
    ).otherwise(single(change(S.OP_UPDATE, after, before, after)))
    truncate = entry(
        record_kind=F.lit(KIND_CHANGE), op=F.lit(S.OP_TRUNCATE), position=position, event_time=event_time, **identity
    )
    heartbeat = entry(
        record_kind=F.lit(KIND_CONTROL),
        control_kind=F.lit(S.CONTROL_HEARTBEAT),
        detail=F.to_json(
            F.struct(
                F.date_format(event_time, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("watermark"),
                p["timestamp"]["eventTime"].alias("eventTime"),
                p["timestamp"]["checkpointTime"].alias("checkpointTime"),
            )
        ),
        event_time=event_time,
    )
    partner_after = F.col("after_partner")
    row_op = op.isin("INSERT", BEFORE_OP, AFTER_OP, "DELETE")

    entries = (
        unreadable_json(text, m)
        .when(op == "MHEARTBEAT", single(heartbeat))
        .when(op.isin(*TRANSACTION_OPS), single(control(S.CONTROL_TRANSACTION, F.concat_ws(" ", op, p["sequenceId"]))))
        .when(op.isin(*DDL_OPS), single(control(S.CONTROL_DDL_KIND, F.coalesce(p["ddl"]["text"], op), **identity)))
        .when(
            op == "TRUNCATE",
            F.array(truncate, control(S.CONTROL_TRUNCATE, F.coalesce(p["ddl"]["text"], op), **identity)),
        )
        .when(
            (op == BEFORE_OP) & partner_after.isNull(),
            single(
                quarantine(
                    S.REASON_UNPAIRED_UPDATE,
                    F.concat(
                        F.lit("UPDATE_BEFOR of sequenceId "),
                        F.coalesce(p["sequenceId"], F.lit("null")),
                        F.lit(
                            " has no UPDATE_AFTER with that sequenceId among the replayed records: the update cannot "
                            "be applied (replay a range that holds both messages)"
                        ),
                    ),
                )
            ),
        )
        .when(
            op == BEFORE_OP,
            single(
                control(
                    S.CONTROL_UPDATE_BEFORE,
                    F.concat(
                        F.lit("before image of the update applied by partition "),
                        partner_after["partition"].cast("string"),
                        F.lit(" offset "),
                        partner_after["offset"].cast("string"),
                    ),
                    **identity,
                )
            ),
        )
        .when(
            row_op & (F.size(bad) > 0),
            single(
                quarantine(
                    S.REASON_BAD_VALUE,
                    F.concat(
                        F.lit("value cannot be read exactly with its type in column(s): "),
                        F.array_join(F.array_sort(bad), ", "),
                    ),
                )
            ),
        )
        .when(
            (op.isin("INSERT", AFTER_OP) & after.isNull()) | ((op == "DELETE") & before.isNull()),
            single(
                quarantine(
                    S.REASON_MISSING_IMAGE,
                    F.concat(
                        F.lit("op "),
                        op,
                        F.lit(" without its "),
                        F.when(op == "DELETE", "before").otherwise("after"),
                        F.lit(".dataColumn image"),
                    ),
                )
            ),
        )
        .when(op == "INSERT", single(change(S.OP_INSERT, after, None, after)))
        .when(op == AFTER_OP, update)
        .when(op == "DELETE", single(change(S.OP_DELETE, None, before, before)))
        .otherwise(
            single(
                quarantine(
                    S.REASON_UNKNOWN_OP,
                    F.concat(
                        F.lit("op '"),
                        F.coalesce(op, F.lit("null")),
                        F.lit(
                            "' is not a DataWorks op (INSERT, UPDATE_BEFOR, UPDATE_AFTER, DELETE, TRUNCATE, DDL, "
                            "transaction or MHEARTBEAT; ops are case-sensitive)"
                        ),
                    ),
                )
            )
        )
    )
    return finish(staged, entries, pipeline)
