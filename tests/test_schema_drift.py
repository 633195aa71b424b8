"""Schema drift mid-replay: a column added, dropped or widened, and a type change old values cannot follow.

Every message declares its columns (Canal `mysqlType`, the Debezium schema); the newest declaration of a column gives
its type in the published table (docs/how-it-works.md, "Schema drift").
"""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow.parquet as pq
from archive_helpers import Record, pipeline_config, write_parquet

from cdcreplay import state_store, typed_tables
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.warehouse import PipelinePaths, read_current, read_table

OLD = {"id": "int", "v": "varchar(8)", "n": "int", "gone": "int"}


def canal(offset: int, kind: str, data: list[dict], types: dict[str, str], table: str = "t") -> Record:
    message = {"data": data, "old": None, "database": "shop", "table": table, "type": kind, "isDdl": False,
               "pkNames": ["id"], "mysqlType": types, "es": 1000 + offset, "id": offset}  # fmt: skip
    return Record("c", 0, offset, json.dumps(message))


def replay(tmp_path, records: list[Record], run_id: str, folder: str) -> dict:
    write_parquet(records, tmp_path / "archive" / folder / "p.parquet")
    config = pipeline_config(tmp_path, "drift", "canal-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", run_id]) == EXIT_OK
    summary_file = PipelinePaths(str(tmp_path / "warehouse"), "drift").run_file(run_id, "summary.json")
    return json.loads(summary_file.read_text(encoding="utf-8"))


def published(spark, tmp_path) -> tuple[dict[str, str], list[dict]]:
    """The published table's column types and rows (without the provenance columns), rows by id."""
    frame = read_table(spark, str(tmp_path / "warehouse"), "drift", "shop.t")
    frame = frame.select(*[c for c in frame.columns if not c.startswith("_")])
    return dict(frame.dtypes), sorted((r.asDict() for r in frame.collect()), key=lambda row: row["id"])


def test_added_dropped_and_widened_columns(spark, tmp_path):
    new = {"id": "int", "v": "varchar(8)", "n": "bigint", "added": "decimal(5,2)"}  # n widened, gone dropped
    replay(
        tmp_path,
        [
            canal(0, "INSERT", [{"id": "1", "v": "a", "n": "1", "gone": "10"}, {"id": "2", "v": "b", "n": "2"}], OLD),
            # ALTER TABLE t MODIFY n bigint, DROP gone, ADD added decimal(5,2); then changes under the new schema
            canal(1, "UPDATE", [{"id": "2", "v": "b", "n": "9000000000", "added": "1.50"}], new),
            canal(2, "INSERT", [{"id": "3", "v": "c", "n": "3", "added": None}], new),
        ],
        "r1",
        "a",
    )
    types, rows = published(spark, tmp_path)
    # Widened: every old value reads as bigint. Added: NULL in rows written before it existed. Dropped: the column
    # stays while a live row still holds a value written before the drop (row 1 has not changed since).
    assert types == {"id": "int", "v": "string", "n": "bigint", "added": "decimal(5,2)", "gone": "int"}
    assert rows == [
        {"id": 1, "v": "a", "n": 1, "added": None, "gone": 10},
        {"id": 2, "v": "b", "n": 9000000000, "added": Decimal("1.50"), "gone": None},
        {"id": 3, "v": "c", "n": 3, "added": None, "gone": None},
    ]

    # Once no live row holds a value of the dropped column, it leaves the table.
    replay(tmp_path, [canal(3, "UPDATE", [{"id": "1", "v": "a", "n": "1", "added": "2.00"}], new)], "r2", "b")
    types, rows = published(spark, tmp_path)
    assert types == {"id": "int", "v": "string", "n": "bigint", "added": "decimal(5,2)"}
    assert rows == [
        {"id": 1, "v": "a", "n": 1, "added": Decimal("2.00")},
        {"id": 2, "v": "b", "n": 9000000000, "added": Decimal("1.50")},
        {"id": 3, "v": "c", "n": 3, "added": None},
    ]


def test_a_type_change_old_values_cannot_follow_holds_those_rows_back_naming_the_column(spark, tmp_path):
    retyped = {**OLD, "v": "int"}  # ALTER TABLE t MODIFY v int: the source converted its rows, the binlog says nothing
    summary = replay(
        tmp_path,
        [
            canal(0, "INSERT", [{"id": "1", "v": "abc", "n": "1"}, {"id": "2", "v": "7", "n": "2"}], OLD),
            canal(1, "INSERT", [{"id": "3", "v": "5", "n": "3"}], retyped),
        ],
        "r1",
        "a",
    )
    types, rows = published(spark, tmp_path)
    assert types["v"] == "int"
    # Row 1 is held back; "7", written when v was text, still reads as int.
    assert rows == [{"id": 2, "v": 7, "n": 2, "gone": None}, {"id": 3, "v": 5, "n": 3, "gone": None}]
    assert summary["tables"]["shop.t"]["rows"] == 2
    assert summary["tables"]["shop.t"]["type_conflicts"] == 1
    held_back = pq.read_table(summary["type_conflicts_path"]).to_pylist()
    assert [
        {k: row[k] for k in ("table_id", "key", "columns", "reason", "detail", "topic", "partition", "offset")}
        for row in held_back
    ] == [
        {
            "table_id": "shop.t",
            "key": '["1"]',
            "columns": ["v"],
            "reason": "type_conflict",
            "detail": "stored values do not fit the column type a newer event declared: v = 'abc' does not fit int",
            "topic": "c",
            "partition": 0,
            "offset": 0,
        }
    ]

    # The row stays in the state: its next change publishes it again.
    summary = replay(tmp_path, [canal(2, "UPDATE", [{"id": "1", "v": "4", "n": "1"}], retyped)], "r2", "b")
    assert summary["type_conflicts"] == 0 and summary["tables"]["shop.t"]["type_conflicts"] == 0
    assert [(r["id"], r["v"]) for r in published(spark, tmp_path)[1]] == [(1, 4), (2, 7), (3, 5)]
    assert read_current(PipelinePaths(str(tmp_path / "warehouse"), "drift"))["tables"]["shop.t"]["rows"] == 3


def test_only_the_table_with_a_conflict_holds_rows_back_and_a_run_without_any_writes_an_empty_list(spark, tmp_path):
    """A table written whole with every live row of the state held nothing back; the rows held back are looked for
    in the others. A run that holds back nothing still writes the (empty) list, with the same columns."""
    retyped = {**OLD, "v": "int"}
    first = [
        canal(0, "INSERT", [{"id": "1", "v": "abc", "n": "1"}], OLD),
        canal(1, "INSERT", [{"id": "2", "v": "xyz", "n": "2"}], OLD, table="u"),
        canal(2, "INSERT", [{"id": "3", "v": "5", "n": "3"}], retyped),
    ]
    summary = replay(tmp_path, first, "r1", "a")
    assert {t: info["type_conflicts"] for t, info in summary["tables"].items()} == {"shop.t": 1, "shop.u": 0}
    assert {t: info["rows"] for t, info in summary["tables"].items()} == {"shop.t": 1, "shop.u": 1}
    held_back = pq.read_table(summary["type_conflicts_path"])
    assert [(row["table_id"], row["key"]) for row in held_back.to_pylist()] == [("shop.t", '["1"]')]

    night = [
        canal(3, "UPDATE", [{"id": "1", "v": "4", "n": "1"}], retyped),  # key 1 now fits
        canal(4, "UPDATE", [{"id": "2", "v": "uvw", "n": "4"}], OLD, table="u"),
    ]
    summary = replay(tmp_path, night, "r2", "b")
    assert summary["type_conflicts"] == 0
    assert {t: info["rows"] for t, info in summary["tables"].items()} == {"shop.t": 2, "shop.u": 1}
    nothing = pq.read_table(summary["type_conflicts_path"])
    assert nothing.num_rows == 0 and nothing.schema.names == held_back.schema.names


def test_merged_nights_hold_back_what_a_full_rebuild_holds_back(spark, tmp_path, monkeypatch):
    """A night merged into a table checks its changed rows for type conflicts, and the whole state when the
    published version held rows back (only then can an unchanged row still conflict)."""
    monkeypatch.setattr(state_store, "MAX_MERGE_SHARE", 100)  # each run replays the whole archive: let it merge
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MAX_SHARE", 100)
    retyped = {**OLD, "v": "int"}
    first = [canal(0, "INSERT", [{"id": "1", "v": "abc", "n": "1"}, {"id": "2", "v": "7", "n": "2"}], OLD)]
    first.append(canal(1, "INSERT", [{"id": "3", "v": "5", "n": "3"}], retyped))
    nights = [
        (first, "r1", "a"),
        ([canal(2, "UPDATE", [{"id": "2", "v": "8", "n": "2"}], retyped)], "r2", "b"),  # key 1 still held back
        ([canal(3, "UPDATE", [{"id": "1", "v": "4", "n": "1"}], retyped)], "r3", "c"),  # key 1 fixed
        ([canal(4, "UPDATE", [{"id": "3", "v": "6", "n": "3"}], retyped)], "r4", "d"),  # nothing held back before
    ]
    summaries = [replay(tmp_path, records, run_id, folder) for records, run_id, folder in nights]
    assert [s["state_merged"] for s in summaries] == [False, True, True, True]
    assert [s["tables"]["shop.t"]["type_conflicts"] for s in summaries] == [1, 1, 0, 0]
    assert [r["key"] for r in pq.read_table(summaries[1]["type_conflicts_path"]).to_pylist()] == ['["1"]']
    assert [(r["id"], r["v"]) for r in published(spark, tmp_path)[1]] == [(1, 4), (2, 8), (3, 6)]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path}/warehouse/drift/tables/shop.t`").orderBy("version")
    assert [r.userMetadata or r.operation for r in history.collect()] == ["WRITE"] + ["MERGE"] * 3


def debezium(offset: int, op: str, after: dict, fields: list[tuple[str, str]]) -> Record:
    """A Debezium MySQL change with its schema (JsonConverter schemas.enable=true); ``fields``: (column, type)."""
    row = {"type": "struct", "optional": True, "fields": [
        {"type": kind, "optional": name != "id", "field": name} for name, kind in fields
    ]}  # fmt: skip
    source = {"type": "struct", "field": "source", "fields": [
        {"type": "string", "field": name} for name in ("db", "table", "file")
    ] + [{"type": "int64", "field": name} for name in ("pos", "row")]}  # fmt: skip
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"}, source,
                                           {"type": "string", "field": "op"}]}  # fmt: skip
    payload = {"before": None, "after": after, "op": op,
               "source": {"db": "shop", "table": "t", "file": "binlog.000001", "pos": 100 + offset, "row": 0}}  # fmt: skip
    return Record(
        "d", 0, offset, json.dumps({"schema": schema, "payload": payload}), key=json.dumps({"id": after["id"]})
    )


def test_the_debezium_schema_drives_the_same_rules(spark, tmp_path):
    old = [("id", "int32"), ("n", "int32")]
    new = [("id", "int32"), ("n", "int64"), ("note", "string")]  # n widened, note added
    records = [
        debezium(0, "c", {"id": 1, "n": 1}, old),
        debezium(1, "c", {"id": 2, "n": 9000000000, "note": "x"}, new),
    ]
    write_parquet(records, tmp_path / "archive" / "p.parquet")
    config = pipeline_config(tmp_path, "drift", "debezium-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_OK
    types, rows = published(spark, tmp_path)
    assert types == {"id": "int", "n": "bigint", "note": "string"}
    assert rows == [{"id": 1, "n": 1, "note": None}, {"id": 2, "n": 9000000000, "note": "x"}]


def test_patterns_are_ordered_in_python_as_spark_orders_their_newest_event(spark):
    # The layouts fold a table's patterns from the oldest newest event to the newest (tables.layouts_of_patterns):
    # the order of the event's struct, which Spark compares field by field, NULL first, arrays element by element.
    from pyspark.sql import functions as F

    from cdcreplay.compaction import order_key

    positions = [[2], [1, 5], [1], None, [None], [1, None], [Decimal("10")], [Decimal("9"), 1]]
    rows = [(p, q, o, i) for p in positions for q in (None, 0, 1) for o in (3, 0) for i in (None, 1, 0)]
    events = spark.createDataFrame(
        [((p if p is None else [None if x is None else Decimal(x) for x in p]), q, o, i) for p, q, o, i in rows],
        "position array<decimal(38,0)>, partition int, offset bigint, row_index int",
    ).select(F.struct("position", "partition", "offset", "row_index").alias("newest"))
    in_spark = [row.newest for row in events.orderBy("newest").collect()]
    assert sorted(in_spark[::-1], key=lambda newest: order_key(*newest)) == in_spark


def test_layouts_take_each_columns_newest_declaration_and_count_rows_and_tombstones(spark):
    """The type stage's one aggregation over the state: per table the columns (key first, each with the type of the
    newest pattern that declares it), and its live rows and tombstones, also for a table whose every key is deleted."""
    from test_compaction import change, frame

    from cdcreplay.compaction import latest_rows
    from cdcreplay.tables import StateCounts, TableLayout, table_layouts

    history = [
        change("insert", 1, {"id": "1", "v": "a"}, position=(1,), types={"id": "int", "v": "string"}),
        change(
            "insert", 2, {"id": "2", "v": "b", "w": "7"}, position=(2,), types={"id": "int", "v": "string", "w": "int"}
        ),
        change("insert", 3, {"id": "3", "v": "c", "x": "?"}, position=(3,), types={"id": "bigint", "v": "string"}),
        change("insert", 4, {"id": "4", "v": "d"}, position=(4,), types={"id": "int", "v": "string"}),
        change("delete", 4, None, position=(5,)),
        change("insert", 1, {"id": "1", "v": "g"}, position=(6,), table="db.gone"),
        change("delete", 1, None, position=(7,), table="db.gone"),
    ]
    layouts, counts = table_layouts(latest_rows(frame(spark, history)))

    # id: bigint, declared by the newest live pattern; w: int, declared only by an older one; x: carried, undeclared.
    columns = (("id", "bigint"), ("v", "string"), ("w", "int"), ("x", "string"))
    assert layouts == {"db.t": TableLayout("db.t", ("id",), columns)}
    assert counts == {"db.gone": StateCounts(rows=0, tombstones=1), "db.t": StateCounts(rows=3, tombstones=1)}
