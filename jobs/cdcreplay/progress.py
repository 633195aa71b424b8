"""Progress of long runs: stage lines in the task log, Spark's running stages every few seconds, a console bar.

One line format for all three, so that what the Spark job logs is what the console draws:

    progress demo_canal [2/6] decode: done in 3.1s, 5,722/5,722 records decoded
    progress demo_canal [3/6] compact: spark stage 14 (parquet at ...) 3/8 tasks done, 2 running

- ``StageProgress`` (pipeline.run_pipeline): one line per finished stage with its record counts; it also tells the
  watcher which stage runs now.
- ``watch_spark``: one daemon thread per SparkContext that logs, every ``CDCREPLAY_PROGRESS_SECONDS`` (5 s), the
  active Spark stages from ``statusTracker()`` (tasks done / total). Silent while Spark is idle. No SparkListener:
  nothing is registered in the JVM, and the thread ends when the context stops.
- ``ConsoleProgress``: a bar on a terminal, plain lines otherwise; fed in process by a logging handler
  (``show_on_console``, the benchmark) or by following a log file that a subprocess writes (``follow``, the demo).

The lines go to the ``cdcreplay.progress`` logger at INFO; spark-submit's output is the Airflow task log.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

log = logging.getLogger("cdcreplay.progress")

# The stages of pipeline.run_pipeline, in order.
PIPELINE_STAGES = ("read", "decode", "compact", "type", "audit", "publish")
DEFAULT_INTERVAL_S = 5.0

# Found anywhere in a line: Airflow's task log adds a timestamp before and " [logger] loc=..." after the message.
_LINE = re.compile(
    r"progress (?P<pipeline>\S+) \[(?P<step>\d+)/(?P<steps>\d+)\] (?P<stage>\w+): "
    r"(?P<detail>[^\[]*?)\s*(\[[\w.]+\].*)?$"
)


@dataclass(frozen=True)
class ProgressEvent:
    pipeline: str
    step: int  # 1-based position of the stage in PIPELINE_STAGES
    steps: int
    stage: str
    detail: str

    @property
    def finished(self) -> bool:
        """The stage is over (the other kind of event reports Spark's work inside a running stage)."""
        return self.detail.startswith("done in ")

    def line(self) -> str:
        return f"progress {self.pipeline} [{self.step}/{self.steps}] {self.stage}: {self.detail}"


def parse_line(text: str) -> ProgressEvent | None:
    """The event in a log line (any prefix: timestamps, logger names, Airflow's decoration), or None."""
    match = _LINE.search(text.rstrip("\r\n"))
    if not match:
        return None
    fields = match.groupdict()
    return ProgressEvent(
        fields["pipeline"], int(fields["step"]), int(fields["steps"]), fields["stage"], fields["detail"].strip()
    )


def counted(done: int | None, total: int | None, unit: str) -> str:
    if done is None:
        return ""
    return f"{done:,}/{total:,} {unit}" if total is not None else f"{done:,} {unit}"


# --- the job side ----------------------------------------------------------------------------------------------

# What the watcher names as the running stage: set by StageProgress, read by the watcher thread.
_current: ProgressEvent | None = None


class StageProgress:
    """Stage lines of one pipeline run: ``done(stage, seconds, done, total, unit)`` at each stage boundary."""

    def __init__(self, pipeline: str, spark=None, stages: tuple[str, ...] = PIPELINE_STAGES):
        self.pipeline, self.stages = pipeline, stages
        self._enter(0)
        if spark is not None:
            watch_spark(spark)

    def close(self) -> None:
        """The run is over (or failed): the watcher no longer names a stage of it."""
        self._enter(len(self.stages))

    def _enter(self, index: int) -> None:
        global _current
        _current = (
            ProgressEvent(self.pipeline, index + 1, len(self.stages), self.stages[index], "")
            if index < len(self.stages)
            else None
        )

    def done(
        self, stage: str, seconds: float, done: int | None = None, total: int | None = None, unit: str = "records"
    ) -> ProgressEvent:
        index = self.stages.index(stage)
        counts = counted(done, total, unit)
        event = ProgressEvent(
            self.pipeline,
            index + 1,
            len(self.stages),
            stage,
            f"done in {seconds:.1f}s" + (f", {counts}" if counts else ""),
        )
        log.info(event.line())
        self._enter(index + 1)
        return event


def spark_status_lines(tracker, context: ProgressEvent | None) -> list[str]:
    """One line per active Spark stage, in the running pipeline stage's name when there is one."""
    lines = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is None:  # finished between the two calls
            continue
        detail = (
            f"spark stage {stage_id} ({info.name}) {info.numCompletedTasks}/{info.numTasks} tasks done, "
            f"{info.numActiveTasks} running" + (f", {info.numFailedTasks} failed" if info.numFailedTasks else "")
        )
        if context is not None:
            lines.append(ProgressEvent(context.pipeline, context.step, context.steps, context.stage, detail).line())
        else:
            lines.append(f"progress spark: {detail}")
    return lines


class SparkWatcher:
    """The daemon thread that logs the active Spark stages every ``interval`` seconds until the context stops."""

    def __init__(self, context, interval: float):
        self.context, self.interval = context, interval
        self._wake = threading.Event()
        name = f"cdcreplay-progress-{context.applicationId}"
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def every(self, interval: float) -> None:
        """Change the interval, effective now (not after the current wait)."""
        self.interval = interval
        self._wake.set()

    def _run(self) -> None:
        tracker = self.context.statusTracker()
        while True:
            if self._wake.wait(self.interval):
                self._wake.clear()
                continue
            if self.context._jsc is None:  # the SparkContext was stopped
                return
            try:
                lines = spark_status_lines(tracker, _current)
            except Exception:  # the JVM went away (context stopping, interpreter exiting): nothing left to watch
                return
            for line in lines:
                log.info(line)


_watchers: dict[str, SparkWatcher] = {}
_watchers_lock = threading.Lock()


def watch_spark(spark, interval: float | None = None) -> SparkWatcher | None:
    """Start, once per Spark application, the thread that logs the active Spark stages every ``interval`` s.

    ``interval`` defaults to ``$CDCREPLAY_PROGRESS_SECONDS`` or 5; given for a running watcher, it changes its pace.
    """
    try:
        context = spark.sparkContext
    except Exception:  # a Spark Connect session has no SparkContext to ask: stage lines only
        return None
    with _watchers_lock:
        watcher = _watchers.get(context.applicationId)
        if watcher is not None and watcher.thread.is_alive():
            if interval is not None:
                watcher.every(interval)
            return watcher
        if interval is None:
            interval = float(os.environ.get("CDCREPLAY_PROGRESS_SECONDS") or DEFAULT_INTERVAL_S)
        watcher = _watchers[context.applicationId] = SparkWatcher(context, interval)
        return watcher


# --- the console side ------------------------------------------------------------------------------------------


class ConsoleProgress:
    """Draws events as a bar that redraws in place on a terminal, or as plain lines when the stream is not one.

    Plain mode prints every finished stage and, at most every ``plain_every_s`` seconds, Spark's progress inside
    the running stage. ``units`` is how many pipelines the bar spans (the demo runs several in one DAG run, and
    counts one more unit for the reconciliation, which has no stage lines).
    """

    def __init__(self, label: str, stream: TextIO | None = None, units: int = 1, width: int = 24, plain_every_s=30.0):
        self.label, self.stream, self.units, self.width = label, stream or sys.stdout, max(units, 1), width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.plain_every_s = plain_every_s
        self._pipelines: list[str] = []
        self._fraction = 0.0
        self._drawn = False
        self._last_plain = time.monotonic()

    def update(self, event: ProgressEvent) -> None:
        if event.pipeline not in self._pipelines:
            self._pipelines.append(event.pipeline)
        unit = min(self._pipelines.index(event.pipeline), self.units - 1)
        steps_done = event.step if event.finished else event.step - 1
        self._fraction = max(self._fraction, (unit + steps_done / event.steps) / self.units)
        text = f"{event.pipeline} {event.stage} ({event.step}/{event.steps}): {event.detail}"
        if self.tty:
            self._draw(text)
            return
        now = time.monotonic()
        if event.finished or now - self._last_plain >= self.plain_every_s:
            self._last_plain = now
            self.stream.write(f"{self.label}: {round(self._fraction * 100):3d}% {text}\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A status without an event (e.g. which Airflow task runs), shown on the bar; plain mode prints nothing."""
        if self.tty:
            self._draw(text)

    def complete(self, text: str) -> None:
        """The whole job is over: a full bar (or a last plain line)."""
        self._fraction = 1.0
        if self.tty:
            self._draw(text)
        else:
            self.stream.write(f"{self.label}: 100% {text}\n")
            self.stream.flush()

    def _draw(self, text: str) -> None:
        filled = round(self._fraction * self.width)
        bar = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {round(self._fraction * 100):3d}% "
        columns = _terminal_columns(self.stream)
        line = (bar + text)[: columns - 1]
        self.stream.write("\r" + line.ljust(columns - 1))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the bar's line, so that what is printed next starts on its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def _terminal_columns(stream: TextIO) -> int:
    """The terminal's width; 120 when unknown (a pseudo-terminal without a size reports 0)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns if columns >= 20 else 120


class _ConsoleHandler(logging.Handler):
    def __init__(self, console: ConsoleProgress):
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        event = parse_line(record.getMessage())
        if event is not None:
            self.console.update(event)
            if event.finished and event.step == event.steps:
                self.console.close()


def show_on_console(label: str, stream: TextIO | None = None) -> ConsoleProgress:
    """Draw this process's progress lines (the ``cdcreplay.progress`` logger) on the console from now on."""
    console = ConsoleProgress(label, stream)
    hide_console()
    log.addHandler(_ConsoleHandler(console))
    log.setLevel(logging.INFO)
    return console


def hide_console() -> None:
    """Stop drawing what ``show_on_console`` drew."""
    for handler in [h for h in log.handlers if isinstance(h, _ConsoleHandler)]:
        handler.console.close()
        log.removeHandler(handler)


def follow(
    process: subprocess.Popen,
    log_file: Path,
    console: ConsoleProgress,
    notes: dict[str, str] | None = None,
    poll_s: float = 0.5,
) -> int:
    """Wait for ``process`` while drawing the progress lines it writes to ``log_file``; return its exit code.

    ``notes`` maps a text found in a log line to a status shown on the bar (e.g. the start of an Airflow task).
    """
    position, pending = 0, ""
    try:
        while True:
            code = process.poll()
            if log_file.exists():
                with log_file.open("r", encoding="utf-8", errors="replace") as handle:
                    handle.seek(position)
                    pending += handle.read()
                    position = handle.tell()
                *lines, pending = pending.split("\n")
                for line in lines:
                    event = parse_line(line)
                    if event is not None:
                        console.update(event)
                        continue
                    for needle, status in (notes or {}).items():
                        if needle in line:
                            console.note(status)
            if code is not None:
                if code == 0:
                    console.complete("done")
                return code
            time.sleep(poll_s)
    finally:
        console.close()
