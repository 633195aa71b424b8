"""Broken and hostile messages never crash a run and never vanish: each becomes a quarantine row with a reason and
its Kafka coordinates, and the run's accounting adds up. Every case runs through the real job entry point."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from archive_helpers import Record, pipeline_config, write_parquet

from cdcreplay.entrypoints import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, replay_main
from cdcreplay.warehouse import PipelinePaths

GOOD_DEBEZIUM = {
    "before": None,
    "after": {"id": 1, "name": "a"},
    "source": {"db": "shop", "table": "items", "file": "mysql-bin.000001", "pos": 4, "row": 0, "ts_ms": 1},
    "op": "c",
    "ts_ms": 1,
}

DEBEZIUM_CASES = [
    ("truncated json", '{"before": null, "after": {"id": 2', None, "not_json"),
    ("not json", "hello, world", None, "not_json"),
    ("json array", "[1, 2, 3]", None, "not_json"),
    ("not utf-8", b"\xff\xfe\x00garbage", None, "not_utf8"),
    ("unknown op", json.dumps({**GOOD_DEBEZIUM, "op": "x"}), '{"id": 3}', "unknown_op"),
    ("no op, no control shape", json.dumps({"hello": "world"}), None, "unknown_op"),
    ("missing key", json.dumps({**GOOD_DEBEZIUM, "after": {"name": "no id"}}), None, "missing_key"),
    ("missing table", json.dumps({**GOOD_DEBEZIUM, "source": {"db": "shop"}}), '{"id": 4}', "missing_table"),
    ("insert without after", json.dumps({**GOOD_DEBEZIUM, "after": None}), '{"id": 5}', "missing_image"),
    (
        "bad decimal bytes",
        json.dumps(
            {
                "schema": {
                    "fields": [
                        {
                            "field": "after",
                            "fields": [
                                {"field": "id", "type": "int32"},
                                {
                                    "field": "price",
                                    "type": "bytes",
                                    "name": "org.apache.kafka.connect.data.Decimal",
                                    "parameters": {"scale": "2"},
                                },
                            ],
                        }
                    ]
                },
                "payload": {**GOOD_DEBEZIUM, "after": {"id": 6, "price": "%%%not base64"}},
            }
        ),
        '{"id": 6}',
        "bad_value",
    ),
    (
        "huge timestamp",
        json.dumps(
            {
                **GOOD_DEBEZIUM,
                "after": {"id": 7},
                "ts_ms": 10**18,
                "source": {**GOOD_DEBEZIUM["source"], "ts_ms": 10**18, "pos": "x"},
            }
        ),
        '{"id": 7}',
        None,
    ),
]


@pytest.fixture(scope="module")
def hostile_run(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    records = [Record("shop.items", 0, 0, json.dumps(GOOD_DEBEZIUM), key='{"id": 1}')]
    for offset, (_, value, key, _) in enumerate(DEBEZIUM_CASES, start=1):
        records.append(Record("shop.items", 0, offset, value, key=key))
    write_parquet(records, tmp / "archive" / "part-0.parquet")
    config = pipeline_config(tmp, "hostile", "debezium-json", tmp / "archive")
    code = replay_main(["--config", str(config), "--run-id", "r1"])
    run_dir = tmp / "warehouse" / "hostile" / "runs" / "r1"
    return code, run_dir, tmp


def test_the_run_succeeds_despite_bad_messages(hostile_run):
    code, run_dir, _ = hostile_run
    assert code == EXIT_OK
    summary = json.loads((run_dir / "summary.json").read_text())
    # Every record read is accounted for: 1 good + the cases (the huge-timestamp one is applied, not quarantined).
    assert summary["distinct_records"] == len(DEBEZIUM_CASES) + 1
    assert summary["decoded"]["source_records"] == summary["distinct_records"]
    expected_quarantine = len([c for c in DEBEZIUM_CASES if c[3]])
    assert summary["decoded"]["quarantined"] == expected_quarantine
    assert summary["tables"]["shop.items"]["rows"] == 2  # ids 1 and 7


@pytest.mark.parametrize("case", [c for c in DEBEZIUM_CASES if c[3]], ids=lambda c: c[0])
def test_each_bad_message_is_quarantined_with_reason_and_coordinates(hostile_run, case):
    _, run_dir, _ = hostile_run
    rows = pq.read_table(run_dir / "decoded" / "record_kind=quarantine").to_pylist()
    offset = DEBEZIUM_CASES.index(case) + 1
    [row] = [r for r in rows if r["offset"] == offset]
    assert (row["topic"], row["partition"], row["reason"]) == ("shop.items", 0, case[3])
    assert row["detail"]
    raw = case[1].encode() if isinstance(case[1], str) else case[1]
    assert row["raw_value"] == raw  # the original bytes are kept for inspection and replay


def test_a_wrong_archive_path_fails_before_any_work(tmp_path, capsys):
    config = pipeline_config(tmp_path, "nowhere", "canal-json", tmp_path / "missing")
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    assert "does not exist; fix archive.path" in capsys.readouterr().err


def test_an_empty_archive_folder_fails_with_a_clear_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    config = pipeline_config(tmp_path, "empty", "canal-json", tmp_path / "empty")
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    assert "holds no parquet files" in capsys.readouterr().err


def test_an_offset_range_outside_the_archive_fails_before_decoding(hostile_run, capsys):
    _, _, tmp = hostile_run
    config = tmp / "hostile.yaml"
    offsets = json.dumps({"shop.items": {"0": {"start": 500, "until": 600}}})
    assert replay_main(["--config", str(config), "--run-id", "r2", "--offsets", offsets]) == EXIT_BAD_INPUT
    assert "offsets.shop.items.0: requested [500, 600) but the archive holds offsets 0..11" in capsys.readouterr().err
    assert not (tmp / "warehouse" / "hostile" / "runs" / "r2" / "decoded").exists()


def test_canal_bad_messages(spark, tmp_path):
    good = {
        "data": [{"id": "1", "v": "x"}, {"id": None, "v": "no key"}, {"id": "3", "v": "y"}],
        "database": "shop",
        "table": "t",
        "type": "INSERT",
        "isDdl": False,
        "pkNames": ["id"],
        "mysqlType": {"id": "int", "v": "varchar(8)"},
        "es": 1,
        "id": 1,
    }
    cases = [
        json.dumps(good),
        json.dumps({**good, "type": "UPSERT"}),
        json.dumps({**good, "data": None}),
        json.dumps({**good, "data": [{"id": "abc", "v": "bad int"}]}),
        '{"data": [',
    ]
    write_parquet([Record("c", 0, i, v) for i, v in enumerate(cases)], tmp_path / "archive" / "p.parquet")
    config = pipeline_config(tmp_path, "canal", "canal-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK
    run_dir = tmp_path / "warehouse" / "canal" / "runs" / "r"
    got = sorted(
        (r["offset"], r["reason"]) for r in pq.read_table(run_dir / "decoded" / "record_kind=quarantine").to_pylist()
    )
    # One row of a multi-row message can be bad while its siblings apply.
    assert got == [(0, "missing_key"), (1, "unknown_op"), (2, "missing_image"), (3, "bad_value"), (4, "not_json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tables"]["shop.t"]["rows"] == 2


def test_a_table_failing_its_latest_state_suite_is_not_published(spark, tmp_path, capsys):
    """Write -> audit -> publish: keys "1" and "01" are two keys in the change stream but the same int in the typed
    table, so `latest_state` (keys unique) fails, nothing is published and the previous version stays."""

    def canal_insert(offset: int, key: str) -> Record:
        message = {
            "data": [{"id": key, "v": f"row {key}"}],
            "database": "shop",
            "table": "t",
            "type": "INSERT",
            "isDdl": False,
            "pkNames": ["id"],
            "mysqlType": {"id": "int", "v": "varchar(8)"},
            "es": 1000 + offset,
            "id": offset,
        }
        return Record("c", 0, offset, json.dumps(message))

    write_parquet([canal_insert(0, "1")], tmp_path / "archive" / "p0.parquet")
    config = pipeline_config(tmp_path, "gate", "canal-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", "good"]) == EXIT_OK
    current = tmp_path / "warehouse" / "gate" / "_CURRENT.json"
    published = current.read_text()
    assert json.loads(published)["run_id"] == "good"

    write_parquet([canal_insert(1, "01")], tmp_path / "archive" / "p1.parquet")
    assert replay_main(["--config", str(config), "--run-id", "bad"]) == EXIT_ERROR
    assert current.read_text() == published  # readers still see the good version
    error = capsys.readouterr().err
    assert "suite latest_state failed, nothing was published and the previous version stays: shop.t: " in error
    assert "expect_column_values_to_be_unique(column=id): 2 unexpected of 2 (1: 2)" in error
    # The rejected commit is rolled back: the table's newest content is the published one, for every Delta reader.
    table = PipelinePaths(str(tmp_path / "warehouse"), "gate").table_dir("shop.t")
    assert [(r.id, r.v) for r in spark.read.format("delta").load(str(table)).collect()] == [(1, "row 1")]


def test_a_pipeline_locked_by_a_live_run_is_refused_and_a_dead_runs_lock_is_broken(spark, tmp_path, capsys):
    write_parquet(
        [Record("shop.items", 0, 0, json.dumps(GOOD_DEBEZIUM), key='{"id": 1}')], tmp_path / "a" / "p.parquet"
    )
    config = pipeline_config(tmp_path, "locked", "debezium-json", tmp_path / "a")
    lock = tmp_path / "warehouse" / "locked" / "_LOCK.json"
    lock.parent.mkdir(parents=True)
    holder = {"run_id": "other", "host": socket.gethostname(), "acquired_at": "2026-01-01T00:00:00+00:00"}

    lock.write_text(json.dumps({**holder, "pid": os.getpid(), "acquired_at_epoch": 0}))  # alive: this very process
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_ERROR
    assert "pipeline 'locked' is being written by run other (pid" in capsys.readouterr().err
    assert not (tmp_path / "warehouse" / "locked" / "_CURRENT.json").exists()

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({**holder, "pid": int(gone.stdout), "acquired_at_epoch": 0}))  # its process is gone
    assert replay_main(["--config", str(config), "--run-id", "r2"]) == EXIT_OK
    assert json.loads((tmp_path / "warehouse" / "locked" / "_CURRENT.json").read_text())["run_id"] == "r2"
    assert sorted(p.name for p in lock.parent.iterdir() if p.name.startswith((".", "_"))) == ["_CURRENT.json"]


def debezium_item(item_id: int, op: str = "c") -> str:
    return json.dumps({**GOOD_DEBEZIUM, "after": {"id": item_id, "name": f"item {item_id}"}, "op": op})


def test_the_summary_accounts_for_every_record_per_partition(spark, tmp_path, capsys):
    """Two partitions with bad messages, a tombstone and a record archived twice: each partition's distinct records
    add up to its changelog, control and quarantined records, in the summary and in the printed report."""
    records = [
        Record("shop.items", 0, 0, debezium_item(1), key='{"id": 1}'),
        Record("shop.items", 0, 1, '{"before": null, "after": {"id": 2', key='{"id": 2}'),  # not_json
        Record("shop.items", 0, 2, json.dumps({**GOOD_DEBEZIUM, "after": {"name": "no id"}})),  # missing_key
        Record("shop.items", 0, 3, None, key='{"id": 1}'),  # tombstone: control
        Record("shop.items", 0, 4, debezium_item(4), key='{"id": 4}'),
        Record("shop.items", 0, 4, debezium_item(4), key='{"id": 4}'),  # the same record archived twice
        Record("shop.items", 1, 0, debezium_item(10), key='{"id": 10}'),
        Record("shop.items", 1, 1, b"\xff\xfe not text", key='{"id": 11}'),  # not_utf8
        Record("shop.items", 1, 2, debezium_item(12, op="x"), key='{"id": 12}'),  # unknown_op
    ]
    write_parquet(records, tmp_path / "archive" / "p.parquet")
    config = pipeline_config(tmp_path, "parts", "debezium-json", tmp_path / "archive")
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK
    summary = json.loads((tmp_path / "warehouse" / "parts" / "runs" / "r" / "summary.json").read_text())
    assert summary["decoded"] == {
        "source_records": 8,
        "partitions": {
            "shop.items": {
                "0": {
                    "records_read": 6,
                    "distinct_records": 5,
                    "changelog_records": 2,
                    "control_records": 1,
                    "quarantined_records": 2,
                },
                "1": {
                    "records_read": 3,
                    "distinct_records": 3,
                    "changelog_records": 1,
                    "control_records": 0,
                    "quarantined_records": 2,
                },
            }
        },
        "changelog_rows": 3,
        "control_rows": 1,
        "quarantined": 4,
        "quarantine_by_reason": {"missing_key": 1, "not_json": 1, "not_utf8": 1, "unknown_op": 1},
        "control_by_kind": {"tombstone": 1},
        "changes_by_table": {"shop.items": 3},
        "notes": {},
    }
    printed = capsys.readouterr().out.splitlines()
    start = printed.index("  records per partition (distinct read = changelog + control + quarantined):")
    assert printed[start + 1 : start + 3] == [
        "    shop.items/0: 5 = 2 + 1 + 2 (1 duplicate records skipped)",
        "    shop.items/1: 3 = 1 + 0 + 2",
    ]


def test_a_partition_whose_records_do_not_add_up_fails_the_run_naming_it():
    from cdcreplay.accounting import AccountingError, check_accounting
    from cdcreplay.run_spec import RunSpec

    def counts(distinct, changelog, control, quarantined):
        return {
            "records_read": distinct,
            "distinct_records": distinct,
            "changelog_records": changelog,
            "control_records": control,
            "quarantined_records": quarantined,
        }

    # Partition 1 lost a record and partition 2 was never read but has decoded rows: the totals alone would agree.
    kinds = {
        "source_records": 8,
        "partitions": {"shop.items": {"0": counts(5, 2, 1, 2), "1": counts(3, 1, 0, 1), "2": counts(0, 1, 0, 0)}},
    }
    with pytest.raises(AccountingError) as error:
        check_accounting(kinds, {"distinct_records": 8}, RunSpec(config="c.yaml", run_id="r"))
    assert str(error.value) == (
        "records read and records accounted for disagree: topic shop.items partition 1: read 3 distinct records but "
        "2 are accounted for (changelog 1, control 0, quarantined 1); topic shop.items partition 2: read 0 distinct "
        "records but 1 are accounted for (changelog 1, control 0, quarantined 0). Nothing was published. This is a "
        "bug in the decoder: please report it with the run's manifest"
    )


def test_unreadable_archive_files_are_named_before_any_work_or_left_out_when_asked(spark, tmp_path, capsys):
    """An archiver killed mid-upload leaves a truncated Parquet file: the run names it (exit 2) instead of dying in
    the decode, or, with archive.skip_unreadable_files, reads the rest and lists it in the manifest."""
    good = write_parquet(
        [Record("shop.items", 0, 0, json.dumps(GOOD_DEBEZIUM), key='{"id": 1}')], tmp_path / "archive" / "good.parquet"
    )
    data = good.read_bytes()
    (tmp_path / "archive" / "truncated.parquet").write_bytes(data[: len(data) // 2])
    (tmp_path / "archive" / "not-parquet.parquet").write_text('{"topic": "c"}\n', encoding="utf-8")
    config = pipeline_config(tmp_path, "items", "debezium-json", tmp_path / "archive")

    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "2 archive file(s) are not readable Parquet: " in error
    assert f"{tmp_path / 'archive' / 'not-parquet.parquet'}: " in error
    assert f"{tmp_path / 'archive' / 'truncated.parquet'}: " in error
    assert "set archive.skip_unreadable_files: true to leave them out" in error
    assert not (tmp_path / "warehouse" / "items" / "_CURRENT.json").exists()

    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("layout: parquet}", "layout: parquet, skip_unreadable_files: true}"), "utf-8")
    assert replay_main(["--config", str(config), "--run-id", "r2"]) == EXIT_OK
    assert "2 unreadable archive files left out (listed in the manifest)" in capsys.readouterr().out
    run_dir = tmp_path / "warehouse" / "items" / "runs" / "r2"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["files"] == [str(good)]
    assert sorted(u["path"] for u in manifest["unreadable_files"]) == [
        str(tmp_path / "archive" / "not-parquet.parquet"),
        str(tmp_path / "archive" / "truncated.parquet"),
    ]
    assert all(u["reason"] for u in manifest["unreadable_files"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["unreadable_files"], summary["distinct_records"], summary["tables"]["shop.items"]["rows"]) == (
        2,
        1,
        1,
    )


def test_a_warehouse_of_an_earlier_release_is_refused_until_a_full_rebuild(spark, tmp_path, capsys):
    """Parquet versions/ and a pointer without Delta versions: an incremental run would build on a state it cannot
    read, so it stops before any work naming the fix; a full rebuild publishes Delta tables and drops versions/."""
    write_parquet(
        [Record("shop.items", 0, 0, json.dumps(GOOD_DEBEZIUM), key='{"id": 1}')], tmp_path / "archive" / "p.parquet"
    )
    config = pipeline_config(tmp_path, "items", "debezium-json", tmp_path / "archive")
    root = tmp_path / "warehouse" / "items"
    (root / "versions" / "v1" / "state").mkdir(parents=True)
    legacy = {"version": "v1", "run_id": "old", "state": "versions/v1/state", "tables": {}, "history": ["v1"]}
    (root / "_CURRENT.json").write_text(json.dumps(legacy), encoding="utf-8")

    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "was published by an earlier release (Parquet folders under versions/)" in error
    assert "run it once with --full-rebuild" in error
    assert not (root / "runs" / "r1").exists()

    assert replay_main(["--config", str(config), "--run-id", "r2", "--full-rebuild"]) == EXIT_OK
    assert json.loads((root / "_CURRENT.json").read_text())["state_version"] == 0
    assert not (root / "versions").exists()
