"""Compaction: the last event per key by source order wins; deletes, PK changes, truncates, partial images, merges."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal

from frame_helpers import assert_same_frames
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from cdcreplay.compaction import latest_rows, merge_with_state, purge_tombstones
from cdcreplay.schema import CHANGELOG_DDL

TYPES = {"id": "int", "v": "string", "w": "string"}


def change(op, key, after=None, position=(0,), partition=0, offset=0, row_index=0, table="db.t", types=TYPES):
    """One changelog row; `after` maps column -> text (None = SQL NULL)."""
    return {
        "table_id": table,
        "source_db": table.split(".")[0],
        "source_schema": None,
        "source_table": table.split(".")[1],
        "op": op,
        "key": f'["{key}"]' if key is not None else None,
        "key_columns": ["id"],
        "after": after,
        "before": None,
        "column_types": types,
        "position": [Decimal(p) for p in position],
        "event_time": None,
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "row_index": row_index,
        "format": "test",
    }


def frame(spark, rows):
    return spark.createDataFrame(rows, CHANGELOG_DDL)


def state_of(df) -> dict:
    """{key: (deleted, after as dict)}, to look at one key."""
    return {r.key: (r.deleted, dict(r.after) if r.after is not None else None) for r in df.collect()}


STATE_VIEW_DDL = "key string, deleted boolean, after map<string, string>"


def state_view(df):
    return df.select("key", "deleted", "after")


def assert_state(df, expected: dict) -> None:
    """The state's key, deleted and after columns are ``{key: (deleted, after)}``, row for row."""
    rows = [(key, deleted, after) for key, (deleted, after) in expected.items()]
    assertDataFrameEqual(state_view(df), df.sparkSession.createDataFrame(rows, STATE_VIEW_DDL))


def test_source_position_wins_over_arrival_order(spark):
    rows = [
        change("insert", 1, {"id": "1", "v": "a", "w": "x"}, position=(5,), offset=0),
        # Arrives later in Kafka (another partition) but happened earlier at the source.
        change("update", 1, {"id": "1", "v": "old", "w": "x"}, position=(3,), partition=1, offset=9),
        change("update", 1, {"id": "1", "v": "b", "w": "x"}, position=(7,), offset=1),
    ]
    assert_state(latest_rows(frame(spark, rows)), {'["1"]': (False, {"id": "1", "v": "b", "w": "x"})})


def test_equal_positions_fall_back_to_partition_offset_then_row_index(spark):
    rows = [
        change("snapshot", 1, {"id": "1", "v": "first", "w": None}, position=(1,), offset=4, row_index=0),
        change("update", 1, {"id": "1", "v": "second", "w": None}, position=(1,), offset=4, row_index=1),
        change("update", 2, {"id": "2", "v": "p0", "w": None}, position=(1,), partition=0, offset=9),
        change("update", 2, {"id": "2", "v": "p1", "w": None}, position=(1,), partition=1, offset=0),
    ]
    assert_state(
        latest_rows(frame(spark, rows)),
        {
            '["1"]': (False, {"id": "1", "v": "second", "w": None}),
            '["2"]': (False, {"id": "2", "v": "p1", "w": None}),
        },
    )


def test_delete_leaves_a_tombstone_and_a_pk_change_moves_the_row(spark):
    rows = [
        change("insert", 1, {"id": "1", "v": "a", "w": None}, position=(1,)),
        # UPDATE ... SET id = 2 WHERE id = 1 arrives as delete(1) + insert(2).
        change("delete", 1, None, position=(2,), row_index=0),
        change("insert", 2, {"id": "2", "v": "a", "w": None}, position=(2,), row_index=1),
    ]
    assert_state(
        latest_rows(frame(spark, rows)),
        {
            '["1"]': (True, None),
            '["2"]': (False, {"id": "2", "v": "a", "w": None}),
        },
    )


def test_the_state_keeps_no_before_image_and_a_key_whose_table_id_is_another_keys_prefix_stays_apart(spark):
    # Debezium-style events carry the row as it was before; the state keeps each key's last event without it.
    was = {"id": "1", "v": "a", "w": None}
    rows = [
        {**change("insert", 1, was, position=(1,)), "before": None},
        {**change("update", 1, {"id": "1", "v": "b", "w": None}, position=(2,)), "before": was},
        {**change("delete", 2, None, position=(3,)), "before": {"id": "2", "v": "z", "w": None}},
        # Same key text in tables whose ids share their first bytes: separate keys of separate tables.
        change("insert", 1, {"id": "1", "v": "other", "w": None}, position=(1,), table="db.t2"),
    ]
    latest = latest_rows(frame(spark, rows))
    assertDataFrameEqual(
        latest.select("table_id", "key", "deleted", "after", "before"),
        spark.createDataFrame(
            [
                ("db.t", '["1"]', False, {"id": "1", "v": "b", "w": None}, None),
                ("db.t", '["2"]', True, None, None),
                ("db.t2", '["1"]', False, {"id": "1", "v": "other", "w": None}, None),
            ],
            "table_id string, key string, deleted boolean, after map<string,string>, before map<string,string>",
        ),
    )


def test_reinsert_after_delete_is_live_again(spark):
    rows = [
        change("insert", 1, {"id": "1", "v": "a", "w": None}, position=(1,)),
        change("delete", 1, None, position=(2,)),
        change("insert", 1, {"id": "1", "v": "again", "w": None}, position=(3,)),
    ]
    assert_state(latest_rows(frame(spark, rows)), {'["1"]': (False, {"id": "1", "v": "again", "w": None})})


def test_truncate_deletes_older_rows_only(spark):
    rows = [
        change("insert", 1, {"id": "1", "v": "a", "w": None}, position=(1,)),
        change("insert", 2, {"id": "2", "v": "b", "w": None}, position=(2,)),
        change("truncate", None, None, position=(3,)),
        change("insert", 3, {"id": "3", "v": "c", "w": None}, position=(4,)),
        change("insert", 9, {"id": "9", "v": "other table", "w": None}, position=(1,), table="db.other"),
    ]
    assert_state(
        latest_rows(frame(spark, rows)),
        {
            '["1"]': (True, None),
            '["2"]': (True, None),
            '["3"]': (False, {"id": "3", "v": "c", "w": None}),
            '["9"]': (False, {"id": "9", "v": "other table", "w": None}),
        },
    )


def test_partial_images_keep_absent_columns_but_apply_present_nulls(spark):
    rows = [
        change("insert", 1, {"id": "1", "v": "a", "w": "x"}, position=(1,)),
        change("update", 1, {"id": "1", "w": None}, position=(2,)),  # v absent (not carried), w set to NULL
        change("update", 1, {"id": "1", "v": "b"}, position=(3,)),  # w absent: stays NULL, not back to "x"
        change("insert", 2, {"id": "2", "v": "a", "w": "x"}, position=(1,)),
        change("delete", 2, None, position=(2,)),
        change("insert", 2, {"id": "2", "v": "new"}, position=(3,)),  # after a delete nothing older carries over
    ]
    assert_state(
        latest_rows(frame(spark, rows)),
        {
            '["1"]': (False, {"id": "1", "v": "b", "w": None}),
            '["2"]': (False, {"id": "2", "v": "new"}),
        },
    )


def test_merging_previous_state_equals_full_replay_and_is_idempotent(spark):
    history = [
        change("insert", 1, {"id": "1", "v": "a", "w": None}, position=(1,)),
        change("insert", 2, {"id": "2", "v": "b", "w": None}, position=(2,)),
        change("delete", 2, None, position=(3,)),
        change("update", 1, {"id": "1", "v": "c", "w": None}, position=(4,)),
        # A late event, older than the delete of key 2: the tombstone must keep it out.
        change("update", 2, {"id": "2", "v": "late", "w": None}, position=(2, 5)),
        change("insert", 3, {"id": "3", "v": "d", "w": None}, position=(6,)),
    ]
    full = latest_rows(frame(spark, history))
    day1 = latest_rows(frame(spark, history[:3]))
    day2 = merge_with_state(day1, frame(spark, history[3:]))
    assertDataFrameEqual(state_view(day2), state_view(full))
    assert state_of(full)['["2"]'] == (True, None)
    again = merge_with_state(day2, frame(spark, history[3:]))  # a rerun of day 2 changes nothing
    assertDataFrameEqual(state_view(again), state_view(full))


def test_a_nightly_merge_carries_untouched_keys_over_and_equals_the_full_merge(spark):
    """With the run's change count given (and small), keys the changes do not name keep their state rows past a
    broadcast join; the named keys, and every key of a table the run truncated, are merged. Same result either way."""
    day1 = [
        change("insert", 1, {"id": "1", "v": "a", "w": "x"}, position=(1,)),
        change("insert", 2, {"id": "2", "v": "b", "w": "y"}, position=(2,)),
        change("insert", 3, {"id": "3", "v": "c", "w": "z"}, position=(3,)),
        change("delete", 3, None, position=(4,)),  # a tombstone nobody touches again: carried as it is
        change("insert", 1, {"id": "1", "v": "u1", "w": None}, table="db.u", position=(5,)),
        change("insert", 2, {"id": "2", "v": "u2", "w": None}, table="db.u", position=(6,)),
    ]
    day2 = [
        change("update", 1, {"id": "1", "v": "a2"}, position=(7,)),  # partial image: w comes from the stored row
        change("insert", 4, {"id": "4", "v": "d", "w": None}, position=(8,)),
        {**change("truncate", None, position=(9,), table="db.u"), "key_columns": None},  # wipes u's keys 1 and 2
        change("insert", 3, {"id": "3", "v": "u3", "w": None}, table="db.u", position=(10,)),
    ]
    state = latest_rows(frame(spark, day1))
    full = latest_rows(frame(spark, day1 + day2))
    merged = merge_with_state(state, frame(spark, day2), change_count=len(day2))

    assert_same_frames(merged, full)  # the carried-over rows equal the merged ones field for field
    assert_same_frames(merge_with_state(state, frame(spark, day2)), full)
    assert_state(
        merged.where("table_id = 'db.t'"),
        {
            '["1"]': (False, {"id": "1", "v": "a2", "w": "x"}),
            '["2"]': (False, {"id": "2", "v": "b", "w": "y"}),
            '["3"]': (True, None),
            '["4"]': (False, {"id": "4", "v": "d", "w": None}),
        },
    )
    assert_state(
        merged.where("table_id = 'db.u'"),
        {
            '["1"]': (True, None),
            '["2"]': (True, None),
            '["3"]': (False, {"id": "3", "v": "u3", "w": None}),
        },
    )
    plan = merged._jdf.queryExecution().executedPlan().toString()
    assert "BroadcastHashJoin" in plan and "LeftAnti" in plan, plan
    # Past the limit the whole state is merged with the changes (the set of changed keys is not broadcast).
    too_many = merge_with_state(state, frame(spark, day2), change_count=10**9)
    assert "LeftAnti" not in too_many._jdf.queryExecution().executedPlan().toString()
    assert_same_frames(too_many, full)


def test_tombstones_are_purged_only_past_their_retention(spark):
    def at(row, day):
        return {**row, "event_time": datetime(2026, 1, day)}

    history = [
        at(change("insert", 1, {"id": "1", "v": "a", "w": None}, position=(1,)), 1),
        at(change("delete", 1, None, position=(2,)), 2),  # 8 days before the newest event
        at(change("insert", 2, {"id": "2", "v": "b", "w": None}, position=(3,)), 3),
        at(change("delete", 2, None, position=(4,)), 8),  # 2 days before it
        at(change("insert", 3, {"id": "3", "v": "c", "w": None}, position=(5,)), 10),
    ]
    state = latest_rows(frame(spark, history))
    assert purge_tombstones(state, None) is state  # the default keeps every tombstone
    assert_state(
        purge_tombstones(state, 5),
        {
            '["2"]': (True, None),
            '["3"]': (False, {"id": "3", "v": "c", "w": None}),
        },
    )
    # Past the retention a late event older than the purged delete brings key 1 back: the documented trade-off.
    late = at(change("update", 1, {"id": "1", "v": "late", "w": None}, position=(1, 5)), 1)
    assert state_of(merge_with_state(purge_tombstones(state, 5), frame(spark, [late])))['["1"]'] == (
        False,
        {"id": "1", "v": "late", "w": None},
    )
    assert state_of(merge_with_state(state, frame(spark, [late])))['["1"]'] == (True, None)


def test_one_tables_state_is_read_from_its_partition_alone(spark, tmp_path):
    """The type stage reads a table's rows twice; with many tables a full scan each time would read the state once
    per table, so the written state is partitioned by table and a table's rows come from its partition alone."""
    from cdcreplay.state_store import read_state, table_state, write_state

    history = [
        change("insert", 1, {"id": "1", "v": "a", "w": None}, table="db.t", position=(1,)),
        change("insert", 1, {"id": "1", "v": "b", "w": None}, table="db.u", position=(2,)),
        change("insert", 2, {"id": "2", "v": "c", "w": None}, table="db.u", position=(3,)),
    ]
    write_state(latest_rows(frame(spark, history)), tmp_path / "state")
    partitioned = read_state(spark, tmp_path / "state", keep_partition=True)
    rows = table_state(partitioned, "db.u")

    assertDataFrameEqual(
        rows.select("table_id", "key", F.col("after")["v"].alias("v")),
        spark.createDataFrame(
            [("db.u", '["1"]', "b"), ("db.u", '["2"]', "c")], "table_id string, key string, v string"
        ),
    )
    assert rows.columns == read_state(spark, tmp_path / "state").columns  # no partition column left over
    scan = [line for line in rows._jdf.queryExecution().executedPlan().toString().splitlines() if "FileScan" in line]
    assert scan and re.search(
        r"PartitionFilters: \[isnotnull\(table_hash#\d+L?\), \(table_hash#\d+L? = -?\d+\)\]", scan[0]
    ), scan
    assert table_state(read_state(spark, tmp_path / "state"), "db.t").count() == 1  # without the column: a filter
