"""What the jobs, the DAG and the reconciliation view agree on, each defined once.

Imported by the Airflow DAG (at parse time) and the UI plugin, so this module imports nothing but the standard
library: no pyspark, no pydantic.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

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
# A run that reads Kafka brokers keeps its records here until they are decoded (kafka_source.stage_records).
KAFKA_RECORDS_FOLDER = "kafka_records"


def decoded_kind_folder(kind: str) -> str:
    """A run's decoded records of one kind (changelog, control, quarantine), relative to the run's folder: the decode
    stage writes them partitioned by ``record_kind``."""
    return f"{DECODED_FOLDER}/record_kind={kind}"


TYPE_CONFLICTS_FOLDER = "type_conflicts"
AUDIT_DATA_DOCS = "quality/data_docs"
RECONCILE_FOLDER = "reconcile"
RECONCILE_DIFF = f"{RECONCILE_FOLDER}/diff"
RECONCILE_METRICS = f"{RECONCILE_FOLDER}/metrics.json"
RECONCILE_REPORT = f"{RECONCILE_FOLDER}/report.md"
RECONCILE_DATA_DOCS = f"{RECONCILE_FOLDER}/data_docs"
# Keys' stories the reconciliation view worked out (`cdcreplay explain --json`), one file per key, by table.
RECONCILE_STORIES = f"{RECONCILE_FOLDER}/explain"

# -- Kafka client settings: from the environment only --------------------------------------------------------------
# Kafka client settings (TLS, SASL, credentials) reach a run only as the environment: each CDCREPLAY_KAFKA_<NAME> is
# the client property <name> (lower case, "_" for "."). The DAG writes them from its Airflow connection, the jobs read
# them (kafka_source). The brokers and what Spark's Kafka source decides are never taken from there.
KAFKA_VARIABLE_PREFIX = "CDCREPLAY_KAFKA_"
KAFKA_PROPERTIES_NOT_FROM_ENVIRONMENT = (
    "bootstrap.servers",
    "key.deserializer",
    "value.deserializer",
    "enable.auto.commit",
    "auto.offset.reset",
    "interceptor.classes",
)


def kafka_variable(client_property: str) -> str:
    """The environment variable that carries a Kafka client property (``security.protocol`` ->
    ``CDCREPLAY_KAFKA_SECURITY_PROTOCOL``)."""
    return KAFKA_VARIABLE_PREFIX + client_property.upper().replace(".", "_")


def kafka_property(variable: str) -> str:
    """The Kafka client property a ``CDCREPLAY_KAFKA_*`` variable carries."""
    return variable[len(KAFKA_VARIABLE_PREFIX) :].lower().replace("_", ".")


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
VERDICT_SKIPPED = "skipped"  # a run without changes has nothing to reconcile


# -- what a run's summary.json holds: written by the replay job, completed by the reconcile task, read by the report
# task, the CLI and the reconciliation view. Read back leniently (summaries of earlier releases lack newer fields).
@dataclass
class ReconciliationResult:
    """One pipeline's reconciliation of one run (``cdcreplay.reconcile.run_reconciliation``)."""

    verdict: str  # VERDICT_PASS, VERDICT_FAIL or VERDICT_SKIPPED
    pipeline: str | None = None
    headline: str = ""
    reason: str | None = None  # why it was skipped
    generated_at: str | None = None  # ISO-8601, UTC
    # One entry per table and snapshot epoch: its kind (reconciled or baseline), verdict and a count per status.
    tables: list[dict] = field(default_factory=list)
    failed_expectations: list[str] = field(default_factory=list)  # of the reconciliation_diff suite
    diff_path: str | None = None  # every compared key with its status (Parquet)
    metrics_path: str | None = None
    report_path: str | None = None
    data_docs_path: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, document: dict) -> ReconciliationResult:
        return _from_json(cls, document)


@dataclass
class RunSummary:
    """One pipeline's replay run: what it read, decoded and published, and where its files are."""

    pipeline: str
    format: str
    run_id: str
    dry_run: bool = False
    full_rebuild: bool = False
    records_read: int = 0  # selected archive records, duplicates included
    distinct_records: int = 0
    duplicates: int = 0
    missing_offsets: int = 0
    manifest_path: str | None = None
    files: int = 0
    unreadable_files: int = 0  # left out of the read (archive.skip_unreadable_files), listed in the manifest
    timings_s: dict[str, float] = field(default_factory=dict)  # per stage
    elapsed_s: float = 0.0
    version: str | None = None  # the pipeline's published version after the run (None: nothing published yet)
    tables: dict[str, dict] = field(default_factory=dict)  # per table: rows, tombstones, columns, key, path, ...
    # The rest is set when the run decoded records (not for a dry run or an empty interval).
    decoded: dict | None = None  # counts per kind, reason, table and Kafka partition (cdcreplay.accounting)
    quality: dict | None = None  # the audit: the suite's result per table
    type_conflicts: int = 0  # live rows held back from the typed tables
    state: dict | None = None  # the state version this run committed (state_store.state_ref)
    base_state: dict | None = None  # the state version it built on; None: a full rebuild
    state_merged: bool | None = None  # the changed keys were merged into the state (else it was written whole)
    layouts_from_merge: bool | None = None  # the tables' layouts came from the merged rows, not the whole state
    changelog_path: str | None = None
    quarantine_path: str | None = None
    type_conflicts_path: str | None = None
    changelogs_removed: list[str] = field(default_factory=list)  # older runs' changelogs removed (keep_decoded_runs)
    reconciliation: ReconciliationResult | None = None  # set by the reconcile task

    def to_json(self) -> dict:
        return asdict(self)  # every field, null where it does not apply

    @classmethod
    def from_json(cls, document: dict) -> RunSummary:
        summary = _from_json(cls, document)
        reconciliation = summary.reconciliation
        summary.reconciliation = (
            ReconciliationResult.from_json(reconciliation)
            if isinstance(reconciliation, dict) and "verdict" in reconciliation
            else None
        )
        return summary


def _from_json(cls, document: dict):
    """``cls`` from its JSON document; keys this release does not know (a newer writer's) are ignored."""
    known = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in document.items() if key in known})
