"""Great Expectations suites from expectations/*.json, run on Spark DataFrames, with Data Docs."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from functools import reduce

import pytest
from pyspark.testing import assertDataFrameEqual

from cdcreplay import quality
from cdcreplay.reconcile import DIFF_DDL

DIFF_ROW = {
    "table_id": "shop.public.orders",
    "epoch_no": 2,
    "differing_columns": [],
    "snapshot_topic": "cdc.orders",
    "snapshot_partition": 0,
    "snapshot_offset": 20,
    "snapshot_position": "[20]",
    "incremental_op": "update",
    "incremental_topic": "cdc.orders",
    "incremental_partition": 0,
    "incremental_offset": 10,
    "incremental_position": "[10]",
}


def diff_frame(spark, rows):
    """A diff table (reconcile.DIFF_DDL) from (key, status) pairs."""
    full = [{**DIFF_ROW, "key": key, "status": status} for key, status in rows]
    return spark.createDataFrame(full, DIFF_DDL)


def test_templates_render_per_key_column():
    config = quality.load_suite_config("latest_state")
    assert quality.render_expectations(config, {"key_columns": ["tenant", "id"]}) == [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "tenant"}, "meta": config_meta(config, 0)},
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}, "meta": config_meta(config, 0)},
        {
            "type": "expect_compound_columns_to_be_unique",
            "kwargs": {"column_list": ["tenant", "id"]},
            "meta": config_meta(config, 1),
        },
    ]
    # GX needs two or more columns for compound uniqueness: a single key column is checked with plain uniqueness.
    single = quality.render_expectations(config, {"key_columns": ["id"]})
    assert [(e["type"], e["kwargs"]) for e in single] == [
        ("expect_column_values_to_not_be_null", {"column": "id"}),
        ("expect_column_values_to_be_unique", {"column": "id"}),
    ]
    with pytest.raises(ValueError, match=r"latest_state\.json: expectation #0 repeats over \$key_columns"):
        quality.render_expectations(config, {})


def config_meta(config, index):
    return config["expectations"][index]["meta"]


def test_suite_files_are_valid_gx_suites():
    for name in ("reconciliation_diff", "latest_state"):
        config = json.loads(quality.suite_path(name).read_text())
        assert config["name"] == name
        assert all({"type", "kwargs"} <= set(e) for e in config["expectations"])


def test_diff_suite_passes_and_builds_data_docs(spark, tmp_path):
    docs = tmp_path / "docs"
    df = diff_frame(spark, [('["1"]', "match"), ('["2"]', "in_flight")])
    result = quality.run_suite(df, "reconciliation_diff", data_docs_dir=docs)
    assert result.success is True
    assert result.failed == []
    assert result.statistics["evaluated_expectations"] == 3
    assert result.data_docs_index == str(docs / "index.html")
    assert (docs / "index.html").is_file()
    assert list((docs / "validations" / "reconciliation_diff").rglob("*.html"))


def test_diff_suite_fails_on_a_mismatch_and_names_the_expectation(spark, tmp_path):
    # Deliberately failing: a mismatch row, a missing key and a duplicate (table_id, epoch_no, key).
    df = diff_frame(spark, [('["1"]', "match"), ('["2"]', "mismatch"), ('["2"]', "match"), (None, "match")])
    result = quality.run_suite(df, "reconciliation_diff", data_docs_dir=tmp_path / "docs")
    assert result.success is False
    assert result.failed == [
        "expect_column_values_to_be_in_set(column=status): 1 unexpected of 4 (mismatch: 1)",
        "expect_column_values_to_not_be_null(column=key): 1 unexpected of 4",
        "expect_compound_columns_to_be_unique(columns=table_id,epoch_no,key): 2 unexpected of 4"
        ' ((shop.public.orders, 2, ["2"]): 2)',
    ]
    assert result.statistics["unsuccessful_expectations"] == 3
    assert (tmp_path / "docs" / "index.html").is_file()


def test_failing_values_from_a_sample_are_not_shown_as_totals(spark, tmp_path):
    # GX lists the values of the first 20 failing rows only: with 25 failing rows the figures are a sample's.
    df = diff_frame(spark, [(f'["{n}"]', "mismatch" if n % 5 else "missing_in_snapshot") for n in range(25)])
    result = quality.run_suite(df, "reconciliation_diff")
    [line] = result.failed
    assert line.startswith("expect_column_values_to_be_in_set(column=status): 25 unexpected of 25 (in a sample of 20: ")
    sampled = dict(part.split(": ") for part in line.split("in a sample of 20: ")[1].rstrip(")").split(", "))
    assert set(sampled) <= {"mismatch", "missing_in_snapshot"} and sum(map(int, sampled.values())) == 20


def test_a_suite_validates_only_the_columns_it_reads(spark):
    diff_suite = quality.render_expectations(quality.load_suite_config("reconciliation_diff"))
    assert quality.columns_read(diff_suite) == ["status", "key", "table_id", "epoch_no"]
    df = diff_frame(spark, [('["1"]', "match")])
    assert quality._narrowed(df, diff_suite).columns == ["status", "key", "table_id", "epoch_no"]

    pair = {"type": "expect_column_pair_values_to_be_equal", "kwargs": {"column_A": "a.b", "column_B": "c`d"}}
    assert quality.columns_read([pair]) == ["a.b", "c`d"]
    hostile = spark.createDataFrame([(1, 2, 3)], "`a.b` int, `c``d` int, e int")
    narrowed = quality._narrowed(hostile, [pair])  # names with dots and backticks kept whole
    assertDataFrameEqual(narrowed, spark.createDataFrame([(1, 2)], "`a.b` int, `c``d` int"))

    # Whatever may read other columns keeps the whole frame: table-level expectations, row conditions, and
    # expectations that name no column (or a column the frame lacks: GX reports that in its own words).
    table_level = {"type": "expect_table_column_count_to_equal", "kwargs": {"value": 14}}
    conditional = {
        "type": "expect_column_values_to_not_be_null",
        "kwargs": {"column": "key", "row_condition": 'col("status")=="match"', "condition_parser": "spark"},
    }
    nameless = {"type": "expect_column_values_to_be_custom", "kwargs": {}}
    for suite in ([*diff_suite, table_level], [conditional], [nameless]):
        assert quality.columns_read(suite) is None
        assert quality._narrowed(df, suite).columns == df.columns
    absent = [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "absent"}}]
    assert quality._narrowed(df, absent).columns == df.columns


def _plan_above_cache(df) -> str:
    """The physical plan of ``df`` down to its scan of a cache (the cached plan itself is printed below it)."""
    return df._jdf.queryExecution().executedPlan().toString().split("InMemoryTableScan")[0]


def test_a_suite_with_a_uniqueness_check_caches_its_frame_clustered_by_the_key(spark):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    diff_suite = quality.render_expectations(quality.load_suite_config("reconciliation_diff"))
    df = diff_frame(spark, [(f'["{n % 10}"]', "match") for n in range(12)])  # keys 0 and 1 twice
    narrowed = quality._narrowed(df, diff_suite)
    clustered = quality._clustered_for_uniqueness(narrowed, diff_suite)
    assertDataFrameEqual(clustered, narrowed)  # the same columns and rows

    # GX's Spark query for compound uniqueness, as it writes it: the rows not all NULL in the columns (its default
    # ignore_row_if), a count over a window partitioned by a struct of the columns.
    columns = ["table_id", "epoch_no", "key"]
    unique = F.count(F.lit(1)).over(Window.partitionBy(F.struct(*columns))) <= 1

    def duplicates(frame):
        domain = frame.filter(~reduce(lambda a, b: a & b, [F.col(c).isNull() for c in columns]))
        return domain.withColumn("__unexpected", ~unique).filter(F.col("__unexpected"))

    with quality._cached_while_validated(clustered, compute_first=True):
        # Over the clustered cache, computed before the query is planned, the window needs no shuffle or sort.
        plan = _plan_above_cache(duplicates(clustered))
        assert "Window" in plan and "Exchange" not in plan and "Sort" not in plan
        assert sorted(row.key for row in duplicates(clustered).collect()) == ['["0"]', '["0"]', '["1"]', '["1"]']
    assert not clustered.storageLevel.useMemory and not clustered.storageLevel.useDisk  # not left cached
    with quality._cached_while_validated(narrowed, compute_first=True):
        assert "Exchange hashpartitioning" in _plan_above_cache(duplicates(narrowed))  # unclustered: a shuffle

    # A frame the caller cached stays cached.
    mine = df.persist()
    try:
        with quality._cached_while_validated(mine, compute_first=True):
            pass
        assert mine.storageLevel.useMemory
    finally:
        mine.unpersist()

    # GX caches every frame it validates and never drops it: a suite drops it once GX is done. Here the suite reads
    # every column, so the frame GX caches is this one.
    keys = spark.createDataFrame([(1, "a"), (2, "a")], "id int, tenant string")
    assert quality.validate_latest_state(keys, ["tenant", "id"]).success
    assert not keys.storageLevel.useMemory and not keys.storageLevel.useDisk

    # One key column: GX windows by the column itself. Names with dots and backticks are taken whole.
    single = [{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "a.b"}}]
    hostile = spark.createDataFrame([(1, 2), (1, 3), (2, 4)], "`a.b` int, `c``d` int")
    assertDataFrameEqual(quality._clustered_for_uniqueness(hostile, single), hostile)
    # No uniqueness check, or one on a column the frame lacks: the frame as it is.
    absent = [{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "absent"}}]
    for suite in (absent, diff_suite[:1]):
        assert quality._clustered_for_uniqueness(df, suite) is df


def test_store_files_a_killed_run_left_half_written_are_written_again(spark, tmp_path):
    # GX writes its store files in place: SIGKILL in the middle of a write leaves one empty or cut short, and a re-run
    # of the same run id validates into the same folder.
    docs = tmp_path / "docs"
    df = diff_frame(spark, [('["1"]', "match")])
    quality.run_suite(df, "reconciliation_diff", data_docs_dir=docs)
    [suite_file] = (docs / "_gx" / "expectations").rglob("*.json")
    [result_file] = (docs / "_gx" / "validations").rglob("*.json")
    suite_file.write_text("")
    result_file.write_text('{"success": tr')

    again = quality.run_suite(df, "reconciliation_diff", data_docs_dir=docs)
    assert again.success is True
    assert json.loads(suite_file.read_text())["name"] == "reconciliation_diff"
    assert not result_file.exists()  # the re-run's result is stored under its own run time
    assert all(json.loads(path.read_text()) for path in (docs / "_gx" / "validations").rglob("*.json"))
    assert (docs / "index.html").is_file()


def test_latest_state_suite_per_table(spark, tmp_path):
    docs = tmp_path / "docs"
    good = spark.createDataFrame([("a", 1, "x"), ("a", 2, "y"), ("b", 1, "z")], "tenant string, id int, v string")
    passed = quality.validate_latest_state(good, ["tenant", "id"], data_docs_dir=docs, table_id="shop.public.t")
    assert (passed.success, passed.suite_name) == (True, "latest_state.shop.public.t")

    bad = spark.createDataFrame([(1, "x"), (1, "y"), (None, "z")], "id int, v string")
    failed = quality.validate_latest_state(bad, ["id"], data_docs_dir=docs, table_id="shop.public.u")
    assert failed.success is False
    assert [f.split(":")[0] for f in failed.failed] == [
        "expect_column_values_to_not_be_null(column=id)",
        "expect_column_values_to_be_unique(column=id)",
    ]
    # Both tables' results are in the one Data Docs site.
    index = (docs / "index.html").read_text()
    assert "latest_state.shop.public.t" in index and "latest_state.shop.public.u" in index


def test_a_runner_validates_several_tables_at_once_each_with_its_own_suite(spark, tmp_path):
    # A run's audit validates its tables several at a time in one GX context. Table ids that differ only in empty
    # dotted parts would share one store file (GX files "a.b" as a/b.json) and so one suite.
    good = spark.createDataFrame([(1, "x"), (2, "y")], "id int, v string")
    bad = spark.createDataFrame([(1, "x"), (1, "y")], "id int, v string")
    tables = {".": good, "..": bad, "_": good, "shop.t": bad, "shop..t": good}
    runner = quality.SuiteRunner(data_docs_dir=tmp_path / "docs")
    validations = [quality.latest_state_validation(df, ["id"], table_id=t, rows=2) for t, df in tables.items()]
    results = runner.validate_all(validations)
    assert [(r.suite_name, r.success) for r in results] == [
        ("latest_state._._", True),
        ("latest_state._._._", False),
        ("latest_state._", True),
        ("latest_state.shop.t", False),
        ("latest_state.shop._.t", True),
    ]
    assert results[1].failed == ["expect_column_values_to_be_unique(column=id): 2 unexpected of 2 (1: 2)"]
    assert runner.build_data_docs() == str((tmp_path / "docs" / "index.html").resolve())
    # A table without key columns cannot be checked for unique keys: refused before any validation runs.
    with pytest.raises(ValueError, match=r"^the latest_state suite needs the key columns of table shop\.t$"):
        quality.latest_state_validation(good, [], table_id="shop.t")


# Key columns of every type the driver-side engine takes, each with a NULL, a duplicate and the values pandas' own
# dtypes would get wrong: integers beyond 2^53 next to a NULL (float64 would make them equal), NaN (pandas' isnull
# would call it NULL), the widest decimal, empty strings and bytes, the first and last dates.
HOSTILE_KEYS = {
    "long": [9007199254740993, 9007199254740992, None, None, 1, 1],
    "double": [float("nan"), float("nan"), None, 1.0],
    "decimal(38,3)": [Decimal("1.500"), Decimal("1.500"), None, Decimal("99999999999999999999999999999999999.999")],
    "string": ["a", "A", "é", "é", None, "", ""],
    "binary": [b"\x00", b"\x00", b"", None],
    "date": [date(1, 1, 1), date(9999, 12, 31), date(9999, 12, 31), None],
    "boolean": [True, True, None, False],
}


def test_a_small_frame_is_validated_on_the_driver_with_the_same_results_as_on_spark(spark):
    # Collected to the driver, a small table's suite is one Spark job instead of a dozen: GX's pandas engine must then
    # answer exactly as its Spark engine does, failure lines and counts included. rows=None keeps a frame on Spark.
    frames = {
        kind: spark.createDataFrame([(v,) for v in values], f"id {kind}") for kind, values in HOSTILE_KEYS.items()
    }
    frames["compound"] = spark.createDataFrame(
        [(1, "a"), (1, "a"), (1, None), (1, None), (None, None), (None, None), (2, "b")], "k1 long, k2 string"
    )
    runner = quality.SuiteRunner()
    validations = []
    for kind, df in frames.items():
        keys = df.columns
        on_driver = quality.latest_state_validation(df, keys, table_id=f"{kind}.driver", rows=df.count())
        on_spark = quality.latest_state_validation(df, keys, table_id=f"{kind}.spark", rows=None)
        validations += [on_driver, on_spark]
    registered = [runner._register(v) for v in validations]
    assert [r.local for r in registered] == [True, False] * len(frames)
    results = [quality.SuiteRunner._run(r) for r in registered]
    for kind, driver, on_spark in zip(frames, results[::2], results[1::2], strict=True):
        assert driver.success is False, kind
        assert (driver.failed, driver.statistics, driver.results) == (
            on_spark.failed,
            on_spark.statistics,
            on_spark.results,
        ), kind
    assert results[0].failed == [
        "expect_column_values_to_not_be_null(column=id): 2 unexpected of 6",
        "expect_column_values_to_be_unique(column=id): 2 unexpected of 6 (1: 2)",
    ]

    # The reconciliation diff's suite too (a set of statuses, a compound key of strings and an integer).
    df = diff_frame(spark, [('["1"]', "match"), ('["2"]', "mismatch"), ('["2"]', "match"), (None, "match")])
    assert (
        quality.run_suite(df, "reconciliation_diff", rows=4).failed
        == quality.run_suite(df, "reconciliation_diff").failed
    )


def test_only_small_frames_of_engine_neutral_checks_and_types_are_validated_on_the_driver(spark):
    ids = spark.createDataFrame([(1, datetime(2024, 1, 1))], "id long, at timestamp")
    latest_state = quality.render_expectations(quality.load_suite_config("latest_state"), {"key_columns": ["id"]})

    def on_driver(expectations, rows=1, df=ids):
        validation = quality.Validation(df, "latest_state", rows=rows)
        return quality._validated_locally(validation, expectations, quality._narrowed(df, expectations))

    assert on_driver(latest_state)
    assert on_driver(latest_state, rows=quality.LOCAL_MAX_ROWS)
    assert not on_driver(latest_state, rows=quality.LOCAL_MAX_ROWS + 1)
    assert not on_driver(latest_state, rows=None)  # its size unknown
    # A regular expression would be Java's on Spark and Python's on the driver; a condition is one engine's syntax.
    assert not on_driver(
        [*latest_state, {"type": "expect_column_values_to_match_regex", "kwargs": {"column": "id", "regex": "^1"}}]
    )
    assert not on_driver(
        [{"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id", "row_condition": "id>0"}}]
    )
    # Timestamps: pandas renders them with their UTC offset, Spark in the session's time zone.
    assert not on_driver([{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "at"}}])
    # A column the frame lacks is left for GX's Spark engine to report, as before.
    assert not on_driver([{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "absent"}}])
    assert not on_driver([])


def test_invalid_suite_names_file_and_expectation(spark, tmp_path):
    (tmp_path / "broken.json").write_text(
        json.dumps({"name": "broken", "expectations": [{"type": "expect_column_values_to_be_bogus", "kwargs": {}}]})
    )
    df = diff_frame(spark, [('["1"]', "match")])
    with pytest.raises(ValueError, match=r"broken\.json: expectation #0 expect_column_values_to_be_bogus is invalid"):
        quality.run_suite(df, "broken", expectations_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="expectation suite 'absent' not found"):
        quality.run_suite(df, "absent", expectations_dir=tmp_path)


def test_great_expectations_is_imported_in_the_background_once(tmp_path):
    """A run starts the slow GX import early on a daemon thread; it runs once per process and loads GX for real."""
    import subprocess
    import sys

    program = (
        "import sys\n"
        "from cdcreplay import quality\n"
        "assert 'great_expectations' not in sys.modules\n"
        "quality.import_in_background()\n"
        "first = quality._importer\n"
        "quality.import_in_background()\n"
        "assert quality._importer is first, 'a second call starts no second import'\n"
        "first.join(timeout=120)\n"
        "import great_expectations\n"
        "print(great_expectations.__version__, first.name)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.24.1", "import-great-expectations"]
