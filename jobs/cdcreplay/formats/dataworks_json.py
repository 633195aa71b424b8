"""Alibaba DataWorks "Kafka message format" (docs/format-spec.md section b). Decoded in Python (``python_rows``): one
JSON parse per message, read as Spark's from_json read it (``from_json_in_python``); the update pairs are found in
Spark. With ``options.reader`` spark (auto: from 700,000 records) Spark's JSON reader decodes the inserts, deletes,
transaction messages and update pairs ``dataworks_native`` vouches for, and this decoder the rest.

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

import zoneinfo
from collections.abc import Iterator
from datetime import datetime
from functools import partial

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdcreplay import schema as S
from cdcreplay.config import ConfigError, PipelineConfig
from cdcreplay.formats import dataworks_native
from cdcreplay.formats.common import COORDINATES
from cdcreplay.formats.envelopes.dataworks_message import (
    AFTER_OP,
    BEFORE_OP,
    DDL_OPS,
    FORMAT_ID,  # noqa: F401 (every format module names its format)
    OFFSET_ZONE,
    ROW_ID,
    TRANSACTION_OPS,
    declared_type,
)
from cdcreplay.formats.python_rows import (
    RECORD_COLUMNS,
    DecodeError,
    RawRecord,
    change,
    control_entry,
    decode_with_python,
    truncate,
)
from cdcreplay.formats.routing import (
    KIND_QUARANTINE,
    Routing,
    table_id_of,
)
from cdcreplay.formats.values.configured_types import lossy_columns
from cdcreplay.formats.values.text_casts import spark_zone, timestamp_of_millis, try_decimal, try_integer, zone_of
from cdcreplay.formats.wire.from_json_in_python import (
    Mismatch,
    bigint,
    struct,
    text,
    text_array,
    text_map,
    texts_of,
)
from cdcreplay.formats.wire.json_reader import AS_SPARK_READ, not_json, read_object
from cdcreplay.formats.wire.native_json import decode_by_reader, reader_chooses_native, sample_rate

JSON_READING = AS_SPARK_READ  # how its messages' JSON is read (``json_reader``)
PARTNER = "struct<image: map<string,string>, partition: int, offset: bigint>"
PAIR_DDL = (
    "topic string, partition int, offset bigint, table_id string, sequence string, op string, image map<string,string>"
)
# The pair stage's Arrow columns hold UTF-8 text, but a JSON escape can put a lone UTF-16 surrogate into a table name,
# a sequenceId or a before image (the record that writes it into its decoded row is quarantined `not_utf8`). Such a
# string -- and, to stay unambiguous, one that starts with the marker -- crosses the stage as the marker and the hex of
# its bytes, and comes out as it went in.
CARRIED = "\x00"


def check_config(pipeline: PipelineConfig) -> None:
    time_zone_of(pipeline)


def time_zone_of(pipeline: PipelineConfig) -> str:
    """The ``time_zone`` option, checked before work: Spark would fail on an unknown zone mid-run."""
    zone = str(pipeline.options.get("time_zone", "UTC"))
    if zone == "UTC" or _is_zone(zone):
        return zone
    raise ConfigError(
        f"pipeline {pipeline.name}: options.time_zone {zone!r} is not a time zone; use an offset like "
        "'+08:00' or a region like 'Asia/Shanghai' (the zone DataWorks ran in)"
    )


def _is_zone(zone: str) -> bool:
    """An offset of at most 18 hours (what Spark's zones hold), or a region Python's zone data knows."""
    if OFFSET_ZONE.match(zone):
        return spark_zone(zone) is not None
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


class _Message:
    """The fields of one message, typed as its schema declares them (a field of another type: ``Mismatch``)."""

    def __init__(self, document: dict):
        schema, payload = struct(document.get("schema")) or {}, struct(document.get("payload")) or {}
        columns = text_array_of_structs(schema.get("dataColumn"))
        self.primary_key = text_array(schema.get("primaryKey"))
        self.source = texts_of(
            struct(schema.get("source")) or {}, "dbType", "dbVersion", "dbName", "schemaName", "tableName"
        )
        self.before = text_map((struct(payload.get("before")) or {}).get("dataColumn"))
        self.after = text_map((struct(payload.get("after")) or {}).get("dataColumn"))
        fields = texts_of(payload, "sequenceId", "scn", "op")
        self.sequence, self.op = fields["sequenceId"], fields["op"]
        timestamp = struct(payload.get("timestamp")) or {}
        self.event_millis = bigint(timestamp.get("eventTime"))
        bigint(timestamp.get("systemTime"))
        self.checkpoint_millis = bigint(timestamp.get("checkpointTime"))
        self.ddl_text = texts_of(struct(payload.get("ddl")) or {}, "text", "ddlMeta")["text"]
        text(document.get("version"))
        # The declared types: unknown names are kept as string.
        self.declared = {
            column["name"]: declared_type(column["type"])
            for column in columns
            if column is not None and column["name"] is not None
        }
        self.table_id = table_id_of(self.source["dbName"], self.source["schemaName"], self.source["tableName"])


def text_array_of_structs(value) -> list[dict | None]:
    """``schema.dataColumn``: an array of {name, type} structs (or null)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Mismatch("array")
    columns = []
    for item in value:
        item = struct(item)
        columns.append(None if item is None else texts_of(item, "name", "type"))
    return columns


def _read(record: RawRecord) -> _Message:
    document = read_object(record.value, JSON_READING)
    try:
        return _Message(document)
    except Mismatch:
        raise not_json(record.value) from None


def _wall_clock(value: str, zone) -> datetime | None:
    """A DATE value (epoch ms, text) as the wall clock in ``zone``: ``from_utc_timestamp(timestamp_millis(v), zone)``;
    NULL when the text is no integer or the instant is outside years 1..9999."""
    moment = timestamp_of_millis(try_integer(value, 64))
    if moment is None:
        return None
    try:
        return moment.astimezone(zone).replace(tzinfo=None)
    except (OverflowError, ValueError):
        return None


def _canonical_image(image, declared: dict, effective: dict, zone) -> tuple[dict | None, list[str]]:
    """DataWorks values -> canonical text, and the columns whose value could not be read (DATE epoch ms become the
    wall clock in ``zone``, a date when configured so and midnight there)."""
    if image is None:
        return None, []
    converted, lost = {}, []
    for column, value in image.items():
        if value is None or declared.get(column) != "timestamp_ntz":
            converted[column] = value
            continue
        wall = _wall_clock(value, zone)
        if wall is None:
            result = None
        elif effective.get(column) == "date":
            midnight = (wall.hour, wall.minute, wall.second, wall.microsecond // 1000) == (0, 0, 0, 0)
            result = f"{wall.year:04d}-{wall.month:02d}-{wall.day:02d}" if midnight else None
        else:
            result = f"{wall.year:04d}-{wall:%m-%d %H:%M:%S}.{wall.microsecond // 1000:03d}"
        converted[column] = result
        if result is None:
            lost.append(column)
    return converted, lost


def _quarantine(reason: str, detail: str) -> dict:
    return {"record_kind": KIND_QUARANTINE, "reason": reason, "detail": detail}


def _heartbeat_detail(event_time: datetime | None, message: _Message) -> str:
    """What to_json wrote for the heartbeat struct (null fields left out)."""
    parts = []
    if event_time is not None:
        parts.append(
            f'"watermark":"{event_time.year:04d}-{event_time:%m-%dT%H:%M:%S}.{event_time.microsecond // 1000:03d}Z"'
        )
    if message.event_millis is not None:
        parts.append(f'"eventTime":{message.event_millis}')
    if message.checkpoint_millis is not None:
        parts.append(f'"checkpointTime":{message.checkpoint_millis}')
    return "{" + ",".join(parts) + "}"


def decode_record(settings: tuple, before_partner: dict | None, after_partner: dict | None, record: RawRecord):
    """One record's entries; ``before_partner`` / ``after_partner``: its update pair's messages (``_with_partners``)."""
    keys, types, zone = settings
    if before_partner is not None and before_partner["image"] is not None:  # Arrow gives a map as (key, value) pairs
        image = {_restored(column): _restored(value) for column, value in before_partner["image"]}
        before_partner = {**before_partner, "image": image}
    m = _read(record)
    op, sequence = m.op, m.sequence
    identity = {"db": m.source["dbName"], "schema": m.source["schemaName"], "table": m.source["tableName"]}
    where = {"position": [try_decimal(sequence)], "event_time": timestamp_of_millis(m.event_millis)}

    if op == "MHEARTBEAT":
        heartbeat = control_entry(S.CONTROL_HEARTBEAT, _heartbeat_detail(where["event_time"], m))
        return [heartbeat | {"event_time": where["event_time"]}]
    if op in TRANSACTION_OPS:
        return [control_entry(S.CONTROL_TRANSACTION, " ".join(p for p in (op, sequence) if p is not None))]
    ddl_text = m.ddl_text if m.ddl_text is not None else op
    if op in DDL_OPS:
        return [control_entry(S.CONTROL_DDL_KIND, ddl_text, **identity)]
    if op == "TRUNCATE":
        return [truncate(**identity, **where), control_entry(S.CONTROL_TRUNCATE, ddl_text, **identity)]
    if op == BEFORE_OP:
        if after_partner is None:
            return [
                _quarantine(
                    S.REASON_UNPAIRED_UPDATE,
                    f"UPDATE_BEFOR of sequenceId {sequence if sequence is not None else 'null'} has no UPDATE_AFTER "
                    "with that sequenceId among the replayed records: the update cannot be applied (replay a range "
                    "that holds both messages)",
                )
            ]
        partition, offset = after_partner["partition"], after_partner["offset"]
        detail = (
            None
            if partition is None or offset is None
            else f"before image of the update applied by partition {partition} offset {offset}"
        )
        return [control_entry(S.CONTROL_UPDATE_BEFORE, detail, **identity)]
    if op not in ("INSERT", AFTER_OP, "DELETE"):
        return [
            _quarantine(
                S.REASON_UNKNOWN_OP,
                f"op '{op if op is not None else 'null'}' is not a DataWorks op (INSERT, UPDATE_BEFOR, UPDATE_AFTER, "
                "DELETE, TRUNCATE, DDL, transaction or MHEARTBEAT; ops are case-sensitive)",
            )
        ]

    declared = m.declared
    effective = {**declared, **types.get(m.table_id, {})}
    before_raw = m.before if m.before is not None else (before_partner or {}).get("image")
    after, lost_after = _canonical_image(m.after, declared, effective, zone)
    before, lost_before = _canonical_image(before_raw, declared, effective, zone)
    bad = {*lost_after, *lost_before, *lossy_columns(after, effective), *lossy_columns(before, effective)}
    if bad:
        detail = "value cannot be read exactly with its type in column(s): " + ", ".join(sorted(bad))
        return [_quarantine(S.REASON_BAD_VALUE, detail)]
    if (op != "DELETE" and after is None) or (op == "DELETE" and before is None):
        image = "before" if op == "DELETE" else "after"
        return [_quarantine(S.REASON_MISSING_IMAGE, f"op {op} without its {image}.dataColumn image")]

    message_keys = m.primary_key or ([ROW_ID] if ROW_ID in declared else None)
    key_columns = keys.get(m.table_id) or message_keys

    def row(row_op: str, after_image: dict | None, before_image: dict | None, key_image: dict) -> dict:
        return change(
            row_op,
            **identity,
            key_columns=message_keys,
            after=after_image,
            before=before_image,
            key_image=key_image,
            column_types=declared,
            **where,
        )

    if op == "INSERT":
        return [row(S.OP_INSERT, after, None, after)]
    if op == "DELETE":
        return [row(S.OP_DELETE, None, before, before)]
    # Before and after name different keys: the update moved the row (delete the old key, then write the new one).
    moved = (
        before is not None
        and key_columns is not None
        and all(c is not None and c in before for c in key_columns)
        and any(before.get(c) != after.get(c) for c in key_columns)
    )
    if moved:
        return [row(S.OP_DELETE, None, before, before), row(S.OP_UPDATE, after, before, after)]
    return [row(S.OP_UPDATE, after, before, after)]


def _carried(value: str | None) -> str | None:
    """``value`` as the pair stage's Arrow columns can hold it (``_restored`` gives it back)."""
    if value is None or (not value.startswith(CARRIED) and (value.isascii() or _is_unicode(value))):
        return value
    return CARRIED + value.encode("utf-8", "surrogatepass").hex()


def _restored(value: str | None) -> str | None:
    if value is None or not value.startswith(CARRIED):
        return value
    return bytes.fromhex(value[len(CARRIED) :]).decode("utf-8", "surrogatepass")


def _is_unicode(value: str) -> bool:
    """No lone UTF-16 surrogate in ``value``: it has a UTF-8 form."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _pair_rows(batches: Iterator, schema) -> Iterator:
    """The UPDATE_BEFOR / UPDATE_AFTER messages that have a sequenceId: their pair key and before image."""
    import pyarrow as pa

    for batch in batches:
        columns = batch.to_pydict()
        found = {name: [] for name in schema.names}
        for index in range(batch.num_rows):
            value = columns["value"][index]
            if not value:
                continue
            coordinates = (columns[name][index] for name in COORDINATES)
            record = RawRecord(*coordinates, timestamp=None, key=None, value=value, headers=())
            try:
                m = _read(record)
            except DecodeError:
                continue
            if m.op not in (BEFORE_OP, AFTER_OP) or m.sequence is None:
                continue
            for name, item in zip(
                schema.names,
                (
                    record.topic,
                    record.partition,
                    record.offset,
                    _carried(m.table_id),
                    _carried(m.sequence),
                    m.op,
                    m.before,
                ),
                strict=True,
            ):
                found[name].append(item)
        found["image"] = [
            None if image is None else [(_carried(k), _carried(v)) for k, v in image.items()]
            for image in found["image"]
        ]
        yield pa.RecordBatch.from_pydict(found, schema=schema)


def _with_partners(records: DataFrame) -> DataFrame:
    """Each UPDATE_BEFOR/UPDATE_AFTER gets its pair's before image and coordinates (same topic, table, sequenceId).

    Only the records that can be update messages (their text names UPDATE_ or escapes an ASCII character) are read
    for their pair key and shuffled; every other record passes by with empty partner columns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    pair_schema = to_arrow_schema(S.struct_type(PAIR_DDL), timezone="UTC")  # on the driver, as the DDL needs Spark

    candidate = dataworks_native.pair_candidate(F.col("value"))
    candidates = records.where(candidate)
    pairs = candidates.select("topic", "partition", "offset", "value").mapInArrow(
        partial(_pair_rows, schema=pair_schema), PAIR_DDL
    )
    window = Window.partitionBy("topic", "table_id", "sequence")
    coordinates = F.struct("partition", "offset")

    def partner(op: str, image) -> F.Column:
        # The earliest message of that op in the pair: deterministic even if the archive holds it twice.
        fields = F.struct(image.alias("image"), "partition", "offset")
        return F.min_by(fields, F.when(F.col("op") == op, coordinates)).over(window)

    partners = pairs.select(
        *COORDINATES,
        partner(BEFORE_OP, F.col("image")).alias("before_partner"),
        partner(AFTER_OP, F.lit(None).cast("map<string,string>")).alias("after_partner"),
    ).dropDuplicates(list(COORDINATES))
    updates = candidates.select(*RECORD_COLUMNS).join(partners, list(COORDINATES), "left")
    others = records.where(~candidate).select(
        *RECORD_COLUMNS,
        F.lit(None).cast(PARTNER).alias("before_partner"),
        F.lit(None).cast(PARTNER).alias("after_partner"),
    )
    return updates.select(*RECORD_COLUMNS, "before_partner", "after_partner").unionByName(others)


def decode_in_python(records: DataFrame, pipeline: PipelineConfig) -> DataFrame:
    zone = zone_of(time_zone_of(pipeline))
    configured = Routing.of(pipeline)  # the keys and types the config declares, as routing applies them
    settings = (configured.keys, configured.types, zone)
    partnered = _with_partners(records)
    return decode_with_python(
        partnered, partial(decode_record, settings), pipeline, context_columns=("before_partner", "after_partner")
    )


# `reader: auto` decodes natively from this many records on. Measured on 2 cores (docs/benchmarks.md, forty-eighth
# session), the decode stage of the simulator's archives: native 39.0-40.1 s against 31.4-32.9 s in Python at 296,554
# records (fresh JVMs), 180.7 s against 224.4 s at 2,968,725: the two cross near 700,000.
NATIVE_MIN_RECORDS = 700_000


def reads_natively(pipeline: PipelineConfig, record_count: int | None = None) -> bool:
    """Whether Spark's JSON reader decodes what ``dataworks_native`` vouches for, the Python decoder the rest
    (``native_json.reader_chooses_native``)."""
    return reader_chooses_native(pipeline, record_count, NATIVE_MIN_RECORDS)


def decode_natively(records: DataFrame, pipeline: PipelineConfig, record_count: int | None = None) -> DataFrame | None:
    """Every record with its native decoding and the ``native`` flag (``native_json``), or None when no table version
    of the sampled row changes has a native plan (then every record goes to Python without a parse for nothing)."""
    zone = time_zone_of(pipeline)
    plans = dataworks_native.table_plans(records, pipeline, zone, sample_rate(record_count))
    return dataworks_native.native_rows(records, pipeline, plans, zone) if plans else None


def decode(records: DataFrame, pipeline: PipelineConfig, *, base_state: DataFrame | None = None) -> DataFrame:
    return decode_by_reader(records, pipeline, reads_natively, decode_natively, decode_in_python)
