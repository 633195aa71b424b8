"""Every format reproduces the simulator's true final state exactly: over a Parquet archive, through the real job
entry point, as one full run and as nightly incremental runs (whose reruns change nothing).

Every decoder runs Python over Arrow batches read from the Parquet archive -- the path on which pyspark 4.2.0
deadlocked with the vectorized reader (environment.md) -- so each full replay here also proves the session's settings
keep it from hanging (pytest-timeout turns a hang into a failure)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from archive_helpers import pipeline_config

from cdcreplay import state_store, typed_tables
from cdcreplay.entrypoints import EXIT_OK, reconcile_main, replay_main
from cdcreplay.warehouse import read_table
from cdcreplay_lab.simulator import FORMATS, build_sample_archive

EVENTS = 2500
SEED = 11
# Nightly runs share one compaction for every format; these carry what is format-specific across nights: the JSON
# and Avro wires, Qlik's metadata messages (read from earlier nights), DRS's per-record types, Canal's multi-row
# messages. Every format runs the full replay and the typed check (CI time: a night per format costs ~1 min).
# Formats whose messages say nothing of a full load (its rows arrive as inserts): a run of them has no snapshot epoch.
WITHOUT_SNAPSHOT_MARKER = ("dts-shareplex-json", "dataworks-json")
NIGHTLY_FORMATS = ("debezium-json", "canal-json", "dts-avro", "drs-json-mysql", "qlik-json")
# Two nights: the second merges onto the state the first wrote and reads what the first left (Qlik's metadata); a
# third night would run the same merge again (test_state_store merges six nights in a row).
NIGHTLY_DAYS = 2


def _simulate(fmt: str, tmp_path_factory, days: int = 3):
    tmp = tmp_path_factory.mktemp(fmt)
    history = build_sample_archive(tmp / "archive", fmt, events=EVENTS, seed=SEED, layout="parquet", days=days)
    config = pipeline_config(tmp, "sim", fmt, tmp / "archive", settings=history.pipeline_settings)
    return fmt, history, config, tmp


@pytest.fixture(scope="module", params=FORMATS)
def simulated(request, tmp_path_factory):
    return _simulate(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=NIGHTLY_FORMATS)
def simulated_nightly(request, tmp_path_factory):
    return _simulate(request.param, tmp_path_factory, days=NIGHTLY_DAYS)


def published_rows(spark, tmp, table_id: str, key_columns) -> list[dict]:
    frame = read_table(spark, str(tmp / "warehouse"), "sim", table_id)
    data_columns = [c for c in frame.columns if not c.startswith("_")]
    rows = [r.asDict() for r in frame.select(*data_columns).collect()]
    return sorted(rows, key=lambda row: tuple(row[k] for k in key_columns))


def assert_equals_truth(spark, history, tmp):
    for spec in history.tables.values():
        expected = history.final_state(spec.table_id)
        got = published_rows(spark, tmp, spec.table_id, spec.primary_key)
        assert len(got) == len(expected), spec.table_id
        assert got == expected, spec.table_id


def full_run_of(simulated) -> None:
    """The full rebuild `test_full_replay_equals_the_truth` makes of the module's history: the tests that read what
    it published run it first when they are selected without it (-k)."""
    _, _, config, tmp = simulated
    if not (tmp / "warehouse" / "sim" / "runs" / "full" / "summary.json").exists():
        assert replay_main(["--config", str(config), "--run-id", "full", "--full-rebuild"]) == EXIT_OK


def test_full_replay_equals_the_truth(spark, simulated):
    _, history, config, tmp = simulated
    assert replay_main(["--config", str(config), "--run-id", "full", "--full-rebuild"]) == EXIT_OK
    assert_equals_truth(spark, history, tmp)
    summary = json.loads((tmp / "warehouse" / "sim" / "runs" / "full" / "summary.json").read_text())
    assert summary["decoded"]["quarantined"] == 0
    assert summary["decoded"]["source_records"] == summary["distinct_records"]


def test_typed_columns_follow_the_declared_source_types(spark, simulated):
    _, history, _, tmp = simulated
    full_run_of(simulated)
    for spec in history.tables.values():
        frame = read_table(spark, str(tmp / "warehouse"), "sim", spec.table_id)
        types = dict(frame.dtypes)
        for column in spec.columns:
            assert types[column.name] == column.spark_type, (spec.table_id, column.name)
        assert {"_op", "_event_time", "_topic", "_partition", "_offset", "_position"} <= set(types)


def test_the_reconciliation_reports_what_the_simulator_expects(spark, simulated):
    """Each table's resync epoch, reconciled against the replayed changes, counts the snapshot rows the simulator read,
    reports no difference (the history plants no drift), and calls in flight only keys a change hit while the table
    was being read. Every format: its snapshot markers, positions and partitioning decide the epochs."""
    fmt, history, config, tmp = simulated
    full_run_of(simulated)
    assert reconcile_main(["--config", str(config), "--run-id", "full"]) == EXIT_OK
    run = tmp / "warehouse" / "sim" / "runs" / "full"
    reconciliation = json.loads((run / "summary.json").read_text())["reconciliation"]
    diff = spark.read.parquet(str(run / "reconcile" / "diff"))
    expected = history.expected_reconciliation
    assert expected, "the simulated history has a resync to reconcile"
    if fmt in WITHOUT_SNAPSHOT_MARKER:
        assert (reconciliation["verdict"], reconciliation["tables"]) == ("pass", [])  # nothing to compare
        return
    for table_id, resync in expected.items():
        [epoch] = [
            m for m in reconciliation["tables"] if m["table_id"] == table_id and m["epoch_no"] == resync.epoch + 1
        ]
        counts = {status: epoch[status] for status in ("mismatch", "missing_in_incremental", "missing_in_snapshot")}
        assert (epoch["kind"], epoch["snapshot_rows"], counts) == (
            "reconciled",
            resync.snapshot_rows,
            {"mismatch": 0, "missing_in_incremental": 0, "missing_in_snapshot": 0},
        ), table_id
        in_flight = {
            row.key
            for row in diff.where((diff.table_id == table_id) & (diff.epoch_no == epoch["epoch_no"]))
            .where(diff.status == "in_flight")
            .select("key")
            .collect()
        }
        assert in_flight <= {json.dumps([str(v) for v in key], separators=(",", ":")) for key in resync.in_flight}, (
            table_id
        )
    assert reconciliation["verdict"] == "pass"


def test_nightly_incremental_runs_equal_the_truth_and_reruns_change_nothing(spark, simulated_nightly, monkeypatch):
    _, history, config, tmp = simulated_nightly
    # A night here changes about as many keys as the state holds, past the share at which a run writes its state
    # whole; lifted, every night after the first merges its changed keys, so the merged state is what is checked
    # against the truth.
    monkeypatch.setattr(state_store, "MAX_MERGE_SHARE", 100)
    # The typed tables too are merged with their changed keys' rows whatever their size.
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MIN_ROWS", 0)
    monkeypatch.setattr(typed_tables, "TYPED_MERGE_MAX_SHARE", 100)
    merged = []
    first_day = history.start.replace(hour=0, minute=0, second=0, microsecond=0)
    last_day = history.end
    day = first_day
    while day <= last_day:
        start, end = day, day + timedelta(days=1)
        run_id = f"day_{start:%Y%m%d}"
        args = ["--config", str(config), "--run-id", run_id, "--start", start.isoformat(), "--end", end.isoformat()]
        if day == first_day:
            args.append("--full-rebuild")  # the first night starts from nothing
        assert replay_main(args) == EXIT_OK
        merged.append(
            json.loads((tmp / "warehouse" / "sim" / "runs" / run_id / "summary.json").read_text())["state_merged"]
        )
        day = end
    assert merged == [False] + [True] * (NIGHTLY_DAYS - 1)
    assert_equals_truth(spark, history, tmp)

    # The first night replayed again after the second (a backfill of an earlier date): its changes are older than
    # the state's, so the published rows stay as they are.
    table = next(iter(history.tables.values()))
    before = published_rows(spark, tmp, table.table_id, table.primary_key)
    first_night = [first_day.isoformat(), (first_day + timedelta(days=1)).isoformat()]
    rerun = ["--config", str(config), "--run-id", f"rerun_{first_day:%Y%m%d}", "--start", first_night[0]]
    assert replay_main([*rerun, "--end", first_night[1]]) == EXIT_OK
    assert published_rows(spark, tmp, table.table_id, table.primary_key) == before
    assert_equals_truth(spark, history, tmp)


@pytest.mark.parametrize(
    "fmt",
    [
        "debezium-json",
        "debezium-avro",
        "dts-shareplex-json",
        "drs-json-c",
        "dataworks-json",
        "dts-avro",
        "qlik-json",
        "drs-avro",
        "qlik-avro",
    ],
)
def test_native_reader_replays_to_the_truth(spark, tmp_path, fmt):
    """``options.reader: spark`` (Spark's JSON reader, ``from_avro``): the job's two-pass decode (native rows, then the
    flagged records in Python) publishes the true final state, and the flagged records are only those the native
    path leaves."""
    history = build_sample_archive(tmp_path / "archive", fmt, events=EVENTS, seed=SEED, layout="parquet")
    options = {**history.pipeline_settings.get("options", {}), "reader": "spark"}
    settings = {**history.pipeline_settings, "options": options}
    config = pipeline_config(tmp_path, "sim", fmt, tmp_path / "archive", settings=settings)
    assert replay_main(["--config", str(config), "--run-id", "native", "--full-rebuild"]) == EXIT_OK
    assert_equals_truth(spark, history, tmp_path)
    summary = json.loads((tmp_path / "warehouse" / "sim" / "runs" / "native" / "summary.json").read_text())
    assert summary["decoded"]["quarantined"] == 0
    assert summary["decoded"]["source_records"] == summary["distinct_records"]
    decoded = tmp_path / "warehouse" / "sim" / "runs" / "native" / "decoded"
    # No record is left pending between the passes. (Debezium's topics carry tombstones and transaction markers, DRS
    # a DDL message, the control rows; the simulator's Shareplex topic has no control message.)
    kinds = ["record_kind=changelog"] + (["record_kind=control"] if fmt != "dts-shareplex-json" else [])
    assert sorted(p.name for p in decoded.iterdir() if p.is_dir()) == kinds
