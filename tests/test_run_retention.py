"""`keep_decoded_runs`: a run that publishes removes the decoded changelog of older runs and nothing else; the
tables it publishes are the ones a warehouse that keeps every changelog publishes, and a reconciliation of a run
whose changelog is gone says so, where it would otherwise call the run one without changes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from archive_helpers import pipeline_config
from pyspark.testing import assertDataFrameEqual

from cdcreplay.contracts import RunSummary
from cdcreplay.entrypoints import EXIT_BAD_INPUT, EXIT_OK, reconcile_main, replay_main
from cdcreplay.warehouse import PipelinePaths, read_current, read_json, read_table
from cdcreplay_lab.simulator import build_sample_archive

CHANGELOG = "decoded/record_kind=changelog"


def files_of(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def summary(paths: PipelinePaths, run_id: str) -> RunSummary:
    return RunSummary.from_json(read_json(paths.run_file(run_id, "summary.json")))


def test_a_published_run_removes_older_changelogs_and_nothing_else(spark, tmp_path, capsys):
    history = build_sample_archive(tmp_path / "archive", "debezium-json", events=600, seed=9, days=2)
    bounds = [(history.start + timedelta(hours=hours)).isoformat() for hours in (12, 24)]
    nights = {
        "n1": ["--end", bounds[0]],
        "n2": ["--start", bounds[0], "--end", bounds[1]],
        "n3": ["--start", bounds[1]],
    }
    warehouses, n1_files = {}, {}
    for keep in ("all", "two"):
        root = tmp_path / keep
        root.mkdir()
        config = pipeline_config(root, "sim", "debezium-json", tmp_path / "archive")
        if keep == "two":
            config.write_text("keep_decoded_runs: 2\n" + config.read_text())
        paths = PipelinePaths(str(root / "warehouse"), "sim")
        for run_id, interval in nights.items():
            assert replay_main(["--config", str(config), "--run-id", run_id, *interval]) == EXIT_OK
            if run_id == "n1":
                n1_files[keep] = files_of(Path(str(paths.run_dir("n1"))))
            if run_id == "n2" and keep == "two":  # a dry run decodes nothing: it takes none of the two places
                assert replay_main(["--config", str(config), "--run-id", "dry", "--dry-run"]) == EXIT_OK
        warehouses[keep] = (config, paths)
    (_, kept), (config, pruned) = warehouses["all"], warehouses["two"]

    # Night 3 removed night 1's changelog and nothing else of its folder; the two newest keep theirs.
    assert any(name.startswith(CHANGELOG) for name in n1_files["two"])
    assert files_of(Path(str(kept.run_dir("n1")))) == n1_files["all"]
    assert files_of(Path(str(pruned.run_dir("n1")))) == {n for n in n1_files["two"] if not n.startswith(CHANGELOG)}
    for run_id in ("n2", "n3"):
        assert any(name.startswith(CHANGELOG) for name in files_of(Path(str(pruned.run_dir(run_id)))))
    assert [summary(pruned, run).changelogs_removed for run in nights] == [[], [], ["n1"]]
    assert [summary(kept, run).changelogs_removed for run in nights] == [[], [], []]

    # The published tables are the same as where every changelog is kept.
    tables = sorted(read_current(kept)["tables"])
    assert tables == sorted(read_current(pruned)["tables"]) == sorted(history.tables)
    for table_id in tables:
        assertDataFrameEqual(
            read_table(spark, pruned.warehouse, "sim", table_id), read_table(spark, kept.warehouse, "sim", table_id)
        )

    # The run's output names the runs whose changelog went (only the warehouse that keeps two has such a line).
    assert capsys.readouterr().out.count("decoded changelog removed from 1 older run(s) (keep_decoded_runs): n1") == 1
    assert reconcile_main(["--config", str(config), "--run-id", "n3"]) == EXIT_OK
    assert reconcile_main(["--config", str(config), "--run-id", "n1"]) == EXIT_BAD_INPUT
    changes = summary(pruned, "n1").decoded["changelog_rows"]
    assert capsys.readouterr().err.strip() == (
        f"cdcreplay: pipeline sim: run n1 decoded {changes} row changes, but its changelog "
        f"{pruned.run_dir('n1') / CHANGELOG} is gone (the project's keep_decoded_runs removes older runs' "
        "changelogs); reconcile a newer run, or replay this run's range again and reconcile that run"
    )
