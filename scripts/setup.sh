#!/usr/bin/env bash
# Create (or bring up to date) the project's virtualenv at .venv with the pinned dependencies.
# Needs Python 3.11 and Java 17 on the machine; everything else comes from PyPI.
# Reruns are quick: nothing is installed when requirements*.txt and pyproject.toml are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: Python 3.11 is required (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if ! java -version >/dev/null 2>&1; then
  echo "setup: Java 17 is required by Spark (java not found); e.g. apt-get install openjdk-17-jre-headless" >&2
  exit 2
fi

# The pinned Spark jars (jobs/cdcreplay/jars.py) from Maven Central into .venv/jars; a jar in place with its checksum
# is not fetched again.
fetch_jars() {
  if ! .venv/bin/python -m cdcreplay.jars >/dev/null; then
    echo "setup: could not fetch the pinned jars from Maven Central (above); Debezium Avro would decode in Python" >&2
    exit 1
  fi
  # The classes a driver JVM loads, archived beside the jars so that every run's JVM starts from them
  # (cdcreplay.jvm); written once (a minute or two), again only when the JDK, pyspark or the jars change.
  .venv/bin/python -m cdcreplay_lab.class_archive
}

stamp=".venv/.cdcreplay-installed"
wanted="$(cat requirements.txt requirements-dev.txt pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" && -x .venv/bin/airflow ]]; then
  fetch_jars
  exit 0
fi

echo "setup: installing pinned dependencies into .venv (about a minute) ..."
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9" 2>/dev/null \
  || .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
# uv resolves the pinned set in one go; pyspark and pyspark-client install the same files, so they stay equal.
.venv/bin/uv pip install --quiet --python .venv/bin/python -r requirements-dev.txt -e .
# uv builds pyspark's source distribution again for every new .venv and keeps each build (1.4 GB) in its cache: 32
# fresh clones filled the CI machine's disk. A prune keeps the newest build and drops the ones nothing uses.
.venv/bin/uv cache prune --quiet || true
# Write the .pyc files now: where PYTHONDONTWRITEBYTECODE is set (the CI machines here), Python would otherwise compile
# Airflow, GX and their dependencies from source in every process (importing GX: 15 s -> 8 s).
.venv/bin/python -m compileall -qq -j 0 "$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")" >/dev/null || true
fetch_jars
echo "$wanted" > "$stamp"
echo "setup: done ($(.venv/bin/python -c 'import pyspark, airflow; print("pyspark", pyspark.__version__, "airflow", airflow.__version__)'))"
