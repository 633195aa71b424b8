"""`cdcreplay benchmark` refuses bad arguments before it starts Spark, naming the argument and what it accepts."""

from __future__ import annotations

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
    ],
)
def test_bad_arguments_are_refused_with_a_message(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--work", str(tmp_path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything was written
