"""Pipeline configuration: one YAML file declares every pipeline, validated before any work starts.

No pyspark import here: the Airflow DAG validates the file in a light task before a Spark job is submitted.
Every error names the file, the field and the fix.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cdcreplay.contracts import SAFE_NAME, SAFE_NAME_RULE
from cdcreplay.formats import KNOWN_FORMATS, REGISTRY, option_error
from cdcreplay.storage import unsupported_scheme

ARCHIVE_LAYOUTS = ("parquet", "jsonl", "kcat")  # archived files; `kafka` reads a cluster instead
SPARK_TYPES = re.compile(
    r"^(int|bigint|smallint|tinyint|float|double|string|boolean|binary|date|timestamp|timestamp_ntz"
    r"|decimal\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\))$"
)
# Names that end up in file paths and command lines: letters, digits and a few separators only. `\Z`, not `$`:
# Python's `$` also matches before a trailing newline, which would let "name\n" through.
KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}\Z")
KAFKA_TOPIC_RULE = "Kafka topic names use letters, digits, '.', '_' and '-', at most 249 characters"
# Table ids name the DATA's tables, which may be called anything (spaces, any script): they only select rows and
# are mapped to folder names safely (warehouse.table_folder_name). What they may not hold is invisible text.
MAX_TABLE_ID = 512


def invisible_characters(text: str) -> list[str]:
    """Control and format characters (NUL, newline, tab, right-to-left override, zero-width space, BOM, ...) as
    U+XXXX: they make a name display as something it is not, or break the file and log lines it reaches."""
    return sorted({f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in ("Cc", "Cf")})


def table_id_problem(table_id: str) -> str | None:
    """Why ``table_id`` cannot name a table (with the fix), or None."""
    hidden = invisible_characters(table_id)
    if hidden:
        return f"table id {table_id!r} contains invisible characters ({', '.join(hidden)}); remove them"
    if not table_id.strip() or table_id != table_id.strip():
        return f"table id {table_id!r} is empty or starts or ends with spaces; write it as db.table or db.schema.table"
    if len(table_id) > MAX_TABLE_ID:
        return f"table id {table_id[:40]!r}... is {len(table_id)} characters long; at most {MAX_TABLE_ID}"
    return None


def path_problem(path: str) -> str | None:
    """Why a path from the config cannot be used (with the fix), or None. The config is the operator's own file, so
    absolute paths and `..` are fine; control characters are not (NUL cuts a path short, newlines forge log lines)."""
    hidden = invisible_characters(path)
    if hidden:
        return f"path {path!r} contains control characters ({', '.join(hidden)}); remove them"
    if not path.strip():
        return "path is empty; give a folder or file path"
    return unsupported_scheme(path)


class ConfigError(ValueError):
    """A configuration or parameter problem, with the place and the fix in the message."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _usable_path(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A broker address as a client's bootstrap.servers takes it: host (or [IPv6]) and port, nothing else -- no scheme,
# no user:password@ (credentials come from the environment, cdcreplay.kafka_source).
BOOTSTRAP_SERVER = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._\-]+):\d{1,5}\Z")


class ArchiveConfig(_Strict):
    path: str | None = Field(
        default=None,
        description="Folder (or file) holding the archived Kafka records; relative to the config file. Not with "
        "layout kafka.",
    )
    layout: Literal["parquet", "jsonl", "kcat", "kafka"] = Field(
        default="parquet",
        description="parquet: Spark Kafka-source columns; jsonl: the same columns as JSON lines with base64 "
        "key/value; kcat: `kcat -C -J` output lines; kafka: the topics on a live cluster (bootstrap_servers).",
    )
    bootstrap_servers: list[str] | None = Field(
        default=None,
        description="layout kafka: host:port of one or more brokers of the cluster (a list, or one comma-separated "
        "string). Credentials and TLS/SASL settings come from CDCREPLAY_KAFKA_* variables, never from this file.",
    )
    copy_to: str | None = Field(
        default=None,
        description="layout kafka: folder or s3a:// prefix that `cdcreplay archive` copies the topics' records into, "
        "as a Parquet archive (Spark's Kafka-source columns) that a pipeline with layout parquet replays; relative to "
        "the config file.",
    )
    skip_unreadable_files: bool = Field(
        default=False,
        description="parquet: leave out files that are not readable Parquet (truncated by an archiver killed "
        "mid-upload, or not Parquet at all), listing them in the run's manifest, instead of refusing the run.",
    )

    @field_validator("path", "copy_to")
    @classmethod
    def _path(cls, value):
        return None if value is None else _usable_path(value)

    @field_validator("layout", mode="before")
    @classmethod
    def _known_layout(cls, value):
        if value not in (*ARCHIVE_LAYOUTS, "kafka"):
            raise ValueError(
                "Input should be 'parquet', 'jsonl' or 'kcat' (archived files), or 'kafka' (the topics on a "
                "cluster, with bootstrap_servers)"
            )
        return value

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _servers(cls, value):
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        for server in value or ():
            if not isinstance(server, str) or not BOOTSTRAP_SERVER.match(server):
                raise ValueError(
                    f"bootstrap_servers: {server!r} is not host:port (e.g. broker1.example.com:9092); credentials "
                    "do not belong here, set them in CDCREPLAY_KAFKA_* variables"
                )
        return value

    @model_validator(mode="after")
    def _source_fields(self):
        if self.layout == "kafka":
            if not self.bootstrap_servers:
                raise ValueError(
                    "bootstrap_servers is required with layout kafka; list host:port of one or more brokers, "
                    "e.g. bootstrap_servers: [broker1:9092]"
                )
            if self.path is not None:
                raise ValueError("path is not used with layout kafka (records come from the brokers); remove it")
            if self.skip_unreadable_files:
                raise ValueError("skip_unreadable_files applies to parquet archives, not layout kafka; remove it")
        else:
            if self.path is None:
                raise ValueError(f"path is required with layout {self.layout}; give the archive's folder or file")
            if self.copy_to is not None:
                raise ValueError(
                    "copy_to applies to layout kafka only (where `cdcreplay archive` copies the topics to); remove it"
                )
            if self.bootstrap_servers:
                raise ValueError(
                    "bootstrap_servers applies to layout kafka only; remove it, or set layout: kafka to read "
                    "from the brokers"
                )
        return self


class TableConfig(_Strict):
    primary_key: list[str] | None = Field(default=None, description="Key columns, overriding what messages declare.")
    column_types: dict[str, str] = Field(
        default_factory=dict,
        description="Spark SQL type per column, overriding (or supplying, for schemaless formats) the declared type.",
    )

    @field_validator("primary_key")
    @classmethod
    def _non_empty(cls, value):
        if value is not None and not value:
            raise ValueError("primary_key must list at least one column (or be left out)")
        return value

    @field_validator("column_types")
    @classmethod
    def _known_types(cls, value):
        for column, spark_type in value.items():
            if not SPARK_TYPES.match(spark_type.strip().lower()):
                raise ValueError(
                    f"column {column!r}: type {spark_type!r} is not supported; use one of int, bigint, smallint, "
                    "tinyint, float, double, string, boolean, binary, date, timestamp, timestamp_ntz, decimal(p,s)"
                )
        return {column: spark_type.strip().lower() for column, spark_type in value.items()}


class PipelineConfig(_Strict):
    name: str = Field(description="Pipeline id; names its folder in the warehouse.")
    format: str = Field(description=f"Change format id, one of {', '.join(KNOWN_FORMATS)}.")
    archive: ArchiveConfig
    topics: list[str] | None = Field(default=None, description="Topics to replay; all topics in the archive if unset.")
    tables: dict[str, TableConfig] = Field(
        default_factory=dict, description="Per-table overrides, keyed by table id `db.table` or `db.schema.table`."
    )
    tombstone_retention_days: int | None = Field(
        default=None,
        ge=1,
        description="Drop a deleted key's tombstone this many days after its delete (by event time); unset: never.",
    )
    options: dict[str, bool | str | int] = Field(
        default_factory=dict, description="Format options, e.g. canal-json `legacy_swapped: true`."
    )
    deletion_vectors: bool = Field(
        default=True,
        description="Published tables a night merges into mark the rows it replaces in Delta deletion vectors instead "
        "of rewriting their files (a large table's night merge about halves); readers must support deletion vectors "
        "(false: such tables are rewritten, and delta-rs's to_pandas() reads them).",
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value):
        if not SAFE_NAME.match(value):
            raise ValueError(f"{value!r} is not a safe pipeline name; {SAFE_NAME_RULE} (it becomes a folder name)")
        return value

    @field_validator("topics")
    @classmethod
    def _kafka_topics(cls, value):
        for topic in value or ():
            if not KAFKA_TOPIC.match(topic) or topic in (".", ".."):
                raise ValueError(f"{topic!r} is not a Kafka topic name; {KAFKA_TOPIC_RULE}")
        return value

    @field_validator("tables")
    @classmethod
    def _table_ids(cls, value):
        for table_id in value:
            problem = table_id_problem(table_id)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("format")
    @classmethod
    def _known_format(cls, value):
        if value not in KNOWN_FORMATS:
            raise ValueError(f"unknown format {value!r}; use one of {', '.join(KNOWN_FORMATS)}")
        return value

    @model_validator(mode="after")
    def _kafka_topics_listed(self):
        if self.archive.layout == "kafka" and not self.topics:
            raise ValueError(
                "topics is required with archive.layout kafka: list the topics to replay (a cluster holds many "
                "that are not this pipeline's)"
            )
        return self

    @model_validator(mode="after")
    def _known_options(self):
        for option, value in self.options.items():
            problem = option_error(self.format, option, value)
            if problem:
                raise ValueError(problem)
            if REGISTRY[self.format].options[option].kind == "path" and path_problem(value):
                raise ValueError(f"options.{option}: {path_problem(value)}")
        return self


class ProjectConfig(_Strict):
    warehouse: str = Field(description="Folder where latest-state tables, run reports and quarantine are written.")
    keep_versions: int = Field(default=3, ge=1, description="Published versions kept per pipeline (older are removed).")
    keep_decoded_runs: int | None = Field(
        default=None,
        ge=1,
        description="Runs per pipeline whose decoded changelog is kept (the newest that have one; unset: every "
        "run's). A run removes the changelog of older runs when it publishes; their summaries, quarantine and "
        "reports stay, and `cdcreplay explain` decodes their records again from the archive.",
    )
    pipelines: list[PipelineConfig]

    _warehouse = field_validator("warehouse")(_usable_path)

    @model_validator(mode="after")
    def _unique_names(self):
        seen = set()
        for pipeline in self.pipelines:
            if pipeline.name in seen:
                raise ValueError(f"pipeline name {pipeline.name!r} is declared twice; names must be unique")
            seen.add(pipeline.name)
        return self

    def pipeline(self, name: str) -> PipelineConfig:
        for pipeline in self.pipelines:
            if pipeline.name == name:
                return pipeline
        known = ", ".join(p.name for p in self.pipelines)
        raise ConfigError(f"pipeline {name!r} is not declared in the config; declared pipelines: {known}")


class LoadedConfig:
    """A validated config with its paths resolved against the config file's folder."""

    def __init__(self, path: Path, project: ProjectConfig):
        self.path = path
        self.project = project

    def resolve(self, relative: str) -> str:
        candidate = Path(relative).expanduser()
        if not candidate.is_absolute() and "://" not in relative:
            candidate = (self.path.parent / candidate).resolve()
        return str(candidate) if "://" not in relative else relative

    @property
    def warehouse(self) -> str:
        return self.resolve(self.project.warehouse)

    def copy_path(self, pipeline: PipelineConfig) -> str | None:
        """Where ``cdcreplay archive`` copies a Kafka pipeline's topics (``archive.copy_to``, resolved), or None."""
        return self.resolve(pipeline.archive.copy_to) if pipeline.archive.copy_to else None

    def archive_path(self, pipeline: PipelineConfig) -> str:
        """The archive's resolved path; for layout kafka, the cluster as kafka://host:port[,host:port]."""
        if pipeline.archive.layout == "kafka":
            return "kafka://" + ",".join(pipeline.archive.bootstrap_servers)
        return self.resolve(pipeline.archive.path)


def _resolve_path_options(loaded: LoadedConfig) -> LoadedConfig:
    """Path options (schema files, schema folders) resolved against the config file's folder, as archive paths are."""
    pipelines = []
    for pipeline in loaded.project.pipelines:
        kinds = {name: option.kind for name, option in REGISTRY[pipeline.format].options.items()}
        options = {
            name: loaded.resolve(value) if kinds.get(name) == "path" else value
            for name, value in pipeline.options.items()
        }
        pipelines.append(pipeline.model_copy(update={"options": options}))
    return LoadedConfig(loaded.path, loaded.project.model_copy(update={"pipelines": pipelines}))


def _describe(error: dict) -> str:
    location = ".".join(str(part) for part in error["loc"]) or "(top level)"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        message = "is required but missing; add it"
    elif error["type"] == "extra_forbidden":
        message = "is not a known field; remove it or fix its spelling (see the README's config reference)"
    return f"{location}: {message}"


def load_config(path: str | Path) -> LoadedConfig:
    """Read and validate the pipelines file; raise ConfigError naming the file, field and fix."""
    problem = path_problem(str(path))
    if problem:
        raise ConfigError(f"config {problem}; pass --config (or the `config` parameter) with your pipelines file")
    if not str(path).endswith((".yaml", ".yml")):
        raise ConfigError(
            f"config path {str(path)!r} is not a .yaml or .yml file; pass --config (or the `config` parameter) with "
            "the path of your pipelines file"
        )
    config_path = Path(path).expanduser().resolve()
    if not config_path.is_file():
        raise ConfigError(f"{config_path}: config file not found; pass --config with the path of your pipelines file")
    try:
        document = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{config_path}: not valid YAML ({exc}); fix the syntax") from exc
    if not isinstance(document, dict):
        raise ConfigError(f"{config_path}: expected a mapping with `warehouse` and `pipelines` at the top level")
    try:
        project = ProjectConfig.model_validate(document)
    except ValidationError as exc:
        problems = "\n".join(f"  - {_describe(error)}" for error in exc.errors())
        raise ConfigError(f"{config_path}: invalid pipeline config:\n{problems}") from exc
    return _resolve_path_options(LoadedConfig(config_path, project))
