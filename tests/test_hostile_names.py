"""Hostile names and parameters: whatever reaches a file path or a command line is refused before any work starts,
with a message naming the field and the fix -- or, for table ids that come from the DATA (a source table may be
called anything), mapped to a folder name that cannot leave its folder or meet another table's.

Where each kind of name goes:
- pipeline names, the run's `pipelines`/`tables` parameters: folder names and spark-submit arguments -> refused
  unless letters, digits, '_', '-', '.' (starting with a letter or digit, at most 128);
- run ids (Airflow's, with ':' and '+'): mapped to such a name; a hand-made --run-spec with an unsafe one is refused;
- topics (config `topics`, `offsets` parameter): Kafka's own rule;
- config `tables.*` keys: any visible text (they only select the data's tables), no control characters;
- config/archive/warehouse paths: the operator's own file decides them (absolute and `..` are fine), but no control
  characters, and the config file must be YAML;
- the DAG passes the run spec to spark-submit as one argument of an argv list (no shell): shown with a real
  spark-submit of the replay job.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml
from archive_helpers import Record, write_parquet

from cdcreplay.config import ConfigError, load_config
from cdcreplay.entrypoints import EXIT_OK, replay_main
from cdcreplay.run_spec import RunSpec, build_run_spec, safe_run_id
from cdcreplay.warehouse import MAX_FOLDER_NAME, PipelinePaths, read_current, read_table, table_folder_name

REPO = Path(__file__).resolve().parents[1]
NAME_RULE = "use letters, digits, '_', '-' and '.', starting with a letter or digit, at most 128 characters"
TOPIC_RULE = "Kafka topic names use letters, digits, '.', '_' and '-', at most 249 characters"

HOSTILE_NAMES = {
    "dot-dot": "..",
    "parent": "../etc",
    "absolute": "/etc/passwd",
    "slash": "a/b",
    "nul": "a\x00b",
    "newline": "a\nb",
    "trailing-newline": "shop\n",
    "semicolon": "a;rm -rf /",
    "subshell": "$(touch pwned)",
    "backticks": "`touch pwned`",
    "pipe": "a|b",
    "ampersand": "a&b",
    "single-quote": "a'b",
    "double-quote": 'a"b',
    "space": "a b",
    "too-long": "a" * 129,
    "cyrillic-o": "sh\u043ep",
    "fullwidth": "\uff53\uff48\uff4f\uff50",
    "rtl-override": "shop\u202e",
    "leading-dash": "-rf",
    "hidden": ".hidden",
    "empty": "",
}
NAME_CASES = [pytest.param(value, id=name) for name, value in HOSTILE_NAMES.items()]


def write_config(tmp_path: Path, pipeline: dict | None = None, **top) -> Path:
    """A pipelines file (any string survives: yaml escapes NUL, newlines and the rest in double quotes)."""
    document = {
        "warehouse": str(tmp_path / "warehouse"),
        "pipelines": [{"name": "shop", "format": "canal-json", "archive": {"path": "archive"}, **(pipeline or {})}],
        **top,
    }
    path = tmp_path / "pipelines.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=False), encoding="utf-8")
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == document
    return path


def config_error(path: Path, *problems: str) -> str:
    return f"{path}: invalid pipeline config:\n" + "\n".join(f"  - {problem}" for problem in problems)


# -- pipeline names, the pipelines and tables parameters ---------------------------------------------------------------


@pytest.mark.parametrize("name", NAME_CASES)
def test_a_hostile_pipeline_name_is_refused(tmp_path, name):
    path = write_config(tmp_path, {"name": name})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == config_error(
        path, f"pipelines.0.name: {name!r} is not a safe pipeline name; {NAME_RULE} (it becomes a folder name)"
    )


@pytest.mark.parametrize("parameter", ["pipelines", "tables"])
@pytest.mark.parametrize("name", NAME_CASES)
def test_a_hostile_pipelines_or_tables_parameter_is_refused(tmp_path, parameter, name):
    config = load_config(write_config(tmp_path))
    with pytest.raises(ConfigError) as error:
        build_run_spec(config, run_id="r", **{parameter: [name]})
    assert str(error.value) == f"parameter {parameter}: {name!r} is not a valid name; {NAME_RULE}"


# -- run ids -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "folder"),
    [
        ("manual__2026-11-23T08:00:00+00:00", "manual__2026-11-23T08_00_00_00_00"),
        ("../../etc", "etc"),
        ("a/../b", "a_.._b"),
        ("$(touch pwned)", "touch_pwned"),
        ("`id`; rm -rf /", "id_rm_-rf"),
        ("a\x00b\nc", "a_b_c"),
        ("m\u0430nual", "m_nual"),
        ("x" * 300, "x" * 150),
        ("x" * 149 + "..y", "x" * 149),
    ],
    ids=["airflow", "parent", "inner-dots", "subshell", "backticks", "control", "cyrillic-a", "long", "cut-at-dot"],
)
def test_run_ids_are_mapped_to_one_safe_folder_name(run_id, folder):
    assert safe_run_id(run_id) == folder
    assert safe_run_id(folder) == folder  # a mapped id maps to itself: the jobs accept what validate_run made


@pytest.mark.parametrize("run_id", ["..", "/", "::", "", "\n", "+++"])
def test_a_run_id_without_usable_characters_is_refused(run_id):
    with pytest.raises(ConfigError) as error:
        safe_run_id(run_id)
    assert str(error.value) == f"run_id {run_id!r} has no usable characters; use letters, digits, '_', '-' or '.'"


@pytest.mark.parametrize("run_id", ["../x", "a/b", "..", "a\x00", "x" * 151, "$(id)", 7, None])
def test_a_hand_made_run_spec_with_an_unsafe_run_id_is_refused(run_id):
    text = json.dumps({"config": "c.yaml", "run_id": run_id})
    with pytest.raises(ConfigError) as error:
        RunSpec.from_json(text)
    assert str(error.value) == (
        f"run spec: run_id {run_id!r} is not a safe run id; use letters, digits, '_', '-' and '.' (at most 150), "
        "as build_run_spec makes them"
    )


def test_a_hand_made_run_spec_with_unsafe_tables_or_topics_is_refused():
    base = {"config": "c.yaml", "run_id": "r"}
    with pytest.raises(ConfigError) as error:
        RunSpec.from_json(json.dumps({**base, "tables": ["../x"]}))
    assert str(error.value) == f"parameter tables: '../x' is not a valid name; {NAME_RULE}"
    offsets = [{"topic": "a b", "partition": 0, "start": 0, "until": 1}]
    with pytest.raises(ConfigError) as error:
        RunSpec.from_json(json.dumps({**base, "offsets": offsets}))
    assert str(error.value) == f"parameter offsets: 'a b' is not a Kafka topic name; {TOPIC_RULE}"


# -- topics ------------------------------------------------------------------------------------------------------------

HOSTILE_TOPICS = [
    pytest.param(value, id=name)
    for name, value in {
        "space": "shop orders",
        "parent": "../x",
        "slash": "a/b",
        "dot-dot": "..",
        "dot": ".",
        "semicolon": "t;rm -rf /",
        "newline": "t\n",
        "fullwidth": "\uff54",
        "empty": "",
        "too-long": "t" * 250,
    }.items()
]


@pytest.mark.parametrize("topic", HOSTILE_TOPICS)
def test_a_hostile_topic_in_the_offsets_parameter_is_refused(tmp_path, topic):
    config = load_config(write_config(tmp_path))
    with pytest.raises(ConfigError) as error:
        build_run_spec(config, run_id="r", offsets={topic: {"0": {"start": 0, "until": 1}}})
    assert str(error.value) == f"parameter offsets: {topic!r} is not a Kafka topic name; {TOPIC_RULE}"


@pytest.mark.parametrize("topic", HOSTILE_TOPICS)
def test_a_hostile_topic_in_the_config_is_refused(tmp_path, topic):
    path = write_config(tmp_path, {"topics": ["dts.shop", topic]})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == config_error(
        path, f"pipelines.0.topics: {topic!r} is not a Kafka topic name; {TOPIC_RULE}"
    )


# -- table ids: refused in the config only when invisible, mapped safely wherever they come from -----------------------


@pytest.mark.parametrize(
    ("table_id", "problem"),
    [
        ("", "table id '' is empty or starts or ends with spaces; write it as db.table or db.schema.table"),
        (
            " shop.t",
            "table id ' shop.t' is empty or starts or ends with spaces; write it as db.table or db.schema.table",
        ),
        ("shop\x00t", "table id 'shop\\x00t' contains invisible characters (U+0000); remove them"),
        ("shop.t\n", "table id 'shop.t\\n' contains invisible characters (U+000A); remove them"),
        ("shop\u202e.t", "table id 'shop\\u202e.t' contains invisible characters (U+202E); remove them"),
        ("sh\u200bop.t", "table id 'sh\\u200bop.t' contains invisible characters (U+200B); remove them"),
        ("\ufeffshop.t", "table id '\\ufeffshop.t' contains invisible characters (U+FEFF); remove them"),
        ("t" * 513, f"table id {'t' * 40!r}... is 513 characters long; at most 512"),
    ],
    ids=["empty", "leading-space", "nul", "newline", "rtl-override", "zero-width", "bom", "too-long"],
)
def test_a_config_table_id_with_invisible_characters_is_refused(tmp_path, table_id, problem):
    path = write_config(tmp_path, {"tables": {table_id: {"primary_key": ["id"]}}})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == config_error(path, f"pipelines.0.tables: {problem}")


def test_config_table_ids_may_name_any_visible_table(tmp_path):
    """They select rows of the data's tables and never become a path or an argument themselves."""
    tables = [
        "../etc",
        "/abs/t",
        "shop.o;rm -rf /",
        "$(touch pwned).t",
        "sh\u043ep.t",
        "\uff53.t",
        "a b.c d",
        "t" * 512,
    ]
    config = load_config(write_config(tmp_path, {"tables": {t: {"primary_key": ["id"]} for t in tables}}))
    assert sorted(config.project.pipelines[0].tables) == sorted(tables)


@pytest.mark.parametrize(
    ("table_id", "folder"),
    [
        ("shop.orders", "shop.orders"),
        ("db.schema.t-1_x", "db.schema.t-1_x"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        (".hidden.t", "%2Ehidden.t"),
        ("../../etc/passwd", "%2E%2E%2F..%2Fetc%2Fpasswd"),
        ("/etc/passwd", "%2Fetc%2Fpasswd"),
        ("a\\b", "a%5Cb"),
        ("a b", "a%20b"),
        ("$(touch pwned)", "%24%28touch%20pwned%29"),
        ("a\x00b\n", "a%00b%0A"),
        ("sh\u043ep", "sh%D0%BEp"),
        ("a/AB", "a%2FAB"),
        ("a\u2fab", "a%E2%BE%AB"),  # escaped as %XXXX it would have met "a/AB"
        ("100%", "100%25"),
        ("~", "%7E"),
    ],
    ids=lambda value: repr(value)[:30],
)
def test_a_table_id_from_the_data_becomes_one_safe_folder_name(table_id, folder):
    assert table_folder_name(table_id) == folder


def test_a_very_long_table_id_is_cut_and_keeps_a_hash_of_the_whole_id():
    long_id, longer_id = "t" * 300, "t" * 301
    folder = table_folder_name(long_id)
    assert folder == "t" * (MAX_FOLDER_NAME - 25) + "~" + hashlib.sha256(long_id.encode()).hexdigest()[:24]
    assert len(folder) == MAX_FOLDER_NAME and table_folder_name(longer_id) != folder
    # 90 CJK characters escape to 810 bytes: cut too, and distinct from their neighbour.
    assert len(table_folder_name("\u8ba2" * 90)) == MAX_FOLDER_NAME
    assert table_folder_name("\u8ba2" * 90) != table_folder_name("\u8ba2" * 89 + "\u5355")


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "a\x00b"])
def test_warehouse_paths_refuse_a_pipeline_or_run_folder_that_leaves_its_folder(tmp_path, name):
    with pytest.raises(ValueError, match=r"cannot be a folder name under the warehouse"):
        PipelinePaths(str(tmp_path), name)
    with pytest.raises(ValueError, match=r"run id .* cannot be a folder name under the warehouse"):
        PipelinePaths(str(tmp_path), "p").run_dir(name)


# "\u8ba2" * 30 escapes to 270 characters: its folder name is cut and hashed.
HOSTILE_TABLES = [".", "..", "../../escape", ".hidden", "a/AB", "a\u2fab", "$(touch pwned)", "\u8ba2" * 30, "$" * 80]


def test_tables_named_anything_in_the_data_are_published_inside_their_folder(spark, tmp_path):
    """A real run over Canal messages whose tables are called '.', '..', '../../escape', lookalikes, a command and
    names whose escaped form is too long: every table is published in its own folder under the version's tables/,
    and nothing is written anywhere else."""
    messages = [
        {
            "data": [{"id": str(i), "v": table}],
            "database": "",  # no database: the table id is the table name alone
            "table": table,
            "type": "INSERT",
            "isDdl": False,
            "pkNames": ["id"],
            "mysqlType": {"id": "int", "v": "varchar(400)"},
            "es": 1000 + i,
            "id": i,
        }
        for i, table in enumerate(HOSTILE_TABLES)
    ]
    write_parquet([Record("c", 0, i, json.dumps(m)) for i, m in enumerate(messages)], tmp_path / "a" / "p.parquet")
    config = write_config(tmp_path, {"archive": {"path": str(tmp_path / "a")}})
    before = sorted(p.name for p in tmp_path.iterdir())
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK

    paths = PipelinePaths(str(tmp_path / "warehouse"), "shop")
    current = read_current(paths)
    tables_dir = paths.root / "tables"
    assert sorted(current["tables"]) == sorted(HOSTILE_TABLES)
    for i, table in enumerate(HOSTILE_TABLES):
        folder = paths.root / current["tables"][table]["path"]
        assert folder == tables_dir / table_folder_name(table)
        assert Path(folder).resolve().parent == Path(tables_dir).resolve()
        rows = [r.asDict() for r in read_table(spark, str(tmp_path / "warehouse"), "shop", table).collect()]
        assert [(r["id"], r["v"]) for r in rows] == [(i, table)]
    assert sorted(p.name for p in tables_dir.iterdir()) == sorted(table_folder_name(t) for t in HOSTILE_TABLES)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "warehouse"])  # nothing written elsewhere
    assert [p.name for p in (tmp_path / "warehouse").iterdir()] == ["shop"]
    assert not (Path.cwd() / "pwned").exists()


# -- paths -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (
            "pipe\x00lines.yaml",
            "config path 'pipe\\x00lines.yaml' contains control characters (U+0000); remove them; pass --config (or "
            "the `config` parameter) with your pipelines file",
        ),
        (
            "pipelines.yaml\n",
            "config path 'pipelines.yaml\\n' contains control characters (U+000A); remove them; pass --config (or the "
            "`config` parameter) with your pipelines file",
        ),
        (
            "/etc/passwd",
            "config path '/etc/passwd' is not a .yaml or .yml file; pass --config (or the `config` parameter) with the "
            "path of your pipelines file",
        ),
        (
            "../../../etc/shadow",
            "config path '../../../etc/shadow' is not a .yaml or .yml file; pass --config (or the `config` parameter) "
            "with the path of your pipelines file",
        ),
    ],
    ids=["nul", "newline", "not-yaml", "parent-not-yaml"],
)
def test_a_hostile_config_path_is_refused_before_it_is_read(path, message):
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("pipeline", "top", "problem"),
    [
        (
            {},
            {"warehouse": "ware\x00house"},
            "warehouse: path 'ware\\x00house' contains control characters (U+0000); remove them",
        ),
        ({}, {"warehouse": " "}, "warehouse: path is empty; give a folder or file path"),
        (
            {"archive": {"path": "arch\nive"}},
            {},
            "pipelines.0.archive.path: path 'arch\\nive' contains control characters (U+000A); remove them",
        ),
        (
            {"format": "dts-avro", "options": {"writer_schema": "Record\t.avsc"}},
            {},
            "pipelines.0: options.writer_schema: path 'Record\\t.avsc' contains control characters (U+0009); "
            "remove them",
        ),
    ],
    ids=["warehouse-nul", "warehouse-blank", "archive-newline", "option-tab"],
)
def test_a_config_path_with_control_characters_is_refused(tmp_path, pipeline, top, problem):
    path = write_config(tmp_path, pipeline, **top)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert str(error.value) == config_error(path, problem)


def test_config_paths_may_be_absolute_or_go_up_from_the_config_folder(tmp_path):
    """The pipelines file is the operator's: where the archive and warehouse are is theirs to say (the demo's
    config reaches ../var/)."""
    config = load_config(write_config(tmp_path, {"archive": {"path": "../a"}}, warehouse="/srv/warehouse"))
    assert config.warehouse == "/srv/warehouse"
    assert config.archive_path(config.project.pipelines[0]) == str(tmp_path.parent / "a")


# -- the DAG: the form, validate_run, and the spark-submit command line ------------------------------------------------


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_HOME", str(home))
        patch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        from airflow.models import DagBag

        bag = DagBag(dag_folder=str(REPO / "dags" / "cdc_replay_nightly.py"))
        assert bag.import_errors == {}
        return bag.dags["cdc_replay_nightly"]


@pytest.fixture
def validate_run(nightly, tmp_path):
    config = write_config(tmp_path)
    callable_ = nightly.get_task("validate_run").python_callable

    def run(**params):
        form = {**nightly.params.validate(), "config": str(config), **params}
        return callable_(params=form, run_id="manual__1", data_interval_start=None, data_interval_end=None)

    return run


@pytest.mark.parametrize("parameter", ["pipelines", "tables"])
@pytest.mark.parametrize("name", NAME_CASES)
def test_the_dag_refuses_a_hostile_name_in_the_form_or_in_validate_run(nightly, validate_run, parameter, name):
    """The form's pattern refuses what it can (before the run exists); whatever a pattern lets through is refused by
    validate_run, before any Spark work, naming the parameter."""
    from airflow.sdk.exceptions import AirflowFailException, ParamValidationError

    param = copy.copy(nightly.params.get_param(parameter))
    try:
        param.resolve([name])
    except ParamValidationError as error:
        assert str(error).startswith(f"{name!r} does not match {param.schema['items']['pattern']!r}")
        return
    with pytest.raises(AirflowFailException) as error:
        validate_run(**{parameter: [name]})
    assert str(error.value) == f"parameter {parameter}: {name!r} is not a valid name; {NAME_RULE}"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("../../../etc/passwd", "config path '../../../etc/passwd' is not a .yaml or .yml file"),
        ("p\x00.yaml", "config path 'p\\x00.yaml' contains control characters (U+0000); remove them"),
    ],
    ids=["not-yaml", "nul"],
)
def test_the_dag_refuses_a_hostile_config_path_in_validate_run(validate_run, config, message):
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="^" + re.escape(message)):
        validate_run(config=config)


def test_spark_submit_gets_the_run_spec_as_one_argument_and_no_shell_sees_it(nightly, tmp_path, monkeypatch):
    """The replay task renders the spec into an argv list that SparkSubmitHook runs without a shell: `$(...)`,
    backticks, quotes and `;` reach the job as text, and the job refuses the unsafe run id before any work."""
    from airflow.exceptions import AirflowException
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    canary = tmp_path / "pwned"
    hostile = f"$(touch {canary})`touch {canary}`; touch {canary} | '\"&"
    spec = json.dumps({"config": f"{hostile}.yaml", "run_id": hostile})
    task = nightly.get_task("replay")

    class TaskInstance:
        def xcom_pull(self, task_ids):
            return spec

    args = task.render_template(task.application_args, {"ti": TaskInstance()})
    assert args == ["--run-spec", spec]
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://local%5B%2A%5D")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    hook = SparkSubmitHook(conn_id="spark_default", application_args=args, name="hostile", env_vars=task.env_vars)
    command = hook._build_spark_submit_command(task.application)
    assert command[-3:] == [task.application, "--run-spec", spec]
    with pytest.raises(AirflowException) as error:
        hook.submit(task.application)
    assert "Error code is: 2" in str(error.value)
    assert f"run spec: run_id {hostile!r} is not a safe run id" in str(error.value)
    assert not canary.exists()


def test_a_table_id_longer_than_a_file_name_can_be_is_published(spark, tmp_path):
    table = "\u8ba2" * 64
    message = {"data": [{"id": "1"}], "database": "\u5e93" * 64, "table": table, "type": "INSERT", "isDdl": False,
               "pkNames": ["id"], "mysqlType": {"id": "int"}, "es": 1, "id": 1}  # fmt: skip
    write_parquet([Record("c", 0, 0, json.dumps(message))], tmp_path / "a" / "p.parquet")
    config = write_config(tmp_path, {"archive": {"path": str(tmp_path / "a")}})
    assert replay_main(["--config", str(config), "--run-id", "r"]) == EXIT_OK
    table_id = "\u5e93" * 64 + "." + table
    assert list(read_current(PipelinePaths(str(tmp_path / "warehouse"), "shop"))["tables"]) == [table_id]
    rows = read_table(spark, str(tmp_path / "warehouse"), "shop", table_id).collect()
    assert [(row.id, row._op, row._topic, row._offset) for row in rows] == [(1, "insert", "c", 0)]
    # A second run builds on that published state (read back from its partitioned folder).
    assert replay_main(["--config", str(config), "--run-id", "r2"]) == EXIT_OK
    assert read_table(spark, str(tmp_path / "warehouse"), "shop", table_id).count() == 1
