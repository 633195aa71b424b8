"""Nightly CDC replay: validate the run, replay + compact + publish, reconcile snapshots, report; beside the replay,
archive the Kafka pipelines' topics that have an `archive.copy_to`.

Thin wiring. Parsing this file imports no pyspark and reads no file: the config is validated inside the
`validate_run` task, and the Spark work runs in `jobs/replay.py`, `jobs/reconcile.py` and `jobs/archive.py` through
spark-submit
(`spark_default` connection: `local[*]` embedded, the standalone master in docker-compose, YARN or Kubernetes).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperatorLink, CronDataIntervalTimetable, Param, TriggerRule, dag, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

# The product's own names (no pyspark): the form's name pattern is the rule the jobs check again.
from cdcreplay.contracts import KAFKA_PROPERTIES_NOT_FROM_ENVIRONMENT, NAME_PATTERN, kafka_variable
from cdcreplay.jvm import JVM_OPTIONS, driver_java_options

# The jobs ship in the same repository (or DAG bundle) as this file: <repo>/dags/<this file>, <repo>/jobs/*.py.
REPO = Path(__file__).resolve().parents[1]
REPLAY_JOB = str(REPO / "jobs" / "replay.py")
RECONCILE_JOB = str(REPO / "jobs" / "reconcile.py")
ARCHIVE_JOB = str(REPO / "jobs" / "archive.py")
DEFAULT_CONFIG = os.environ.get("CDCREPLAY_CONFIG") or str(REPO / "config" / "pipelines.yaml")

# Empty, a date, or a date-time with optional offset. `format: date-time` gives the UI its date-time picker, but
# jsonschema only enforces `format` when rfc3339-validator is installed, so the pattern is what rejects bad values.
# The picker (Airflow 3.3) takes a date and a time in the UI's selected time zone, the browser's unless the user
# picked another, and sends the instant in UTC with milliseconds: 2026-01-31T00:30:00.000Z. Its titles therefore
# claim no time zone; tests/test_trigger_form.py picks in UTC+05:30 and checks what arrives.
TIME_PATTERN = (
    r"^$|^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    r"([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,9})?)?(Z|[+-]([01]\d|2[0-3]):?[0-5]\d)?)?$"
)
OFFSETS_EXAMPLE = '{"shop.orders": {"0": {"start": 0, "until": 1000}}}'

# The Spark jobs run with the Python of the Airflow worker that submits them (same cdcreplay and pyspark).
# sys.executable is read when the worker loads this file to run the task; on a cluster whose executors have
# Python elsewhere, CDCREPLAY_PYSPARK_PYTHON names the executors' interpreter (docker-compose sets it), and
# CDCREPLAY_PYSPARK_DRIVER_PYTHON the driver's when it does not run here (YARN / Kubernetes cluster deploy mode).
# The driver may import cdcreplay from the shipped archive, so the GX suites are named by path, not found beside it.
SPARK_ENV = {
    "PYSPARK_DRIVER_PYTHON": os.environ.get("CDCREPLAY_PYSPARK_DRIVER_PYTHON") or sys.executable,
    "PYSPARK_PYTHON": os.environ.get("CDCREPLAY_PYSPARK_PYTHON") or sys.executable,
    "CDCREPLAY_EXPECTATIONS_DIR": os.environ.get("CDCREPLAY_EXPECTATIONS_DIR") or str(REPO / "expectations"),
}
# The job's own code for the executors: a zip of jobs/cdcreplay built by `cdcreplay package` (rebuild it when the
# code changes), passed as spark-submit --py-files. Empty: nothing is shipped, as under local[*], or when the
# executors' image has cdcreplay installed.
PY_FILES = os.environ.get("CDCREPLAY_PY_FILES") or None
# The Spark jars the jobs use beyond pyspark's own, as cdcreplay.jars pins them and set-up fetches them
# (scripts/setup.sh; the Airflow image) into CDCREPLAY_JARS_DIR (tests/test_dags.py holds the two equal):
# spark-submit's --jars puts them on the driver's and the executors' classpath. Delta Lake holds the tables and the
# state; hadoop-aws and the AWS SDK reach s3a:// archives and warehouses; spark-avro (from_avro) decodes Debezium
# and DTS Avro natively, which without it decode in Python.
JARS_DIR = Path(os.environ.get("CDCREPLAY_JARS_DIR") or REPO / ".venv" / "jars")
SPARK_JARS = ",".join(sorted(str(jar) for jar in JARS_DIR.glob("*.jar"))) or None
# Sized for a 2-core, few-GiB machine; spark-submit ignores the executor settings under local[*].
# The JVMs run the throughput garbage collector, and a driver started here maps the classes set-up archived (both
# in cdcreplay.jvm).
SPARK_CONF = {
    "spark.driver.extraJavaOptions": driver_java_options(JARS_DIR),
    "spark.executor.extraJavaOptions": JVM_OPTIONS,
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
}
RUN_SPEC_ARG = "{{ ti.xcom_pull(task_ids='validate_run') }}"

PARAMS = {
    "config": Param(
        DEFAULT_CONFIG,
        type="string",
        minLength=1,
        title="Pipelines config",
        description="Path of the pipelines YAML file (default: $CDCREPLAY_CONFIG, else <repo>/config/pipelines.yaml).",
    ),
    # "null" among the types: the trigger form marks a field required unless its type allows null, and sends null
    # for a list field typed in and then cleared -- "empty: every pipeline" must stay a value it can send.
    "pipelines": Param(
        [],
        type=["null", "array"],
        items={"type": "string", "pattern": NAME_PATTERN},
        uniqueItems=True,
        title="Pipelines",
        description="Pipeline names from the config to run, one per line. Empty: every pipeline.",
    ),
    "tables": Param(
        [],
        type=["null", "array"],
        items={"type": "string", "pattern": NAME_PATTERN},
        uniqueItems=True,
        title="Tables",
        description="Table ids (db.table or db.schema.table) to build, one per line. Empty: every table.",
    ),
    "start": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=TIME_PATTERN,
        title="Start (inclusive)",
        description="Replay records from this time. The form's picker reads it in the time zone it shows (the UI's, "
        "set at the bottom left) and sends it as UTC; as text: 2026-01-31 or 2026-01-31T06:00:00Z (UTC without an "
        "offset). Empty: the start of the run's data interval (no bound when offsets are given, on a full rebuild, "
        "or for a run without one).",
    ),
    "end": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=TIME_PATTERN,
        title="End (exclusive)",
        description="Replay records before this time (picked or typed as start is). Empty: the end of the run's "
        "data interval (same exceptions as start).",
    ),
    "offsets": Param(
        None,
        type=["null", "object"],
        additionalProperties={
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": r"^\d+$"},
            "additionalProperties": {
                "type": "object",
                "required": ["start", "until"],
                "additionalProperties": False,
                "properties": {"start": {"type": "integer", "minimum": 0}, "until": {"type": "integer", "minimum": 1}},
            },
        },
        title="Offset ranges",
        description=f"Explicit Kafka offsets per topic and partition, start inclusive, until exclusive, e.g. "
        f"{OFFSETS_EXAMPLE}. Empty: select by time.",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Only list what would be read (the manifest); decode, publish and reconcile nothing.",
    ),
    "full_rebuild": Param(
        False,
        type="boolean",
        title="Full rebuild",
        description="Rebuild the tables from the archive instead of applying the changes to the published state.",
    ),
}


class ReconciliationReportLink(BaseOperatorLink):
    """The reconcile task's button to its run in the reconciliation view (plugins/cdcreplay_ui_plugin.py).

    Airflow 3 evaluates an operator's own extra links on the worker when the task ends, failed or not, and keeps the
    URL in XCom (key `_link_ReconciliationReportLink`), where the UI reads it. The URL is relative: the UI resolves
    it against its own base URL.
    """

    name = "Reconciliation report"

    def get_link(self, operator, *, ti_key) -> str:
        return f"cdcreplay/dag-runs/{quote(ti_key.run_id, safe='')}/"


# An archive or warehouse on S3 (s3a://): the Airflow connection of this id, when it is defined, gives the
# credentials (login: access key id, password: secret access key) and, in its extra, "endpoint_url" (MinIO or another
# S3-compatible server) and "region_name". They reach the Spark jobs and the Python tasks as the AWS_* environment
# variables cdcreplay.storage reads; without the connection, the worker's own environment (or instance role) is used.
# The pipelines file never holds credentials.
S3_CONNECTION_ID = os.environ.get("CDCREPLAY_S3_CONN_ID") or "cdcreplay_s3"


def _connection(connection_id: str):
    """The Airflow connection of this id, or None when it is not defined (read when a task runs)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(connection_id)
    except AirflowNotFoundException:
        return None


def object_store_environment() -> dict[str, str]:
    """The AWS_* variables of the S3 connection, or none when it is not defined."""
    connection = _connection(S3_CONNECTION_ID)
    if connection is None:
        return {}
    extra = connection.extra_dejson
    found = {
        "AWS_ACCESS_KEY_ID": connection.login,
        "AWS_SECRET_ACCESS_KEY": connection.password,
        "AWS_ENDPOINT_URL": extra.get("endpoint_url") or connection.host,
        "AWS_REGION": extra.get("region_name"),
    }
    return {name: value for name, value in found.items() if value}


# A pipeline replayed from a Kafka cluster (archive.layout: kafka): the Airflow connection of this id, when it is
# defined (conn type "kafka" of apache-airflow-providers-apache-kafka, or any type), holds the Kafka client settings
# in its extra as that provider does, e.g. {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
# "sasl.jaas.config": "..."}. Each reaches the jobs as the CDCREPLAY_KAFKA_* variable cdcreplay.kafka_source reads.
# The brokers' addresses stay in the pipelines file: a "bootstrap.servers" in the extra is not passed on.
KAFKA_CONNECTION_ID = os.environ.get("CDCREPLAY_KAFKA_CONN_ID") or "cdcreplay_kafka"


def kafka_environment() -> dict[str, str]:
    """The CDCREPLAY_KAFKA_* variables of the Kafka connection, or none when it is not defined."""
    connection = _connection(KAFKA_CONNECTION_ID)
    if connection is None:
        return {}
    settings = connection.extra_dejson
    return {
        kafka_variable(name): str(value)
        for name, value in settings.items()
        if name not in KAFKA_PROPERTIES_NOT_FROM_ENVIRONMENT and value is not None
    }


def connection_environment() -> dict[str, str]:
    """What the jobs and the Python tasks get from Airflow's connections: S3 and Kafka settings as variables."""
    return {**object_store_environment(), **kafka_environment()}


class CdcSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of a job, with the S3 and Kafka connections' settings in its environment."""

    def execute(self, context):
        self.env_vars = {**(self.env_vars or {}), **connection_environment()}
        return super().execute(context)


class ReconcileSubmitOperator(CdcSparkSubmitOperator):
    """spark-submit of the reconcile job, with the button to the run's reconciliation report."""

    operator_extra_links = (ReconciliationReportLink(),)


def spark_job(task_id: str, application: str, operator=CdcSparkSubmitOperator, **options) -> SparkSubmitOperator:
    """One spark-submit of a job under jobs/, with the run spec that validate_run produced."""
    return operator(
        task_id=task_id,
        conn_id="spark_default",
        application=application,
        application_args=["--run-spec", RUN_SPEC_ARG],
        name=f"cdcreplay-{task_id}",
        conf=SPARK_CONF,
        driver_memory="2g",
        executor_memory="2g",
        total_executor_cores=2,
        env_vars=SPARK_ENV,
        py_files=PY_FILES,
        jars=SPARK_JARS,
        **options,
    )


@dag(
    dag_id="cdc_replay_nightly",
    description="Replay archived Kafka CDC records, compact to latest-state tables, reconcile snapshots.",
    # Nightly, and each run's data interval [00:00, next 00:00) UTC is its replay range. A data-interval timetable
    # is explicit here: in Airflow 3 a bare "@daily" means CronTriggerTimetable, whose interval is a single point.
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    # No catchup: a scheduler starting long after start_date would otherwise queue one run per missed day.
    # Date ranges are replayed on purpose with `airflow backfill create --dag-id cdc_replay_nightly
    # --from-date A --to-date B` (add `--reprocess-behavior completed` to redo days already done).
    catchup=False,
    # Two runs must never write the same pipeline's warehouse folder at once; runs of a range go one by one.
    max_active_runs=1,
    default_args={"owner": "cdcreplay", "retries": 1, "retry_delay": timedelta(minutes=1)},
    params=PARAMS,
    tags=["cdc", "replay", "spark"],
    doc_md=__doc__,
)
def cdc_replay_nightly():
    @task(retries=0)
    def validate_run(params=None, run_id=None, data_interval_start=None, data_interval_end=None, dag_run=None) -> str:
        """Turn the form and the data interval into a validated run spec (JSON) before any Spark work. A scheduled
        run resumes: a Kafka pipeline reads on from where its published state stopped (its data interval bounds only
        its first run); backfills and manual runs read their interval or range by timestamp or offset."""
        from cdcreplay.config import ConfigError, load_config
        from cdcreplay.run_spec import build_run_spec

        os.environ.update(connection_environment())
        params = dict(params or {})
        start, end = params.get("start"), params.get("end")
        # Explicit offsets and full rebuilds are not limited to one night unless the user says so.
        use_interval = not params.get("offsets") and not params.get("full_rebuild")
        if use_interval:
            start = start or (data_interval_start.isoformat() if data_interval_start else None)
            end = end or (data_interval_end.isoformat() if data_interval_end else None)
        try:
            spec = build_run_spec(
                load_config(params.get("config") or DEFAULT_CONFIG),
                run_id=run_id,
                pipelines=params.get("pipelines"),
                tables=params.get("tables"),
                start=start,
                end=end,
                offsets=params.get("offsets"),
                dry_run=params.get("dry_run", False),
                full_rebuild=params.get("full_rebuild", False),
                resume=getattr(dag_run, "run_type", None) == "scheduled",
            )
        except ConfigError as exc:
            # A bad parameter or config is not transient: fail without retrying, with the message that names the fix.
            raise AirflowFailException(str(exc)) from exc
        print(f"run spec: {spec.to_json()}")
        return spec.to_json()

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def skip_reconcile_on_dry_run(spec_json: str) -> bool:
        """A dry run only writes the manifest: there is nothing to reconcile."""
        import json

        return not json.loads(spec_json)["dry_run"]

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def skip_archive_without_copy_to(spec_json: str) -> bool:
        """Only Kafka pipelines with `archive.copy_to` are archived, and not on a dry run (it writes nothing)."""
        from cdcreplay.config import load_config
        from cdcreplay.run_spec import RunSpec, archived_pipelines

        spec = RunSpec.from_json(spec_json)
        archived = [] if spec.dry_run else archived_pipelines(load_config(spec.config), spec)
        print(f"pipelines to archive: {', '.join(p.name for p in archived) or 'none'}")
        return bool(archived)

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def report(ti=None) -> str:
        """Print the end-of-run summary, also when reconcile failed (that is when it matters most)."""
        spec_json = ti.xcom_pull(task_ids="validate_run")
        if not spec_json:
            raise AirflowSkipException("no run spec: validate_run failed, see its log for the reason")
        from cdcreplay.report import render_run

        os.environ.update(object_store_environment())  # the run's summaries may be on S3
        summary = render_run(spec_json)
        print(summary)
        return summary

    @task(trigger_rule=TriggerRule.ONE_FAILED, retries=0)
    def fail_run_if_a_task_failed() -> None:
        """The only leaf: `report` succeeds even after a failed reconcile, so this task carries the failure."""
        raise AirflowFailException("a task of this run failed; see the report task and the failed task's log")

    spec = validate_run()
    replay = spark_job(
        "replay",
        REPLAY_JOB,
        # Backfill runs are not counted against max_active_runs (a backfill has its own limit, and the nightly
        # run may start while a backfill runs): one replay at a time keeps two runs from writing one pipeline.
        max_active_tis_per_dag=1,
    )
    # Exit 1 is a "fail" verdict, which a retry would only repeat (and delay the report); rerun by clearing.
    reconcile = spark_job("reconcile", RECONCILE_JOB, operator=ReconcileSubmitOperator, retries=0)
    gate = skip_reconcile_on_dry_run(spec)
    summary = report()
    spec >> replay >> gate >> reconcile >> summary
    # The archive reads the brokers on its own (its progress is its archive's, not the published state's), so it runs
    # beside the replay; one at a time, as one archive takes one writer (cdcreplay.archiver).
    archive_gate = skip_archive_without_copy_to(spec)
    archive = spark_job("archive", ARCHIVE_JOB, max_active_tis_per_dag=1)
    spec >> archive_gate >> archive >> summary
    # Not the archive gate: a short circuit skips all its direct downstream tasks, and most runs archive nothing. A
    # failed gate still fails the run, through the archive it leaves upstream_failed.
    [spec, replay, gate, reconcile, archive, summary] >> fail_run_if_a_task_failed()


cdc_replay_nightly()
