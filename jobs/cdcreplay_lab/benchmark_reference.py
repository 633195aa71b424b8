"""The DuckDB reference of the benchmark: the same archive decoded and compacted to latest state by plain SQL.

What it does is the bare minimum the product does: parse each message, take each row's key, keep the last change per
(table, key) in Kafka order, drop deleted keys, write the latest state to Parquet. No typing, provenance, value
checks, quarantine or accounting -- so it is a floor for the work, not an equal: the ratio tells how much the
product's guarantees and Spark cost on the same machine, in the same run.
"""

from __future__ import annotations

import time
from pathlib import Path

# Per format: SQL over `records(partition, offset, k, v)` (key and value as text; tombstones already removed) that
# yields the latest-state rows `(tbl, key, image)`.
_DEBEZIUM = """
    WITH events AS (
        SELECT partition, "offset", COALESCE(v->'payload', v) AS p,
               COALESCE(k::JSON->'payload', k::JSON)::VARCHAR AS key
        FROM records
    ), latest AS (
        SELECT p->>'$.source.table' AS tbl, key,
               arg_max(struct_pack(op := p->>'op', image := COALESCE(p->'after', p->'before')),
                       (partition, "offset")) AS last
        FROM events WHERE p->>'op' IS NOT NULL
        GROUP BY ALL
    )
    SELECT tbl, key, last.image::VARCHAR AS image FROM latest WHERE last.op <> 'd'
"""
_CANAL = """
    WITH messages AS (
        SELECT partition, "offset", v->>'table' AS tbl, v->>'type' AS type,
               from_json(v->'pkNames', '["VARCHAR"]') AS pk, from_json(v->'data', '["JSON"]') AS data
        FROM records WHERE v->>'type' IN ('INSERT', 'UPDATE', 'DELETE', 'INIT')
    ), row_changes AS (
        SELECT partition, "offset", tbl, type, pk, unnest(data) AS row, generate_subscripts(data, 1) AS row_index
        FROM messages
    ), latest AS (
        SELECT tbl, list_transform(pk, lambda c: json_extract_string(row, '$."' || c || '"'))::VARCHAR AS key,
               arg_max(struct_pack(type := type, image := row), (partition, "offset", row_index)) AS last
        FROM row_changes GROUP BY ALL
    )
    SELECT tbl, key, last.image::VARCHAR AS image FROM latest WHERE last.type <> 'DELETE'
"""
REFERENCE_SQL = {"debezium-json": _DEBEZIUM, "canal-json": _CANAL}


def _quoted(path: str) -> str:
    """A path as an SQL string literal (DDL and COPY take no prepared parameters)."""
    return "'" + path.replace("'", "''") + "'"


def run_reference(fmt: str, archive: Path, out_dir: Path, threads: int = 2) -> dict | None:
    """Decode + compact ``archive`` with DuckDB; None for a format without a reference query."""
    sql = REFERENCE_SQL.get(fmt)
    if sql is None:
        return None
    import duckdb

    out_dir.mkdir(parents=True, exist_ok=True)
    connection = duckdb.connect()
    connection.execute(f"SET threads = {int(threads)}")
    began = time.monotonic()
    files = _quoted(f"{archive}/**/*.parquet")
    connection.execute(
        'CREATE TEMP VIEW records AS SELECT partition, "offset", decode(key) AS k, decode(value)::JSON AS v '
        f"FROM read_parquet({files}, hive_partitioning = true) WHERE value IS NOT NULL AND octet_length(value) > 0"
    )
    target = out_dir / f"{fmt}-latest.parquet"
    connection.execute(f"COPY ({sql}) TO {_quoted(str(target))} (FORMAT parquet)")
    seconds = time.monotonic() - began
    rows = connection.execute(f"SELECT count(*) FROM read_parquet({_quoted(str(target))})").fetchone()[0]
    records = connection.execute(f"SELECT count(*) FROM read_parquet({files})").fetchone()[0]
    connection.close()
    return {"seconds": round(seconds, 2), "events_per_s": round(records / seconds), "latest_rows": rows}
