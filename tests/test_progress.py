"""Progress reporting: the stage lines a real pipeline run logs, Spark's running stages, the console bar."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import threading
import time

import pytest
from archive_helpers import pipeline_config

from cdcreplay import progress
from cdcreplay.config import load_config
from cdcreplay.pipeline import run_pipeline
from cdcreplay.run_spec import build_run_spec
from cdcreplay_lab.simulator import build_sample_archive

TIME = re.compile(r"done in \d+\.\ds")


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "cdcreplay.progress"]


def test_a_pipeline_run_logs_every_stage_with_its_counts(spark, tmp_path, caplog):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=120, seed=5)
    config = load_config(pipeline_config(tmp_path, "prog", "debezium-json", tmp_path / "archive"))
    spec = build_run_spec(config, run_id="p1", full_rebuild=True)
    console = io.StringIO()
    progress.show_on_console("[benchmark]", console)  # what `cdcreplay benchmark` does before its runs
    try:
        with caplog.at_level(logging.INFO, logger="cdcreplay.progress"):
            summary = run_pipeline(spark, config, config.project.pipelines[0], spec)
    finally:
        progress.hide_console()

    records, tables = history.archive["records"], len(summary.tables)
    assert summary.distinct_records == records
    stages = [
        ("read", f"{records:,} records selected from {len(history.archive['files'])} files"),
        ("decode", f"{records:,}/{records:,} records decoded"),
        ("compact", f"{summary.decoded['changelog_rows']:,} changes compacted, state written whole"),
        ("type", f"{tables} tables typed"),
        ("audit", f"{tables}/{tables} tables passed"),
        ("publish", f"{tables} tables published"),
    ]
    stage_lines = [TIME.sub("done in <t>s", line) for line in progress_lines(caplog) if " done in " in line]
    assert stage_lines == [
        f"progress prog [{i}/6] {stage}: done in <t>s, {counts}" for i, (stage, counts) in enumerate(stages, 1)
    ]
    # Not a terminal: the console shows the same stages as plain lines.
    shown = [TIME.sub("done in <t>s", line) for line in console.getvalue().splitlines()]
    assert shown == [
        f"[benchmark]: {round(100 * i / 6):3d}% prog {stage} ({i}/6): done in <t>s, {counts}"
        for i, (stage, counts) in enumerate(stages, 1)
    ]
    # The times in the lines are the stage times of the summary.
    logged = [float(m.group(1)) for m in re.finditer(r"done in (\d+\.\d)s", "\n".join(progress_lines(caplog)))]
    assert logged == pytest.approx(list(summary.timings_s.values()), abs=0.051)
    assert progress._current is None, "after publish no stage of the run is running"


SPARK_LINE = re.compile(
    r"progress watched \[2/6\] decode: spark stage (?P<stage>\d+) \((?P<name>[^)]*)\) "
    r"(?P<done>\d+)/(?P<total>\d+) tasks done, (?P<running>\d+) running$"
)


def test_the_watcher_logs_the_running_spark_stage_in_the_running_pipeline_stage(spark, caplog):
    from pyspark.sql import functions as F

    @F.udf("long")
    def slow(value):
        time.sleep(0.5)
        return value

    def run_job():
        context.setJobGroup("progress-test", "a slow job the watcher must see")  # local to this thread
        spark.range(0, 8, numPartitions=4).select(slow("id")).collect()

    stages = progress.StageProgress("watched", spark)
    stages.done("read", 0.0)  # decode is the running stage now
    caplog.set_level(logging.INFO, logger="cdcreplay.progress")
    caplog.clear()
    context = spark.sparkContext
    progress.watch_spark(spark, interval=0.2)
    try:
        job = threading.Thread(target=run_job)
        job.start()
        job.join(timeout=120)
        assert not job.is_alive()
    finally:
        progress.watch_spark(spark, interval=progress.DEFAULT_INTERVAL_S)
        stages.close()

    tracker = context.statusTracker()
    job_stages = {s for j in tracker.getJobIdsForGroup("progress-test") for s in tracker.getJobInfo(j).stageIds}
    lines = [line for line in progress_lines(caplog) if "spark stage" in line]
    assert lines, "the watcher logged nothing while a two-second job ran"
    for line in lines:
        match = SPARK_LINE.fullmatch(line)
        assert match, line
        assert int(match["stage"]) in job_stages, line
        assert int(match["total"]) == 4, line  # one task per partition
        assert 0 <= int(match["done"]) + int(match["running"]) <= 4, line
    assert [int(SPARK_LINE.fullmatch(line)["done"]) for line in lines] == sorted(
        int(SPARK_LINE.fullmatch(line)["done"]) for line in lines
    ), "tasks done never go down"


EVENTS = [
    "progress p [1/6] read: done in 1.0s, 10 records selected from 1 files",
    "progress p [2/6] decode: spark stage 3 (parquet at x) 1/4 tasks done, 2 running",
    "progress p [2/6] decode: done in 2.0s, 10/10 records decoded",
]


def test_plain_console_prints_finished_stages_and_spark_progress_at_most_every_interval():
    out = io.StringIO()
    console = progress.ConsoleProgress("[bench]", out, plain_every_s=3600)
    for line in EVENTS:
        console.update(progress.parse_line(line))
    console.close()
    assert out.getvalue() == (
        "[bench]:  17% p read (1/6): done in 1.0s, 10 records selected from 1 files\n"
        "[bench]:  33% p decode (2/6): done in 2.0s, 10/10 records decoded\n"
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_console_redraws_one_line_and_ends_it():
    out = Terminal()
    console = progress.ConsoleProgress("[bench]", out, units=2, width=10)
    for line in EVENTS:
        console.update(progress.parse_line(line))
    console.complete("done")
    console.close()
    frames = out.getvalue().split("\r")[1:]
    assert [frame.rstrip() for frame in frames] == [
        "[bench] [#.........]   8% p read (1/6): done in 1.0s, 10 records selected from 1 files",
        "[bench] [#.........]   8% p decode (2/6): spark stage 3 (parquet at x) 1/4 tasks done, 2 running",
        "[bench] [##........]  17% p decode (2/6): done in 2.0s, 10/10 records decoded",
        "[bench] [##########] 100% done",
    ]
    assert all(len(frame.rstrip("\n")) == 119 for frame in frames), "each frame overwrites the whole line"
    assert out.getvalue().endswith(" \n"), "close() ends the bar's line"


def test_parse_line_reads_progress_out_of_an_airflow_task_log_line():
    line = (
        "2026-11-23T11:40:11.891751Z [info     ] 2026-11-23 11:40:11,888 INFO cdcreplay.progress: progress "
        "demo_debezium [2/6] decode: done in 14.8s, 345/345 records decoded          "
        "[airflow.task.hooks.airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook] loc=spark_submit.py:965"
    )
    assert progress.parse_line(line) == progress.ProgressEvent(
        "demo_debezium", 2, 6, "decode", "done in 14.8s, 345/345 records decoded"
    )
    assert progress.parse_line("2026-11-23 INFO cdcreplay: pipeline demo: read done in 14.2s") is None


def test_follow_draws_what_a_subprocess_writes_to_its_log(tmp_path):
    log_file = tmp_path / "run.log"
    script = (
        "import sys, time\n"
        "for line in sys.argv[1:]:\n"
        "    print('noise before', line, '[logger] loc=x', flush=True)\n"
        "    time.sleep(0.3)\n"
        "sys.exit(3)\n"
    )
    with log_file.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", script, *EVENTS], stdout=out, stderr=subprocess.STDOUT)
        console_out = io.StringIO()
        code = progress.follow(process, log_file, progress.ConsoleProgress("[demo]", console_out), poll_s=0.1)
    assert code == 3
    # Plain lines: the finished stages; Spark's progress inside a stage only every 30 s.
    assert console_out.getvalue() == (
        "[demo]:  17% p read (1/6): done in 1.0s, 10 records selected from 1 files\n"
        "[demo]:  33% p decode (2/6): done in 2.0s, 10/10 records decoded\n"
    )
