"""Archive, warehouse and run reports on S3, against a real S3 server (s3proxy on 127.0.0.1, see s3_server.py).

The same simulated archive is replayed twice: from a bucket into a warehouse in the bucket, and from local disk into a
local warehouse. Two nights each, the first reconciled; the published tables are the same rows, read by Spark and by
delta-rs straight from S3, and `cdcreplay report` / `show-table` read the run from the bucket.
"""

from __future__ import annotations

import io
import json
import os
import socket
from datetime import timedelta

from archive_helpers import pipeline_config
from pyspark.testing import assertDataFrameEqual

from cdcreplay import cli
from cdcreplay.entrypoints import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, reconcile_main, replay_main
from cdcreplay.storage import Location
from cdcreplay.warehouse import PipelinePaths, published_rows, read_current, read_table
from cdcreplay_lab.simulator import build_sample_archive

BUCKET = "lake"
WAREHOUSE = f"s3a://{BUCKET}/warehouse"


def strip_paths(tables: list[dict]) -> list[dict]:
    """The per-epoch metrics, without anything that names where they were written."""
    return [{k: v for k, v in t.items() if not k.endswith("_path")} for t in tables]


def s3_config(tmp_path, name: str, archive: str, settings: dict | None = None):
    """A pipelines file whose warehouse and archive are in the bucket."""
    local = pipeline_config(tmp_path, name, "debezium-json", tmp_path / "unused", settings=settings)
    text = local.read_text().replace(f"warehouse: {tmp_path / 'warehouse'}", f"warehouse: {WAREHOUSE}")
    text = text.replace(f"path: {tmp_path / 'unused'}", f"path: {archive}")
    config = tmp_path / f"{name}-s3.yaml"
    config.write_text(text)
    return config


def test_two_nights_from_a_bucket_into_a_bucket_equal_the_same_nights_on_local_disk(spark, s3, tmp_path, capsys):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=1200, seed=11, days=2)
    archive = Location(f"s3a://{BUCKET}/archives/sim")
    archive.upload_tree(tmp_path / "archive")
    on_s3 = s3_config(tmp_path, "sim", str(archive), history.pipeline_settings)
    on_disk = pipeline_config(
        tmp_path, "sim", "debezium-json", tmp_path / "archive", settings=history.pipeline_settings
    )
    first_night_end = (history.start + timedelta(days=1)).isoformat()

    for config in (on_s3, on_disk):
        assert replay_main(["--config", str(config), "--run-id", "n1", "--end", first_night_end]) == EXIT_OK
    assert reconcile_main(["--config", str(on_s3), "--run-id", "n1"]) == EXIT_OK
    assert "reconciliation of sim: PASS" in capsys.readouterr().out
    for config in (on_s3, on_disk):
        assert replay_main(["--config", str(config), "--run-id", "n2", "--start", first_night_end]) == EXIT_OK
        # The second night's snapshot epochs are reconciled against the first night's state, read as of its version.
        assert reconcile_main(["--config", str(config), "--run-id", "n2"]) == EXIT_OK

    s3_paths, disk_paths = PipelinePaths(WAREHOUSE, "sim"), PipelinePaths(str(tmp_path / "warehouse"), "sim")
    published = read_current(s3_paths)
    assert published["run_id"] == "n2"
    assert sorted(published["tables"]) == sorted(read_current(disk_paths)["tables"]) == sorted(history.tables)
    for table_id in published["tables"]:
        from_s3 = read_table(spark, WAREHOUSE, "sim", table_id)
        assert from_s3.count() == len(history.final_state(table_id))
        assertDataFrameEqual(from_s3, read_table(spark, str(tmp_path / "warehouse"), "sim", table_id))
        # delta-rs reads the table from the bucket as Spark does, with the same endpoint and credentials.
        assert published_rows(s3_paths, table_id).num_rows == from_s3.count()

    # The run's reports are in the bucket, and the command-line tools read them there.
    reconciled = [json.loads(p.run_file("n2", "summary.json").read_text()) for p in (s3_paths, disk_paths)]
    assert reconciled[0]["reconciliation"]["verdict"] == "pass"
    assert any(t["kind"] == "reconciled" for t in reconciled[0]["reconciliation"]["tables"])
    assert [strip_paths(r["reconciliation"]["tables"]) for r in reconciled] == [
        strip_paths(reconciled[1]["reconciliation"]["tables"])
    ] * 2
    assert (s3_paths.run_dir("n1") / "reconcile" / "report.md").read_text().startswith("#")
    assert (s3_paths.run_dir("n2") / "quality" / "data_docs" / "index.html").is_file()
    assert cli.main(["report", "--config", str(on_s3)]) == 0
    assert "n2" in capsys.readouterr().out
    table_id = sorted(published["tables"])[0]
    out = io.StringIO()
    assert cli.show_table(str(on_s3), "sim", table_id, limit=None, out=out) == 0
    assert len(out.getvalue().splitlines()) == len(history.final_state(table_id))
    # Nothing is left of the runs' lock.
    assert not s3_paths.lock_file.exists()


def test_the_lock_on_s3_is_a_conditional_put_that_only_one_writer_wins(spark, s3, tmp_path, capsys):
    lock = Location(f"s3a://{BUCKET}/locks/{tmp_path.name}/_LOCK.json")
    assert lock.create_exclusive('{"run_id": "first"}')
    assert not lock.create_exclusive('{"run_id": "second"}')
    assert json.loads(lock.read_text()) == {"run_id": "first"}

    # A pipeline whose lock a live run holds is refused; the lock of a run whose process is gone is broken.
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=200, seed=3)
    archive = Location(f"s3a://{BUCKET}/archives/{tmp_path.name}")
    archive.upload_tree(tmp_path / "archive")
    config = s3_config(tmp_path, "locked", str(archive), history.pipeline_settings)
    paths = PipelinePaths(WAREHOUSE, "locked")
    holder = {"run_id": "other", "host": socket.gethostname(), "acquired_at": "2026-01-01T00:00:00+00:00"}
    paths.lock_file.write_text(json.dumps({**holder, "pid": os.getpid(), "acquired_at_epoch": 0}))
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_ERROR
    assert "pipeline 'locked' is being written by run other (pid" in capsys.readouterr().err
    paths.lock_file.write_text(json.dumps({**holder, "pid": 2**22 + 12345, "acquired_at_epoch": 0}))  # no such pid
    assert replay_main(["--config", str(config), "--run-id", "r2"]) == EXIT_OK
    assert read_current(paths)["run_id"] == "r2"
    assert [p.name for p in paths.root.iterdir() if p.name.startswith((".", "_LOCK"))] == []


def test_an_unreadable_file_in_a_bucket_is_named_before_any_work(spark, s3, tmp_path, capsys):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=100, seed=5)
    archive = Location(f"s3a://{BUCKET}/archives/{tmp_path.name}")
    archive.upload_tree(tmp_path / "archive")
    (archive / "killed-mid-upload.parquet").write_bytes(b"PAR1 and then nothing")
    config = s3_config(tmp_path, "cut", str(archive), history.pipeline_settings)
    assert replay_main(["--config", str(config), "--run-id", "r1"]) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert f"1 archive file(s) are not readable Parquet: {archive}/killed-mid-upload.parquet: " in error
    assert read_current(PipelinePaths(WAREHOUSE, "cut")) is None


def test_an_unsupported_scheme_is_refused_in_the_config(tmp_path, capsys):
    config = tmp_path / "hdfs.yaml"
    config.write_text(
        "warehouse: hdfs://namenode/warehouse\n"
        "pipelines:\n  - {name: p, format: debezium-json, archive: {path: /tmp/a, layout: parquet}}\n"
    )
    assert replay_main(["--config", str(config)]) == EXIT_BAD_INPUT
    assert (
        "warehouse: 'hdfs://namenode/warehouse': the hdfs:// scheme is not supported; use a local path, file:// or "
        "s3a://bucket/prefix" in capsys.readouterr().err
    )
