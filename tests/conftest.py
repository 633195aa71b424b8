"""Shared fixtures: one SparkSession for the whole run (cold start costs ~8 s), paths to test data."""

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


@pytest.fixture(scope="session")
def spark():
    from cdcreplay.spark import build_session

    session = build_session(
        "cdcreplay-tests",
        master="local[2]",
        # The session lives for the whole suite: 2 GB of heap, twice Spark's default, for what it caches over hundreds
        # of runs.
        extra={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
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
    """A real one-node Kafka cluster (KRaft) on 127.0.0.1 (kafka_server.py) for the session; yields its bootstrap
    address. Topics are created by the tests that use it."""
    from kafka_server import running_kafka

    with running_kafka(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap
