"""What the tests that run real Airflow share: the embedded Airflow home the quick start uses, the `airflow` CLI
with a timeout that kills its process group, a scheduler stack (api-server, scheduler, dag-processor) on 127.0.0.1,
and readers of what a run published.

Everything listens on 127.0.0.1 and Spark runs as `local[*]` through the `spark_default` connection. The commands
and environment here are the ones the quickstart uses (`cdcreplay_lab.airflow_env.embedded_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from cdcreplay_lab.airflow_env import DAG_ID, embedded_env

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
AIRFLOW = str(VENV_BIN / "airflow")
PIPELINES = {"demo_debezium": "debezium-json", "demo_canal": "canal-json"}
# A two-day history: the backfill test replays it as two nightly runs.
EVENTS, SEED, HISTORY_START, HISTORY_DAYS = 400, 20260101, datetime(2026, 1, 1, tzinfo=UTC), 2


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
        pytest.fail(f"airflow {' '.join(args)} did not finish within {timeout} s:\n{tail(stdout + stderr)}")
    if check and process.returncode != 0:
        pytest.fail(f"airflow {' '.join(args)} exited {process.returncode}:\n{tail(stdout + stderr)}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def tail(text: str, lines: int = 80) -> str:
    return "\n".join(text.splitlines()[-lines:])


def migrated_home(path: Path, config: Path, **extra: str) -> dict[str, str]:
    path.mkdir(parents=True, exist_ok=True)
    env = embedded_env(path, config, **extra)
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


def task_states(env: dict[str, str], logical_date: str) -> dict[str, str]:
    output = airflow(env, "tasks", "states-for-dag-run", DAG_ID, logical_date, "-o", "json").stdout
    documents = [line for line in output.splitlines() if line.startswith("[")]
    return {ti["task_id"]: ti["state"] for ti in json.loads(documents[-1])}


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
                pytest.fail(f"airflow {name} exited with {process.returncode}:\n{self.logtail(name)}")

    def wait_for_port(self, port: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(1)
        pytest.fail(f"api-server did not listen on 127.0.0.1:{port} within {timeout} s:\n{self.logtail('api-server')}")

    def logtail(self, name: str, lines: int = 60) -> str:
        path = self.logs / f"{name}.log"
        return tail(path.read_text(errors="replace"), lines) if path.exists() else "(no log)"

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
                pytest.fail(f"run {run['run_id']} failed:\n{stack.logtail('scheduler')}")
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
    pytest.fail(f"runs {dates} not successful within {timeout} s; last seen: {runs}\n{stack.logtail('scheduler')}")


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
            pytest.fail(f"airflow {' '.join(command)} exited {result.returncode}:\n{tail(output)}")
        time.sleep(10)
