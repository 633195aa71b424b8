"""The pipelines file and run parameters are validated before any work, with errors naming field and fix."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from cdcreplay.config import ConfigError, load_config
from cdcreplay.formats import REGISTRY, decoder
from cdcreplay.run_spec import OffsetRange, RunSpec, build_run_spec, safe_run_id

VALID = """
warehouse: wh
pipelines:
  - name: shop
    format: canal-json
    archive: {path: archive, layout: kcat}
    topics: [dts.shop]
    tables:
      shop.orders:
        primary_key: [order_id]
        column_types: {amount: "decimal(10,2)"}
    options: {legacy_swapped: true}
"""


def write(tmp_path, text):
    path = tmp_path / "pipelines.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_valid_config_resolves_paths_against_its_folder(tmp_path):
    config = load_config(write(tmp_path, VALID))
    pipeline = config.project.pipeline("shop")
    assert config.archive_path(pipeline) == str(tmp_path / "archive")
    assert config.warehouse == str(tmp_path / "wh")
    assert pipeline.tables["shop.orders"].column_types == {"amount": "decimal(10,2)"}


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (VALID.replace("canal-json", "canal-xml"), r"pipelines.0.format: unknown format 'canal-xml'; use one of"),
        (
            VALID.replace("layout: kcat", "layout: csv"),
            r"pipelines.0.archive.layout: Input should be 'parquet', 'jsonl' or 'kcat'",
        ),
        (
            VALID.replace("    archive: {path: archive, layout: kcat}\n", ""),
            r"pipelines.0.archive: is required but missing; add it",
        ),
        (
            VALID.replace("topics:", "topicz:"),
            r"pipelines.0.topicz: is not a known field; remove it or fix its spelling",
        ),
        (VALID.replace("name: shop", "name: ../etc"), r"pipelines.0.name: '../etc' is not a safe pipeline name"),
        (VALID.replace('"decimal(10,2)"', "money"), r"column 'amount': type 'money' is not supported"),
        (
            VALID.replace("legacy_swapped", "swapped"),
            r"options.swapped is not an option of canal-json; options: legacy_swapped",
        ),
        (VALID.replace("primary_key: [order_id]", "primary_key: []"), r"primary_key must list at least one column"),
        (
            VALID.replace("    topics:", "    tombstone_retention_days: 0\n    topics:"),
            r"pipelines.0.tombstone_retention_days: Input should be greater than or equal to 1",
        ),
        (
            VALID.replace("legacy_swapped: true", "legacy_swapped: 'yes'"),
            r"options.legacy_swapped must be true or false, got 'yes'",
        ),
        (
            VALID.replace("format: canal-json", "format: debezium-json").replace(
                "legacy_swapped: true", "reader: fast"
            ),
            r"options.reader must be one of auto, python, spark, got 'fast'",
        ),
        (
            VALID.replace("    topics:", "    deletion_vectors: sometimes\n    topics:"),
            r"pipelines.0.deletion_vectors: Input should be a valid boolean",
        ),
        (
            "keep_decoded_runs: 0\n" + VALID,
            r"keep_decoded_runs: Input should be greater than or equal to 1",
        ),
        (VALID + VALID.split("pipelines:\n")[1], r"pipeline name 'shop' is declared twice"),
        ("warehouse: [unclosed", r"not valid YAML"),
        ("- just a list", r"expected a mapping with `warehouse` and `pipelines`"),
    ],
)
def test_config_errors_name_the_field_and_the_fix(tmp_path, broken, message):
    path = write(tmp_path, broken)
    with pytest.raises(ConfigError, match=message) as error:
        load_config(path)
    assert str(path) in str(error.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found; pass --config"):
        load_config(tmp_path / "nope.yaml")


def test_unknown_pipeline_lists_the_declared_ones(tmp_path):
    config = load_config(write(tmp_path, VALID))
    with pytest.raises(ConfigError, match=r"pipeline 'nope' is not declared in the config; declared pipelines: shop"):
        config.project.pipeline("nope")


def test_run_spec_round_trips_and_normalises_times(tmp_path):
    config = load_config(write(tmp_path, VALID))
    spec = build_run_spec(
        config,
        run_id="scheduled__2026-01-02T00:00:00+00:00",
        pipelines=["shop"],
        start="2026-01-02",
        end="2026-01-03T00:00:00Z",
        offsets='{"dts.shop": {"0": {"start": 5, "until": 10}}}',
    )
    assert spec.run_id == "scheduled__2026-01-02T00_00_00_00_00"
    assert spec.start == "2026-01-02T00:00:00+00:00" and spec.end == "2026-01-03T00:00:00+00:00"
    assert spec.offsets == (OffsetRange("dts.shop", 0, 5, 10),)
    assert RunSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pipelines": ["nope"]}, r"parameter pipelines: 'nope' is not declared in .*; declared: shop"),
        ({"start": "yesterday"}, r"parameter start: 'yesterday' is not an ISO-8601 date or time; use e.g. 2026-01-31"),
        ({"start": "2026-01-03", "end": "2026-01-02"}, r"start 2026-01-03T00:00:00\+00:00 must be before end"),
        ({"offsets": "{not json"}, r"parameter offsets: not valid JSON"),
        (
            {"offsets": {"t": {"x": {"start": 0, "until": 1}}}},
            r"parameter offsets.t.x: partition must be a whole number",
        ),
        ({"offsets": {"t": {"0": {"from": 0}}}}, r'parameter offsets.t.0: expected \{"start": <first offset>'),
        ({"offsets": {"t": {"0": {"start": 5, "until": 5}}}}, r"need whole numbers with 0 <= start < until"),
        ({"tables": ["shop.orders; rm -rf /"]}, r"parameter tables: 'shop.orders; rm -rf /' is not a valid name"),
        ({"dry_run": "yes"}, r"dry_run, full_rebuild and resume must be true or false"),
        ({"resume": "yes"}, r"dry_run, full_rebuild and resume must be true or false"),
    ],
)
def test_run_parameter_errors(tmp_path, params, message):
    config = load_config(write(tmp_path, VALID))
    with pytest.raises(ConfigError, match=message):
        build_run_spec(config, run_id="r", **params)


def test_run_id_without_usable_characters():
    with pytest.raises(ConfigError, match=r"run_id '::' has no usable characters"):
        safe_run_id("::")


FORMAT_CHECKS = [
    (
        "dts-shareplex-json",
        "",
        "pipeline p: dts-shareplex-json messages carry no primary key; declare tables.<SCHEMA.TABLE>.primary_key and "
        "tables.<SCHEMA.TABLE>.column_types (every column) for each replicated table",
    ),
    (
        "dts-shareplex-json",
        "tables: {HR.EMP: {primary_key: [ID]}}",
        "pipeline p: tables.HR.EMP.column_types is missing; dts-shareplex-json updates carry only the changed columns",
    ),
    ("dts-avro", "", "pipeline p: dts-avro needs options.writer_schema, the path of DTS's Record.avsc"),
    (
        "dts-avro",
        "options: {writer_schema: nope.avsc}",
        "pipeline p: options.writer_schema: Avro schema file {dir}/nope.avsc does not exist; fix the path",
    ),
    ("drs-avro", "options: {writer_schema: broken.avsc}", "pipeline p: options.writer_schema: Avro schema file "),
    (
        "dataworks-json",
        "options: {time_zone: Mars/Olympus}",
        "pipeline p: options.time_zone 'Mars/Olympus' is not a time zone; use an offset like '+08:00'",
    ),
    (
        "drs-json-c",
        "options: {timestamp_zone: Mars/Olympus}",
        "pipeline p: options.timestamp_zone 'Mars/Olympus' is not a time zone; use a region like 'Asia/Shanghai'",
    ),
    (
        "debezium-avro",
        "options: {schema_registry_export: missing.json}",
        "pipeline p: schema-registry export {dir}/missing.json does not exist; fix options.schema_registry_export",
    ),
    (
        "qlik-avro",
        "options: {schema_registry_export: missing.json}",
        "pipeline p: schema-registry export {dir}/missing.json does not exist; fix options.schema_registry_export",
    ),
]


@pytest.mark.parametrize(("fmt", "extra", "message"), FORMAT_CHECKS)
def test_a_format_specific_config_problem_is_refused_before_any_work(tmp_path, fmt, extra, message):
    """What only the format knows (keys it does not carry, a writer schema, a zone) is checked with the run's
    parameters -- the Airflow validate task and the CLI refuse the run before a record is read."""
    (tmp_path / "broken.avsc").write_text('{"type": "record"', encoding="utf-8")
    text = f"warehouse: wh\npipelines:\n  - name: p\n    format: {fmt}\n    archive: {{path: archive}}\n"
    config = load_config(write(tmp_path, text + (f"    {extra}\n" if extra else "")))
    with pytest.raises(ConfigError) as error:
        build_run_spec(config, run_id="r1")
    assert message.format(dir=tmp_path) in str(error.value)


def test_format_checks_cover_only_the_pipelines_a_run_selects(tmp_path):
    text = """
    warehouse: wh
    pipelines:
      - {name: good, format: canal-json, archive: {path: archive}}
      - {name: bad, format: dts-avro, archive: {path: archive}}
    """
    config = load_config(write(tmp_path, text))
    assert build_run_spec(config, run_id="r1", pipelines=["good"]).pipelines == ("good",)
    with pytest.raises(ConfigError, match=r"pipeline bad: dts-avro needs options\.writer_schema"):
        build_run_spec(config, run_id="r1")


def test_cdcreplay_validate_runs_the_format_checks_too(tmp_path, capsys):
    from cdcreplay.cli import main

    text = "warehouse: wh\npipelines:\n  - {name: p, format: drs-json-c, archive: {path: archive}, options: {timestamp_zone: Mars/Olympus}}\n"
    assert main(["validate", "--config", str(write(tmp_path, text))]) == 2
    assert "pipeline p: options.timestamp_zone 'Mars/Olympus' is not a time zone" in capsys.readouterr().err


def test_every_registered_decoder_has_the_one_decode_signature():
    """The pipeline calls every format's decoder the same way (``formats``): records, the pipeline, and the state the
    run builds on as a keyword that only patch-applying decoders (DRS DDS) read."""
    for format_id in REGISTRY:
        parameters = inspect.signature(decoder(format_id)).parameters
        assert list(parameters) == ["records", "pipeline", "base_state"], format_id
        assert parameters["base_state"].kind is inspect.Parameter.KEYWORD_ONLY, format_id
        assert parameters["base_state"].default is None, format_id
