"""Format registry: a stable id per vendor change format, the module that decodes it, and the options it takes.

Every decoder module has one signature, ``decode(records, pipeline, *, base_state=None) -> DataFrame``, returning
``formats.common.DECODED_DDL`` columns; ``record_kind`` routes each row to the changelog, control log or quarantine.
``base_state`` is the state the run builds on (None on a full rebuild). Most changes carry whole rows and need nothing
else; a decoder whose changes are patches onto the stored row (DRS DDS: ``$set`` into embedded documents) reads it.
A new format is one module plus one entry in ``REGISTRY``. No pyspark import here: the config validation (and the
Airflow task that runs it) reads this registry without starting Spark.

The package, by role:
- here: one module per vendor format (the registered ones, their ``*_native`` paths through Spark's own readers, and
  ``drs_json``, which the three DRS JSON variants share), and what every decoder shares: ``common`` (the entry and
  decoded-row shapes), ``python_rows`` (decoding record by record in Python), ``routing`` (an entry to its row);
- ``wire/``: bytes and text into structures (Avro framings and schemas, JSON, MongoDB shell syntax, the native JSON
  reader's plumbing);
- ``values/``: a vendor's typed values into canonical text and Spark types;
- ``envelopes/``: message semantics several wires or decoders of one vendor share.
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


def _native_json_reader(takes: str) -> FormatOption:
    """The ``reader`` option of a JSON format with a native path (``formats.wire.native_json``)."""
    return FormatOption(
        "choice",
        f"auto (default), spark or python: spark has Spark's JSON reader decode {takes} and Python the rest, "
        "python decodes every record in Python, auto is spark for a run of at least 500,000 records and python "
        "below (the same rows either way)",
        ("auto", "python", "spark"),
    )


DRS_JSON_READER = _native_json_reader(
    "the row changes of tables without binary or TIMESTAMP columns it can render exactly"
)
REGISTRY: dict[str, FormatSpec] = {
    "debezium-json": FormatSpec(
        "cdcreplay.formats.debezium_json",
        "Debezium change events from Kafka Connect's JsonConverter, with or without schemas",
        {
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's JSON reader decode the row changes it can "
                "render exactly and Python the rest, python decodes every record in Python, auto is spark for a run "
                "of at least 500,000 records and python below (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "canal-json": FormatSpec(
        "cdcreplay.formats.canal_json",
        "Alibaba DTS Canal JSON and open-source Canal JSON",
        {
            "legacy_swapped": FormatOption(
                "bool", "true for Alibaba DTS instances created before 2022-03-20, whose `data`/`old` are swapped"
            ),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's JSON reader decode the row changes it can "
                "render exactly (open-source layout) and Python the rest, python decodes every record in Python, "
                "auto is spark for a run of at least 500,000 records and python below (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "dts-shareplex-json": FormatSpec(
        "cdcreplay.formats.dts_shareplex_json",
        "Alibaba DTS Shareplex JSON (keys and column types from tables.<t>: the format carries neither)",
        {"reader": _native_json_reader("the row changes of configured tables it can render exactly")},
    ),
    "dts-avro": FormatSpec(
        "cdcreplay.formats.dts_avro",
        "Alibaba DTS Avro: raw Avro binary of com.alibaba.dts.formats.avro.Record",
        {
            "writer_schema": FormatOption(
                "path", "DTS's Record.avsc (required): the writer schema of every message, relative to this file"
            ),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's from_avro decode the MySQL row changes it can "
                "render exactly and the control records (needs spark-avro, which set-up fetches) "
                "and Python the rest, python decodes every record with fastavro, auto is spark for a run of at least "
                "1,000,000 records (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "dataworks-json": FormatSpec(
        "cdcreplay.formats.dataworks_json",
        "Alibaba DataWorks Kafka JSON (payload.before/after.dataColumn, UPDATE_BEFOR/UPDATE_AFTER pairs)",
        {
            "time_zone": FormatOption(
                "text",
                "time zone DataWorks turned DATE/DATETIME wall clocks into epoch ms in, e.g. +08:00 or "
                "Asia/Shanghai (default UTC)",
            ),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's JSON reader decode the inserts, deletes, "
                "update pairs and transaction messages it can render exactly and Python the rest, python decodes "
                "every record in Python, auto is spark for a run of at least 700,000 records and python below (the "
                "same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "drs-json-mysql": FormatSpec(
        "cdcreplay.formats.drs_json_mysql",
        "Huawei DRS JSON for MySQL / GaussDB(for MySQL) (canal-like; full before image in `old`, DELETE row in `old`)",
        {"reader": DRS_JSON_READER},
    ),
    "drs-json-c": FormatSpec(
        "cdcreplay.formats.drs_json_c",
        "Huawei DRS JSON-C for MySQL / GaussDB(for MySQL) (DELETE row in `data`, TIMESTAMP as wall-clock text)",
        {
            "reader": DRS_JSON_READER,
            "timestamp_zone": FormatOption(
                "text",
                "time zone of the wall-clock text DRS writes for MySQL TIMESTAMP columns, e.g. Asia/Shanghai "
                "(default UTC)",
            ),
        },
    ),
    "drs-json-rdbms": FormatSpec(
        "cdcreplay.formats.drs_json_rdbms",
        "Huawei DRS JSON for Oracle / PostgreSQL / GaussDB / SQL Server (`columnType`, `schema`, `opType`)",
        {"reader": DRS_JSON_READER},
    ),
    "drs-dds-json": FormatSpec(
        "cdcreplay.formats.drs_dds_json",
        "Huawei DRS JSON for DDS (MongoDB): shell-syntax documents, $set/$unset applied to the stored document",
    ),
    "drs-avro": FormatSpec(
        "cdcreplay.formats.drs_avro",
        "Huawei DRS Avro, read with the writer schema the config names (the vendor's schema is not public)",
        {
            "writer_schema": FormatOption("path", ".avsc of the DRS Record schema (the vendor ships it as record.rar)"),
            "framing": FormatOption(
                "choice",
                "auto (by the first bytes), raw, confluent (00 + schema id) or single-object (C3 01 + fingerprint)",
                ("auto", "raw", "confluent", "single-object"),
            ),
            "registry_dir": FormatOption("path", "folder of <schema id>.avsc for Confluent-framed values"),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's from_avro decode the row changes of configured "
                "tables it can render exactly (needs spark-avro, which set-up fetches, and a writer schema of the "
                "shape drs_avro_native reads) and Python the rest, python decodes every record with fastavro, auto "
                "is spark for a run of at least 200,000 records (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "debezium-avro": FormatSpec(
        "cdcreplay.formats.debezium_avro",
        "Debezium change events from Confluent's AvroConverter (Confluent-framed Avro keys and values)",
        {
            "schema_registry_dir": FormatOption("path", "folder of <schema id>.avsc writer schemas"),
            "schema_registry_export": FormatOption(
                "path", "schema-registry export file: JSON array or JSON lines of {id, schema}"
            ),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's from_avro decode the row changes it can render "
                "exactly (needs spark-avro, which set-up fetches) and Python the rest, python decodes every record "
                "in Python, auto is spark for a run of at least 100,000 records (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "qlik-json": FormatSpec(
        "cdcreplay.formats.qlik_json",
        "Qlik Replicate / Talend Data Integration JSON messages, bare or in the atMSG envelope (DT and MD)",
        {
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's JSON reader decode the data messages it can render "
                "exactly and Python the rest, python decodes every record in Python, auto is spark for a run of at "
                "least 1,000,000 records and python below (the same rows either way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
    "qlik-avro": FormatSpec(
        "cdcreplay.formats.qlik_avro",
        "Qlik Replicate / Talend Data Integration Avro: atMSG envelopes (DT and MD) or Confluent-framed DataRecords",
        {
            "schema_registry_dir": FormatOption("path", "folder of <schema id>.avsc (Confluent-framed messages)"),
            "schema_registry_export": FormatOption(
                "path", "schema-registry export file: JSON array or JSON lines of {id, schema}"
            ),
            "reader": FormatOption(
                "choice",
                "auto (default), spark or python: spark has Spark's from_avro decode the atMSG data messages it can "
                "render exactly (needs spark-avro, which set-up fetches) and Python the rest, python decodes every "
                "record with fastavro, auto is spark for a run of at least 1,000,000 records (the same rows either "
                "way)",
                ("auto", "python", "spark"),
            ),
        },
    ),
}
KNOWN_FORMATS = tuple(REGISTRY)


def decoder_module(format_id: str):
    """The module registered under ``format_id``: ``decode``, and for a format Spark's JSON reader can decode
    (``formats.native_json``) ``reads_natively``, ``decode_natively`` and ``decode_in_python`` as well."""
    if format_id not in REGISTRY:
        raise KeyError(f"no decoder registered for format {format_id!r}; known formats: {', '.join(KNOWN_FORMATS)}")
    return importlib.import_module(REGISTRY[format_id].module)


def decoder(format_id: str) -> Callable:
    """The decode function registered under ``format_id``."""
    return decoder_module(format_id).decode


def check_config(pipeline) -> None:
    """The format's own checks of a pipeline's config, for what option kinds cannot say (keys a format does not carry,
    a writer schema that must parse, a time zone that must exist). A decoder module that needs them defines
    ``check_config(pipeline)`` raising ``ConfigError``; ``run_spec.build_run_spec`` runs it before any record is read,
    so the Airflow validate task and the CLI refuse such a config up front. Imports the decoder module (pyspark's
    Python package, no Spark)."""
    check = getattr(importlib.import_module(REGISTRY[pipeline.format].module), "check_config", None)
    if check is not None:
        check(pipeline)


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
