"""The embedded Airflow setup: SQLite metadata in a folder of ours, this repository's DAGs, Spark `local[*]`.

One definition shared by the quick start (`cdcreplay demo`) and the tests that run real Airflow commands, so what
the tests prove is what a user runs. No Airflow import here: Airflow is driven through its command line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "cdc_replay_nightly"
# spark-submit --master local[*]: the connection URI percent-encodes '[', '*' and ']'.
LOCAL_SPARK_CONNECTION = "spark://local%5B%2A%5D"
# SQLite has one writer at a time, and the scheduler, dag-processor, api-server and CLI commands (a backfill) all
# write to the same file. sqlite3 gives up after waiting 5 s for the lock ("database is locked"), which a busy
# 2-core machine exceeds; wait up to a minute instead. Airflow imports these by name (see embedded_env).
SQLITE_CONNECT_ARGS = {"timeout": 60}


def venv_bin() -> Path:
    """The folder of this interpreter's scripts (airflow, spark-submit, cdcreplay)."""
    return Path(sys.executable).parent


def embedded_env(home: Path, config: Path, dags_folder: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment for `airflow ...` commands on the embedded default."""
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",  # the default 32 starts 32 LocalExecutor workers (~4 GB)
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder or REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.SQLITE_CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{__name__}.SQLITE_CONNECT_ARGS",
        "AIRFLOW_CONN_SPARK_DEFAULT": LOCAL_SPARK_CONNECTION,
        "PATH": f"{venv_bin()}{os.pathsep}{os.environ.get('PATH', '')}",  # spark-submit from the venv's pyspark
        "SPARK_LOCAL_IP": "127.0.0.1",  # keep Spark on loopback
        "CDCREPLAY_CONFIG": str(config),  # the Params form's default config
        **extra,
    }
