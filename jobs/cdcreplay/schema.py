"""The DataFrame contracts every stage agrees on.

Kept free of pyspark imports at module level users (config, DAGs) never pay for: the Spark types are built lazily.

raw record   -- one archived Kafka record, Spark's Kafka-source columns.
changelog    -- one row per row-change, whatever the vendor format (see ``CHANGELOG_COLUMNS``).
quarantine   -- one row per record that could not be decoded, with a reason code and its Kafka coordinates.
control      -- one row per non-row message (DDL, heartbeats, transaction markers, schema changes, truncates).

Values in ``after``/``before`` are *canonical text*: the exact value rendered so that ``CAST(text AS <spark type>)``
gives it back (binary as base64). ``column_types`` says which Spark SQL type each column has in the source, as the
format declares it. Keeping values as text until publish lets one compaction serve every format and keeps "absent"
(key missing from the map: the format did not carry the column) apart from NULL (key present, value null).
"""

from __future__ import annotations

# Operations of the changelog vocabulary.
OP_SNAPSHOT = "snapshot"  # row read by a full load / snapshot (Debezium op=r, Canal/DTS INIT, Qlik REFRESH)
OP_INSERT = "insert"
OP_UPDATE = "update"
OP_DELETE = "delete"
OP_TRUNCATE = "truncate"  # table-level: every key of the table is deleted as of this position
ROW_OPS = (OP_SNAPSHOT, OP_INSERT, OP_UPDATE, OP_DELETE)

RAW_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
RAW_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>"
)

# Ordering: `position` is the source position as a list of decimals compared lexicographically
# (MySQL binlog [file seq, pos, row], Postgres [lsn], Canal [es, id], ...). Ties -- and formats without a
# position -- fall back to the Kafka coordinates and the row's index inside its message.
CHANGELOG_DDL = (
    "table_id string, source_db string, source_schema string, source_table string, op string, "
    "key string, key_columns array<string>, "
    "after map<string, string>, before map<string, string>, column_types map<string, string>, "
    "position array<decimal(38,0)>, event_time timestamp, "
    "topic string, partition int, offset bigint, row_index int, format string"
)


def column_names(ddl: str) -> tuple[str, ...]:
    """The column names of one of the DDL strings here, in order (a ", " inside a map type starts no column)."""
    return tuple(part.strip().split(" ")[0] for part in ddl.split(", ") if " " in part.strip())


CHANGELOG_COLUMNS = column_names(CHANGELOG_DDL)

QUARANTINE_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, format string, reason string, "
    "detail string, key binary, value binary"
)

CONTROL_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, format string, kind string, "
    "table_id string, detail string"
)

# Reason codes for quarantine rows. docs/how-it-works.md (Accounting and quarantine) lists them; keep the two in step.
REASON_NOT_JSON = "not_json"  # payload is not parseable JSON (truncated, binary, empty object text)
REASON_UNKNOWN_OP = "unknown_op"  # op/type the format does not define
REASON_MISSING_KEY = "missing_key"  # no primary key could be found (message, Kafka key, or config)
REASON_MISSING_TABLE = "missing_table"  # the message does not say which table it belongs to
REASON_MISSING_IMAGE = "missing_image"  # a row-change without the row image it needs (e.g. insert without after)
REASON_BAD_VALUE = "bad_value"  # a value that cannot be decoded with its declared type
REASON_NOT_UTF8 = "not_utf8"
REASON_DECODE_ERROR = "decode_error"  # a Python-side decoder raised on this record (the message says what)
REASON_BAD_AVRO = "bad_avro"  # bytes that do not decode with the writer schema (truncated, wrong schema, garbage)
REASON_UNKNOWN_SCHEMA = "unknown_schema"  # a schema id / fingerprint with no schema file, or no writer schema at all
REASON_UNPAIRED_UPDATE = "unpaired_update"  # DataWorks UPDATE_BEFOR whose UPDATE_AFTER (same sequenceId) is missing
REASON_WRONG_BRANCH = "wrong_branch"  # DTS Avro: a union branch the field cannot hold (Timestamp for a VARCHAR, ...)
REASON_PARTIAL_KEY_CHANGE = "partial_key_change"  # an update moves a row to a new key but carries only some columns
# Control kinds of the Alibaba formats (issue 3).
CONTROL_NOTE = "note"  # how a record was read when the config left it open; the run summary counts them
CONTROL_UPDATE_BEFORE = "update_before"  # a before-image-only message whose update is applied by its after message
REASON_SHELL_SYNTAX = "shell_syntax"  # DRS DDS: `value`/`where` is not Mongo shell syntax the parser knows
REASON_NO_DOCUMENT = "no_document"  # DRS DDS: $set/$unset on an _id never inserted (or deleted) before it
REASON_MISSING_METADATA = "missing_metadata"  # Qlik: a data message's metadata message is not in the archive
REASON_NESTED_UPDATE = "nested_update"  # MongoDB update of a nested field without the full document

# Control kinds.
CONTROL_DDL_KIND = "ddl"
CONTROL_TRUNCATE = "truncate"
CONTROL_TRANSACTION = "transaction"
CONTROL_SCHEMA_CHANGE = "schema_change"
CONTROL_MESSAGE = "message"  # Debezium op=m logical-decoding message
CONTROL_TOMBSTONE = "tombstone"  # Kafka tombstone (null value) following a delete: nothing to apply
CONTROL_HEARTBEAT = "heartbeat"

# Provenance columns on every published latest-state row.
PROVENANCE_COLUMNS = ("_op", "_event_time", "_topic", "_partition", "_offset", "_position")


def struct_type(ddl: str):
    """Spark StructType for one of the DDL strings above."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(ddl)
