"""`cdcreplay explain`: one key's whole story, checked against a simulated history with planted drift.

One archive is built and replayed once for the module: a Debezium history of two nights (the first a full rebuild,
the second incremental, with the resync snapshot and its three planted lost changes), plus two planted bad records
the decoder quarantines. The expected stories come from the simulator's own events and the encoder's Kafka
coordinates, not from the warehouse the explanation reads.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from archive_helpers import Record, pipeline_config, write_parquet

from cdcreplay import cli
from cdcreplay.config import ConfigError
from cdcreplay.explain import explain_key, render_explanation
from cdcreplay.explain.analysis import build_events, lost_changes, winner_of
from cdcreplay.explain.request import canonical_key_value, resolve_request
from cdcreplay.explain.story import Quarantined, Reconciliation, Source, Winner
from cdcreplay_lab.simulator import build_sample_archive
from cdcreplay_lab.simulator.encode_debezium import SOURCE_SCHEMA, encode_debezium_json

EVENTS, SEED, DRIFT = 600, 5, 3
PIPELINE = "sim"
START = datetime(2026, 1, 1, tzinfo=UTC)
SECOND_NIGHT = datetime(2026, 1, 2, tzinfo=UTC)  # the resync snapshot is read on the second night
# Keys with a long story in this history: a customer updated on both nights and deleted, an order updated around
# the resync, an order line whose bad update the decoder quarantines by its decoded key.
DELETED_CUSTOMER = ("shop.customers", (20,))
BUSY_ORDER = ("shop.orders", (2147484711,))
QUARANTINED_LINE = ("shop.order_items", (2147484667, 1))


class Simulated:
    """The history, the Kafka coordinates of each of its events, and the config of the replayed warehouse."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.history = build_sample_archive(tmp / "archive", "debezium-json", EVENTS, SEED, drift=DRIFT, start=START)
        # The encoder is deterministic: run again, it gives every event's record (a delete's tombstone follows it).
        records = [r for r in encode_debezium_json(self.history) if r.value is not None]
        self.record_of = {event.position: r for event, r in zip(self.history.events, records, strict=True)}
        self.next_offset: dict[tuple[str, int], int] = {}
        for r in encode_debezium_json(self.history):
            self.next_offset[(r.topic, r.partition)] = max(
                self.next_offset.get((r.topic, r.partition), 0), r.offset + 1
            )
        self.config = pipeline_config(
            tmp, PIPELINE, "debezium-json", tmp / "archive", settings=self.history.pipeline_settings
        )
        self.planted: dict[tuple, Record] = {}

    def events_of(self, table_id: str, key: tuple) -> list:
        return [e for e in self.history.events if e.table_id == table_id and e.key == key]

    def key_json(self, table_id: str, key: tuple) -> dict:
        return dict(zip(self.history.tables[table_id].primary_key, key, strict=True))

    def plant_bad_update(self, table_id: str, key: tuple, column: str, bad_value) -> Record:
        """A copy of the key's last update of the second night with ``column`` set to a value the decoder cannot take,
        archived as the next record of its partition."""
        update = [e for e in self.events_of(table_id, key) if e.op == "update" and e.time >= SECOND_NIGHT][-1]
        original = self.record_of[update.position]
        message = json.loads(original.value)
        message["payload"]["after"][column] = bad_value
        offset = self.next_offset[(original.topic, original.partition)]
        self.next_offset[(original.topic, original.partition)] += 1
        planted = Record(
            original.topic, original.partition, offset, json.dumps(message), original.key, original.timestamp
        )
        folder = Path(next(f for f in self.history.archive["files"] if f"topic={original.topic}" in f)).parent
        write_parquet([planted], folder / f"part-planted-{offset}.parquet")
        self.planted[(table_id, key)] = planted
        return planted


@pytest.fixture(scope="module")
def simulated(spark, tmp_path_factory) -> Simulated:
    sim = Simulated(tmp_path_factory.mktemp("explain"))
    assert all(sim.record_of[d.position].timestamp >= SECOND_NIGHT for d in sim.history.drift_rows)
    # Bad base64 in a decimal: the decoder quarantines the record before it has a key (found by its Kafka key).
    sim.plant_bad_update(*DELETED_CUSTOMER, "balance", "%%%not base64")
    # Text in an int column: decoded, then quarantined by the value check with its decoded key.
    sim.plant_bad_update(*QUARANTINED_LINE, "qty", "12x")
    config = str(sim.config)
    first = ["run", "--config", config, "--run-id", "night1", "--full-rebuild", "--end", SECOND_NIGHT.isoformat()]
    assert cli.main(first) == 0  # the initial load is a baseline: nothing to compare
    # The resync finds the planted lost changes: the verdict fails (exit 1), the tables are published.
    assert cli.main(["run", "--config", config, "--run-id", "night2", "--start", SECOND_NIGHT.isoformat()]) == 1
    return sim


def explain(sim: Simulated, table_id: str, key: dict, run_id: str | None = None, spark=None):
    request = resolve_request(str(sim.config), PIPELINE, table_id, json.dumps(key), run_id)
    return explain_key(spark, request)


def text(value) -> str:
    """The canonical text the Debezium decoder writes for a simulated value."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def coordinates(sim: Simulated, event) -> tuple:
    record = sim.record_of[event.position]
    return (record.topic, record.partition, record.offset)


def test_every_planted_difference_names_its_lost_change(spark, simulated):
    for drift in simulated.history.drift_rows:
        story = explain(simulated, drift.table_id, simulated.key_json(drift.table_id, drift.key), spark=spark)
        history = simulated.events_of(drift.table_id, drift.key)
        before = [e for e in history if e.position < drift.position]
        newest = before[-1]  # a drifted key is live when the resync reads it: its newest event sets every column
        setters = [e for e in before if e.after and e.after[drift.column] == drift.snapshot_value]
        snapshot = simulated.record_of[drift.position]
        shown, replayed = text(drift.snapshot_value), text(drift.true_value)

        assert history[len(before)].position == drift.position
        [lost] = story.lost_changes
        read = next(e for e in story.events if e.seq == lost.snapshot_seq)
        assert (read.op, read.topic, read.partition, read.offset) == (
            "snapshot",
            *coordinates(simulated, history[len(before)]),
        )
        # The resync is the first snapshot epoch of the second night's changes, reconciled against the first's state.
        assert (lost.kind, lost.run_id, lost.epoch_no, lost.proven) == ("column", "night2", 1, True)
        assert (lost.column, lost.snapshot_value, lost.incremental_value) == (drift.column, shown, replayed)
        assert (lost.snapshot_offset, lost.newest_before.offset, lost.newest_before.value) == (
            snapshot.offset,
            simulated.record_of[newest.position].offset,
            replayed,
        )
        unset = f"no archived event for this key sets {drift.column}={shown}"
        if setters:
            unset += f" after the one at offset {simulated.record_of[setters[-1].position].offset}"
        assert lost.text == (
            f"the snapshot at position {read.position} (offset {snapshot.offset}) shows {drift.column}={shown}; {unset}; "
            f"the newest event before the snapshot (offset {lost.newest_before.offset}) sets {drift.column}={replayed}"
        )
        [compared] = story.reconciliation
        assert (compared.status, compared.differing_columns, compared.snapshot_seq) == (
            "mismatch",
            [{"column": drift.column, "snapshot_value": shown, "incremental_value": replayed}],
            read.seq,
        )
        assert lost.text in render_explanation(story)


def test_a_keys_events_come_in_compaction_order_with_the_winner_marked(spark, simulated):
    table_id, key = BUSY_ORDER
    story = explain(simulated, table_id, simulated.key_json(table_id, key), spark=spark)
    history = simulated.events_of(table_id, key)
    assert [(e.op, e.topic, e.partition, e.offset) for e in story.events] == [
        (e.op, *coordinates(simulated, e)) for e in history
    ]
    assert [e.runs for e in story.events] == [["night1" if e.time < SECOND_NIGHT else "night2"] for e in history]
    assert [e.winner for e in story.events] == [False] * (len(history) - 1) + [True]
    last, previous = story.events[-1], story.events[-2]
    assert (story.winner.seq, story.winner.effect, story.winner.decided_by, story.winner.compared_with) == (
        last.seq,
        "live",
        "position",
        previous.seq,
    )
    assert story.winner.reason == (
        f"last in compaction order: its source position {last.position} comes after {previous.position} of "
        f"#{previous.seq} (offset {previous.offset}); the source position decides"
    )
    # Each event's image is the key's row after it, and an update names the columns it changed.
    for event, truth in zip(story.events, history, strict=True):
        assert set(event.image_after) == set(truth.after)
        if truth.op == "update":
            assert event.changed_columns == sorted(truth.changed)
    # The snapshot reads and their epochs: the initial load (a baseline) and the resync.
    assert [(e.epoch.run_id, e.epoch.epoch_no, e.epoch.kind) for e in story.events if e.op == "snapshot"] == [
        ("night1", 1, "baseline"),
        ("night2", 1, "reconciled"),
    ]
    assert [(r.run_id, r.epoch_no, r.status) for r in story.reconciliation] == [("night2", 1, "match")]
    assert story.lost_changes == []
    # The published row is the winner's, with its provenance.
    assert story.state.seq == last.seq and not story.state.deleted and story.tombstone is None
    assert story.published.run_id == "night2" and story.published.seq == last.seq
    assert (story.published.provenance["_op"], story.published.provenance["_offset"]) == ("update", last.offset)
    final = next(row for row in simulated.history.final_state(table_id) if row["order_id"] == key[0])
    assert story.published.row["order_id"] == key[0] and story.published.row["status"] == final["status"]


def test_a_deleted_key_shows_its_tombstone_and_a_record_quarantined_by_its_kafka_key(spark, simulated):
    table_id, key = DELETED_CUSTOMER
    story = explain(simulated, table_id, simulated.key_json(table_id, key), spark=spark)
    history = simulated.events_of(table_id, key)
    assert [(e.op, e.offset) for e in story.events] == [(e.op, simulated.record_of[e.position].offset) for e in history]
    assert history[-1].op == "delete"
    assert (story.winner.seq, story.winner.effect) == (len(history), "deleted")
    assert story.events[-1].image_after is None
    assert story.state.deleted and story.state.seq == len(history)
    assert (story.tombstone.seq, story.tombstone.retention_days) == (len(history), None)
    assert story.tombstone.policy.startswith("kept forever")
    assert story.published.row is None
    planted = simulated.planted[DELETED_CUSTOMER]
    assert story.quarantined == [
        Quarantined(
            run_id="night2",
            topic=planted.topic,
            partition=planted.partition,
            offset=planted.offset,
            timestamp=planted.timestamp.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            reason="bad_value",
            detail="value cannot be decoded with its schema type in column(s): balance",
            matched_by="kafka_key",
        )
    ]


def test_a_record_quarantined_with_its_decoded_key_is_in_the_story(spark, simulated):
    table_id, key = QUARANTINED_LINE
    story = explain(simulated, table_id, {"order_id": str(key[0]), "line_no": key[1]}, spark=spark)
    planted = simulated.planted[QUARANTINED_LINE]
    assert [(q.run_id, q.offset, q.reason, q.detail, q.matched_by) for q in story.quarantined] == [
        (
            "night2",
            planted.offset,
            "bad_value",
            "value does not match its declared type in column(s): qty",
            "decoded_key",
        )
    ]
    assert len(story.events) == len(simulated.events_of(table_id, key))
    rendered = render_explanation(story)
    assert f"{planted.topic}[{planted.partition}]@{planted.offset}" in rendered
    assert (
        "bad_value: value does not match its declared type in column(s): qty (matched by its decoded key)" in rendered
    )

    # Its quarantine folder deleted: not "quarantined nothing", since the run's summary counts two.
    quarantine = simulated.tmp / "warehouse" / PIPELINE / "runs" / "night2" / "decoded" / "record_kind=quarantine"
    with moved_aside(quarantine):
        without = explain(simulated, table_id, {"order_id": str(key[0]), "line_no": key[1]}, spark=spark)
    assert without.quarantined == []
    assert (
        Source(
            kind="quarantine",
            path=str(quarantine),
            status="missing",
            run_id="night2",
            note="the run quarantined 2 record(s), but its quarantine folder is gone",
        )
        in without.sources
    )


def test_json_output_has_the_documented_fields(simulated, capsys):
    drift = simulated.history.drift_rows[0]
    key = json.dumps(simulated.key_json(drift.table_id, drift.key))
    args = ["explain", "--config", str(simulated.config), "--pipeline", PIPELINE, "--table", drift.table_id]
    assert cli.main([*args, "--key", key, "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    assert set(story) == {
        "explain_format", "pipeline", "format", "table_id", "key", "key_text", "run_id", "runs", "sources", "events",
        "winner", "reconciliation", "lost_changes", "quarantined", "state", "tombstone", "published", "notes",
    }  # fmt: skip
    assert (story["explain_format"], story["pipeline"], story["run_id"], story["runs"]) == (
        1, PIPELINE, "night2", ["night1", "night2"]
    )  # fmt: skip
    assert set(story["events"][0]) == {
        "seq", "op", "position", "topic", "partition", "offset", "row_index", "event_time", "runs", "after", "before",
        "changed_columns", "image_after", "winner", "epoch",
    }  # fmt: skip
    assert set(story["lost_changes"][0]) == {
        "kind", "run_id", "epoch_no", "snapshot_seq", "snapshot_position", "snapshot_offset", "column",
        "snapshot_value", "incremental_value", "set_by", "newest_before", "proven", "text",
    }  # fmt: skip
    assert story["lost_changes"][0]["column"] == drift.column
    assert {(s["kind"], s["run_id"], s["status"]) for s in story["sources"]} >= {
        ("changelog", "night1", "read"),
        ("changelog", "night2", "read"),
        ("reconciliation", "night2", "read"),
    }
    # The text form tells the same story.
    assert cli.main([*args, "--key", key]) == 0
    assert story["lost_changes"][0]["text"] in capsys.readouterr().out


def test_a_key_with_no_events_is_told_so(spark, simulated, capsys):
    args = ["explain", "--config", str(simulated.config), "--pipeline", PIPELINE, "--table", "shop.customers"]
    assert cli.main([*args, "--key", '{"id": 999999}']) == 0
    out = capsys.readouterr().out
    assert "events: none archived for this key in the runs read" in out
    assert (
        'no archived event of key ["999999"] of shop.customers in the changelogs of the runs read (night1, night2)'
        in out
    )
    story = explain(simulated, "shop.customers", {"id": "999999"}, spark=spark)
    assert (story.events, story.winner, story.state, story.quarantined, story.lost_changes) == ([], None, None, [], [])
    assert story.published.row is None


def test_a_story_as_of_an_earlier_run_reads_only_its_runs(spark, simulated):
    table_id, key = BUSY_ORDER
    story = explain(simulated, table_id, simulated.key_json(table_id, key), "night1", spark=spark)
    first_night = [e for e in simulated.events_of(table_id, key) if e.time < SECOND_NIGHT]
    assert (story.run_id, story.runs) == ("night1", ["night1"])
    assert [(e.op, e.offset) for e in story.events] == [
        (e.op, simulated.record_of[e.position].offset) for e in first_night
    ]
    assert story.published.run_id == "night1" and story.published.seq == len(first_night)


def test_a_gone_changelog_is_decoded_again_from_the_archive_and_without_the_archive_named_missing(spark, simulated):
    """A run's decoded folder deleted to save space: the story decodes that run's records again from the archive
    files its manifest names, and tells the same story. With the archive files gone too, the run is named missing
    and the story says it is incomplete."""
    table_id, key = BUSY_ORDER
    key_json = simulated.key_json(table_id, key)
    whole = explain(simulated, table_id, key_json, spark=spark)
    run_folder = simulated.tmp / "warehouse" / PIPELINE / "runs" / "night1"
    changelog = run_folder / "decoded" / "record_kind=changelog"
    files = len(json.loads((run_folder / "manifest.json").read_text())["files"])
    archive = simulated.tmp / "archive"
    with moved_aside(changelog):
        redecoded = explain(simulated, table_id, key_json, spark=spark)
        with moved_aside(archive):
            incomplete = explain(simulated, table_id, key_json, spark=spark)

    assert [(e.op, e.offset, e.runs, e.image_after) for e in redecoded.events] == [
        (e.op, e.offset, e.runs, e.image_after) for e in whole.events
    ]
    assert (redecoded.winner, redecoded.published, redecoded.lost_changes) == (
        whole.winner,
        whole.published,
        whole.lost_changes,
    )
    first_night = [e for e in whole.events if e.runs == ["night1"]]
    [source] = [s for s in redecoded.sources if s.kind == "changelog" and s.run_id == "night1"]
    assert source == Source(
        kind="changelog",
        path=str(changelog),
        status="from_archive",
        run_id="night1",
        rows=len(first_night),
        note=f"decoded again from topics {first_night[0].topic} of the {files} archive files its manifest names",
    )
    assert not any("incomplete" in note for note in redecoded.notes)

    [source] = [s for s in incomplete.sources if s.kind == "changelog" and s.run_id == "night1"]
    assert (source.status, source.note.split(", e.g.")[0]) == (
        "missing",
        f"{files} of the {files} archive files it read are gone too",
    )
    assert all(e.runs == ["night2"] for e in incomplete.events)
    assert (
        "the story is incomplete: the changelog of run(s) night1 is missing, so their events are not shown"
        in incomplete.notes
    )


@contextlib.contextmanager
def moved_aside(path: Path):
    aside = path.with_name(path.name + ".aside")
    shutil.move(path, aside)
    try:
        yield
    finally:
        shutil.move(aside, path)


def test_a_numeric_key_may_be_given_as_text(simulated):
    config = str(simulated.config)
    as_number = resolve_request(config, PIPELINE, "shop.order_items", '{"order_id": 2147484667, "line_no": 1}')
    as_text = resolve_request(config, PIPELINE, "shop.order_items", '{"line_no": "1", "order_id": "2147484667"}')
    assert as_number.key_text == as_text.key_text == '["2147484667","1"]'
    assert (as_number.run.run_id, [r.run_id for r in as_number.runs]) == ("night2", ["night1", "night2"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--pipeline": "nope"}, "--pipeline: pipeline 'nope' is not declared in the config; declared pipelines: sim"),
        (
            {"--table": "shop.nope"},
            "--table: table 'shop.nope' is not published by pipeline 'sim'; published tables: shop.customers, shop.order_items, shop.orders",
        ),
        (
            {"--key": "{id: 1}"},
            """--key: not JSON (Expecting property name enclosed in double quotes); give the key as a JSON object, e.g. --key '{"id": 1}'""",
        ),
        (
            {"--key": "[1]"},
            """--key: '[1]' is not a JSON object; give the key as an object of its columns, e.g. --key '{"id": 1}'""",
        ),
        (
            {"--key": '{"id": 1, "name": "x"}'},
            "--key: name is not a key column of table 'shop.customers'; its key columns are: id",
        ),
        (
            {"--key": "{}"},
            """--key: key column(s) id missing; table 'shop.customers' is keyed by id: give every one, e.g. --key '{"id": 1}'""",
        ),
        ({"--key": '{"id": "abc"}'}, '--key: column id is int: "abc" is not an integer; give e.g. 42'),
        ({"--key": '{"id": [1]}'}, "--key: column id: a key value is a number, text or boolean, not [1]"),
        (
            {"--run-id": "night9"},
            "--run-id: pipeline 'sim' has no finished run 'night9' (no runs/night9/summary.json); its runs, oldest first: night1, night2",
        ),
        (
            {"--run-id": "../night1"},
            "--run-id: '../night1' is not a run id: use letters, digits, '_', '-' and '.', starting with a letter or digit, at most 150 characters",
        ),
    ],
)
def test_a_bad_argument_is_refused_before_any_spark_work(spark, simulated, capsys, change, message):
    arguments = {
        "--config": str(simulated.config),
        "--pipeline": PIPELINE,
        "--table": "shop.customers",
        "--key": '{"id": 1}',
    }
    arguments.update(change)
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup()
    assert cli.main(["explain", *[part for pair in arguments.items() for part in pair]]) == 2
    assert capsys.readouterr().err == f"cdcreplay explain: {message}\n"
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs_before


# -- the story's rules on a few hand-made events (no Spark: the rows as the changelog gives them, in order) ----------


def changelog_row(
    op: str, position: list[int], offset: int, after: dict | None, partition: int = 0, row_index: int = 0
):
    return {
        "op": op,
        "position": [Decimal(p) for p in position],
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "row_index": row_index,
        "event_time_text": None,
        "after": after,
        "before": None,
        "run_id": "r1",
    }


def test_a_tie_of_positions_is_broken_by_the_offset_and_a_later_truncate_deletes_the_winner():
    events = build_events(
        [
            changelog_row("snapshot", [7], 1, {"id": "1", "a": "x"}),
            # Read again at the same source position: rows of one snapshot share it.
            changelog_row("snapshot", [7], 4, {"id": "1", "a": "y"}),
            changelog_row("truncate", [9], 6, None),
        ]
    )
    latest = {"op": "delete", "topic": "t", "partition": 0, "offset": 4, "position": [Decimal(7)]}
    assert winner_of(events, latest) == Winner(
        seq=2,
        effect="truncated",
        decided_by="offset",
        compared_with=1,
        reason="it shares source position [7] with #1 (offset 1); Kafka offset 4 after 1 breaks the tie; "
        "the truncate of the table at #3 (offset 6) came after it: deleted",
        truncate_seq=3,
    )
    assert [(e.changed_columns, e.image_after) for e in events] == [
        (["a", "id"], {"id": "1", "a": "x"}),
        (["a"], {"id": "1", "a": "y"}),
        ([], None),
    ]


def test_a_key_the_snapshot_reads_but_the_changes_deleted_names_the_delete():
    events = build_events(
        [
            changelog_row("insert", [1], 1, {"id": "1", "a": "x"}),
            changelog_row("delete", [2], 2, None),
            changelog_row("snapshot", [3], 3, {"id": "1", "a": "x"}),
        ]
    )
    compared = Reconciliation(
        "r1", 1, "missing_in_incremental", [], snapshot_seq=3, incremental_seq=2, incremental_op="delete"
    )
    [lost] = lost_changes(events, [compared], {}, "t")
    assert (lost.kind, lost.proven, lost.newest_before.seq, lost.newest_before.op) == ("row", True, 2, "delete")
    assert lost.text == (
        "the snapshot at position [3] (offset 3) reads the key; the newest event before the snapshot (offset 2) "
        "deletes the key, and no archived event before the snapshot creates it again: an insert is missing from the archive"
    )


def test_a_key_the_snapshot_did_not_read_but_the_changes_keep_names_the_missing_delete():
    """missing_in_snapshot: the replayed changes leave the key live, and the snapshot epoch -- which read other keys
    up to its last read -- did not read it: the archive lacks the delete. Events after the epoch's last read do not
    count as the newest event before it."""
    events = build_events(
        [
            changelog_row("insert", [1], 1, {"id": "1", "a": "x"}),
            changelog_row("update", [2], 2, {"id": "1", "a": "y"}),
            changelog_row("update", [9], 9, {"id": "1", "a": "z"}),  # after the epoch's last read
        ]
    )
    compared = Reconciliation(
        "r1", 2, "missing_in_snapshot", [], snapshot_seq=None, incremental_seq=3, incremental_op="update"
    )
    last_read = {"position": [5], "partition": 0, "offset": 5, "row_index": 0}
    metrics = {"r1": [{"table_id": "t", "epoch_no": 2, "last_order": json.dumps(last_read)}]}
    [lost] = lost_changes(events, [compared], metrics, "t")
    assert (lost.kind, lost.proven, lost.snapshot_seq, lost.newest_before.seq) == ("row", True, None, 2)
    assert lost.text == (
        "snapshot epoch 2 of run r1 did not read the key; the newest event before its last read (offset 2) is an "
        "update, and no archived event deletes it: a delete is missing from the archive"
    )
    # Without the epoch's extent (no metrics), every change counts; without any change, the words say so.
    [unbounded] = lost_changes(events, [compared], {}, "t")
    assert unbounded.newest_before.seq == 3
    [no_event] = lost_changes([], [compared], {}, "t")
    assert no_event.newest_before is None
    assert "no event before its last read names the key, and no archived event deletes it" in no_event.text


# -- a key of a date and a timestamp: matched by value, whatever text it is given in ---------------------------------

READING_KEY_SCHEMA = [
    {"type": "int32", "optional": False, "name": "io.debezium.time.Date", "field": "day"},
    {"type": "string", "optional": False, "name": "io.debezium.time.ZonedTimestamp", "field": "at"},
]
READING_SCHEMA = [*READING_KEY_SCHEMA, {"type": "double", "optional": True, "field": "reading"}]


def reading_record(offset: int, op: str, day: int, at: str, before: float | None, after: float | None) -> Record:
    """A Debezium JsonConverter record (schemas on) of ``inventory.readings``, keyed by a date and a timestamp."""
    image = {"type": "struct", "fields": READING_SCHEMA, "optional": True, "name": "mysql1.inventory.readings.Value"}
    envelope = {
        "type": "struct",
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            SOURCE_SCHEMA,  # the simulator's: Debezium's MySQL connector
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": "mysql1.inventory.readings.Envelope",
    }
    row = {"day": day, "at": at}
    source = {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql1", "ts_ms": 1767607200000 + offset,
              "snapshot": "false", "db": "inventory", "table": "readings", "server_id": 1, "gtid": None,
              "file": "mysql-bin.000001", "pos": 100 * (offset + 1), "row": 0, "thread": 7, "query": None}  # fmt: skip
    payload = {
        "before": None if before is None else {**row, "reading": before},
        "after": None if after is None else {**row, "reading": after},
        "source": source,
        "op": op,
        "ts_ms": source["ts_ms"],
    }
    key = {"schema": {"type": "struct", "fields": READING_KEY_SCHEMA, "optional": False}, "payload": row}
    return Record("mysql1.inventory.readings", 0, offset, json.dumps({"schema": envelope, "payload": payload}),
                  json.dumps(key))  # fmt: skip


def test_a_date_and_timestamp_key_is_found_by_its_value_in_any_text(spark, tmp_path):
    day = 20458  # 2026-01-05 as Debezium's days since the epoch
    records = [
        reading_record(0, "c", day, "2026-01-05T10:00:00.5Z", None, 1.5),
        reading_record(1, "c", day, "2026-01-05T11:00:00Z", None, 7.0),  # another key: the same day, an hour later
        reading_record(2, "u", day, "2026-01-05T10:00:00.5Z", 1.5, 2.5),
    ]
    write_parquet(records, tmp_path / "archive" / "part-0.parquet")
    config = pipeline_config(tmp_path, "readings", "debezium-json", tmp_path / "archive")
    assert cli.main(["run", "--config", str(config), "--run-id", "r1", "--full-rebuild"]) == 0

    def story_of(key: dict):
        request = resolve_request(str(config), "readings", "inventory.readings", json.dumps(key))
        return explain_key(spark, request)

    # The decoder keeps the vendor's text of the timestamp ("...10:00:00.5Z"); a person types it otherwise.
    for at in ("2026-01-05 10:00:00.5", "2026-01-05T12:00:00.500+02:00", "2026-01-05T10:00:00.5Z"):
        story = story_of({"day": "2026-01-05", "at": at})
        assert [(e.op, e.offset) for e in story.events] == [("insert", 0), ("update", 2)], at
        assert story.winner.seq == 2 and story.state.offset == 2, at
        assert story.published.row == {"day": "2026-01-05", "at": "2026-01-05T10:00:00.500000Z", "reading": 2.5}, at
    other = story_of({"day": "2026-01-05", "at": "2026-01-05 11:00:00"})
    assert [(e.op, e.offset) for e in other.events] == [("insert", 1)]
    assert other.published.row["reading"] == 7.0
    nothing = story_of({"day": "2026-01-05", "at": "2026-01-05 10:00:00.4"})
    assert (nothing.events, nothing.state, nothing.published.row) == ([], None, None)


@pytest.mark.parametrize(
    ("declared", "given", "canonical_or_message"),
    [
        ("date", "2026-01-05", "2026-01-05"),
        ("date", "2026-13-05", '--key: column k is date: "2026-13-05" is not one; give e.g. 2026-01-05'),
        ("timestamp", "2026-01-05T12:00:00+02:00", "2026-01-05 10:00:00.000000"),
        (
            "timestamp",
            "10:00",
            '--key: column k is timestamp: "10:00" is not one; give e.g. 2026-01-05 10:00:00 (UTC unless it names a zone)',
        ),
        ("timestamp_ntz", "2026-01-05 10:00:00.5", "2026-01-05 10:00:00.500000"),
        (
            "timestamp_ntz",
            "2026-01-05 10:00:00Z",
            '--key: column k is timestamp_ntz: "2026-01-05 10:00:00Z" is not one; give e.g. 2026-01-05 10:00:00 '
            "(the wall-clock time, no zone)",
        ),
        ("double", 12, "12.0"),
        ("double", True, "--key: column k is double: true is not one; give e.g. 12.5"),
        ("binary", "AQI=", "AQI="),
        ("binary", "!!", '--key: column k is binary: "!!" is not one; give e.g. its base64 text, as the diff shows it'),
    ],
)
def test_a_key_value_matched_by_value_is_checked_and_given_one_text(declared, given, canonical_or_message):
    if canonical_or_message.startswith("--key"):
        with pytest.raises(ConfigError) as refused:
            canonical_key_value("k", given, declared)
        assert str(refused.value) == canonical_or_message
    else:
        assert canonical_key_value("k", given, declared) == canonical_or_message


def test_a_run_is_not_decoded_again_from_brokers_or_without_its_manifest(tmp_path):
    """The two cases ``from_archive`` declines before any Spark work, each with the note the story shows."""
    from types import SimpleNamespace

    from cdcreplay.explain.from_archive import redecode_run

    def request(layout: str):
        return SimpleNamespace(pipeline=SimpleNamespace(archive=SimpleNamespace(layout=layout)))

    def run(manifest_path):
        return SimpleNamespace(summary=SimpleNamespace(manifest_path=manifest_path))

    from_brokers = redecode_run(None, request("kafka"), run(None), (), None)
    assert (from_brokers.rows, from_brokers.note) == (
        None,
        "the run read Kafka brokers, whose records are not read again",
    )
    no_manifest = redecode_run(None, request("parquet"), run(str(tmp_path / "manifest.json")), (), None)
    assert (no_manifest.rows, no_manifest.note) == (
        None,
        "its manifest is gone too, so the records it read are unknown",
    )


def test_a_manifests_selection_is_read_back_and_narrowed_to_the_tables_topics():
    from cdcreplay.archive import Selection, build_manifest
    from cdcreplay.explain.from_archive import run_selection
    from cdcreplay.run_spec import OffsetRange

    ranges = (OffsetRange("a", 0, 5, 9),)
    recorded = Selection(("a", "b"), datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), ranges)
    selection = build_manifest([], [], [], recorded)["selection"]
    assert run_selection(json.loads(json.dumps(selection)), ()) == recorded
    assert run_selection(selection, ("b", "c")).topics == ("b",)  # a topic the run did not select stays out
    assert run_selection({**selection, "topics": []}, ("c",)).topics == ("c",)  # the run read every topic
