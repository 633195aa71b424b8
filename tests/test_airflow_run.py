"""Real Airflow runs of cdc_replay_nightly with `airflow dags test`, in a temp AIRFLOW_HOME: parameters refused
before any Spark work, the DAG's control flow with stand-in jobs, and a Kafka pipeline replayed and archived from a
real broker. The quick-start demo is in test_quickstart_demo.py, a backfill on a scheduler in test_backfill.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow_helpers import (
    EVENTS,
    PIPELINES,
    REPO,
    SEED,
    airflow,
    migrated_home,
    published_rows,
    tail,
    task_states,
    write_config,
)

from cdcreplay_lab.airflow_env import DAG_ID, embedded_env

pytestmark = pytest.mark.airflow


# --- (a) parameter errors: named, and before any Spark work --------------------------------------------------------


@pytest.fixture(scope="module")
def small_home(tmp_path_factory) -> tuple[dict[str, str], Path]:
    root = tmp_path_factory.mktemp("airflow_small")
    config = write_config(root / "pipelines.yaml", root / "warehouse", root / "archive")
    return migrated_home(root / "home", config), root / "warehouse"


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"dry_run": "yes"}, "Invalid input for param dry_run"),
        ({"start": "yesterday"}, "Invalid input for param start"),
        ({"offsets": {"shop.orders": {"0": {"start": 0}}}}, "Invalid input for param offsets"),
        ({"pipelines": ["nope"]}, "parameter pipelines: 'nope' is not declared in"),
        ({"start": "2026-01-05", "end": "2026-01-04"}, "parameters start/end: start 2026-01-05T00:00:00+00:00 must be"),
    ],
    ids=["form-dry_run", "form-start", "form-offsets", "validate-pipelines", "validate-range"],
)
def test_bad_parameters_fail_the_run_with_a_message_naming_them(small_home, conf, message):
    env, warehouse = small_home
    result = airflow(env, "dags", "test", DAG_ID, "2026-01-02", "--conf", json.dumps(conf), check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, tail(output)
    assert message in output, tail(output)
    assert "spark-submit" not in output, "Spark was started although the parameters were invalid"
    assert not warehouse.exists()


# --- the DAG's control flow with stand-in jobs (no dependency on the real Spark jobs) -------------------------------

# Stand-ins for jobs/replay.py and jobs/reconcile.py, run by the real spark-submit: the real DAG file is copied next
# to them, so `application` resolves to these. They note each call in jobs/calls.log as well as printing it: the tail of
# a Python application's output can be missing from the task log, because spark-submit copies it on a daemon thread
# that it does not wait for before its JVM exits (Spark's PythonRunner), and a stand-in exits at once.
STAND_IN_REPLAY = """
import json, os, sys
spec = json.loads(sys.argv[sys.argv.index("--run-spec") + 1])
line = f"stand-in replay: run {spec['run_id']} dry_run={spec['dry_run']} python={os.environ.get('PYSPARK_PYTHON')}"
print(line)
with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as calls:
    calls.write(line + "\\n")
"""
STAND_IN_RECONCILE = """
import os, sys
line = "stand-in reconcile: verdict FAIL for shop.orders (3 mismatches), diff at /nowhere/diff"
print(line)
with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as calls:
    calls.write(line + "\\n")
sys.exit(1)
"""


def stand_in_calls(env: dict[str, str]) -> str:
    """What the stand-in jobs of this Airflow home noted, one line per call."""
    calls = Path(env["AIRFLOW_HOME"]).parent / "jobs" / "calls.log"
    return calls.read_text(encoding="utf-8") if calls.exists() else ""


@pytest.fixture(scope="module")
def stand_in_home(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("stand_in_repo")
    (root / "dags").mkdir()
    (root / "jobs").mkdir()
    shutil.copy(REPO / "dags" / "cdc_replay_nightly.py", root / "dags")
    (root / "jobs" / "replay.py").write_text(STAND_IN_REPLAY, encoding="utf-8")
    (root / "jobs" / "reconcile.py").write_text(STAND_IN_RECONCILE, encoding="utf-8")
    config = write_config(root / "pipelines.yaml", root / "warehouse", root / "archive")
    env = embedded_env(root / "home", config, dags_folder=root / "dags")
    (root / "home").mkdir()
    airflow(env, "db", "migrate", timeout=180)
    return env


def test_failed_reconcile_still_reports_and_fails_the_run(stand_in_home):
    result = airflow(stand_in_home, "dags", "test", DAG_ID, "2026-02-02", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, tail(output)
    assert "stand-in reconcile: verdict FAIL for shop.orders" in stand_in_calls(stand_in_home)
    assert task_states(stand_in_home, "2026-02-02") == {
        "validate_run": "success",
        "replay": "success",
        "skip_reconcile_on_dry_run": "success",
        "reconcile": "failed",  # no retry: a "fail" verdict would only repeat
        "skip_archive_without_copy_to": "success",
        "archive": "skipped",  # no Kafka pipeline with archive.copy_to
        "report": "success",  # the summary is printed even so
        "fail_run_if_a_task_failed": "failed",  # ... and this leaf makes the run itself fail
    }


def test_dry_run_skips_reconcile_and_succeeds(stand_in_home):
    result = airflow(stand_in_home, "dags", "test", DAG_ID, "2026-02-03", "--conf", '{"dry_run": true}', check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, tail(output)
    dry_replays = [line for line in stand_in_calls(stand_in_home).splitlines() if "dry_run=True" in line]
    assert len(dry_replays) == 1 and dry_replays[0].startswith("stand-in replay"), tail(output)
    assert f"python={sys.executable}" in dry_replays[0], "the Spark job must run with the Airflow worker's Python"
    assert task_states(stand_in_home, "2026-02-03") == {
        "validate_run": "success",
        "replay": "success",
        "skip_reconcile_on_dry_run": "success",
        "reconcile": "skipped",
        "skip_archive_without_copy_to": "success",
        "archive": "skipped",
        "report": "success",
        "fail_run_if_a_task_failed": "skipped",
    }


# --- (b2) a Kafka pipeline under `airflow dags test`: replayed and archived from a real broker ----------------------


def test_the_dag_replays_a_kafka_pipeline_and_archives_its_topics(kafka, tmp_path):
    """`archive.layout: kafka` through the DAG: the client settings come from the Airflow connection cdcreplay_kafka,
    the replay reads the topics from the broker, the archive task copies them into `archive.copy_to`, and both equal
    what the simulator's own archive gives: the same published tables, and every offset archived once."""
    import yaml

    from cdcreplay.archiver import PROGRESS_FILE
    from cdcreplay_lab.kafka_broker import produce
    from cdcreplay_lab.simulator.archive_writer import write_archive
    from cdcreplay_lab.simulator.encode_debezium import encode_debezium_json
    from cdcreplay_lab.simulator.history import simulate

    # Topics of their own on the suite's broker (server name "dagrun"), in two partitions each.
    history = simulate(seed=SEED, events=EVENTS)
    records = list(encode_debezium_json(history, schemas=False, server="dagrun", partitions=2))
    write_archive(records, tmp_path / "archive")
    produce(kafka, records)
    topics = sorted({r.topic for r in records})
    document = {
        "warehouse": str(tmp_path / "warehouse"),
        "pipelines": [
            {
                "name": "from_kafka",
                "format": "debezium-json",
                "archive": {"layout": "kafka", "bootstrap_servers": [kafka], "copy_to": str(tmp_path / "copy")},
                "topics": topics,
            },
            {"name": "from_archive", "format": "debezium-json", "archive": {"path": str(tmp_path / "archive")}},
        ],
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    # A setting that changes nothing on this plaintext broker, but must reach the jobs' Kafka clients.
    connection = {"conn_type": "kafka", "extra": {"client.dns.lookup": "use_all_dns_ips"}}
    env = migrated_home(tmp_path / "home", config, AIRFLOW_CONN_CDCREPLAY_KAFKA=json.dumps(connection))

    result = airflow(env, "dags", "test", DAG_ID, "2026-03-01", "--conf", '{"full_rebuild": true}', timeout=600)
    assert "archived" in result.stdout + result.stderr
    assert task_states(env, "2026-03-01") == {
        "validate_run": "success",
        "replay": "success",
        "skip_reconcile_on_dry_run": "success",
        "reconcile": "success",
        "skip_archive_without_copy_to": "success",
        "archive": "success",
        "report": "success",
        "fail_run_if_a_task_failed": "skipped",
    }
    published = published_rows(tmp_path / "warehouse", ["from_kafka", "from_archive"])
    assert set(published) == {f"{name}/{table}" for name in ("from_kafka", "from_archive") for table in history.tables}
    for table_id in history.tables:
        assert published[f"from_kafka/{table_id}"] == published[f"from_archive/{table_id}"], table_id
        assert len(published[f"from_kafka/{table_id}"]) == len(history.final_state(table_id)), table_id
    (manifest,) = (tmp_path / "warehouse" / "from_kafka" / "runs").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["kafka"]["client_settings"] == ["client.dns.lookup"]

    ends = {}
    for r in records:
        ends.setdefault(r.topic, {})[str(r.partition)] = max(
            ends.get(r.topic, {}).get(str(r.partition), 0), r.offset + 1
        )
    assert json.loads((tmp_path / "copy" / PROGRESS_FILE).read_text())["read_to"] == ends
    copied = sorted(
        (row["topic"], row["partition"], row["offset"])
        for path in (tmp_path / "copy").rglob("*.parquet")
        for row in pq.read_table(path, columns=["topic", "partition", "offset"]).to_pylist()
    )
    assert copied == sorted((r.topic, r.partition, r.offset) for r in records)


def test_config_helpers_round_trip(tmp_path):
    """The temp config this module writes is one the real loader accepts (cheap guard for the slow tests)."""
    from cdcreplay.config import load_config

    config = load_config(write_config(tmp_path / "p.yaml", tmp_path / "w", tmp_path / "a"))
    assert [p.name for p in config.project.pipelines] == list(PIPELINES)
    assert config.warehouse == str(tmp_path / "w")


def test_embedded_airflow_waits_a_minute_for_the_sqlite_write_lock(tmp_path):
    """Scheduler, dag-processor, api-server and a CLI backfill share one SQLite file; sqlite3's default 5 s wait for
    its write lock failed `airflow backfill create` on a loaded machine ("database is locked")."""
    from cdcreplay_lab.airflow_env import SQLITE_CONNECT_ARGS

    env = embedded_env(tmp_path, tmp_path / "pipelines.yaml")
    probe = (
        "from airflow import settings\n"
        "cursor = settings.engine.raw_connection().cursor()\n"
        "print(cursor.execute('PRAGMA busy_timeout').fetchone()[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split()[-1] == str(SQLITE_CONNECT_ARGS["timeout"] * 1000)
