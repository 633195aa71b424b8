"""What one run does: which pipelines and tables, which slice of the archive, and how.

Built from the Airflow Params form (or the command line), validated up front with errors that name the parameter
and the fix, then passed to the Spark jobs as one JSON argument. No pyspark import here.
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from cdcreplay.config import (
    KAFKA_TOPIC,
    KAFKA_TOPIC_RULE,
    SAFE_NAME,
    SAFE_NAME_RULE,
    ConfigError,
    LoadedConfig,
    PipelineConfig,
)
from cdcreplay.contracts import RUN_ID_MAX, RUN_ID_UNSAFE
from cdcreplay.formats import check_config
from cdcreplay.warehouse import PipelinePaths, read_current


@dataclass(frozen=True)
class OffsetRange:
    """Offsets of one topic partition: `start` inclusive, `until` exclusive (Kafka's convention)."""

    topic: str
    partition: int
    start: int
    until: int


@dataclass(frozen=True)
class RunSpec:
    config: str
    run_id: str
    pipelines: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    start: str | None = None  # ISO-8601 UTC, inclusive
    end: str | None = None  # ISO-8601 UTC, exclusive
    offsets: tuple[OffsetRange, ...] = field(default_factory=tuple)
    dry_run: bool = False
    full_rebuild: bool = False
    # A Kafka pipeline (archive.layout: kafka) goes on from the offsets its published state has read up to, whatever
    # start/end say (they bound only a pipeline's first such run): what the nightly schedule asks for.
    resume: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def offsets_of(self, topics) -> tuple[OffsetRange, ...]:
        """The offset ranges of the spec that fall in ``topics`` (all of them when a pipeline lists no topics)."""
        return tuple(r for r in self.offsets if not topics or r.topic in topics)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """The spec a job is given on its command line. ``build_run_spec`` validated it in the DAG, but a hand-made
        ``--run-spec`` reaches the jobs directly: the names that become paths are checked again."""
        data = json.loads(text)
        run_id = data.get("run_id")
        if not (isinstance(run_id, str) and run_id and _cleaned_run_id(run_id) == run_id):
            raise ConfigError(
                f"run spec: run_id {run_id!r} is not a safe run id; use letters, digits, '_', '-' and '.' (at most "
                f"{RUN_ID_MAX}), as build_run_spec makes them"
            )
        data["pipelines"] = _names(data.get("pipelines"), "pipelines")
        data["tables"] = _names(data.get("tables"), "tables")
        data["offsets"] = tuple(OffsetRange(**item) for item in data.get("offsets") or ())
        for offset_range in data["offsets"]:
            _check_topic(offset_range.topic)
        return cls(**data)

    @property
    def start_time(self) -> datetime | None:
        return _parse_time(self.start, "start") if self.start else None

    @property
    def end_time(self) -> datetime | None:
        return _parse_time(self.end, "end") if self.end else None


def _cleaned_run_id(run_id: str) -> str:
    # Cut to length before trimming, so that a cleaned id cleans to itself (RunSpec.from_json relies on it).
    return RUN_ID_UNSAFE.sub("_", run_id)[:RUN_ID_MAX].strip("._-")


def safe_run_id(run_id: str) -> str:
    """Airflow run ids carry ':' and '+'; folder names should not."""
    cleaned = _cleaned_run_id(run_id)
    if not cleaned:
        raise ConfigError(f"run_id {run_id!r} has no usable characters; use letters, digits, '_', '-' or '.'")
    return cleaned


def _parse_time(value: str, name: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"parameter {name}: {value!r} is not an ISO-8601 date or time; use e.g. 2026-01-31 or 2026-01-31T00:00:00Z"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _parse_offsets(value) -> tuple[OffsetRange, ...]:
    """Accept {"topic": {"0": {"start": 0, "until": 100}}} (a dict or its JSON text)."""
    if value in (None, "", {}):
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"parameter offsets: not valid JSON ({exc.msg}); {OFFSETS_HINT}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"parameter offsets: expected an object keyed by topic; {OFFSETS_HINT}")
    ranges = []
    for topic, partitions in value.items():
        _check_topic(topic)
        if not isinstance(partitions, dict) or not partitions:
            raise ConfigError(f"parameter offsets.{topic}: expected an object keyed by partition; {OFFSETS_HINT}")
        for partition, bounds in partitions.items():
            where = f"parameter offsets.{topic}.{partition}"
            try:
                partition_number = int(partition)
            except ValueError as exc:
                raise ConfigError(f"{where}: partition must be a whole number; {OFFSETS_HINT}") from exc
            if not isinstance(bounds, dict) or set(bounds) != {"start", "until"}:
                raise ConfigError(f'{where}: expected {{"start": <first offset>, "until": <end, exclusive>}}')
            start, until = bounds["start"], bounds["until"]
            if not (isinstance(start, int) and isinstance(until, int)) or start < 0 or until <= start:
                raise ConfigError(
                    f"{where}: need whole numbers with 0 <= start < until, got start={start} until={until}"
                )
            ranges.append(OffsetRange(topic, partition_number, start, until))
    return tuple(ranges)


def _check_topic(topic) -> None:
    if not isinstance(topic, str) or not KAFKA_TOPIC.match(topic) or topic in (".", ".."):
        raise ConfigError(f"parameter offsets: {topic!r} is not a Kafka topic name; {KAFKA_TOPIC_RULE}")


OFFSETS_HINT = 'e.g. {"shop.orders": {"0": {"start": 0, "until": 1000}}} (start inclusive, until exclusive)'


def _names(value, parameter: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"parameter {parameter}: expected a list of names")
    for item in value:
        if not SAFE_NAME.match(item):
            raise ConfigError(f"parameter {parameter}: {item!r} is not a valid name; {SAFE_NAME_RULE}")
    return tuple(value)


def _known_tables(config: LoadedConfig, pipeline: PipelineConfig) -> set[str]:
    """The tables a pipeline knows without reading its archive: those the config declares under ``tables:`` and those
    its last run published (``_CURRENT.json``). A warehouse this process cannot read (a URI, a folder not mounted
    here, an unreadable pointer) adds none."""
    known = set(pipeline.tables)
    if "://" not in config.warehouse:
        with suppress(OSError, ValueError):
            known |= set((read_current(PipelinePaths(config.warehouse, pipeline.name)) or {}).get("tables", {}))
    return known


def _check_tables_are_known(config: LoadedConfig, pipelines, tables: tuple[str, ...]) -> None:
    """A table filter naming no table of the selected pipelines would build nothing, silently: refuse it up front.

    Before a pipeline's first publish, and with no table declared, nothing is known and every name passes (the
    tables are only in the archive's messages, which only the Spark job reads).
    """
    known = {p.name: _known_tables(config, p) for p in config.project.pipelines if not pipelines or p.name in pipelines}
    if not tables or not any(known.values()):
        return
    for table in tables:
        if not any(table in names for names in known.values()):
            listed = "; ".join(f"{name}: {_first(names) or 'none known yet'}" for name, names in known.items())
            raise ConfigError(
                f"parameter tables: {table!r} is not a table of the selected pipelines ({listed}); fix the name, "
                f"leave tables empty to build every table, or, for a table new to the archive, declare it under the "
                f"pipeline's `tables:` in {config.path} (`{table}: {{}}` is enough)"
            )


def _first(names: set[str], limit: int = 10) -> str:
    shown = sorted(names)
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def build_run_spec(
    config: LoadedConfig,
    *,
    run_id: str,
    pipelines=None,
    tables=None,
    start=None,
    end=None,
    offsets=None,
    dry_run: bool = False,
    full_rebuild: bool = False,
    resume: bool = False,
) -> RunSpec:
    """Validate run parameters against the config; raise ConfigError naming the parameter and the fix."""
    pipeline_names = _names(pipelines, "pipelines")
    declared = {p.name for p in config.project.pipelines}
    for name in pipeline_names:
        if name not in declared:
            known = ", ".join(sorted(declared))
            raise ConfigError(f"parameter pipelines: {name!r} is not declared in {config.path}; declared: {known}")
    for pipeline in config.project.pipelines:
        if not pipeline_names or pipeline.name in pipeline_names:
            check_config(pipeline)  # the format's own checks (declared keys, writer schemas, zones): before any work
    start_text = _parse_time(str(start), "start").isoformat() if start else None
    end_text = _parse_time(str(end), "end").isoformat() if end else None
    if start_text and end_text and start_text >= end_text:
        raise ConfigError(f"parameters start/end: start {start_text} must be before end {end_text} (end is exclusive)")
    if not all(isinstance(flag, bool) for flag in (dry_run, full_rebuild, resume)):
        raise ConfigError("parameters dry_run, full_rebuild and resume must be true or false")
    table_names = _names(tables, "tables")
    _check_tables_are_known(config, pipeline_names, table_names)
    return RunSpec(
        config=str(config.path),
        run_id=safe_run_id(run_id),
        pipelines=pipeline_names,
        tables=table_names,
        start=start_text,
        end=end_text,
        offsets=_parse_offsets(offsets),
        dry_run=dry_run,
        full_rebuild=full_rebuild,
        resume=resume,
    )


def archived_pipelines(config: LoadedConfig, spec: RunSpec) -> list[PipelineConfig]:
    """The pipelines of ``spec`` (all when it names none) that archive their topics: ``archive.layout: kafka`` with
    ``archive.copy_to`` (cdcreplay.archiver). The DAG's archive task copies these and is skipped when there are none;
    no pyspark is needed to tell."""
    names = spec.pipelines or tuple(p.name for p in config.project.pipelines)
    chosen = [config.project.pipeline(name) for name in names]
    return [p for p in chosen if p.archive.layout == "kafka" and p.archive.copy_to]
