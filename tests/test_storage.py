"""cdcreplay.storage on a local disk (tests/test_s3.py runs the same operations against a real S3 server): paths
Spark reads, one-step replaces, create-if-absent, and the refusal of what it cannot address; and the pipeline lock's
recovery from a run that died while breaking a stale lock."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from cdcreplay.storage import Location, StorageError, unsupported_scheme
from cdcreplay.warehouse import BREAKING_STALE_AFTER_S, PipelinePaths, _broken_marker, pipeline_lock


def test_a_local_location_reads_writes_lists_and_removes(tmp_path):
    root = Location(f"file://{tmp_path}") / "wh"
    report = root / "runs" / "r1" / "report.md"
    report.write_text("# one")
    report.write_text("# two")  # replaced in one step: no temporary file stays beside it
    assert str(report) == f"{tmp_path}/wh/runs/r1/report.md"
    assert report.read_text() == "# two" and report.is_file() and (root / "runs").is_dir()
    assert [p.name for p in (root / "runs" / "r1").iterdir()] == ["report.md"]
    assert [relative for _, relative in root.files()] == ["runs/r1/report.md"]
    assert report.relative_to(root) == "runs/r1/report.md"
    assert report.create_exclusive("x") is False
    assert (root / "lock").create_exclusive("mine") is True and (root / "lock").read_text() == "mine"
    report.unlink()
    report.unlink()  # already gone: nothing to do
    (root / "runs").remove_tree()
    assert not (root / "runs").exists() and (root / "runs").iterdir() == []
    with pytest.raises(FileNotFoundError):
        report.read_text()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("hdfs://namenode/wh", "'hdfs://namenode/wh': the hdfs:// scheme is not supported; use a local path, file://"),
        ("s3a:///wh", "'s3a:///wh' names no bucket; write s3a://<bucket>/<prefix>"),
    ],
)
def test_what_storage_cannot_address_is_refused_naming_it(uri, message):
    assert message in unsupported_scheme(uri)
    with pytest.raises(StorageError) as refused:
        Location(uri)
    assert message in str(refused.value)
    assert unsupported_scheme("s3a://lake/wh") is None and unsupported_scheme("/data/wh") is None


def test_a_run_that_died_while_breaking_a_stale_lock_does_not_block_the_pipeline(tmp_path):
    paths = PipelinePaths(str(tmp_path / "wh"), "p")
    dead = {"run_id": "old", "pid": 2**22 + 12345, "host": socket.gethostname(), "acquired_at_epoch": 0}
    paths.lock_file.write_text(json.dumps(dead))  # a lock whose process is gone (beyond Linux's largest pid)
    marker = _broken_marker(paths, dead)
    marker.write_text("{}")  # ... and the marker of a run that died while breaking it

    # While the marker is young, another run may still be breaking the lock: this run gives up, naming the lock.
    with pytest.raises(RuntimeError, match="could not take the lock"), pipeline_lock(paths, "r1"):
        pass
    # A marker older than BREAKING_STALE_AFTER_S is a dead breaker's: it is removed, and the stale lock broken.
    old = time.time() - BREAKING_STALE_AFTER_S - 60
    os.utime(str(marker), (old, old))
    with pipeline_lock(paths, "r2"):
        assert json.loads(paths.lock_file.read_text())["run_id"] == "r2"
    assert [p.name for p in paths.root.iterdir()] == []
