#!/usr/bin/env bash
# Install everything, lint, and run the whole test suite (real Spark, Airflow, GX and fastavro; 30-80 minutes on 2 cores).
#   scripts/test.sh [pytest options]     e.g. scripts/test.sh -m unit for the everyday tier (tiers: tests/conftest.py)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/python -m cdcreplay.jars --test-servers >/dev/null  # the real S3 server the S3 tests start (s3proxy)
scripts/setup-browser.sh  # Debian's chromium for the browser test of the reconciliation view
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Two workers (pytest-xdist), a test module on one worker; tests/conftest.py hands out
# the slow tiers first. `-n 0` after this runs in one process (a debugger, `-s`).
exec .venv/bin/pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
