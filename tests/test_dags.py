"""DAG integrity (every file under dags/), the Params form's JSON schema, and the validate_run task's messages.

Parsing happens in a subprocess per DAG file so that "nothing heavy is imported and nothing is read at parse time"
is checked on a clean interpreter. The in-process checks import Airflow with a throwaway AIRFLOW_HOME (importing
Airflow without one creates ~/airflow).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
DAG_FILES = sorted(DAGS.glob("*.py"))
HEAVY_MODULES = ("pyspark", "cdcreplay", "great_expectations", "pandas")
# What a DAG file may import of the product when it is parsed: its shared names, which import nothing.
PARSE_TIME_PRODUCT_MODULES = ("cdcreplay", "cdcreplay.contracts", "cdcreplay.jvm")

# Runs in a fresh interpreter: parse one DAG file with the DagBag and describe what it holds.
PARSE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from airflow.models import DagBag  # lazily resolves to airflow.dag_processing.dagbag.DagBag in 3.x
    import airflow.providers.apache.spark.operators.spark_submit  # warm imports: only the DAG file is audited

    dag_file = sys.argv[1]
    already = set(sys.modules)
    opened = []
    sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
    bag = DagBag(dag_folder=dag_file)
    trusted = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    report = {
        "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
        "new_modules": sorted(m for m in set(sys.modules) - already),
        "opened": sorted(
            {p for p in opened if p != dag_file and not p.startswith(trusted) and not p.endswith((".py", ".pyc"))}
        ),
        "dags": {
            dag_id: {
                "tags": sorted(dag.tags),
                "schedule": str(dag.timetable),
                "catchup": dag.catchup,
                "max_active_runs": dag.max_active_runs,
                "tasks": {task.task_id: {"retries": task.retries} for task in dag.tasks},
                "params": {
                    name: {"description": param.description, "title": param.schema.get("title")}
                    for name, param in ((name, dag.params.get_param(name)) for name in dag.params)
                },
            }
            for dag_id, dag in bag.dags.items()
        },
    }
    print("REPORT" + json.dumps(report))
    """
)


def airflow_test_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
    }


@pytest.fixture(scope="module", params=DAG_FILES, ids=lambda path: path.name)
def parsed(request, tmp_path_factory) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PARSE_SCRIPT, str(request.param)],
        env=airflow_test_env(tmp_path_factory.mktemp("airflow_home")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT")]
    assert result.returncode == 0 and lines, f"parsing {request.param} failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(lines[-1].removeprefix("REPORT"))


def test_there_are_dag_files():
    assert DAG_FILES, f"no DAG files under {DAGS}"


def test_dag_file_imports_without_errors(parsed):
    assert parsed["import_errors"] == {}
    assert parsed["dags"], "the file defines no DAG"


def test_dag_file_is_thin(parsed):
    heavy = [
        m for m in parsed["new_modules"] if m.split(".")[0] in HEAVY_MODULES and m not in PARSE_TIME_PRODUCT_MODULES
    ]
    assert heavy == [], f"parsing imported {heavy[:5]}: import them inside tasks or jobs, not at parse time"
    assert parsed["opened"] == [], f"parsing read {parsed['opened']}: read files inside tasks, not at parse time"


def test_dags_have_tags_retries_and_described_params(parsed):
    for dag_id, dag in parsed["dags"].items():
        assert dag["tags"], f"{dag_id}: add tags"
        for task_id, task in dag["tasks"].items():
            assert task["retries"] is not None, f"{dag_id}.{task_id}: retries not set"
        assert any(task["retries"] >= 1 for task in dag["tasks"].values()), f"{dag_id}: no task retries"
        for name, param in dag["params"].items():
            assert param["description"], f"{dag_id} param {name}: add a description"
            assert param["title"], f"{dag_id} param {name}: add a title"


# --- in-process checks of cdc_replay_nightly -------------------------------------------------------------------


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_home_inproc")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in airflow_test_env(home).items():
            if key.startswith("AIRFLOW"):
                patch.setenv(key, value)
        # No effect if another test imported Airflow first: it then keeps the home it was imported with.
        from airflow.models import DagBag

        bag = DagBag(dag_folder=str(DAGS / "cdc_replay_nightly.py"))
        assert bag.import_errors == {}
        return bag.dags["cdc_replay_nightly"]


def test_nightly_schedule_is_a_daily_data_interval(nightly):
    from airflow.sdk import CronDataIntervalTimetable

    assert isinstance(nightly.timetable, CronDataIntervalTimetable)
    assert nightly.timetable.expression == "0 0 * * *"
    assert nightly.catchup is False
    assert nightly.max_active_runs == 1
    assert nightly.start_date == datetime(2026, 1, 1, tzinfo=UTC)


SPARK_TASKS = ("replay", "reconcile", "archive")


def test_nightly_wiring(nightly):
    downstream = {task.task_id: sorted(task.downstream_task_ids) for task in nightly.tasks}
    assert downstream["validate_run"] == [
        "fail_run_if_a_task_failed",
        "replay",
        "skip_archive_without_copy_to",
        "skip_reconcile_on_dry_run",
    ]
    assert downstream["replay"] == ["fail_run_if_a_task_failed", "skip_reconcile_on_dry_run"]
    # The archive runs beside the replay (it keeps its own progress) and ends before the report
    assert downstream["skip_archive_without_copy_to"] == ["archive"]  # a short circuit skips what follows it
    assert downstream["archive"] == ["fail_run_if_a_task_failed", "report"]
    assert downstream["skip_reconcile_on_dry_run"] == ["fail_run_if_a_task_failed", "reconcile"]
    assert downstream["reconcile"] == ["fail_run_if_a_task_failed", "report"]
    assert downstream["report"] == ["fail_run_if_a_task_failed"]
    assert nightly.get_task("report").trigger_rule == "all_done"
    # The only leaf: it decides the run's state, so a failed reconcile fails the run even though report succeeds.
    assert [task.task_id for task in nightly.tasks if not task.downstream_task_ids] == ["fail_run_if_a_task_failed"]
    assert nightly.get_task("fail_run_if_a_task_failed").trigger_rule == "one_failed"


@pytest.mark.parametrize(
    ("task_id", "job"), [("replay", "replay.py"), ("reconcile", "reconcile.py"), ("archive", "archive.py")]
)
def test_spark_tasks_submit_the_jobs_with_the_rendered_run_spec(nightly, task_id, job):
    task = nightly.get_task(task_id)
    assert task.application == str(REPO / "jobs" / job)
    assert task._conn_id == "spark_default"
    assert task.env_vars["PYSPARK_PYTHON"]
    spec = json.dumps({"run_id": "r1", "note": "quotes ' and \" and spaces survive"})

    class FakeTaskInstance:
        def xcom_pull(self, task_ids):
            assert task_ids == "validate_run"
            return spec

    assert task.render_template(task.application_args, {"ti": FakeTaskInstance()}) == ["--run-spec", spec]


def test_spark_tasks_run_the_jvms_with_the_options_the_local_sessions_use(nightly):
    from cdcreplay.jars import jars_dir
    from cdcreplay.jvm import JVM_OPTIONS, driver_java_options

    for task_id in SPARK_TASKS:
        conf = nightly.get_task(task_id).conf
        assert conf["spark.driver.extraJavaOptions"] == driver_java_options(
            jars_dir()
        )  # the collector, the class archive
        assert conf["spark.executor.extraJavaOptions"] == JVM_OPTIONS  # executors may run where no archive is


def test_spark_tasks_submit_the_pinned_jars_set_up_fetched(nightly):
    from cdcreplay.jars import PINNED, jar_path

    for task_id in SPARK_TASKS:
        assert nightly.get_task(task_id).jars == ",".join(sorted(str(jar_path(jar)) for jar in PINNED))


# --- the Params form's JSON schema -------------------------------------------------------------------------------

GOOD_VALUES = [
    ("config", "/etc/cdcreplay/pipelines.yaml"),
    ("pipelines", []),
    ("pipelines", ["demo_debezium", "demo_canal"]),
    ("pipelines", None),  # what the trigger form sends for a list typed in and then cleared
    ("tables", None),
    ("tables", ["inventory.customers", "db.schema.t-1"]),
    ("start", None),
    ("start", ""),
    ("start", "2026-01-31"),
    ("start", "2026-01-31T06:00:00Z"),
    ("end", "2026-01-31T06:00:00.123+05:30"),
    ("offsets", None),
    ("offsets", {"shop.orders": {"0": {"start": 0, "until": 1000}, "1": {"start": 5, "until": 6}}}),
    ("dry_run", True),
    ("full_rebuild", False),
]
BAD_VALUES = [
    ("config", ""),
    ("pipelines", "demo_debezium"),
    ("pipelines", ["demo debezium"]),
    ("pipelines", ["a", "a"]),
    ("tables", ["../etc"]),
    ("start", "yesterday"),
    ("start", "2026-13-01"),
    ("end", "2026-01-31 25:00"),
    ("start", 20260131),
    ("offsets", '{"shop.orders": {"0": {"start": 0, "until": 10}}}'),
    ("offsets", {"shop.orders": {"p0": {"start": 0, "until": 10}}}),
    ("offsets", {"shop.orders": {"0": {"start": -1, "until": 10}}}),
    ("offsets", {"shop.orders": {"0": {"start": 0}}}),
    ("offsets", {"shop.orders": {"0": {"start": 0, "until": 10, "step": 1}}}),
    ("offsets", {"shop.orders": {}}),
    ("dry_run", "yes"),
    ("full_rebuild", 1),
]


@pytest.mark.parametrize(("name", "value"), GOOD_VALUES, ids=lambda v: repr(v)[:40])
def test_params_accept(nightly, name, value):
    # resolve() stores the value in the Param: work on a copy, the DAG's defaults are checked below.
    assert copy.copy(nightly.params.get_param(name)).resolve(value) == value


@pytest.mark.parametrize(("name", "value"), BAD_VALUES, ids=lambda v: repr(v)[:40])
def test_params_reject(nightly, name, value):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        copy.copy(nightly.params.get_param(name)).resolve(value)


def test_param_defaults_are_valid_and_mean_everything(nightly):
    defaults = nightly.params.validate()
    assert defaults["pipelines"] == [] and defaults["tables"] == []
    assert defaults["start"] is None and defaults["end"] is None and defaults["offsets"] is None
    assert defaults["dry_run"] is False and defaults["full_rebuild"] is False
    assert defaults["config"].endswith("pipelines.yaml")


# --- validate_run: the run spec and the messages users see ------------------------------------------------------

INTERVAL = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "pipelines.yaml"
    path.write_text(
        textwrap.dedent(
            """
            warehouse: warehouse
            pipelines:
              - name: demo_debezium
                format: debezium-json
                archive: {path: archive/debezium, layout: parquet}
              - name: demo_canal
                format: canal-json
                archive: {path: archive/canal, layout: parquet}
            """
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def validate_run(nightly, config_file):
    callable_ = nightly.get_task("validate_run").python_callable

    def run(run_id="scheduled__2026-01-01T00:00:00+00:00", interval=INTERVAL, **params):
        form = {**nightly.params.validate(), "config": str(config_file), **params}
        # The DAG run's type, as Airflow names it in the run id (scheduled__, manual__, backfill__).
        dag_run = SimpleNamespace(run_type=run_id.split("__")[0])
        result = callable_(
            params=form, run_id=run_id, data_interval_start=interval[0], data_interval_end=interval[1], dag_run=dag_run
        )
        return json.loads(result)

    return run


def test_validate_run_uses_the_data_interval_when_start_and_end_are_empty(validate_run, config_file):
    spec = validate_run()
    assert spec == {
        "config": str(config_file),
        "run_id": "scheduled__2026-01-01T00_00_00_00_00",
        "pipelines": [],
        "tables": [],
        "start": "2026-01-01T00:00:00+00:00",
        "end": "2026-01-02T00:00:00+00:00",
        "offsets": [],
        "dry_run": False,
        "full_rebuild": False,
        "resume": True,
    }


def test_only_scheduled_runs_resume_where_the_state_stopped(validate_run):
    assert validate_run()["resume"] is True
    assert validate_run(run_id="manual__2026-11-22T10:00:00+00:00")["resume"] is False
    assert validate_run(run_id="backfill__2026-01-01T00:00:00+00:00")["resume"] is False


def test_validate_run_explicit_values_win(validate_run):
    spec = validate_run(
        pipelines=["demo_canal"], tables=["shop.orders"], start="2025-12-30", end="2025-12-31T12:00:00+02:00"
    )
    assert spec["pipelines"] == ["demo_canal"] and spec["tables"] == ["shop.orders"]
    assert (spec["start"], spec["end"]) == ("2025-12-30T00:00:00+00:00", "2025-12-31T10:00:00+00:00")
    assert validate_run(start="", end="")["start"] == "2026-01-01T00:00:00+00:00"


def test_validate_run_offsets_and_full_rebuild_are_not_limited_to_the_interval(validate_run):
    spec = validate_run(offsets={"shop.orders": {"0": {"start": 0, "until": 100}}})
    assert spec["offsets"] == [{"topic": "shop.orders", "partition": 0, "start": 0, "until": 100}]
    assert spec["start"] is None and spec["end"] is None
    spec = validate_run(full_rebuild=True, dry_run=True)
    assert (spec["start"], spec["end"], spec["full_rebuild"], spec["dry_run"]) == (None, None, True, True)


def test_validate_run_without_a_data_interval_replays_everything(validate_run):
    spec = validate_run(run_id="manual__2026-11-22T10:00:00+00:00", interval=(None, None))
    assert spec["start"] is None and spec["end"] is None


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"start": "yesterday"},
            r"parameter start: 'yesterday' is not an ISO-8601 date or time; use e\.g\. 2026-01-31",
        ),
        ({"end": "2026-02-30"}, r"parameter end: '2026-02-30' is not an ISO-8601 date"),
        ({"start": "2026-01-05", "end": "2026-01-04"}, r"start .* must be before end"),
        ({"pipelines": ["nope"]}, r"parameter pipelines: 'nope' is not declared in .*; declared: demo_canal, demo_deb"),
        ({"offsets": '{"shop.orders": {"0": '}, r"parameter offsets: not valid JSON .*; e\.g\. \{\"shop\.orders\""),
        ({"offsets": {"shop.orders": {"x": {"start": 0, "until": 1}}}}, r"offsets\.shop\.orders\.x: partition must"),
        ({"offsets": {"t": {"0": {"start": 5, "until": 5}}}}, r"need whole numbers with 0 <= start < until"),
        ({"config": "/nonexistent/pipelines.yaml"}, r"config file not found; pass --config"),
    ],
    ids=[
        "bad-date",
        "bad-end",
        "reversed",
        "unknown-pipeline",
        "bad-offsets-json",
        "bad-partition",
        "empty-range",
        "no-config",
    ],
)
def test_validate_run_fails_without_retry_naming_the_parameter(validate_run, params, message):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match=message):
        validate_run(**params)


def test_validate_run_takes_a_cleared_list_field_as_everything(validate_run):
    spec = validate_run(pipelines=None, tables=None)
    assert (spec["pipelines"], spec["tables"]) == ([], [])


def test_validate_run_refuses_a_table_no_selected_pipeline_knows(validate_run, config_file):
    from airflow.sdk.exceptions import AirflowFailException

    # Nothing published and nothing declared yet: the tables are only in the archive, any name passes.
    assert validate_run(tables=["shop.nope"])["tables"] == ["shop.nope"]
    published = config_file.parent / "warehouse" / "demo_canal" / "_CURRENT.json"
    published.parent.mkdir(parents=True)
    published.write_text(json.dumps({"tables": {"shop.orders": {}, "shop.customers": {}}}), encoding="utf-8")
    config_file.write_text(
        config_file.read_text(encoding="utf-8").replace(
            "format: debezium-json\n", "format: debezium-json\n    tables: {inventory.items: {}}\n"
        ),
        encoding="utf-8",
    )
    assert validate_run(tables=["shop.orders", "inventory.items"])["tables"] == ["shop.orders", "inventory.items"]
    with pytest.raises(AirflowFailException) as refused:
        validate_run(tables=["shop.orders", "shop.nope"])
    assert str(refused.value) == (
        "parameter tables: 'shop.nope' is not a table of the selected pipelines (demo_debezium: inventory.items; "
        "demo_canal: shop.customers, shop.orders); fix the name, leave tables empty to build every table, or, for "
        f"a table new to the archive, declare it under the pipeline's `tables:` in {config_file} (`shop.nope: {{}}` "
        "is enough)"
    )
    # Only the selected pipelines count: demo_debezium does not know shop.orders.
    with pytest.raises(
        AirflowFailException, match=r"'shop\.orders' is not a table of the selected pipelines \(demo_deb"
    ):
        validate_run(pipelines=["demo_debezium"], tables=["shop.orders"])


def test_validate_run_reports_config_errors_with_file_and_field(validate_run, config_file):
    from airflow.sdk.exceptions import AirflowFailException

    config_file.write_text("warehouse: w\npipelines:\n  - name: x\n    format: avro\n    archive: {path: a}\n")
    with pytest.raises(AirflowFailException, match=r"pipelines\.0\.format: unknown format 'avro'") as error:
        validate_run()
    assert str(config_file) in str(error.value)


def test_the_archive_task_runs_only_for_kafka_pipelines_with_copy_to_and_not_on_a_dry_run(nightly, tmp_path):
    config = tmp_path / "pipelines.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            warehouse: warehouse
            pipelines:
              - name: archived
                format: debezium-json
                archive: {{layout: kafka, bootstrap_servers: [b:9092], copy_to: {tmp_path / "copy"}}}
                topics: [shop.orders]
              - name: read_only
                format: debezium-json
                archive: {{layout: kafka, bootstrap_servers: [b:9092]}}
                topics: [shop.orders]
              - name: files
                format: canal-json
                archive: {{path: archive/canal}}
            """
        ),
        encoding="utf-8",
    )
    gate = nightly.get_task("skip_archive_without_copy_to").python_callable

    def archives(**spec) -> bool:
        return gate(json.dumps({"config": str(config), "run_id": "r1", **spec}))

    assert archives() is True  # every pipeline: one of them archives
    assert archives(pipelines=["archived", "files"]) is True
    assert archives(pipelines=["read_only", "files"]) is False
    assert archives(dry_run=True) is False


def test_the_kafka_connection_reaches_the_jobs_as_client_settings_without_the_brokers(tmp_path):
    """The Airflow connection `cdcreplay_kafka` (its extra as apache-airflow-providers-apache-kafka keeps it) becomes
    the CDCREPLAY_KAFKA_* environment the DAG gives spark-submit and its Python tasks, which the job reads back as the
    same client properties; the brokers' address stays the pipelines file's."""
    from cdcreplay.kafka_source import client_settings

    extra = {
        "bootstrap.servers": "elsewhere:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="r" password="p";',
    }
    probe = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('cdc_replay_nightly', {str(DAGS / 'cdc_replay_nightly.py')!r})\n"
        "dag = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(dag)\n"
        "sys.stdout.write('\\n' + json.dumps([dag.kafka_environment(), dag.connection_environment()]))\n"
    )

    def environment_with(connection: dict | None) -> list[dict]:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AIRFLOW_HOME": str(tmp_path / "airflow")}
        if connection is not None:
            env["AIRFLOW_CONN_CDCREPLAY_KAFKA"] = json.dumps(connection)
        result = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])

    kafka, everything = environment_with({"conn_type": "kafka", "extra": extra})
    assert kafka == {
        "CDCREPLAY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "CDCREPLAY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "CDCREPLAY_KAFKA_SASL_JAAS_CONFIG": extra["sasl.jaas.config"],
    }
    assert everything == kafka  # no S3 connection defined
    assert client_settings(kafka) == {name: value for name, value in extra.items() if name != "bootstrap.servers"}
    assert environment_with(None) == [{}, {}]
