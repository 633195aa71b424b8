"""`cdcreplay benchmark --spark-stages`: where a measured run's time went, per Spark stage, from Spark's REST API.

Each Spark stage that completed during the run is listed with the pipeline stage it started in (read, decode,
compact, type, audit, publish: from the run's own stage timings), when it was submitted (seconds into the run) and
how long it then waited for its first task (behind other jobs' tasks: stages of concurrent jobs queue for the same
cores), its wall time, its tasks' run time, CPU time and garbage-collection time, and what it read and shuffled.
Task time well above CPU time is time the tasks waited: on 2 cores, mostly for the JIT compiler's threads, disk and
the collector. Beside them, the seconds of each pipeline stage in which no Spark stage ran (the driver's own work).
The session's UI must be on (it is, unless ``spark.ui.enabled`` is false), since the REST API is served by it.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime

REST_TIMEOUT_S = 30


def _seconds(text: str) -> float:
    """An instant of the REST API (``2026-11-27T01:46:13.123GMT``) as seconds since the epoch."""
    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def completed_stages(spark) -> list[dict]:
    """Every completed stage of the session's application, as the REST API describes it."""
    url = spark.sparkContext.uiWebUrl
    if not url:
        raise RuntimeError("--spark-stages reads the Spark UI's REST API, and spark.ui.enabled is off")
    application = spark.sparkContext.applicationId
    address = f"{url}/api/v1/applications/{application}/stages?status=complete"
    with urllib.request.urlopen(address, timeout=REST_TIMEOUT_S) as response:
        return json.load(response)


def stages_of_run(
    stages: list[dict], started: float, timings: dict[str, float], until: float | None = None
) -> list[dict]:
    """The stages submitted after ``started`` (seconds since the epoch; and before ``until`` where given: a night
    followed by another), each with the pipeline stage it started in (``timings``: the run's seconds per pipeline
    stage, in order), in the order they were submitted."""
    bounds, at = [], started
    for name, seconds in timings.items():
        bounds.append((name, at, at + seconds))
        at += seconds

    def pipeline_stage(moment: float) -> str:
        return next((name for name, begin, end in bounds if begin <= moment < end), "after")

    rows = []
    for stage in stages:
        submitted = _seconds(stage["submissionTime"])
        if submitted < started or (until is not None and submitted >= until):
            continue
        first_task = stage.get("firstTaskLaunchedTime")
        rows.append(
            {
                "pipeline_stage": pipeline_stage(submitted),
                "stage_id": stage["stageId"],
                "name": stage["name"],
                "description": stage.get("description"),  # what Delta says its jobs do ("Delta: ..."), when set
                "start_s": round(submitted - started, 2),
                "queued_s": round(_seconds(first_task) - submitted, 2) if first_task else None,
                "wall_s": round(_seconds(stage["completionTime"]) - submitted, 2),
                "task_s": round(stage["executorRunTime"] / 1000, 1),
                "cpu_s": round(stage["executorCpuTime"] / 1e9, 1),
                "gc_s": round(stage["jvmGcTime"] / 1000, 1),
                "tasks": stage["numTasks"],
                "input_mb": round(stage.get("inputBytes", 0) / 1e6, 1),
                "shuffle_write_mb": round(stage.get("shuffleWriteBytes", 0) / 1e6, 1),
            }
        )
    return sorted(rows, key=lambda row: row["stage_id"])


def driver_only_seconds(rows: list[dict], timings: dict[str, float]) -> dict[str, float]:
    """Per pipeline stage (``timings``, as in :func:`stages_of_run`), the seconds in which no Spark stage of ``rows``
    ran: the driver's own work (Delta's log, planning, Python) and the gaps between jobs. A stage counts from its
    submission to its completion, queue included, clipped to the pipeline stage."""
    spans = sorted((row["start_s"], row["start_s"] + row["wall_s"]) for row in rows)
    idle, at = {}, 0.0
    for name, seconds in timings.items():
        begin, end = at, at + seconds
        at = end
        busy, reached = 0.0, begin
        for start, stop in spans:
            start, stop = max(start, reached), min(stop, end)
            if stop > start:
                busy += stop - start
                reached = stop
        idle[name] = round(seconds - busy, 2)
    return idle


def render_stages(rows: list[dict], top: int = 12) -> str:
    """The ``top`` stages by task time, as a table."""
    header = (
        f"  {'stage':>5} {'in':8} {'at s':>7} {'wall s':>7} {'task s':>7} {'cpu s':>6} {'gc s':>5} {'tasks':>5} "
        f"{'shuffle MB':>10}  name"
    )
    lines = [header]
    for row in sorted(rows, key=lambda r: -r["task_s"])[:top]:
        lines.append(
            f"  {row['stage_id']:>5} {row['pipeline_stage']:8} {row['start_s']:>7.1f} {row['wall_s']:>7.1f} "
            f"{row['task_s']:>7.1f} {row['cpu_s']:>6.1f} {row['gc_s']:>5.1f} {row['tasks']:>5} "
            f"{row['shuffle_write_mb']:>10.1f}  {(row['description'] or row['name'])[:60]}"
        )
    return "\n".join(lines)
