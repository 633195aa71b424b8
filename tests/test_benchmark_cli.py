"""`cdcreplay benchmark` refuses bad arguments before it starts Spark, naming the argument and what it accepts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cdcreplay_lab.benchmark import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--formats", "debezium-jsn"], "--formats: unknown debezium-jsn; known: "),
        (["--formats", "debezium-json,drs-dds-json"], "--formats: the simulator writes no drs-dds-json archive, so it"),
        (["--events", "10"], "--events must be at least 30"),
        (["--reconcile-rows", "500"], "--reconcile-rows must be 0 (off) or at least 1000"),
        (["--reconcile-rows", "-1"], "--reconcile-rows must be 0 (off) or at least 1000"),
        (["--formats", "none"], "nothing to measure: give --formats, --reconcile-rows or both"),
        (["--nightly-events", "200000"], "--nightly-events and --full-rebuild-from apply to the nightly run: add"),
        (["--full-rebuild-from", "r.json"], "--nightly-events and --full-rebuild-from apply to the nightly run: add"),
        (["--incremental", "--nightly-events", "0"], "--nightly-events must be at least 1"),
        (["--from-kafka", "--incremental"], "--from-kafka replays the formats' full rebuilds from a broker: give"),
        (["--from-kafka", "--formats", "none", "--reconcile-rows", "1000"], "--from-kafka replays the formats' full"),
        (
            ["--incremental", "--full-rebuild-from", "r.json"],
            "--full-rebuild-from takes the full rebuild of one format: give exactly one in --formats",
        ),
        (
            ["--incremental", "--formats", "canal-json", "--full-rebuild-from", "/nonexistent/result.json"],
            "--full-rebuild-from: cannot read /nonexistent/result.json: ",
        ),
        (["--state-keys", "5000000"], "--state-keys sets up the nightly run's state: add --incremental"),
        (
            ["--incremental", "--state-keys", "5000000", "--full-rebuild-from", "r.json"],
            "--state-keys runs the full rebuild of its own archive: leave out --full-rebuild-from",
        ),
        (
            ["--incremental", "--state-keys", "5000000", "--formats", "canal-json"],
            "--state-keys writes a dts-shareplex-json archive: leave out --formats (or give dts-shareplex-json)",
        ),
        (
            ["--incremental", "--state-keys", "5000000", "--events", "2000000"],
            "--events does not go with --state-keys: its archive is the state's keys plus the night's changes",
        ),
        (
            ["--incremental", "--state-keys", "100000"],
            "--state-keys must be at least --nightly-events (200,000): each night record changes a key of its own",
        ),
        (["--incremental", "--state-keys", "1000", "--nightly-events", "0"], "--nightly-events must be at least 1"),
        (
            ["--incremental", "--no-deletion-vectors"],
            "--[no-]deletion-vectors sets the option of the --state-keys pipeline: add --state-keys",
        ),
        (
            ["--incremental", "--nights", "2"],
            "--nights runs nights of the --state-keys archive in a row: add --state-keys",
        ),
        (
            ["--incremental", "--state-keys", "1000", "--nightly-events", "200", "--nights", "6"],
            "--nights must be from 1 to --state-keys // --nightly-events (5): no two nights change the same key",
        ),
        (
            ["--incremental", "--state-keys", "1000", "--nightly-events", "200", "--nights", "0"],
            "--nights must be from 1 to --state-keys // --nightly-events (5): no two nights change the same key",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_message(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--work", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_spark_stages_are_placed_in_the_pipeline_stage_they_started_in():
    from cdcreplay_lab.benchmark_stages import driver_only_seconds, render_stages, stages_of_run

    def stage(
        stage_id: int, submitted: str, completed: str, run_ms: int, name: str, first_task: str = "", **more
    ) -> dict:
        return {
            **more,
            "stageId": stage_id,
            "name": name,
            "submissionTime": f"2026-11-27T01:00:{submitted}GMT",
            "completionTime": f"2026-11-27T01:00:{completed}GMT",
            **({"firstTaskLaunchedTime": f"2026-11-27T01:00:{first_task}GMT"} if first_task else {}),
            "executorRunTime": run_ms,
            "executorCpuTime": run_ms * 500_000,  # nanoseconds: half the run time on CPU
            "jvmGcTime": 100,
            "numTasks": 9,
            "shuffleWriteBytes": 2_000_000,
        }

    started = datetime(2026, 11, 27, 1, 0, 10, tzinfo=UTC).timestamp()
    stages = [
        stage(1, "05.000", "06.000", 900, "collect before the run"),
        stage(2, "10.500", "12.000", 2_000, "collect at archive.py"),
        stage(3, "13.000", "40.000", 50_000, "parquet at decode", first_task="14.250"),
        stage(4, "45.000", "50.000", 9_000, "save at state", description="Delta: Writing modified data"),
        stage(5, "59.000", "59.500", 400, "after the run"),
    ]
    rows = stages_of_run(stages, started, {"read": 2.5, "decode": 30.0, "compact": 10.0})
    assert [(r["stage_id"], r["pipeline_stage"]) for r in rows] == [
        (2, "read"), (3, "decode"), (4, "compact"), (5, "after")
    ]  # fmt: skip
    assert rows[1] == {
        "pipeline_stage": "decode",
        "stage_id": 3,
        "name": "parquet at decode",
        "description": None,  # Delta's jobs say what they do ("Delta: Compute snapshot for version: 3")
        "start_s": 3.0,  # submitted 3 s into the run
        "queued_s": 1.25,  # its first task began 1.25 s later (the cores were busy with another job's tasks)
        "wall_s": 27.0,
        "task_s": 50.0,
        "cpu_s": 25.0,
        "gc_s": 0.1,
        "tasks": 9,
        "input_mb": 0.0,
        "shuffle_write_mb": 2.0,
    }
    assert rows[2]["queued_s"] is None  # the REST API gives no first task time for a stage that ran none
    # A night followed by another: only the stages submitted before it ended (42.5 s in) are its own.
    night = stages_of_run(stages, started, {"read": 2.5, "decode": 30.0, "compact": 10.0}, until=started + 42.5)
    assert [r["stage_id"] for r in night] == [2, 3, 4]
    table = render_stages(rows, top=2).splitlines()
    # a stage is named by its job's description where one is set (Delta's are), else by its call site
    assert len(table) == 3 and "parquet at decode" in table[1] and "Delta: Writing modified data" in table[2]
    # read 0-2.5 s: stage 2 ran 0.5-2; decode 2.5-32.5: stage 3 ran 3-30 (queue included); compact 32.5-42.5:
    # stage 4 ran 35-40 and a stage overlapping it (36-41) adds only its last second.
    overlapping = {**rows[2], "stage_id": 6, "start_s": 36.0, "wall_s": 5.0}
    assert driver_only_seconds([*rows, overlapping], {"read": 2.5, "decode": 30.0, "compact": 10.0}) == {
        "read": 1.0, "decode": 3.0, "compact": 4.0
    }  # fmt: skip


def test_spark_stages_need_the_spark_ui(spark):
    from cdcreplay_lab.benchmark_stages import completed_stages

    with pytest.raises(
        RuntimeError, match=r"--spark-stages reads the Spark UI.s REST API, and spark\.ui\.enabled is off"
    ):
        completed_stages(spark)  # the suite's session runs without its UI
