"""Shared fixtures: one SparkSession for the whole run (cold start costs ~8 s), paths to test data; the test tiers."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # keep Spark on loopback
# py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

# The tiers (README, "Development"): every test gets exactly one of these markers, so `-m` picks a tier.
#   unit    no Spark, no service: config, contracts, registry, value rules, the import graph
#   spark   one shared SparkSession: compaction, reconciliation, state, publishing, explain, archive reading
#   formats the decoders against real messages and simulated histories: conformance, truth, fuzz, vendor formats
#   system  real services and whole stacks: Airflow, the cluster, the browser, crash safety, compose, S3, Kafka
FORMAT_TESTS = {
    "test_alibaba_formats", "test_alibaba_truth", "test_canal_key_change", "test_conformance", "test_debezium_avro",
    "test_debezium_connectors", "test_debezium_python", "test_dts_avro", "test_fuzz_decoders", "test_huawei_dds",
    "test_huawei_formats", "test_mongo_shell", "test_native_avro", "test_native_canal", "test_native_decoding",
    "test_native_drs", "test_native_shareplex", "test_python_decoding", "test_qlik", "test_truth",
    "test_value_decoding",
}  # fmt: skip
SYSTEM_TESTS = {
    "test_airflow_run", "test_backfill", "test_benchmark_run", "test_cluster", "test_compose", "test_crash_safety",
    "test_kafka_source", "test_quickstart_demo", "test_s3", "test_trigger_form",
}  # fmt: skip
TIERS = ("unit", "spark", "formats", "system")


def tier_of(item) -> str:
    module = item.path.stem
    if module in SYSTEM_TESTS or item.get_closest_marker("airflow"):
        return "system"
    if module in FORMAT_TESTS:
        return "formats"
    return "spark" if "spark" in item.fixturenames else "unit"


# scripts/test.sh runs the suite on two pytest-xdist workers: in one process the system tests' waits on subprocesses
# (spark-submit, Airflow, servers) left a core idle, and two workers took the whole suite from 68 to 52 minutes.
# `--dist loadfile` keeps a module on one worker, so its module-scoped fixtures (an Airflow stack, a simulated
# history, a cluster) are built once (pytest-xdist's `loadgroup` cannot group on pytest 9: the node id it renames is
# no longer the one pytest reports). The slow tiers are handed out first, so the long modules do not end the run alone.
SLOWEST_TIER_FIRST = ("system", "formats", "spark", "unit")


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item)))
    items.sort(key=lambda item: SLOWEST_TIER_FIRST.index(tier_of(item)))  # stable: file order within a tier


@pytest.fixture(scope="session", autouse=True)
def spark_scratch_in_pytest_temp(tmp_path_factory):
    """Every JVM of the run (this session's, spark-submit's, Airflow's tasks') keeps its scratch files (the jars it
    copies, shuffle blocks) under pytest's temporary folder, which pytest rotates. Under /tmp, the JVMs the crash tests
    kill left 31 MB each behind them, run after run."""
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-local"))


# The JVMs the tests start besides their own session (every spark-submit of an Airflow task, the crash tests' killed
# runs, a cluster's driver) each replay a thousand records and exit. Two costs of code that runs too briefly to
# profit, on a machine whose two cores the suite keeps busy (docs/benchmarks.md, a cold full rebuild of the crash
# tests' archive, CPU of every process of the run):
# - the optimizing (C2) compiler's threads: 68-80 s of CPU with both compilers, 42-50 s with C1 alone;
# - Spark's generated code, which Janino compiles for each query the run makes once: 33-38 s of CPU with it off,
#   expressions evaluated as they are (Spark's interpreted mode, which gives the same rows) and no whole-stage code.
# spark-submit adds SPARK_SUBMIT_OPTS to the driver's options, and Spark takes `-Dspark.*` properties as settings.
# The test session itself, which runs for the whole suite and decodes large histories, starts without them: it keeps
# both compilers and generated code, as a user's runs do.
SHORT_JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-Dspark.sql.codegen.factoryMode=NO_CODEGEN",
    "-Dspark.sql.codegen.wholeStage=false",
)
SUBMIT_OPTIONS_GIVEN = os.environ.get("SPARK_SUBMIT_OPTS", "")


@pytest.fixture(scope="session", autouse=True)
def short_jvms_compile_little():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_SUBMIT_OPTS", " ".join((SUBMIT_OPTIONS_GIVEN, *SHORT_JVM_OPTIONS)).strip())
        yield


@pytest.fixture(scope="session")
def spark(short_jvms_compile_little):
    from cdcreplay.spark import build_session

    with pytest.MonkeyPatch.context() as patch:  # the suite's long-lived JVM keeps both compilers (see above)
        patch.setenv("SPARK_SUBMIT_OPTS", SUBMIT_OPTIONS_GIVEN)
        session = build_session(
            "cdcreplay-tests",
            master="local[2]",
            # The session lives for the whole suite: 2 GB of heap, twice Spark's default, for what it caches over
            # hundreds of runs.
            extra={
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false",
                "spark.default.parallelism": "2",
                "spark.driver.memory": "2g",
                # Spark keeps the classes it generates for queries in a cache of 100 by default; the suite's
                # hundreds of runs over a few dozen schemas made it compile again what it had compiled before
                # (the truth tests of two formats: 4,285 compilations, 672 with this cache; 144 -> 127 s).
                "spark.sql.codegen.cache.maxEntries": "5000",
            },
        )
    yield session
    session.stop()


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def s3(spark, tmp_path_factory):
    """A real S3 server on 127.0.0.1 with the bucket ``lake`` (s3_server.py), this process's environment pointing at
    it (the AWS_* variables cdcreplay.storage reads; subprocesses inherit them), and the Spark session's S3A client."""
    from s3_server import running_s3proxy, s3_environment

    from cdcreplay.spark import reach_object_stores

    server = running_s3proxy(tmp_path_factory.mktemp("s3proxy"), buckets=("lake",))
    with server as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in s3_environment(endpoint).items():
            patch.setenv(name, value)
        reach_object_stores(spark)
        yield endpoint


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A real one-node Kafka cluster (KRaft) on 127.0.0.1 (cdcreplay_lab.kafka_broker) for the session; yields its bootstrap
    address. Topics are created by the tests that use it."""
    from cdcreplay_lab.kafka_broker import running_kafka

    with running_kafka(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap
