"""`cdcreplay benchmark` measures the real job on every format: each archive gets the config a reader of it needs, and
a small measured run reports the records the simulator wrote, the issue's target and the DuckDB reference's rows."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from cdcreplay.config import load_config
from cdcreplay.warehouse import read_table
from cdcreplay_lab import benchmark_keyed
from cdcreplay_lab.benchmark import (
    JSON_TARGET_EVENTS_PER_S,
    KEYED_PIPELINE,
    PYTHON_TARGET_EVENTS_PER_S,
    _config,
    earlier_full_rebuild,
    keyed_source,
    local_broker,
    measure,
    measure_from_kafka,
    measure_incremental,
    render,
    simulated,
)
from cdcreplay_lab.simulator.encoders import FORMATS

EVENTS = 60


def test_every_simulated_format_gets_an_archive_and_a_config_its_reader_accepts(tmp_path):
    assert len(FORMATS) == 12  # `--formats all`: every format but drs-dds-json, which the simulator does not write
    for fmt in FORMATS:
        source = simulated(tmp_path, fmt, EVENTS)
        assert source.path == tmp_path / "archives" / f"{fmt}-{EVENTS}"
        pipeline = load_config(_config(tmp_path, fmt, source)).project.pipelines[0]
        assert pipeline.format == fmt
        assert pipeline.archive.path == str(source.path)
    # The formats whose messages lack what a reader needs get it from the simulator's settings.
    avro = load_config(_config(tmp_path, "dts-avro", simulated(tmp_path, "dts-avro", EVENTS)))
    assert avro.project.pipelines[0].options["writer_schema"].endswith(".avsc")
    shareplex = load_config(_config(tmp_path, "dts-shareplex-json", simulated(tmp_path, "dts-shareplex-json", EVENTS)))
    assert all(table.primary_key for table in shareplex.project.pipelines[0].tables.values())


@pytest.mark.parametrize(
    ("fmt", "target", "has_reference"),
    [("debezium-json", JSON_TARGET_EVENTS_PER_S, True), ("dts-avro", PYTHON_TARGET_EVENTS_PER_S, False)],
)
def test_a_measured_run_reports_what_the_job_did(spark, tmp_path, fmt, target, has_reference):
    result = measure(spark, tmp_path, fmt, EVENTS, reconcile=False)

    stamp = (tmp_path / "archives" / f"{fmt}-{EVENTS}" / "_BENCHMARK.json").read_text()
    assert f'"format": "{fmt}"' in stamp
    assert result["format"] == fmt
    assert result["row_events"] == EVENTS
    assert result["records"] >= EVENTS  # every row event is a record (Debezium adds transaction markers and tombstones)
    assert result["quarantined"] == 0
    assert set(result["stages_s"]) == {"read", "decode", "compact", "type", "audit", "publish"}
    assert result["events_per_s"] == round(result["records"] / result["seconds"])
    assert result["target_events_per_s"] == target
    assert result["ratio_to_target"] == round(result["events_per_s"] / target, 3)
    assert sum(result["tables"].values()) > 0
    if has_reference:  # DuckDB's plain decode + compaction keeps the same live rows as the job
        assert result["duckdb"]["latest_rows"] == sum(result["tables"].values())
        assert "duckdb_mismatch" not in result
    else:
        assert "duckdb" not in result
    table = render([result])
    assert fmt in table.splitlines()[2]
    assert "x target" in table.splitlines()[0]


def test_a_run_from_a_broker_reports_beside_the_archive_run_and_publishes_the_same_tables(spark, tmp_path):
    """`--from-kafka`: the archive is produced to a local broker at its own offsets and replayed from there; the row
    says so and the tables equal the archive run's, provenance included."""
    archive_run = measure(spark, tmp_path, "debezium-json", EVENTS, reconcile=False)
    with local_broker(tmp_path) as bootstrap:
        from_kafka = measure_from_kafka(spark, tmp_path, archive_run, reconcile=False, bootstrap=bootstrap)
    assert not (tmp_path / "kafka").exists()  # the broker's log goes with it

    assert from_kafka["source"] == "kafka" and "source" not in archive_run
    assert from_kafka["pipeline"] == f"{archive_run['pipeline']}_kafka"
    assert from_kafka["records"] == archive_run["records"]
    assert from_kafka["tables"] == archive_run["tables"]
    assert from_kafka["differing_from_archive"] == []
    assert from_kafka["duckdb"]["latest_rows"] == archive_run["duckdb"]["latest_rows"]
    lines = render([archive_run, from_kafka]).splitlines()
    assert lines[2].startswith("debezium-json ") and lines[3].startswith("debezium-json (kafka) ")


def test_a_nightly_run_of_the_newest_records_publishes_what_the_full_rebuild_did(spark, tmp_path):
    """`--incremental --nightly-events N`: the state is built from all but the newest ~N records, the nightly run
    replays those onto it, and its tables are compared with the full rebuild's. `--full-rebuild-from` takes that full
    rebuild from an earlier result file instead of running it again."""
    events = 400
    full = measure(spark, tmp_path, "canal-json", events, reconcile=False)
    result_file = tmp_path / "result-earlier.json"
    result_file.write_text(json.dumps({"results": [full]}))
    earlier = earlier_full_rebuild(result_file, "canal-json", events)
    assert earlier == {**full, "full_rebuild_from": str(result_file)}

    incremental = measure_incremental(spark, tmp_path, "canal-json", events, earlier, nightly_events=50)

    assert incremental["identical_to_full_rebuild"], incremental["differing_tables"]
    # records sharing the cut's Kafka timestamp all go to the nightly run, so it may take a few more than asked
    assert 50 <= incremental["nightly_records"] < 70
    assert incremental["state_records_before"] + incremental["nightly_records"] == full["records"]
    assert incremental["state_keys_before"] > 0
    assert incremental["speedup_vs_full"] == round(full["seconds"] / incremental["nightly_s"], 2)


def test_an_earlier_full_rebuild_is_refused_when_it_does_not_match_or_its_tables_are_gone(tmp_path):
    table = tmp_path / "warehouse" / "shop.orders"
    table.mkdir(parents=True)
    result = {"format": "canal-json", "row_events": 400, "table_paths": {"shop.orders": str(table)}}
    result_file = tmp_path / "result-earlier.json"
    result_file.write_text(json.dumps({"results": [result]}))

    with pytest.raises(ValueError, match="has no full rebuild of canal-json at 2,000 row events; give --formats and"):
        earlier_full_rebuild(result_file, "canal-json", 2000)
    with pytest.raises(ValueError, match="has no full rebuild of debezium-json at 400 row events"):
        earlier_full_rebuild(result_file, "debezium-json", 400)
    # A --state-keys archive's rebuild is not the simulator's archive of the same format and size.
    keyed = {**result, "format": "dts-shareplex-json", "pipeline": "bench_keyed_dts_shareplex_json"}
    keyed_file = tmp_path / "result-keyed.json"
    keyed_file.write_text(json.dumps({"results": [keyed]}))
    with pytest.raises(ValueError, match="has no full rebuild of dts-shareplex-json at 400 row events"):
        earlier_full_rebuild(keyed_file, "dts-shareplex-json", 400)
    table.rmdir()
    with pytest.raises(ValueError, match=r"the tables of that full rebuild are gone \(.*shop.orders\); run without"):
        earlier_full_rebuild(result_file, "canal-json", 400)
    result_file.write_text("{not json")
    with pytest.raises(ValueError, match=r"--full-rebuild-from: cannot read .*result-earlier\.json: "):
        earlier_full_rebuild(result_file, "canal-json", 400)


def test_a_night_onto_a_state_of_given_keys_publishes_what_the_full_rebuild_did(spark, tmp_path):
    """`--incremental --state-keys N`: Spark writes a Shareplex archive of N keys loaded and one night of changes, each
    on its own key; the nightly run onto the loaded state publishes what the full rebuild of the archive does."""
    keys, nightly = 2_000, 200
    source = keyed_source(spark, tmp_path, keys, nightly)
    written = {path: path.stat().st_mtime_ns for path in source.path.glob("*.parquet")}
    assert keyed_source(spark, tmp_path, keys, nightly) == source  # kept and reused, not written again
    assert {path: path.stat().st_mtime_ns for path in source.path.glob("*.parquet")} == written
    raw = spark.read.parquet(str(source.path)).orderBy("offset")
    assert raw.count() == keys + nightly
    # As DTS writes them: an insert carries the whole row, an update only the changed columns in `data` and the key
    # and the changed columns' old values in `key`, a delete the whole row; one transaction per record.
    messages = {
        row.offset: json.loads(row.value)
        for row in raw.where(F.col("offset").isin(1, keys, keys + 1, keys + 2)).collect()
    }
    assert messages[1] == {
        "meta": {
            **messages[1]["meta"],
            "op": "ins",
            "scn": str(benchmark_keyed.FIRST_SCN + 1),
            "trans": "0.0.1",
            "seq": 1,
            "size": 1,
            "table": "bench.items",
            "idx": "1/1",
        },
        "data": {"id": "1", "name": "item 1", "amount": "80.19", "note": "n1"},
    }
    assert messages[keys]["meta"]["op"] == "del" and messages[keys]["data"]["id"] == "0"
    assert messages[keys + 1]["meta"]["op"] == "ins" and messages[keys + 1]["data"]["id"] == str(keys + 1)
    updated = messages[keys + 2]
    assert (updated["meta"]["op"], updated["data"], updated["key"]) == (
        "upd",
        {"amount": "1585.80", "note": "changed at night"},
        {"id": "20", "amount": "1584.80", "note": "n20"},
    )

    full = measure(spark, tmp_path, "dts-shareplex-json", keys + nightly, reconcile=False, source=source)
    assert (full["records"], full["quarantined"], full["pipeline"]) == (keys + nightly, 0, KEYED_PIPELINE)
    assert full["tables"] == {"bench.items": keys}  # 20 keys deleted, 20 new ones inserted
    table = read_table(spark, str(tmp_path / "warehouse"), KEYED_PIPELINE, "bench.items")
    night = table.where(F.col("note") == "changed at night")
    assert night.count() == 160  # every update completed from the stored row: name kept, amount + 1
    assert night.where(F.col("name") != F.concat(F.lit("item "), F.col("id").cast("string"))).count() == 0

    incremental = measure_incremental(
        spark, tmp_path, "dts-shareplex-json", keys + nightly, full, nightly_events=nightly, source=source
    )
    assert incremental["identical_to_full_rebuild"], incremental["differing_tables"]
    # the cut is a percentile of the Kafka timestamps: the last loaded record may fall on the nightly side
    assert incremental["nightly_records"] in (nightly, nightly + 1)
    assert incremental["state_records_before"] + incremental["nightly_records"] == keys + nightly
    assert incremental["state_keys_before"] == incremental["state_records_before"]  # one key per loaded record


def test_a_keyed_archive_needs_a_key_for_each_night_record(spark, tmp_path):
    with pytest.raises(ValueError, match="the night touches 200 distinct existing keys at most: --state-keys must be"):
        benchmark_keyed.write_keyed_archive(spark, tmp_path / "archive", 100, 200)
    with pytest.raises(ValueError, match="3 nights of 50 records each change keys no other night changes only up to "):
        benchmark_keyed.write_keyed_archive(spark, tmp_path / "archive", 100, 50, nights=3)
    assert not (tmp_path / "archive").exists()


def test_nights_in_a_row_each_go_onto_the_state_the_night_before_built(spark, tmp_path):
    """`--state-keys N --nights K`: K nights a day apart, no key changed by two of them; run one after the other,
    each onto the state the night before built, the last publishes what the full rebuild of the archive does."""
    keys, nightly, nights = 300, 30, 3
    source = keyed_source(spark, tmp_path, keys, nightly, nights=nights)
    raw = spark.read.parquet(str(source.path))
    assert raw.count() == keys + nightly * nights
    value = F.col("value").cast("string")
    night_records = raw.where(F.col("offset") >= keys).select(
        F.floor((F.col("offset") - keys) / nightly).alias("night"),
        "offset",
        "timestamp",
        # an update names its key in `key`, an insert and a delete in `data`
        F.coalesce(F.get_json_object(value, "$.key.id"), F.get_json_object(value, "$.data.id")).alias("id"),
        F.get_json_object(value, "$.meta.scn").alias("scn"),
    )
    keys_of = {
        row.night: set(row.ids)
        for row in night_records.groupBy("night").agg(F.collect_list("id").alias("ids")).collect()
    }
    assert sorted(keys_of) == [0, 1, 2]
    assert all(len(ids) == nightly for ids in keys_of.values())  # each record of a night on a key of its own
    assert not (keys_of[0] & keys_of[1]) and not (keys_of[0] & keys_of[2]) and not (keys_of[1] & keys_of[2])
    firsts = {row.night: row for row in night_records.where((F.col("offset") - keys) % nightly == 0).collect()}
    assert [firsts[n].timestamp - firsts[0].timestamp for n in (1, 2)] == [
        benchmark_keyed.NIGHT_SPACING,
        2 * benchmark_keyed.NIGHT_SPACING,
    ]
    assert firsts[2].scn == str(benchmark_keyed.FIRST_SCN + firsts[2].offset)

    events = keys + nightly * nights
    full = measure(spark, tmp_path, "dts-shareplex-json", events, reconcile=False, source=source)
    assert full["tables"] == {"bench.items": keys}  # each night deletes 3 keys and inserts 3 new ones
    incremental = measure_incremental(
        spark, tmp_path, "dts-shareplex-json", events, full, nightly_events=nightly, source=source, nights=nights
    )
    assert incremental["identical_to_full_rebuild"], incremental["differing_tables"]
    counted = [night["records"] for night in incremental["nights"]]
    # the cut is a percentile of the Kafka timestamps: the last loaded record may fall on the first night's side
    assert counted[0] in (nightly, nightly + 1) and counted[1:] == [nightly, nightly]
    assert incremental["state_records_before"] + sum(counted) == events
    assert (incremental["nightly_records"], incremental["nightly_s"]) == (
        counted[0],
        incremental["nights"][0]["seconds"],
    )
