"""The simulator's truth for the Alibaba format variants a registry entry does not select: Canal JSON in the legacy
DTS layout (with the option, without it, and against it), Shareplex's long op spelling, DataWorks' one-message
updates. Each runs the real job entry point over a Parquet archive and compares every published row with the truth
(the registered variants are covered by tests/test_truth.py)."""

from __future__ import annotations

import json

import pytest
from archive_helpers import pipeline_config

from cdcreplay.contracts import RunSummary
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.formats.canal_json import LEGACY_DELETE_NOTE
from cdcreplay.report import render_replay
from cdcreplay.warehouse import read_table

pytestmark = pytest.mark.timeout(900)
EVENTS = 1200
SEED = 5


@pytest.fixture(scope="module")
def history():
    from cdcreplay_lab.simulator import simulate

    return simulate(seed=SEED, events=EVENTS)


def published(spark, tmp, name: str, spec) -> list[dict]:
    frame = read_table(spark, str(tmp / "warehouse"), name, spec.table_id)
    columns = [c for c in frame.columns if not c.startswith("_")]
    assert dict(frame.dtypes) | {c.name: c.spark_type for c in spec.columns} == dict(frame.dtypes)
    found = [r.asDict() for r in frame.select(*columns).collect()]
    return sorted(found, key=lambda row: tuple(row[k] for k in spec.primary_key))


def replay(tmp, name: str, fmt: str, archive, settings: dict) -> dict:
    config = pipeline_config(tmp, name, fmt, archive, settings=settings)
    assert replay_main(["--config", str(config), "--run-id", "full", "--full-rebuild"]) == EXIT_OK
    return json.loads((tmp / "warehouse" / name / "runs" / "full" / "summary.json").read_text())


def assert_truth(spark, tmp, name: str, history) -> None:
    for spec in history.tables.values():
        assert published(spark, tmp, name, spec) == history.final_state(spec.table_id), spec.table_id


def test_canal_legacy_layout(spark, tmp_path, history):
    from cdcreplay_lab.simulator import write_archive
    from cdcreplay_lab.simulator.encode_canal_legacy import encode_canal_json_legacy

    archive = tmp_path / "archive"
    write_archive(encode_canal_json_legacy(history), archive)
    deletes = sum(1 for record in encode_canal_json_legacy(history) if json.loads(record.value)["type"] == "DELETE")
    assert deletes > 20

    # Declared: the truth, and no note.
    summary = replay(tmp_path, "legacy", "canal-json", archive, {"options": {"legacy_swapped": True}})
    assert summary["decoded"]["quarantined"] == 0 and summary["decoded"]["notes"] == {}
    assert_truth(spark, tmp_path, "legacy", history)

    # Undeclared: every DELETE is read from `old` (the only way it can be read) and the summary says so.
    summary = replay(tmp_path, "undeclared", "canal-json", archive, {})
    assert summary["decoded"]["notes"] == {LEGACY_DELETE_NOTE: deletes}
    assert (
        f"  note ({deletes} records): {LEGACY_DELETE_NOTE}"
        in render_replay([RunSummary.from_json(summary)]).splitlines()
    )

    # Declared open-source against a legacy stream: the DELETEs are quarantined, not guessed.
    summary = replay(tmp_path, "contradicted", "canal-json", archive, {"options": {"legacy_swapped": False}})
    assert summary["decoded"]["quarantine_by_reason"] == {"missing_image": deletes}


def test_shareplex_long_op_spelling(spark, tmp_path, history):
    from cdcreplay_lab.simulator import write_archive
    from cdcreplay_lab.simulator.encode_shareplex import encode_shareplex_json, pipeline_settings

    archive = tmp_path / "archive"
    records = list(encode_shareplex_json(history, long_ops=True))
    assert {json.loads(r.value)["meta"]["op"] for r in records} == {"INSERT", "UPDATE", "DELETE"}
    write_archive(records, archive)
    summary = replay(tmp_path, "shareplex", "dts-shareplex-json", archive, pipeline_settings(archive))
    assert summary["decoded"]["quarantined"] == 0
    assert_truth(spark, tmp_path, "shareplex", history)


def test_dataworks_one_message_updates(spark, tmp_path, history):
    from cdcreplay_lab.simulator import write_archive
    from cdcreplay_lab.simulator.encode_dataworks import encode_dataworks_json, pipeline_settings

    archive = tmp_path / "archive"
    records = list(encode_dataworks_json(history, single_update_message=True))
    ops = {json.loads(r.value)["payload"]["op"] for r in records}
    assert "UPDATE_BEFOR" not in ops and "UPDATE_AFTER" in ops
    write_archive(records, archive)
    summary = replay(tmp_path, "dataworks", "dataworks-json", archive, pipeline_settings(archive))
    assert summary["decoded"]["quarantined"] == 0
    assert summary["decoded"]["control_by_kind"]["heartbeat"] > 0
    assert_truth(spark, tmp_path, "dataworks", history)
