"""Debezium change events serialized by Kafka Connect's JsonConverter (formats.md section e).

With ``schemas.enable=true`` every value is ``{"schema": <Envelope schema>, "payload": <event>}``; without, the value is
the bare event. Both are read with ONE ``from_json`` whose schema has the event fields at the top level and under
``payload``. Everything here is native Spark: no Python worker touches the payloads.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import (
    KIND_CHANGE,
    TEXT_MAP,
    control,
    decimal_positions,
    entry,
    finish,
    quarantine,
    single,
    text_payload,
)
from cdcreplay.value_types import (
    debezium_field_type,
    let,
    safe_binary,
    safe_date_from_days,
    safe_timestamp_micros,
    safe_timestamp_millis,
)

FORMAT_ID = "debezium-json"

EVENT_FIELDS = (
    "before map<string,string>, after map<string,string>, source map<string,string>, op string, ts_ms bigint, "
    "transaction map<string,string>, message map<string,string>, ddl string, tableChanges string, status string"
)
FIELD_SCHEMA = "array<struct<field: string, type: string, name: string, parameters: map<string,string>>>"
ENVELOPE_SCHEMA = f"struct<fields: array<struct<field: string, fields: {FIELD_SCHEMA}>>>"
VALUE_SCHEMA = (
    f"struct<schema: {ENVELOPE_SCHEMA}, payload: struct<{EVENT_FIELDS}>, {EVENT_FIELDS}, _corrupt_record string>"
)
KEY_SCHEMA = "map<string,string>"

# source.snapshot values that mark a row read by a snapshot (string in 1.x+, boolean in old versions).
SNAPSHOT_MARKERS = ("true", "first", "last", "first_in_data_collection", "last_in_data_collection", "incremental")

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
TWO_TO_64 = "18446744073709551616"  # 2^64: the weight of the high 8 bytes


def decimal_from_base64(value: Column, scale: Column) -> Column:
    """Kafka Connect Decimal: base64 of the big-endian two's-complement unscaled integer -> exact decimal text.

    Native Spark: a negative number is read through its ones' complement (flip the hex digits, add one), so no
    intermediate value exceeds the 16 bytes a DECIMAL(38) can need; longer inputs yield NULL (a bad value).
    """
    zero = F.lit(0).cast("decimal(38,0)")

    def unscaled(hex_digits: Column) -> Column:
        negative = F.conv(F.substring(hex_digits, 1, 1), 16, 10).cast("int") >= 8
        flipped = F.when(negative, F.translate(hex_digits, "0123456789ABCDEF", "FEDCBA9876543210")).otherwise(
            hex_digits
        )
        return let(
            flipped,
            lambda digits: let(
                F.length(digits),
                lambda n: F.struct(
                    negative.alias("negative"),
                    (n <= 32).alias("fits"),
                    F.try_add(
                        F.conv(F.when(n > 16, digits.substr(n - 15, F.lit(16))).otherwise(digits), 16, 10).cast(
                            "decimal(38,0)"
                        ),
                        F.coalesce(
                            F.try_multiply(
                                F.conv(F.when((n > 16) & (n <= 32), digits.substr(F.lit(1), n - 16)), 16, 10).cast(
                                    "decimal(38,0)"
                                ),
                                F.lit(TWO_TO_64).cast("decimal(20,0)"),
                            ),
                            zero,
                        ),
                    ).alias("magnitude"),
                ),
            ),
        )

    def as_text(parts: Column, digits_scale: Column) -> Column:
        magnitude = F.when(parts["negative"], F.try_add(parts["magnitude"], F.lit(1).cast("decimal(38,0)"))).otherwise(
            parts["magnitude"]
        )
        digits = magnitude.cast("string")
        # Left-pad with zeros so there is at least one digit before the decimal point (lpad also truncates:
        # never pad to less than the digits' own length).
        width = F.greatest(F.length(digits), digits_scale + 1)
        return let(
            F.lpad(digits, width, F.lit("0")),
            lambda padded: F.when(
                parts["fits"] & parts["magnitude"].isNotNull(),
                F.concat(
                    F.when(parts["negative"], F.lit("-")).otherwise(F.lit("")),
                    padded.substr(F.lit(1), F.length(padded) - digits_scale),
                    F.when(
                        digits_scale > 0,
                        F.concat(F.lit("."), padded.substr(F.length(padded) - digits_scale + 1, digits_scale)),
                    ).otherwise(F.lit("")),
                ),
            ),
        )

    hex_digits = F.hex(safe_binary(value))
    return F.when(
        F.length(hex_digits) > 0,
        let(unscaled(hex_digits), lambda parts: as_text(parts, F.coalesce(scale.try_cast("int"), F.lit(0)))),
    )


def canonical_value(value: Column, name: Column, scale: Column) -> Column:
    """A JsonConverter value (as JSON text) -> canonical text of its Spark type, by the field's semantic name."""
    # VariableScaleDecimal is a struct {scale, value}: same bytes encoding, scale carried per value.
    decimal_bytes = F.when(name == VARIABLE_SCALE_DECIMAL, F.get_json_object(value, "$.value")).otherwise(value)
    decimal_scale = F.when(name == VARIABLE_SCALE_DECIMAL, F.get_json_object(value, "$.scale")).otherwise(scale)
    as_long = value.try_cast("bigint")
    micros = (
        F.when(
            name.isin("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"),
            F.try_multiply(as_long, F.lit(1000)),
        )
        .when(
            name.isin("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"),
            F.try_multiply(as_long, F.lit(1000)),
        )
        .when(name.isin("io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime"), F.floor(as_long / 1000))
        .otherwise(as_long)
    )
    return (
        F.when(value.isNull(), F.lit(None).cast("string"))
        .when(name.isin(DECIMAL, VARIABLE_SCALE_DECIMAL), decimal_from_base64(decimal_bytes, decimal_scale))
        .when(
            name.isin("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"),
            safe_date_from_days(value).cast("string"),
        )
        .when(name.isin(*TIMESTAMP_NAMES), F.date_format(safe_timestamp_micros(micros), "yyyy-MM-dd HH:mm:ss.SSSSSS"))
        .when(name.isin(*TIME_NAMES), F.date_format(safe_timestamp_micros(micros), "HH:mm:ss.SSSSSS"))
        .otherwise(value)
    )


TIMESTAMP_NAMES = (
    "io.debezium.time.Timestamp",
    "org.apache.kafka.connect.data.Timestamp",
    "io.debezium.time.MicroTimestamp",
    "io.debezium.time.NanoTimestamp",
)
TIME_NAMES = (
    "io.debezium.time.Time",
    "org.apache.kafka.connect.data.Time",
    "io.debezium.time.MicroTime",
    "io.debezium.time.NanoTime",
)


def _field_info(schema: Column) -> Column:
    """map<column, struct<type, name, scale, precision>> from the envelope schema's `after` (else `before`) struct."""
    image_fields = F.filter(schema["fields"], lambda f: f["field"].isin("after", "before"))
    fields = F.coalesce(image_fields[0]["fields"], F.array().cast(FIELD_SCHEMA))
    return F.map_from_entries(
        F.transform(
            fields,
            lambda f: F.struct(
                f["field"].alias("key"),
                F.struct(
                    f["type"].alias("type"),
                    f["name"].alias("name"),
                    f["parameters"]["scale"].alias("scale"),
                    f["parameters"]["connect.decimal.precision"].alias("precision"),
                ).alias("value"),
            ),
        )
    )


def _canonical_image(image: Column, info: Column) -> Column:
    return F.transform_values(
        image, lambda column, value: canonical_value(value, info[column]["name"], info[column]["scale"])
    )


def _lost_values(converted: Column, raw: Column) -> Column:
    """Columns whose raw value is present but did not convert."""
    lost = F.map_keys(F.map_filter(converted, lambda column, value: value.isNull() & raw[column].isNotNull()))
    return F.coalesce(lost, F.array().cast("array<string>"))


def _position(source: Column) -> Column:
    """Connector-specific source position; events of one connector share a shape, so arrays compare correctly."""
    sqlserver_lsn = [
        F.conv(F.split(source[lsn], ":")[i], 16, 10) for lsn in ("commit_lsn", "change_lsn") for i in range(3)
    ]
    return (
        F.when(  # MySQL / MariaDB: binlog file sequence number, offset in the file, row within the event
            source["file"].isNotNull(),
            decimal_positions(
                F.regexp_extract(source["file"], r"(\d+)$", 1), source["pos"], F.coalesce(source["row"], F.lit(0))
            ),
        )
        .when(source["lsn"].isNotNull(), decimal_positions(source["lsn"]))  # PostgreSQL
        .when(  # SQL Server: commit LSN, change LSN, then the order of a PK change's delete (1) and insert (2)
            source["commit_lsn"].isNotNull(),
            decimal_positions(*sqlserver_lsn, F.coalesce(source["event_serial_no"], F.lit(0))),
        )
        .when(source["scn"].isNotNull(), decimal_positions(source["scn"]))  # Oracle
        .when(source["ord"].isNotNull(), decimal_positions(source["ts_ms"], source["ord"]))  # MongoDB
        .otherwise(F.array().cast("array<decimal(38,0)>"))
    )


def _key_map(key: Column) -> Column:
    """The Kafka key's fields, with or without the JsonConverter schema wrapper."""
    parsed = F.from_json(key.cast("string"), KEY_SCHEMA)
    wrapped = parsed["payload"].isNotNull() & F.map_contains_key(parsed, "schema")
    return F.when(wrapped, F.from_json(parsed["payload"], KEY_SCHEMA)).otherwise(parsed)


def decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    text = text_payload(F.col("value"))
    parsed = F.from_json(text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"})
    staged = records.select("*", text.alias("text"), parsed.alias("parsed"))
    p = F.col("parsed")
    event = F.when(p["payload"].isNotNull(), p["payload"]).otherwise(
        F.struct(*[p[name.split(" ")[0]].alias(name.split(" ")[0]) for name in EVENT_FIELDS.split(", ")])
    )
    staged = staged.select(
        "*", event.alias("ev"), _field_info(p["schema"]).alias("info"), _key_map(F.col("key")).alias("kafka_key")
    )
    ev, info = F.col("ev"), F.col("info")
    # Each converted image is computed once in its own column: Spark does not inline a costly expression
    # into several consumers, so the conversions below are evaluated once per record.
    staged = staged.select(
        "*",
        _canonical_image(ev["after"], info).alias("after_text"),
        _canonical_image(ev["before"], info).alias("before_text"),
        _canonical_image(F.col("kafka_key"), info).alias("key_text"),
        F.transform_values(
            info, lambda _c, f: debezium_field_type(f["name"], f["type"], f["scale"], f["precision"])
        ).alias("declared_types"),
    )
    # A value present in the message that its declared type cannot decode (bad base64, out-of-range date) must
    # not turn into a silent NULL: the record is quarantined naming the columns.
    undecodable = F.array_distinct(
        F.concat(_lost_values(F.col("after_text"), ev["after"]), _lost_values(F.col("before_text"), ev["before"]))
    )
    source, op = ev["source"], ev["op"]
    after, before, kafka_key, declared_types = (
        F.col("after_text"),
        F.col("before_text"),
        F.col("key_text"),
        F.col("declared_types"),
    )
    snapshot = (op == "r") | ((op == "c") & F.lower(source["snapshot"]).isin(*SNAPSHOT_MARKERS))
    change_op = (
        F.when(snapshot, F.lit(S.OP_SNAPSHOT))
        .when(op == "c", F.lit(S.OP_INSERT))
        .when(op == "u", F.lit(S.OP_UPDATE))
        .when(op == "d", F.lit(S.OP_DELETE))
        .when(op == "t", F.lit(S.OP_TRUNCATE))
    )
    source_ts = source["ts_ms"].try_cast("bigint")
    identity = {
        "source_db": source["db"],
        "source_schema": source["schema"],
        "source_table": F.coalesce(source["table"], source["collection"]),
    }
    change = entry(
        record_kind=F.lit(KIND_CHANGE),
        op=change_op,
        # Postgres REPLICA IDENTITY DEFAULT sends update/delete with before = null: the Kafka key still names the row.
        key_columns=F.map_keys(F.col("kafka_key")),
        key_image=F.coalesce(after, before, kafka_key),
        after=F.when(op != "d", after),
        before=before,
        column_types=F.when(F.size(info) > 0, declared_types).otherwise(F.create_map().cast(TEXT_MAP)),
        position=_position(source),
        event_time=F.when(source_ts > 0, safe_timestamp_millis(source_ts)).otherwise(
            safe_timestamp_millis(ev["ts_ms"])
        ),
        **identity,
    )
    entries = (
        # A tombstone follows every delete so that log compaction can drop the key; the delete already did the work.
        F.when(
            F.col("value").isNull() | (F.length("value") == 0),
            single(control(S.CONTROL_TOMBSTONE, F.col("key").cast("string"))),
        )
        .when(text.isNull(), single(quarantine(S.REASON_NOT_UTF8, "payload is not valid UTF-8 text")))
        .when(
            p.isNull() | p["_corrupt_record"].isNotNull(),
            single(
                quarantine(
                    S.REASON_NOT_JSON, F.concat(F.lit("payload is not a JSON object: "), F.substring(text, 1, 120))
                )
            ),
        )
        .when(op == "m", single(control(S.CONTROL_MESSAGE, F.to_json(ev["message"]), **identity)))
        .when(
            change_op.isNotNull() & (F.size(undecodable) > 0),
            single(
                quarantine(
                    S.REASON_BAD_VALUE,
                    F.concat(
                        F.lit("value cannot be decoded with its schema type in column(s): "),
                        F.array_join(undecodable, ", "),
                    ),
                )
            ),
        )
        .when(change_op.isNotNull(), single(change))
        .when(
            op.isNotNull(),
            single(
                quarantine(S.REASON_UNKNOWN_OP, F.concat(F.lit("op '"), op, F.lit("' is not one of c, u, d, r, t, m")))
            ),
        )
        # Messages without op: the transaction topic (BEGIN/END), the schema-change topic (ddl), heartbeats.
        .when(
            ev["status"].isin("BEGIN", "END"),
            single(control(S.CONTROL_TRANSACTION, F.concat_ws(" ", ev["status"], text))),
        )
        .when(
            ev["ddl"].isNotNull() | ev["tableChanges"].isNotNull(), single(control(S.CONTROL_SCHEMA_CHANGE, ev["ddl"]))
        )
        .when(
            ev["ts_ms"].isNotNull() & ev["source"].isNull() & ev["after"].isNull(),
            single(control(S.CONTROL_HEARTBEAT, text)),
        )
        .otherwise(single(quarantine(S.REASON_UNKNOWN_OP, "message has no op field and is no known control message")))
    )
    return finish(staged, entries, pipeline)
