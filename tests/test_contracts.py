"""The run summary as summary.json holds it: what the replay job writes is what every reader gets back, and a summary
of an earlier or later release still reads."""

from __future__ import annotations

import json

from cdcreplay.contracts import VERDICT_PASS, VERDICT_SKIPPED, ReconciliationResult, RunSummary


def a_summary() -> RunSummary:
    return RunSummary(
        pipeline="shop",
        format="debezium-json",
        run_id="night1",
        records_read=12,
        distinct_records=11,
        duplicates=1,
        files=2,
        timings_s={"read": 0.5, "decode": 1.25},
        elapsed_s=2.0,
        version="v1",
        tables={"shop.orders": {"rows": 3, "tombstones": 1}},
        decoded={"changelog_rows": 10, "control_rows": 0, "quarantined": 1, "quarantine_by_reason": {"not_json": 1}},
        base_state={"path": "/w/shop/state", "version": 4, "patterns": None},
        changelog_path="/w/shop/runs/night1/decoded/record_kind=changelog",
        reconciliation=ReconciliationResult(
            VERDICT_PASS, pipeline="shop", headline="Reconciliation passed", tables=[{"table_id": "shop.orders"}]
        ),
    )


def test_a_summary_reads_back_as_it_was_written():
    summary = a_summary()
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary


def test_the_document_names_every_field_null_where_it_does_not_apply():
    document = a_summary().to_json()
    assert document["reconciliation"]["verdict"] == VERDICT_PASS
    assert document["quality"] is None and document["state_merged"] is None
    assert document["decoded"]["quarantined"] == 1


def test_an_earlier_release_summary_reads_with_defaults_and_a_later_ones_unknown_fields_are_ignored():
    earlier = {"pipeline": "shop", "format": "canal-json", "run_id": "r1", "records_read": 5, "tables": {}}
    later = {**earlier, "kafka_offsets": {"topic": {"0": 7}}}
    for document in (earlier, later):
        summary = RunSummary.from_json(document)
        assert (summary.records_read, summary.unreadable_files, summary.dry_run) == (5, 0, False)
        assert summary.reconciliation is None and summary.decoded is None


def test_a_skipped_reconciliation_and_a_broken_one():
    skipped = ReconciliationResult(VERDICT_SKIPPED, pipeline="shop", reason="no changes in this run")
    summary = RunSummary.from_json({**a_summary().to_json(), "reconciliation": skipped.to_json()})
    assert summary.reconciliation == skipped
    # A reconciliation entry without a verdict (a file cut short) is no reconciliation.
    assert RunSummary.from_json({**a_summary().to_json(), "reconciliation": {"tables": []}}).reconciliation is None
