"""Format registry: a stable id per vendor change format, the module that decodes it, and the options it takes.

Every decoder module has ``decode(records: DataFrame, pipeline: PipelineConfig) -> DataFrame`` returning
``formats.common.DECODED_DDL`` columns; ``record_kind`` routes each row to the changelog, control log or quarantine.
A new format is one module plus one entry in ``REGISTRY``. No pyspark import here: the config validation (and the
Airflow task that runs it) reads this registry without starting Spark.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

OPTION_KINDS = ("bool", "path", "text", "choice")


@dataclass(frozen=True)
class FormatOption:
    """One format option: its kind (``path`` options resolve against the config file's folder) and what it means."""

    kind: str
    help: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormatSpec:
    module: str
    summary: str
    options: dict[str, FormatOption] = field(default_factory=dict)


REGISTRY: dict[str, FormatSpec] = {
    "debezium-json": FormatSpec(
        "cdcreplay.formats.debezium_json",
        "Debezium change events from Kafka Connect's JsonConverter, with or without schemas",
    ),
    "canal-json": FormatSpec(
        "cdcreplay.formats.canal_json",
        "Alibaba DTS Canal JSON and open-source Canal JSON",
        {
            "legacy_swapped": FormatOption(
                "bool", "true for Alibaba DTS instances created before 2022-03-20, whose `data`/`old` are swapped"
            ),
        },
    ),
    # --- Alibaba formats (issue 3): entries below this line ---
    # --- Huawei DRS formats (issue 4): entries below this line ---
    # --- Qlik Replicate and Debezium Avro (issue 5): entries below this line ---
}
KNOWN_FORMATS = tuple(REGISTRY)


def decoder(format_id: str) -> Callable:
    """The decode function registered under ``format_id``."""
    if format_id not in REGISTRY:
        raise KeyError(f"no decoder registered for format {format_id!r}; known formats: {', '.join(KNOWN_FORMATS)}")
    return importlib.import_module(REGISTRY[format_id].module).decode


def option_error(format_id: str, name: str, value) -> str | None:
    """Why ``options.<name>: <value>`` is not valid for ``format_id`` (with the fix), or None when it is."""
    spec = REGISTRY.get(format_id)
    if spec is None:
        return None  # the unknown format is reported on its own
    option = spec.options.get(name)
    if option is None:
        hint = ", ".join(f"{k} ({v.help})" for k, v in spec.options.items()) or "none"
        return f"options.{name} is not an option of {format_id}; options: {hint}"
    if option.kind == "bool" and not isinstance(value, bool):
        return f"options.{name} must be true or false, got {value!r}"
    if option.kind in ("path", "text") and not (isinstance(value, str) and value.strip()):
        return f"options.{name} must be a non-empty text ({option.help})"
    if option.kind == "choice" and value not in option.choices:
        return f"options.{name} must be one of {', '.join(option.choices)}, got {value!r}"
    return None
