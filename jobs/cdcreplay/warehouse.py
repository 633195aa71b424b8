"""Where things live in the warehouse, and the atomic publish of a pipeline's tables.

Layout under ``<warehouse>/<pipeline>/``::

    _CURRENT.json                       the published version: which folder holds each table (replaced atomically)
    versions/<version>/state/           compacted state in changelog form (live rows, tombstones), by table_id hash;
                                        whole, or a base plus the deltas of the runs since (see state_store.py)
    versions/<version>/tables/<table>/  the typed latest-state table users read (Parquet)
    runs/<run_id>/manifest.json         what was read: files, offsets per partition, gaps, duplicates
    runs/<run_id>/summary.json          counts per stage and table, the published version, the verdict
    runs/<run_id>/decoded/record_kind=changelog/    this run's decoded row changes (input of reconciliation)
    runs/<run_id>/decoded/record_kind=quarantine/   records that could not be decoded: raw bytes, reason, coordinates
    runs/<run_id>/decoded/record_kind=control/      DDL, transaction markers, tombstones, heartbeats
    runs/<run_id>/type_conflicts/       live rows held back from their table: a stored value no longer fits its type
    runs/<run_id>/reconcile/            diff/, metrics.json, report.md, data_docs/

A reader never sees a half-written table: a run writes a new ``versions/<version>`` folder and only then swaps
``_CURRENT.json`` (write to a temporary file, fsync, ``os.replace``). A failed run leaves the previous pointer.
``_LOCK.json`` is held while a run writes (see :func:`pipeline_lock`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

CURRENT_FILE = "_CURRENT.json"
LOCK_FILE = "_LOCK.json"
# A lock older than this is taken to belong to a run that died on another machine (where its pid cannot be checked).
LOCK_STALE_AFTER_S = 6 * 3600
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
    def root(self) -> Path:
        return Path(self.warehouse) / self.pipeline

    @property
    def current_file(self) -> Path:
        return self.root / CURRENT_FILE

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE

    def version_dir(self, version: str) -> Path:
        return self.root / "versions" / version

    def state_dir(self, version: str) -> Path:
        return self.version_dir(version) / "state"

    def table_dir(self, version: str, table_id: str) -> Path:
        return self.version_dir(version) / "tables" / table_folder_name(table_id)

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / _folder(run_id, "run id")

    def run_file(self, run_id: str, name: str) -> Path:
        return self.run_dir(run_id) / name


def new_version(run_id: str) -> str:
    """Versions sort by creation time; the run id keeps them traceable."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{run_id}"[:200]


def read_current(paths: PipelinePaths) -> dict | None:
    """The published pointer, or None before the first publish."""
    try:
        return json.loads(paths.current_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_json_atomically(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(document, stream, indent=2, sort_keys=True, default=str)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def publish(
    paths: PipelinePaths,
    version: str,
    tables: dict[str, dict],
    run_id: str,
    keep_versions: int,
    built_on: str | None = None,
) -> dict:
    """Point readers at ``version`` in one atomic step, then drop every version folder that is not one of the newest
    ``keep_versions`` published ones -- including the half-written folder of a run that crashed before publishing.

    ``built_on``: the version whose state this run compacted onto. It stays on disk until the next publish, whatever
    ``keep_versions`` says: the run's reconciliation reads that state as the history before the run's changes."""
    previous = read_current(paths)
    published_before = (previous.get("history") or [previous["version"]]) if previous else []
    history = [version, *(v for v in published_before if v != version)][:keep_versions]
    pointer = {
        "version": version,
        "run_id": run_id,
        "published_at": datetime.now(UTC).isoformat(),
        "state": str(paths.state_dir(version).relative_to(paths.root)),
        "tables": {
            table_id: {**info, "path": str(paths.table_dir(version, table_id).relative_to(paths.root))}
            for table_id, info in sorted(tables.items())
        },
        "history": history,  # newest first; the versions kept on disk
    }
    kept = set(history)
    if built_on is not None and built_on not in kept:
        pointer["built_on"] = built_on  # kept beside the history until the next publish
        kept.add(built_on)
    write_json_atomically(paths.current_file, pointer)
    _remove_versions_except(paths, keep=kept)
    return pointer


def _remove_versions_except(paths: PipelinePaths, keep: set[str]) -> None:
    versions_root = paths.root / "versions"
    if not versions_root.is_dir():
        return
    for folder in versions_root.iterdir():
        if folder.is_dir() and folder.name not in keep:
            shutil.rmtree(folder, ignore_errors=True)


def link_folder(source: Path, target: Path) -> None:
    """Give the new version's folder ``target`` (a table's, a state layer's) the files of the published folder
    ``source``, unchanged.

    Hard links: no data is copied, and the files stay when ``source``'s version is removed (a file is deleted with
    its last link). Where the file system has no hard links (or ``source`` is on another one), the files are copied.
    """
    for folder, _subfolders, files in os.walk(source):
        into = target / Path(folder).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(folder) / name, into / name)
            except OSError:
                shutil.copy2(Path(folder) / name, into / name)


def published_table_path(paths: PipelinePaths, table_id: str) -> str:
    """Folder of the published typed table, or a clear error naming what is published."""
    current = read_current(paths)
    if current is None:
        raise FileNotFoundError(f"pipeline {paths.pipeline!r} has not published anything under {paths.root} yet")
    if table_id not in current["tables"]:
        known = ", ".join(sorted(current["tables"])) or "(none)"
        raise KeyError(f"table {table_id!r} is not published by pipeline {paths.pipeline!r}; published: {known}")
    return str(paths.root / current["tables"][table_id]["path"])


def read_table(spark, warehouse: str, pipeline: str, table_id: str):
    """The published latest-state table as a DataFrame (the documented way to read one from Spark)."""
    return spark.read.parquet(published_table_path(PipelinePaths(warehouse, pipeline), table_id))


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


@contextmanager
def pipeline_lock(paths: PipelinePaths, run_id: str):
    """Hold the pipeline's write lock for the body: two runs never write one pipeline's warehouse folder at once.

    The lock is a file created with O_EXCL. A crashed run cannot hold it forever: on the same host a lock whose
    process is gone is stale, elsewhere one older than ``LOCK_STALE_AFTER_S``. A stale lock is broken by renaming
    it away (atomic: of two runs breaking it at once, one wins the rename and the other retries and waits).
    """
    paths.root.mkdir(parents=True, exist_ok=True)
    me = {
        "run_id": run_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "acquired_at": datetime.now(UTC).isoformat(),
        "acquired_at_epoch": time.time(),
    }
    for _attempt in range(3):
        try:
            handle = os.open(paths.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(paths.lock_file.read_text(encoding="utf-8"))
            except (FileNotFoundError, json.JSONDecodeError):
                holder = {}  # released meanwhile, or being written: try again
            if holder and not _lock_is_stale(holder, time.time()):
                raise PipelineBusyError(
                    f"pipeline {paths.pipeline!r} is being written by run {holder.get('run_id')} (pid "
                    f"{holder.get('pid')} on {holder.get('host')} since {holder.get('acquired_at')}); run again when "
                    f"it is done, or delete {paths.lock_file} if that run is known to be gone"
                ) from None
            if holder:
                with suppress(FileNotFoundError):
                    os.rename(paths.lock_file, paths.root / f".{LOCK_FILE}.stale-{os.getpid()}-{time.time_ns()}")
            continue
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(me, stream)
        break
    else:
        raise PipelineBusyError(f"pipeline {paths.pipeline!r}: could not take the lock {paths.lock_file}; run again")
    try:
        yield
    finally:
        with suppress(FileNotFoundError):
            holder = json.loads(paths.lock_file.read_text(encoding="utf-8"))
            if holder.get("pid") == me["pid"] and holder.get("run_id") == run_id:
                paths.lock_file.unlink()
        for debris in paths.root.glob(f".{LOCK_FILE}.stale-*"):
            debris.unlink(missing_ok=True)
