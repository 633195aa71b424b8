"""A backfill over two dates on a real scheduler (api-server, scheduler, dag-processor; LocalExecutor on the
embedded SQLite metadata), then a rerun of the first date: the tables it publishes do not change."""

from __future__ import annotations

import os
import secrets
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
from airflow_helpers import (
    EVENTS,
    HISTORY_DAYS,
    HISTORY_START,
    PIPELINES,
    SEED,
    AirflowStack,
    airflow,
    archive_window,
    assert_published,
    create_backfill,
    free_local_port,
    migrated_home,
    published_rows,
    stack_settings,
    wait_for_runs,
    wait_until_backfills_complete,
    write_config,
)

from cdcreplay_lab.airflow_env import DAG_ID

pytestmark = pytest.mark.airflow

# The backfill is about the scheduler's runs, not the formats: one pipeline halves each run's Spark work.
BACKFILL_PIPELINES = {"demo_canal": "canal-json"}


@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory) -> Path:
    """One simulated archive per demo pipeline (small: the point is the orchestration, not the volume)."""
    from cdcreplay_lab.simulator import build_sample_archive

    archive = tmp_path_factory.mktemp("archive")
    for name, fmt in PIPELINES.items():
        build_sample_archive(archive / name, fmt, events=EVENTS, seed=SEED, start=HISTORY_START, days=HISTORY_DAYS)
    return archive


@pytest.mark.timeout(3600)
def test_backfill_two_dates_then_rerun_gives_identical_tables(sample_archive, tmp_path):
    from cdcreplay.run_spec import safe_run_id

    day_a, _ = archive_window(sample_archive)
    day_b = day_a + timedelta(days=1)
    dates = [day_a.date().isoformat(), day_b.date().isoformat()]
    warehouse = tmp_path / "warehouse"
    config = write_config(tmp_path / "pipelines.yaml", warehouse, sample_archive, BACKFILL_PIPELINES)
    port = free_local_port()
    env = migrated_home(
        tmp_path / "home",
        config,
        **stack_settings(port),
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_urlsafe(32),
        AIRFLOW__API__SECRET_KEY=secrets.token_urlsafe(32),
        # The api-server on loopback, for this test only: its REST API answers without a login (wait_for_runs).
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
    )
    airflow(env, "dags", "reserialize")  # parse now, so the DAG exists before the dag-processor's first pass
    airflow(env, "dags", "unpause", DAG_ID)
    stack = AirflowStack(env, tmp_path / "logs")
    began = time.monotonic()
    try:
        stack.start()
        stack.wait_for_port(port)
        create_backfill(env, dates[0], dates[1])
        runs = wait_for_runs(stack, port, dates, timeout=1800)
        print(f"backfill of {dates} took {time.monotonic() - began:.1f} s")

        assert_published(warehouse, BACKFILL_PIPELINES)
        for pipeline in BACKFILL_PIPELINES:
            run_folders = sorted(p.name for p in (warehouse / pipeline / "runs").iterdir() if p.is_dir())
            assert run_folders == sorted(safe_run_id(runs[date]["run_id"]) for date in dates), pipeline
        before = published_rows(warehouse, BACKFILL_PIPELINES)
        assert any(before.values()), "the published tables are all empty: the archive window missed the events"

        # Redo day A after day B: replaying the same changes again must not change the latest state.
        rerun_began = time.monotonic()
        wait_until_backfills_complete(port)
        create_backfill(env, dates[0], dates[0], "--reprocess-behavior", "completed")
        wait_for_runs(stack, port, dates[:1], timeout=1200, newer_than=runs)
        print(f"rerun of {dates[0]} took {time.monotonic() - rerun_began:.1f} s")
        after = published_rows(warehouse, BACKFILL_PIPELINES)
        assert after.keys() == before.keys()
        for table in before:
            assert after[table] == before[table], f"{table} changed when {dates[0]} was replayed again"
    finally:
        stack.stop()
        if os.environ.get("CDCREPLAY_KEEP_AIRFLOW_LOGS"):
            shutil.copytree(tmp_path / "logs", Path(os.environ["CDCREPLAY_KEEP_AIRFLOW_LOGS"]), dirs_exist_ok=True)
