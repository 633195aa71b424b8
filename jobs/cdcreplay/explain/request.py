"""What `cdcreplay explain` is asked, checked before any Spark work: the pipeline, the table, the key, and the runs
whose files tell the key's story.

The changelog groups a key by its *key text*: a JSON array of the key columns' canonical texts, in the order of the
table's key columns (``formats.routing.key_text``). The user's key is a JSON object of the key columns; each value is
turned into the canonical text its column's type gives (``42`` and ``"42"`` are the same int key, ``12.5`` is
``"12.50"`` in a decimal(10,2) column), and the key text is built from them exactly as the decoders build it.

A date, timestamp, float or binary key value has more than one text: each vendor writes a timestamp with its own
fraction digits, and a person types ``2026-01-05T10:00:00Z`` for ``2026-01-05 10:00:00.000000``. Those columns
(``TYPED_MATCH_TYPES``) are matched by value, not by text: the key text's element and the given value, both cast to
the column's type (``ExplainRequest.typed_columns``; gather's ``names_key``).

The runs: a published state is the compaction of every run's changes since the last run that built from nothing (a
full rebuild, or the first run). So the story of a key as of run R reads the runs from that run up to R, in the order
they published.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation

from cdcreplay.config import ConfigError, LoadedConfig, PipelineConfig, load_config
from cdcreplay.contracts import (
    RECONCILE_DIFF,
    RECONCILE_METRICS,
    RUN_FOLDER_NAME,
    RUN_ID_MAX,
    SUMMARY_FILE,
    RunSummary,
    decoded_kind_folder,
)
from cdcreplay.formats.routing import KIND_CHANGE, KIND_QUARANTINE, key_text
from cdcreplay.formats.values.text_casts import spark_timestamp_micros, timestamp_text, wall_clock_micros
from cdcreplay.warehouse import PipelinePaths, is_legacy, read_current, read_json

INTEGRAL_TYPES = frozenset({"tinyint", "smallint", "int", "integer", "bigint", "long"})
DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
INTEGER_TEXT = re.compile(r"[+-]?\d+")
DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
# Key column types whose values have more than one text: matched by value (cast to the type), not by text.
TYPED_MATCH_TYPES = frozenset({"date", "timestamp", "timestamp_ntz", "float", "double", "binary"})


@dataclass(frozen=True)
class RunFiles:
    """One run of the pipeline, and where its decoded records and reconciliation are."""

    run_id: str
    summary: RunSummary
    folder: str

    @property
    def decoded(self) -> bool:
        """Whether the run decoded records (a dry run or an interval without records did not)."""
        return bool(self.summary.decoded)

    @property
    def built_from_nothing(self) -> bool:
        """A full rebuild or a pipeline's first run: the state it published holds no earlier run's changes."""
        return self.decoded and self.summary.base_state is None

    def decoded_path(self, kind: str) -> str:
        return f"{self.folder}/{decoded_kind_folder(kind)}"

    @property
    def changelog_path(self) -> str:
        return self.decoded_path(KIND_CHANGE)

    @property
    def quarantine_path(self) -> str:
        return self.decoded_path(KIND_QUARANTINE)

    @property
    def diff_path(self) -> str:
        return f"{self.folder}/{RECONCILE_DIFF}"

    @property
    def metrics_path(self) -> str:
        return f"{self.folder}/{RECONCILE_METRICS}"


@dataclass(frozen=True)
class ExplainRequest:
    """A checked request: the key as its canonical texts and key text, and the runs whose files tell its story."""

    config: LoadedConfig
    pipeline: PipelineConfig
    paths: PipelinePaths
    table_id: str
    key_columns: tuple[str, ...]
    column_types: dict[str, str]
    key: dict[str, str]  # key column -> canonical text, in key column order
    key_text: str
    run: RunFiles  # the run the story ends with
    runs: tuple[RunFiles, ...]  # the runs whose changes the state as of ``run`` holds, oldest first
    skipped_runs: tuple[RunFiles, ...] = field(default=())  # runs of the chain that decoded nothing

    @property
    def typed_columns(self) -> dict[int, str]:
        """The key columns matched by value: their place in the key text -> their Spark type."""
        types = {}
        for place, column in enumerate(self.key_columns):
            declared = (self.column_types.get(column) or "string").strip().lower()
            if declared in TYPED_MATCH_TYPES:
                types[place] = declared
        return types


def resolve_request(
    config_path: str, pipeline_name: str, table_id: str, key_json: str, run_id: str | None = None
) -> ExplainRequest:
    """The request checked against the config and the warehouse; ConfigError naming the argument and the fix."""
    config = load_config(config_path)
    pipeline = _pipeline(config, pipeline_name)
    paths = PipelinePaths(config.warehouse, pipeline.name)
    table = _published_table(paths, table_id)
    key_columns = tuple(table.get("key_columns") or ())
    column_types = {name: spark_type for name, spark_type in table.get("columns") or ()}
    key = parse_key(key_json, table_id, key_columns, column_types)
    runs = _runs(paths)
    chosen = _chosen_run(paths, runs, run_id)
    chain, skipped = _chain(runs, chosen)
    return ExplainRequest(
        config=config,
        pipeline=pipeline,
        paths=paths,
        table_id=table_id,
        key_columns=key_columns,
        column_types=column_types,
        key=key,
        key_text=key_text(list(key.values())),
        run=chosen,
        runs=chain,
        skipped_runs=skipped,
    )


def _pipeline(config: LoadedConfig, name: str) -> PipelineConfig:
    try:
        return config.project.pipeline(name)
    except ConfigError as exc:
        raise ConfigError(f"--pipeline: {exc}") from None


def _published_table(paths: PipelinePaths, table_id: str) -> dict:
    current = read_current(paths)
    if current is None or is_legacy(current):
        raise ConfigError(
            f"--pipeline: pipeline {paths.pipeline!r} has published no Delta tables under {paths.root} yet; "
            "run it first (cdcreplay run, or the DAG), then explain its keys"
        )
    tables = current["tables"]
    if table_id not in tables:
        known = ", ".join(sorted(tables)) or "(none)"
        raise ConfigError(
            f"--table: table {table_id!r} is not published by pipeline {paths.pipeline!r}; published tables: {known}"
        )
    if not tables[table_id].get("key_columns"):
        raise ConfigError(
            f"--table: table {table_id!r} of pipeline {paths.pipeline!r} has no live key, so its key columns are "
            "unknown; explain a key of another table"
        )
    return tables[table_id]


def parse_key(key_json: str, table_id: str, key_columns: tuple[str, ...], column_types: dict[str, str]) -> dict:
    """``--key`` (a JSON object of the key columns) -> {column: canonical text}, in key column order."""
    example = json.dumps({column: 1 for column in key_columns})
    try:
        given = json.loads(key_json)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--key: not JSON ({exc.msg}); give the key as a JSON object, e.g. --key '{example}'"
        ) from None
    if not isinstance(given, dict):
        raise ConfigError(
            f"--key: {key_json!r} is not a JSON object; give the key as an object of its columns, "
            f"e.g. --key '{example}'"
        )
    unknown = [column for column in given if column not in key_columns]
    if unknown:
        raise ConfigError(
            f"--key: {', '.join(unknown)} {'is not a key column' if len(unknown) == 1 else 'are not key columns'} "
            f"of table {table_id!r}; its key columns are: {', '.join(key_columns)}"
        )
    missing = [column for column in key_columns if column not in given]
    if missing:
        raise ConfigError(
            f"--key: key column(s) {', '.join(missing)} missing; table {table_id!r} is keyed by "
            f"{', '.join(key_columns)}: give every one, e.g. --key '{example}'"
        )
    return {column: canonical_key_value(column, given[column], column_types.get(column)) for column in key_columns}


def canonical_key_value(column: str, value, spark_type: str | None) -> str:
    """One key value given as JSON -> the canonical text the decoders write for its column's type."""
    declared = (spark_type or "string").strip().lower()
    if value is None or isinstance(value, dict | list):
        raise ConfigError(f"--key: column {column}: a key value is a number, text or boolean, not {json.dumps(value)}")
    if declared in INTEGRAL_TYPES:
        return _integer_text(column, value, declared)
    scale = DECIMAL_TYPE.fullmatch(declared)
    if scale:
        return _decimal_text(column, value, declared, int(scale.group(2)))
    if declared == "boolean":
        return _boolean_text(column, value)
    if declared in TYPED_MATCH_TYPES:
        return _typed_text(column, value, declared)
    return value if isinstance(value, str) else json.dumps(value)


def _integer_text(column: str, value, declared: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str) and INTEGER_TEXT.fullmatch(value.strip()):
        return str(int(value.strip()))
    raise ConfigError(f"--key: column {column} is {declared}: {json.dumps(value)} is not an integer; give e.g. 42")


def _decimal_text(column: str, value, declared: str, scale: int) -> str:
    try:
        if isinstance(value, bool):
            raise InvalidOperation
        number = Decimal(value.strip() if isinstance(value, str) else repr(value))
        if not number.is_finite():
            raise InvalidOperation
    except (InvalidOperation, ValueError):
        raise ConfigError(f"--key: column {column} is {declared}: {json.dumps(value)} is not a number") from None
    return f"{number.quantize(Decimal(1).scaleb(-scale)):f}"


def _typed_text(column: str, value, declared: str) -> str:
    """A date, timestamp, float or binary key value checked, in one text of it (matched by value: see the module)."""
    examples = {
        "date": "2026-01-05",
        "timestamp": "2026-01-05 10:00:00 (UTC unless it names a zone)",
        "timestamp_ntz": "2026-01-05 10:00:00 (the wall-clock time, no zone)",
        "float": "12.5",
        "double": "12.5",
        "binary": "its base64 text, as the diff shows it",
    }
    text = value.strip() if isinstance(value, str) else None
    canonical = None
    if declared == "date" and text and DATE_TEXT.fullmatch(text):
        with contextlib.suppress(ValueError):
            canonical = date.fromisoformat(text).isoformat()
    elif declared == "timestamp" and text and DATE_TEXT.match(text):  # a time alone would mean today
        micros = spark_timestamp_micros(text)
        canonical = None if micros is None else timestamp_text(micros)
    elif declared == "timestamp_ntz" and text:
        micros = wall_clock_micros(text)
        canonical = None if micros is None else timestamp_text(micros)
    elif declared in ("float", "double") and not isinstance(value, bool):
        with contextlib.suppress(TypeError, ValueError):
            canonical = repr(float(value))
    elif declared == "binary" and text is not None:
        with contextlib.suppress(binascii.Error, ValueError):
            canonical = base64.b64encode(base64.b64decode(text, validate=True)).decode("ascii")
    if canonical is None:
        raise ConfigError(
            f"--key: column {column} is {declared}: {json.dumps(value)} is not one; give e.g. {examples[declared]}"
        )
    return canonical


def _boolean_text(column: str, value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower()
    raise ConfigError(f"--key: column {column} is boolean: {json.dumps(value)} is neither true nor false")


def _runs(paths: PipelinePaths) -> list[RunFiles]:
    """Every run with a summary (a run that died before writing one published nothing), in publish order: by the
    published version its summary names, a run that decoded records before one that built on its version."""
    runs = []
    for folder in paths.runs_dir.iterdir():
        try:
            summary = RunSummary.from_json(read_json(folder / SUMMARY_FILE))
        except FileNotFoundError:
            continue
        runs.append(RunFiles(folder.name, summary, str(folder)))
    return sorted(runs, key=lambda run: (run.summary.version or "", not run.decoded, run.run_id))


def _chosen_run(paths: PipelinePaths, runs: list[RunFiles], run_id: str | None) -> RunFiles:
    by_id = {run.run_id: run for run in runs}
    if run_id is None:
        published = read_current(paths)["run_id"]
        if published in by_id:
            return by_id[published]
        raise ConfigError(
            f"--run-id: the published run {published!r} of pipeline {paths.pipeline!r} has no summary under "
            f"{paths.runs_dir}; name a run with --run-id"
        )
    if not RUN_FOLDER_NAME.match(run_id):
        raise ConfigError(
            f"--run-id: {run_id!r} is not a run id: use letters, digits, '_', '-' and '.', starting with a letter "
            f"or digit, at most {RUN_ID_MAX} characters"
        )
    if run_id not in by_id:
        known = ", ".join(run.run_id for run in runs) or "(none)"
        raise ConfigError(
            f"--run-id: pipeline {paths.pipeline!r} has no finished run {run_id!r} (no runs/{run_id}/{SUMMARY_FILE}); "
            f"its runs, oldest first: {known}"
        )
    return by_id[run_id]


def _chain(runs: list[RunFiles], chosen: RunFiles) -> tuple[tuple[RunFiles, ...], tuple[RunFiles, ...]]:
    """The runs whose changes the state as of ``chosen`` holds (from the last that built from nothing), and the
    runs in between that decoded nothing."""
    upto = runs[: runs.index(chosen) + 1]
    start = max((i for i, run in enumerate(upto) if run.built_from_nothing), default=0)
    chain = upto[start:]
    return tuple(run for run in chain if run.decoded), tuple(run for run in chain if not run.decoded)
