"""A real Kafka broker on 127.0.0.1 for the tests and the benchmark: Apache Kafka 4.4 in KRaft mode (no ZooKeeper),
one JVM that is both the cluster's only controller and its only broker, from the jars cdcreplay.jars pins
(KAFKA_BROKER, fetched by `python -m cdcreplay.jars --test-servers`, as scripts/test.sh does); and ``produce``, which
puts a simulated archive's records on it at the simulator's own offsets.

The broker is configured for replaying history rather than serving traffic:
- record timestamps are the simulated history's (CreateTime, months or years before or after today), so time-based
  retention is off and the broker accepts timestamps however far from its own clock;
- topics are never created by a client asking for them (`auto.create.topics.enable=false`): a pipeline naming a topic
  the cluster lacks must fail, not find an empty topic;
- the internal topics (consumer offsets, transactions) have one replica, as there is one broker.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from cdcreplay.jars import KAFKA_BROKER, jar_path

NODE_ID = 1
HEAP = "-Xmx512m"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cluster_id() -> str:
    # A KRaft cluster id is a UUID in URL-safe base64 without padding; Kafka never hands out one starting with "-"
    # (it would read as a command-line flag), so neither do we.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def classpath() -> str:
    jars = [jar_path(jar) for jar in KAFKA_BROKER]
    missing = [str(jar) for jar in jars if not jar.is_file()]
    if missing:
        raise RuntimeError(
            f"{len(missing)} Kafka broker jars are missing (e.g. {missing[0]}): run "
            "`python -m cdcreplay.jars --test-servers` (scripts/test.sh does)"
        )
    return ":".join(str(jar) for jar in jars)


def server_properties(log_dir: Path, port: int, controller_port: int) -> str:
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={NODE_ID}",
            f"controller.quorum.voters={NODE_ID}@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={log_dir}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Simulated history: keep every record whatever its timestamp, and accept any timestamp.
            "log.retention.ms=-1",
            "log.message.timestamp.before.max.ms=9223372036854775807",
            "log.message.timestamp.after.max.ms=9223372036854775807",
            "",
        ]
    )


LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def _java(classpath_: str, folder: Path, *arguments: str) -> list[str]:
    return [
        "java",
        HEAP,
        "-XX:+UseParallelGC",
        f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
        "-cp",
        classpath_,
        *arguments,
    ]


def _wait_until_listening(port: int, server: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Until the broker accepts a connection on its client port: it opens that listener only once the controller
    has elected itself and the broker has caught up with the metadata log, i.e. when it can serve requests."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the Kafka broker exited with {server.returncode}: {log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(
        f"the Kafka broker did not listen on 127.0.0.1:{port} within {timeout_s} s: {log.read_text()[-3000:]}"
    )


@contextmanager
def running_kafka(folder: Path, timeout_s: float = 120):
    """Format a KRaft log dir under ``folder``, start a one-node Kafka cluster on free 127.0.0.1 ports and yield its
    bootstrap address (``127.0.0.1:<port>``); stop it at the end (killed if it does not stop in 20 s)."""
    jars = classpath()
    folder.mkdir(parents=True, exist_ok=True)
    port, controller_port = _free_port(), _free_port()
    properties = folder / "server.properties"
    properties.write_text(server_properties(folder / "data", port, controller_port))
    (folder / "log4j2.properties").write_text(LOG4J)
    log = folder / "kafka.log"
    # The log dir must carry the cluster id and the node's identity before the first start (KRaft has no ZooKeeper
    # to hand them out): `kafka-storage.sh format` does this, here through the class that script runs.
    formatted = subprocess.run(
        _java(jars, folder, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(properties)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if formatted.returncode != 0:
        raise RuntimeError(
            f"formatting the KRaft log dir failed: {formatted.stdout[-2000:]} {formatted.stderr[-2000:]}"
        )
    with log.open("w") as output:
        server = subprocess.Popen(
            _java(jars, folder, "kafka.Kafka", str(properties)), stdout=output, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_listening(port, server, log, timeout_s)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()  # SIGTERM: a controlled shutdown, the log closed cleanly
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def produce(bootstrap: str, records: Iterable, partitions: dict[str, int] | None = None) -> int:
    """Create the records' topics and produce every record to its partition, in order, with its key, headers and
    timestamp (a tombstone as a null value); the number produced. Raises unless the broker assigned each record the
    offset it has in the archive (``record.offset``), so the broker serves exactly the archive's coordinates.

    ``records``: objects with the archive's fields (``topic, partition, offset, timestamp, key, value, headers``), in
    offset order within each partition; ``partitions``: partitions per topic (default: found in ``records``, which
    must then be a list)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    if partitions is None:
        partitions = {}
        for record in records:
            partitions[record.topic] = max(partitions.get(record.topic, 0), record.partition + 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(topic, count, 1) for topic, count in partitions.items()])
    for future in created.values():
        future.result(30)
    # Idempotence keeps each partition's records in the order they were produced, even across retries.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "queue.buffering.max.kbytes": 512 * 1024,
        }
    )
    misplaced: list[str] = []

    def delivered(expected: int):
        def report(error, message) -> None:
            if error is not None:
                misplaced.append(f"refused: {error}")
            elif message.offset() != expected:
                misplaced.append(f"{message.topic()}[{message.partition()}] at {message.offset()}, not {expected}")

        return report

    produced = 0
    for record in records:
        while True:
            try:
                producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    timestamp=int(record.timestamp.timestamp() * 1000),
                    headers=list(record.headers or ()) or None,
                    on_delivery=delivered(record.offset),
                )
                break
            except BufferError:  # the client's queue is full: let it send, then try again
                producer.poll(0.1)
        producer.poll(0)
        produced += 1
    if producer.flush(300) != 0:
        raise RuntimeError("the broker did not take every record within 300 s")
    if misplaced:
        raise RuntimeError(f"{len(misplaced)} records did not land at the archive's offsets, e.g. {misplaced[0]}")
    return produced
