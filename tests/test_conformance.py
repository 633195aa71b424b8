"""Captured real messages (Flink's test resources, vendor docs, Debezium docs) decode to the rows their projects assert.

Flink's Canal and Debezium tests replay the SAME SQL history and expect the same changelog, so both formats are
checked against one expected file each, and their compacted state against one derived final state. Rows are rendered
in Flink's RowData text form over the tests' physical schema: id INT, name STRING, description STRING, weight FLOAT.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from archive_helpers import Record, records_from_lines, write_parquet
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdcreplay import archive
from cdcreplay.compaction import latest_rows
from cdcreplay.config import PipelineConfig
from cdcreplay.formats import decoder

FLINK = Path(__file__).parent / "data" / "conformance" / "flink-json"
DOCS = Path(__file__).parent / "data" / "conformance"
PHYSICAL = [("id", "int"), ("name", "string"), ("description", "string"), ("weight", "float")]
FLINK_TYPES = {"column_types": {"id": "int", "name": "string", "description": "string", "weight": "float"}}


def pipeline(fmt: str, tables: dict | None = None, **options) -> PipelineConfig:
    return PipelineConfig(
        name="conformance", format=fmt, archive={"path": "unused"}, tables=tables or {}, options=options
    )


def decode_file(spark, tmp_path: Path, path: Path, cfg: PipelineConfig, key: str | None = None):
    """Captured lines -> a Parquet archive -> Spark's archive reader -> the format's decoder."""
    parquet = write_parquet(records_from_lines(path, key=key), tmp_path / f"{path.stem}.parquet")
    raw = archive.read_archive(spark, [str(parquet)], "parquet")
    return decoder(cfg.format)(raw, cfg)


def rendered(image):
    values = [F.coalesce(image[name].try_cast(t).cast("string"), F.lit("null")) for name, t in PHYSICAL]
    return F.concat(F.lit("("), F.concat_ws(",", *values), F.lit(")"))


def flink_rows(decoded) -> list[str]:
    """Changelog rows as Flink prints them: +I/-U/+U/-D(id,name,description,weight), in message order."""
    rows = (
        decoded.where(F.col("record_kind") == "changelog")
        .select("offset", "row_index", "op", rendered(F.col("before")).alias("b"), rendered(F.col("after")).alias("a"))
        .orderBy("offset", "row_index")
        .collect()
    )
    out = []
    for r in rows:
        if r.op in ("snapshot", "insert"):
            out.append(f"+I{r.a}")
        elif r.op == "update":
            out.extend([f"-U{r.b}", f"+U{r.a}"])
        elif r.op == "delete":
            out.append(f"-D{r.b}")
    return out


def expected_lines(name: str) -> list[str]:
    return [line for line in (FLINK / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def expected_final_state(section: str) -> list[str]:
    """Rows of one `##` section of expected-final-state.txt."""
    rows, current = [], None
    for line in (FLINK / "expected-final-state.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") and not line.startswith("## ("):
            current = line
        elif current and section in current and line and not line.startswith("#"):
            rows.append(line)
    return rows


def final_state(decoded) -> list[str]:
    changes = decoded.where(F.col("record_kind") == "changelog").drop("timestamp", "record_kind")
    state = latest_rows(changes).where(~F.col("deleted"))
    values = [F.coalesce(F.col("after")[n].try_cast(t).cast("string"), F.lit("null")) for n, t in PHYSICAL]
    return sorted(
        (r.line for r in state.select(F.concat_ws(",", *values).alias("line")).collect()),
        key=lambda line: int(line.split(",")[0]),
    )


@pytest.mark.parametrize("name", ["canal-data.txt", "canal-data-with-init.txt"])
def test_canal_changelog_matches_flink(spark, tmp_path, name):
    decoded = decode_file(spark, tmp_path, FLINK / name, pipeline("canal-json", {"inventory.products2": FLINK_TYPES}))
    assert flink_rows(decoded) == expected_lines("expected-changelog-canal.txt")
    assert final_state(decoded) == expected_final_state("canal-data.txt")


def test_canal_init_rows_are_snapshot_rows_and_unknown_columns_are_kept_apart(spark, tmp_path):
    decoded = decode_file(
        spark,
        tmp_path,
        FLINK / "canal-data-with-init.txt",
        pipeline("canal-json", {"inventory.products2": FLINK_TYPES}),
    )
    first = decoded.where("offset = 0").orderBy("row_index").collect()
    assert {r.op for r in first} == {"snapshot"} and len(first) == 9
    # The unknown column `other` rides along in the image but never reaches the expected physical columns.
    assert first[0].after["other"] == "val1"


def test_canal_filtered_tables_match_flink(spark, tmp_path):
    decoded = decode_file(spark, tmp_path, FLINK / "canal-data-filter-table.txt", pipeline("canal-json"))
    chosen = decoded.where(
        (F.col("record_kind") != "changelog")
        | (F.col("source_db").rlike("^my.*") & F.col("source_table").rlike("^prod.*"))
    )
    assert flink_rows(chosen) == expected_lines("expected-changelog-canal.txt")


def test_canal_ddl_goes_to_the_control_log(spark, tmp_path):
    decoded = decode_file(spark, tmp_path, FLINK / "canal-data.txt", pipeline("canal-json"))
    control = decoded.where("record_kind = 'control'").select("control_kind", "table_id", "detail").collect()
    assert [(r.control_kind, r.table_id) for r in control] == [("ddl", "inventory.user02")]
    assert control[0].detail.startswith("CREATE TABLE")


@pytest.mark.parametrize(
    "name",
    [
        "debezium-data-schema-include.txt",
        "debezium-data-schema-exclude.txt",
        "debezium-postgres-data-schema-include.txt",
        "debezium-postgres-data-schema-exclude.txt",
    ],
)
def test_debezium_changelog_matches_flink(spark, tmp_path, name):
    # Flink's captures carry no Kafka key, so the key column comes from the config, as a user would declare it.
    tables = {t: {"primary_key": ["id"], **FLINK_TYPES} for t in ("inventory.products", "postgres.inventory.products")}
    decoded = decode_file(spark, tmp_path, FLINK / name, pipeline("debezium-json", tables))
    assert flink_rows(decoded) == expected_lines("expected-changelog-debezium.txt")
    assert final_state(decoded) == expected_final_state("debezium-data-schema")
    assert decoded.where("record_kind = 'quarantine'").count() == 0


def test_debezium_schema_types_are_declared(spark, tmp_path):
    decoded = decode_file(spark, tmp_path, FLINK / "debezium-data-schema-include.txt", pipeline("debezium-json"))
    first = decoded.where("offset = 0").first()
    assert dict(first.column_types) == {"id": "int", "name": "string", "description": "string", "weight": "double"}
    assert first.position == [3, 154, 0]  # mysql-bin.000003, pos 154, row 0


def test_debezium_replica_identity_default_falls_back_to_the_kafka_key(spark, tmp_path):
    """Postgres REPLICA IDENTITY DEFAULT: updates and deletes come with before = null; the Kafka key names the row."""
    lines = (FLINK / "debezium-postgres-data-replica-identity.txt").read_text(encoding="utf-8").splitlines()
    records = []
    for offset, line in enumerate(text for text in lines if text.strip()):
        event = json.loads(line)
        row = event["after"] or event["before"]
        # The delete of id 111 has before = after = null: only its Kafka key says which row it removed.
        key_id = row["id"] if row else 111
        records.append(Record("pg", 0, offset, line, key=json.dumps({"id": key_id})))
    parquet = write_parquet(records, tmp_path / "replica.parquet")
    cfg = pipeline("debezium-json", {"postgres.inventory.products": FLINK_TYPES})
    decoded = decoder("debezium-json")(archive.read_archive(spark, [str(parquet)], "parquet"), cfg)
    assert decoded.where("record_kind = 'quarantine'").count() == 0
    assert final_state(decoded) == expected_final_state("debezium-data-schema")


def test_debezium_replica_identity_without_any_key_is_quarantined(spark, tmp_path):
    cfg = pipeline("debezium-json", {"postgres.inventory.products": FLINK_TYPES})
    decoded = decode_file(spark, tmp_path, FLINK / "debezium-postgres-data-replica-identity.txt", cfg)
    bad = decoded.where("record_kind = 'quarantine'").select("offset", "reason", "detail").collect()
    # Every row-change lacks a key: no Kafka key, no config key, and (for the last delete) no image at all.
    assert {r.reason for r in bad} == {"missing_key"}
    assert len(bad) == 16
    assert "declare tables.<table>.primary_key" in bad[0].detail


def test_debezium_doc_control_messages(spark, tmp_path):
    names = [
        "postgresql-L457-0-txn-BEGIN.json",
        "postgresql-L457-1-txn-END.json",
        "shared-mariadb-mysql-L208-0-schema-change.json",
        "postgresql-L1328-0-op-m.json",
        "postgresql-L1249-0-op-t.json",
    ]
    records = [
        Record("docs", 0, i, json.dumps(json.loads((DOCS / "debezium" / "doc-examples" / n).read_text())))
        for i, n in enumerate(names)
    ]
    records.append(Record("docs", 0, len(names), None, key='{"id": 1}'))  # a tombstone
    parquet = write_parquet(records, tmp_path / "docs.parquet")
    decoded = decoder("debezium-json")(
        archive.read_archive(spark, [str(parquet)], "parquet"), pipeline("debezium-json")
    )
    expected = [
        (0, "control", "transaction", None, None),
        (1, "control", "transaction", None, None),
        (2, "control", "schema_change", None, None),
        (3, "control", "message", None, None),
        (4, "changelog", None, "truncate", "postgres.public.customers"),
        (5, "control", "tombstone", None, None),
    ]
    assertDataFrameEqual(
        decoded.orderBy("offset").select("offset", "record_kind", "control_kind", "op", "table_id"),
        spark.createDataFrame(
            expected, "offset bigint, record_kind string, control_kind string, op string, table_id string"
        ),
        checkRowOrder=True,
    )


def test_dts_legacy_delete_without_key_column_is_quarantined(spark, tmp_path):
    """Alibaba's own sample of a pre-2022-03-20 DELETE carries the row in `old`, without the key column."""
    sample = DOCS / "vendor-doc-samples" / "alibaba-dts-canal-json" / "01-delete-legacy-instance-before-2022-03-20.json"
    records = [Record("dts", 0, 0, json.dumps(json.loads(sample.read_text(encoding="utf-8"))))]
    parquet = write_parquet(records, tmp_path / "legacy.parquet")
    raw = archive.read_archive(spark, [str(parquet)], "parquet")
    row = decoder("canal-json")(raw, pipeline("canal-json", legacy_swapped=True)).first()
    assert (row.record_kind, row.reason, row.op, row.table_id) == (
        "quarantine",
        "missing_key",
        "delete",
        "dbname.tablename",
    )
    assert re.search(r"key columns: id", row.detail)


def test_dts_new_layout_delete_sample(spark, tmp_path):
    sample = DOCS / "vendor-doc-samples" / "alibaba-dts-canal-json" / "02-delete-instance-after-2022-03-20.json"
    records = [Record("dts", 0, 0, json.dumps(json.loads(sample.read_text(encoding="utf-8"))))]
    parquet = write_parquet(records, tmp_path / "new.parquet")
    rows = decoder("canal-json")(
        archive.read_archive(spark, [str(parquet)], "parquet"), pipeline("canal-json")
    ).collect()
    assert [(r.record_kind, r.op) for r in rows] == [("changelog", "delete")] * len(rows)
    assert all(r.before is not None and r.after is None for r in rows)
