"""Replaying straight from a Kafka cluster (``archive.layout: kafka``) against a real broker.

A one-node KRaft broker runs on 127.0.0.1 (the ``kafka`` fixture, cdcreplay_lab.kafka_broker). The simulator's change history
is produced to it with a real Kafka producer -- keys, headers (Debezium's key-change headers), tombstones (null
values after deletes), several partitions, each record to the partition the simulator assigned -- and the same
records are written as the simulator's own Parquet archive. The broker must then hand out exactly the simulator's
offsets, and replaying the topics and the archive must publish the same tables, row for row with provenance, with
the same accounting. Runs limited by offsets and by time read exactly the records they should; configuration and
cluster problems fail before any record is read, naming the field and the fix.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from cdcreplay import pipeline as pipeline_module
from cdcreplay.archiver import PROGRESS_FILE
from cdcreplay.config import ConfigError, load_config
from cdcreplay.entrypoints import EXIT_BAD_INPUT, EXIT_OK, archive_main, replay_main
from cdcreplay.kafka_source import KafkaSourceError
from cdcreplay.run_spec import build_run_spec
from cdcreplay.warehouse import read_table
from cdcreplay_lab.kafka_broker import produce
from cdcreplay_lab.simulator.archive_writer import write_archive
from cdcreplay_lab.simulator.encode_canal import encode_canal_json
from cdcreplay_lab.simulator.encode_debezium import encode_debezium_json
from cdcreplay_lab.simulator.history import simulate

EVENTS = 300
SEED = 28
# Per format: the simulator's encoder, spread over several partitions (Debezium by key hash, Canal by table).
ENCODERS = {
    "debezium-json": lambda history: encode_debezium_json(history, schemas=False, partitions=3),
    "canal-json": lambda history: encode_canal_json(history, topic="dts.shop", partitions=2),
}


class Replay:
    """One format's history: produced to the broker and archived, and a pipelines file reading each."""

    def __init__(self, root: Path, fmt: str, bootstrap: str):
        self.root, self.fmt, self.bootstrap = root, fmt, bootstrap
        self.history = simulate(seed=SEED, events=EVENTS)
        self.records = list(ENCODERS[fmt](self.history))
        self.topics = sorted({r.topic for r in self.records})
        write_archive(self.records, root / "archive")
        produce(bootstrap, self.records)
        self.config = self.write_config("replay.yaml", bootstrap)

    def write_config(self, name: str, bootstrap: str, topics: list[str] | None = None) -> Path:
        document = {
            "warehouse": str(self.root / "warehouse"),
            "pipelines": [
                {
                    "name": "from_kafka",
                    "format": self.fmt,
                    "archive": {"layout": "kafka", "bootstrap_servers": [bootstrap]},
                    "topics": topics or self.topics,
                },
                {"name": "from_archive", "format": self.fmt, "archive": {"path": str(self.root / "archive")}},
            ],
        }
        path = self.root / name
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        return path


@pytest.fixture(scope="module", params=tuple(ENCODERS))
def replay(request, kafka, tmp_path_factory):
    return Replay(tmp_path_factory.mktemp(request.param), request.param, kafka)


def coordinates(frame) -> set[tuple]:
    return {(r.topic, r.partition, r.offset) for r in frame.select("topic", "partition", "offset").collect()}


def read(spark, replay: Replay, name: str, **parameters):
    config = load_config(replay.config)
    spec = build_run_spec(config, run_id="probe", pipelines=[name], **parameters)
    return pipeline_module.read_slice(spark, config, config.project.pipeline(name), spec)


def raw_rows(frame) -> list[tuple]:
    # Spark's Kafka source gives a record without headers null headers; an archive may hold an empty list.
    return sorted(
        (r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, tuple(map(tuple, r.headers or ())))
        for r in frame.collect()
    )


def test_the_broker_serves_the_same_records_as_the_archive(spark, replay):
    sources, from_kafka, manifest = read(spark, replay, "from_kafka")
    _, from_archive, archive_manifest = read(spark, replay, "from_archive")
    assert from_kafka.schema == from_archive.schema
    assert raw_rows(from_kafka) == raw_rows(from_archive)
    assert len(replay.records) == manifest["records"] == archive_manifest["records"]
    assert manifest["partitions"] == archive_manifest["partitions"]
    assert sum(r.value is None for r in replay.records) == from_kafka.where("value is null").count()
    assert sources == [f"kafka://{replay.bootstrap}/{topic}" for topic in replay.topics]
    assert manifest["kafka"]["bootstrap_servers"] == [replay.bootstrap]
    assert {(r["topic"], r["partition"], r["start"], r["until"]) for r in manifest["kafka"]["ranges"]} == {
        (e["topic"], e["partition"], 0, e["max_offset"] + 1) for e in archive_manifest["partitions"]
    }


def test_replaying_the_topics_publishes_what_replaying_the_archive_does(spark, replay, caplog):
    if replay.fmt == "debezium-json":  # the history's particulars this format carries on the wire
        assert any(r.value is None for r in replay.records)  # tombstones
        assert any(r.headers for r in replay.records)  # key-change headers
    assert len({(r.topic, r.partition) for r in replay.records}) >= 2
    runs = replay.root / "warehouse"
    # The copy a killed run left (its decode stage never ended): the next run, holding the lock, removes it.
    abandoned = runs / "from_kafka" / "runs" / "killed" / "kafka_records"
    abandoned.mkdir(parents=True)
    (abandoned / "part-00000.parquet").write_bytes(b"PAR1")
    with caplog.at_level("INFO", logger="cdcreplay.progress"):
        assert replay_main(["--config", str(replay.config), "--run-id", "full", "--full-rebuild"]) == EXIT_OK
    assert f"{len(replay.records)} records selected from {len(replay.topics)} topics" in caplog.text
    assert f"removing {abandoned}, left by a run that ended before decoding its records" in caplog.text
    assert not abandoned.exists() and abandoned.parent.is_dir()
    summaries = {
        name: json.loads((runs / name / "runs" / "full" / "summary.json").read_text())
        for name in ("from_kafka", "from_archive")
    }
    assert summaries["from_kafka"]["decoded"] == summaries["from_archive"]["decoded"]
    assert not (runs / "from_kafka" / "runs" / "full" / "kafka_records").exists()  # the copy, gone once decoded
    assert summaries["from_kafka"]["decoded"]["source_records"] == len(replay.records)
    assert summaries["from_kafka"]["decoded"]["quarantined"] == 0
    assert set(summaries["from_kafka"]["tables"]) == set(replay.history.tables)
    for table_id in replay.history.tables:
        tables = [read_table(spark, str(runs), name, table_id) for name in ("from_kafka", "from_archive")]
        assert tables[0].columns == tables[1].columns
        rows = [sorted(tuple(row) for row in table.collect()) for table in tables]
        assert rows[0] == rows[1], table_id
        assert len(rows[0]) == len(replay.history.final_state(table_id)), table_id


def test_a_run_limited_by_offsets_reads_exactly_those_offsets(spark, replay):
    topic = replay.topics[0]
    held = sorted(r.offset for r in replay.records if r.topic == topic and r.partition == 1)
    low, high = held[len(held) // 4], held[len(held) // 2]
    ranges = {topic: {"1": {"start": low, "until": high}}}
    _, selected, manifest = read(spark, replay, "from_kafka", offsets=json.dumps(ranges))
    assert coordinates(selected) == {(topic, 1, offset) for offset in range(low, high)}
    assert [(r["topic"], r["partition"], r["start"], r["until"]) for r in manifest["kafka"]["ranges"]] == [
        (topic, 1, low, high)
    ]
    # A range past what the log holds is a parameter error naming the partition and what it holds.
    beyond = {topic: {"1": {"start": held[-1] + 10, "until": held[-1] + 20}}}
    with pytest.raises(KafkaSourceError, match=rf"parameter offsets\.{topic}\.1: requested .* holds offsets 0\.\."):
        read(spark, replay, "from_kafka", offsets=json.dumps(beyond))


def test_a_run_limited_by_time_reads_exactly_the_records_stamped_in_it(spark, replay):
    stamps = sorted({r.timestamp for r in replay.records})
    start, end = stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3] + timedelta(milliseconds=1)
    parameters = {"start": start.isoformat(), "end": end.isoformat()}
    _, from_kafka, manifest = read(spark, replay, "from_kafka", **parameters)
    _, from_archive, _ = read(spark, replay, "from_archive", **parameters)
    expected = {(r.topic, r.partition, r.offset) for r in replay.records if start <= r.timestamp < end}
    assert 0 < len(expected) < len(replay.records)
    assert coordinates(from_kafka) == expected == coordinates(from_archive)
    # The brokers' time index found the range: offsets before it were not read at all.
    for r in manifest["kafka"]["ranges"]:
        inside = [x.offset for x in replay.records if (x.topic, x.partition) == (r["topic"], r["partition"])]
        inside = [o for o in inside if (r["topic"], r["partition"], o) in expected]
        if inside:
            assert (r["start"], r["until"]) == (min(inside), max(inside) + 1)
        else:
            assert r["start"] == r["until"]
    assert any(r["start"] > 0 for r in manifest["kafka"]["ranges"])


def test_client_settings_come_from_the_environment_and_only_their_names_are_recorded(spark, replay, monkeypatch):
    # Settings that change nothing on this plaintext broker, but reach the admin client and Spark's consumers.
    monkeypatch.setenv("CDCREPLAY_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    monkeypatch.setenv("CDCREPLAY_KAFKA_CLIENT_DNS_LOOKUP", "use_all_dns_ips")
    _, selected, manifest = read(spark, replay, "from_kafka")
    assert selected.count() == len(replay.records)
    assert manifest["kafka"]["client_settings"] == ["client.dns.lookup", "security.protocol"]
    assert "PLAINTEXT" not in json.dumps(manifest, default=str)


def test_security_settings_the_cluster_does_not_speak_fail_naming_the_variables(spark, replay, monkeypatch):
    monkeypatch.setenv("CDCREPLAY_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("CDCREPLAY_KAFKA_SASL_MECHANISM", "PLAIN")
    monkeypatch.setenv(
        "CDCREPLAY_KAFKA_SASL_JAAS_CONFIG",
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";',
    )
    monkeypatch.setenv("CDCREPLAY_KAFKA_DEFAULT_API_TIMEOUT_MS", "3000")
    with pytest.raises(KafkaSourceError) as raised:
        read(spark, replay, "from_kafka")
    assert str(raised.value).startswith("archive.bootstrap_servers: ")
    assert "CDCREPLAY_KAFKA_* variables" in str(raised.value)
    assert "password" not in str(raised.value)


# -- failures before any work ------------------------------------------------------------------------------------


def write_pipelines(tmp_path: Path, archive: str, topics: str = "[t]") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"warehouse: {tmp_path / 'wh'}\npipelines:\n  - name: p\n    format: debezium-json\n"
        f"    archive: {archive}\n    topics: {topics}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("archive", "topics", "message"),
    [
        ("{layout: kafka}", "[t]", "archive: bootstrap_servers is required with layout kafka"),
        ("{layout: kafka, bootstrap_servers: 'b:9092'}", "null", "topics is required with archive.layout kafka"),
        ("{layout: kafka, bootstrap_servers: ['me:secret@b:9092']}", "[t]", "credentials do not belong here"),
        ("{layout: kafka, bootstrap_servers: [b:9092], path: x}", "[t]", "path is not used with layout kafka"),
        ("{path: x, bootstrap_servers: [b:9092]}", "[t]", "bootstrap_servers applies to layout kafka only"),
        ("{layout: parquet}", "[t]", "path is required with layout parquet"),
        ("{path: x, copy_to: y}", "[t]", "copy_to applies to layout kafka only"),
    ],
)
def test_a_kafka_source_config_error_names_the_field_and_the_fix(tmp_path, archive, topics, message):
    with pytest.raises(ConfigError) as raised:
        load_config(write_pipelines(tmp_path, archive, topics))
    assert message in str(raised.value)
    assert "pipelines.0" in str(raised.value)


def test_a_comma_separated_bootstrap_list_is_accepted(tmp_path):
    config = load_config(write_pipelines(tmp_path, "{layout: kafka, bootstrap_servers: 'a:9092, b:9093'}"))
    assert config.project.pipelines[0].archive.bootstrap_servers == ["a:9092", "b:9093"]
    assert config.archive_path(config.project.pipelines[0]) == "kafka://a:9092,b:9093"


def test_a_topic_the_cluster_lacks_fails_the_run_naming_it(spark, replay, capsys):
    config = replay.write_config("missing.yaml", replay.bootstrap, topics=[replay.topics[0], "no.such.topic"])
    with pytest.raises(KafkaSourceError) as raised:
        read(spark, _with_config(replay, config), "from_kafka")
    assert str(raised.value).startswith("pipelines.from_kafka.topics: topic(s) no.such.topic do not exist")
    assert "fix the pipeline's topics" in str(raised.value)
    assert replay_main(["--config", str(config), "--run-id", "missing", "--pipelines", "from_kafka"]) == EXIT_BAD_INPUT
    assert "no.such.topic do not exist" in capsys.readouterr().err


def _with_config(replay: Replay, config: Path) -> Replay:
    other = object.__new__(Replay)
    other.__dict__.update(replay.__dict__, config=config)
    return other


def test_a_time_range_on_an_unreachable_cluster_fails_naming_the_brokers(spark, replay, monkeypatch):
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("CDCREPLAY_KAFKA_DEFAULT_API_TIMEOUT_MS", "3000")
    config = replay.write_config("dead.yaml", dead)
    start = min(r.timestamp for r in replay.records)
    with pytest.raises(KafkaSourceError) as raised:
        read(spark, _with_config(replay, config), "from_kafka", start=start.isoformat())
    assert str(raised.value).startswith(f"archive.bootstrap_servers: no Kafka broker at {dead} answered")
    assert "CDCREPLAY_KAFKA_* variables" in str(raised.value)


def test_the_brokers_address_cannot_come_from_the_environment(spark, replay, monkeypatch):
    monkeypatch.setenv("CDCREPLAY_KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
    with pytest.raises(KafkaSourceError, match=r"CDCREPLAY_KAFKA_BOOTSTRAP_SERVERS sets bootstrap\.servers"):
        read(spark, replay, "from_kafka")


def test_a_setting_the_client_rejects_fails_naming_the_variables(spark, replay, monkeypatch):
    monkeypatch.setenv("CDCREPLAY_KAFKA_SECURITY_PROTOCOL", "CARRIER_PIGEON")
    with pytest.raises(KafkaSourceError) as raised:
        read(spark, replay, "from_kafka")
    assert "CARRIER_PIGEON" in str(raised.value)
    assert str(raised.value).startswith("CDCREPLAY_KAFKA_* variables: the Kafka client rejects a setting")


# -- nights that go on where the state stopped (--resume; the DAG's scheduled runs) ---------------------------------


def _kafka_ranges(root: Path, pipeline: str, run_id: str) -> dict:
    manifest = json.loads((root / pipeline / "runs" / run_id / "manifest.json").read_text())
    return {(r["topic"], r["partition"]): (r["start"], r["until"]) for r in manifest["kafka"]["ranges"]}


def test_resumed_nights_read_on_from_where_the_state_stopped_and_publish_what_the_archive_does(spark, replay):
    warehouse = replay.root / "resumed"
    document = yaml.safe_load(replay.config.read_text())
    document["warehouse"] = str(warehouse)
    config = replay.root / "resumed.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    stamps = sorted({r.timestamp for r in replay.records})
    middle = stamps[len(stamps) // 2]
    run = ["--config", str(config), "--pipelines", "from_kafka", "--resume"]
    # The first night has no state to go on from: its interval bounds it.
    assert replay_main([*run, "--run-id", "night1", "--end", middle.isoformat()]) == EXIT_OK
    # The second goes on from there to the log's end; an interval far in the future changes nothing.
    assert replay_main([*run, "--run-id", "night2", "--start", "2099-01-01", "--end", "2099-01-02"]) == EXIT_OK
    # A third night with nothing new reads nothing.
    assert replay_main([*run, "--run-id", "night3"]) == EXIT_OK

    first, second, third = (_kafka_ranges(warehouse, "from_kafka", night) for night in ("night1", "night2", "night3"))
    ends = {(r.topic, r.partition): 0 for r in replay.records}
    for r in replay.records:
        ends[(r.topic, r.partition)] = max(ends[(r.topic, r.partition)], r.offset + 1)
    assert set(first) == set(second) == set(third) == set(ends)
    for partition, end in ends.items():
        assert first[partition][0] == 0
        assert second[partition] == (first[partition][1], end)  # disjoint, and together the whole log
        assert third[partition] == (end, end)
    assert any(first[p][1] not in (0, ends[p]) for p in ends)  # the cut fell inside the log
    pointer = json.loads((warehouse / "from_kafka" / "_CURRENT.json").read_text())
    assert pointer["kafka_read_to"] == {t: {str(p): end for (t2, p), end in ends.items() if t2 == t} for t, _ in ends}
    assert pointer["run_id"] == "night2"  # the empty night published nothing

    assert replay_main(["--config", str(config), "--pipelines", "from_archive", "--run-id", "all"]) == EXIT_OK
    for table_id in replay.history.tables:
        tables = [read_table(spark, str(warehouse), name, table_id) for name in ("from_kafka", "from_archive")]
        rows = [sorted(tuple(row) for row in table.collect()) for table in tables]
        assert rows[0] == rows[1], table_id


def test_offsets_retention_deleted_before_a_resumed_run_read_them_are_a_reported_gap(
    spark, kafka, tmp_path, caplog, capsys
):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "retention.probe"
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka})
    for offset in range(10):
        producer.produce(topic, value=b"{}", key=str(offset).encode(), partition=0)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])  # retention took offsets 0..5
    for future in deleted.values():
        future.result(30)
    config = load_config(write_pipelines(tmp_path, f"{{layout: kafka, bootstrap_servers: [{kafka}]}}", f"[{topic}]"))
    pipeline = config.project.pipeline("p")
    spec = build_run_spec(config, run_id="probe", resume=True)

    with caplog.at_level("WARNING", logger="cdcreplay.kafka_source"):
        _, selected, manifest = pipeline_module.read_slice(spark, config, pipeline, spec, {topic: {"0": 2}})
    assert coordinates(selected) == {(topic, 0, offset) for offset in range(6, 10)}
    lost = [{"topic": topic, "partition": 0, "from_offset": 2, "to_offset": 5}]
    assert manifest["kafka"]["lost_to_retention"] == lost
    assert manifest["gaps"] == lost
    assert manifest["kafka"]["resumed_from"] == {topic: {"0": 2}}
    assert f"p: offsets 2..5 of {topic}/0 were deleted by retention before they were read" in caplog.text

    # The archiver, going on from offset 2, archives what the log still holds and names what it lost.
    archived = tmp_path / "copy"
    archived.mkdir()
    (archived / PROGRESS_FILE).write_text(json.dumps({"read_to": {topic: {"0": 2}}}))
    copy_config = write_pipelines(
        tmp_path, f"{{layout: kafka, bootstrap_servers: [{kafka}], copy_to: {archived}}}", f"[{topic}]"
    )
    assert archive_main(["--config", str(copy_config), "--pipeline", "p"]) == EXIT_OK
    assert f"LOST {topic}[0] offsets 2..5: deleted by retention before they were archived" in capsys.readouterr().out
    progress = json.loads((archived / PROGRESS_FILE).read_text())
    assert progress["lost_to_retention"] == lost
    assert progress["read_to"] == {topic: {"0": 10}}
    assert coordinates(spark.read.parquet(*map(str, archived.rglob("*.parquet")))) == {
        (topic, 0, offset) for offset in range(6, 10)
    }

    with pytest.raises(KafkaSourceError) as raised:  # a log that ends before where the state stopped
        pipeline_module.read_slice(spark, config, pipeline, spec, {topic: {"0": 50}})
    assert str(raised.value).startswith(
        f"pipelines.p: partition {topic}/0 ends at offset 10, but it was read up to offset 50 before"
    )
    assert "a replay: --full-rebuild or --offsets" in str(raised.value)


def test_a_runs_records_are_fetched_from_the_brokers_once_and_kept_until_decoded(spark, kafka, tmp_path):
    """The read stage copies the selected records into the run's folder; every later pass reads the copy. Shown by
    deleting the records on the broker after the read stage (as retention would): the copy still holds all of them,
    where the brokers' own DataFrame fails (failOnDataLoss) rather than lose them."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from cdcreplay.storage import Location

    topic = "staging.probe"
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka})
    for offset in range(12):
        producer.produce(topic, value=b'{"n": %d}' % offset, key=str(offset).encode(), partition=offset % 2)
    assert producer.flush(30) == 0
    config = load_config(write_pipelines(tmp_path, f"{{layout: kafka, bootstrap_servers: [{kafka}]}}", f"[{topic}]"))
    pipeline = config.project.pipeline("p")
    spec = build_run_spec(config, run_id="probe")
    staging = tmp_path / "runs" / "probe" / "kafka_records"

    _, staged, manifest = pipeline_module.read_slice(spark, config, pipeline, spec, None, Location(str(staging)))
    _, from_brokers, _ = pipeline_module.read_slice(spark, config, pipeline, spec)
    assert manifest["records"] == 12
    before = raw_rows(staged)
    assert before == raw_rows(from_brokers)
    assert any(staging.glob("*.parquet"))

    for future in admin.delete_records([TopicPartition(topic, p, 6) for p in (0, 1)]).values():
        future.result(30)
    assert raw_rows(staged) == before  # the copy, not the brokers
    with pytest.raises(Exception, match="Some data may have been lost"):
        from_brokers.count()


# -- the archiver: cdcreplay archive copies the topics into archive.copy_to ------------------------------------------


def test_the_archiver_copies_each_offset_once_and_its_archive_replays_as_the_brokers_do(spark, replay, capsys):
    copy = replay.root / "copied"
    document = yaml.safe_load(replay.config.read_text())
    document["warehouse"] = str(replay.root / "from-copy")
    document["pipelines"][0]["archive"]["copy_to"] = str(copy)
    document["pipelines"].append({"name": "from_copy", "format": replay.fmt, "archive": {"path": str(copy)}})
    config = replay.root / "archiver.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    archive = ["--config", str(config), "--pipeline", "from_kafka"]
    stamps = sorted({r.timestamp for r in replay.records})

    def progress() -> dict:
        return json.loads((copy / PROGRESS_FILE).read_text())

    def copied_files() -> dict:
        return {p: p.read_bytes() for p in copy.rglob("*.parquet")}

    # Up to a time first, then the rest: the second run goes on where the first stopped.
    assert archive_main([*archive, "--end", stamps[len(stamps) // 2].isoformat()]) == EXIT_OK
    first = progress()
    assert archive_main(archive) == EXIT_OK
    second = progress()
    assert len(second["runs"]) == 2
    before, after = ({(r["topic"], r["partition"]): r for r in run["ranges"]} for run in second["runs"])
    for partition, later in after.items():
        assert later["start"] == (before[partition]["until"] if partition in before else 0)
        assert later["until"] == later["latest"]
    files = copied_files()
    # Nothing new: nothing written. A run that died before recording its progress is redone over the same folders.
    assert archive_main(archive) == EXIT_OK
    assert "nothing new" in capsys.readouterr().out
    assert copied_files() == files and progress() == second
    (copy / PROGRESS_FILE).write_text(json.dumps(first))
    assert archive_main(archive) == EXIT_OK
    assert progress()["read_to"] == second["read_to"]

    # The copy holds every record once, as the simulator's archive does, and replays to the same tables.
    _, from_copy, copy_manifest = read(spark, _with_config(replay, config), "from_copy")
    _, from_archive, _ = read(spark, _with_config(replay, config), "from_archive")
    assert raw_rows(from_copy) == raw_rows(from_archive)
    assert copy_manifest["duplicates"] == 0
    assert all(path.relative_to(copy).parts[0].startswith("kafka_topic=") for path in copy.rglob("*.parquet"))
    run = ["--config", str(config), "--pipelines", "from_copy,from_archive", "--run-id", "all", "--full-rebuild"]
    assert replay_main(run) == EXIT_OK
    for table_id in replay.history.tables:
        tables = [
            read_table(spark, str(replay.root / "from-copy"), name, table_id) for name in ("from_copy", "from_archive")
        ]
        rows = [sorted(tuple(row) for row in table.collect()) for table in tables]
        assert rows[0] == rows[1], table_id


def test_archiving_a_pipeline_without_copy_to_fails_before_any_work_naming_the_fix(replay, capsys):
    assert archive_main(["--config", str(replay.config), "--pipeline", "from_archive"]) == EXIT_BAD_INPUT
    assert "give it archive.layout: kafka and archive.copy_to" in capsys.readouterr().err


def test_the_archive_job_of_a_run_without_archived_pipelines_does_nothing_and_needs_its_arguments(replay, capsys):
    spec = build_run_spec(load_config(replay.config), run_id="night").to_json()
    assert archive_main(["--run-spec", spec]) == EXIT_OK  # neither pipeline has archive.copy_to
    assert "no pipeline of this run archives its topics" in capsys.readouterr().out
    dry = json.dumps({**json.loads(spec), "dry_run": True})
    assert archive_main(["--run-spec", dry]) == EXIT_OK
    assert "dry run: nothing archived" in capsys.readouterr().out
    assert archive_main(["--config", str(replay.config)]) == EXIT_BAD_INPUT
    assert "give --config <pipelines file> --pipeline <name>, or --run-spec '<json>'" in capsys.readouterr().err
