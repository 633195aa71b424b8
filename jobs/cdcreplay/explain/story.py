"""A key's story, as data: what `cdcreplay explain` prints and what ``--json`` writes (the contract of a later UI
page; docs/how-it-works.md, "Explaining a key", documents every field).

Values are what the changelog holds: canonical text per column (NULL as null), source positions as the text
``[a,b,c]`` the reconciliation's diff uses, event times as ISO-8601 UTC. Events are numbered ``seq`` 1, 2, ... in
compaction order, and every other part names events by that number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Bumped when a field changes meaning or goes away (adding a field keeps it).
EXPLAIN_FORMAT = 1


# The statuses of a source whose rows of the key the story holds.
READ_STATUSES = ("read", "from_archive")


@dataclass
class Source:
    """One file set the story read (or looked for): a run's changelog, quarantine or reconciliation diff, the state
    or the published table."""

    kind: str  # changelog | quarantine | reconciliation | state | published_table
    path: str
    status: str  # read | from_archive (explain.from_archive) | missing | not_readable | none (nothing to read)
    run_id: str | None = None
    rows: int = 0  # rows of this key found there
    note: str = ""


@dataclass
class Epoch:
    """The snapshot epoch a snapshot read belongs to (epochs are found per run, see reconcile/epochs.py)."""

    run_id: str
    epoch_no: int | None  # None: the run's reconciliation is not there, so the epoch is not known
    kind: str | None = None  # baseline | reconciled
    verdict: str | None = None  # pass | fail | baseline
    first_order: str | None = None
    last_order: str | None = None


@dataclass
class Event:
    """One row event of the key (or a truncate of its table), once, however often it was archived or read."""

    seq: int
    op: str
    position: str | None
    topic: str
    partition: int
    offset: int
    row_index: int
    event_time: str | None
    runs: list[str]  # the runs whose changelog holds it
    after: dict | None  # the image the message carried (a partial image lacks columns)
    before: dict | None
    changed_columns: list[str]  # columns whose value differs from the key's image before this event
    image_after: dict | None  # the key's whole image after this event (partial images completed; None: deleted)
    winner: bool = False
    epoch: Epoch | None = None  # snapshot reads only


@dataclass
class Winner:
    """The event compaction keeps for the key, and why it is the last in compaction order."""

    seq: int
    effect: str  # live | deleted | truncated (a truncate after it deleted the key)
    decided_by: str  # only_event | position | partition | offset | row_index
    compared_with: int | None  # the seq of the event before it in compaction order
    reason: str
    truncate_seq: int | None = None


@dataclass
class Reconciliation:
    """The key's row in a run's reconciliation diff (one per snapshot epoch that compared it)."""

    run_id: str
    epoch_no: int
    status: str  # match | mismatch | missing_in_incremental | missing_in_snapshot | in_flight
    differing_columns: list[dict]  # {column, snapshot_value, incremental_value}
    snapshot_seq: int | None  # the snapshot read compared
    incremental_seq: int | None  # the event that gave the incremental value
    incremental_op: str | None


@dataclass
class NewestBefore:
    """The newest event before a snapshot read that sets a column (or deletes the key)."""

    seq: int
    op: str
    topic: str
    partition: int
    offset: int
    position: str | None
    value: str | None  # the column's value it sets (None for a delete)


@dataclass
class LostChange:
    """A difference between a snapshot read and the replayed changes, with what the archive says about it."""

    kind: str  # column (a mismatching column) | row (the snapshot read a key the changes deleted or never created)
    run_id: str
    epoch_no: int
    proven: bool  # no archived event after the newest one before the snapshot produces what the snapshot shows
    text: str
    snapshot_seq: int | None = None  # None for a key the snapshot did not read
    snapshot_position: str | None = None
    snapshot_offset: int | None = None
    column: str | None = None  # the rest: a `column` difference only
    snapshot_value: str | None = None
    incremental_value: str | None = None
    set_by: list[int] = field(default_factory=list)  # seqs of other events that set the column to the snapshot's value
    newest_before: NewestBefore | None = None


@dataclass
class Quarantined:
    """A quarantined record that names the key: by its decoded key, or by its Kafka key."""

    run_id: str
    topic: str
    partition: int
    offset: int
    timestamp: str | None
    reason: str
    detail: str | None
    matched_by: str  # decoded_key | kafka_key


@dataclass
class StateRow:
    """The key's row in the compacted state (live row or tombstone) as of the story's run."""

    state_version: int
    deleted: bool
    op: str
    topic: str
    partition: int
    offset: int
    position: str | None
    event_time: str | None
    seq: int | None  # the event it is (None: not among the events read)


@dataclass
class Tombstone:
    """The key is deleted: its tombstone keeps a late, older event from bringing it back."""

    seq: int | None
    event_time: str | None
    retention_days: int | None  # None: kept forever
    policy: str


@dataclass
class PublishedRow:
    """The key's row in the published table as of the story's run, with its provenance columns."""

    version: str
    run_id: str
    delta_version: int | None
    row: dict | None  # None: the key is not in the published table
    provenance: dict  # _op, _event_time, _topic, _partition, _offset, _position
    seq: int | None  # the event its provenance names


@dataclass
class Explanation:
    pipeline: str
    format: str
    table_id: str
    key: dict  # key column -> canonical text
    key_text: str  # the changelog's key column
    run_id: str  # the story ends with this run's published version
    runs: list[str]  # the runs read, oldest first
    sources: list[Source] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    winner: Winner | None = None
    reconciliation: list[Reconciliation] = field(default_factory=list)
    lost_changes: list[LostChange] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)
    state: StateRow | None = None
    tombstone: Tombstone | None = None
    published: PublishedRow | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"explain_format": EXPLAIN_FORMAT, **asdict(self)}
