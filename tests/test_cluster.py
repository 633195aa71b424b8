"""Cluster submission: the nightly DAG on a real Spark standalone cluster publishes what a local run publishes.

A master and one worker (2 cores, 2 GiB) run from the pip-installed Spark on 127.0.0.1; `airflow dags test` runs the
real DAG with `spark_default` pointing at the master. The job's package reaches the executors the way it would on a
cluster: `cdcreplay package` builds the zip the DAG passes as `--py-files` (CDCREPLAY_PY_FILES). The executors run a
Python of their own (CDCREPLAY_PYSPARK_PYTHON) that has every dependency but not cdcreplay: the project's venv has
cdcreplay installed in editable mode (a .pth file naming jobs/), so an executor on that venv would import the
checkout and prove nothing. That interpreter records where each process imported cdcreplay from.

The pipeline decodes qlik-json, which runs cdcreplay's decoder in Python workers on the executors (`mapInArrow`):
it cannot run unless the executors import cdcreplay; compaction, typing and reconciliation run natively. One small
pipeline keeps the test to a few minutes: every stage of a run is a Spark job on the cluster whatever the volume.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from airflow_helpers import airflow, free_local_port, migrated_home, published_rows, tail

from cdcreplay.run_spec import build_run_spec
from cdcreplay_lab.airflow_env import DAG_ID

pytestmark = pytest.mark.airflow

VENV_BIN = Path(sys.executable).parent
PIPELINES = {"cluster_qlik": "qlik-json"}
EVENTS, SEED = 400, 20260101
PACKAGE_NAME = "cdcreplay-jobs.zip"


# --- the cluster -----------------------------------------------------------------------------------------------


class StandaloneCluster:
    """`spark-class ...Master` and `...Worker` as process groups of this test, bound to 127.0.0.1."""

    def __init__(self, root: Path):
        self.root = root
        self.work_dir = root / "work"  # the worker's application folders: app-<id>/<executor>/
        self.port, self.web_port = free_local_port(), free_local_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen] = {}
        # No PYTHONPATH from the caller: the executors must find cdcreplay only where Spark puts it.
        self.env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        self.env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(root / "logs"),
            SPARK_WORKER_DIR=str(self.work_dir),
            SPARK_DAEMON_MEMORY="512m",
            # The master's REST submission server would take the fixed port 6066; client mode does not use it.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )

    def start(self) -> None:
        spark_class = str(VENV_BIN / "spark-class")
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port)]
        self._spawn("master", [spark_class, *master, "--webui-port", str(self.web_port)])
        self._wait(lambda status: status.get("status") == "ALIVE", "the master to be ALIVE")
        worker = [
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            "127.0.0.1",
            "--port",
            str(free_local_port()),
        ]
        size = ["--cores", "2", "--memory", "2g", "--work-dir", str(self.work_dir)]
        self._spawn("worker", [spark_class, *worker, "--webui-port", str(free_local_port()), *size])
        self._wait(lambda status: status.get("aliveworkers") == 1, "the worker to register")

    def _spawn(self, name: str, command: list[str]) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.root / "logs" / f"{name}.out", "wb") as out:
            self.processes[name] = subprocess.Popen(
                command, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def status(self) -> dict:
        """The master's JSON status page (workers, running and completed applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=10) as response:
            return json.load(response)

    def _wait(self, ready, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"spark {name} exited with {process.returncode}:\n{self.log_tail(name)}")
            with contextlib.suppress(OSError, ValueError):
                if ready(self.status()):
                    return
            time.sleep(1)
        pytest.fail(f"timed out waiting for {what}:\n{self.log_tail('master')}\n{self.log_tail('worker')}")

    def log_tail(self, name: str) -> str:
        path = self.root / "logs" / f"{name}.out"
        return tail(path.read_text(errors="replace"), 40) if path.exists() else "(no log)"

    def stop(self) -> None:
        """SIGTERM the worker's and the master's process groups (executors included), SIGKILL what remains."""
        for name in ("worker", "master"):
            process = self.processes.get(name)
            if process and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    spark_cluster = StandaloneCluster(tmp_path_factory.mktemp("spark_cluster"))
    try:
        spark_cluster.start()
        yield spark_cluster
    finally:
        spark_cluster.stop()


# --- the executors' interpreter: every dependency, no cdcreplay, and a record of where cdcreplay came from ---------

SITECUSTOMIZE = """
# Test instrument: record where each process of this interpreter imported the package cdcreplay from.
import json, os, sys
from importlib.machinery import PathFinder


class _RecordOrigin:
    def find_spec(self, name, path=None, target=None):
        if name != "cdcreplay":
            return None
        spec = PathFinder.find_spec(name, path)
        with open({trace!r}, "a", encoding="utf-8") as trace:
            origin = spec.origin if spec else None
            trace.write(json.dumps({{"pid": os.getpid(), "cwd": os.getcwd(), "origin": origin}}) + "\\n")
        return spec


sys.meta_path.insert(0, _RecordOrigin())
"""


def executor_python(root: Path, trace: Path) -> Path:
    """A venv whose site-packages names the project venv's site-packages in a .pth file.

    Python adds a directory named in a .pth file to sys.path but does not read the .pth files inside it, so the
    editable install's entry (the checkout's jobs/ folder) never reaches sys.path: this interpreter has pyspark,
    pandas, pyarrow, fastavro, ... and no cdcreplay, like the Spark image of docker-compose.yml.
    """
    import sysconfig

    venv = root / "executor-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_packages = Path(sysconfig.get_paths()["purelib"])
    (own_site,) = (venv / "lib").glob("python3*/site-packages")
    (own_site / "project-dependencies.pth").write_text(f"{site_packages}\n", encoding="utf-8")
    (own_site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(trace=str(trace)), encoding="utf-8")
    return venv / "bin" / "python"


# --- the archive, the config, and the two runs --------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> tuple[Path, dict]:
    from cdcreplay_lab.simulator import build_sample_archive

    root = tmp_path_factory.mktemp("cluster_archive")
    settings = {}
    for name, fmt in PIPELINES.items():
        history = build_sample_archive(root / name, fmt, events=EVENTS, seed=SEED)
        settings[name] = history.pipeline_settings or {}
    return root, settings


def write_config(path: Path, warehouse: Path, archive: tuple[Path, dict]) -> Path:
    root, settings = archive
    document = {
        "warehouse": str(warehouse),
        "pipelines": [
            {"name": name, "format": fmt, "archive": {"path": str(root / name), "layout": "parquet"}, **settings[name]}
            for name, fmt in PIPELINES.items()
        ],
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def local_run(spark, archive, tmp_path_factory) -> Path:
    """The same jobs (replay, then reconcile) on the suite's local SparkSession: the reference result."""
    from cdcreplay.config import load_config
    from cdcreplay.entrypoints import reconcile_pipelines
    from cdcreplay.pipeline import run

    root = tmp_path_factory.mktemp("local_run")
    config = load_config(write_config(root / "pipelines.yaml", root / "warehouse", archive))
    spec = build_run_spec(config, run_id="local", full_rebuild=True)
    run(spark, config, spec)
    reconcile_pipelines(spark, config, spec)
    return root / "warehouse"


@pytest.fixture(scope="module")
def cluster_run(cluster, archive, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cluster_run")
    package = root / "dist" / PACKAGE_NAME
    built = subprocess.run(
        [str(VENV_BIN / "cdcreplay"), "package", "--out", str(package)], capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stderr
    trace = root / "imports.jsonl"
    python = executor_python(root, trace)
    config = write_config(root / "pipelines.yaml", root / "warehouse", archive)
    env = migrated_home(
        root / "home",
        config,
        AIRFLOW_CONN_SPARK_DEFAULT=f"spark://127.0.0.1:{cluster.port}",
        CDCREPLAY_PY_FILES=str(package),
        CDCREPLAY_PYSPARK_PYTHON=str(python),
    )
    env.pop("PYTHONPATH", None)
    began = time.monotonic()
    result = airflow(env, "dags", "test", DAG_ID, "2026-01-05", "--conf", '{"full_rebuild": true}', timeout=1500)
    print(f"airflow dags test on the cluster took {time.monotonic() - began:.1f} s")
    return {
        "warehouse": root / "warehouse",
        "output": result.stdout + result.stderr,
        "python": python,
        "trace": trace,
        "package": package,
    }


# --- what is compared -------------------------------------------------------------------------------------------


def only_run(warehouse: Path, pipeline: str) -> Path:
    (run_dir,) = (warehouse / pipeline / "runs").iterdir()
    return run_dir


def parquet_rows(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return sorted(json.dumps(row, sort_keys=True, default=str) for row in pq.read_table(path).to_pylist())


def reconciliation(warehouse: Path) -> dict[str, dict]:
    """Per pipeline: verdict, per-epoch metrics, failed expectations and the whole diff table (paths left out)."""
    results = {}
    for pipeline in PIPELINES:
        run_dir = only_run(warehouse, pipeline)
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["reconciliation"]
        results[pipeline] = {
            "verdict": summary["verdict"],
            "headline": summary["headline"].split(" Diff: ")[0],
            "tables": summary["tables"],
            "failed_expectations": summary["failed_expectations"],
            "diff": parquet_rows(run_dir / "reconcile" / "diff"),
        }
    return results


# --- the tests --------------------------------------------------------------------------------------------------


@pytest.mark.timeout(2400)
def test_the_dag_on_a_standalone_cluster_publishes_what_the_local_run_publishes(cluster_run, local_run):
    cluster_tables = published_rows(cluster_run["warehouse"], PIPELINES)
    local_tables = published_rows(local_run, PIPELINES)
    assert cluster_tables.keys() == local_tables.keys()
    assert sum(map(len, local_tables.values())) > 0, "the local run published only empty tables"
    for table in local_tables:
        assert cluster_tables[table] == local_tables[table], f"{table}: the cluster run published other rows"

    cluster_verdicts, local_verdicts = reconciliation(cluster_run["warehouse"]), reconciliation(local_run)
    assert cluster_verdicts == local_verdicts
    assert {p: r["verdict"] for p, r in cluster_verdicts.items()} == {p: "pass" for p in PIPELINES}


@pytest.mark.timeout(2400)
def test_both_jobs_ran_as_applications_of_the_master(cluster_run, cluster):
    status = cluster.status()
    assert status["activeapps"] == []
    finished = {app["name"]: app for app in status["completedapps"]}
    run_id = only_run(cluster_run["warehouse"], "cluster_qlik").name  # the jobs name their Spark application by it
    assert sorted(finished) == [f"cdcreplay-reconcile-{run_id}", f"cdcreplay-replay-{run_id}"], finished
    for name, app in finished.items():
        assert app["state"] == "FINISHED", (name, app)
        # The worker fetched the job's package into each executor's folder of the application.
        shipped = sorted(
            p.relative_to(cluster.work_dir) for p in (cluster.work_dir / app["id"]).glob(f"*/{PACKAGE_NAME}")
        )
        assert shipped, f"{name}: no {PACKAGE_NAME} under {cluster.work_dir / app['id']}"
    assert f"--master spark://127.0.0.1:{cluster.port}" in cluster_run["output"]
    assert f"--py-files {cluster_run['package']}" in cluster_run["output"]


@pytest.mark.timeout(2400)
def test_the_executors_imported_cdcreplay_from_the_shipped_package(cluster_run, cluster):
    # Without the package, the executors' interpreter has the dependencies but not cdcreplay.
    probe = [str(cluster_run["python"]), "-c"]
    deps = subprocess.run(
        [*probe, "import pyspark, pandas, pyarrow, fastavro, yaml"], env=cluster.env, cwd=cluster.root, timeout=120
    )
    assert deps.returncode == 0
    bare = subprocess.run(
        [*probe, "import cdcreplay"], env=cluster.env, cwd=cluster.root, capture_output=True, text=True, timeout=120
    )
    assert bare.returncode == 1
    assert bare.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'cdcreplay'"

    replay = next(app for app in cluster.status()["completedapps"] if app["name"].startswith("cdcreplay-replay-"))
    app_dir = cluster.work_dir / replay["id"]
    imports = [json.loads(line) for line in cluster_run["trace"].read_text(encoding="utf-8").splitlines()]
    in_replay = [i for i in imports if Path(i["cwd"]).parent == app_dir]
    assert in_replay, f"no Python worker of {replay['id']} imported cdcreplay (qlik-json decodes there): {imports}"
    for record in imports:
        if record["cwd"] == str(cluster.root):  # the bare probe above, which found none
            assert record["origin"] is None, record
            continue
        origin = (Path(record["cwd"]) / record["origin"]).resolve()
        executor_dir = Path(record["cwd"]).resolve()
        assert executor_dir.parent.parent == cluster.work_dir.resolve(), record
        assert origin == executor_dir / PACKAGE_NAME / "cdcreplay" / "__init__.py", record


@pytest.mark.timeout(2400)
def test_the_task_log_shows_the_stages_of_the_cluster_run(cluster_run):
    output = cluster_run["output"]
    for pipeline in PIPELINES:
        for step, stage in enumerate(("read", "decode", "compact", "type", "audit", "publish"), start=1):
            assert f"progress {pipeline} [{step}/6] {stage}: done in " in output, f"{pipeline} {stage}"
