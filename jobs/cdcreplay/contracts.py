"""What the jobs, the DAG and the reconciliation view agree on, each defined once.

Imported by the Airflow DAG (at parse time) and the UI plugin, so this module imports nothing but the standard
library: no pyspark, no pydantic.
"""

from __future__ import annotations

import re

# -- names that become folder names and command-line arguments (pipelines, the tables a run is limited to) ---------
NAME_MAX = 128
_NAME = rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{NAME_MAX - 1}}}"
SAFE_NAME = re.compile(rf"^{_NAME}\Z")
SAFE_NAME_RULE = (
    f"use letters, digits, '_', '-' and '.', starting with a letter or digit, at most {NAME_MAX} characters"
)
# The same rule as the trigger form's JSON-schema pattern. `(?!\n)`: in Python (jsonschema) `$` also matches before
# a final newline; in the browser (ECMAScript) the look-ahead is a no-op.
NAME_PATTERN = rf"^{_NAME}$(?!\n)"

# -- run ids: any Airflow run id becomes a folder name of at most RUN_ID_MAX characters (run_spec.safe_run_id) -------
RUN_ID_MAX = 150
RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
RUN_FOLDER_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{RUN_ID_MAX - 1}}}\Z")

# -- a run's folder, <warehouse>/<pipeline>/runs/<run_id>/ (see cdcreplay.warehouse) --------------------------------
MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.json"
DECODED_FOLDER = "decoded"
TYPE_CONFLICTS_FOLDER = "type_conflicts"
AUDIT_DATA_DOCS = "quality/data_docs"
RECONCILE_FOLDER = "reconcile"
RECONCILE_DIFF = f"{RECONCILE_FOLDER}/diff"
RECONCILE_METRICS = f"{RECONCILE_FOLDER}/metrics.json"
RECONCILE_REPORT = f"{RECONCILE_FOLDER}/report.md"
RECONCILE_DATA_DOCS = f"{RECONCILE_FOLDER}/data_docs"

# -- the reconciliation: one status per compared key, one verdict per epoch and per run ------------------------------
STATUS_MATCH = "match"
STATUS_MISMATCH = "mismatch"
# The snapshot read the key, the changes never created it (or deleted it).
STATUS_MISSING_IN_INCREMENTAL = "missing_in_incremental"
# The changes say the key is live, the snapshot did not read it.
STATUS_MISSING_IN_SNAPSHOT = "missing_in_snapshot"
# A change of the key was in flight while the snapshot read it: not comparable, never a failure.
STATUS_IN_FLIGHT = "in_flight"
STATUSES = (STATUS_MATCH, STATUS_MISMATCH, STATUS_MISSING_IN_INCREMENTAL, STATUS_MISSING_IN_SNAPSHOT, STATUS_IN_FLIGHT)
FAILING_STATUSES = (STATUS_MISMATCH, STATUS_MISSING_IN_INCREMENTAL, STATUS_MISSING_IN_SNAPSHOT)
VERDICT_PASS = "pass"
VERDICT_FAIL = "fail"
VERDICT_BASELINE = "baseline"
