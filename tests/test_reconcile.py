"""Reconciliation of snapshot epochs against the incremental state, on hand-made changelogs.

Changelog rows are written as compact tuples by ``ev``: the Kafka offset defaults to the position, so the expected
provenance of each diff row can be read off the scenario.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from pyspark.testing import assertDataFrameEqual

from cdcreplay import schema
from cdcreplay.contracts import RECONCILE_STORIES
from cdcreplay.reconcile import DIFF_COLUMNS, DIFF_DDL, reconcile, run_reconciliation
from cdcreplay.spark import VECTORIZED_READER
from cdcreplay.state_store import state_ref, write_state

ORDERS = "shop.public.orders"
ITEMS = "shop.public.items"
EPOCHS = "shop.public.epochs"
CALM = "shop.public.calm"
GREEDY = "shop.public.greedy"
TYPES = {"id": "int", "name": "string", "amount": "decimal(10,2)"}


def ev(pos, op, key=None, *, table=ORDERS, offset=None, partition=0, types=None, **cols):
    """One changelog row. ``pos``: int or tuple (the source position); ``cols``: after image besides ``id``."""
    position = [Decimal(p) for p in (pos if isinstance(pos, tuple) else (pos,))]
    after = None
    if op in (schema.OP_SNAPSHOT, schema.OP_INSERT, schema.OP_UPDATE):
        after = {"id": str(key), **{c: None if v is None else str(v) for c, v in cols.items()}}
    row = {
        "table_id": table,
        "source_db": "shop",
        "source_schema": "public",
        "source_table": table.rsplit(".", 1)[-1],
        "op": op,
        "key": None if key is None else json.dumps([str(key)]),
        "key_columns": ["id"],
        "after": after,
        "before": {"id": str(key)} if op == schema.OP_DELETE else None,
        "column_types": dict(types or TYPES),
        "position": position,
        "event_time": None,
        "topic": f"cdc.{table}",
        "partition": partition,
        "offset": offset if offset is not None else int(position[-1]),
        "row_index": 0,
        "format": "test",
    }
    return tuple(row[c] for c in schema.CHANGELOG_COLUMNS)


def changelog(spark, rows):
    return spark.createDataFrame(rows, schema.struct_type(schema.CHANGELOG_DDL))


def expected(key, status, *, epoch=2, table=ORDERS, diffs=(), snap=None, inc=None):
    """A whole diff row. ``snap``: (offset, position text) or offset; ``inc``: (op, offset[, position text])."""
    topic = f"cdc.{table}"
    if isinstance(snap, int):
        snap = (snap, f"[{snap}]")
    if inc is not None and len(inc) == 2:
        inc = (*inc, f"[{inc[1]}]")
    return {
        "table_id": table,
        "epoch_no": epoch,
        "key": json.dumps([str(key)]),
        "status": status,
        "differing_columns": [{"column": c, "snapshot_value": s, "incremental_value": i} for c, s, i in diffs],
        "snapshot_topic": topic if snap else None,
        "snapshot_partition": 0 if snap else None,
        "snapshot_offset": snap[0] if snap else None,
        "snapshot_position": snap[1] if snap else None,
        "incremental_op": inc[0] if inc else None,
        "incremental_topic": topic if inc else None,
        "incremental_partition": 0 if inc else None,
        "incremental_offset": inc[1] if inc else None,
        "incremental_position": inc[2] if inc else None,
    }


def assert_diff(diff, table, rows):
    """The whole diff of one table, every column, is ``rows`` (``expected`` dicts) in any order."""
    assertDataFrameEqual(diff.where(diff.table_id == table), diff.sparkSession.createDataFrame(rows, DIFF_DDL))


def by_epoch(metrics, table):
    return {m["epoch_no"]: m for m in metrics if m["table_id"] == table}


SNAP, INS, UPD, DEL, TRUNC = (
    schema.OP_SNAPSHOT,
    schema.OP_INSERT,
    schema.OP_UPDATE,
    schema.OP_DELETE,
    schema.OP_TRUNCATE,
)

# ORDERS: an initial snapshot (baseline), changes, a resync snapshot at positions 20..30 with every status.
ORDERS_ROWS = [
    ev(1, SNAP, 1, name="a", amount="10.00"),
    ev(2, SNAP, 2, name="b", amount="20.00"),
    ev(3, SNAP, 3, name="c", amount="30.00"),
    ev(4, SNAP, 4, name="d", amount="40.00"),
    ev(5, SNAP, 5, name="e", amount="1.00"),
    ev(6, SNAP, 7, name="g", amount="70.00"),
    ev(10, UPD, 1, name="a", amount="11.00"),
    ev(10, UPD, 1, name="a", amount="11.00"),  # archived twice: changes nothing
    ev(11, UPD, 2, name="b", amount="21.00"),
    ev(12, DEL, 3),  # deleted before the resync, which does not read it: no diff row at all
    ev(13, DEL, 4),  # deleted, but the resync reads it: missing_in_incremental
    ev(14, INS, 6, name="f", amount="60.00"),  # never read by the resync: missing_in_snapshot
    # A partial update (amount not carried although declared): merged onto the previous image by compaction.
    ev(15, UPD, 5, name="E"),
    ev(16, INS, 8, name="h", amount="80.00"),
    ev(17, INS, 10, name=None, amount="5.00"),
    ev(18, INS, 11, name="x", amount="5.00"),
    ev(19, INS, 12, types={"id": "int", "name": "string"}, name="l"),  # this message does not carry `note`
    # the resync snapshot
    ev(20, SNAP, 1, name="a", amount="11.0"),  # same decimal(10,2) as "11.00": match
    ev(21, SNAP, 2, name="b", amount="22.00"),  # mismatch on amount
    ev(22, SNAP, 4, name="d", amount="40.00"),
    ev(23, SNAP, 5, name="E", amount="1.00"),
    ev(24, SNAP, 7, name="g", amount="70.00"),  # only state: the initial snapshot's row
    # Read with its new value but ordered before the update (e.g. Debezium stamps snapshot rows with the snapshot's
    # start position): changed during the snapshot window -> in_flight, not mismatch.
    ev(25, SNAP, 8, name="h", amount="81.00"),
    ev(26, UPD, 8, name="h", amount="81.00"),
    ev(26, UPD, 8, name="h", amount="81.00"),  # archived twice
    ev(27, INS, 9, name="i", amount="90.00"),  # inserted during the window, not read: in_flight
    ev(28, SNAP, 10, name=None, amount="5.00"),  # NULL = NULL
    ev(29, SNAP, 11, name=None, amount="5.00"),  # NULL vs 'x': mismatch
    ev(30, SNAP, 12, types={**TYPES, "note": "string"}, name="l", note="hello"),  # `note` only on one side: skipped
    # after the resync: must not leak into it
    ev(40, UPD, 7, name="g", amount="99.00"),
    ev(41, DEL, 1),
]

# ITEMS: every snapshot row shares one source position (ordered by offset), and a truncate empties the table.
ITEMS_ROWS = [
    ev((100,), SNAP, 1, table=ITEMS, offset=0, name="a", amount="1.00"),
    ev((100,), SNAP, 2, table=ITEMS, offset=1, name="b", amount="2.00"),
    ev((101,), INS, 3, table=ITEMS, offset=2, name="c", amount="3.00"),
    ev((102,), TRUNC, None, table=ITEMS, offset=3),
    ev((103,), INS, 4, table=ITEMS, offset=4, name="d", amount="4.00"),
    ev((104,), SNAP, 1, table=ITEMS, offset=5, name="a", amount="1.00"),  # truncated since: missing_in_incremental
    ev((104,), SNAP, 4, table=ITEMS, offset=6, name="d", amount="4.00"),
]

# EPOCHS: snapshots only, keys read as 1 2 3 | 1 2 4 | 2 -> three epochs; each later one compares with the reads
# of the earlier ones (snapshot rows of earlier epochs are state).
EPOCHS_ROWS = [
    ev(pos, SNAP, key, table=EPOCHS, name=f"n{key}", amount="1.00")
    for pos, key in ((1, 1), (2, 2), (3, 3), (4, 1), (5, 2), (6, 4), (7, 2))
]

# CALM: a resync where everything matches (one of its records archived twice).
CALM_ROWS = [
    ev(1, SNAP, 1, table=CALM, name="a", amount="1.00"),
    ev(2, SNAP, 2, table=CALM, name="b", amount="2.00"),
    ev(3, INS, 3, table=CALM, name="c", amount="3.00"),
    ev(4, UPD, 1, table=CALM, name="A", amount="1.50"),
    ev(5, SNAP, 1, table=CALM, name="A", amount="1.5"),
    ev(6, SNAP, 2, table=CALM, name="b", amount="2.00"),
    ev(6, SNAP, 2, table=CALM, name="b", amount="2.00"),  # archived twice: one event, not a new epoch
    ev(7, SNAP, 3, table=CALM, name="c", amount="3.00"),
]

GREEDY_ROWS = [ev(pos, SNAP, key, table=GREEDY) for pos, key in enumerate("abacbca", start=1)]


@pytest.fixture(scope="module")
def result(spark):
    out = reconcile(changelog(spark, ORDERS_ROWS + ITEMS_ROWS + EPOCHS_ROWS + CALM_ROWS + GREEDY_ROWS))
    yield out
    out.release()


def test_diff_columns_follow_the_contract(result):
    assert tuple(result.diff.columns) == DIFF_COLUMNS


def test_every_status_of_a_resync(result):
    mismatch, missing_inc, missing_snap = "mismatch", "missing_in_incremental", "missing_in_snapshot"
    assert_diff(
        result.diff,
        ORDERS,
        [
            expected(1, "match", snap=20, inc=("update", 10)),
            expected(2, mismatch, diffs=[("amount", "22.00", "21.00")], snap=21, inc=("update", 11)),
            expected(4, missing_inc, snap=22, inc=("delete", 13)),
            expected(5, "match", snap=23, inc=("update", 15)),
            expected(6, missing_snap, inc=("insert", 14)),
            expected(7, "match", snap=24, inc=("snapshot", 6)),
            expected(8, "in_flight", diffs=[("amount", "81.00", "80.00")], snap=25, inc=("insert", 16)),
            expected(9, "in_flight", inc=("insert", 27)),
            expected(10, "match", snap=28, inc=("insert", 17)),
            expected(11, mismatch, diffs=[("name", None, "x")], snap=29, inc=("insert", 18)),
            expected(12, "match", snap=30, inc=("insert", 19)),
        ],
    )


def test_baseline_skipped_and_metrics_counted(result):
    metrics = by_epoch(result.metrics, ORDERS)
    assert set(metrics) == {1, 2}
    baseline = metrics[1]
    assert (baseline["kind"], baseline["verdict"], baseline["snapshot_rows"]) == ("baseline", "baseline", 6)
    resync = {k: v for k, v in metrics[2].items() if k not in ("first_order", "last_order")}
    assert resync == {
        "table_id": ORDERS,
        "epoch_no": 2,
        "kind": "reconciled",
        "snapshot_rows": 9,
        "incremental_rows": 10,
        "match": 5,
        "mismatch": 2,
        "missing_in_incremental": 1,
        "missing_in_snapshot": 1,
        "in_flight": 2,
        "verdict": "fail",
    }
    assert json.loads(metrics[2]["first_order"])["offset"] == 20
    assert json.loads(metrics[2]["last_order"])["offset"] == 30


def test_truncate_and_shared_snapshot_position(result):
    assert_diff(
        result.diff,
        ITEMS,
        [
            expected(1, "missing_in_incremental", table=ITEMS, snap=(5, "[104]"), inc=("truncate", 3, "[102]")),
            expected(4, "match", table=ITEMS, snap=(6, "[104]"), inc=("insert", 4, "[103]")),
        ],
    )
    assert by_epoch(result.metrics, ITEMS)[1]["kind"] == "baseline"


def test_earlier_epochs_snapshot_rows_are_state(result):
    missing_snap = "missing_in_snapshot"
    assert_diff(
        result.diff,
        EPOCHS,
        [
            expected(1, "match", table=EPOCHS, snap=4, inc=("snapshot", 1)),
            expected(2, "match", table=EPOCHS, snap=5, inc=("snapshot", 2)),
            expected(3, missing_snap, table=EPOCHS, inc=("snapshot", 3)),
            expected(4, "missing_in_incremental", table=EPOCHS, snap=6),
            expected(1, missing_snap, epoch=3, table=EPOCHS, inc=("snapshot", 4)),
            expected(2, "match", epoch=3, table=EPOCHS, snap=7, inc=("snapshot", 5)),
            expected(3, missing_snap, epoch=3, table=EPOCHS, inc=("snapshot", 3)),
            expected(4, missing_snap, epoch=3, table=EPOCHS, inc=("snapshot", 6)),
        ],
    )
    assert [
        (m["epoch_no"], m["kind"], m["snapshot_rows"])
        for m in sorted(result.metrics, key=lambda m: m["epoch_no"])
        if m["table_id"] == EPOCHS
    ] == [(1, "baseline", 3), (2, "reconciled", 3), (3, "reconciled", 1)]


def test_resync_where_everything_matches(result):
    assert_diff(
        result.diff,
        CALM,
        [
            expected(1, "match", table=CALM, snap=5, inc=("update", 4)),
            expected(2, "match", table=CALM, snap=6, inc=("snapshot", 2)),
            expected(3, "match", table=CALM, snap=7, inc=("insert", 3)),
        ],
    )
    resync = by_epoch(result.metrics, CALM)[2]
    assert (resync["verdict"], resync["match"], resync["incremental_rows"]) == ("pass", 3, 3)


def test_epochs_split_greedily_on_repeated_keys(result):
    # Keys in read order: a b a c b c a -> [a b] [a c b] [c a]: a new epoch opens at the first re-read key.
    got = [
        (
            m["epoch_no"],
            m["snapshot_rows"],
            json.loads(m["first_order"])["offset"],
            json.loads(m["last_order"])["offset"],
        )
        for m in sorted(result.metrics, key=lambda m: m["epoch_no"])
        if m["table_id"] == GREEDY
    ]
    assert got == [(1, 2, 1, 2), (2, 3, 3, 5), (3, 2, 6, 7)]


def test_a_snapshot_run_stamped_with_one_position_is_one_epoch_across_partitions(spark):
    """A connector stamps every row of a snapshot run with the run's start position, and the rows of one table are
    spread over partitions by key, whose offsets do not compare. Key 3, inserted between the runs, sits in partition
    0; the keys the resync re-reads sit in partition 1. Ordered by partition, its read came before the re-read that
    opens the resync's epoch, and it was counted in the initial load (and missing from the resync)."""
    spread = "shop.spread"
    rows = [
        ev((1, 5), SNAP, 1, table=spread, partition=1, offset=0, name="a", amount="1.00"),
        ev((1, 5), SNAP, 2, table=spread, partition=1, offset=1, name="b", amount="2.00"),
        ev((2, 9), INS, 3, table=spread, partition=0, offset=0, name="c", amount="3.00"),
        ev((3, 1), SNAP, 1, table=spread, partition=1, offset=2, name="a", amount="1.00"),
        ev((3, 1), SNAP, 2, table=spread, partition=1, offset=3, name="b", amount="2.00"),
        ev((3, 1), SNAP, 3, table=spread, partition=0, offset=1, name="c", amount="3.00"),
    ]
    out = reconcile(changelog(spark, rows))
    try:
        epochs = sorted((m["epoch_no"], m["kind"], m["snapshot_rows"]) for m in out.metrics if m["table_id"] == spread)
        statuses = {(r.key, r.epoch_no, r.status) for r in out.diff.collect()}
    finally:
        out.release()
    assert epochs == [(1, "baseline", 2), (2, "reconciled", 3)]
    assert statuses == {(json.dumps([str(key)]), 2, "match") for key in (1, 2, 3)}


def test_run_reconciliation_with_base_state(spark, tmp_path):
    # Base state from earlier runs (one row per key, with `deleted`); this run's changes and one resync snapshot.
    base_rows = [ev(1, SNAP, 1, name="a", amount="1.00"), ev(2, INS, 2, name="b", amount="2.00"), ev(3, DEL, 3)]
    base = changelog(spark, base_rows).selectExpr("*", "op = 'delete' AS deleted")
    base_state = state_ref(tmp_path / "state", write_state(base, tmp_path / "state"), None)
    run_rows = [
        ev(10, UPD, 1, name="a", amount="1.25"),
        ev(20, SNAP, 1, name="a", amount="1.25"),
        ev(21, SNAP, 2, name="b", amount="2.50"),  # mismatch against the base state
        ev(22, SNAP, 3, name="c", amount="3.00"),  # deleted in the base state
    ]
    changelog(spark, run_rows).write.partitionBy("table_id").parquet(str(tmp_path / "changelog"))

    earlier_story = tmp_path / "run" / RECONCILE_STORIES / "shop.orders" / "a-key.json"  # of an earlier diff
    earlier_story.parent.mkdir(parents=True)
    earlier_story.write_text("{}")
    summary = run_reconciliation(spark, tmp_path / "run", str(tmp_path / "changelog"), base_state)
    assert not earlier_story.parent.parent.exists()
    # The vectorized Parquet reader was on for the reconciliation alone: decoders feed Python from Parquet scans,
    # which hangs under pyspark 4.2.0 with it on.
    assert spark.conf.get(VECTORIZED_READER) == "false"

    out = tmp_path / "run" / "reconcile"
    assert summary.verdict == "fail"
    assert summary.diff_path == str(out / "diff")
    assert [
        (m["epoch_no"], m["kind"], m["match"], m["mismatch"], m["missing_in_incremental"]) for m in summary.tables
    ] == [(1, "reconciled", 1, 1, 1)]
    assert any(f.startswith("expect_column_values_to_be_in_set(column=status)") for f in summary.failed_expectations)
    diff = spark.read.parquet(str(out / "diff"))
    assert_diff(
        diff,
        ORDERS,
        [
            expected(1, "match", epoch=1, snap=20, inc=("update", 10)),
            expected(2, "mismatch", epoch=1, diffs=[("amount", "2.50", "2.00")], snap=21, inc=("insert", 2)),
            expected(3, "missing_in_incremental", epoch=1, snap=22, inc=("delete", 3)),
        ],
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["verdict"] == "fail" and metrics["suite"]["success"] is False
    report = (out / "report.md").read_text()
    assert "Verdict: FAIL" in report
    assert "amount: '2.50' / '2.00'" in report
    assert str(out / "diff") in report
    assert (out / "data_docs" / "index.html").is_file()
    assert summary.data_docs_path == str(out / "data_docs" / "index.html")


def test_a_snapshot_against_a_base_state_reports_exactly_the_planted_differences(spark, tmp_path):
    """The reconciliation the benchmark times at 5M rows, at 1,000: a published state of 1,000 keys and a later
    snapshot read that differs every 100th key (one amount, one unread key, one key the state never had)."""
    from cdcreplay_lab.benchmark_reconcile import measure_reconcile

    result = measure_reconcile(spark, tmp_path, rows=1000, period=100)

    assert result["counts"] == {
        "mismatch": 10,
        "missing_in_snapshot": 10,
        "missing_in_incremental": 10,
        "match": 980,
        "in_flight": 0,
    }
    assert result["verdict"] == "fail"
    assert result["snapshot_rows"] == 1000
    differences = {
        (row.key, row.status): [tuple(d) for d in row.differing_columns]
        for row in spark.read.parquet(result["diff"]).where("status != 'match'").collect()
    }
    assert differences[('["7"]', "mismatch")] == [("amount", "1.08", "1.07")]
    assert differences[('["11"]', "missing_in_snapshot")] == []
    assert differences[('["1000"]', "missing_in_incremental")] == []
    assert len(differences) == 30


# ORDERS without its partial images (a partial update, and the messages that do not carry `note`), so that it too
# has one reconciled epoch and only complete images.
COMPLETE_ORDERS_ROWS = [
    row for row in ORDERS_ROWS if row[schema.CHANGELOG_COLUMNS.index("position")][0] not in (15, 19, 30)
]


@pytest.mark.parametrize(
    ("rows", "one_pass_tables"),
    [
        (ORDERS_ROWS + ITEMS_ROWS + EPOCHS_ROWS + CALM_ROWS + GREEDY_ROWS, [CALM, ITEMS]),
        (COMPLETE_ORDERS_ROWS + ITEMS_ROWS + CALM_ROWS, [CALM, ITEMS, ORDERS]),
    ],
    ids=["every-scenario", "complete-images"],
)
def test_the_one_pass_plan_gives_what_the_per_epoch_plan_gives(spark, rows, one_pass_tables):
    """Tables with one reconciled epoch and complete images are reconciled from one sort by key; every table can
    also be reconciled per epoch with the general plan. Both must give the same diff and metrics."""
    events = changelog(spark, rows)
    fast, general = reconcile(events), reconcile(events, one_pass=False)
    try:
        assert fast.one_pass_tables == one_pass_tables
        assert general.one_pass_tables == []
        assertDataFrameEqual(fast.diff, general.diff)
        assert {r.table_id for r in fast.diff.select("table_id").distinct().collect()} >= set(one_pass_tables)
        assert fast.metrics == general.metrics
    finally:
        fast.release()
        general.release()


def test_a_run_without_snapshot_reads_has_nothing_to_reconcile_and_leaves_the_state_unread(spark, tmp_path):
    # A night of plain changes: no epoch, so the (here absent) base state is not read at all.
    run_rows = [ev(10, UPD, 1, name="a", amount="1.25"), ev(11, INS, 4, name="d", amount="4.00"), ev(12, DEL, 2)]
    changelog(spark, run_rows).write.partitionBy("table_id").parquet(str(tmp_path / "changelog"))

    absent = state_ref(tmp_path / "no-state", 0, None)
    summary = run_reconciliation(spark, tmp_path / "run", str(tmp_path / "changelog"), absent)
    assert summary.verdict == "pass"
    assert summary.tables == []
    assert summary.headline.startswith("Reconciliation passed: 0 snapshot epoch(s) reconciled, 0 baseline epoch(s)")
    assert spark.read.parquet(summary.diff_path).count() == 0


def test_a_base_state_is_read_by_the_diff_alone_its_facts_stand_in_for_it(spark, tmp_path):
    """The epochs are found from the run's changes and the base state's facts: kept with the state (its patterns,
    as a run publishes it) or aggregated from its rows. A table whose run holds only its snapshot reads is joined
    with its state rows. Either gives what reconciling the base state's rows and the run's changes as one changelog
    gives (where every such table is sorted by key in one pass)."""
    from cdcreplay.reconcile import plan_reconciliation, read_changelog, read_history
    from cdcreplay.state_store import save_patterns
    from cdcreplay.tables import state_patterns

    no_amount_type = {"id": "int", "name": "string"}
    base_rows = [
        # ORDERS: the state declares amount a decimal, the snapshot does not: "2.5" and "2.50" are the same value.
        ev(1, INS, 1, name="a", amount="2.5"),
        ev(2, INS, 2, name="b", amount="3.00"),
        ev(20, INS, 3, offset=25, name="c", amount="1.00"),  # written while the snapshot was read: in flight
        # ITEMS: one state row is newer than the snapshot's first read, one older: not a baseline.
        ev(5, INS, 1, table=ITEMS, name="a", amount="1.00"),
        ev(50, INS, 2, table=ITEMS, name="b", amount="2.00"),
        # EPOCHS: every state row is newer than the snapshot's first read: a baseline.
        ev(50, INS, 1, table=EPOCHS, name="a", amount="1.00"),
        ev(60, INS, 2, table=EPOCHS, name="b", amount="2.00"),
        # CALM: tombstones only (no live row has a newest order to go by).
        ev(3, DEL, 1, table=CALM),
        # GREEDY: a partial image (no `name`): the table takes the general plan.
        ev(4, INS, 1, table=GREEDY, amount="1.00"),
    ]
    run_rows = [
        ev(20, SNAP, 1, types=no_amount_type, name="a", amount="2.50"),
        ev(21, SNAP, 2, types=no_amount_type, name="b", amount="3.10"),
        ev(20, SNAP, 1, table=ITEMS, name="a", amount="1.00"),
        ev(21, SNAP, 2, table=ITEMS, name="b", amount="2.00"),
        ev(21, SNAP, 2, table=ITEMS, name="b", amount="2.00"),  # archived twice: read once
        ev(20, SNAP, 1, table=EPOCHS, name="a", amount="1.00"),
        ev(21, SNAP, 2, table=EPOCHS, name="b", amount="2.00"),
        ev(20, SNAP, 1, table=CALM, name="a", amount="1.00"),
        ev(20, SNAP, 1, table=GREEDY, name="a", amount="1.00"),
    ]
    changelog(spark, run_rows).write.parquet(str(tmp_path / "changelog"))
    state = changelog(spark, base_rows).selectExpr("*", "op = 'delete' AS deleted")
    refs = {
        "plain": state_ref(tmp_path / "plain", write_state(state, tmp_path / "plain"), None),
        "with-patterns": state_ref(
            tmp_path / "with-patterns", write_state(state, tmp_path / "with-patterns"), tmp_path / "patterns.json"
        ),
    }
    save_patterns(state_patterns(state), tmp_path / "patterns.json")

    run = read_changelog(spark, str(tmp_path / "changelog"))
    plans = [plan_reconciliation(run, history=read_history(spark, refs[name])) for name in ("plain", "with-patterns")]
    assert all((plan.joined_tables, plan.one_pass_tables) == ([CALM, ITEMS, ORDERS], []) for plan in plans)
    as_one_changelog = plan_reconciliation(read_history(spark, refs["plain"]).events.unionByName(run))
    assert (as_one_changelog.joined_tables, as_one_changelog.one_pass_tables) == ([], [CALM, ITEMS, ORDERS])
    # Each diff is computed once (as the job does: ``metrics`` takes a computed diff), then compared.
    first, *others = (*plans, as_one_changelog)
    diffs = [plan.diff.cache() for plan in (first, *others)]
    metrics = first.metrics(diffs[0])
    for plan, diff in zip(others, diffs[1:], strict=True):
        assertDataFrameEqual(diff, diffs[0])
        assert plan.metrics(diff) == metrics

    assert [(m["table_id"], m["kind"], m["verdict"]) for m in metrics] == [
        (CALM, "reconciled", "fail"),
        (EPOCHS, "baseline", "baseline"),
        (GREEDY, "reconciled", "pass"),
        (ITEMS, "reconciled", "fail"),
        (ORDERS, "reconciled", "fail"),
    ]
    amount = {"column": "amount", "snapshot_value": "3.10", "incremental_value": "3.00"}
    assertDataFrameEqual(
        diffs[0].select("table_id", "key", "status", "differing_columns"),
        spark.createDataFrame(
            [
                (CALM, '["1"]', "missing_in_incremental", []),
                (GREEDY, '["1"]', "match", []),  # `name` was not carried by the partial image: not compared
                (ITEMS, '["1"]', "match", []),
                (ITEMS, '["2"]', "missing_in_incremental", []),
                (ORDERS, '["1"]', "match", []),
                (ORDERS, '["2"]', "mismatch", [amount]),
                (ORDERS, '["3"]', "in_flight", []),
            ],
            "table_id string, key string, status string, "
            "differing_columns array<struct<column: string, snapshot_value: string, incremental_value: string>>",
        ),
    )
    for diff in diffs:
        diff.unpersist()
