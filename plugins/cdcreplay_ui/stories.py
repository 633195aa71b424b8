"""A key's story in the reconciliation view: ``cdcreplay explain --json`` run as a subprocess, its JSON cached in the
run folder.

The view's process never starts Spark. Reading a story's state (``story_state``, a GET) starts nothing: link
prefetchers, crawlers and reloads must not start work. Asking for it (``ask_for_story``, a POST) starts the real CLI
in the background (``python -m cdcreplay.cli explain ... --run-id <run> --json``, Spark ``local[1]`` with a modest
driver); a thread of the view waits for it and writes what it printed to
``<run>/reconcile/explain/<table>/<sha256 of the key text>.json`` through ``cdcreplay.storage.Location`` (one atomic
replace: a local rename, or one S3 PUT). A failed run writes ``<same>.error.json`` instead: its exit code and the
tail of its standard error, shown on the page until someone asks again with ``retry``. A story older than the run's
``summary.json`` counts as not asked for (the reconcile task ran again and wrote another diff); the reconciliation
removes the folder of stories when it writes a new diff, so outdated stories do not pile up.

One subprocess per (pipeline, run, table, key) at a time: an in-process table of the running ones, and, for the
api-server's other worker processes, a marker file ``<same>.running.json`` naming the host and process that started
it (taken over when that process is gone, or when it is older than the subprocess may run).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import cdcreplay
from cdcreplay.config import ConfigError
from cdcreplay.contracts import RECONCILE_STORIES, SUMMARY_FILE
from cdcreplay.explain.request import parse_key
from cdcreplay.explain.story import EXPLAIN_FORMAT
from cdcreplay.formats.routing import key_text
from cdcreplay.storage import Location
from cdcreplay.warehouse import PipelinePaths, is_legacy, read_current, table_folder_name
from cdcreplay_ui.runs_index import NotFound, Refused, Warehouse

# How long one explain may run before it is killed (a JVM start and a few small reads take well under a minute).
EXPLAIN_TIMEOUT = 900
# A marker older than this names a subprocess that cannot still be running.
MARKER_STALE_AFTER = EXPLAIN_TIMEOUT + 60
REFRESH_SECONDS = 3
STDERR_TAIL_LINES = 40
# What the subprocess's Spark gets: one core and a modest driver, beside the api-server's own work.
SUBPROCESS_SPARK = {"CDCREPLAY_SPARK_MASTER": "local[1]", "SPARK_DRIVER_MEMORY": "1g"}
# Settings of a spark-submit environment that would override the local master above.
SUBMIT_SETTINGS = ("SPARK_ENV_LOADED", "PYSPARK_SUBMIT_ARGS")

READY, PENDING, FAILED, NOT_ASKED = "ready", "pending", "failed", "not-asked"


@dataclass(frozen=True)
class StoryKey:
    """A checked request for a key's story: the run, the table, and the key as explain takes it."""

    pipeline: str
    run_id: str
    table_id: str
    key_columns: tuple[str, ...]
    key: dict[str, str]  # key column -> canonical text, in key column order
    key_text: str  # the changelog's and the diff's key (routing.key_text)

    @property
    def key_json(self) -> str:
        """The ``--key`` argument of ``cdcreplay explain``."""
        return json.dumps(self.key, ensure_ascii=False)


@dataclass(frozen=True)
class StoryState:
    """Where a key's story is: ``ready`` (``story`` is explain's JSON), ``pending`` (``started_at``, epoch seconds),
    ``failed`` (``error``: exit code, standard error's tail) or ``not-asked`` (nothing runs, nothing is cached)."""

    status: str
    story: dict | None = None
    started_at: float | None = None
    error: dict | None = None


def story_key(warehouse: Warehouse, pipeline: str, run_id: str, table_id: str | None, key: str | None) -> StoryKey:
    """The request checked without Spark: NotFound for an unknown run or table, Refused for a key that does not
    parse. ``key`` is the diff's key text (a JSON array of the key columns' texts) or a JSON object of the key
    columns, as ``cdcreplay explain --key`` takes it; both give the same canonical key."""
    warehouse.run_dir(pipeline, run_id)
    if not table_id:
        raise Refused("name the table: ?table=<table id>&key=<key>")
    if not key:
        raise Refused(f'name the key of {table_id}: ?table={table_id}&key=<the diff\'s key, e.g. ["42"]>')
    current = read_current(PipelinePaths(str(warehouse.location), pipeline))
    if current is None or is_legacy(current):
        raise NotFound(f"pipeline {pipeline} has published no Delta tables yet: no key of it can be explained")
    tables = current.get("tables") or {}
    if table_id not in tables:
        known = ", ".join(sorted(tables)) or "(none)"
        raise NotFound(f"table {table_id!r} is not published by pipeline {pipeline}; published tables: {known}")
    key_columns = tuple(tables[table_id].get("key_columns") or ())
    if not key_columns:
        raise NotFound(f"table {table_id!r} of pipeline {pipeline} has no live key, so its key columns are unknown")
    column_types = {name: spark_type for name, spark_type in tables[table_id].get("columns") or ()}
    given = _key_object(key, table_id, key_columns)
    try:
        canonical = parse_key(json.dumps(given), table_id, key_columns, column_types)
    except ConfigError as exc:
        raise Refused(f"key {key}: {str(exc).removeprefix('--key: ')}") from None
    return StoryKey(pipeline, run_id, table_id, key_columns, canonical, key_text(list(canonical.values())))


def _key_object(key: str, table_id: str, key_columns: tuple[str, ...]) -> dict:
    """The key as an object of its columns: the diff's array of texts is laid on the table's key columns."""
    try:
        given = json.loads(key)
    except json.JSONDecodeError:
        given = None
    if isinstance(given, dict):
        return given
    names = ", ".join(key_columns)
    if not isinstance(given, list) or not all(isinstance(value, str) for value in given):
        raise Refused(
            f"key {key} is neither the diff's key (a JSON array of texts, one per key column: {names}) nor a JSON "
            "object of the key columns"
        )
    if len(given) != len(key_columns):
        raise Refused(f"key {key} has {len(given)} value(s); table {table_id!r} is keyed by {names}")
    return dict(zip(key_columns, given, strict=True))


# -- where a story is cached ------------------------------------------------------------------------------------------


def story_file(warehouse: Warehouse, asked: StoryKey) -> Location:
    """``<run>/reconcile/explain/<table folder>/<sha256 of the key text>.json``."""
    digest = hashlib.sha256(asked.key_text.encode("utf-8", "surrogatepass")).hexdigest()
    folder = warehouse.run_dir(asked.pipeline, asked.run_id) / RECONCILE_STORIES / table_folder_name(asked.table_id)
    return folder / f"{digest}.json"


def _sibling(story: Location, suffix: str) -> Location:
    return story.parent / (story.name.removesuffix(".json") + suffix)


def error_file(story: Location) -> Location:
    return _sibling(story, ".error.json")


def marker_file(story: Location) -> Location:
    return _sibling(story, ".running.json")


def explain_arguments(config_path: str, asked: StoryKey) -> list[str]:
    """``cdcreplay explain``'s arguments for the story (the text form: without ``--json``)."""
    return [
        "explain",
        "--config",
        config_path,
        "--pipeline",
        asked.pipeline,
        "--table",
        asked.table_id,
        "--key",
        asked.key_json,
        "--run-id",
        asked.run_id,
    ]


def subprocess_command(config_path: str, asked: StoryKey) -> list[str]:
    """The CLI the view runs: this interpreter, the cdcreplay package it imports, the story as JSON."""
    return [sys.executable, "-m", "cdcreplay.cli", *explain_arguments(config_path, asked), "--json"]


def shell_command(config_path: str, asked: StoryKey) -> str:
    """What a person types for the same story, in words."""
    return " ".join(shlex.quote(word) for word in ["cdcreplay", *explain_arguments(config_path, asked)])


# -- the state of a story, and starting its subprocess ----------------------------------------------------------------

_LOCK = threading.Lock()
_RUNNING: dict[str, float] = {}  # story file -> when this process started its subprocess (epoch seconds)
# story file -> an error kept in memory: the warehouse refused the result, or the subprocess could not be started
_UNWRITTEN: dict[str, dict] = {}


def story_state(warehouse: Warehouse, asked: StoryKey) -> StoryState:
    """Where the key's story is; starts nothing."""
    story, basis = _story_and_basis(warehouse, asked)
    with _LOCK:
        return _state(story, basis)


def ask_for_story(warehouse: Warehouse, asked: StoryKey, config_path: str, retry: bool = False) -> None:
    """Start the subprocess unless the story is cached or being worked out; a failed story only with ``retry`` (an
    error is shown until someone asks again on purpose, rather than restarted by whoever comes by)."""
    story, basis = _story_and_basis(warehouse, asked)
    with _LOCK:
        status = _state(story, basis).status
        if status == NOT_ASKED or (status == FAILED and retry):
            _start_or_keep_the_error(story, asked, config_path)


def _story_and_basis(warehouse: Warehouse, asked: StoryKey) -> tuple[Location, float]:
    """The story's file, and the time a cached document must be newer than: the run's summary's."""
    summary = warehouse.run_file(asked.pipeline, asked.run_id, SUMMARY_FILE)
    return story_file(warehouse, asked), summary.modified_at()


def _state(story: Location, basis: float) -> StoryState:
    """The one place that decides a story's state (called under _LOCK). A running subprocess, this process's or
    another worker's, outranks an earlier failure: a retry elsewhere is under way."""
    cached = _fresh_json(story, basis)
    if cached is not None and cached.get("explain_format") == EXPLAIN_FORMAT:
        return StoryState(READY, story=cached)
    started_at = _RUNNING.get(str(story))
    if started_at is not None:
        return StoryState(PENDING, started_at=started_at)
    marker = _fresh_json(marker_file(story), basis)
    if marker is not None and _marker_alive(marker):
        return StoryState(PENDING, started_at=marker.get("started_at"))
    failure = _UNWRITTEN.get(str(story)) or _fresh_json(error_file(story), basis)
    if failure is not None:
        return StoryState(FAILED, error=failure)
    return StoryState(NOT_ASKED)


def _start_or_keep_the_error(story: Location, asked: StoryKey, config_path: str) -> None:
    """Forget the earlier failure and start the subprocess (called under _LOCK). When it cannot start, the error is
    kept in memory: the page the caller is sent to next shows it."""
    _UNWRITTEN.pop(str(story), None)
    error_file(story).unlink()
    try:
        _start(story, asked, config_path)
    except OSError as exc:  # no interpreter to run, no scratch folder: nothing runs, nothing to wait for
        _UNWRITTEN[str(story)] = _error(None, b"", f"it could not be started: {exc}", [])


def _fresh_json(path: Location, basis: float) -> dict | None:
    """A cached document written after the run's summary (else it describes an earlier reconciliation)."""
    try:
        if not path.is_file() or path.modified_at() < basis:
            return None
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def _marker_alive(marker: dict) -> bool:
    """Whether the subprocess a marker names may still run: young enough, and on this host its process exists."""
    if time.time() - float(marker.get("started_at") or 0) > MARKER_STALE_AFTER:
        return False
    if marker.get("host") != socket.gethostname():
        return True
    if marker.get("view_pid") == os.getpid():
        return False  # this process's subprocess would be in _RUNNING: it ended without removing its marker
    try:
        os.kill(int(marker.get("view_pid") or 0), 0)
        os.kill(int(marker.get("pid") or 0), 0)
    except (OSError, ValueError):
        return False
    return True


def subprocess_env() -> dict[str, str]:
    """The view's environment, with the cdcreplay package it imports on PYTHONPATH and a small local Spark."""
    env = {name: value for name, value in os.environ.items() if name not in SUBMIT_SETTINGS}
    jobs = str(Path(cdcreplay.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (jobs, env.get("PYTHONPATH")) if p)
    env.update(SUBPROCESS_SPARK)
    return env


def _start(story: Location, asked: StoryKey, config_path: str) -> None:
    """Start explain in the background (called under _LOCK); a thread waits for it and writes the result."""
    scratch = tempfile.mkdtemp(prefix="cdcreplay-explain-")  # Spark's own files (derby.log, ...) go there
    command = subprocess_command(config_path, asked)
    process = subprocess.Popen(
        command,
        cwd=scratch,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: a timeout kills the JVM too
    )
    started_at = _RUNNING[str(story)] = time.time()
    marker = {
        "started_at": started_at,
        "host": socket.gethostname(),
        "view_pid": os.getpid(),
        "pid": process.pid,
        "command": shell_command(config_path, asked),
    }
    with contextlib.suppress(OSError):  # without it, another worker may start one more: the result is the same
        marker_file(story).write_text(json.dumps(marker))
    threading.Thread(
        target=_wait, args=(process, story, command, scratch), name=f"explain-{process.pid}", daemon=True
    ).start()


def _wait(process: subprocess.Popen, story: Location, command: list[str], scratch: str) -> None:
    """Collect the subprocess's output and write the story, or the error, next to it."""
    try:
        try:
            out, err = process.communicate(timeout=EXPLAIN_TIMEOUT)
            code = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            code = None
        text = out.decode("utf-8", "replace")
        problem = _not_a_story(text) if code == 0 else None
        try:
            if code == 0 and problem is None:
                story.write_text(text)
                error_file(story).unlink()
            else:
                error_file(story).write_text(json.dumps(_error(code, err, problem, command), indent=2))
        except Exception as exc:  # a warehouse the view may not write to: keep the failure in memory
            with _LOCK:
                _UNWRITTEN[str(story)] = _error(code, err, f"the result could not be written to {story}: {exc}", [])
    finally:
        with _LOCK:
            _RUNNING.pop(str(story), None)
            with contextlib.suppress(OSError):
                marker_file(story).unlink()
        shutil.rmtree(scratch, ignore_errors=True)


def _not_a_story(text: str) -> str | None:
    try:
        document = json.loads(text)
    except ValueError:
        return "its output is not JSON"
    if not isinstance(document, dict) or document.get("explain_format") != EXPLAIN_FORMAT:
        return f"its output is not a story of explain_format {EXPLAIN_FORMAT}"
    return None


def _error(code: int | None, stderr: bytes, problem: str | None, command: list[str]) -> dict:
    lines = stderr.decode("utf-8", "replace").rstrip().splitlines()
    if code is None and problem:
        what = f"cdcreplay explain: {problem}"
    elif code is None:
        what = f"cdcreplay explain did not finish within {EXPLAIN_TIMEOUT} s and was stopped"
    elif problem:
        what = f"cdcreplay explain exited {code}, but {problem}"
    else:
        what = f"cdcreplay explain exited {code}"
    return {
        "exit_code": code,
        "message": what,
        "stderr_tail": "\n".join(lines[-STDERR_TAIL_LINES:]),
        "finished_at": time.time(),
        "command": command[1:],
    }
