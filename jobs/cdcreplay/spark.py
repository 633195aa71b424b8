"""One place that builds SparkSessions, so every entry point and test gets the same settings."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from cdcreplay.jars import DELTA_JARS, installed_jars, jar_path, jars_dir
from cdcreplay.jvm import driver_java_options

# pyspark 4.2.0 deadlocks when a Python UDF / mapInArrow reads straight from a vectorized Parquet scan
# (shared/environment.md). Every Python-side decoder sits on that path, so the row-based reader is the default;
# vectorized_parquet_reads turns the vectorized one on where no Python reads the rows.
VECTORIZED_READER = "spark.sql.parquet.enableVectorizedReader"
SAFE_DEFAULTS = {
    VECTORIZED_READER: "false",
    "spark.sql.session.timeZone": "UTC",
    # Overlaying a partial image on a full one (Canal `old` on `data`) is map_concat with the later value winning.
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # Canonical binary text is plain base64; Spark's default breaks base64() output with CRLF every 76 characters.
    "spark.sql.chunkBase64String.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    # The published tables and the state are Delta tables (cdcreplay.delta_tables): Delta's SQL and its catalog.
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # keep_versions decides which versions stay readable, not a fixed week: vacuum may drop younger files.
    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    # Reading a table's log is a Spark job of this many tasks (default 50): the logs here are small, and 50 tasks
    # per read cost most of a small run's time on two cores.
    "spark.databricks.delta.snapshotPartitions": "2",
    # A vacuum lists the table's files as a Spark job of up to this many tasks (Spark's default: 10,000, one per
    # folder): 110 s for a small partitioned state on two cores, against 8 s with a few tasks.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    # Delta keeps each table's log and its replayed state in memory (default: 10,000 tables for an hour). A run
    # touches a few tables; a long-lived session that touches hundreds (the test suite) ran its driver out of heap.
    "spark.databricks.delta.delta.log.cacheSize": "32",
    # PySpark 4 records the Python call site of every DataFrame and Column call for Spark's error messages: about
    # five py4j round trips and a stack walk per call, on the driver. The decoders and the reconciliation build
    # thousands of column expressions a run (the changelog's contract columns: 117 ms to build, 37 ms without it; a
    # warm 1,387-record run 7.2 -> 6.5 s). A failing expression is still named by Spark, only not its Python line.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}
# Driver options a caller names (in ``extra`` or PYSPARK_SUBMIT_ARGS) replace cdcreplay.jvm's: two collectors on one
# command line stop the JVM.
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JARS = "spark.jars"
MAX_OPEN_FILES = "spark.sql.maxConcurrentOutputFileWriters"


def build_session(app_name: str = "cdcreplay", master: str | None = None, extra: dict | None = None):
    """Get or create the SparkSession; spark-submit's --master wins when master is None."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if (
        not master
        and not os.environ.get("SPARK_ENV_LOADED")
        and "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    ):
        master = os.environ.get("CDCREPLAY_SPARK_MASTER", "local[*]")
    if master:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local run listens on loopback only
            # Python workers run this interpreter (it has pyarrow and cdcreplay), not whatever python3 is on PATH.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    defaults = dict(SAFE_DEFAULTS)
    if master and master.startswith("local") and DRIVER_JAVA_OPTIONS not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        # This process starts the JVM, so its options still apply (cdcreplay.jvm: the collector, the class archive).
        defaults[DRIVER_JAVA_OPTIONS] = driver_java_options(jars_dir())
    if master:
        # The pinned optional jars set-up fetched (cdcreplay.jars): this process starts the JVM, so they reach the
        # driver's classpath. Under spark-submit they come from its --jars (the DAG's `jars`).
        missing = [str(jar_path(jar)) for jar in DELTA_JARS if not jar_path(jar).is_file()]
        if missing:
            raise RuntimeError(
                f"Delta Lake's jars are missing ({', '.join(missing)}): run scripts/setup.sh, or "
                "`python -m cdcreplay.jars` (CDCREPLAY_JARS_DIR names another folder)"
            )
        defaults[JARS] = ",".join(installed_jars())
    for key, value in {**defaults, **(extra or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    reach_object_stores(session)
    spread_file_splits(session)
    session.sparkContext.setLogLevel(os.environ.get("CDCREPLAY_SPARK_LOG_LEVEL", "WARN"))
    return session


def reach_object_stores(session) -> None:
    """Point the session's S3A client at the S3 endpoint of the environment (``cdcreplay.storage.s3a_settings``).

    Set on the live Hadoop configuration rather than as ``spark.hadoop.*`` options, so that a session that already
    runs (the tests', or one that spark-submit started) gets them too: S3A reads them when it first opens a bucket.
    Settings the session was given (spark-defaults, ``--conf spark.hadoop.fs.s3a.*``) win.
    """
    from cdcreplay.storage import s3a_settings

    named = session.sparkContext.getConf()
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_settings().items():
        if not named.contains(f"spark.hadoop.{key}"):
            hadoop.set(key, value)


MIN_SPLITS = "spark.sql.files.minPartitionNum"
SPLITS_PER_CORE = 4


def spread_file_splits(session) -> None:
    """Cut a large file scan into at least four splits per core (unless the session sets its own minimum).

    Spark sizes a scan's splits so that it makes about one per core, but packs whole row groups: the benchmark's
    2M-event archive (6 files) became 3 tasks on 2 cores, and the decode waited a third of its time on one task.
    With four per core the last wave is short. Small inputs are unchanged (a split is never under 4 MB).
    """
    if session.conf.get(MIN_SPLITS, None) is None:
        session.conf.set(MIN_SPLITS, str(SPLITS_PER_CORE * session.sparkContext.defaultParallelism))


@contextmanager
def session_settings(spark, settings: dict[str, str]) -> Iterator[None]:
    """The SQL ``settings`` inside the block, the session's own values restored after it."""
    previous = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value)


def vectorized_parquet_reads(spark):
    """Spark's vectorized Parquet reader inside the block: about twice as fast over map columns, but it must not feed
    Python (see SAFE_DEFAULTS). Only for plans with no Python UDF or mapInArrow (the reconciliation)."""
    return session_settings(spark, {VECTORIZED_READER: "true"})


# HotSpot compiles no method of more than 8,000 bytes of bytecode (``DontCompileHugeMethods``): it interprets it (DRS
# Avro's native pass took 2.6 times as long). Spark gives up whole-stage code for a stage whose method is longer.
HUGE_METHOD_LIMIT = "spark.sql.codegen.hugeMethodLimit"
JIT_METHOD_LIMIT = 8000


def no_methods_too_long_to_compile(spark):
    """Inside the block, a stage whose whole-stage generated method would be too long for the JIT to compile runs
    without whole-stage code generation: each operator's expressions are generated apart, in methods small enough to
    compile.

    A native decoder's projection grows with its plans (one per table): fused into one method it reached 17-39 KB of
    bytecode for the simulator's three tables (Canal, Qlik, Shareplex, DRS JSON and Avro), which HotSpot then ran
    interpreted. Spark's own limit (64 KB) is the JVM's, not the JIT's (docs/benchmarks.md, fifty-sixth session)."""
    return session_settings(spark, {HUGE_METHOD_LIMIT: str(JIT_METHOD_LIMIT)})


def one_file_per_folder(spark, folders: int):
    """Inside the block, a write partitioned into at most ``folders`` folders keeps a file open per folder in each
    task, instead of sorting the task's rows by folder first.

    Spark plans a partitioned write with a sort on the partition columns, so that one file is open at a time. The
    decode stage writes every record into one of a few ``record_kind`` folders: that sort copied each decoded row
    into the sorter's memory (all of a task's rows, spilled to disk when they do not fit) before writing any: without
    it, Debezium JSON's native pass at 2M events took 6-14% less time (Canal JSON's, within noise). Spark falls back
    to sorting the rest of a task's rows once its open files reach the limit, hence one more than ``folders``.
    """
    return session_settings(
        spark, {"spark.sql.optimizer.plannedWrite.enabled": "false", MAX_OPEN_FILES: str(folders + 1)}
    )


def limits_use_every_core(spark):
    """Inside the block, ``limit(n)`` scans as many partitions at once as there are cores, instead of one.

    A limit that finds fewer rows than it wants goes on scanning, one wave of partitions after another, starting with
    one. GX's sample of failing rows is such a limit, and a passing check has no failing rows: with the default it
    scanned a whole uniqueness check's partitions one by one, on one core.
    """
    parallelism = spark.sparkContext.defaultParallelism
    return session_settings(spark, {"spark.sql.limit.initialNumPartitions": str(max(1, parallelism))})
