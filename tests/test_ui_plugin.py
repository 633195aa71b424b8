"""The reconciliation view (plugins/cdcreplay_ui): the reading module on its own, then the real thing in a browser.

Fast tests build a warehouse by hand in the layout the jobs write and check what `runs_index` reads from it,
including the refusal of every path that leads out of a run folder.

The browser test runs the real DAG with `airflow dags test` (Spark local[*]) on simulated archives -- one pipeline
with changes lost before its resync snapshot (reconciliation FAILs naming them) and bad records (quarantined), one
clean -- then starts `airflow api-server` on 127.0.0.1 with this repository's plugins folder, logs in through
Airflow's login page in headless Debian Chromium (Playwright, never `playwright install`), and checks what a person
sees: the runs per pipeline and table, verdicts and counts, the diff rows, Data Docs and manifest behind the links,
the menu entry, and the reconcile task's extra link. The screenshot goes to var/screenshots/reconciliation.png.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, parse_qsl, urlencode, urljoin

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugins"))  # where Airflow finds the plugin package, too

from airflow_helpers import AirflowStack, airflow, free_local_port, tail, write_config  # noqa: E402
from airflow_ui import SCREENSHOTS, logged_in_page, ui_env  # noqa: E402
from cdcreplay_ui.runs_index import (  # noqa: E402
    DEFAULT_DIFF_STATUSES,
    DiffPage,
    NotFound,
    Refused,
    RunInfo,
    TableResult,
    Warehouse,
)

from cdcreplay.storage import Location  # noqa: E402
from cdcreplay_lab.airflow_env import DAG_ID  # noqa: E402

SCREENSHOT = SCREENSHOTS / "reconciliation.png"

# --------------------------------------------------------------------------------------------------------------------
# A warehouse written by hand, in the layout and with the keys the replay and reconcile jobs write
# --------------------------------------------------------------------------------------------------------------------

DIFF_SCHEMA = pa.schema(
    [
        ("table_id", pa.string()),
        ("epoch_no", pa.int32()),
        ("key", pa.string()),
        ("status", pa.string()),
        (
            "differing_columns",
            pa.list_(
                pa.struct(
                    [("column", pa.string()), ("snapshot_value", pa.string()), ("incremental_value", pa.string())]
                )
            ),
        ),
        ("snapshot_topic", pa.string()),
        ("snapshot_partition", pa.int32()),
        ("snapshot_offset", pa.int64()),
        ("snapshot_position", pa.string()),
        ("incremental_op", pa.string()),
        ("incremental_topic", pa.string()),
        ("incremental_partition", pa.int32()),
        ("incremental_offset", pa.int64()),
        ("incremental_position", pa.string()),
    ]
)


def diff_row(table_id, key, status, differing=(), epoch_no=2, snapshot_offset=10, incremental_offset=5, op="update"):
    return {
        "table_id": table_id,
        "epoch_no": epoch_no,
        "key": key,
        "status": status,
        "differing_columns": [{"column": c, "snapshot_value": s, "incremental_value": i} for c, s, i in differing],
        "snapshot_topic": None if status == "missing_in_snapshot" else f"t.{table_id}",
        "snapshot_partition": None if status == "missing_in_snapshot" else 0,
        "snapshot_offset": None if status == "missing_in_snapshot" else snapshot_offset,
        "snapshot_position": None if status == "missing_in_snapshot" else "[4,100,0]",
        "incremental_op": None if status == "missing_in_incremental" else op,
        "incremental_topic": None if status == "missing_in_incremental" else f"t.{table_id}",
        "incremental_partition": None if status == "missing_in_incremental" else 1,
        "incremental_offset": None if status == "missing_in_incremental" else incremental_offset,
        "incremental_position": None if status == "missing_in_incremental" else "[4,90,0]",
    }


def epoch(table_id, epoch_no, kind, verdict, snapshot_rows, **counts):
    statuses = ("match", "mismatch", "missing_in_incremental", "missing_in_snapshot", "in_flight")
    return {
        "table_id": table_id,
        "epoch_no": epoch_no,
        "kind": kind,
        "verdict": verdict,
        "first_order": "{}",
        "last_order": "{}",
        "snapshot_rows": snapshot_rows,
        "incremental_rows": counts.get("match", 0) + counts.get("mismatch", 0),
        **{s: counts.get(s, 0) for s in statuses},
    }


def write_run(
    root: Path, pipeline: str, run_id: str, *, generated_at: str | None, epochs=(), diff=None, validations=(), **extra
):
    """One run folder: summary.json (+ reconciliation when generated_at), manifest, diff Parquet, report, Data Docs
    (the site's index and a validation result page per timestamp in ``validations``)."""
    run = root / pipeline / "runs" / run_id
    run.mkdir(parents=True)
    summary = {
        "pipeline": pipeline,
        "format": "debezium-json",
        "run_id": run_id,
        "dry_run": extra.get("dry_run", False),
        "records_read": 120,
        "duplicates": 0,
        "missing_offsets": 0,
        "decoded": {"quarantined": 3, "quarantine_by_reason": {"not_utf8": 1, "not_json": 2}},
        "manifest_path": str(run / "manifest.json"),
    }
    (run / "manifest.json").write_text(json.dumps({"distinct_records": 120, "files": ["a.parquet"]}), encoding="utf-8")
    if generated_at:
        reconcile = run / "reconcile"
        (reconcile / "data_docs").mkdir(parents=True)
        (reconcile / "data_docs" / "index.html").write_text("<h1>reconciliation_diff</h1>", encoding="utf-8")
        for stamp in validations:
            page = reconcile / "data_docs" / "validations" / "reconciliation_diff" / "__none__" / stamp / "spark-x.html"
            page.parent.mkdir(parents=True)
            page.write_text(f"<h1>validation {stamp}</h1>", encoding="utf-8")
        (reconcile / "report.md").write_text("# Reconciliation report\n", encoding="utf-8")
        (reconcile / "diff").mkdir()
        pq.write_table(pa.Table.from_pylist(diff or [], schema=DIFF_SCHEMA), reconcile / "diff" / "part-00000.parquet")
        (reconcile / "diff" / "_SUCCESS").write_text("", encoding="utf-8")
        failing = any(e["verdict"] == "fail" for e in epochs)
        summary["reconciliation"] = {
            "pipeline": pipeline,
            "verdict": "fail" if failing else "pass",
            "headline": (
                "Reconciliation FAILED: shop.orders epoch 2: 1 mismatch" if failing else "Reconciliation passed."
            )
            + f" Diff: {reconcile / 'diff'}",
            "generated_at": generated_at,
            "tables": list(epochs),
            "failed_expectations": ["expect_column_values_to_be_in_set(status): 2 unexpected"] if failing else [],
        }
        (reconcile / "metrics.json").write_text(json.dumps({**summary["reconciliation"], "suite": None}), "utf-8")
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if generated_at:  # the reconcile job rewrites summary.json when it is done
        stamp = datetime.fromisoformat(generated_at).timestamp()
        os.utime(run / "summary.json", (stamp, stamp))
    return run


@pytest.fixture
def hand_made(tmp_path) -> Warehouse:
    root = tmp_path / "warehouse"
    epochs = [
        epoch("shop.orders", 1, "baseline", "baseline", 400),
        epoch("shop.orders", 2, "reconciled", "fail", 6, match=3, mismatch=1, missing_in_incremental=1, in_flight=1),
        epoch("shop.orders", 3, "reconciled", "pass", 2, match=2),
        epoch("shop.customers", 1, "baseline", "baseline", 300),
        epoch("shop.customers", 2, "reconciled", "pass", 2, match=1, in_flight=1, missing_in_snapshot=0),
    ]
    diff = [
        diff_row("shop.orders", '["1"]', "match"),
        diff_row("shop.orders", '["2"]', "match"),
        diff_row("shop.orders", '["3"]', "match"),
        diff_row("shop.orders", '["7"]', "mismatch", [("amount", "12.50", "13.00"), ("note", None, "x")]),
        diff_row("shop.orders", '["8"]', "missing_in_incremental"),
        diff_row("shop.orders", '["9"]', "in_flight", op="delete"),
        diff_row("shop.orders", '["4"]', "match", epoch_no=3),
        diff_row("shop.orders", '["5"]', "match", epoch_no=3),
        diff_row("shop.customers", '["1"]', "match"),
        diff_row("shop.customers", '["2"]', "in_flight", op="insert"),
    ]
    stamps = ("20260102T075900.1Z", "20260102T080000.1Z")  # the reconcile task ran twice (a retry)
    write_run(
        root,
        "orders_db",
        "manual__2026-01-02",
        generated_at="2026-01-02T08:00:00+00:00",
        epochs=epochs,
        diff=diff,
        validations=stamps,
    )
    write_run(
        root,
        "orders_db",
        "scheduled__2026-01-01",
        generated_at="2026-01-01T03:00:00+00:00",
        epochs=[epoch("shop.orders", 1, "baseline", "baseline", 400)],
        diff=[],
    )
    write_run(root, "orders_db", "dry1", generated_at=None, dry_run=True)
    os.utime(root / "orders_db" / "runs" / "dry1" / "summary.json", (1767225600, 1767225600))  # 2026-01-01 00:00 UTC
    (root / "orders_db" / "runs" / "not-a-run").mkdir()  # no summary.json: not listed
    (root / "unconfigured" / "runs" / "r1").mkdir(parents=True)
    return Warehouse(root, {"orders_db": "debezium-json", "empty_pipeline": "canal-json"})


def test_recent_runs_lists_a_pipelines_runs_newest_first_with_counts_per_table(hand_made):
    runs = hand_made.recent_runs("orders_db")
    assert [(r.run_id, r.verdict, r.time) for r in runs] == [
        ("manual__2026-01-02", "fail", datetime(2026, 1, 2, 8, tzinfo=UTC)),
        ("scheduled__2026-01-01", "pass", datetime(2026, 1, 1, 3, tzinfo=UTC)),
        ("dry1", "dry run", datetime(2026, 1, 1, tzinfo=UTC)),
    ]
    newest = runs[0]
    assert newest.tables == (
        TableResult(
            "shop.customers",
            "pass",
            reconciled_epochs=1,
            baseline_epochs=1,
            snapshot_rows=302,
            counts={"match": 1, "missing_in_incremental": 0, "missing_in_snapshot": 0, "mismatch": 0, "in_flight": 1},
        ),
        TableResult(
            "shop.orders",
            "fail",
            reconciled_epochs=2,
            baseline_epochs=1,
            snapshot_rows=408,
            counts={"match": 5, "missing_in_incremental": 1, "missing_in_snapshot": 0, "mismatch": 1, "in_flight": 1},
        ),
    )
    # The headline without the worker's absolute diff path (the view links to the diff instead).
    assert newest.headline == "Reconciliation FAILED: shop.orders epoch 2: 1 mismatch"
    assert (newest.quarantined, newest.quarantine_by_reason) == (3, {"not_json": 2, "not_utf8": 1})
    assert newest.files == frozenset({"manifest", "report", "metrics", "diff", "data_docs"})
    # "Data Docs" opens the newest validation result of the run; without one, the site's index.
    assert newest.data_docs_page == "validations/reconciliation_diff/__none__/20260102T080000.1Z/spark-x.html"
    assert runs[1].data_docs_page == "index.html"
    assert newest.failed_expectations == ("expect_column_values_to_be_in_set(status): 2 unexpected",)
    assert runs[1].tables == (
        TableResult("shop.orders", "baseline", 0, 1, 400, dict.fromkeys(newest.tables[0].counts, 0)),
    )
    dry = runs[2]
    assert (dry.tables, dry.files, dry.headline, dry.epochs, dry.data_docs_page) == (
        (),
        frozenset({"manifest"}),
        "",
        (),
        None,
    )
    assert [r.run_id for r in hand_made.recent_runs("orders_db", limit=1)] == ["manual__2026-01-02"]
    assert hand_made.recent_runs("empty_pipeline") == []


def test_only_configured_pipelines_and_existing_runs_are_read(hand_made):
    with pytest.raises(NotFound, match=r"^pipeline 'unconfigured' is not in the config; configured: orders_db, "):
        hand_made.run("unconfigured", "r1")
    with pytest.raises(NotFound, match=r"^pipeline orders_db has no run not-a-run$"):
        hand_made.run("orders_db", "not-a-run")
    with pytest.raises(NotFound, match=r"^'\.\.' is not a run id of this warehouse$"):
        hand_made.run("orders_db", "..")
    assert isinstance(hand_made.run("orders_db", "dry1"), RunInfo)


def test_runs_of_an_airflow_run_are_found_by_its_sanitized_id(tmp_path):
    root = tmp_path / "warehouse"
    folder = "manual__2026-11-23T08_00_00_00_00"  # cdcreplay.run_spec.safe_run_id of the Airflow run id below
    for pipeline in ("a", "b"):
        write_run(root, pipeline, folder, generated_at="2026-11-23T08:05:00+00:00", epochs=[], diff=[])
    warehouse = Warehouse(root, {"a": "canal-json", "b": "canal-json", "c": "canal-json"})
    found = warehouse.runs_of_airflow_run("manual__2026-11-23T08:00:00+00:00")
    assert [(r.pipeline, r.run_id, r.verdict) for r in found] == [("a", folder, "pass"), ("b", folder, "pass")]
    assert warehouse.runs_of_airflow_run("manual__2026-11-24T08:00:00+00:00") == []


def test_the_diff_page_reads_the_rows_of_the_chosen_statuses_and_table(hand_made):
    page = hand_made.diff("orders_db", "manual__2026-01-02")
    assert page.statuses == DEFAULT_DIFF_STATUSES
    assert [(r["table_id"], r["key"], r["status"]) for r in page.rows] == [
        ("shop.customers", '["2"]', "in_flight"),
        ("shop.orders", '["8"]', "missing_in_incremental"),
        ("shop.orders", '["7"]', "mismatch"),
        ("shop.orders", '["9"]', "in_flight"),
    ]
    assert page.rows[2] == diff_row(
        "shop.orders", '["7"]', "mismatch", [("amount", "12.50", "13.00"), ("note", None, "x")]
    )
    assert page.matching_rows == 4
    assert page.counts == {
        "match": 6,
        "missing_in_incremental": 1,
        "missing_in_snapshot": 0,
        "mismatch": 1,
        "in_flight": 2,
    }
    assert page.tables == ("shop.customers", "shop.orders")

    orders_matches = hand_made.diff("orders_db", "manual__2026-01-02", ["match"], "shop.orders", limit=2)
    assert orders_matches == DiffPage(
        statuses=("match",),
        table_id="shop.orders",
        rows=orders_matches.rows,
        matching_rows=5,
        counts={"match": 5, "missing_in_incremental": 1, "missing_in_snapshot": 0, "mismatch": 1, "in_flight": 1},
        tables=("shop.customers", "shop.orders"),
    )
    assert len(orders_matches.rows) == 2 and {r["status"] for r in orders_matches.rows} == {"match"}

    with pytest.raises(
        Refused,
        match=r"^unknown diff status 'broken'; use one of match, missing_in_incremental, missing_in_snapshot, mismatch, in_flight$",
    ):
        hand_made.diff("orders_db", "manual__2026-01-02", ["broken"])
    with pytest.raises(NotFound, match=r"^run dry1 of orders_db has no diff table \(it was not reconciled\)$"):
        hand_made.diff("orders_db", "dry1")


def test_files_are_served_only_from_inside_their_run_folder(hand_made, tmp_path):
    run = hand_made.root / "orders_db" / "runs" / "manual__2026-01-02"
    assert hand_made.run_file("orders_db", "manual__2026-01-02", "reconcile/data_docs/index.html") == Location(
        run / "reconcile" / "data_docs" / "index.html"
    )
    assert hand_made.manifest("orders_db", "manual__2026-01-02") == {"distinct_records": 120, "files": ["a.parquet"]}
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the browser", encoding="utf-8")
    (run / "reconcile" / "data_docs" / "leak.html").symlink_to(secret)  # a link that leads out of the warehouse
    (run / "reconcile" / "data_docs" / "other_run").symlink_to(run.parent / "dry1")  # ... or into another run
    refused = {
        "../dry1/summary.json": "refused '../dry1/summary.json': only files inside the run folder are served",
        "reconcile/../../../../secret.txt": "refused 'reconcile/../../../../secret.txt': only files inside the run "
        "folder are served",
        str(secret): f"refused '{secret}': only files inside the run folder are served",
        "reconcile\\..\\summary.json": "refused 'reconcile\\\\..\\\\summary.json': only files inside the run folder "
        "are served",
        "reconcile/data_docs/leak.html": "refused 'reconcile/data_docs/leak.html': it resolves outside the run folder",
        "reconcile/data_docs/other_run/summary.json": "refused 'reconcile/data_docs/other_run/summary.json': it "
        "resolves outside the run folder",
        "": "refused '': only files inside the run folder are served",
    }
    for relative, message in refused.items():
        with pytest.raises(Refused) as caught:
            hand_made.run_file("orders_db", "manual__2026-01-02", relative)
        assert str(caught.value) == message
    with pytest.raises(NotFound, match=r"^run manual__2026-01-02 of orders_db has no file reconcile/nothing.html$"):
        hand_made.run_file("orders_db", "manual__2026-01-02", "reconcile/nothing.html")
    with pytest.raises(NotFound, match=r"has no file reconcile/diff$"):  # a folder is not a file
        hand_made.run_file("orders_db", "manual__2026-01-02", "reconcile/diff")


def test_a_warehouse_the_view_cannot_read_is_named(tmp_path):
    with pytest.raises(NotFound, match=r"^the view cannot read the warehouse 'hdfs://nn/wh': the hdfs:// scheme is"):
        Warehouse("hdfs://nn/wh", {})
    assert Warehouse("s3a://bucket/wh", {}).root == Location("s3a://bucket/wh")  # read lazily: no request yet
    assert Warehouse(f"file://{tmp_path}", {}).root == tmp_path.resolve()


def test_the_pages_render_the_hand_made_runs(hand_made):
    from cdcreplay_ui import pages

    runs = hand_made.recent_runs("orders_db")
    body = pages.render(
        "index.html", pipelines=[("orders_db", "debezium-json", runs)], warehouse=hand_made.root, config_path="x"
    )
    assert '<a href="runs/orders_db/manual__2026-01-02/diff">diff rows</a>' in body
    assert "<li>not_json 2</li><li>not_utf8 1</li>" in body
    run = hand_made.run("orders_db", "manual__2026-01-02")
    sample = hand_made.diff("orders_db", "manual__2026-01-02", limit=20)
    body = pages.render("run.html", run=run, sample=sample, suite=None, root="../../../")
    assert '<b>amount</b>: <span class="mono">12.50</span> → <span class="mono">13.00</span>' in body
    assert '<b>note</b>: <span class="mono">NULL</span> → <span class="mono">x</span>' in body
    page = hand_made.diff("orders_db", "manual__2026-01-02", ["match"])
    body = pages.render("diff.html", run=run, page=page, limit=200, root="../../../")
    assert '<a class="chip" href="?status=match&amp;table=shop.orders">shop.orders</a>' in body
    # Keys and values come from the source database: whatever they hold is shown as text, never as markup.
    hostile = [diff_row("shop.orders", '["<b>k</b>"]', "mismatch", [("note", "<script>alert(1)</script>", "x")])]
    write_run(hand_made.root, "orders_db", "hostile", generated_at="2026-01-03T00:00:00+00:00", diff=hostile)
    page = hand_made.diff("orders_db", "hostile")
    body = pages.render("diff.html", run=hand_made.run("orders_db", "hostile"), page=page, limit=200, root="")
    assert '<input type="hidden" name="key" value="[&#34;&lt;b&gt;k&lt;/b&gt;&#34;]">' in body
    assert 'title="work out this key\'s story (cdcreplay explain)">[&#34;&lt;b&gt;k&lt;/b&gt;&#34;]</button>' in body
    assert 'href="explain?table=shop.orders&amp;key=%5B%22%3Cb%3Ek%3C%2Fb%3E%22%5D"' in body
    assert '<span class="mono">&lt;script&gt;alert(1)&lt;/script&gt;</span>' in body
    assert "<script>" not in body and "<b>k</b>" not in body


def test_the_view_serves_a_warehouse_on_s3_as_it_serves_the_same_warehouse_on_disk(hand_made, tmp_path, monkeypatch):
    """The hand-made warehouse uploaded to a real S3 server (s3proxy): the same runs, and through the app's routes the
    same run page, diff rows, report, manifest, Data Docs files and refusals."""
    from cdcreplay_ui import app as view
    from fastapi.testclient import TestClient
    from s3_server import running_s3proxy, s3_environment

    base = "/runs/orders_db/manual__2026-01-02"
    docs = hand_made.run("orders_db", "manual__2026-01-02").data_docs_page
    answers = {
        f"{base}/": 200,
        f"{base}/diff": 200,
        f"{base}/diff?status=match&table=shop.orders&limit=2": 200,
        f"{base}/report.md": 200,
        f"{base}/manifest.json": 200,
        f"{base}/data_docs/index.html": 200,
        f"{base}/data_docs/{docs}": 200,
        f"{base}/data_docs/..%2F..%2Fsummary.json": 400,
        f"{base}/data_docs/%2Fetc%2Fpasswd": 404,
        "/runs/orders_db/dry1/diff": 404,
    }

    def served(warehouse: Warehouse) -> dict:
        monkeypatch.setattr(view, "open_warehouse", lambda: (warehouse, "pipelines.yaml"))
        app = view.create_app()
        app.dependency_overrides[view.require_reader] = lambda: None  # Airflow's login is tested in a browser below
        with TestClient(app) as client:
            responses = {path: client.get(path) for path in answers}
        assert {path: r.status_code for path, r in responses.items()} == answers
        return {path: (r.headers["content-type"], r.text) for path, r in responses.items()}

    def runs(warehouse: Warehouse) -> dict:
        # An S3 object's time is its upload's: only a run that was not reconciled shows it (its summary's time).
        return {
            r.run_id: replace(r, time=None) if r.verdict == "dry run" else r for r in warehouse.recent_runs("orders_db")
        }

    with running_s3proxy(tmp_path / "s3", buckets=("lake",)) as endpoint:
        for name, value in s3_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        Location("s3a://lake/wh").upload_tree(hand_made.root)
        on_s3 = Warehouse("s3a://lake/wh", hand_made.pipelines)
        assert runs(on_s3) == runs(hand_made)
        assert on_s3.run("orders_db", "manual__2026-01-02").verdict == "fail"
        local = served(hand_made)
        assert served(on_s3) == local
    assert local[f"{base}/report.md"] == ("text/markdown; charset=utf-8", "# Reconciliation report\n")


# --------------------------------------------------------------------------------------------------------------------
# A key's story (cdcreplay explain) in the view: the routes over the hand-made warehouse, a stand-in for the CLI
# --------------------------------------------------------------------------------------------------------------------

RUN = "manual__2026-01-02"
EXPLAIN = f"/runs/orders_db/{RUN}/explain"
# The published pointer's tables as a run writes them: key columns and column types.
POINTER_TABLES = {
    "shop.orders": {
        "key_columns": ["order_id"],
        "columns": [["order_id", "int"], ["amount", "decimal(10,2)"], ["note", "string"]],
    },
    "shop.customers": {"key_columns": ["id"], "columns": [["id", "int"], ["name", "string"]]},
}
LOST_AMOUNT = (
    "the snapshot at position [4,100,0] (offset 10) shows amount=12.50; no archived event for this key sets "
    "amount=12.50 after the one at offset 2; the newest event before the snapshot (offset 5) sets amount=13.00"
)


def hand_made_story() -> dict:
    """The story explain tells of key ["7"] of shop.orders in the hand-made run: inserted, updated, then read by the
    resync snapshot with the update's amount lost."""
    from cdcreplay.explain.story import (
        Epoch,
        Event,
        Explanation,
        LostChange,
        NewestBefore,
        PublishedRow,
        Reconciliation,
        Source,
        StateRow,
        Winner,
    )

    def event(seq, op, position, partition, offset, after, changed, **more):
        return Event(
            seq, op, position, "t.shop.orders", partition, offset, 0, f"2026-01-02T0{seq}:00:00.000000Z", [RUN],
            after, None, changed, after, **more,
        )  # fmt: skip

    inserted = {"order_id": "7", "amount": "12.50", "note": None}
    updated = {"order_id": "7", "amount": "13.00", "note": "x"}
    read = {"order_id": "7", "amount": "12.50", "note": None}
    epoch = Epoch(RUN, 2, "reconciled", "fail", "{}", "{}")
    differences = [
        {"column": "amount", "snapshot_value": "12.50", "incremental_value": "13.00"},
        {"column": "note", "snapshot_value": None, "incremental_value": "x"},
    ]
    run_dir = f"/wh/orders_db/runs/{RUN}"
    story = Explanation(
        pipeline="orders_db",
        format="debezium-json",
        table_id="shop.orders",
        key={"order_id": "7"},
        key_text='["7"]',
        run_id=RUN,
        runs=[RUN],
        sources=[
            Source("changelog", f"{run_dir}/decoded/record_kind=changelog", "read", RUN, 3),
            Source(
                "quarantine",
                f"{run_dir}/decoded/record_kind=quarantine",
                "none",
                RUN,
                0,
                "the run quarantined no record",
            ),
        ],
        events=[
            event(1, "insert", "[4,10,0]", 1, 2, inserted, ["amount", "note", "order_id"]),
            event(2, "update", "[4,90,0]", 1, 5, updated, ["amount", "note"]),
            event(3, "snapshot", "[4,100,0]", 0, 10, read, ["amount", "note"], winner=True, epoch=epoch),
        ],
        winner=Winner(
            3,
            "live",
            "position",
            2,
            "last in compaction order: its source position [4,100,0] comes "
            "after [4,90,0] of #2 (offset 5); the source position decides",
        ),
        reconciliation=[Reconciliation(RUN, 2, "mismatch", differences, 3, 2, "update")],
        lost_changes=[
            LostChange(
                kind="column",
                run_id=RUN,
                epoch_no=2,
                proven=True,
                text=LOST_AMOUNT,
                snapshot_seq=3,
                snapshot_position="[4,100,0]",
                snapshot_offset=10,
                column="amount",
                snapshot_value="12.50",
                incremental_value="13.00",
                set_by=[1],
                newest_before=NewestBefore(2, "update", "t.shop.orders", 1, 5, "[4,90,0]", "13.00"),
            ),
        ],
        state=StateRow(1, False, "snapshot", "t.shop.orders", 0, 10, "[4,100,0]", "2026-01-02T03:00:00.000000Z", 3),
        published=PublishedRow("v2", RUN, 1, {"order_id": 7, "amount": "12.50", "note": None}, {"_op": "snapshot"}, 3),
    )
    return story.to_json()


@pytest.fixture
def story_client(hand_made, tmp_path, monkeypatch):
    """The app's routes over the hand-made warehouse, published tables named in its pointer; explain stood in for by
    ``stand_in`` (a small Python program), its starts counted in ``client.started``."""
    from cdcreplay_ui import app as view
    from cdcreplay_ui import stories
    from fastapi.testclient import TestClient

    pointer = {"run_id": RUN, "state_version": 1, "tables": POINTER_TABLES}
    (hand_made.root / "orders_db" / "_CURRENT.json").write_text(json.dumps(pointer), encoding="utf-8")
    monkeypatch.setattr(view, "open_warehouse", lambda: (hand_made, "pipelines.yaml"))
    monkeypatch.setenv("CDCREPLAY_CONFIG", "/etc/cdcreplay/pipelines.yaml")
    app = view.create_app()
    app.dependency_overrides[view.require_reader] = lambda: None
    started: list[list[str]] = []

    def stand_in(config_path, asked):
        started.append(stories.explain_arguments(config_path, asked))
        return [sys.executable, "-c", client.program]

    monkeypatch.setattr(stories, "subprocess_command", stand_in)
    with TestClient(app) as client:
        client.started, client.program, client.warehouse = started, "raise SystemExit(3)", hand_made
        yield client
    deadline = time.monotonic() + 30  # no stand-in outlives its test
    while any(name.startswith(str(hand_made.root)) for name in stories._RUNNING) and time.monotonic() < deadline:
        time.sleep(0.05)


SEVEN = {"table": "shop.orders", "key": '["7"]'}  # the story form of key ["7"] of shop.orders, as the diff sends it
SEVEN_PAGE = f"{EXPLAIN}?table=shop.orders&key=%5B%227%22%5D"


def story_files(client) -> tuple[Path, Path, Path]:
    """The cached story of key ["7"] of shop.orders, its error file and its marker."""
    from cdcreplay_ui import stories

    asked = stories.story_key(client.warehouse, "orders_db", RUN, "shop.orders", '["7"]')
    story = stories.story_file(client.warehouse, asked)
    return Path(story), Path(stories.error_file(story)), Path(stories.marker_file(story))


def ask_for(client, form: dict) -> str:
    """POST a story's form as its button does: 303 See Other to the story's page, whose path is returned."""
    response = client.post(EXPLAIN, data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    return urljoin(EXPLAIN, response.headers["location"])


def wait_for(path: Path | Location, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written within {timeout} s"
        time.sleep(0.05)


def wait_for_gone(path: Path | Location, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while path.exists():
        assert time.monotonic() < deadline, f"{path} is still there after {timeout} s"
        time.sleep(0.05)


def test_a_non_matching_key_asks_for_its_story_and_links_to_it_and_differing_columns_are_marked(hand_made):
    from cdcreplay_ui import pages

    run = hand_made.run("orders_db", RUN)
    page = hand_made.diff("orders_db", RUN)
    body = pages.render("diff.html", run=run, page=page, limit=200, root="../../../")
    # The key is the button of a form that POSTs for its story; beside it, a plain link to the story's page.
    form = (
        '<form class="story explain" method="post" action="explain"><input type="hidden" name="table" '
        'value="shop.orders"><input type="hidden" name="key" value="[&#34;7&#34;]"><button type="submit" '
        'title="work out this key\'s story (cdcreplay explain)">[&#34;7&#34;]</button></form>'
    )
    link = '<a class="story-page" href="explain?table=shop.orders&amp;key=%5B%227%22%5D"'
    assert f"{form} {link}" in body
    assert 'href="explain?table=shop.customers&amp;key=%5B%222%22%5D"' in body  # in flight
    assert 'href="explain?table=shop.orders&amp;key=%5B%228%22%5D"' in body  # missing in the changes
    assert '<li class="differs" data-column="amount"><b>amount</b>: <span class="mono">12.50</span>' in body
    assert '<li class="differs" data-column="note"><b>note</b>: <span class="mono">NULL</span>' in body
    sample = hand_made.diff("orders_db", RUN, limit=20)  # the run page's sample asks and links the same way
    body = pages.render("run.html", run=run, sample=sample, suite=None, root="../../../")
    assert f"{form} {link}" in body
    matches = hand_made.diff("orders_db", RUN, ["match"])
    body = pages.render("diff.html", run=run, page=matches, limit=200, root="../../../")
    assert "<form" not in body and 'class="story-page"' not in body and '<td class="mono">[&#34;1&#34;]</td>' in body


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        (
            "table=shop.nope&key=%5B%227%22%5D",
            404,
            "table 'shop.nope' is not published by pipeline orders_db; published tables: shop.customers, shop.orders",
        ),
        ("key=%5B%227%22%5D", 400, "name the table: ?table=<table id>&key=<key>"),
        ("table=shop.orders", 400, "name the key of shop.orders: ?table=shop.orders&key="),
        (
            "table=shop.orders&key=%5B%227%22,%228%22%5D",
            400,
            'key ["7","8"] has 2 value(s); table \'shop.orders\' is keyed by order_id',
        ),
        (
            "table=shop.orders&key=7",
            400,
            "key 7 is neither the diff's key (a JSON array of texts, one per key column: order_id) nor a JSON object of the key columns",
        ),
        (
            "table=shop.orders&key=%5B%22abc%22%5D",
            400,
            'key ["abc"]: column order_id is int: "abc" is not an integer; give e.g. 42',
        ),
        (
            "table=shop.orders&key=%7B%22id%22:7%7D",
            400,
            "id is not a key column of table 'shop.orders'; its key columns are: order_id",
        ),
    ],
)
def test_a_story_is_asked_for_a_published_table_and_a_key_that_parses(story_client, method, query, status, message):
    if method == "GET":
        response = story_client.get(f"{EXPLAIN}?{query}")
    else:  # the same fields as the form's
        response = story_client.post(EXPLAIN, data=dict(parse_qsl(query)), follow_redirects=False)
    assert (response.status_code, message in html.unescape(response.text)) == (status, True), response.text
    assert story_client.started == []  # refused before any subprocess


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_story_of_an_unknown_run_or_pipeline_is_not_found(story_client, method):
    def answer(path):
        if method == "GET":
            return story_client.get(f"{path}?table=shop.orders&key=%5B%227%22%5D")
        return story_client.post(path, data=SEVEN, follow_redirects=False)

    assert answer("/runs/orders_db/nope/explain").status_code == 404
    response = answer("/runs/elsewhere/r1/explain")
    assert response.status_code == 404 and "pipeline 'elsewhere' is not in the config" in html.unescape(response.text)
    assert story_client.started == []


def test_a_cached_story_is_shown_with_its_lost_change_and_differing_columns_marked(story_client):
    story, _, _ = story_files(story_client)
    story.parent.mkdir(parents=True)
    story.write_text(json.dumps(hand_made_story()), encoding="utf-8")
    # The diff's key text and the key as explain takes it, number or text, name the same story.
    for key in ("%5B%227%22%5D", "%7B%22order_id%22:7%7D", "%7B%22order_id%22:%227%22%7D"):
        response = story_client.get(f"{EXPLAIN}?table=shop.orders&key={key}")
        assert response.status_code == 200, response.text
    # Asked for, a cached story is not worked out again: the answer is its page.
    assert ask_for(story_client, {"table": "shop.orders", "key": '{"order_id": 7}'}) == SEVEN_PAGE
    assert story_client.started == []
    body = response.text
    assert (
        f"{story.parent.relative_to(story_client.warehouse.root)}"
        == f"orders_db/runs/{RUN}/reconcile/explain/shop.orders"
    )
    assert 'http-equiv="refresh"' not in body and "<form" not in body
    assert f'<span class="tag proven">proven lost</span> {html.escape(LOST_AMOUNT, quote=True)}' in body
    # The reconciliation names both differing columns; the events and the published row mark them where they show.
    reconciliation = body[body.index('<table class="grid reconciliation">') :]
    assert (
        '<li class="differs" data-column="amount"><b>amount</b>: <span class="mono">12.50</span> → <span class="mono">13.00</span></li>'
        in reconciliation
    )
    assert (
        '<li class="differs" data-column="note"><b>note</b>: <span class="mono">NULL</span> → <span class="mono">x</span></li>'
        in reconciliation
    )
    assert '<tr data-seq="3" class="winner">' in body and '<span class="winner-tag">WINNER</span>' in body
    assert "epoch 2 of run manual__2026-01-02 (reconciled)" in body
    assert '<li class="differs" data-column="amount"><b>amount</b>=<span class="mono">13.00</span></li>' in body
    assert '<li><b>order_id</b>=<span class="mono">7</span></li>' in body  # the published row's typed value
    assert "#3, the key is live: last in compaction order: its source position [4,100,0] comes after" in body
    assert "t.shop.orders[1]@5" in body and "2026-01-02T02:00:00.000000Z" in body
    assert f"/wh/orders_db/runs/{RUN}/decoded/record_kind=changelog" in body and "the run quarantined no record" in body
    command = (
        "cdcreplay explain --config /etc/cdcreplay/pipelines.yaml --pipeline orders_db --table shop.orders "
        f"--key &#39;{{&#34;order_id&#34;: &#34;7&#34;}}&#39; --run-id {RUN}"
    )
    assert f'<pre class="command"><code>{command}</code></pre>' in body


def test_a_page_starts_nothing_and_offers_to_work_out_a_story_not_asked_for(story_client):
    story, error, marker = story_files(story_client)
    for _ in range(2):  # a link prefetcher, a crawler, a reload: none of them starts a subprocess
        page = story_client.get(SEVEN_PAGE)
        assert page.status_code == 200, page.text
    assert story_client.started == [] and not story.exists() and not marker.exists() and not error.exists()
    assert 'data-story="not-asked"' in page.text and 'http-equiv="refresh"' not in page.text
    assert "The button runs\n<code>cdcreplay explain</code> for this key in the background" in page.text
    assert page.text.count('<pre class="command"><code>cdcreplay explain --config ') == 1
    assert (
        '<form class="story" method="post" action="explain"><input type="hidden" name="table" value="shop.orders">'
        '<input type="hidden" name="key" value="[&#34;7&#34;]"><button type="submit" '
        'title="work out this key\'s story (cdcreplay explain)">Work out this key&#39;s story</button></form>'
    ) in page.text


def test_a_story_is_worked_out_once_in_the_background_while_the_page_refreshes(story_client, tmp_path):
    story, error, marker = story_files(story_client)
    release = tmp_path / "release"
    document = json.dumps(hand_made_story())
    story_client.program = (
        f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        f"print({document!r})"
    )
    # Post/Redirect/Get: the POST starts the subprocess and sends the browser to the key's page, as the diff names it.
    assert ask_for(story_client, SEVEN) == SEVEN_PAGE
    assert json.loads(marker.read_text(encoding="utf-8"))["command"].startswith("cdcreplay explain --config ")
    first = story_client.get(SEVEN_PAGE)
    assert first.status_code == 202
    assert '<meta http-equiv="refresh" content="3">' in first.text
    assert "The story is being worked out: <code>cdcreplay explain</code> started" in first.text
    assert "<form" not in first.text
    # Asked again while it runs (the key as explain takes it), by a browser that follows the redirect: nothing starts.
    again = story_client.post(EXPLAIN, data={"table": "shop.orders", "key": '{"order_id": 7}'})
    assert (again.status_code, str(again.url)) == (202, f"http://testserver{SEVEN_PAGE}")
    assert story_client.started == [
        ["explain", "--config", "/etc/cdcreplay/pipelines.yaml", "--pipeline", "orders_db", "--table", "shop.orders",
         "--key", '{"order_id": "7"}', "--run-id", RUN],
    ]  # fmt: skip
    release.touch()
    wait_for(story)
    wait_for_gone(marker)
    done = story_client.get(SEVEN_PAGE)
    assert done.status_code == 200 and html.escape(LOST_AMOUNT, quote=True) in done.text
    assert json.loads(story.read_text(encoding="utf-8")) == hand_made_story() and not error.exists()
    assert len(story_client.started) == 1


def test_a_failed_story_shows_the_end_of_its_errors_until_asked_again(story_client):
    story, error, marker = story_files(story_client)
    story_client.program = (
        "import sys\nfor n in range(1, 51): print(f'noise {n:02}', file=sys.stderr)\n"
        "print('cdcreplay explain: the state cannot be read', file=sys.stderr)\nraise SystemExit(1)"
    )
    ask_for(story_client, SEVEN)
    wait_for(error)
    wait_for_gone(marker)
    failed = story_client.get(SEVEN_PAGE)
    assert failed.status_code == 500
    assert "<h2>The story could not be worked out</h2>" in failed.text
    assert (
        "cdcreplay explain exited 1\n\n" in failed.text and "cdcreplay explain: the state cannot be read" in failed.text
    )
    assert "noise 12" in failed.text and "noise 11" not in failed.text  # the last 40 lines of its standard error
    assert (
        '<input type="hidden" name="retry" value="1"><button type="submit" '
        'title="work out this key\'s story (cdcreplay explain)">Try again</button></form>'
    ) in failed.text
    # The failure stays until asked again on purpose: not by a GET (not even one naming retry), not by a plain POST.
    story_client.program = f"print({json.dumps(hand_made_story())!r})"
    assert story_client.get(f"{SEVEN_PAGE}&retry=1").status_code == 500
    assert ask_for(story_client, SEVEN) == SEVEN_PAGE
    assert story_client.get(SEVEN_PAGE).status_code == 500
    assert len(story_client.started) == 1 and not story.exists()
    assert ask_for(story_client, {**SEVEN, "retry": "1"}) == SEVEN_PAGE
    assert len(story_client.started) == 2
    wait_for(story)
    wait_for_gone(marker)
    assert story_client.get(SEVEN_PAGE).status_code == 200
    assert not error.exists()


def test_a_subprocess_that_cannot_start_is_shown_as_failed(story_client, monkeypatch):
    from cdcreplay_ui import stories

    def cannot_start(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "python")

    monkeypatch.setattr(stories.subprocess, "Popen", cannot_start)
    story, error, marker = story_files(story_client)
    ask_for(story_client, SEVEN)
    # Nothing runs and nothing was written: the failure, kept in memory, is what the page the POST sent to shows.
    failed = story_client.get(SEVEN_PAGE)
    assert failed.status_code == 500, failed.text
    assert "cdcreplay explain: it could not be started: [Errno 2] No such file or directory" in failed.text
    assert not story.exists() and not error.exists() and not marker.exists()


def test_a_story_on_a_warehouse_on_s3_is_worked_out_and_cached_there(story_client, hand_made, tmp_path, monkeypatch):
    """The same story routes over the hand-made warehouse uploaded to a real S3 server (s3proxy): the story, its
    marker and its error are objects beside the run's files, written and read through Location."""
    from cdcreplay_ui import app as view
    from s3_server import running_s3proxy, s3_environment

    story_client.program = f"print({json.dumps(hand_made_story())!r})"
    digest = hashlib.sha256(b'["7"]').hexdigest()
    folder = f"s3a://lake/wh/orders_db/runs/{RUN}/reconcile/explain/shop.orders"
    story, marker = Location(f"{folder}/{digest}.json"), Location(f"{folder}/{digest}.running.json")
    with running_s3proxy(tmp_path / "s3", buckets=("lake",)) as endpoint:
        for name, value in s3_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        Location("s3a://lake/wh").upload_tree(hand_made.root)  # with the published pointer the fixture wrote
        on_s3 = Warehouse("s3a://lake/wh", hand_made.pipelines)
        monkeypatch.setattr(view, "open_warehouse", lambda: (on_s3, "pipelines.yaml"))
        assert story_client.get(SEVEN_PAGE).status_code == 200 and story_client.started == []
        assert ask_for(story_client, SEVEN) == SEVEN_PAGE
        wait_for(story)
        wait_for_gone(marker)  # the view's thread is done with the server
        done = story_client.get(SEVEN_PAGE)
        assert done.status_code == 200, done.text
        assert 'data-story="ready"' in done.text and html.escape(LOST_AMOUNT, quote=True) in done.text
        assert json.loads(story.read_text()) == hand_made_story()
        assert not Location(f"{folder}/{digest}.error.json").exists()
    assert len(story_client.started) == 1
    assert not (hand_made.root / "orders_db" / "runs" / RUN / "reconcile" / "explain").exists()  # nothing on disk


# --------------------------------------------------------------------------------------------------------------------
# The real thing: runs of the real DAG, the api-server with the plugin, headless Chromium
# --------------------------------------------------------------------------------------------------------------------

EVENTS, SEED, DRIFT = 400, 20260101, 3
FAILING_PIPELINE, CLEAN_PIPELINE = "demo_debezium", "demo_canal"
# Records no decoder can read, archived in a partition of their own: the run quarantines them by reason.
BAD_RECORDS = [(b"not json at all", "not_json"), (b"{truncated", "not_json"), (b"\xff\xfe\x00", "not_utf8")]


def write_archives(archive: Path) -> list:
    """The two demo pipelines' archives; returns the changes the failing pipeline's source lost (DriftRow)."""
    from archive_helpers import Record, write_parquet

    from cdcreplay_lab.simulator import build_sample_archive

    start = datetime(2026, 1, 1, tzinfo=UTC)
    history = build_sample_archive(archive / FAILING_PIPELINE, "debezium-json", EVENTS, SEED, drift=DRIFT, start=start)
    build_sample_archive(archive / CLEAN_PIPELINE, "canal-json", EVENTS, SEED, start=start)
    bad = [Record("dbserver1.shop.orders", 9, i, value, timestamp=start) for i, (value, _) in enumerate(BAD_RECORDS)]
    write_parquet(bad, archive / FAILING_PIPELINE / "topic=dbserver1.shop.orders" / "part-bad.parquet")
    return history.drift_rows


def run_dag(env: dict[str, str], logical_date: str, conf: dict) -> tuple[int, str]:
    result = airflow(env, "dags", "test", DAG_ID, logical_date, "--conf", json.dumps(conf), timeout=900, check=False)
    return result.returncode, result.stdout + result.stderr


class ApiServer(AirflowStack):
    """`airflow api-server` alone (the runs are done), on 127.0.0.1 and a free port, in its own process group."""

    COMMANDS: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(self, env: dict[str, str], logs: Path, port: int):
        super().__init__(env, logs)
        self.port = port
        self.COMMANDS = {"api-server": ("api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1")}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_until_healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(1)
        pytest.fail(f"api-server not healthy within {timeout} s:\n{self.log_tail('api-server')}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Two real DAG runs (a full rebuild that fails reconciliation, then a dry run) and the api-server on top."""
    from airflow_helpers import list_runs

    root = tmp_path_factory.mktemp("ui")
    drift = write_archives(root / "archive")
    config = write_config(root / "pipelines.yaml", root / "warehouse", root / "archive")
    password = secrets.token_urlsafe(12)
    env = ui_env(root / "home", config, password)
    code, output = run_dag(env, "2026-01-03", {"full_rebuild": True})
    assert code != 0, "the lost changes must fail the run\n" + tail(output)
    assert f"reconciliation of {FAILING_PIPELINE}: FAIL" in output, tail(output)
    assert f"reconciliation of {CLEAN_PIPELINE}: PASS" in output, tail(output)
    code, output = run_dag(env, "2026-01-04", {"dry_run": True})
    assert code == 0, tail(output)
    runs = list_runs(env)
    server = ApiServer(env, root / "logs", free_local_port())
    server.start()
    try:
        server.wait_until_healthy()
        yield {
            "url": server.url,
            "password": password,
            "warehouse": root / "warehouse",
            "drift": drift,
            "config": config,
            "full_run": runs["2026-01-03"]["run_id"],
            "dry_run": runs["2026-01-04"]["run_id"],
        }
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(served):
    """Headless Chromium logged in to Airflow; the view first sends it to Airflow's login page."""
    with logged_in_page(served["url"], served["password"], "/cdcreplay/") as page:
        yield page


def cells(row) -> list[str]:
    return [" ".join(text.split()) for text in row.locator("td").all_inner_texts()]


def diff_cells(row) -> list[str]:
    """A diff row's cells as a person reads them: the key of a row that did not match is its button's text (its cell
    also holds the link to the story's page)."""
    shown = cells(row)
    if row.locator("form.explain").count():
        shown[2] = row.locator("form.explain button").inner_text()
    return shown


def shown_time(run_dir: Path) -> str:
    """The run's time as the page shows it: when it was reconciled, else when its summary was written (UTC)."""
    summary_file = run_dir / "summary.json"
    generated_at = (json.loads(summary_file.read_text(encoding="utf-8")).get("reconciliation") or {}).get(
        "generated_at"
    )
    when = (
        datetime.fromisoformat(generated_at)
        if generated_at
        else datetime.fromtimestamp(summary_file.stat().st_mtime, UTC)
    )
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def expected_table_rows(warehouse: Path, pipeline: str, run_id: str, mismatches: dict[str, int]) -> list[list[str]]:
    """What the page must show per table of a run: counts from the job's metrics, mismatches from the simulator."""
    summary = json.loads((warehouse / pipeline / "runs" / run_id / "summary.json").read_text(encoding="utf-8"))
    rows = []
    for table_id in sorted({m["table_id"] for m in summary["reconciliation"]["tables"]}):
        epochs = [m for m in summary["reconciliation"]["tables"] if m["table_id"] == table_id]
        reconciled = [m for m in epochs if m["kind"] == "reconciled"]
        verdict = "FAIL" if mismatches.get(table_id) else "PASS"
        baseline = len(epochs) - len(reconciled)
        epochs_text = f"{len(reconciled)} +{baseline} baseline" if baseline else str(len(reconciled))
        match, in_flight = (sum(m[s] for m in reconciled) for s in ("match", "in_flight"))
        rows.append(
            [
                f"{table_id} {verdict}",
                epochs_text,
                str(match),
                "0",
                "0",
                str(mismatches.get(table_id, 0)),
                str(in_flight),
            ]
        )
    return rows


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_the_reconciliation_page_shows_runs_per_pipeline_and_table(served, browser):
    from cdcreplay.run_spec import safe_run_id

    page = browser
    page.goto(served["url"] + "/cdcreplay/")
    assert page.locator("h1").inner_text() == "Reconciliation"
    assert [" ".join(text.split()) for text in page.locator("section h2").all_inner_texts()] == [
        f"{FAILING_PIPELINE} debezium-json",
        f"{CLEAN_PIPELINE} canal-json",
    ]
    full, dry = safe_run_id(served["full_run"]), safe_run_id(served["dry_run"])
    lost: dict[str, int] = {}
    for row in served["drift"]:
        lost[row.table_id] = lost.get(row.table_id, 0) + 1
    for pipeline, mismatches, verdict, quarantined in (
        (FAILING_PIPELINE, lost, "FAIL", "3 not_json 2 not_utf8 1"),
        (CLEAN_PIPELINE, {}, "PASS", "0"),
    ):
        section = page.locator(f"section[data-pipeline='{pipeline}']")
        # Newest first: the dry run, then the full rebuild.
        assert [r.get_attribute("data-run") for r in section.locator("tbody.run").all()] == [dry, full]
        assert cells(section.locator(f"tbody[data-run='{dry}'] tr")) == [
            dry,
            shown_time(served["warehouse"] / pipeline / "runs" / dry),
            "DRY RUN",
            "no snapshot epochs reconciled in this run",
            "0",
            "report no diff manifest",
        ]
        tables = expected_table_rows(served["warehouse"], pipeline, full, mismatches)
        first = [full, shown_time(served["warehouse"] / pipeline / "runs" / full), verdict]
        links = "report diff rows Data Docs manifest"
        rows = [cells(r) for r in section.locator(f"tbody[data-run='{full}'] tr").all()]
        assert rows == [[*first, *tables[0], quarantined, links], *tables[1:]]
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    print(f"screenshot of the reconciliation page: {SCREENSHOT}")


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_the_links_open_the_diff_rows_data_docs_manifest_and_report(served, browser):
    from cdcreplay.run_spec import safe_run_id

    page, full = browser, safe_run_id(served["full_run"])
    run_dir = served["warehouse"] / FAILING_PIPELINE / "runs" / full
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    run_links = f"section[data-pipeline='{FAILING_PIPELINE}'] tbody[data-run='{full}'] .links"

    # Diff rows: exactly the changes the simulated source lost, with both values, and the two keys in flight.
    page.goto(served["url"] + "/cdcreplay/")
    page.locator(run_links).get_by_role("link", name="diff rows").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/diff")
    shown = [diff_cells(row) for row in page.locator("table.grid tbody tr").all()]
    mismatches = sorted(row[:5] for row in shown if row[3] == "mismatch")
    assert mismatches == sorted(
        [
            d.table_id,
            "2",
            json.dumps([str(k) for k in d.key], separators=(",", ":")),
            "mismatch",
            f"{d.column}: {d.snapshot_value} → {d.true_value}",
        ]
        for d in served["drift"]
    )
    in_flight = sum(m["in_flight"] for m in summary["reconciliation"]["tables"])
    assert [row[3] for row in shown].count("in flight") == in_flight
    assert page.locator("p.shown").inner_text() == f"Showing {len(shown)} of {len(shown)} rows."
    page.locator(".chip[data-status='match']").click()
    matches = sum(m["match"] for m in summary["reconciliation"]["tables"])
    assert page.locator("p.shown").inner_text() == f"Showing {min(matches, 200)} of {matches} rows."
    assert {row[3] for row in (cells(r) for r in page.locator("table.grid tbody tr").all())} == {"match"}

    # Data Docs: GX's validation result of this diff (served from the run folder; its CDN styles are refused).
    page.goto(served["url"] + "/cdcreplay/")
    page.locator(run_links).get_by_role("link", name="Data Docs").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/data_docs/validations/**/*.html")
    docs = " ".join(page.locator("body").inner_text().split())
    assert "Expectation Suite: reconciliation_diff" in docs and "Status: Failed" in docs, docs[:2000]
    assert f"{len(served['drift'])} unexpected values found" in docs, docs[:2000]

    # The manifest, as the replay wrote it.
    page.goto(served["url"] + "/cdcreplay/")
    page.locator(run_links).get_by_role("link", name="manifest").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/manifest.json")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert json.loads(page.locator("body").inner_text()) == manifest
    assert manifest["distinct_records"] == summary["records_read"]

    # The run's report: the job's headline, the counts per table and epoch, the failed expectation.
    page.goto(served["url"] + "/cdcreplay/")
    page.locator(run_links).get_by_role("link", name="report").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/")
    headline = summary["reconciliation"]["headline"]
    assert page.locator(".headline").inner_text() == headline[: headline.index(" Diff: ")]
    epochs = [cells(row) for row in page.locator("table.epochs tbody tr").all()]
    assert epochs == [
        [
            m["table_id"],
            str(m["epoch_no"]),
            m["kind"],
            m["verdict"].upper(),
            f"{m['snapshot_rows']:,}",
            f"{m['incremental_rows']:,}",
            *(f"{m[s]:,}" for s in ("match", "missing_in_incremental", "missing_in_snapshot", "mismatch", "in_flight")),
        ]
        for m in summary["reconciliation"]["tables"]
    ]
    assert "✘ expect_column_values_to_be_in_set on status: 3 unexpected" in page.locator("body").inner_text()
    page.get_by_role("link", name="report.md").click()
    report = (run_dir / "reconcile" / "report.md").read_text(encoding="utf-8")
    assert page.locator("body").inner_text().strip() == report.strip()


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_a_mismatched_key_opens_its_story_with_the_differing_column_and_the_lost_change(served, browser):
    """From the diff rows to one lost change's story: the view runs the real `cdcreplay explain` (a JVM of its own)
    in the background, the page refreshes itself until the story is there."""
    from cdcreplay.run_spec import safe_run_id

    page, full = browser, safe_run_id(served["full_run"])
    drift = served["drift"][0]
    key = json.dumps([str(k) for k in drift.key], separators=(",", ":"))
    shown, replayed = (
        str(v).lower() if isinstance(v, bool) else str(v) for v in (drift.snapshot_value, drift.true_value)
    )

    def planted_row():
        page.goto(f"{served['url']}/cdcreplay/runs/{FAILING_PIPELINE}/{full}/diff")
        [row] = [
            r
            for r in page.locator("table.grid tbody tr").all()
            if diff_cells(r)[:4] == [drift.table_id, "2", key, "mismatch"]
        ]
        return row

    # The key is the button of a form that POSTs for its story; the answer sends the browser to the story's page.
    planted_row().locator("form.explain button").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/explain?**")
    assert page.locator("pre.command").inner_text().startswith(f"cdcreplay explain --config {served['config']} ")
    # That page says the story is being worked out and reloads itself until it is there.
    page.locator("[data-story='ready'], [data-story='failed']").first.wait_for(timeout=600_000)
    assert page.locator("[data-story='failed']").count() == 0, page.locator("[data-story='failed']").inner_text()
    pointer = json.loads((served["warehouse"] / FAILING_PIPELINE / "_CURRENT.json").read_text(encoding="utf-8"))
    key_columns = pointer["tables"][drift.table_id]["key_columns"]
    named = json.dumps(dict(zip(key_columns, json.loads(key), strict=True)))
    assert page.locator("h1").inner_text() == f"Key {named} of {drift.table_id}"

    # The differing column, highlighted, with the snapshot's value and the replayed one.
    differs = page.locator(f"table.reconciliation li.differs[data-column='{drift.column}']")
    assert differs.inner_text() == f"{drift.column}: {shown} → {replayed}"
    highlight = differs.locator("b").evaluate("element => getComputedStyle(element).backgroundColor")
    assert highlight == "rgb(255, 229, 143)"
    assert cells(page.locator("table.reconciliation tbody tr"))[:3] == [full, "2", "mismatch"]
    # The lost change, named in words: the snapshot shows a value no archived event of the key sets.
    lost = " ".join(page.locator("ul.lost li").inner_text().split())
    assert lost.startswith("proven lost the snapshot at position ")
    assert f"shows {drift.column}={shown}; no archived event for this key sets {drift.column}={shown}" in lost
    assert lost.endswith(f"sets {drift.column}={replayed}")
    assert page.locator("table.events tr.winner").count() == 1
    page.screenshot(path=str(SCREENSHOTS / "explain.png"), full_page=True)
    # Cached in the run folder: the plain link beside the key opens the story at once, as a reload of it does.
    cached = served["warehouse"] / FAILING_PIPELINE / "runs" / full / "reconcile" / "explain" / drift.table_id
    assert (cached / f"{hashlib.sha256(key.encode()).hexdigest()}.json").is_file()
    planted_row().locator("a.story-page").click()
    page.wait_for_url(f"**/cdcreplay/runs/{FAILING_PIPELINE}/{full}/explain?**")
    assert page.locator("[data-story='ready']").count() == 1
    page.reload()
    assert page.locator("[data-story='ready']").count() == 1


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_the_reconcile_task_links_to_its_runs_report(served, browser):
    from urllib.parse import quote

    page, run_id = browser, served["full_run"]
    page.goto(f"{served['url']}/dags/{DAG_ID}/runs/{quote(run_id)}/tasks/reconcile")
    page.get_by_text("Details", exact=True).click()
    link = page.get_by_role("link", name="Reconciliation report")
    # Computed on the worker when the task ended (it failed: the verdict is FAIL) and kept in XCom.
    assert link.get_attribute("href") == f"cdcreplay/dag-runs/{quote(run_id, safe='')}/"
    link.click()
    page.wait_for_url(f"{served['url']}/cdcreplay/dag-runs/**")
    rows = {row.get_attribute("data-pipeline"): cells(row) for row in page.locator("tbody tr").all()}
    assert {pipeline: row[1] for pipeline, row in rows.items()} == {FAILING_PIPELINE: "FAIL", CLEAN_PIPELINE: "PASS"}
    assert rows[CLEAN_PIPELINE][2].startswith("Reconciliation passed: 3 snapshot epoch(s) reconciled")
    page.locator(f"tr[data-pipeline='{FAILING_PIPELINE}']").get_by_role("link", name="diff rows").click()
    assert page.locator(".chip[data-status='mismatch'] b").inner_text() == str(len(served["drift"]))


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_the_browse_menu_shows_the_view_inside_the_airflow_ui(served, browser):
    page = browser
    page.goto(served["url"] + "/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Reconciliation").click()
    page.wait_for_url(f"{served['url']}/plugin/reconciliation**")
    frame = page.frame_locator("iframe[title='Reconciliation']")
    assert frame.locator("h1").inner_text() == "Reconciliation"
    assert frame.locator("section[data-pipeline]").count() == 2


@pytest.mark.airflow
@pytest.mark.timeout(2400)
def test_only_logged_in_users_get_files_and_only_from_inside_a_run_folder(served, browser):
    from cdcreplay.run_spec import safe_run_id

    full = safe_run_id(served["full_run"])
    base = f"{served['url']}/cdcreplay/runs/{FAILING_PIPELINE}/{full}"
    docs = served["warehouse"] / FAILING_PIPELINE / "runs" / full / "reconcile" / "data_docs"
    (docs / "escape.html").unlink(missing_ok=True)
    (docs / "escape.html").symlink_to(served["warehouse"] / CLEAN_PIPELINE / "runs" / full / "summary.json")
    request = browser.context.request  # the browser's session: logged in
    answers = {
        f"{base}/data_docs/..%2F..%2Fsummary.json": (400, "refused 'reconcile/data_docs/../../summary.json': only"),
        f"{base}/data_docs/%2Fetc%2Fpasswd": (
            404,
            f"run {full} of {FAILING_PIPELINE} has no file reconcile/data_docs/",
        ),
        f"{base}/data_docs/escape.html": (400, "refused 'reconcile/data_docs/escape.html': it resolves outside"),
        # Starlette decodes %2F before routing: these paths have too many segments for any route.
        f"{served['url']}/cdcreplay/runs/..%2F..%2F..%2Fetc/passwd/manifest.json": (404, "Not Found"),
        f"{served['url']}/cdcreplay/runs/{FAILING_PIPELINE}/..%2F{CLEAN_PIPELINE}/manifest.json": (404, "Not Found"),
        f"{served['url']}/cdcreplay/runs/{FAILING_PIPELINE}/..%2E/manifest.json": (404, "'...' is not a run id of"),
        f"{base}/diff?status=everything": (400, "unknown diff status 'everything'; use one of match, "),
    }
    for url, (status, message) in answers.items():
        response = request.get(url, max_redirects=0)
        text = html.unescape(response.text())
        assert (response.status, message in text) == (status, True), (url, response.status, text)
        assert '"tables"' not in response.text() and "root:" not in response.text()
    # Without Airflow's session cookie, no page and no file: the browser is sent to the login page instead.
    for path in ("/cdcreplay/", f"/cdcreplay/runs/{FAILING_PIPELINE}/{full}/manifest.json"):
        try:
            urllib.request.build_opener(NoRedirect).open(served["url"] + path, timeout=10)
            pytest.fail(f"{path} answered without a login")
        except urllib.error.HTTPError as exc:
            assert (exc.code, exc.headers["location"].split("?")[0]) == (303, "/auth/login"), (path, exc.code)
    # A story asked for without it: nothing starts, and after the login the browser is back on the page it asked
    # from (the diff page), or on the run's page when it names none of this view's pages.
    form = urlencode({"table": "shop.customers", "key": '["1"]'}).encode()
    for referer, back in ((f"{base}/diff", f"{base}/diff"), ("http://elsewhere.example/", f"{base}/")):
        asked = urllib.request.Request(f"{base}/explain", data=form, headers={"Referer": referer}, method="POST")
        try:
            urllib.request.build_opener(NoRedirect).open(asked, timeout=10)
            pytest.fail(f"a story was asked for without a login (referer {referer})")
        except urllib.error.HTTPError as exc:
            login, _, query = exc.headers["location"].partition("?")
            assert (exc.code, login, parse_qs(query)["next"]) == (303, "/auth/login", [back]), referer


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
