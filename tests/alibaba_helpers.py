"""Helpers of the Alibaba format tests: decode captured messages through the real archive reader, render decoded rows
as comparable dicts, read and write the golden JSON-lines files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
from archive_helpers import Record, write_parquet

from cdcreplay import archive
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder
from cdcreplay.formats.wire.avro_wire import load_schema

CONFORMANCE = Path(__file__).parent / "data" / "conformance"
EXPECTED = CONFORMANCE / "alibaba-expected"
ROW_FIELDS = (
    "offset",
    "row_index",
    "record_kind",
    "op",
    "table_id",
    "key",
    "key_columns",
    "after",
    "before",
    "column_types",
    "position",
    "event_time",
    "control_kind",
    "reason",
    "detail",
)


# The table of DTS's Shareplex documentation samples, as a user declares it (the format carries no keys or types).
MIO_LOG = {
    "CL_BIZ1.MIO_LOG": {
        "primary_key": ["MIO_LOG_ID"],
        "column_types": {
            "MIO_LOG_ID": "bigint",
            "PLNMIO_REC_ID": "string",
            "POL_CODE": "string",
            "CNTR_TYPE": "string",
            "CNTR_NO": "string",
            "CG_NO": "string",
        },
    }
}


def pipeline(fmt: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(name="alibaba", format=fmt, archive={"path": "unused"}, tables=tables or {}, options=options)


def decode_values(spark, tmp_path: Path, values: list, cfg: PipelineConfig, name: str = "records", **record_fields):
    """Kafka values (bytes, text or Record) -> a Parquet archive -> the archive reader -> the format's decoder."""
    records = [
        value if isinstance(value, Record) else Record("topic", 0, offset, value, **record_fields)
        for offset, value in enumerate(values)
    ]
    parquet = write_parquet(records, tmp_path / f"{name}.parquet")
    return decoder(cfg.format)(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if value.__class__.__name__ == "Decimal":
        return int(value)
    return value


def rows(decoded) -> list[dict]:
    """Decoded rows as plain dicts (every field a reader relies on), in record then row order."""
    from pyspark.sql import functions as F

    rendered_time = F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS").alias("event_time")
    collected = decoded.select(*[rendered_time if f == "event_time" else f for f in ROW_FIELDS]).collect()
    rendered = [{name: _plain(row[name]) for name in ROW_FIELDS} for row in collected]
    kind_order = {"changelog": 0, "quarantine": 1, "control": 2}
    return sorted(rendered, key=lambda r: (r["offset"], kind_order[r["record_kind"]], r["row_index"]))


def golden(name: str) -> list[dict]:
    lines = (EXPECTED / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip() and not line.startswith("#")]


def write_golden(name: str, found: list[dict], header: str) -> None:  # pragma: no cover - used to draft goldens
    text = "".join(f"# {line}\n" for line in header.splitlines())
    text += "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in found)
    (EXPECTED / name).write_text(text, encoding="utf-8")


def sample(folder: str, name: str) -> str:
    """A vendor doc sample (pretty-printed JSON) as the compact text a Kafka value would hold."""
    document = json.loads((CONFORMANCE / "vendor-doc-samples" / folder / name).read_text(encoding="utf-8"))
    return json.dumps(document, ensure_ascii=False)


DATAWORKS_COLUMNS = [
    {"name": "id", "type": "LONG"},
    {"name": "name", "type": "STRING"},
    {"name": "price", "type": "STRING"},
    {"name": "born", "type": "DATE"},
    {"name": "seen", "type": "DATE"},
    {"name": "blob", "type": "BYTES"},
    {"name": "ok", "type": "BOOLEAN"},
    {"name": "score", "type": "DOUBLE"},
]


def dataworks(
    op: str, sequence: str | None, after=None, before=None, keys=("id",), columns=DATAWORKS_COLUMNS, **payload
) -> str:
    """A DataWorks message of table shop.items; ``payload`` fields replace the payload's."""
    return json.dumps(
        {
            "schema": {
                "dataColumn": columns,
                "primaryKey": list(keys) if keys else None,
                "source": {"dbType": "MySQL", "dbName": "shop", "tableName": "items"},
            },
            "payload": {
                "before": {"dataColumn": before} if before is not None else None,
                "after": {"dataColumn": after} if after is not None else None,
                "sequenceId": sequence,
                "timestamp": {"eventTime": 1620457896000, "systemTime": 1620457896977, "checkpointTime": 1620457896000},
                "op": op,
                "ddl": None,
            }
            | payload,
            "version": "1.0.0",
        }
    )


# --- DTS Avro records ------------------------------------------------------------------------------------------------

DTS_RECORD_AVSC = CONFORMANCE / "alibaba-dts-avro" / "Record.avsc"
DTS_NAMESPACE = "com.alibaba.dts.formats.avro."
DTS_SCHEMA = load_schema(str(DTS_RECORD_AVSC))


def value(branch: str, **fields) -> tuple:
    return (DTS_NAMESPACE + branch, fields)


NONE = (DTS_NAMESPACE + "EmptyObject", "NONE")
DTS_FIELDS = [
    {"name": "id", "dataTypeNumber": 3},
    {"name": "name", "dataTypeNumber": 253},
    {"name": "price", "dataTypeNumber": 246},
    {"name": "note", "dataTypeNumber": 252},
    {"name": "d", "dataTypeNumber": 10},
]


def row(id_: int, name: str = "n", price: str = "1.00", note: str | None = "t", d=(2024, 1, 2)) -> list:
    return [
        value("Integer", precision=11, value=str(id_)),
        value("Character", charset="utf8mb4", value=name.encode()),
        value("Decimal", value=price, precision=5, scale=2),
        None if note is None else value("TextObject", type="TEXT", value=note),
        value("DateTime", year=d[0], month=d[1], day=d[2], hour=None, minute=None, second=None, millis=None),
    ]


def dts(operation: str, id_: int, before=None, after=None, object_name="shop.t", fields=DTS_FIELDS, **extra) -> bytes:
    record = {
        "version": 1,
        "id": id_,
        "sourceTimestamp": 1704164645 + id_,
        "sourcePosition": "1704164645@mysql-bin.000001:4",
        "safeSourcePosition": "",
        "sourceTxid": "9",
        "source": {"sourceType": "MySQL", "version": "8.0.32"},
        "operation": operation,
        "objectName": object_name,
        "processTimestamps": None,
        "tags": {"pk_uk_info": '{"PRIMARY":["id"]}'},
        "fields": fields,
        "beforeImages": before,
        "afterImages": after,
        "bornTimestamp": 0,
    } | extra
    stream = io.BytesIO()
    fastavro.schemaless_writer(stream, DTS_SCHEMA, record)
    return stream.getvalue()
