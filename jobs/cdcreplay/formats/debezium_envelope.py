"""Debezium change-event envelope semantics, once for every wire (formats.md section e).

Both Debezium formats end here: ``debezium-json`` hands over the Kafka value as text, ``debezium-avro`` hands over the
text Kafka Connect's JsonConverter would have written for the same Connect record. From that text on everything is
native Spark: op mapping, snapshot markers, connector positions, Connect/Debezium type conversion, MongoDB documents.

With ``schemas.enable=true`` a value is ``{"schema": <Envelope schema>, "payload": <event>}``; without, it is the bare
event. Both are read with ONE ``from_json`` whose schema has the event fields at the top level and under ``payload``.

Connector specifics handled here:
  MySQL/MariaDB  position (binlog file number, pos, row); ``gtid`` is kept in the message but not ordered on: a GTID
                 is only ordered within one server uuid, while file/pos/row is total for the binlog read.
  PostgreSQL     position (lsn); REPLICA IDENTITY DEFAULT sends before = null (or key columns only): the Kafka key
                 names the row; a TOASTed column that did not change arrives as ``__debezium_unavailable_value`` and
                 is left out of the image, so the compactor keeps its stored value.
  SQL Server     position (commit_lsn, change_lsn, event_serial_no): a primary-key update is a delete (serial 1) and
                 an insert (serial 2) at the same LSNs.
  Oracle         position (commit_scn, scn): commit order first, then change order inside the transaction.
  MongoDB        ``after``/``before`` are Extended JSON strings; an update without the full document carries
                 ``updateDescription`` (``patch`` in 1.x): a partial image of the changed fields.
Headers ``__debezium.newkey`` (on the delete of a primary-key change) and ``__debezium.oldkey`` (on the insert) are
recorded in the changelog row's ``detail``, the provenance of the run's decoded changelog.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import PipelineConfig
from cdcreplay.formats.common import (
    KIND_CHANGE,
    KIND_QUARANTINE,
    TEXT_MAP,
    control,
    decimal_positions,
    entry,
    finish,
    quarantine,
    single,
)
from cdcreplay.value_types import (
    debezium_field_type,
    let,
    safe_binary,
    safe_date_from_days,
    safe_timestamp_micros,
    safe_timestamp_millis,
)

EVENT_FIELD_TYPES = (
    ("before", "map<string,string>"),
    ("after", "map<string,string>"),
    ("source", "map<string,string>"),
    ("op", "string"),
    ("ts_ms", "string"),  # text: the transaction examples of the docs write it as a JSON string
    ("transaction", "map<string,string>"),
    ("message", "map<string,string>"),
    ("ddl", "string"),
    ("tableChanges", "string"),
    ("status", "string"),
    # MongoDB: the change of an update without the full document (2.x), or the 1.x oplog patch.
    ("updateDescription", "struct<removedFields: array<string>, updatedFields: string, truncatedArrays: string>"),
    ("patch", "string"),
)
EVENT_FIELDS = ", ".join(f"{name} {spark_type}" for name, spark_type in EVENT_FIELD_TYPES)
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

# PostgreSQL (and Oracle LOB) columns whose value the connector could not read -- a TOASTed value that did not
# change. The placeholder is the text itself, its UTF-8 bytes in base64 for bytea columns, or a one-element array.
UNAVAILABLE = "__debezium_unavailable_value"
UNAVAILABLE_FORMS = (UNAVAILABLE, "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", f'["{UNAVAILABLE}"]')

HEADER_NEW_KEY = "__debezium.newkey"
HEADER_OLD_KEY = "__debezium.oldkey"
MONGO_KEY_COLUMN = "_id"


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


def canonical_value(value: Column, name: Column, scale: Column) -> Column:
    """A JsonConverter value (as JSON text) -> canonical text of its Spark type, by the field's semantic name.

    ZonedTimestamp / IsoTimestamp stay ISO-8601 with their offset (CAST reads the instant back exactly);
    IsoDate loses the zone suffix a date cannot hold; MicroDuration/NanoDuration stay integers of their unit.
    """
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
        .when(name == "io.debezium.time.IsoDate", F.regexp_replace(value, r"(Z|[+-]\d\d:?\d\d)$", ""))
        .otherwise(value)
    )


def _field_info(schema: Column) -> Column:
    """map<column, struct<type, name, scale, precision>> from the envelope schema's `after` (else `before`) struct."""
    image_fields = F.filter(schema["fields"], lambda f: f["field"].isin("after", "before"))
    # get() tolerates a schema without before/after (a schema-change or MongoDB envelope): no error, no fields.
    fields = F.coalesce(F.get(image_fields, 0)["fields"], F.array().cast(FIELD_SCHEMA))
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


def _available(image: Column) -> Column:
    """The image without TOAST placeholders: those columns were not read, so they are absent, not NULL."""
    return F.map_filter(image, lambda _column, value: ~F.coalesce(value.isin(*UNAVAILABLE_FORMS), F.lit(False)))


def _unavailable_columns(image: Column) -> Column:
    empty = F.array().cast("array<string>")
    return F.coalesce(
        F.map_keys(F.map_filter(image, lambda _c, value: F.coalesce(value.isin(*UNAVAILABLE_FORMS), F.lit(False)))),
        empty,
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
        # Oracle: transactions in commit order, changes in SCN order inside one; a snapshot row has only `scn`
        # (the snapshot SCN), which then stands for its commit point too.
        .when(
            source["scn"].isNotNull(), decimal_positions(F.coalesce(source["commit_scn"], source["scn"]), source["scn"])
        )
        .when(source["ord"].isNotNull(), decimal_positions(source["ts_ms"], source["ord"]))  # MongoDB
        .otherwise(F.array().cast("array<decimal(38,0)>"))
    )


def _key_map(key_text: Column) -> Column:
    """The Kafka key's fields, with or without the JsonConverter schema wrapper."""
    parsed = F.from_json(key_text, KEY_SCHEMA)
    wrapped = parsed["payload"].isNotNull() & F.map_contains_key(parsed, "schema")
    return F.when(wrapped, F.from_json(parsed["payload"], KEY_SCHEMA)).otherwise(parsed)


def _header_text(headers: Column, name: str) -> Column:
    """The last value of Kafka header ``name`` as text (base64 when the bytes are not UTF-8), or NULL."""
    values = F.transform(F.filter(F.coalesce(headers, F.array()), lambda h: h["key"] == name), lambda h: h["value"])
    last = F.element_at(values, -1)
    text = last.cast("string")
    return F.when(F.size(values) > 0, F.when(F.encode(text, "UTF-8") == last, text).otherwise(F.base64(last)))


def _key_change_provenance(headers: Column) -> Column:
    new_key, old_key = _header_text(headers, HEADER_NEW_KEY), _header_text(headers, HEADER_OLD_KEY)
    parts = [
        F.when(new_key.isNotNull(), F.concat(F.lit(HEADER_NEW_KEY + "="), new_key)),
        F.when(old_key.isNotNull(), F.concat(F.lit(HEADER_OLD_KEY + "="), old_key)),
    ]
    joined = F.concat_ws("; ", *parts)
    return F.when(joined != "", joined)


# --- MongoDB: Extended JSON documents -> canonical text + Spark type per field ------------------------------------


def _extended_value(value: Column) -> Column:
    """One Extended JSON value (a VARIANT) -> struct<value: canonical text, type: Spark type>.

    Canonical and relaxed Extended JSON alike: $numberLong bigint, $numberInt int, $numberDouble double,
    $numberDecimal exact decimal text (string: Decimal128 has no fixed scale), $oid string, $date timestamp (UTC),
    $binary binary, plain strings/booleans as such, plain integers bigint, other plain numbers double; nested
    documents and arrays are kept as their JSON text (string).
    """
    shape = F.schema_of_variant(value)

    def member(path: str) -> Column:
        return F.try_variant_get(value, path, "string")

    def typed(text: Column, spark_type: str) -> Column:
        return F.struct(text.alias("value"), F.lit(spark_type).alias("type"))

    date = F.try_variant_get(value, '$["$date"]', "variant")
    date_millis = F.coalesce(
        F.try_variant_get(date, '$["$numberLong"]', "bigint"), F.try_variant_get(date, "$", "bigint")
    )
    date_text = F.when(
        date_millis.isNotNull(), F.date_format(safe_timestamp_millis(date_millis), "yyyy-MM-dd HH:mm:ss.SSSSSS")
    ).otherwise(F.date_format(F.try_to_timestamp(F.try_variant_get(date, "$", "string")), "yyyy-MM-dd HH:mm:ss.SSSSSS"))
    binary = F.coalesce(member('$["$binary"].base64'), member('$["$binary"]'))
    is_object = shape.startswith("OBJECT<")
    return (
        F.when(
            value.isNull() | (shape == "VOID"),
            F.struct(F.lit(None).cast("string").alias("value"), F.lit(None).cast("string").alias("type")),
        )
        .when(is_object & member('$["$oid"]').isNotNull(), typed(member('$["$oid"]'), "string"))
        .when(is_object & member('$["$numberLong"]').isNotNull(), typed(member('$["$numberLong"]'), "bigint"))
        .when(is_object & member('$["$numberInt"]').isNotNull(), typed(member('$["$numberInt"]'), "int"))
        .when(is_object & member('$["$numberDouble"]').isNotNull(), typed(member('$["$numberDouble"]'), "double"))
        .when(is_object & member('$["$numberDecimal"]').isNotNull(), typed(member('$["$numberDecimal"]'), "string"))
        .when(is_object & date.isNotNull(), typed(date_text, "timestamp"))
        .when(is_object & binary.isNotNull(), typed(binary, "binary"))
        .when(is_object & member('$["$uuid"]').isNotNull(), typed(member('$["$uuid"]'), "string"))
        .when(shape == "STRING", typed(member("$"), "string"))
        .when(shape == "BOOLEAN", typed(member("$"), "boolean"))
        .when(shape.isin("TINYINT", "SMALLINT", "INT", "BIGINT"), typed(member("$"), "bigint"))
        .when(shape.rlike(r"^DECIMAL\(\d+,0\)$"), typed(member("$"), "string"))  # beyond int64: exact digits
        .when(shape.rlike(r"^(DECIMAL|DOUBLE|FLOAT)"), typed(member("$"), "double"))
        .otherwise(typed(F.to_json(value), "string"))
    )


def _mongo_document(document_text: Column) -> Column:
    """An Extended JSON document string -> struct<image map<string,string>, types map<string,string>> (NULL in,
    NULL out; a document that does not parse gives an empty image and ``ok`` false)."""
    fields = F.from_json(document_text, "map<string,variant>")
    converted = F.transform_values(fields, lambda _k, v: _extended_value(v))
    return F.when(
        document_text.isNotNull(),
        F.struct(
            F.transform_values(converted, lambda _k, c: c["value"]).alias("image"),
            F.map_filter(F.transform_values(converted, lambda _k, c: c["type"]), lambda _k, t: t.isNotNull()).alias(
                "types"
            ),
            fields.isNotNull().alias("ok"),
        ),
    )


def _document_strings(text: Column) -> Column:
    """True when the event's after or before (bare or under ``payload``) is a JSON string: a MongoDB document."""
    event = F.try_parse_json(text)
    shapes = [
        F.coalesce(F.schema_of_variant(F.try_variant_get(event, path, "variant")) == "STRING", F.lit(False))
        for path in ("$.after", "$.before", "$.payload.after", "$.payload.before")
    ]
    return shapes[0] | shapes[1] | shapes[2] | shapes[3]


def _mongo_key(kafka_key: Column) -> Column:
    """The Kafka key's ``id`` (the document's _id, as Extended JSON text or plain text) as struct<value, type>."""
    key_id = kafka_key["id"]
    as_variant = F.try_parse_json(key_id)
    return F.when(as_variant.isNotNull(), _extended_value(as_variant)).otherwise(
        F.struct(key_id.alias("value"), F.when(key_id.isNotNull(), F.lit("string")).alias("type"))
    )


def _mongo_patch(update: Column, patch: Column) -> Column:
    """An update without the full document: struct<set: document text, unset: array<string>> from Debezium 2.x
    ``updateDescription`` or 1.x ``patch`` ({$set, $unset}); NULL when there is none."""
    patch_set = F.get_json_object(patch, "$['$set']")
    patch_unset = F.from_json(F.get_json_object(patch, "$['$unset']"), "map<string,string>")
    from_patch = F.when(
        patch_set.isNotNull() | patch_unset.isNotNull(),
        F.struct(
            F.coalesce(patch_set, F.lit("{}")).alias("set"),
            F.coalesce(F.map_keys(patch_unset), F.array().cast("array<string>")).alias("unset"),
            F.lit(False).alias("truncated"),
        ),
    )
    from_description = F.when(
        update.isNotNull(),
        F.struct(
            F.coalesce(update["updatedFields"], F.lit("{}")).alias("set"),
            F.coalesce(update["removedFields"], F.array().cast("array<string>")).alias("unset"),
            F.coalesce(F.size(F.from_json(update["truncatedArrays"], "array<string>")) > 0, F.lit(False)).alias(
                "truncated"
            ),
        ),
    )
    return F.coalesce(from_description, from_patch)


# --- the envelope ----------------------------------------------------------------------------------------------------


def decode_envelopes(
    records: DataFrame,
    value_text: Column,
    key_text: Column,
    pipeline: PipelineConfig,
    wire_reason: Column | None = None,
    wire_detail: Column | None = None,
) -> DataFrame:
    """Records + the JSON text of their values and keys -> decoded rows (``formats.common.DECODED_DDL``).

    ``wire_reason``/``wire_detail``: a failure of the wire layer before the envelope (an Avro value whose schema is
    unknown, ...); such a record is quarantined with that reason and never reaches the envelope logic.
    """
    parsed = F.from_json(
        value_text, VALUE_SCHEMA, {"columnNameOfCorruptRecord": "_corrupt_record", "mode": "PERMISSIVE"}
    )
    wire_reason = wire_reason if wire_reason is not None else F.lit(None).cast("string")
    wire_detail = wire_detail if wire_detail is not None else F.lit(None).cast("string")
    staged = records.select(
        "*",
        value_text.alias("text"),
        parsed.alias("parsed"),
        wire_reason.alias("envelope_wire_reason"),
        wire_detail.alias("envelope_wire_detail"),
    )
    p, text = F.col("parsed"), F.col("text")
    event = F.when(p["payload"].isNotNull(), p["payload"]).otherwise(
        F.struct(*[p[name].alias(name) for name, _ in EVENT_FIELD_TYPES])
    )
    staged = staged.select(
        "*", event.alias("ev"), _field_info(p["schema"]).alias("info"), _key_map(key_text).alias("kafka_key")
    )
    ev, info = F.col("ev"), F.col("info")
    source = ev["source"]
    # MongoDB documents are Extended JSON *strings*: the map-typed parse of after/before fails (which flags the
    # record corrupt) and the strings are read again, as documents, below.
    # Recognised by its source block, or -- when that is missing -- by images that are strings. Never NULL: a NULL
    # here would silently turn the not-JSON check below into "false".
    is_mongo = F.coalesce(
        (source["connector"] == "mongodb")
        | source["collection"].isNotNull()
        | F.when(p["_corrupt_record"].isNotNull(), _document_strings(text)),
        F.lit(False),
    )
    wrapped = p["payload"].isNotNull()
    mongo_after = F.when(
        is_mongo,
        F.when(wrapped, F.get_json_object(text, "$.payload.after")).otherwise(F.get_json_object(text, "$.after")),
    )
    mongo_before = F.when(
        is_mongo,
        F.when(wrapped, F.get_json_object(text, "$.payload.before")).otherwise(F.get_json_object(text, "$.before")),
    )
    staged = staged.select(
        "*",
        _mongo_document(mongo_after).alias("mongo_after"),
        _mongo_document(mongo_before).alias("mongo_before"),
        F.when(is_mongo, _mongo_patch(ev["updateDescription"], ev["patch"])).alias("mongo_patch"),
        F.when(is_mongo, _mongo_key(F.col("kafka_key"))).alias("mongo_key"),
        is_mongo.alias("is_mongo"),
    )
    staged = staged.select(
        "*",
        F.when(F.col("mongo_patch").isNotNull(), _mongo_document(F.col("mongo_patch")["set"])).alias("mongo_set"),
    )
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
    op = ev["op"]
    mongo = _mongo_images(op)
    relational = _relational_images(ev)
    after = F.when(F.col("is_mongo"), mongo["after"]).otherwise(relational["after"])
    before = F.when(F.col("is_mongo"), mongo["before"]).otherwise(relational["before"])
    key_columns = F.when(F.col("is_mongo"), F.array(F.lit(MONGO_KEY_COLUMN))).otherwise(F.map_keys(F.col("kafka_key")))
    key_image = F.when(F.col("is_mongo"), mongo["key_image"]).otherwise(
        # Postgres REPLICA IDENTITY DEFAULT sends update/delete with before = null: the Kafka key still names the row.
        F.coalesce(after, before, F.col("key_text"))
    )
    column_types = F.when(F.col("is_mongo"), mongo["types"]).otherwise(relational["types"])
    # A value present in the message that its declared type cannot decode (bad base64, out-of-range date) must
    # not turn into a silent NULL: the record is quarantined naming the columns.
    undecodable = F.when(F.col("is_mongo"), mongo["undecodable"]).otherwise(
        F.array_distinct(
            F.concat(_lost_values(F.col("after_text"), ev["after"]), _lost_values(F.col("before_text"), ev["before"]))
        )
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
        key_columns=key_columns,
        key_image=key_image,
        after=F.when(op != "d", after),
        before=before,
        column_types=column_types,
        position=_position(source),
        event_time=F.when(source_ts > 0, safe_timestamp_millis(source_ts)).otherwise(
            safe_timestamp_millis(ev["ts_ms"])
        ),
        detail=_key_change_provenance(F.col("headers")),
        **identity,
    )
    mongo_json_ok = F.col("is_mongo") & F.get_json_object(text, "$").isNotNull()
    entries = (
        # A tombstone follows every delete so that log compaction can drop the key; the delete already did the work.
        F.when(
            F.col("value").isNull() | (F.length("value") == 0),
            single(control(S.CONTROL_TOMBSTONE, F.col("key").cast("string"))),
        )
        .when(
            F.col("envelope_wire_reason").isNotNull(),
            single(
                entry(
                    record_kind=F.lit(KIND_QUARANTINE),
                    reason=F.col("envelope_wire_reason"),
                    detail=F.col("envelope_wire_detail"),
                )
            ),
        )
        .when(text.isNull(), single(quarantine(S.REASON_NOT_UTF8, "payload is not valid UTF-8 text")))
        .when(
            p.isNull() | (p["_corrupt_record"].isNotNull() & ~mongo_json_ok),
            single(
                quarantine(
                    S.REASON_NOT_JSON, F.concat(F.lit("payload is not a JSON object: "), F.substring(text, 1, 120))
                )
            ),
        )
        .when(op == "m", single(control(S.CONTROL_MESSAGE, F.to_json(ev["message"]), **identity)))
        .when(
            change_op.isNotNull() & F.col("is_mongo") & mongo["nested"],
            single(
                quarantine(
                    S.REASON_NESTED_UPDATE,
                    F.concat(
                        F.lit("MongoDB update of nested field(s) "),
                        F.array_join(mongo["nested_fields"], ", "),
                        F.lit(" carries no full document; set capture.mode=change_streams_update_full"),
                    ),
                )
            ),
        )
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


def _relational_images(ev: Column) -> dict[str, Column]:
    """Row images of the relational connectors: TOAST placeholders left out, their columns still declared."""
    after, before = F.col("after_text"), F.col("before_text")
    declared = F.col("declared_types")
    unavailable = F.array_distinct(
        F.concat(
            _unavailable_columns(F.coalesce(ev["after"], F.create_map().cast(TEXT_MAP))),
            _unavailable_columns(F.coalesce(ev["before"], F.create_map().cast(TEXT_MAP))),
        )
    )
    # A schemaless message declares no types; an unavailable column is still declared (as text), which is what
    # marks the image as partial for the compactor.
    undeclared = F.filter(unavailable, lambda c: ~F.map_contains_key(declared, c))
    types = F.map_concat(declared, F.map_from_arrays(undeclared, F.transform(undeclared, lambda _c: F.lit("string"))))
    return {
        "after": F.when(ev["after"].isNotNull(), _available(after)),
        "before": F.when(ev["before"].isNotNull(), _available(before)),
        "types": types,
    }


def _mongo_images(op: Column) -> dict[str, Column]:
    """MongoDB images: the full document when the event has it, else the changed fields of the update."""
    doc_after, doc_before, patch, patch_set = (
        F.col("mongo_after"),
        F.col("mongo_before"),
        F.col("mongo_patch"),
        F.col("mongo_set"),
    )
    key = F.col("mongo_key")
    key_map = F.when(key["value"].isNotNull(), F.create_map(F.lit(MONGO_KEY_COLUMN), key["value"]))
    key_types = F.when(key["type"].isNotNull(), F.create_map(F.lit(MONGO_KEY_COLUMN), key["type"])).otherwise(
        F.create_map().cast(TEXT_MAP)
    )
    unset = F.coalesce(patch["unset"], F.array().cast("array<string>"))
    # The changed fields only; a removed field is a present NULL. The key column is declared but not carried, so
    # the compactor completes the image from the document's earlier state.
    partial_after = F.map_concat(
        F.coalesce(patch_set["image"], F.create_map().cast(TEXT_MAP)),
        F.map_from_arrays(unset, F.transform(unset, lambda _c: F.lit(None).cast("string"))),
    )
    partial_after = F.map_filter(partial_after, lambda k, _v: k != MONGO_KEY_COLUMN)
    partial_types = F.map_concat(key_types, F.coalesce(patch_set["types"], F.create_map().cast(TEXT_MAP)))
    partial = doc_after.isNull() & (op == "u") & patch.isNotNull()
    after = F.when(doc_after.isNotNull(), doc_after["image"]).when(partial, partial_after)
    before = F.when(doc_before.isNotNull(), doc_before["image"])
    changed = F.concat(F.coalesce(F.map_keys(patch_set["image"]), F.array().cast("array<string>")), unset)
    nested_fields = F.filter(changed, lambda c: c.contains("."))
    bad_documents = F.filter(
        F.array(
            F.when(doc_after.isNotNull() & ~doc_after["ok"], F.lit("after")),
            F.when(doc_before.isNotNull() & ~doc_before["ok"], F.lit("before")),
            F.when(patch_set.isNotNull() & ~patch_set["ok"], F.lit("updateDescription")),
        ),
        lambda c: c.isNotNull(),
    )
    return {
        "after": after,
        "before": before,
        "key_image": F.coalesce(
            F.when(after.isNotNull() & F.map_contains_key(after, MONGO_KEY_COLUMN), after),
            F.when(before.isNotNull() & F.map_contains_key(before, MONGO_KEY_COLUMN), before),
            key_map,
        ),
        "types": F.when(doc_after.isNotNull(), F.map_concat(key_types, doc_after["types"]))
        .when(partial, partial_types)
        .when(doc_before.isNotNull(), F.map_concat(key_types, doc_before["types"]))
        .otherwise(key_types),
        "undecodable": bad_documents,
        "nested": partial & ((F.size(nested_fields) > 0) | patch["truncated"]),
        "nested_fields": F.when(F.size(nested_fields) > 0, nested_fields).otherwise(
            F.array(F.lit("(truncated arrays)"))
        ),
    }
