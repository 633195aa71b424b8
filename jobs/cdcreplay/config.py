"""Pipeline configuration: one YAML file declares every pipeline, validated before any work starts.

No pyspark import here: the Airflow DAG validates the file in a light task before a Spark job is submitted.
Every error names the file, the field and the fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cdcreplay.formats import KNOWN_FORMATS, REGISTRY, option_error

ARCHIVE_LAYOUTS = ("parquet", "jsonl", "kcat")
SPARK_TYPES = re.compile(
    r"^(int|bigint|smallint|tinyint|float|double|string|boolean|binary|date|timestamp|timestamp_ntz"
    r"|decimal\(\s*\d{1,2}\s*,\s*\d{1,2}\s*\))$"
)
# Names that end up in file paths and command lines: letters, digits and a few separators only.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


class ConfigError(ValueError):
    """A configuration or parameter problem, with the place and the fix in the message."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ArchiveConfig(_Strict):
    path: str = Field(description="Folder (or file) holding the archived Kafka records; relative to the config file.")
    layout: Literal["parquet", "jsonl", "kcat"] = Field(
        default="parquet",
        description="parquet: Spark Kafka-source columns; jsonl: the same columns as JSON lines with base64 "
        "key/value; kcat: `kcat -C -J` output lines.",
    )


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

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value):
        if not SAFE_NAME.match(value):
            raise ValueError(
                f"{value!r} is not a safe pipeline name; use letters, digits, '_', '-' and '.', starting with a "
                "letter or digit (it becomes a folder name)"
            )
        return value

    @field_validator("format")
    @classmethod
    def _known_format(cls, value):
        if value not in KNOWN_FORMATS:
            raise ValueError(f"unknown format {value!r}; use one of {', '.join(KNOWN_FORMATS)}")
        return value

    @model_validator(mode="after")
    def _known_options(self):
        for option, value in self.options.items():
            problem = option_error(self.format, option, value)
            if problem:
                raise ValueError(problem)
        return self


class ProjectConfig(_Strict):
    warehouse: str = Field(description="Folder where latest-state tables, run reports and quarantine are written.")
    keep_versions: int = Field(default=3, ge=1, description="Published versions kept per pipeline (older are removed).")
    pipelines: list[PipelineConfig]

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

    def archive_path(self, pipeline: PipelineConfig) -> str:
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
