"""Archive layouts read to the same records; selection, manifest, gaps, duplicates and every error path."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from archive_helpers import Record, write_parquet
from pyspark.sql import functions as F

from cdcreplay import archive
from cdcreplay.run_spec import OffsetRange
from cdcreplay.spark import (
    HUGE_METHOD_LIMIT,
    MAX_OPEN_FILES,
    MIN_SPLITS,
    SPLITS_PER_CORE,
    no_methods_too_long_to_compile,
    one_file_per_folder,
    session_settings,
    spread_file_splits,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def sample_records() -> list[Record]:
    records = []
    for partition in (0, 1):
        for offset in range(5):
            records.append(
                Record(
                    "shop",
                    partition,
                    offset,
                    f'{{"p": {partition}, "o": {offset}}}',
                    key=f"k{offset}",
                    timestamp=T0.replace(hour=offset),
                    headers=[("h", f"v{offset}")],
                )
            )
    records.append(Record("other", 0, 0, "{}", timestamp=T0))
    return records


def as_tuples(frame):
    return sorted(
        (r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, tuple((h.key, h.value) for h in r.headers or ()))
        for r in frame.collect()
    )


def write_jsonl(records, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for r in records:
            b64 = lambda v: None if v is None else base64.b64encode(v.encode()).decode()  # noqa: E731
            out.write(
                json.dumps(
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp.isoformat().replace("+00:00", "Z"),
                        "timestampType": 0,
                        "key": b64(r.key),
                        "value": b64(r.value),
                        "headers": [{"key": k, "value": b64(v)} for k, v in r.headers],
                    }
                )
                + "\n"
            )


def write_kcat(records, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for r in records:
            headers = [x for k, v in r.headers for x in (k, v)]
            line = {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "tstype": "create",
                "ts": int(r.timestamp.timestamp() * 1000),
                "broker": 0,
                "key": r.key,
                "payload": r.value,
            }
            if headers:
                line["headers"] = headers
            out.write(json.dumps(line) + "\n")


def test_three_layouts_read_to_identical_records(spark, tmp_path):
    records = sample_records()
    write_parquet(records, tmp_path / "pq" / "topic=shop" / "part-0.parquet")
    write_jsonl(records, tmp_path / "jl" / "dt=2026-01-01" / "records.jsonl")
    write_kcat(records, tmp_path / "kc" / "dump.json")
    frames = {
        layout: archive.read_archive(spark, archive.archive_files(str(tmp_path / folder), layout), layout)
        for layout, folder in (("parquet", "pq"), ("jsonl", "jl"), ("kcat", "kc"))
    }
    expected = as_tuples(frames["parquet"])
    assert len(expected) == 11
    assert expected[0] == ("other", 0, 0, T0.replace(tzinfo=None), None, b"{}", ())
    assert as_tuples(frames["jsonl"]) == expected
    assert as_tuples(frames["kcat"]) == expected


def test_selection_by_topic_time_and_offsets(spark, tmp_path):
    path = write_parquet(sample_records(), tmp_path / "a.parquet")
    raw = archive.read_archive(spark, [str(path)], "parquet")
    by_time = archive.Selection(topics=("shop",), start=T0.replace(hour=1), end=T0.replace(hour=3))
    got = sorted((r.partition, r.offset) for r in archive.select_records(raw, by_time).collect())
    assert got == [(0, 1), (0, 2), (1, 1), (1, 2)]  # start inclusive, end exclusive
    by_offsets = archive.Selection(offsets=(OffsetRange("shop", 1, 3, 5),))
    got = sorted((r.topic, r.partition, r.offset) for r in archive.select_records(raw, by_offsets).collect())
    assert got == [("shop", 1, 3), ("shop", 1, 4)]


def test_manifest_counts_duplicates_once_and_reports_gaps(spark, tmp_path):
    records = [Record("t", 0, o, "{}") for o in (0, 1, 2, 2, 5, 6, 9)]
    path = write_parquet(records, tmp_path / "a.parquet")
    raw = archive.read_archive(spark, [str(path)], "parquet")
    extents = archive.partition_extents(raw)
    gaps = archive.offset_gaps(raw)
    manifest = archive.build_manifest([str(path)], extents, gaps, archive.Selection())
    assert manifest["records"] == 7 and manifest["distinct_records"] == 6 and manifest["duplicates"] == 1
    assert manifest["missing_offsets"] == 4
    assert gaps == [
        {"topic": "t", "partition": 0, "from_offset": 3, "to_offset": 4},
        {"topic": "t", "partition": 0, "from_offset": 7, "to_offset": 8},
    ]
    assert archive.deduplicate(raw).count() == 6


def test_missing_path_names_the_config_field(tmp_path):
    with pytest.raises(archive.ArchiveError, match=r"does not exist; fix archive.path"):
        archive.archive_files(str(tmp_path / "nope"), "parquet")


def test_empty_archive_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(archive.ArchiveError, match=r"holds no parquet files .*check archive.path and archive.layout"):
        archive.archive_files(str(tmp_path / "empty"), "parquet")


def test_parquet_without_kafka_columns_is_a_clear_error(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"id": [1], "payload": ["x"]}), path)
    with pytest.raises(
        archive.ArchiveError, match=r"lacks column\(s\) topic, partition, offset, timestamp, key, value"
    ):
        archive.read_archive(spark, [str(path)], "parquet")


def test_offset_range_outside_the_archive_is_rejected(spark, tmp_path):
    path = write_parquet(sample_records(), tmp_path / "a.parquet")
    extents = archive.partition_extents(archive.read_archive(spark, [str(path)], "parquet"))
    with pytest.raises(
        archive.ArchiveError, match=r"offsets.shop.0: requested \[10, 20\) but the archive holds offsets 0..4"
    ):
        archive.check_offset_ranges((OffsetRange("shop", 0, 10, 20),), extents)
    with pytest.raises(archive.ArchiveError, match=r"offsets.shop.7: .*partitions present: \[0, 1\]"):
        archive.check_offset_ranges((OffsetRange("shop", 7, 0, 1),), extents)
    with pytest.raises(archive.ArchiveError, match=r"the topic is not in the archive"):
        archive.check_offset_ranges((OffsetRange("nope", 0, 0, 1),), extents)
    archive.check_offset_ranges((OffsetRange("shop", 0, 3, 50),), extents)  # overlapping is fine


def test_an_archive_of_one_file_is_spread_over_every_core(spark, tmp_path):
    """One Parquet file of one row group is one scan task: decoding it would use one core of the machine."""
    path = write_parquet(sample_records(), tmp_path / "one.parquet")
    raw = archive.read_archive(spark, [str(path)], "parquet")
    assert raw.rdd.getNumPartitions() == 1

    spread = archive.spread_over_cores(raw, 2)

    assert spread.rdd.getNumPartitions() == 2
    assert as_tuples(spread) == as_tuples(raw)  # the same records, none lost or doubled
    assert archive.spread_over_cores(spread, 2) is spread  # enough partitions already: no shuffle added


def test_a_nights_records_in_the_newest_file_are_spread_over_every_core(spark, tmp_path):
    """A night selects the newest records: of a scan of many splits, the newest file's alone holds them, and that one
    task would decode the whole night."""
    for hour in range(4):  # an archive of four hourly files, each its own split
        records = [Record("t", 0, hour * 10 + i, "{}", timestamp=T0.replace(hour=hour)) for i in range(10)]
        write_parquet(records, tmp_path / "archive" / f"{hour}.parquet")
    with session_settings(spark, {"spark.sql.files.openCostInBytes": str(128 * 1024 * 1024)}):  # files unpacked
        raw = archive.read_archive(spark, archive.archive_files(str(tmp_path / "archive"), "parquet"), "parquet")
        assert raw.rdd.getNumPartitions() == 4
        night = archive.select_records(raw, archive.Selection(start=T0.replace(hour=3)))
        extents, splits = archive.extents_and_splits(night)
        assert [(e["records"], e["min_offset"]) for e in extents] == [(10, 30)]
        assert splits == 1

        spread = archive.spread_over_cores(night, 2, splits)
        assert spread.rdd.getNumPartitions() == 2
        assert as_tuples(spread) == as_tuples(night)
        assert archive.extents_and_splits(spread)[1] == 2  # both cores decode
        # The whole archive: every split holds records; the scan is decoded as it is.
        assert archive.extents_and_splits(raw)[1] == 4
        assert archive.spread_over_cores(raw, 2, 4) is raw


def test_a_session_cuts_scans_into_four_splits_per_core_unless_it_sets_its_own_minimum(spark):
    # A few large archive files would otherwise be read by fewer tasks than cores (3 tasks on 2 cores at 2M events).
    assert spark.conf.get(MIN_SPLITS) == str(SPLITS_PER_CORE * spark.sparkContext.defaultParallelism)
    with session_settings(spark, {MIN_SPLITS: "3"}):
        spread_file_splits(spark)
        assert spark.conf.get(MIN_SPLITS) == "3"


def test_a_write_into_a_few_folders_keeps_a_file_open_per_folder_and_the_session_settings_after(spark, tmp_path):
    # The decode stage's write into record_kind folders, without Spark's sort by folder: the same rows in the same
    # folders, one file per task and folder; the session's own settings come back after the block.
    planned = spark.conf.get("spark.sql.optimizer.plannedWrite.enabled")
    rows = spark.range(3000).select(
        F.col("id"), F.element_at(F.array(*map(F.lit, "abc")), (F.col("id") % 3 + 1).cast("int")).alias("kind")
    )
    rows = rows.repartition(2)
    with one_file_per_folder(spark, 3):
        assert spark.conf.get(MAX_OPEN_FILES) == "4"  # Spark sorts the rest of a task's rows once it has opened 4
        assert spark.conf.get("spark.sql.optimizer.plannedWrite.enabled") == "false"
        rows.write.partitionBy("kind").parquet(str(tmp_path / "out"))
    assert spark.conf.get(MAX_OPEN_FILES) == "0"
    assert spark.conf.get("spark.sql.optimizer.plannedWrite.enabled") == planned
    for kind in "abc":
        assert len(list((tmp_path / "out" / f"kind={kind}").glob("*.parquet"))) == 2
    written = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(map(tuple, written.select("id", "kind").collect())) == sorted(map(tuple, rows.collect()))


def test_a_stage_too_long_for_the_jit_runs_without_whole_stage_code_inside_the_block(spark):
    # The native decoders' pass: a method HotSpot would not compile (over 8,000 bytes) makes Spark generate each
    # operator's code apart instead; outside the block the session's own limit (Spark's 64 KB) is back.
    limit = spark.conf.get(HUGE_METHOD_LIMIT)
    with no_methods_too_long_to_compile(spark):
        assert spark.conf.get(HUGE_METHOD_LIMIT) == "8000"
        wide = spark.range(10).select(*[(F.col("id") * i + F.lit(i)).alias(f"c{i}") for i in range(300)])
        assert wide.agg(F.sum("c299")).first()[0] == sum(n * 299 + 299 for n in range(10))
    assert spark.conf.get(HUGE_METHOD_LIMIT) == limit


def test_a_driver_started_here_maps_the_class_archive_set_up_wrote(spark):
    # scripts/setup.sh writes the archive (cdcreplay_lab.class_archive); a JVM that cannot use it would start without
    # it and say nothing, so the driver's memory maps are what show it is used.
    from cdcreplay.jars import jars_dir
    from cdcreplay.jvm import class_archive
    from cdcreplay_lab.class_archive import driver_maps

    archive = class_archive(jars_dir())
    assert archive.is_file(), (
        f"{archive} is missing: scripts/setup.sh writes it (python -m cdcreplay_lab.class_archive)"
    )
    assert driver_maps(spark, archive)


def test_the_drivers_tests_launch_compile_little_and_the_suites_session_compiles_as_a_users_run_does(spark):
    # conftest.py: a launched driver replays a thousand records and exits (C1 alone and no generated code spare the
    # busy cores); the suite's session decodes for the whole run, with the optimizing compiler and generated code.
    import os

    from conftest import SHORT_JVM_OPTIONS

    assert set(SHORT_JVM_OPTIONS) <= set(os.environ["SPARK_SUBMIT_OPTS"].split())
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(SHORT_JVM_OPTIONS).isdisjoint(runtime.getInputArguments())
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
    # A driver started as the tests start theirs takes the options: Spark reads its `-Dspark.*` properties as settings.
    probe = (
        "from cdcreplay.spark import build_session; s = build_session('probe', master='local[1]'); "
        "args = list(s.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()); "
        "print('-XX:TieredStopAtLevel=1' in args, s.conf.get('spark.sql.codegen.factoryMode'), "
        "s.conf.get('spark.sql.codegen.wholeStage'))"
    )
    launched = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert launched.returncode == 0, launched.stderr[-2000:]
    assert launched.stdout.split()[-3:] == ["True", "NO_CODEGEN", "false"]


def test_set_up_keeps_an_archive_made_from_the_same_jdk_pyspark_and_jars(tmp_path, monkeypatch, capsys):
    from cdcreplay_lab import class_archive

    monkeypatch.setenv("CDCREPLAY_JARS_DIR", str(tmp_path))
    (tmp_path / "driver-classes.jsa").write_bytes(b"archive")
    (tmp_path / "driver-classes.json").write_text(json.dumps(class_archive.made_from()), encoding="utf-8")
    assert class_archive.main([]) == 0
    assert capsys.readouterr().out == f"class archive: {tmp_path / 'driver-classes.jsa'} is up to date\n"
    assert (tmp_path / "driver-classes.jsa").read_bytes() == b"archive"


def test_set_up_goes_on_without_an_archive_it_could_not_write(tmp_path, monkeypatch, capsys):
    # A stale archive (made from other jars) is removed; without Delta's jars here the driver that would write the new
    # one cannot start, and set-up says so and goes on (exit 0) with no archive.
    from cdcreplay_lab import class_archive

    monkeypatch.setenv("CDCREPLAY_JARS_DIR", str(tmp_path))
    (tmp_path / "driver-classes.jsa").write_bytes(b"stale")
    (tmp_path / "driver-classes.json").write_text(json.dumps({"jars": {"old.jar": 1}}), encoding="utf-8")
    assert class_archive.main([]) == 0
    error = capsys.readouterr().err
    assert error.startswith("class archive: not written, drivers start without one:\n")
    assert "Delta Lake's jars are missing" in error
    assert sorted(path.name for path in tmp_path.iterdir()) == []


@pytest.mark.parametrize("folder", ["jars", "my jars"])
def test_the_driver_options_name_the_class_archive_only_where_there_is_one(spark, tmp_path, folder):
    from cdcreplay.jvm import JVM_OPTIONS, driver_java_options

    jars = tmp_path / folder
    jars.mkdir()
    assert driver_java_options(jars) == JVM_OPTIONS
    (jars / "driver-classes.jsa").write_bytes(b"")
    options = driver_java_options(jars)
    # Spark splits the option string as it launches the driver: the archive's path stays one option.
    split = spark._jvm.org.apache.spark.util.Utils.splitCommandString(options).mkString("\n").split("\n")
    assert split == [
        *JVM_OPTIONS.split(),
        f"-XX:SharedArchiveFile={jars / 'driver-classes.jsa'}",
        "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off",
    ]


def test_a_local_session_runs_the_throughput_garbage_collector(spark):
    # JVM_OPTIONS reach the driver this package starts (the tests' session is one): Parallel GC's collectors are
    # "PS Scavenge" and "PS MarkSweep"; G1, the JVM's default, would name "G1 Young Generation".
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]
