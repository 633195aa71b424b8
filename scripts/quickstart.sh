#!/usr/bin/env bash
# Quick start: install everything, simulate a CDC archive per demo pipeline, run the nightly DAG once with
# `airflow dags test` (SQLite metadata, Spark local[*]), and print what it built and whether it equals the truth.
#   scripts/quickstart.sh [--events N] [--drift N]      (options go to `cdcreplay demo`)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/cdcreplay demo "$@"
