"""Real Airflow runs of cdc_replay_nightly: `airflow dags test` and a scheduler-side backfill, in a temp AIRFLOW_HOME.

Everything listens on 127.0.0.1 and Spark runs as `local[*]` through the `spark_default` connection. The commands
and environment here are the ones the quickstart uses (see `airflow_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pyarrow.parquet as pq
import pytest

from cdcreplay_lab.airflow_env import DAG_ID, embedded_env

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
AIRFLOW = str(VENV_BIN / "airflow")
PIPELINES = {"demo_debezium": "debezium-json", "demo_canal": "canal-json"}
# The backfill is about the scheduler's runs, not the formats: one pipeline halves each run's Spark work.
BACKFILL_PIPELINES = {"demo_canal": "canal-json"}
# A two-day history: the backfill test replays it as two nightly runs.
EVENTS, SEED, HISTORY_START, HISTORY_DAYS = 400, 20260101, datetime(2026, 1, 1, tzinfo=UTC), 2


def airflow_env(home: Path, config: Path, **extra: str) -> dict[str, str]:
    """The embedded setup the quick start uses: SQLite in `home`, this repo's dags/plugins, Spark local[*]."""
    return embedded_env(home, config, **extra)


def airflow(env: dict[str, str], *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run an airflow CLI command; on timeout kill its whole process group (spark-submit included)."""
    process = subprocess.Popen(
        [AIRFLOW, *args],
        env=env,
        cwd=env["AIRFLOW_HOME"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"airflow {' '.join(args)} did not finish within {timeout} s:\n{_tail(stdout + stderr)}")
    if check and process.returncode != 0:
        pytest.fail(f"airflow {' '.join(args)} exited {process.returncode}:\n{_tail(stdout + stderr)}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def migrated_home(path: Path, config: Path, **extra: str) -> dict[str, str]:
    path.mkdir(parents=True, exist_ok=True)
    env = airflow_env(path, config, **extra)
    airflow(env, "db", "migrate", timeout=180)
    return env


def write_config(path: Path, warehouse: Path, archive: Path, pipelines: dict[str, str] = PIPELINES) -> Path:
    pipelines = "".join(
        f"  - name: {name}\n    format: {fmt}\n    archive: {{path: {archive / name}, layout: parquet}}\n"
        for name, fmt in pipelines.items()
    )
    path.write_text(f"warehouse: {warehouse}\npipelines:\n{pipelines}", encoding="utf-8")
    return path


def archive_window(archive: Path) -> tuple[datetime, datetime]:
    """Whole UTC days covering the archived records' Kafka timestamps."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    times = ds.dataset(str(archive), format="parquet", partitioning="hive").to_table(columns=["timestamp"])["timestamp"]
    low, high = pc.min(times).as_py(), pc.max(times).as_py()
    if isinstance(low, int):  # epoch milliseconds
        low, high = (datetime.fromtimestamp(value / 1000, UTC) for value in (low, high))
    low, high = (value if value.tzinfo else value.replace(tzinfo=UTC) for value in (low, high))
    start = datetime(low.year, low.month, low.day, tzinfo=UTC)
    return start, datetime(high.year, high.month, high.day, tzinfo=UTC) + timedelta(days=1)


def published_rows(warehouse: Path, pipelines=PIPELINES) -> dict[str, list[str]]:
    """Every published table of every pipeline as sorted JSON rows (readers see exactly this, read with delta-rs)."""
    from cdcreplay.warehouse import PipelinePaths, read_current
    from cdcreplay.warehouse import published_rows as delta_rows

    tables = {}
    for pipeline in pipelines:
        paths = PipelinePaths(str(warehouse), pipeline)
        for table_id in read_current(paths)["tables"]:
            rows = delta_rows(paths, table_id).to_pylist()
            tables[f"{pipeline}/{table_id}"] = sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)
    return tables


def assert_published(warehouse: Path, pipelines=PIPELINES) -> None:
    for pipeline in pipelines:
        current_file = warehouse / pipeline / "_CURRENT.json"
        assert current_file.is_file(), f"{pipeline}: nothing published ({current_file} missing)"
        current = json.loads(current_file.read_text(encoding="utf-8"))
        assert current["tables"], f"{pipeline}: _CURRENT.json lists no tables"
        for table_id, info in current["tables"].items():
            assert (warehouse / pipeline / info["path"]).is_dir(), f"{pipeline}: table {table_id} folder missing"


@pytest.fixture(scope="module")
def sample_archive(tmp_path_factory) -> Path:
    """One simulated archive per demo pipeline (small: the point is the orchestration, not the volume)."""
    from cdcreplay_lab.simulator import build_sample_archive

    archive = tmp_path_factory.mktemp("archive")
    for name, fmt in PIPELINES.items():
        build_sample_archive(archive / name, fmt, events=EVENTS, seed=SEED, start=HISTORY_START, days=HISTORY_DAYS)
    return archive


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
    assert result.returncode != 0, _tail(output)
    assert message in output, _tail(output)
    assert "spark-submit" not in output, "Spark was started although the parameters were invalid"
    assert not warehouse.exists()


# --- the DAG's control flow with stand-in jobs (no dependency on the real Spark jobs) -------------------------------

# Stand-ins for jobs/replay.py and jobs/reconcile.py, run by the real spark-submit: the real DAG file is copied next
# to them, so `application` resolves to these.
STAND_IN_REPLAY = """
import json, os, sys
spec = json.loads(sys.argv[sys.argv.index("--run-spec") + 1])
print(f"stand-in replay: run {spec['run_id']} dry_run={spec['dry_run']} python={os.environ.get('PYSPARK_PYTHON')}")
"""
STAND_IN_RECONCILE = """
import sys
print("stand-in reconcile: verdict FAIL for shop.orders (3 mismatches), diff at /nowhere/diff")
sys.exit(1)
"""


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


def task_states(env: dict[str, str], logical_date: str) -> dict[str, str]:
    output = airflow(env, "tasks", "states-for-dag-run", DAG_ID, logical_date, "-o", "json").stdout
    documents = [line for line in output.splitlines() if line.startswith("[")]
    return {ti["task_id"]: ti["state"] for ti in json.loads(documents[-1])}


def test_failed_reconcile_still_reports_and_fails_the_run(stand_in_home):
    result = airflow(stand_in_home, "dags", "test", DAG_ID, "2026-02-02", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, _tail(output)
    assert "stand-in reconcile: verdict FAIL for shop.orders" in output
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
    assert result.returncode == 0, _tail(output)
    assert "dry_run=True" in output
    assert f"python={sys.executable}" in output, "the Spark job must run with the Airflow worker's Python"
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


# --- (b) the quick start: a full run with `airflow dags test`, checked against the simulator's truth ---------------


def run_demo(tmp_path: Path, *options: str) -> tuple[int, str]:
    """`cdcreplay demo` (what scripts/quickstart.sh runs) on a config and work folder of the test's own."""
    config = write_config(tmp_path / "pipelines.yaml", tmp_path / "warehouse", tmp_path / "archive")
    command = [str(VENV_BIN / "cdcreplay"), "demo", "--config", str(config), "--work", str(tmp_path / "work")]
    result = subprocess.run(
        [*command, "--events", str(EVENTS), *options], capture_output=True, text=True, timeout=1200, check=False
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.timeout(1500)
def test_quickstart_demo_publishes_the_true_state_and_passes_reconciliation(tmp_path):
    code, output = run_demo(tmp_path)
    assert code == 0, _tail(output, 200)
    for pipeline in PIPELINES:
        assert f"reconciliation of {pipeline}: PASS" in output
    assert output.count("EQUAL to the truth") == 3 * len(PIPELINES), output
    assert output.count("-> AS EXPECTED") == len(PIPELINES), output
    assert "everything matches the simulator's truth" in output
    assert_published(tmp_path / "warehouse")
    for pipeline in PIPELINES:
        summaries = list((tmp_path / "warehouse" / pipeline / "runs").glob("*/summary.json"))
        assert len(summaries) == 1, f"{pipeline}: expected one run summary, found {summaries}"


@pytest.mark.timeout(1500)
def test_quickstart_demo_with_lost_changes_fails_reconciliation_naming_them(tmp_path):
    code, output = run_demo(tmp_path, "--drift", "3")
    assert code == 0, _tail(output, 200)  # the demo exits 0: the FAIL verdict is what the simulator expects
    for pipeline in PIPELINES:
        assert f"reconciliation of {pipeline}: FAIL" in output
        assert "the simulator expects FAIL" in output
    assert output.count("-> AS EXPECTED") == len(PIPELINES), output
    assert output.count("EQUAL to the truth") == 3 * len(PIPELINES), output


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


# --- (c) backfill over two dates on a scheduler, then a rerun of one date ------------------------------------------


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stack_settings(port: int) -> dict[str, str]:
    """Settings for an AirflowStack whose api-server listens on 127.0.0.1:``port`` and whose scheduler runs tasks.

    LocalExecutor is Airflow 3.3's default and works on the embedded SQLite metadata (the SequentialExecutor that
    Airflow 2 required there is gone): the scheduler runs each task in a subprocess, which reports to the api-server's
    execution API rather than writing the database itself.
    """
    return {
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # Only the runs a test asks for: no "latest interval" run when the DAG is unpaused (it would add a run
        # folder and compete with the test's runs).
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
    }


class AirflowStack:
    """api-server + scheduler + dag-processor as subprocesses of this test, each in its own process group."""

    # The scheduler's log server would listen on every interface at a fixed port (8793): not needed, the task
    # logs are local files the api-server reads directly.
    COMMANDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "api-server": ("api-server",),
        "scheduler": ("scheduler", "--skip-serve-logs"),
        "dag-processor": ("dag-processor",),
    }

    def __init__(self, env: dict[str, str], logs: Path):
        self.env, self.logs = env, logs
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for name, args in self.COMMANDS.items():
            with open(self.logs / f"{name}.log", "wb") as log:
                self.processes[name] = subprocess.Popen(
                    [AIRFLOW, *args],
                    env=self.env,
                    cwd=self.env["AIRFLOW_HOME"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def assert_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                pytest.fail(f"airflow {name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def wait_for_port(self, port: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(1)
        pytest.fail(f"api-server did not listen on 127.0.0.1:{port} within {timeout} s:\n{self.log_tail('api-server')}")

    def log_tail(self, name: str, lines: int = 60) -> str:
        path = self.logs / f"{name}.log"
        return _tail(path.read_text(errors="replace"), lines) if path.exists() else "(no log)"

    def stop(self) -> None:
        """SIGTERM each process group we started, then SIGKILL what is left after a grace period."""
        for process in self.processes.values():
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            _signal_group(process.pid, signal.SIGKILL)  # also children left behind in the group (task runners)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def list_runs(env: dict[str, str]) -> dict[str, dict]:
    """Runs by logical date (YYYY-MM-DD), from the public CLI."""
    output = airflow(env, "dags", "list-runs", DAG_ID, "-o", "json", timeout=120).stdout
    documents = [line for line in output.splitlines() if line.startswith("[")]
    runs = json.loads(documents[-1]) if documents else []
    return {run["logical_date"][:10]: run for run in runs if run.get("logical_date")}


def api_runs(port: int) -> dict[str, dict]:
    """Runs by logical date (YYYY-MM-DD), from the running api-server's REST API (a CLI call per poll would start a
    whole Airflow process, seconds of CPU taken from the runs being waited for)."""
    url = f"http://127.0.0.1:{port}/api/v2/dags/{DAG_ID}/dagRuns?limit=100"
    with urllib.request.urlopen(url, timeout=30) as response:
        runs = json.load(response)["dag_runs"]
    return {run["logical_date"][:10]: {**run, "run_id": run["dag_run_id"]} for run in runs if run.get("logical_date")}


def wait_until_backfills_complete(port: int, timeout: float = 120) -> None:
    """The scheduler marks a finished backfill complete only every 30 s, and a DAG has one running backfill at most:
    wait for that here (cheap REST polls) rather than retrying `airflow backfill create` until it is accepted."""
    url = f"http://127.0.0.1:{port}/api/v2/backfills?dag_id={DAG_ID}&limit=100"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=30) as response:
            if all(backfill["completed_at"] for backfill in json.load(response)["backfills"]):
                return
        time.sleep(2)
    pytest.fail(f"a backfill of {DAG_ID} was still running after {timeout} s")


def wait_for_runs(stack: AirflowStack, port: int, dates: list[str], timeout: float, newer_than: dict | None = None):
    """Poll until the runs of `dates` succeed (and ended after `newer_than`'s end dates); fail fast on a failure."""
    deadline = time.monotonic() + timeout
    runs: dict[str, dict] = {}
    while time.monotonic() < deadline:
        stack.assert_alive()
        runs = api_runs(port)
        for date in dates:
            run = runs.get(date)
            if run and run["state"] == "failed":
                pytest.fail(f"run {run['run_id']} failed:\n{stack.log_tail('scheduler')}")
        done = [
            date
            for date in dates
            if date in runs
            and runs[date]["state"] == "success"
            and (not newer_than or (runs[date]["end_date"] or "") > (newer_than[date]["end_date"] or ""))
        ]
        if len(done) == len(dates):
            return runs
        time.sleep(3)
    pytest.fail(f"runs {dates} not successful within {timeout} s; last seen: {runs}\n{stack.log_tail('scheduler')}")


def create_backfill(env: dict[str, str], from_date: str, to_date: str, *options: str, timeout: float = 180) -> None:
    """`airflow backfill create`, one run at a time (backfill runs ignore the DAG's max_active_runs).

    A DAG has at most one running backfill, and the scheduler marks a finished one complete only every 30 s:
    a new backfill right after the previous one is retried until that happened. "database is locked" is retried
    too: `--reprocess-behavior completed` clears the old runs' task instances inside a read transaction that must
    then upgrade to a write one, and SQLite may refuse that upgrade at once (waiting could deadlock) when the
    scheduler holds the write lock. The whole backfill transaction is rolled back, so a retry starts clean.
    """
    command = ["backfill", "create", "--dag-id", DAG_ID, "--max-active-runs", "1"]
    command += ["--from-date", from_date, "--to-date", to_date, *options]
    deadline = time.monotonic() + timeout
    while True:
        result = airflow(env, *command, check=False)
        output = result.stdout + result.stderr
        if result.returncode == 0:
            return
        retryable = "AlreadyRunningBackfill" in output or "database is locked" in output
        if not retryable or time.monotonic() > deadline:
            pytest.fail(f"airflow {' '.join(command)} exited {result.returncode}:\n{_tail(output)}")
        time.sleep(10)


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

    env = airflow_env(tmp_path, tmp_path / "pipelines.yaml")
    probe = (
        "from airflow import settings\n"
        "cursor = settings.engine.raw_connection().cursor()\n"
        "print(cursor.execute('PRAGMA busy_timeout').fetchone()[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split()[-1] == str(SQLITE_CONNECT_ARGS["timeout"] * 1000)
