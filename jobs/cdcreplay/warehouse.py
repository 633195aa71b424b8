"""Where things live in the warehouse, and the publish of a pipeline's tables as one consistent set.

Layout under ``<warehouse>/<pipeline>/``::

    _CURRENT.json                       the published version: the Delta version of each table and of the state,
                                        and the versions kept readable (replaced atomically)
    state/                              Delta table: the compacted state in changelog form (live rows, tombstones),
                                        partitioned by a hash of table_id; written by state_store
    patterns/<state version>.json       what the type stage needs of the whole state, as of that state version
    tables/<table>/                     Delta table: the typed latest-state table users read, with any Delta reader
    runs/<run_id>/manifest.json         what was read: files, offsets per partition, gaps, duplicates
    runs/<run_id>/summary.json          counts per stage and table, the published version, the verdict
    runs/<run_id>/decoded/record_kind=changelog/    this run's decoded row changes (input of reconciliation)
    runs/<run_id>/decoded/record_kind=quarantine/   records that could not be decoded: raw bytes, reason, coordinates
    runs/<run_id>/decoded/record_kind=control/      DDL, transaction markers, tombstones, heartbeats
    runs/<run_id>/type_conflicts/       live rows held back from their table: a stored value no longer fits its type
    runs/<run_id>/reconcile/            diff/, metrics.json, report.md, data_docs/

Each Delta commit is atomic, but a run commits several tables: readers who need one run's tables together (the
reconciliation, ``read_table``, ``cdcreplay show-table``) read each table as of the version ``_CURRENT.json`` names.
The warehouse may be a local folder or an S3 prefix (``cdcreplay.storage``). A run writes the pointer (one atomic
replace: a rename on a local disk, a PUT on S3) only after every commit and the audit; a run that
fails or dies before it leaves the previous pointer, and its commits are rolled back before the next run builds on
the tables (``delta_tables.roll_back_to``). Versions older than the ``keep_versions`` newest published ones are
vacuumed. ``_LOCK.json`` is held while a run writes (see :func:`pipeline_lock`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from cdcreplay.contracts import SUMMARY_FILE
from cdcreplay.storage import Location

CURRENT_FILE = "_CURRENT.json"
STATE_FOLDER = "state"
TABLES_FOLDER = "tables"
PATTERNS_FOLDER = "patterns"
# The folder of every version before the tables were Delta tables (one Parquet copy of the state and tables each).
LEGACY_VERSIONS_FOLDER = "versions"
LOCK_FILE = "_LOCK.json"
# The published pointer's record of how far a Kafka pipeline's state has read each partition (kafka_source).
KAFKA_READ_TO = "kafka_read_to"
# A lock older than this is taken to belong to a run that died on another machine (where its pid cannot be checked).
LOCK_STALE_AFTER_S = 6 * 3600
# Breaking a stale lock takes a read and a delete; a marker older than this belongs to a run that died doing it.
BREAKING_STALE_AFTER_S = 300
UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9_.\-]|^\.+")
# Longer folder names are cut and made unique with a hash of the whole id (file systems allow 255 bytes).
MAX_FOLDER_NAME = 200


def table_folder_name(table_id: str) -> str:
    """A table id (from the DATA: it may be anything) as one folder name, distinct ids giving distinct names.

    Letters, digits, '_', '-' and inner dots are kept; every other character is escaped as the %XX of its UTF-8
    bytes, and so are leading dots ("." and ".." would name the folder itself or its parent, ".x" a hidden one).
    A name longer than MAX_FOLDER_NAME keeps its start and ends with '~' and a hash of the id ('~' is always
    escaped, so a short name never looks like a long one).
    """
    escaped = UNSAFE_PATH_CHARS.sub(
        lambda m: "".join(f"%{byte:02X}" for byte in m.group(0).encode("utf-8", "surrogatepass")), table_id
    )
    if len(escaped) <= MAX_FOLDER_NAME:
        return escaped
    digest = hashlib.sha256(table_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{escaped[: MAX_FOLDER_NAME - 25]}~{digest}"


def _folder(name: str, what: str) -> str:
    """``name`` as one path segment below the warehouse: never empty, '.', '..', a nested path or a NUL."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\x00"):
        raise ValueError(f"{what} {name!r} cannot be a folder name under the warehouse")
    return name


@dataclass(frozen=True)
class PipelinePaths:
    warehouse: str
    pipeline: str

    def __post_init__(self):
        _folder(self.pipeline, "pipeline")

    @property
    def root(self) -> Location:
        return Location(self.warehouse) / self.pipeline

    @property
    def current_file(self) -> Location:
        return self.root / CURRENT_FILE

    @property
    def lock_file(self) -> Location:
        return self.root / LOCK_FILE

    @property
    def state_dir(self) -> Location:
        return self.root / STATE_FOLDER

    def patterns_file(self, state_version: int) -> Location:
        return self.root / PATTERNS_FOLDER / f"{state_version}.json"

    def table_dir(self, table_id: str) -> Location:
        return self.root / TABLES_FOLDER / table_folder_name(table_id)

    @property
    def runs_dir(self) -> Location:
        return self.root / "runs"

    def run_dir(self, run_id: str) -> Location:
        return self.runs_dir / _folder(run_id, "run id")

    def run_file(self, run_id: str, name: str) -> Location:
        return self.run_dir(run_id) / name


def latest_run_id(paths: PipelinePaths) -> str | None:
    """The run of the pipeline whose summary was written last (local or on S3)."""
    written = []
    for run in paths.runs_dir.iterdir():
        summary = run / SUMMARY_FILE
        if summary.is_file():
            written.append((summary.modified_at(), run.name))
    return max(written)[1] if written else None


def new_version(run_id: str) -> str:
    """Versions sort by creation time; the run id keeps them traceable."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{run_id}"[:200]


def read_current(paths: PipelinePaths) -> dict | None:
    """The published pointer, or None before the first publish."""
    try:
        return read_json(paths.current_file)
    except FileNotFoundError:
        return None


def write_json_atomically(path: Location | str, document: dict) -> None:
    """Replace the JSON file in one step: a reader sees the old document or the new one."""
    Location(path).write_text(json.dumps(document, indent=2, sort_keys=True, default=str))


def read_json(path: Location | str) -> dict:
    """A JSON file written by :func:`write_json_atomically`; FileNotFoundError when it does not exist."""
    return json.loads(Location(path).read_text())


def is_legacy(current: dict) -> bool:
    """A pointer written before the tables were Delta tables (it names Parquet folders under ``versions/``)."""
    return "state_version" not in current


def published_entry(version: str, run_id: str, state_version: int, table_versions: dict[str, int]) -> dict:
    """One published version as the pointer's history keeps it: the Delta version of the state and of each table."""
    return {"version": version, "run_id": run_id, "state_version": state_version, "tables": table_versions}


def publish(
    paths: PipelinePaths,
    entry: dict,
    tables: dict[str, dict],
    keep_versions: int,
    built_on: dict | None = None,
    kafka_read_to: dict | None = None,
) -> dict:
    """Point readers at the published version ``entry`` (see :func:`published_entry`) in one atomic step; the pointer.

    ``tables``: what the summary says of each table, written beside its path and Delta version. The pointer's
    history keeps the ``keep_versions`` newest published versions, which stay readable (see
    :func:`oldest_kept_versions`). ``built_on``: the published version this run compacted onto. It stays readable
    until the next publish, whatever ``keep_versions`` says: the run's reconciliation reads that state as the history
    before the run's changes. ``kafka_read_to``: a Kafka pipeline's offsets the published state has read up to
    (``{topic: {partition: offset}}``, where a resumed run goes on: kafka_source).
    """
    previous = read_current(paths)
    published_before = previous.get("history", []) if previous and not is_legacy(previous) else []
    history = [entry, *(e for e in published_before if e["version"] != entry["version"])][:keep_versions]
    pointer = {
        "version": entry["version"],
        "run_id": entry["run_id"],
        "published_at": datetime.now(UTC).isoformat(),
        "state": STATE_FOLDER,
        "state_version": entry["state_version"],
        "tables": {
            table_id: {
                **info,
                "path": str(paths.table_dir(table_id).relative_to(paths.root)),
                "delta_version": entry["tables"][table_id],
            }
            for table_id, info in sorted(tables.items())
        },
        "history": history,  # newest first; the versions kept readable
    }
    if kafka_read_to is not None:
        pointer[KAFKA_READ_TO] = kafka_read_to
    if built_on is not None and all(e["version"] != built_on["version"] for e in history):
        pointer["built_on"] = built_on  # kept beside the history until the next publish
    write_json_atomically(paths.current_file, pointer)
    (paths.root / LEGACY_VERSIONS_FOLDER).remove_tree()  # an earlier release's copies
    return pointer


def kept_entries(pointer: dict) -> list[dict]:
    """The published versions the pointer keeps readable: its history, and the version its run built on."""
    return [*pointer["history"], *([pointer["built_on"]] if "built_on" in pointer else [])]


def oldest_kept_versions(pointer: dict) -> dict[str, int]:
    """Per Delta table of the pipeline (the state as ``STATE_FOLDER``, tables by id): the oldest version to keep."""
    oldest: dict[str, int] = {}
    for entry in kept_entries(pointer):
        for name, version in [(STATE_FOLDER, entry["state_version"]), *entry["tables"].items()]:
            if version is not None:  # None: a table whose keys were all deleted before it was ever typed
                oldest[name] = min(version, oldest.get(name, version))
    return oldest


def remove_unkept_patterns(paths: PipelinePaths, pointer: dict) -> None:
    """Drop the pattern files of state versions no kept version reads."""
    kept = {f"{entry['state_version']}.json" for entry in kept_entries(pointer)}
    for file in (paths.root / PATTERNS_FOLDER).iterdir():
        if file.name not in kept:
            file.unlink()


def published_table(paths: PipelinePaths, table_id: str) -> tuple[str, int]:
    """The published typed table's Delta folder and version, or a clear error naming what is published."""
    current = read_current(paths)
    if current is None:
        raise FileNotFoundError(f"pipeline {paths.pipeline!r} has not published anything under {paths.root} yet")
    if is_legacy(current):
        raise FileNotFoundError(
            f"pipeline {paths.pipeline!r} was published by an earlier release (Parquet under versions/): run it "
            "once with --full-rebuild to publish Delta tables"
        )
    if table_id not in current["tables"]:
        known = ", ".join(sorted(current["tables"])) or "(none)"
        raise KeyError(f"table {table_id!r} is not published by pipeline {paths.pipeline!r}; published: {known}")
    info = current["tables"][table_id]
    return str(paths.root / info["path"]), info["delta_version"]


def read_table(spark, warehouse: str, pipeline: str, table_id: str):
    """The published latest-state table as a DataFrame, as of the published version (the documented way to read
    one from Spark; ``spark.read.format("delta").load(folder)`` reads its newest commit)."""
    from cdcreplay.delta_tables import read_version

    path, version = published_table(PipelinePaths(warehouse, pipeline), table_id)
    if version is None:
        raise FileNotFoundError(
            f"table {table_id!r} of pipeline {pipeline!r} has no columns yet: every key of it was deleted before it "
            "was ever typed (its row count is 0)"
        )
    return read_version(spark, path, version)


def published_rows(paths: PipelinePaths, table_id: str):
    """The published table as a pyarrow Table, read without Spark (delta-rs), as of the published version.

    Read through delta-rs's query engine (Rust threads only), which also applies deletion vectors (the pipeline's
    `deletion_vectors` option), rather than its Arrow reader (`to_pyarrow_table`): that one reads the files through a
    filesystem written in Python, and an Arrow I/O thread that calls into it while the interpreter shuts down aborts
    the process ("terminate called without an active exception", exit 134) after a correct read: 4 of 180 processes
    that read the demo's tables and exited, none of 240 through the query engine."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    from cdcreplay.storage import delta_rs_options

    path, version = published_table(paths, table_id)
    if version is None:  # every key deleted before the table was ever typed: no columns, no rows
        return pa.table({})
    table = DeltaTable(path, version=version, storage_options=delta_rs_options())
    rows = pa.table(QueryBuilder().register("published", table).execute("SELECT * FROM published").read_all())
    return rows.cast(pa.schema(table.schema().to_arrow()))  # the query engine's string views as plain strings


class PipelineBusyError(RuntimeError):
    """Another live run holds the pipeline's lock."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is just not ours
    return True


def _lock_is_stale(holder: dict, now: float) -> bool:
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        return not _pid_alive(holder["pid"])
    return now - float(holder.get("acquired_at_epoch", 0)) > LOCK_STALE_AFTER_S


def _broken_marker(paths: PipelinePaths, holder: dict) -> Location:
    """The file whose creation gives one run the right to remove the stale lock ``holder`` (one per lock taken)."""
    taken = hashlib.sha256(json.dumps(holder, sort_keys=True).encode("utf-8")).hexdigest()[:24]
    return paths.root / f".{LOCK_FILE}.broken-{taken}"


def _break_stale_lock(paths: PipelinePaths, holder: dict, me: dict) -> None:
    """Remove the stale lock ``holder``, unless another run is doing so (then the caller tries again and waits).

    Of the runs that find the same stale lock, the one that creates its marker removes it, and only if the lock is
    still that one; the marker goes when the lock has gone. A run that comes later with the same stale reading
    finds the lock gone or a newer one, and leaves it: no run removes a lock that a newer run took meanwhile.
    """
    marker = _broken_marker(paths, holder)
    if not marker.create_exclusive(json.dumps(me)):
        if time.time() - marker.modified_at() > BREAKING_STALE_AFTER_S:
            marker.unlink()  # the run that was breaking the lock died doing so
        return
    try:
        try:
            still = read_json(paths.lock_file)
        except (FileNotFoundError, json.JSONDecodeError):
            return
        if still == holder:
            paths.lock_file.unlink()
    finally:
        marker.unlink()


@contextmanager
def pipeline_lock(paths: PipelinePaths, run_id: str):
    """Hold the pipeline's write lock for the body: two runs never write one pipeline's warehouse folder at once.

    The lock is a file created only if absent: ``O_EXCL`` on a local disk, a conditional PUT on S3 (see
    ``cdcreplay.storage``), so of two runs exactly one takes it, on one machine or many. A crashed run cannot hold it
    forever: on the same host a lock whose process is gone is stale, elsewhere one older than ``LOCK_STALE_AFTER_S``
    (see :func:`_break_stale_lock`).
    """
    paths.root.mkdir()
    me = {
        "run_id": run_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "acquired_at": datetime.now(UTC).isoformat(),
        "acquired_at_epoch": time.time(),
    }
    for _attempt in range(3):
        if paths.lock_file.create_exclusive(json.dumps(me)):
            break
        try:
            holder = read_json(paths.lock_file)
        except (FileNotFoundError, json.JSONDecodeError):
            holder = {}  # released meanwhile, or being written: try again
        if holder and not _lock_is_stale(holder, time.time()):
            raise PipelineBusyError(
                f"pipeline {paths.pipeline!r} is being written by run {holder.get('run_id')} (pid "
                f"{holder.get('pid')} on {holder.get('host')} since {holder.get('acquired_at')}); run again when "
                f"it is done, or delete {paths.lock_file} if that run is known to be gone"
            ) from None
        if holder:
            _break_stale_lock(paths, holder, me)
    else:
        raise PipelineBusyError(f"pipeline {paths.pipeline!r}: could not take the lock {paths.lock_file}; run again")
    try:
        yield
    finally:
        try:
            holder = read_json(paths.lock_file)
        except (FileNotFoundError, json.JSONDecodeError):
            holder = {}
        if holder == me:
            paths.lock_file.unlink()
